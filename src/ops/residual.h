// residual.h: the scaled residual add out = alpha * x + g (alpha = 1 for the usual skip, (2L)^(1/4)
// for DeepNorm, 0 with no skip), and the gated residual of the methods whose scales are parameters
// (Admin's omega, ReZero's and SkipInit's scalar, LayerScale's per-channel gain). Legend and
// conventions: ops/common.h.
#pragma once

#include <cstddef>

namespace normlab::ops {

// out (n) = alpha * x + g. out may alias g.
template <class S>
void residual_forward(S* out, const S* x, const S* g, S alpha, size_t n);

// dx (n) += alpha * dout; dg (n) += dout.
template <class S>
void residual_backward(S* dx, S* dg, const S* dout, S alpha, size_t n);

// Forward-mode tangent: tout (n) = alpha * tx + tg (any number of tangents: n counts them all).
template <class S>
void residual_jvp(S* tout, const S* tx, const S* tg, S alpha, size_t n);

// Gated residual over N rows of C channels: out = omega * x + lambda * g, omega (C) per channel or
// null (then the constant alpha), lambda null (1), one scalar (lambda_c = 1) or per channel
// (lambda_c = C). out may alias g.
template <class S>
void gated_residual_forward(S* out, const S* x, const S* g, const S* omega, const S* lambda, int lambda_c,
                            S alpha, long N, int C);

// dx (N, C) += omega * dout;  dg (N, C) += lambda * dout;  domega (C) += sum_n dout * x (if omega);
// dlambda (lambda_c) += sum dout * g (if lambda).
template <class S>
void gated_residual_backward(S* dx, S* dg, S* domega, S* dlambda, const S* dout, const S* x, const S* g,
                             const S* omega, const S* lambda, int lambda_c, S alpha, long N, int C);

// Forward-mode tangent with the gates fixed: tout = omega * tx + lambda * tg over N rows (N counts
// every tangent's rows).
template <class S>
void gated_residual_jvp(S* tout, const S* tx, const S* tg, const S* omega, const S* lambda, int lambda_c,
                        S alpha, long N, int C);

}  // namespace normlab::ops
