// residual.h: the residual add of every method, out = omega * x + lambda * g: omega the constant
// alpha (1 for the usual skip, DeepNet's alpha, 0 with no skip) or Admin's per-channel parameter;
// lambda 1, ReZero's / SkipInit's scalar or LayerScale's per-channel gain. Legend and conventions:
// ops/common.h.
#pragma once

#include <cstddef>

namespace normlab::ops {

// Gated residual over N rows of C channels: out = omega * x + lambda * g, omega (C) per channel or
// null (then the constant alpha), lambda null (1), one scalar (lambda_c = 1) or per channel
// (lambda_c = C). out may alias g.
template <class S>
void gated_residual_forward(S* out, const S* x, const S* g, const S* omega, const S* lambda, int lambda_c,
                            S alpha, long N, int C);

// dx (N, C) += omega * dout;  dg (N, C) += lambda * dout;  domega (C) += sum_n dout * x (if omega);
// dlambda (lambda_c) += sum dout * g (if lambda); domega / dlambda may be null (not wanted).
template <class S>
void gated_residual_backward(S* dx, S* dg, S* domega, S* dlambda, const S* dout, const S* x, const S* g,
                             const S* omega, const S* lambda, int lambda_c, S alpha, long N, int C);

// Forward-mode tangent with the gates fixed: tout = omega * tx + lambda * tg over N rows (N counts
// every tangent's rows).
template <class S>
void gated_residual_jvp(S* tout, const S* tx, const S* tg, const S* omega, const S* lambda, int lambda_c,
                        S alpha, long N, int C);

}  // namespace normlab::ops
