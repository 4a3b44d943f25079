// stage_admin_profile.cpp: Admin's profiled initialization as a stage (model/stage.h;
// Model::profile_admin): during the profiling forward, each admin sub-layer's omega is set to the
// running ratio before its shortcut runs, then ratio <- sqrt(Var(omega x) + Var(g)). Outside that pass
// (and in every other mode) it does nothing; it only reads the value.
#include <algorithm>
#include <cmath>

#include "model/methods.h"
#include "model/model.h"
#include "model/stage_entry.h"

namespace normlab {

struct AdminProfile;

template <>
struct StageOps<AdminProfile> {
  static constexpr const char* kName = "admin_profile";
  static constexpr bool kTransforms = false, kBranch = false;
  static bool present(const ModelConfig& cfg, const Slot& slot) {
    return cfg.shortcut_of(slot.layer) == Shortcut::AdminOmega;
  }

  template <class S>
  static void forward(Model<S>& m, int i) {
    const SublayerParams<S>& p = m.p_[size_t(i)];
    if (!m.profiling_ || !p.omega) return;
    const SublayerActs<S>& a = m.a_[size_t(i)];
    const size_t NC = size_t(m.rows(i)) * m.cfg_.d_model;
    std::fill(p.omega, p.omega + m.cfg_.d_model, S(m.profile_ratio_));
    m.profiled_.push_back(m.profile_ratio_);
    auto var = [&](const S* v, double scale) {
      double mean = 0, q = 0;
      for (size_t k = 0; k < NC; k++) mean += double(v[k]);
      mean /= double(NC);
      for (size_t k = 0; k < NC; k++) q += (double(v[k]) - mean) * (double(v[k]) - mean);
      return scale * scale * q / double(NC);
    };
    m.profile_ratio_ = std::sqrt(var(a.x_in, m.profile_ratio_) + var(a.g, 1.0));
  }
  template <class S>
  static void backward(Model<S>&, int, BackwardFlow<S>&) {}
  template <class S>
  static void jvp(const Model<S>&, int, JvpFlow<S>&) {}
  template <class S>
  static void decode(IncrementalDecoder<S>&, int, DecodeFlow<S>&) {}
};

NL_STAGE_ENTRY(AdminProfile)

}  // namespace normlab
