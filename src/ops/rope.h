// rope.h: rotary position embedding (Su et al. 2021, RoFormer) on the query and key columns of a
// fused qkv buffer, in place. Head h's first R of its HS dimensions are rotated in pairs (i, i + R/2),
// i < R/2 (the "rotate half" layout of GPT-NeoX and Hugging Face's Llama), by the angle p theta_i with
// p the token's position and theta_i = base^(-2i/R); its other HS - R dimensions pass unchanged
// (partial rotary). Rotations are orthogonal, so the backward is the rotation by -p theta_i and the
// JVP the forward on each tangent. Legend and conventions: ops/common.h.
#pragma once

#include <vector>

namespace normlab::ops {

// The angle tables: cos_p, sin_p (P, R/2) for positions 0..P-1: m cos(p theta_i / (scale f_i)),
// m sin(p theta_i / (scale f_i)): scale is linear RoPE scaling (1 for none), f_i a divisor per
// frequency (factors: R/2 entries, or nullptr for all 1; as llama.cpp's rope_freqs), m a factor on
// both (LongRoPE's and YaRN's attention factor; 1 for none). With m != 1 the "rotation" below is m
// times a rotation: its transpose is still the rotation by -p theta times m, so backward is unchanged.
template <class S>
void rope_tables(S* cos_p, S* sin_p, int P, int R, double base, double scale = 1.0, const double* factors = nullptr,
                 double m = 1.0);

// Llama 3.1's "llama3" RoPE scaling as divisors f_i (R/2 of them) of theta_i = base^(-2i/R): a
// frequency whose wavelength 2 pi / theta_i is shorter than context / high_freq_factor keeps its angle
// (f = 1), one longer than context / low_freq_factor is slowed by `factor`, and one between is
// interpolated: 1 / f = (1 - s) / factor + s with s = (context / wavelength - low) / (high - low).
// (transformers' _compute_llama3_parameters; context is original_max_position_embeddings.)
std::vector<double> llama3_rope_factors(int R, double base, double factor, double low_freq_factor,
                                        double high_freq_factor, double context);

// LongRoPE's factor on cos and sin where a config does not state it: sqrt(1 + ln(s) / ln(original)) for
// a context s times the original length, 1 for s <= 1 (transformers' _compute_longrope_parameters,
// llama.cpp's converter).
double longrope_mscale(double s, double original);

// YaRN's scaling (Peng et al. 2023) as divisors f_i (R/2 of them): frequency i is interpolated by
// `factor` below the correction range, kept above it and blended linearly inside it:
// 1 / f_i = r_i / factor + 1 - r_i, r_i = clamp((i - low) / (high - low), 0, 1), where low and high are
// the dimensions at which the context (original_max_position_embeddings) holds beta_fast and beta_slow
// rotations, d(b) = R ln(context / (2 pi b)) / (2 ln base), rounded outward when `truncate`, within
// [0, R - 1]. (transformers' _compute_yarn_parameters; its attention factor is model.rope_mscale.)
std::vector<double> yarn_rope_factors(int R, double base, double factor, double beta_fast, double beta_slow,
                                      double context, bool truncate = true);

// x (rows, ld): row n holds a token at position pos0 + n % T (rows = B * T; pos0 > 0 for one decoding
// step); NH heads of HS columns start at column col0 of each row (q: 0; k: C). sign +1 rotates by
// +p theta (forward, JVP), -1 by -p theta (backward: the transpose). cos_p, sin_p: rope_tables.
template <class S>
void rope_rotate(S* x, const S* cos_p, const S* sin_p, int rows, int T, int pos0, int ld, int col0, int NH,
                 int HS, int R, int sign);

}  // namespace normlab::ops
