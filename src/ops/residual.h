// residual.h: the residual add of every method, out = omega * x + beta * lambda * g: omega the
// constant alpha (1 for the usual skip, DeepNet's alpha, 0 with no skip) or Admin's per-channel
// parameter; lambda 1, ReZero's / SkipInit's scalar or LayerScale's per-channel gain; beta a constant
// branch multiplier (CompleteP's L_base / L; 1 otherwise). Legend and conventions: ops/common.h.
#pragma once

#include <cstddef>

namespace normlab::ops {

// Gated residual over N rows of C channels: out = omega * x + beta * lambda * g, omega (C) per channel
// or null (then the constant alpha), lambda null (1), one scalar (lambda_c = 1) or per channel
// (lambda_c = C). out may alias g.
template <class S>
void gated_residual_forward(S* out, const S* x, const S* g, const S* omega, const S* lambda, int lambda_c,
                            S alpha, long N, int C, S beta = S(1));

// dx (N, C) += omega * dout;  dg (N, C) += beta * lambda * dout;  domega (C) += sum_n dout * x (if
// omega); dlambda (lambda_c) += beta * sum dout * g (if lambda); domega / dlambda may be null (not wanted).
template <class S>
void gated_residual_backward(S* dx, S* dg, S* domega, S* dlambda, const S* dout, const S* x, const S* g,
                             const S* omega, const S* lambda, int lambda_c, S alpha, long N, int C, S beta = S(1));

// Forward-mode tangent with the gates fixed: tout = omega * tx + beta * lambda * tg over N rows (N
// counts every tangent's rows).
template <class S>
void gated_residual_jvp(S* tout, const S* tx, const S* tg, const S* omega, const S* lambda, int lambda_c,
                        S alpha, long N, int C, S beta = S(1));

}  // namespace normlab::ops
