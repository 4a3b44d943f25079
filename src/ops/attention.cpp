// attention.cpp: self- and cross-attention forward, backward and JVP, one (batch, head) pair per
// OpenMP iteration, each doing its small GEMMs on strided views of q, k and v (single-threaded inside
// the parallel loop); plus the naive references.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/common.h"
#include "ops/isa.h"
#include "ops/vecmath.h"

namespace normlab::ops {

// Softmax of one row of scores in place over the first `len` entries; entries from len on are
// masked (probability 0). Stable: subtracts the row max. The row is walked in whole chunks of
// kLanes up to the first multiple of kLanes at or past len (when the row is that long), the lanes
// past len masked inside the chunk, so a causal row of any length vectorizes without a scalar tail
// (rows end at every length there); only a row whose stride T is not a multiple of kLanes has one.
// sink: a learned sink logit (gpt-oss), one more entry of the softmax's denominator whose probability
// is not written (the row then sums to less than 1); -inf: none. Returns the row's largest score (the
// sink's logit left out): what QK-Clip reads.
constexpr int kLanes = 8;
template <class S>
static S softmax_row(S* row, int len, int T, S sink) {
  const int chunked = std::min((len + kLanes - 1) / kLanes, T / kLanes) * kLanes;
  const S neg_inf = -std::numeric_limits<S>::infinity();
  S mx_lane[kLanes];  // per-lane max and sum, reduced once at the end (in registers)
  double sum_lane[kLanes];
  for (int l = 0; l < kLanes; l++) mx_lane[l] = neg_inf, sum_lane[l] = 0;
  for (int j0 = 0; j0 < chunked; j0 += kLanes)
#pragma omp simd
    for (int l = 0; l < kLanes; l++) {
      const S v = j0 + l < len ? row[j0 + l] : neg_inf;
      mx_lane[l] = v > mx_lane[l] ? v : mx_lane[l];
    }
  S mx = neg_inf;
  for (int l = 0; l < kLanes; l++) mx = mx_lane[l] > mx ? mx_lane[l] : mx;
  for (int j = chunked; j < len; j++) mx = row[j] > mx ? row[j] : mx;
  const S largest = mx;
  mx = sink > mx ? sink : mx;
  for (int j0 = 0; j0 < chunked; j0 += kLanes)
#pragma omp simd
    for (int l = 0; l < kLanes; l++) {
      const S e = j0 + l < len ? exp_of(S(row[j0 + l] - mx)) : S(0);  // masked lanes: probability 0
      row[j0 + l] = e;
      sum_lane[l] += e;
    }
  double sum = sink > neg_inf ? double(exp_of(S(sink - mx))) : 0.0;
  for (int l = 0; l < kLanes; l++) sum += sum_lane[l];
  for (int j = chunked; j < len; j++) {
    const S e = exp_of(S(row[j] - mx));
    row[j] = e;
    sum += e;
  }
  const S inv = S(1.0 / sum);
  const int done = std::max(chunked, len);  // entries 0 .. done-1 hold e (0 past len)
#pragma omp simd
  for (int j = 0; j < done; j++) row[j] *= inv;
  for (int j = done; j < T; j++) row[j] = S(0);
  return largest;
}

// Query rows are taken kRowBlock at a time: under a causal mask a block of rows i0 .. i0+rows-1
// sees only keys 0 .. i0+rows-1, so its GEMMs stop there and skip the masked upper triangle (at
// T = 128, 62% of the full T x T work is done); the probabilities past a row's last key are written
// 0 as before. Measured faster than one block per head on both paths (docs/BENCHMARK.md): with
// normlab's own kernel on AVX2 (Zen 3), and with OpenBLAS on AVX-512 (Zen 4: 1.15-1.43x on the
// forward and backward of shapes a, b, c and the practical study's model, bench_kernels).
constexpr int kRowBlock = 32;

// One attention, written once for self- and cross-attention: queries q (B, Tq, ldq-strided rows),
// keys k and values v (B, Tk, ldkv-strided rows), query head h reading columns h*HS .. (h+1)*HS of q
// and key-value head h / (NH / KVH) the same columns of k and v (grouped-query attention: KVH < NH
// key-value heads, each shared by NH / KVH query heads; KVH = NH is multi-head attention).
template <class S>
struct Heads {
  const S* q;
  const S* k;
  const S* v;
  int ldq, ldkv;  // row strides of q and of k / v
  int B, Tq, Tk, C, NH, KVH;
  int HS() const { return C / NH; }
  int group() const { return NH / KVH; }
  long q_off(int b, int h) const { return (long)b * Tq * ldq + (long)h * HS(); }
  long kv_off(int b, int h) const { return (long)b * Tk * ldkv + (long)(h / group()) * HS(); }
};

// logit_max (B * NH) or null: each (batch, head)'s largest score, assigned.
template <class S>
static void heads_forward(S* out, S* att, const Heads<S>& x, bool causal, const uint8_t* key_mask,
                          Precision prec, const ScoreMap& sm, const S* sink, double* logit_max) {
  const int HS = x.HS(), Tq = x.Tq, Tk = x.Tk, C = x.C, NH = x.NH;
  const S scale = S(sm.scale_for(HS));
  const int block = kRowBlock;
#pragma omp parallel for schedule(static) if((long)x.B * Tq * Tk * C > kParallelMinWork)
  for (int bh = 0; bh < x.B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const S* q = x.q + x.q_off(b, h);
    const S* k = x.k + x.kv_off(b, h);
    const S* v = x.v + x.kv_off(b, h);
    S* p = att + (long)bh * Tq * Tk;
    double largest = -std::numeric_limits<double>::infinity();
    for (int i0 = 0; i0 < Tq; i0 += block) {
      const int rows = std::min(block, Tq - i0), len = causal ? i0 + rows : Tk;  // keys these rows see
      S* pb = p + (long)i0 * Tk;
      // S = q k^T / sqrt(HS);  P = softmax(S) row by row (row i sees keys 0..i when causal)
      gemm_with<S>(prec, Trans::No, Trans::Yes, rows, len, HS, scale, q + (long)i0 * x.ldq, x.ldq, k, x.ldkv, S(0),
                   pb, Tk);
      if (sm.softcap > 0)  // S = softcap tanh(S / softcap)
        for (int i = 0; i < rows; i++)
          for (int j = 0; j < len; j++) pb[(long)i * Tk + j] = sm.cap(pb[(long)i * Tk + j]);
      if (key_mask) {  // padded keys: -inf before the softmax, probability 0 after it
        const uint8_t* m = key_mask + (long)b * Tk;
        for (int i = 0; i < rows; i++)
          for (int j = 0; j < len; j++)
            if (!m[j]) pb[(long)i * Tk + j] = -std::numeric_limits<S>::infinity();
      }
      const S sink_h = sink ? sink[h] : -std::numeric_limits<S>::infinity();  // (not scaled, capped or masked)
      for (int i = i0; i < i0 + rows; i++)
        largest = std::max(largest, double(softmax_row(p + (long)i * Tk, causal ? i + 1 : Tk, Tk, sink_h)));
      // y = P v, written into this head's columns of out (keys past len have probability 0)
      gemm_with<S>(prec, Trans::No, Trans::No, rows, HS, len, S(1), pb, Tk, v, x.ldkv, S(0),
                   out + ((long)b * Tq + i0) * C + h * HS, C);
    }
    if (logit_max) logit_max[bh] = largest;
  }
}

// dq, dk, dv +=, strided like q, k, v; datt (B, NH, Tq, Tk) is scratch (under a causal mask its
// entries past a row block's last key are not written). One thread owns a key-value
// head and runs its query heads in order: their dk, dv sums have no race and a fixed order.
// dsink (B, NH) or null: each (batch, head)'s part of a sink logit's gradient, assigned. The sink's
// probability is 1 - sum_j P_ij and its value 0, so its dP is 0: d sink = -sum_i P_sink,i sum_j P_ij dP_ij
// (and dS keeps its form: the rows' sums of P dP are over the keys alone).
template <class S>
static void heads_backward(S* dq_all, S* dk_all, S* dv_all, S* datt, const S* dout, const S* att,
                           const Heads<S>& x, bool causal, Precision prec, const ScoreMap& sm, double* dsink) {
  const int HS = x.HS(), Tq = x.Tq, Tk = x.Tk, C = x.C, NH = x.NH, G = x.group();
  const S scale = S(sm.scale_for(HS));
  const int block = kRowBlock;
#pragma omp parallel for schedule(static) if((long)x.B * Tq * Tk * C > kParallelMinWork)
  for (int bg = 0; bg < x.B * x.KVH; bg++)
  for (int h = (bg % x.KVH) * G; h < (bg % x.KVH + 1) * G; h++) {
    const int b = bg / x.KVH, bh = b * NH + h;
    const S* q = x.q + x.q_off(b, h);
    const S* k = x.k + x.kv_off(b, h);
    const S* v = x.v + x.kv_off(b, h);
    S* dq = dq_all + x.q_off(b, h);
    S* dk = dk_all + x.kv_off(b, h);
    S* dv = dv_all + x.kv_off(b, h);
    const S* p = att + (long)bh * Tq * Tk;
    S* dp = datt + (long)bh * Tq * Tk;
    std::vector<S> raw;
    double dsink_bh = 0;
    for (int i0 = 0; i0 < Tq; i0 += block) {
      const int rows = std::min(block, Tq - i0), len = causal ? i0 + rows : Tk;  // keys these rows see
      const S* pb = p + (long)i0 * Tk;
      const S* dy = dout + ((long)b * Tq + i0) * C + h * HS;
      const S* qb = q + (long)i0 * x.ldq;
      S* db = dp + (long)i0 * Tk;
      // y = P v:  dP = dy v^T;  dv += P^T dy
      gemm_with<S>(prec, Trans::No, Trans::Yes, rows, len, HS, S(1), dy, C, v, x.ldkv, S(0), db, Tk);
      gemm_with<S>(prec, Trans::Yes, Trans::No, len, HS, rows, S(1), pb, Tk, dy, C, S(1), dv, x.ldkv);
      // P = softmax(S):  dS = P * (dP - sum_j P dP) ; fold in the 1/sqrt(HS) of S = q k^T * scale
      // (masked probabilities are 0, so their score gradients come out 0 by themselves); a soft cap's
      // slope at the scaled score, recomputed (q k^T scale) rather than saved
      if (sm.softcap > 0) {
        raw.resize(size_t(rows) * len);
        gemm_with<S>(prec, Trans::No, Trans::Yes, rows, len, HS, scale, qb, x.ldq, k, x.ldkv, S(0), raw.data(), len);
      }
      for (int i = 0; i < rows; i++) {
        const S* pr = pb + (long)i * Tk;
        S* dr = db + (long)i * Tk;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < len; j++) dot += double(pr[j]) * dr[j];
        if (dsink) {
          double mass = 0;
          for (int j = 0; j < len; j++) mass += pr[j];
          dsink_bh -= (1.0 - mass) * dot;
        }
        for (int j = 0; j < len; j++) dr[j] = S(pr[j] * (dr[j] - dot) * scale);
        if (sm.softcap > 0)
          for (int j = 0; j < len; j++) dr[j] *= sm.slope(raw[(size_t)i * len + j]);
      }
      // S = q k^T * scale:  dq += dS k;  dk += dS^T q
      gemm_with<S>(prec, Trans::No, Trans::No, rows, HS, len, S(1), db, Tk, k, x.ldkv, S(1), dq + (long)i0 * x.ldq,
                   x.ldq);
      gemm_with<S>(prec, Trans::Yes, Trans::No, len, HS, rows, S(1), db, Tk, qb, x.ldq, S(1), dk, x.ldkv);
    }
    if (dsink) dsink[bh] = dsink_bh;
  }
}

