// branch_attn.cpp: the self-attention branch, F(h) = softmax(q k^T / sqrt(HS) + masks) v W_o^T with
// [q | k | v] = h W_qkv^T (grouped-query: k and v narrower), q and k (and v) through QK-norm and RoPE
// first (attn_qk_*: the one place that transforms them): forward, backward, forward mode over the
// batch and at one token, and the incremental decoder's step over the KV cache. docs/MODEL.md
// ("Sub-layers") has the math; model.cpp, model_jvp.cpp and decode.cpp run it.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "model/branch.h"
#include "model/decode.h"
#include "model/methods.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/sphere.h"

namespace normlab {

using namespace ops;
using branch::zero;

template <class S>
void Model<S>::apply_rope(int layer, S* qkv, int rows, int T, int pos0, int sign) const {
  const int R = cfg_.rope_dims(), A = cfg_.attn_width(), NH = cfg_.n_heads, QW = cfg_.qkv_width(), HS = cfg_.head_size();
  if (R == 0 || !cfg_.rope_at(layer)) return;  // (a NoPE layer: nope_every)
  const bool local = cfg_.rope_local(layer);
  const S* cos_p = (local ? rope_local_cos_ : rope_cos_).data();
  const S* sin_p = (local ? rope_local_sin_ : rope_sin_).data();
  rope_rotate(qkv, cos_p, sin_p, rows, T, pos0, QW, 0, NH, HS, R, sign);  // q
  rope_rotate(qkv, cos_p, sin_p, rows, T, pos0, QW, A, cfg_.kv_heads(), HS, R, sign);  // k
}

// QK-norm, then RoPE, then (nGPT) each q and k head onto the sphere, times s_qk
template <class S>
void Model<S>::attn_qk_forward(int i, S* qkv, int rows, int T, int pos0, S* raw, S* mean, S* rstd, S* sph_raw,
                               S* sph_r) const {
  const QkNormLayout& L = qk_[size_t(i)];
  if (L.n) qk_norm_forward(cfg_.norm, cfg_.eps, L, p_[i].qkv_norm, qkv, size_t(rows), cfg_.qkv_width(), raw, mean, rstd,
                           qk_scratch_);
  apply_rope(slots_[size_t(i)].layer, qkv, rows, T, pos0, +1);
  if (const S* sqk = p_[i].sqk)  // q | k: 2 NH heads (nGPT has n_kv_heads = n_heads), s_qk shared by q and k
    sphere_heads_forward(qkv, cfg_.qkv_width(), long(rows), 2 * cfg_.n_heads, cfg_.head_size(), cfg_.d_model, sqk,
                         sphere_scale("sqk", cfg_.d_model).factor, cfg_.eps, sph_raw, sph_r);
}

template <class S>
void Model<S>::attn_qk_backward(int i, S* dqkv, int rows, int T) {
  if (const S* sqk = p_[i].sqk)
    sphere_heads_backward(dqkv, dp_[i].sqk, cfg_.qkv_width(), long(rows), 2 * cfg_.n_heads, cfg_.head_size(),
                          cfg_.d_model, sqk, sphere_scale("sqk", cfg_.d_model).factor, a_[i].pre, a_[i].pre_r);
  apply_rope(slots_[size_t(i)].layer, dqkv, rows, T, 0, -1);  // d(q, k before RoPE) = R_t^T d(R_t q, R_t k)
  const QkNormLayout& L = qk_[size_t(i)];
  const SublayerActs<S>& a = a_[i];
  if (L.n) qk_norm_backward(cfg_.norm, L, p_[i].qkv_norm, dp_[i].qkv_norm, dqkv, size_t(rows), cfg_.qkv_width(),
                            a.qk_raw, a.qk_mean, a.qk_rstd, qk_scratch_);
}

template <class S>
void Model<S>::attn_qk_jvp(int i, S* tqkv, int K, int rows, int T, int pos0, size_t row0) const {
  const QkNormLayout& L = qk_[size_t(i)];
  const SublayerActs<S>& a = a_[i];
  if (L.n) qk_norm_jvp(cfg_.norm, L, p_[i].qkv_norm, tqkv, K, size_t(rows), cfg_.qkv_width(), a.qk_raw, a.qk_mean,
                       a.qk_rstd, row0, size_t(this->rows(i)), qk_scratch_);
  apply_rope(slots_[size_t(i)].layer, tqkv, K * rows, T, pos0, +1);  // RoPE is linear: the tangents rotate as q and k do
  if (const S* sqk = p_[i].sqk)
    sphere_heads_jvp(tqkv, cfg_.qkv_width(), long(K) * rows, long(rows), long(row0), 2 * cfg_.n_heads,
                     cfg_.head_size(), cfg_.d_model, sqk, sphere_scale("sqk", cfg_.d_model).factor, a.pre, a.pre_r);
}

// Value residual learning (ResFormer; config.h value_residual, lambda): in slot i's (rows, QW)
// projection [q | k | v], after QK-norm and RoPE, v <- (1 - lambda) v + lambda u, u the values of the
// stack's first self-attention (its source, config.value_source) at the same rows, stride ldu; u null:
// the source is held fixed (a tangent or gradient range that does not contain it), so v <- (1 - lambda) v.
template <class S>
void Model<S>::value_mix(int i, S* qkv, long rows, const S* u, long ldu) const {
  if (cfg_.value_source(i) < 0) return;
  const int QW = cfg_.qkv_width(), VW = (QW - cfg_.attn_width()) / 2, V0 = QW - VW;
  const S keep = S(1 - cfg_.value_residual), take = S(cfg_.value_residual);
#pragma omp parallel for schedule(static) if(rows * VW > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    S* v = qkv + r * QW + V0;
    for (int c = 0; c < VW; c++) v[c] = keep * v[c] + (u ? take * u[r * ldu + c] : S(0));
  }
}

