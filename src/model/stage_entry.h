// stage_entry.h: how a stage kind's file turns its StageOps<Kind> into its entry of the table
// (model/stage.h). Included by the stage files only; each ends, inside namespace normlab, with NL_STAGE_ENTRY(Kind), which defines
// the stage_entry overloads that model/stages.cpp declares with NL_STAGE_KIND.
#pragma once

#include "model/branch.h"
#include "model/stage.h"

namespace normlab {

template <class S>
S* BackwardFlow<S>::input_gradient() const {
  if (reads_stream) return dx;
  S* b = fresh();
  branch::zero(b, n);
  return b;
}

template <class Kind, class S>
StageFns<S> make_stage_entry() {
  using Ops = StageOps<Kind>;
  return {Ops::kName,
          Ops::kTransforms,
          Ops::kBranch,
          &Ops::present,
          &Ops::template forward<S>,
          &Ops::template backward<S>,
          &Ops::template jvp<S>,
          &Ops::template decode<S>};
}

}  // namespace normlab

// (plain functions, not a template's instantiations: a unity build may put stages.cpp, which only
// declares them, in one translation unit with the stage files)
#define NL_STAGE_ENTRY(...)                                                                                      \
  StageFns<float> stage_entry(__VA_ARGS__*, float*) { return make_stage_entry<__VA_ARGS__, float>(); } \
  StageFns<double> stage_entry(__VA_ARGS__*, double*) { return make_stage_entry<__VA_ARGS__, double>(); }