// Tangents of K directions: t.q, t.k, t.v laid out (K, <primal>) like x's; t.k and t.v may be null
// (keys and values held fixed). tout (K, B, Tq, C); tatt (B, NH, Tq, Tk) is scratch.
//   tS = (tq k^T + q tk^T) / sqrt(HS);  tP = P * (tS - rowsum(P * tS));  ty = tP v + P tv
template <class S>
static void heads_jvp(S* tout, S* tatt, const Heads<S>& t, long t_qstride, long t_kvstride, const S* att,
                      const Heads<S>& x, int K, const ScoreMap& sm = {}) {
  const int HS = x.HS(), Tq = x.Tq, Tk = x.Tk, C = x.C, NH = x.NH;
  const S scale = S(sm.scale_for(HS));
  for (int kt = 0; kt < K; kt++) {
    S* ty_all = tout + (long)kt * x.B * Tq * C;
#pragma omp parallel for schedule(static) if((long)x.B * Tq * Tk * C > kParallelMinWork)
    for (int bh = 0; bh < x.B * NH; bh++) {
      const int b = bh / NH, h = bh % NH;
      const S* q = x.q + x.q_off(b, h);
      const S* k = x.k + x.kv_off(b, h);
      const S* v = x.v + x.kv_off(b, h);
      const S* tq = t.q + kt * t_qstride + x.q_off(b, h);
      const S* tk = t.k ? t.k + kt * t_kvstride + x.kv_off(b, h) : nullptr;
      const S* tv = t.v ? t.v + kt * t_kvstride + x.kv_off(b, h) : nullptr;
      const S* p = att + (long)bh * Tq * Tk;
      S* tp = tatt + (long)bh * Tq * Tk;
      S* ty = ty_all + (long)b * Tq * C + h * HS;
      gemm<S>(Trans::No, Trans::Yes, Tq, Tk, HS, scale, tq, x.ldq, k, x.ldkv, S(0), tp, Tk);
      if (tk) gemm<S>(Trans::No, Trans::Yes, Tq, Tk, HS, scale, q, x.ldq, tk, x.ldkv, S(1), tp, Tk);
      if (sm.softcap > 0) {  // tS *= the cap's slope at the scaled score
        std::vector<S> raw(size_t(Tq) * Tk);
        gemm<S>(Trans::No, Trans::Yes, Tq, Tk, HS, scale, q, x.ldq, k, x.ldkv, S(0), raw.data(), Tk);
        for (size_t e = 0; e < raw.size(); e++) tp[e] *= sm.slope(raw[e]);
      }
      for (int i = 0; i < Tq; i++) {
        const S* pr = p + (long)i * Tk;
        S* tr = tp + (long)i * Tk;
        double dot = 0;
        for (int j = 0; j < Tk; j++) dot += double(pr[j]) * tr[j];
        for (int j = 0; j < Tk; j++) tr[j] = S(pr[j] * (tr[j] - dot));  // masked: P = 0 gives 0
      }
      gemm<S>(Trans::No, Trans::No, Tq, HS, Tk, S(1), tp, Tk, v, x.ldkv, S(0), ty, C);
      if (tv) gemm<S>(Trans::No, Trans::No, Tq, HS, Tk, S(1), p, Tk, tv, x.ldkv, S(1), ty, C);
    }
  }
}