// Its transpose, on d(loss)/d(qkv after the mix) (rows, QW) of slot i: d(source's v) += lambda dv into
// dvalues_ (rows, VW) and dv <- (1 - lambda) dv; at the source, dv += dvalues_, which it then clears
// (every walk that reaches a source starts with dvalues_ zero: run_backward, vjp_sublayers).
template <class S>
void Model<S>::value_mix_backward(int i, S* dqkv, long rows) {
  const bool mixes = cfg_.value_source(i) >= 0, source = cfg_.is_value_source(i);
  if (!mixes && !source) return;
  const int QW = cfg_.qkv_width(), VW = (QW - cfg_.attn_width()) / 2, V0 = QW - VW;
  const S keep = S(1 - cfg_.value_residual), take = S(cfg_.value_residual);
  S* du = dvalues_;
#pragma omp parallel for schedule(static) if(rows * VW > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    S* dv = dqkv + r * QW + V0;
    S* d = du + r * VW;
    for (int c = 0; c < VW; c++) {
      if (mixes) {
        d[c] += take * dv[c];
        dv[c] *= keep;
      } else {
        dv[c] += d[c];
        d[c] = S(0);
      }
    }
  }
}

// The tangent's: at a source, its value tangents (rows, QW) are kept in tu (rows, VW) when tu is given;
// at a mixing slot, tv <- (1 - lambda) tv + lambda tu (tu null: held).
template <class S>
void Model<S>::value_mix_jvp(int i, S* tqkv, long rows, S* tu) const {
  const int QW = cfg_.qkv_width(), VW = (QW - cfg_.attn_width()) / 2, V0 = QW - VW;
  if (cfg_.is_value_source(i) && tu) {
    for (long r = 0; r < rows; r++) std::copy(tqkv + r * QW + V0, tqkv + r * QW + QW, tu + r * VW);
    return;
  }
  value_mix(i, tqkv, rows, tu, VW);
}

// Gated attention (config.h AttnGate): y = u * g, u the attention output (rows, A), g = sigmoid(z) its gate
// (rows, G), z = h W_g^T + b_g; G = NH (one gate per head: channel c reads g[c / HS]) or A (per channel).
namespace {

template <class S>
void sigmoid_in_place(S* z, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > ops::kParallelMinWork)
  for (long k = 0; k < (long)n; k++) z[k] = S(1) / (S(1) + std::exp(-z[k]));
}

// y (rows, A) = u * g, g (rows, G) widened over each gate's A / G channels; y may alias u
template <class S>
void apply_gate(S* y, const S* u, const S* g, long rows, int A, int G) {
  const int per = A / G;
#pragma omp parallel for schedule(static) if(rows * A > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++)
    for (int c = 0; c < A; c++) y[r * A + c] = u[r * A + c] * g[r * G + c / per];
}

