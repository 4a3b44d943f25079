// stages.cpp: the stage kinds of a sub-layer, in the order it runs them (model/stage.h). A new stage
// kind is its file, model/stage_<kind>.cpp (its StageOps<Kind> and NL_STAGE_ENTRY), and one line here:
// its tag and its place in the list. No walk names a kind.
#include "model/stage.h"

namespace normlab {

struct InSite;
struct BranchSite;
struct OutSite;
template <class Site>
struct NormAt;
struct Branch;
struct Dropout;
struct SecondStream;
struct AdminProfile;
struct ShortcutStage;

template <class S>
const std::vector<StageFns<S>>& stage_kinds() {
  static const std::vector<StageFns<S>> kinds = {
      stage_entry<NormAt<InSite>, S>(),      // h = ln_in(x)                 (stage_norm.cpp)
      stage_entry<Branch, S>(),              // f = F(h)                     (stage_branch.cpp)
      stage_entry<Dropout, S>(),             // f = dropout(f), training     (stage_dropout.cpp)
      stage_entry<NormAt<BranchSite>, S>(),  // g = ln_branch(f)             (stage_norm.cpp)
      stage_entry<SecondStream, S>(),        // x_d = x_d + g                (stage_second_stream.cpp)
      stage_entry<AdminProfile, S>(),        // Admin's profiling reads x, g (stage_admin_profile.cpp)
      stage_entry<ShortcutStage, S>(),       // r = omega x + lambda g       (stage_shortcut.cpp)
      stage_entry<NormAt<OutSite>, S>(),     // x' = ln_out(r)               (stage_norm.cpp)
  };
  return kinds;
}

template const std::vector<StageFns<float>>& stage_kinds<float>();
template const std::vector<StageFns<double>>& stage_kinds<double>();

}  // namespace normlab