// qkv rows [q (C) | k (KVH HS) | v (KVH HS)]
template <class S>
static Heads<S> self_heads(const S* qkv, int B, int T, int C, int NH, int KVH) {
  const int kvw = KVH * (C / NH);
  return {qkv, qkv + C, qkv + C + kvw, C + 2 * kvw, C + 2 * kvw, B, T, T, C, NH, KVH};
}
template <class S>
static Heads<S> cross_heads(const S* q, const S* kv, int B, int Tq, int Tk, int C, int NH) {
  return {q, kv, kv + C, C, 2 * C, B, Tq, Tk, C, NH, NH};
}

template <class S>
void attention_forward(S* out, S* att, const S* qkv, int B, int T, int C, int NH, int KVH, bool causal,
                       const uint8_t* key_mask, Precision prec, ScoreMap sm, const S* sink, double* logit_max) {
  std::vector<double> part(logit_max ? size_t(B) * NH : 0);  // per (batch, head), then the max over the batch
  heads_forward(out, att, self_heads(qkv, B, T, C, NH, KVH), causal, key_mask, prec, sm, sink,
                logit_max ? part.data() : nullptr);
  if (logit_max)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) logit_max[h] = std::max(logit_max[h], part[size_t(b) * NH + h]);
}

template <class S>
void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B, int T,
                        int C, int NH, int KVH, bool causal, Precision prec, ScoreMap sm, S* dsink) {
  const Heads<S> x = self_heads(qkv, B, T, C, NH, KVH);
  std::vector<double> part(dsink ? size_t(B) * NH : 0);  // per (batch, head), summed over the batch in order
  heads_backward(dqkv, dqkv + (x.k - qkv), dqkv + (x.v - qkv), datt, dout, att, x, causal, prec, sm,
                 dsink ? part.data() : nullptr);
  if (dsink)
    for (int h = 0; h < NH; h++) {
      double sum = 0;
      for (int b = 0; b < B; b++) sum += part[size_t(b) * NH + h];
      dsink[h] += S(sum);
    }
}

