// attention.h: multi-head scaled dot-product self-attention on a fused qkv buffer, with a causal or
// bidirectional mask and a stable softmax; plus its naive reference.
// Legend and conventions: ops/common.h. qkv columns are [q | k | v]; head h owns columns
// h*HS .. (h+1)*HS of each third. Scores are scaled by 1/sqrt(HS); masked entries get probability 0.
#pragma once

#include <cstdint>

namespace normlab::ops {

// out (B, T, C); saves att (B, NH, T, T) = softmax probabilities; qkv (B, T, 3C); key_mask (B, T)
// or null: keys with key_mask 0 (padding) get probability 0 in every row, as Hugging Face's
// attention_mask. Every row must keep at least one key (checked at the API boundary).
template <class S>
void attention_forward(S* out, S* att, const S* qkv, int B, int T, int C, int NH, bool causal,
                       const uint8_t* key_mask = nullptr);

// dqkv (B, T, 3C) +=; datt (B, NH, T, T) is scratch (overwritten); dout (B, T, C).
template <class S>
void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B, int T,
                        int C, int NH, bool causal);

template <class S>
void attention_forward_naive(S* out, S* att, const S* qkv, int B, int T, int C, int NH,
                             bool causal, const uint8_t* key_mask = nullptr);
template <class S>
void attention_backward_naive(S* dqkv, const S* dout, const S* qkv, const S* att, int B, int T,
                              int C, int NH, bool causal);

// Forward-mode tangent for K tangents: tout (K, B, T, C) from tqkv (K, B, T, 3C), with the saved
// probabilities att of the forward call (a padding mask needs nothing here: masked P = 0); tatt (B, NH, T, T) is scratch.
//   tS = (tq k^T + q tk^T) / sqrt(HS);  tP = P * (tS - rowsum(P * tS));  ty = tP v + P tv
template <class S>
void attention_jvp(S* tout, S* tatt, const S* tqkv, const S* qkv, const S* att, int K, int B, int T,
                   int C, int NH);

}  // namespace normlab::ops
