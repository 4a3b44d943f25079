// dynnorm.h: the point-wise "dynamic" norms that replace LayerNorm without any statistic of the row:
// DyT (Zhu et al. 2025), y = weight * tanh(alpha x) + bias, and Derf (Chen et al. 2025),
// y = weight * erf(alpha x + shift) + bias. alpha and shift are learned scalars of the site; the
// Jacobian is diagonal (weight_c alpha phi'(u_c)), so, unlike LayerNorm's, it has no kernel.
// Legend and conventions: ops/common.h.
#pragma once

namespace normlab::ops {

// phi of y = weight * phi(alpha x + shift) + bias
enum class Squash { Tanh, Erf };

// out (N, C); inp (N, C); weight, bias (C) (bias may be null: none); alpha (1); shift (1) or null (0).
template <class S>
void dynnorm_forward(Squash phi, S* out, const S* inp, const S* weight, const S* bias, const S* alpha,
                     const S* shift, int N, int C);

// dinp (N, C) +=; dweight, dbias (C) +=; dalpha, dshift (1) += (dbias, dshift null where absent).
template <class S>
void dynnorm_backward(Squash phi, S* dinp, S* dweight, S* dbias, S* dalpha, S* dshift, const S* dout,
                      const S* inp, const S* weight, const S* alpha, const S* shift, int N, int C);

// Forward-mode tangent for K tangents: tout (K, N, C) = J(inp) tinp (K, N, C), parameters fixed.
template <class S>
void dynnorm_jvp(Squash phi, S* tout, const S* tinp, const S* inp, const S* weight, const S* alpha,
                 const S* shift, int K, int N, int C);

}  // namespace normlab::ops