template <class S>
void cross_attention_forward(S* out, S* att, const S* q, const S* kv, int B, int Tq, int Tk, int C, int NH,
                             const uint8_t* key_mask) {
  heads_forward(out, att, cross_heads(q, kv, B, Tq, Tk, C, NH), false, key_mask, Precision::Fp32, ScoreMap{},
                static_cast<const S*>(nullptr), nullptr);
}

template <class S>
void cached_attention_forward(S* out, S* att, const S* q, const S* kv, int Tk, int C, int NH, int KVH, ScoreMap sm,
                              const S* sink) {
  const int width = 2 * KVH * (C / NH);
  heads_forward(out, att, Heads<S>{q, kv, kv + width / 2, C, width, 1, 1, Tk, C, NH, KVH}, false, nullptr,
                Precision::Fp32, sm, sink, nullptr);
}

template <class S>
void cross_attention_backward(S* dq, S* dkv, S* datt, const S* dout, const S* q, const S* kv, const S* att,
                              int B, int Tq, int Tk, int C, int NH) {
  heads_backward(dq, dkv, dkv + C, datt, dout, att, cross_heads(q, kv, B, Tq, Tk, C, NH), false, Precision::Fp32,
                 ScoreMap{}, nullptr);
}

template <class S>
void attention_forward_naive(S* out, S* att, const S* qkv, int B, int T, int C, int NH, int KVH,
                             bool causal, const uint8_t* key_mask, const S* sink) {
  // row width and the k, v columns of query head h: its key-value head h / (NH / KVH)
  const int HS = C / NH, C3 = C + 2 * KVH * HS, kcol = C, vcol = C + KVH * HS;
  const auto kv_head = [&](int h) { return h / (NH / KVH) * HS; };
  const double scale = 1.0 / std::sqrt(double(HS));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        S* p = att + (((long)b * NH + h) * T + i) * T;
        const S* q = qkv + ((long)b * T + i) * C3 + h * HS;
        const int len = causal ? i + 1 : T;
        double mx = -std::numeric_limits<double>::infinity();
        std::vector<double> s(T, 0.0);
        for (int j = 0; j < len; j++) {
          if (key_mask && !key_mask[(long)b * T + j]) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const S* k = qkv + ((long)b * T + j) * C3 + kcol + kv_head(h);
          double dot = 0;
          for (int d = 0; d < HS; d++) dot += double(q[d]) * k[d];
          s[j] = dot * scale;
          mx = s[j] > mx ? s[j] : mx;
        }
        if (sink) mx = std::max(mx, double(sink[h]));
        double sum = sink ? std::exp(double(sink[h]) - mx) : 0.0;  // the sink's term, its probability not kept
        for (int j = 0; j < len; j++) sum += std::exp(s[j] - mx);
        for (int j = 0; j < T; j++) p[j] = j < len ? S(std::exp(s[j] - mx) / sum) : S(0);
        for (int d = 0; d < HS; d++) {
          double y = 0;
          for (int j = 0; j < T; j++) y += double(p[j]) * qkv[((long)b * T + j) * C3 + vcol + kv_head(h) + d];
          out[((long)b * T + i) * C + h * HS + d] = S(y);
        }
      }
}