// Backward through y = u * sigmoid(z): dz (rows, G) = sum over each gate's channels of dy u g (1 - g)
// (overwritten); dy (rows, A) becomes du = dy g in place.
template <class S>
void gate_backward(S* dz, S* dy, const S* u, const S* g, long rows, int A, int G) {
  const int per = A / G;
#pragma omp parallel for schedule(static) if(rows * A > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++)
    for (int j = 0; j < G; j++) {
      const S gj = g[r * G + j];
      double sum = 0;
      for (int c = j * per; c < (j + 1) * per; c++) {
        sum += double(dy[r * A + c]) * u[r * A + c];
        dy[r * A + c] *= gj;
      }
      dz[r * G + j] = S(sum * gj * (1 - gj));
    }
}

// Forward mode: ty (K, rows, A) = tu g + u g (1 - g) tz, for tangents tu (in ty, K, rows, A) and tz (K,
// rows, G) at the point (u, g) of rows [row0, row0 + rows) of the last forward's (u, g) (stride A, G)
template <class S>
void gate_jvp(S* ty, const S* tz, const S* u, const S* g, int K, long rows, long row0, int A, int G) {
  const int per = A / G;
#pragma omp parallel for collapse(2) schedule(static) if(K * rows * A > ops::kParallelMinWork)
  for (int k = 0; k < K; k++)
    for (long r = 0; r < rows; r++) {
      const S* ur = u + (row0 + r) * A;
      const S* gr = g + (row0 + r) * G;
      S* y = ty + (size_t(k) * rows + r) * A;
      const S* z = tz + (size_t(k) * rows + r) * G;
      for (int c = 0; c < A; c++) {
        const S gj = gr[c / per];
        y[c] = y[c] * gj + ur[c] * gj * (1 - gj) * z[c / per];
      }
    }
}

}  // namespace

template <class S>
void Model<S>::attn_forward(int i) {
  const Slot& slot = slots_[size_t(i)];
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int B = B_, T = len(i), N = rows(i), C = cfg_.d_model;
  const uint8_t* self_mask = self_attention_mask(i);
  const int A = cfg_.attn_width();  // the heads' width, n_heads HS (C unless head_dim says otherwise)
  const int G = cfg_.attn_gate_width();
  matmul_forward(a.hid, a.h, p.w1, p.b1, N, C, cfg_.qkv_width(), prec_, bf16_of(p.w1));
  attn_qk_forward(i, a.hid, N, T, 0, a.qk_raw, a.qk_mean, a.qk_rstd, a.pre, a.pre_r);  // (hid keeps the results)
  if (const int src = cfg_.value_source(i); src >= 0) {  // the source's values, at the same rows
    const int QW = cfg_.qkv_width();
    value_mix(i, a.hid, N, a_[src].hid + (QW - (QW - A) / 2), QW);
  }
  double* logit_max = training_ && qk_clip_ > 0 ? logit_max_.data() + size_t(i) * cfg_.n_heads : nullptr;
  attention_forward(G ? a.ungated : a.mix, a.att, a.hid, B, T, A, cfg_.n_heads, cfg_.kv_heads(), !slot.encoder,
                    self_mask, prec_, score_map(), p.sinks, logit_max);  // (sinks: null without model.attn_sink)
  if (G) {  // the output gate
    matmul_forward(a.gate, a.h, p.wg, p.bg, N, C, G, prec_, bf16_of(p.wg));
    sigmoid_in_place(a.gate, size_t(N) * G);
    apply_gate(a.mix, a.ungated, a.gate, N, A, G);
  }
  matmul_forward(a.f, a.mix, p.w2, p.b2, N, A, C, prec_, bf16_of(p.w2));
}

template <class S>
void Model<S>::attn_backward(int i, const S* df, S* dh) {
  const Slot& slot = slots_[size_t(i)];
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const SublayerParams<S>& dp = dp_[i];
  const int B = B_, T = len(i), N = rows(i), C = cfg_.d_model;
  const int A = cfg_.attn_width();
  const int G = cfg_.attn_gate_width();
  zero(dmix_, size_t(N) * A);
  matmul_backward(dmix_, dp.w2, dp.b2, df, a.mix, p.w2, N, A, C, prec_, bf16_of(p.w2));
  if (G) {  // through the gate: dmix_ becomes d(ungated); the gate map's gradients, and its part of dh
    gate_backward(dgate_, dmix_, a.ungated, a.gate, N, A, G);
    matmul_backward(dh, dp.wg, dp.bg, dgate_, a.h, p.wg, N, C, G, prec_, bf16_of(p.wg));
  }
  zero(dhid_, size_t(N) * cfg_.qkv_width());
  attention_backward(dhid_, datt_, dmix_, a.hid, a.att, B, T, A, cfg_.n_heads, cfg_.kv_heads(), !slot.encoder, prec_,
                     score_map(), dp.sinks);  // (the sink logits' gradient, with model.attn_sink)
  value_mix_backward(i, dhid_, N);
  attn_qk_backward(i, dhid_, N, T);
  matmul_backward(dh, dp.w1, dp.b1, dhid_, a.h, p.w1, N, C, cfg_.qkv_width(), prec_, bf16_of(p.w1));
}

