// sphere.h: nGPT's operations on the unit sphere (Loshchilov et al. 2025, "nGPT: Normalized
// Transformer with Representation Learning on the Hypersphere"; the reference code NVIDIA/ngpt):
// the residual update that moves the stream toward the branch's output along the sphere, the
// projection of each query and key head onto it with a learned per-channel scale, and a learned
// per-column scale of a matrix product's output. Every learned scale is stored as nGPT stores it,
// p, and acts as p * factor (its "scaled parametrization": the factor sets how fast AdamW moves it).
// Legend and conventions: ops/common.h.
#pragma once

namespace normlab::ops {

// The residual update of N rows of C channels: A = x / sqrt(|x|^2 + eps), out = A + |a| (g - A),
// |a| = |a_c factor| per channel (nGPT's eigen learning rate). Saves r (N) = 1 / sqrt(|x|^2 + eps).
// (out is then projected by the sub-layer's ln_out.) out must not alias x or g.
template <class S>
void sphere_residual_forward(S* out, S* r, const S* x, const S* g, const S* a, double factor, double eps, long N, int C);

// dx (N, C) += J_A^T ((1 - |a|) dout);  dg (N, C) += |a| dout;  da (C) += factor sign(a factor) sum_n
// dout (g - A) (sums in double over rows, in row order).
template <class S>
void sphere_residual_backward(S* dx, S* dg, S* da, const S* dout, const S* x, const S* g, const S* a, double factor,
                              const S* r, long N, int C);

// tout = (1 - |a|) tA + |a| tg with tA = r tx - r^3 x (x . tx); the KN tangent rows read x's row
// kn % N (x, r: N rows).
template <class S>
void sphere_residual_jvp(S* tout, const S* tx, const S* tg, const S* x, const S* r, const S* a, double factor, long KN,
                         long N, int C);

// The heads of rows of a buffer (stride ld), in place: the H heads of HS columns starting at column 0
// each become y = s (x / sqrt(|x|^2 + eps)), s = s_j factor for the head's column j within the first
// `period` columns (period = NH HS: nGPT's s_qk is shared by the queries and the keys, column by
// column). Saves raw (rows, H HS) = x and r (rows, H).
template <class S>
void sphere_heads_forward(S* buf, int ld, long rows, int H, int HS, int period, const S* s, double factor, double eps,
                          S* raw, S* r);

// dbuf (rows, ld) in place: d(y) becomes d(x); ds (period) += factor sum dy z (z = x / |x|).
template <class S>
void sphere_heads_backward(S* dbuf, S* ds, int ld, long rows, int H, int HS, int period, const S* s, double factor,
                           const S* raw, const S* r);

// tbuf (KR rows, stride ld) in place: tx becomes ty = s (r tx - r^3 x (x . tx)); tangent row kr reads
// saved row row0 + kr % R (R rows per tangent).
template <class S>
void sphere_heads_jvp(S* tbuf, int ld, long KR, long R, long row0, int H, int HS, int period, const S* s,
                      double factor, const S* raw, const S* r);

// out (rows, W) = in * (s_j factor) column by column (in may alias out).
template <class S>
void scale_columns(S* out, const S* in, long rows, int W, const S* s, double factor);

// ds (W) += factor sum_n dout_nj in_nj (in: the unscaled values), in double in row order.
template <class S>
void scale_columns_param_grad(S* ds, const S* dout, const S* in, long rows, int W, double factor);

}  // namespace normlab::ops