template <class S>
void attention_backward_naive(S* dqkv, const S* dout, const S* qkv, const S* att, int B, int T,
                              int C, int NH, int KVH, bool causal, S* dsink) {
  (void)causal;
  const int HS = C / NH, C3 = C + 2 * KVH * HS, kcol = C, vcol = C + KVH * HS;
  const auto kv_head = [&](int h) { return h / (NH / KVH) * HS; };
  const double scale = 1.0 / std::sqrt(double(HS));
  auto at = [&](const S* base, int b, int t, int col) { return double(base[((long)b * T + t) * C3 + col]); };
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const S* p = att + (((long)b * NH + h) * T + i) * T;
        std::vector<double> dp(T, 0.0);
        for (int j = 0; j < T; j++)
          for (int d = 0; d < HS; d++) {
            const double dy = dout[((long)b * T + i) * C + h * HS + d];
            dp[j] += dy * at(qkv, b, j, vcol + kv_head(h) + d);
            dqkv[((long)b * T + j) * C3 + vcol + kv_head(h) + d] += S(p[j] * dy);
          }
        double dot = 0, mass = 0;
        for (int j = 0; j < T; j++) dot += p[j] * dp[j], mass += p[j];
        if (dsink) dsink[h] += S(-(1.0 - mass) * dot);  // the sink: probability 1 - mass, value 0
        for (int j = 0; j < T; j++) {
          const double ds = p[j] * (dp[j] - dot) * scale;
          for (int d = 0; d < HS; d++) {
            dqkv[((long)b * T + i) * C3 + h * HS + d] += S(ds * at(qkv, b, j, kcol + kv_head(h) + d));
            dqkv[((long)b * T + j) * C3 + kcol + kv_head(h) + d] += S(ds * at(qkv, b, i, h * HS + d));
          }
        }
      }
}

