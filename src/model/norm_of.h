// norm_of.h: the norm kinds (model.norm), each one case of the closed switches below and in
// norm_of.cpp: the parameters a site of the kind holds, its forward, backward and JVP (the model, its
// forward-mode products, the block Jacobian and the incremental decoder call only these), and, for
// the instruments, its closed-form Jacobian and the structural kernel of that Jacobian. A new kind is
// one case in each switch of this file and norm_of.cpp; the build treats a missing case as an error
// (-Werror=switch), so no kind silently runs as another. The exact forms are docs/MODEL.md ("Norms").
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "ops/common.h"
#include "ops/dynnorm.h"
#include "ops/l2norm.h"
#include "ops/layernorm.h"
#include "ops/rmsnorm.h"
#include "util/error.h"

namespace normlab {

// Every kind, for the tests that sweep them all (kept beside the switches it mirrors).
inline constexpr NormKind kNormKinds[] = {NormKind::LayerNorm, NormKind::RMSNorm, NormKind::DyT, NormKind::Derf,
                                          NormKind::L2, NormKind::SSNorm};

// One parameter of a norm site: its name after the site's ("h.0.attn.ln_in" + ".weight"), (C) or (1).
struct NormParamSpec {
  const char* suffix;
  bool per_channel;
  ParamRole role;
};
// In the order they are stored. gain: the site holds a gain gamma (false: a weightless site,
// model.qk_norm_affine); bias: it holds a bias beta where the kind has one (model.norm_bias).
std::vector<NormParamSpec> norm_param_specs(NormKind kind, bool gain = true, bool bias = true);
// The specs of the site named `site` ("h.0.attn.ln_in", "h.0.attn.q_norm") in a model of this config.
std::vector<NormParamSpec> norm_param_specs(const ModelConfig& cfg, const std::string& site);
// The initial value of NormScalar parameter `name` ("h.0.attn.ln_in.alpha") of this kind.
double norm_scalar_init(NormKind kind, const ModelConfig& cfg, const std::string& name);

// The gain of a weightless site (NormParams::weight null, model/qk_norm.h): ones, at least C of
// them, owned by the calling thread.
template <class S>
const S* unit_gain(int C) {
  thread_local std::vector<S> ones;
  if (ones.size() < size_t(C)) ones.assign(size_t(C), S(1));
  return ones.data();
}
// p with a null gain replaced by unit_gain (the kinds' kernels read a gain; the backward's dp.weight
// stays null, so no gradient is kept for it).
template <class S>
NormParams<S> with_gain(NormParams<S> p, int C) {
  if (!p.weight) p.weight = const_cast<S*>(unit_gain<S>(C));
  return p;
}

// SSNorm's gain as the per-channel gain RMSNorm's kernels read: its scalar p.alpha repeated C times (a
// weightless SSNorm site, model.qk_norm_affine = false: ones). SSNorm is RMSNorm with this gain.
template <class S>
std::vector<S> ssnorm_gain(const NormParams<S>& p, int C) {
  return std::vector<S>(size_t(C), p.alpha ? *p.alpha : S(1));
}
// The per-channel gain a site of this kind applies, C entries: its gain, SSNorm's scalar repeated,
// or ones (a weightless site; L2; the point-wise kinds' gamma is their weight too).
template <class S>
std::vector<S> effective_gain(NormKind kind, const NormParams<S>& p, int C) {
  if (kind == NormKind::SSNorm) return ssnorm_gain(p, C);
  return p.weight ? std::vector<S>(p.weight, p.weight + C) : std::vector<S>(size_t(C), S(1));
}

// What a kind divides the row by: its standard deviation (LayerNorm: it also subtracts the mean), its
// root mean square (RMSNorm), its Euclidean length (L2), or nothing (the point-wise kinds DyT and
// Derf, which have no statistic).
enum class NormStatistic { Variance, MeanSquare, SumSquare, None };
NormStatistic norm_statistic(NormKind kind);

// v (n) *= scale, in place: a site's constant output scale (NormParams::scale)
template <class S>
void norm_scale_in_place(S* v, size_t n, double scale) {
  if (scale == 1.0) return;
  const S c = S(scale);
#pragma omp parallel for schedule(static) if((long)n > ops::kParallelMinWork)
  for (long i = 0; i < (long)n; i++) v[i] *= c;
}

// out, mean, rstd: (rows, C), (rows), (rows) (the statistics are saved by the kinds that have them
// and untouched by the others); inp (rows, C). Then out *= p.scale.
template <class S>
void norm_forward(NormKind kind, S* out, S* mean, S* rstd, const S* inp, const NormParams<S>& site, int rows,
                  int C, double eps) {
  const NormParams<S> p = with_gain(site, C);
  switch (kind) {
    case NormKind::LayerNorm: ops::layernorm_forward(out, mean, rstd, inp, p.weight, p.bias, rows, C, eps); break;
    case NormKind::RMSNorm: ops::rmsnorm_forward(out, rstd, inp, p.weight, rows, C, eps); break;
    case NormKind::DyT:
      ops::dynnorm_forward(ops::Squash::Tanh, out, inp, p.weight, p.bias, p.alpha, p.shift, rows, C);
      break;
    case NormKind::Derf:
      ops::dynnorm_forward(ops::Squash::Erf, out, inp, p.weight, p.bias, p.alpha, p.shift, rows, C);
      break;
    case NormKind::L2: ops::l2norm_forward(out, rstd, inp, rows, C, eps); break;  // (no parameters)
    case NormKind::SSNorm: ops::rmsnorm_forward(out, rstd, inp, ssnorm_gain(p, C).data(), rows, C, eps); break;
  }
  norm_scale_in_place(out, size_t(rows) * C, p.scale);
}

// dinp (rows, C) +=; dp's parameters +=. A site with p.scale != 1 needs `scratch` (rows, C), where
// the scaled dout goes (the kernels then see d(loss)/d(unscaled output)).
template <class S>
void norm_backward(NormKind kind, S* dinp, const NormParams<S>& dp, const S* dout, const S* inp,
                   const NormParams<S>& site, const S* mean, const S* rstd, int rows, int C, S* scratch = nullptr) {
  const NormParams<S> p = with_gain(site, C);
  if (p.scale != 1.0) {
    if (!scratch) throw Error("norm_backward: a site with a constant output scale needs scratch (a bug)");
    const size_t n = size_t(rows) * C;
    const S c = S(p.scale);
#pragma omp parallel for schedule(static) if((long)n > ops::kParallelMinWork)
    for (long i = 0; i < (long)n; i++) scratch[i] = c * dout[i];
    dout = scratch;
  }
  switch (kind) {
    case NormKind::LayerNorm:
      return ops::layernorm_backward(dinp, dp.weight, dp.bias, dout, inp, p.weight, mean, rstd, rows, C);
    case NormKind::RMSNorm: return ops::rmsnorm_backward(dinp, dp.weight, dout, inp, p.weight, rstd, rows, C);
    case NormKind::DyT:
      return ops::dynnorm_backward(ops::Squash::Tanh, dinp, dp.weight, dp.bias, dp.alpha, dp.shift, dout, inp,
                                   p.weight, p.alpha, p.shift, rows, C);
    case NormKind::Derf:
      return ops::dynnorm_backward(ops::Squash::Erf, dinp, dp.weight, dp.bias, dp.alpha, dp.shift, dout, inp,
                                   p.weight, p.alpha, p.shift, rows, C);
    case NormKind::L2: return ops::l2norm_backward(dinp, dout, inp, rstd, rows, C);
    case NormKind::SSNorm: {  // RMSNorm with the scalar repeated: d alpha = the sum of those gains' gradients
      std::vector<S> dgain(dp.alpha ? size_t(C) : 0, S(0));
      ops::rmsnorm_backward(dinp, dp.alpha ? dgain.data() : nullptr, dout, inp, ssnorm_gain(p, C).data(), rstd, rows, C);
      if (dp.alpha) {
        double sum = 0;
        for (S g : dgain) sum += g;
        *dp.alpha += S(sum);
      }
      return;
    }
  }
}

// tout (K, rows, C) = J tin, J the Jacobian of the norm at `inp` (parameters fixed; p.scale included).
template <class S>
void norm_jvp(NormKind kind, S* tout, const S* tin, const S* inp, const NormParams<S>& site, const S* mean,
              const S* rstd, int K, int rows, int C) {
  const NormParams<S> p = with_gain(site, C);
  switch (kind) {
    case NormKind::LayerNorm: ops::layernorm_jvp(tout, tin, inp, p.weight, mean, rstd, K, rows, C); break;
    case NormKind::RMSNorm: ops::rmsnorm_jvp(tout, tin, inp, p.weight, rstd, K, rows, C); break;
    case NormKind::DyT:
      ops::dynnorm_jvp(ops::Squash::Tanh, tout, tin, inp, p.weight, p.alpha, p.shift, K, rows, C);
      break;
    case NormKind::Derf:
      ops::dynnorm_jvp(ops::Squash::Erf, tout, tin, inp, p.weight, p.alpha, p.shift, K, rows, C);
      break;
    case NormKind::L2: ops::l2norm_jvp(tout, tin, inp, rstd, K, rows, C); break;
    case NormKind::SSNorm: ops::rmsnorm_jvp(tout, tin, inp, ssnorm_gain(p, C).data(), rstd, K, rows, C); break;
  }
  norm_scale_in_place(tout, size_t(K) * rows * C, p.scale);
}

// The closed-form Jacobian (row-major d x d, J[i][j] = d y_i / d z_j) of one site at input row z with
// parameters p (the gain p.weight always; alpha and shift for the point-wise kinds; p.scale).
std::vector<double> norm_jacobian_closed_form(NormKind kind, const double* z, const NormParams<double>& p, int d,
                                              double eps);

// The point-wise kinds' (DyT, Derf) Jacobian is diagonal: its diagonal (d), as the closed form's.
std::vector<double> norm_jacobian_diagonal(NormKind kind, const double* z, const NormParams<double>& p, int d);

// A basis (each a vector of d) of the null space that the kind's Jacobian has at unit gain whatever
// its input: LayerNorm the constant vector (and the centred input at eps = 0), RMSNorm and L2 the
// input at eps = 0, the point-wise kinds nothing (their Jacobian is diagonal with no zero).
std::vector<std::vector<double>> norm_structural_kernel(NormKind kind, const double* z, int d, double eps);
// Its dimension at eps = 0 for a generic input: 2, 1 (RMSNorm, L2), 0 (a block ending in the norm has
// rank <= d - it).
int norm_kernel_dimension(NormKind kind);

}  // namespace normlab
