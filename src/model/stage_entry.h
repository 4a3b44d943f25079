// stage_entry.h: how a stage kind's file turns its StageOps<Kind> into its entry of the table
// (model/stage.h). Included by the stage files only; each ends with NL_STAGE_ENTRY(Kind).
#pragma once

#include "model/stage.h"

namespace normlab {

template <class Kind, class S>
StageFns<S> stage_entry() {
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

#define NL_STAGE_ENTRY(Kind)                                           \
  template normlab::StageFns<float> normlab::stage_entry<Kind, float>(); \
  template normlab::StageFns<double> normlab::stage_entry<Kind, double>();