#define NL_INSTANTIATE(S)                                                                        \
  template void attention_forward<S>(S*, S*, const S*, int, int, int, int, int, bool, const uint8_t*, \
                                     Precision, ScoreMap, const S*, double*);                    \
  template void attention_backward<S>(S*, S*, const S*, const S*, const S*, int, int, int, int, int, \
                                      bool, Precision, ScoreMap, S*);                            \
  template void attention_forward_naive<S>(S*, S*, const S*, int, int, int, int, int, bool,          \
                                           const uint8_t*, const S*);                            \
  template void attention_backward_naive<S>(S*, const S*, const S*, const S*, int, int, int,    \
                                            int, int, bool, S*);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

template <class S>
void attention_jvp(S* tout, S* tatt, const S* tqkv, const S* qkv, const S* att, int K, int B, int T,
                   int C, int NH, int KVH, ScoreMap sm) {
  const Heads<S> x = self_heads(qkv, B, T, C, NH, KVH), t = self_heads(tqkv, B, T, C, NH, KVH);
  const long stride = (long)B * T * x.ldq;
  heads_jvp(tout, tatt, t, stride, stride, att, x, K, sm);
}

template <class S>
void cross_attention_jvp(S* tout, S* tatt, const S* tq, const S* tkv, const S* q, const S* kv, const S* att,
                         int K, int B, int Tq, int Tk, int C, int NH) {
  const Heads<S> x = cross_heads(q, kv, B, Tq, Tk, C, NH);
  Heads<S> t = x;
  t.q = tq;
  t.k = tkv;
  t.v = tkv ? tkv + C : nullptr;
  heads_jvp(tout, tatt, t, (long)B * Tq * C, (long)B * Tk * 2 * C, att, x, K);
}

#define NL_INSTANTIATE(S)                                                                              \
  template void cross_attention_forward<S>(S*, S*, const S*, const S*, int, int, int, int, int,          \
                                           const uint8_t*);                                            \
  template void cached_attention_forward<S>(S*, S*, const S*, const S*, int, int, int, int, ScoreMap,    \
                                            const S*);                                                 \
  template void cross_attention_backward<S>(S*, S*, S*, const S*, const S*, const S*, const S*, int, int, \
                                            int, int, int);                                            \
  template void cross_attention_jvp<S>(S*, S*, const S*, const S*, const S*, const S*, const S*, int, int, \
                                       int, int, int, int);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

template void attention_jvp<float>(float*, float*, const float*, const float*, const float*, int,
                                   int, int, int, int, int, ScoreMap);
template void attention_jvp<double>(double*, double*, const double*, const double*, const double*,
                                    int, int, int, int, int, int, ScoreMap);
}  // namespace normlab::ops
