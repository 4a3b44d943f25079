// layernorm.h: LayerNorm over the channel dimension, y = (x - mean) * rstd * weight + bias with
// rstd = 1 / sqrt(var + eps) (biased variance). Legend and conventions: ops/common.h.
#pragma once

namespace normlab::ops {

// out (N, C); saves mean (N), rstd (N); inp (N, C); weight, bias (C). eps may be 0.
template <class S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                       int N, int C, double eps);

// dinp (N, C) +=, dweight (C) +=, dbias (C) += (dbias may be null); dout (N, C).
template <class S>
void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                        const S* mean, const S* rstd, int N, int C);

// Forward-mode tangent for K tangents at once: tout (K, N, C) = J(inp) tinp (K, N, C), with the
// saved mean and rstd of the forward call (parameters held fixed).
template <class S>
void layernorm_jvp(S* tout, const S* tinp, const S* inp, const S* weight, const S* mean,
                   const S* rstd, int K, int N, int C);

}  // namespace normlab::ops
