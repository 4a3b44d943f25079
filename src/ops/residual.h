// residual.h: the scaled residual add out = alpha * x + g (alpha = 1 for the usual skip, (2L)^(1/4)
// for DeepNorm, 0 with no skip). Legend and conventions: ops/common.h.
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

}  // namespace normlab::ops
