// stage_shortcut.cpp: the shortcut as a stage (model/stage.h): r = omega * x + beta * lambda * g, the
// stream x entering the sub-layer and the value g, with the method's shortcut scale omega (a constant,
// DeepNet's alpha, or Admin's learned omega) and branch gain lambda (model/methods.cpp), and the
// parametrization's constant branch multiplier beta (CompleteP's L_base / L: config.h
// branch_multiplier); nGPT's update on the sphere instead, r = A + |a| (g - A), A = x / |x| (ops/sphere.h).
#include <algorithm>

#include "model/decode.h"
#include "model/methods.h"
#include "model/model.h"
#include "model/stage_entry.h"
#include "ops/residual.h"
#include "ops/sphere.h"

namespace normlab {

struct ShortcutStage;

template <>
struct StageOps<ShortcutStage> {
  static constexpr const char* kName = "shortcut";
  static constexpr bool kTransforms = true, kBranch = false;
  // (hyper-connections write the streams in its place: model/hyper.h)
  static bool present(const ModelConfig& cfg, const Slot&) { return !cfg.hyper_connected(); }

  template <class S>
  static S alpha(const ModelConfig& cfg, int i) {
    return S(cfg.residual_alpha(cfg.slot(i).layer));
  }
  template <class S>
  static S beta(const ModelConfig& cfg) {
    return S(cfg.branch_multiplier());
  }

  template <class S>
  static void forward(Model<S>& m, int i) {
    const SublayerActs<S>& a = m.a_[size_t(i)];
    const SublayerParams<S>& p = m.p_[size_t(i)];
    const int N = m.rows(i), C = m.cfg_.d_model;
    if (p.eigen_lr)
      ops::sphere_residual_forward(a.r, a.sc_rstd, a.x_in, a.g, p.eigen_lr, sphere_scale("eigen_lr", C).factor,
                                   m.cfg_.eps, long(N), C);
    else if (m.ablated_skips())  // (Model::set_ablation: no skip path, omega and alpha alike)
      ops::gated_residual_forward(a.r, a.x_in, a.g, static_cast<const S*>(nullptr), p.gain, p.gain_c, S(0), long(N),
                                  C, beta<S>(m.cfg_));
    else
      ops::gated_residual_forward(a.r, a.x_in, a.g, p.omega, p.gain, p.gain_c, alpha<S>(m.cfg_, i), long(N), C,
                                  beta<S>(m.cfg_));
  }

  // dx = omega * dr (assigned: the stage that reads the stream adds below); dg = beta * lambda * dr (dr
  // itself when both are 1); the gates' gradients
  template <class S>
  static void backward(Model<S>& m, int i, BackwardFlow<S>& f) {
    const SublayerActs<S>& a = m.a_[size_t(i)];
    const SublayerParams<S>& p = m.p_[size_t(i)];
    const SublayerParams<S>& dp = m.dp_[size_t(i)];
    const int N = m.rows(i), C = m.cfg_.d_model;
    if (p.eigen_lr || p.omega || p.gain || beta<S>(m.cfg_) != S(1)) {
      S* dg = f.fresh();
      branch::zero(f.dx, f.n);
      branch::zero(dg, f.n);
      if (p.eigen_lr)  // nGPT's update
        ops::sphere_residual_backward(f.dx, dg, dp.eigen_lr, f.d, a.x_in, a.g, p.eigen_lr,
                                      sphere_scale("eigen_lr", C).factor, a.sc_rstd, long(N), C);
      else
        ops::gated_residual_backward(f.dx, dg, dp.omega, dp.gain, f.d, a.x_in, a.g, p.omega, p.gain, p.gain_c,
                                     alpha<S>(m.cfg_, i), long(N), C, beta<S>(m.cfg_));
      f.d = dg;
      return;
    }
    const S c = alpha<S>(m.cfg_, i);
    const S* dr = f.d;
    S* dx = f.dx;
#pragma omp parallel for schedule(static) if((long)f.n > ops::kParallelMinWork)
    for (long k = 0; k < (long)f.n; k++) dx[k] = c * dr[k];
  }

  template <class S>
  static void jvp(const Model<S>& m, int i, JvpFlow<S>& f) {
    const SublayerActs<S>& a = m.a_[size_t(i)];
    const SublayerParams<S>& p = m.p_[size_t(i)];
    const int C = m.cfg_.d_model, R = f.rows.rows;
    const size_t n = f.rows.n, nC = f.nC(C);
    S* out = f.fresh();
    if (p.eigen_lr)
      ops::sphere_residual_jvp(out, f.tx, f.v, a.x_in + nC, a.sc_rstd + n, p.eigen_lr,
                               sphere_scale("eigen_lr", C).factor, long(f.K) * R, long(R), C);
    else
      ops::gated_residual_jvp(out, f.tx, f.v, p.omega, p.gain, p.gain_c, alpha<S>(m.cfg_, i), long(f.K) * R, C,
                              beta<S>(m.cfg_));
    f.v = out;
  }

  template <class S>
  static void decode(IncrementalDecoder<S>& d, int i, DecodeFlow<S>& f) {
    const ModelConfig& cfg = d.m_.config();
    const SublayerParams<S>& p = d.m_.sublayer_params_of(i);
    const int B = d.B_, C = cfg.d_model;
    std::vector<S>* out = f.fresh();
    if (p.eigen_lr) {  // nGPT's update (its 1 / |x| is read by nothing after)
      d.rstd_.resize(std::max(d.rstd_.size(), size_t(B)));
      ops::sphere_residual_forward(out->data(), d.rstd_.data(), f.x->data(), f.v, p.eigen_lr,
                                   sphere_scale("eigen_lr", C).factor, cfg.eps, long(B), C);
    } else {
      ops::gated_residual_forward(out->data(), f.x->data(), f.v, p.omega, p.gain, p.gain_c, alpha<S>(cfg, i), long(B),
                                  C, beta<S>(cfg));
    }
    f.v = out->data();
  }
};

NL_STAGE_ENTRY(ShortcutStage)

}  // namespace normlab
