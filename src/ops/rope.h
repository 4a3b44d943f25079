// rope.h: rotary position embedding (Su et al. 2021, RoFormer) on the query and key columns of a
// fused qkv buffer, in place. Head h's first R of its HS dimensions are rotated in pairs (i, i + R/2),
// i < R/2 (the "rotate half" layout of GPT-NeoX and Hugging Face's Llama), by the angle p theta_i with
// p the token's position and theta_i = base^(-2i/R); its other HS - R dimensions pass unchanged
// (partial rotary). Rotations are orthogonal, so the backward is the rotation by -p theta_i and the
// JVP the forward on each tangent. Legend and conventions: ops/common.h.
#pragma once

namespace normlab::ops {

// The angle tables: cos_p, sin_p (P, R/2) for positions 0..P-1: cos(p theta_i / scale),
// sin(p theta_i / scale) (scale: linear RoPE scaling; 1 for none).
template <class S>
void rope_tables(S* cos_p, S* sin_p, int P, int R, double base, double scale = 1.0);

// x (rows, ld): row n holds a token at position pos0 + n % T (rows = B * T; pos0 > 0 for one decoding
// step); NH heads of HS columns start at column col0 of each row (q: 0; k: C). sign +1 rotates by
// +p theta (forward, JVP), -1 by -p theta (backward: the transpose). cos_p, sin_p: rope_tables.
template <class S>
void rope_rotate(S* x, const S* cos_p, const S* sin_p, int rows, int T, int pos0, int ld, int col0, int NH,
                 int HS, int R, int sign);

}  // namespace normlab::ops