template <class S>
void Model<S>::attn_jvp(int i, S* tf, const S* th, int K, const JvpScratch& sc) const {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int B = B_, T = len(i), N = rows(i), C = cfg_.d_model;
  const int A = cfg_.attn_width();
  matmul_jvp(sc.hid, th, p.w1, K, N, C, cfg_.qkv_width());
  attn_qk_jvp(i, sc.hid, K, N, T, 0, 0);  // QK-norm's tangent, RoPE
  value_mix_jvp(i, sc.hid, long(K) * N, sc.values);
  attention_jvp(sc.mix, sc.att, sc.hid, a.hid, a.att, K, B, T, A, cfg_.n_heads, cfg_.kv_heads(), score_map());
  if (const int G = cfg_.attn_gate_width()) {  // the gate's tangent (in sc.hid, free now: G <= qkv width)
    matmul_jvp(sc.hid, th, p.wg, K, N, C, G);
    gate_jvp(sc.mix, sc.hid, a.ungated, a.gate, K, N, 0, A, G);
  }
  matmul_jvp(tf, sc.mix, p.w2, K, N, A, C);
}

// With a tangent only at token i, only q_i, k_i, v_i move, and the output at token i is, per head,
//   tS_ij = (tq_i . k_j + [j == i] q_i . tk_i) / sqrt(HS);  tP_i = P_i * (tS_i - <P_i, tS_i>);
//   ty_i = sum_j tP_ij v_j + P_ii tv_i
// (masked and causally hidden keys have P_ij = 0 and drop out): O(K (C^2 + T C)) per block.
template <class S>
void Model<S>::attn_jvp_token(int i, S* tf, const S* th, int K, int token, int row, const JvpScratch& sc) const {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int T = T_, C = cfg_.d_model, NH = cfg_.n_heads, HS = cfg_.head_size(), A = cfg_.attn_width();
  const size_t n = size_t(row) * T + token;  // the token's row in (B * T)
  // the row [q (A) | k (KVW) | v (KVW)]; query head hh reads key-value head hh / (NH / KVH)
  const int C3 = cfg_.qkv_width(), KVW = cfg_.kv_heads() * HS, group = NH / cfg_.kv_heads();
  const ops::ScoreMap sm = score_map();
  const S scale = S(sm.scale_for(HS));
  S* thid = sc.hid;
  S* ts = sc.att;  // (K, T) one head's score tangents
  std::vector<S> slope(sm.softcap > 0 ? size_t(T) : 0);  // a soft cap's slope at each scaled score s_ij
  matmul_jvp(thid, th, p.w1, K, 1, C, C3);  // tq_i | tk_i | tv_i
  attn_qk_jvp(i, thid, K, 1, 1, token, n);  // at the token's row and position
  value_mix_jvp(i, thid, K, sc.values);
  for (int hh = 0; hh < NH; hh++) {
    const S* qkv = a.hid + size_t(row) * T * C3;  // this row's q | k | v, stride C3
    const S* q_i = qkv + size_t(token) * C3 + hh * HS;
    const S* k = qkv + A + (hh / group) * HS;
    const S* v = qkv + A + KVW + (hh / group) * HS;
    const S* P_i = a.att + ((size_t(row) * NH + hh) * T + token) * T;
    const S* tq = thid + hh * HS;
    const S* tk = thid + A + (hh / group) * HS;
    const S* tv = thid + A + KVW + (hh / group) * HS;
    // tS (K, T) = tq_i k^T / sqrt(HS), plus q_i . tk_i / sqrt(HS) at j = i
    gemm<S>(Trans::No, Trans::Yes, K, T, HS, scale, tq, C3, k, C3, S(0), ts, T);
    for (size_t j = 0; j < slope.size(); j++) {
      double qk = 0;
      for (int e = 0; e < HS; e++) qk += double(q_i[e]) * k[j * C3 + e];
      slope[j] = sm.slope(S(scale * S(qk)));
    }
    for (int kk = 0; kk < K; kk++) {
      S* s = ts + size_t(kk) * T;
      const S* tk_k = tk + size_t(kk) * C3;
      double qtk = 0;
      for (int e = 0; e < HS; e++) qtk += double(q_i[e]) * tk_k[e];
      s[token] += scale * S(qtk);
      for (size_t j = 0; j < slope.size(); j++) s[j] *= slope[j];
      // tP = P * (tS - <P, tS>)
      double dot = 0;
      for (int j = 0; j < T; j++) dot += double(P_i[j]) * s[j];
      for (int j = 0; j < T; j++) s[j] = S(P_i[j] * (s[j] - dot));
    }
    // ty_i (K, HS) = tP v + P_ii tv_i
    S* ty = sc.mix + hh * HS;
    gemm<S>(Trans::No, Trans::No, K, HS, T, S(1), ts, T, v, C3, S(0), ty, A);
    const S p_ii = P_i[token];
    for (int kk = 0; kk < K; kk++)
      for (int e = 0; e < HS; e++) ty[size_t(kk) * A + e] += p_ii * tv[size_t(kk) * C3 + e];
  }
  if (const int G = cfg_.attn_gate_width()) {  // the gate at the token's row (its tangent in thid, free now)
    matmul_jvp(thid, th, p.wg, K, 1, C, G);
    gate_jvp(sc.mix, thid, a.ungated, a.gate, K, 1, long(n), A, G);
  }
  matmul_jvp(tf, sc.mix, p.w2, K, 1, A, C);
}

