// l2norm.h: the projection onto the unit sphere over the channel dimension, y = x * r with
// r = 1 / sqrt(sum(x^2) + eps): nGPT's "justnorm" (eps = 0 there). No gain, no bias. Legend and
// conventions: ops/common.h.
#pragma once

namespace normlab::ops {

// out (N, C); saves r (N); inp (N, C).
template <class S>
void l2norm_forward(S* out, S* r, const S* inp, int N, int C, double eps);

// dinp (N, C) += J^T dout, J = r (I - y y^T) at eps = 0 (in general r I - r^3 x x^T); dout (N, C).
template <class S>
void l2norm_backward(S* dinp, const S* dout, const S* inp, const S* r, int N, int C);

// Forward-mode tangent for K tangents: tout (K, N, C) = J(inp) tinp (K, N, C).
template <class S>
void l2norm_jvp(S* tout, const S* tinp, const S* inp, const S* r, int K, int N, int C);

}  // namespace normlab::ops
