// attention.h: multi-head scaled dot-product self-attention on a fused qkv buffer, with a causal or
// bidirectional mask and a stable softmax; cross-attention (queries from one sequence, keys and
// values from another: the decoder reading the encoder); plus the naive reference.
// Legend and conventions: ops/common.h (KVH: key-value heads). qkv columns are [q (C) | k (KVH HS) |
// v (KVH HS)]; query head h owns columns h*HS .. (h+1)*HS of q and reads key-value head h / (NH / KVH)
// (grouped-query attention; KVH = NH: multi-head, qkv is (.., 3C)). Scores are scaled by 1/sqrt(HS);
// masked entries get probability 0.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/gemm_backend.h"

namespace normlab::ops {

// How a query-key dot product becomes the softmax's input: S = scale q.k (scale 0: 1 / sqrt(HS),
// the usual; Gemma 2: query_pre_attn_scalar^(-1/2)), then, with softcap > 0, S = softcap tanh(S /
// softcap) (Gemma 2's attention logit soft-capping), then the mask. The self-attention calls take
// one; cross-attention keeps the default.
struct ScoreMap {
  double scale = 0.0;
  double softcap = 0.0;
  double scale_for(int HS) const { return scale > 0 ? scale : 1.0 / std::sqrt(double(HS)); }
  template <class S>
  S cap(S s) const { return softcap > 0 ? S(softcap * std::tanh(double(s) / softcap)) : s; }
  // d cap(s) / d s at a scaled score s: 1 - tanh^2(s / softcap)
  template <class S>
  S slope(S s) const {
    if (softcap <= 0) return S(1);
    const double t = std::tanh(double(s) / softcap);
    return S(1.0 - t * t);
  }
};

// out (B, T, C); saves att (B, NH, T, T) = softmax probabilities; qkv (B, T, C + 2 KVH HS); key_mask (B, T)
// or null: keys with key_mask 0 (padding) get probability 0 in every row, as Hugging Face's
// attention_mask. Every row must keep at least one key (checked at the API boundary).
// prec: the precision of the q k^T and P v GEMMs (ops/gemm_backend.h); the softmax stays float.
// sink (NH) or null: a learned sink logit per query head (gpt-oss's attention sinks): each row's softmax
// runs over its scores and sink[h] (unscaled, uncapped, never masked), and the sink's probability is
// dropped: P_ij = exp(S_ij) / (sum_k exp(S_ik) + exp(sink_h)), so a row of att sums to less than 1.
// logit_max (NH) or null: logit_max[h] = max(logit_max[h], the largest score S_ij of head h over the batch,
// masked keys and the sink left out) (QK-Clip's S_max; train/qk_clip.h).
template <class S>
void attention_forward(S* out, S* att, const S* qkv, int B, int T, int C, int NH, int KVH, bool causal,
                       const uint8_t* key_mask = nullptr, Precision prec = Precision::Fp32, ScoreMap sm = {},
                       const S* sink = nullptr, double* logit_max = nullptr);

// dqkv (B, T, C + 2 KVH HS) +=; datt (B, NH, T, T) is scratch (overwritten); dout (B, T, C).
// dsink (NH) += the sink logits' gradient (null: no sink, or its gradient not wanted): with the sink's
// probability p_i = 1 - sum_j P_ij and value 0, d sink_h = -sum_i p_i sum_j P_ij dP_ij; dS keeps its form.
template <class S>
void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B, int T,
                        int C, int NH, int KVH, bool causal, Precision prec = Precision::Fp32, ScoreMap sm = {},
                        S* dsink = nullptr);

template <class S>
void attention_forward_naive(S* out, S* att, const S* qkv, int B, int T, int C, int NH, int KVH,
                             bool causal, const uint8_t* key_mask = nullptr, const S* sink = nullptr);
template <class S>
void attention_backward_naive(S* dqkv, const S* dout, const S* qkv, const S* att, int B, int T,
                              int C, int NH, int KVH, bool causal, S* dsink = nullptr);

// Forward-mode tangent for K tangents: tout (K, B, T, C) from tqkv (K, B, T, C + 2 KVH HS), with the saved
// probabilities att of the forward call (a padding mask needs nothing here: masked P = 0; a sink logit
// neither: it is a parameter, and tP = P (tS - rowsum(P tS)) holds for the rows it shrinks); tatt (B, NH, T, T) is scratch.
//   tS = (tq k^T + q tk^T) / sqrt(HS) (times the cap's slope);  tP = P * (tS - rowsum(P * tS));  ty = tP v + P tv
template <class S>
void attention_jvp(S* tout, S* tatt, const S* tqkv, const S* qkv, const S* att, int K, int B, int T,
                   int C, int NH, int KVH, ScoreMap sm = {});

// Cross-attention: q (B, Tq, C) queries, kv (B, Tk, 2C) columns [k | v]; out (B, Tq, C); att
// (B, NH, Tq, Tk) saved probabilities; key_mask (B, Tk) or null (0: padding). Never causal.
template <class S>
void cross_attention_forward(S* out, S* att, const S* q, const S* kv, int B, int Tq, int Tk, int C, int NH,
                             const uint8_t* key_mask = nullptr);
// One query row q (C) over Tk cached rows kv (Tk, 2 KVH HS) [k | v] (grouped-query: query head h
// reads key-value head h / (NH / KVH)); out (C); att (NH, Tk) probabilities. What a decoding step
// of a self-attention computes over its KV cache.
template <class S>
void cached_attention_forward(S* out, S* att, const S* q, const S* kv, int Tk, int C, int NH, int KVH,
                              ScoreMap sm = {}, const S* sink = nullptr);
// dq (B, Tq, C) +=, dkv (B, Tk, 2C) +=; datt (B, NH, Tq, Tk) scratch.
template <class S>
void cross_attention_backward(S* dq, S* dkv, S* datt, const S* dout, const S* q, const S* kv, const S* att,
                              int B, int Tq, int Tk, int C, int NH);
// tout (K, B, Tq, C) from tq (K, B, Tq, C) and tkv (K, B, Tk, 2C) (null: keys and values fixed).
template <class S>
void cross_attention_jvp(S* tout, S* tatt, const S* tq, const S* tkv, const S* q, const S* kv, const S* att,
                         int K, int B, int Tq, int Tk, int C, int NH);

}  // namespace normlab::ops