// The new token's q, k, v; k and v enter the cache at position t; its query attends over 0..t.
template <class S>
void IncrementalDecoder<S>::attn_step(int i, const S* h, const SublayerParams<S>& p) {
  const ModelConfig& cfg = m_.config();
  const int B = B_, C = cfg.d_model, A = cfg.attn_width(), t = t_;
  const int W = cfg.qkv_width(), KVW = W - A;  // [q (A) | k | v (KVH HS each)]
  std::vector<S>& cache = cache_[size_t(i)];
  matmul_forward(hid_.data(), h, p.w1, p.b1, B, C, W);
  // QK-norm, RoPE at position t, before k enters the cache
  const QkNormLayout& L = m_.qk_layout(i);
  qk_raw_.resize(std::max(qk_raw_.size(), size_t(B) * L.raw_width()));
  qk_stats_.resize(std::max(qk_stats_.size(), 2 * size_t(B) * L.stats_per_token()));
  if (p.sqk) {
    sph_.resize(size_t(B) * 2 * C);
    sph_r_.resize(size_t(B) * 2 * cfg.n_heads);
  }
  m_.attn_qk_forward(i, hid_.data(), B, 1, t, qk_raw_.data(), qk_stats_.data(),
                     qk_stats_.data() + size_t(B) * L.stats_per_token(), sph_.data(), sph_r_.data());
  if (cfg.is_value_source(i)) {  // the first self-attention's values of the new token, for the later ones
    const int VW = KVW / 2;
    values_.resize(size_t(B) * VW);
    for (int b = 0; b < B; b++)
      std::copy(hid_.begin() + long(b) * W + W - VW, hid_.begin() + long(b) * W + W, values_.begin() + long(b) * VW);
  }
  m_.value_mix(i, hid_.data(), B, values_.data(), KVW / 2);
  for (int b = 0; b < B; b++) {
    S* kv = cache.data() + size_t(b) * max_len_ * KVW;
    std::copy(hid_.begin() + long(b) * W + A, hid_.begin() + long(b) * W + W, kv + size_t(t) * KVW);
    // causal self-attention of the new query over positions 0..t
    cached_attention_forward(mix_.data() + size_t(b) * A, att_.data(), hid_.data() + size_t(b) * W, kv, t + 1, A,
                             cfg.n_heads, cfg.kv_heads(), m_.score_map(), p.sinks);
  }
  if (const int G = cfg.attn_gate_width()) {  // the output gate, from the new token's h
    std::vector<S> gate(size_t(B) * G);
    matmul_forward(gate.data(), h, p.wg, p.bg, B, C, G);
    sigmoid_in_place(gate.data(), gate.size());
    apply_gate(mix_.data(), mix_.data(), gate.data(), B, A, G);
  }
  matmul_forward(f_.data(), mix_.data(), p.w2, p.b2, B, A, C);
}

