// stages.cpp: the stage kinds of a sub-layer, in the order it runs them (model/stage.h). A new stage
// kind is its file, model/stage_<kind>.cpp (its StageOps<Kind> and NL_STAGE_ENTRY), and here its tag,
// its NL_STAGE_KIND and its place in the list. No walk names a kind.
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
NL_STAGE_KIND(NormAt<InSite>)
NL_STAGE_KIND(Branch)
NL_STAGE_KIND(Dropout)
NL_STAGE_KIND(NormAt<BranchSite>)
NL_STAGE_KIND(SecondStream)
NL_STAGE_KIND(AdminProfile)
NL_STAGE_KIND(ShortcutStage)
NL_STAGE_KIND(NormAt<OutSite>)

template <class S>
const std::vector<StageFns<S>>& stage_kinds() {
  auto entry = [](auto* kind) { return stage_entry(kind, static_cast<S*>(nullptr)); };
  static const std::vector<StageFns<S>> kinds = {
      entry(static_cast<NormAt<InSite>*>(nullptr)),      // h = ln_in(x)                 (stage_norm.cpp)
      entry(static_cast<Branch*>(nullptr)),              // f = F(h)                     (stage_branch.cpp)
      entry(static_cast<Dropout*>(nullptr)),             // f = dropout(f), training     (stage_dropout.cpp)
      entry(static_cast<NormAt<BranchSite>*>(nullptr)),  // g = ln_branch(f)             (stage_norm.cpp)
      entry(static_cast<SecondStream*>(nullptr)),        // x_d = x_d + g                (stage_second_stream.cpp)
      entry(static_cast<AdminProfile*>(nullptr)),        // Admin's profiling reads x, g (stage_admin_profile.cpp)
      entry(static_cast<ShortcutStage*>(nullptr)),       // r = omega x + lambda g       (stage_shortcut.cpp)
      entry(static_cast<NormAt<OutSite>*>(nullptr)),     // x' = ln_out(r)               (stage_norm.cpp)
  };
  return kinds;
}

template const std::vector<StageFns<float>>& stage_kinds<float>();
template const std::vector<StageFns<double>>& stage_kinds<double>();

}  // namespace normlab
