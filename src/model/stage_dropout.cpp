// stage_dropout.cpp: dropout on the branch's output as a stage (model/stage.h), in place on f, in
// training mode only (model.dropout > 0; the masks drawn per site and step: Model::dropout_site_seed).
// Forward mode and decoding run in evaluation mode, where it is the identity.
#include "model/model.h"
#include "model/stage_entry.h"
#include "ops/dropout.h"

namespace normlab {

struct Dropout;

template <>
struct StageOps<Dropout> {
  static constexpr const char* kName = "dropout";
  static constexpr bool kTransforms = true, kBranch = false;
  static bool present(const ModelConfig& cfg, const Slot&) { return cfg.dropout > 0; }

  template <class S>
  static void forward(Model<S>& m, int i) {
    if (!m.training_) return;
    const SublayerActs<S>& a = m.a_[size_t(i)];
    const size_t n = size_t(m.rows(i)) * m.cfg_.d_model;
    ops::dropout_forward(a.f, a.f, m.cfg_.dropout, m.dropout_site_seed(i + 1), n, m.dropout_first(n));
  }
  template <class S>
  static void backward(Model<S>& m, int i, BackwardFlow<S>& f) {
    if (!m.training_) return;
    S* din = f.input_gradient();
    ops::dropout_backward(din, f.d, m.cfg_.dropout, m.dropout_site_seed(i + 1), f.n, m.dropout_first(f.n));
    f.d = din;
  }
  template <class S>
  static void jvp(const Model<S>&, int, JvpFlow<S>&) {}
  template <class S>
  static void decode(IncrementalDecoder<S>&, int, DecodeFlow<S>&) {}
};

NL_STAGE_ENTRY(Dropout)

}  // namespace normlab