// QK-Clip. Its premise: a self-attention's logit q.k scales with W_q and W_k. QK-norm (whose output
// does not depend on the scale of its input), nGPT (unit q, k heads) and a soft cap (logits already
// bounded by it) break it or make it moot, and are refused by name.
template <class S>
void Model<S>::set_qk_clip(double tau, double alpha) {
  if (!(tau >= 0) || !std::isfinite(tau))
    throw Error(fmt::format("train.qk_clip = {} must be a finite threshold >= 0 (0: off; Kimi K2 used 100)", tau));
  if (!(alpha >= 0 && alpha <= 1)) throw Error(fmt::format("train.qk_clip_alpha = {} must be in [0, 1]", alpha));
  if (tau > 0) {
    for (int l = 0; l < cfg_.total_layers(); l++)
      if (cfg_.qk_norm_of(l) != QkNorm::None)
        throw Error(fmt::format("train.qk_clip needs attention logits that scale with W_q and W_k; layer {}'s "
                                "QK-norm undoes that (use QK-norm or QK-Clip, not both)", l));
    if (cfg_.on_sphere()) throw Error("train.qk_clip: nGPT's q and k heads are unit vectors times s_qk, not W_q h, W_k h");
    if (cfg_.attn_softcap > 0)
      throw Error(fmt::format("train.qk_clip: model.attn_softcap = {} already bounds every logit", cfg_.attn_softcap));
  }
  qk_clip_ = tau;
  qk_clip_alpha_ = alpha;
  logit_max_.assign(tau > 0 ? size_t(cfg_.n_slots()) * cfg_.n_heads : 0, -std::numeric_limits<double>::infinity());
}

template <class S>
int Model<S>::clip_qk() {
  if (qk_clip_ <= 0) return 0;
  const int NH = cfg_.n_heads, KVH = cfg_.kv_heads(), group = NH / KVH, HS = cfg_.head_size(), C = cfg_.d_model;
  const int A = cfg_.attn_width();
  int clipped = 0;
  for (int i = 0; i < cfg_.n_slots(); i++) {
    if (!cfg_.has_sublayer(i) || slots_[size_t(i)].kind != Sublayer::Attn) continue;
    const SublayerParams<S>& p = p_[i];
    double* m = logit_max_.data() + size_t(i) * NH;
    for (int g = 0; g < KVH; g++) {
      const double largest = *std::max_element(m + g * group, m + (g + 1) * group);
      if (!(largest > qk_clip_)) continue;
      const double eta = qk_clip_ / largest;
      const S sq = S(std::pow(eta, qk_clip_alpha_)), sk = S(std::pow(eta, 1 - qk_clip_alpha_));
      // rows of the fused [q (A) | k | v] map: the group's query heads, then its key head
      const auto scale_rows = [&](int row0, int rows, S s) {
        for (int r = row0; r < row0 + rows; r++) {
          for (int c = 0; c < C; c++) p.w1[size_t(r) * C + c] *= s;
          if (p.b1) p.b1[r] *= s;
        }
      };
      scale_rows(g * group * HS, group * HS, sq);
      scale_rows(A + g * HS, HS, sk);
      clipped++;
    }
  }
  std::fill(logit_max_.begin(), logit_max_.end(), -std::numeric_limits<double>::infinity());
  if (clipped) params16_current_ = false;  // the weights were written after the optimizer's bf16 handoff
  return clipped;
}

#define NL_INSTANTIATE(S)                                                                                   \
  template void Model<S>::set_qk_clip(double, double);                                                      \
  template int Model<S>::clip_qk();                                                                         \
  template void Model<S>::apply_rope(int, S*, int, int, int, int) const;                                        \
  template void Model<S>::attn_qk_forward(int, S*, int, int, int, S*, S*, S*, S*, S*) const;               \
  template void Model<S>::attn_qk_backward(int, S*, int, int);                                             \
  template void Model<S>::attn_qk_jvp(int, S*, int, int, int, int, size_t) const;                          \
  template void Model<S>::value_mix(int, S*, long, const S*, long) const;                                  \
  template void Model<S>::value_mix_backward(int, S*, long);                                               \
  template void Model<S>::value_mix_jvp(int, S*, long, S*) const;                                          \
  template void Model<S>::attn_forward(int);                                                               \
  template void Model<S>::attn_backward(int, const S*, S*);                                                \
  template void Model<S>::attn_jvp(int, S*, const S*, int, const JvpScratch&) const;                       \
  template void Model<S>::attn_jvp_token(int, S*, const S*, int, int, int, const JvpScratch&) const;       \
  template void IncrementalDecoder<S>::attn_step(int, const S*, const SublayerParams<S>&);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab
