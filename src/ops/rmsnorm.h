// rmsnorm.h: RMSNorm over the channel dimension, y = x * rstd * weight with
// rstd = 1 / sqrt(mean(x^2) + eps). No bias, no centring. Legend and conventions: ops/common.h.
#pragma once

namespace normlab::ops {

// out (N, C); saves rstd (N); inp (N, C); weight (C).
template <class S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C, double eps);

// rstd (N) alone, the same values rmsnorm_forward saves: for a norm folded into the GEMM that follows
// it, z W^T = rstd (x (W diag(weight))^T), as mHC's read computes it (model/hyper.cpp).
template <class S>
void rmsnorm_rstd(S* rstd, const S* inp, int N, int C, double eps);

// dinp (N, C) +=, dweight (C) +=; dout (N, C).
template <class S>
void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
                      const S* rstd, int N, int C);

// Forward-mode tangent for K tangents: tout (K, N, C) = J(inp) tinp (K, N, C), parameters fixed.
template <class S>
void rmsnorm_jvp(S* tout, const S* tinp, const S* inp, const S* weight, const S* rstd, int K, int N,
                 int C);

}  // namespace normlab::ops
