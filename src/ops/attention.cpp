// attention.cpp: attention forward/backward, one (batch, head) pair per OpenMP iteration, each doing
// its small GEMMs on strided views of qkv (single-threaded inside the parallel loop).
#include "ops/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "ops/common.h"
#include "ops/vecmath.h"

namespace normlab::ops {

// Softmax of one row of scores in place over the first `len` entries; entries from len on are
// masked (probability 0). Stable: subtracts the row max.
template <class S>
static void softmax_row(S* row, int len, int T) {
  S mx = -std::numeric_limits<S>::infinity();
  for (int j = 0; j < len; j++) mx = row[j] > mx ? row[j] : mx;
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < len; j++) {
    const S e = exp_of(S(row[j] - mx));
    row[j] = e;
    sum += e;
  }
  const S inv = S(1.0 / sum);
  for (int j = 0; j < len; j++) row[j] *= inv;
  for (int j = len; j < T; j++) row[j] = S(0);
}

template <class S>
void attention_forward(S* out, S* att, const S* qkv, int B, int T, int C, int NH, bool causal,
                       const uint8_t* key_mask) {
  const int HS = C / NH, C3 = 3 * C;
  const S scale = S(1.0 / std::sqrt(double(HS)));
#pragma omp parallel for schedule(static) if((long)B * T * T * C > kParallelMinWork)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const S* q = qkv + (long)b * T * C3 + h * HS;
    const S* k = q + C;
    const S* v = q + 2 * C;
    S* p = att + (long)bh * T * T;
    // S = q k^T / sqrt(HS);  P = softmax(S) row by row (row i sees keys 0..i when causal)
    gemm<S>(Trans::No, Trans::Yes, T, T, HS, scale, q, C3, k, C3, S(0), p, T);
    if (key_mask) {  // padded keys: -inf before the softmax, probability 0 after it
      const uint8_t* m = key_mask + (long)b * T;
      for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
          if (!m[j]) p[(long)i * T + j] = -std::numeric_limits<S>::infinity();
    }
    for (int i = 0; i < T; i++) softmax_row(p + (long)i * T, causal ? i + 1 : T, T);
    // y = P v, written into this head's columns of out
    gemm<S>(Trans::No, Trans::No, T, HS, T, S(1), p, T, v, C3, S(0), out + (long)b * T * C + h * HS, C);
  }
}

template <class S>
void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B, int T,
                        int C, int NH, bool causal) {
  (void)causal;  // masked probabilities are 0, so their score gradients come out 0 by themselves
  const int HS = C / NH, C3 = 3 * C;
  const S scale = S(1.0 / std::sqrt(double(HS)));
#pragma omp parallel for schedule(static) if((long)B * T * T * C > kParallelMinWork)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const S* q = qkv + (long)b * T * C3 + h * HS;
    const S* k = q + C;
    const S* v = q + 2 * C;
    S* dq = dqkv + (long)b * T * C3 + h * HS;
    S* dk = dq + C;
    S* dv = dq + 2 * C;
    const S* p = att + (long)bh * T * T;
    const S* dy = dout + (long)b * T * C + h * HS;
    S* dp = datt + (long)bh * T * T;
    // y = P v:  dP = dy v^T;  dv += P^T dy
    gemm<S>(Trans::No, Trans::Yes, T, T, HS, S(1), dy, C, v, C3, S(0), dp, T);
    gemm<S>(Trans::Yes, Trans::No, T, HS, T, S(1), p, T, dy, C, S(1), dv, C3);
    // P = softmax(S):  dS = P * (dP - sum_j P dP) ; fold in the 1/sqrt(HS) of S = q k^T * scale
    for (int i = 0; i < T; i++) {
      const S* pr = p + (long)i * T;
      S* dr = dp + (long)i * T;
      double dot = 0;
      for (int j = 0; j < T; j++) dot += double(pr[j]) * dr[j];
      for (int j = 0; j < T; j++) dr[j] = S(pr[j] * (dr[j] - dot) * scale);
    }
    // S = q k^T * scale:  dq += dS k;  dk += dS^T q
    gemm<S>(Trans::No, Trans::No, T, HS, T, S(1), dp, T, k, C3, S(1), dq, C3);
    gemm<S>(Trans::Yes, Trans::No, T, HS, T, S(1), dp, T, q, C3, S(1), dk, C3);
  }
}

template <class S>
void attention_forward_naive(S* out, S* att, const S* qkv, int B, int T, int C, int NH,
                             bool causal, const uint8_t* key_mask) {
  const int HS = C / NH, C3 = 3 * C;
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
          const S* k = qkv + ((long)b * T + j) * C3 + C + h * HS;
          double dot = 0;
          for (int d = 0; d < HS; d++) dot += double(q[d]) * k[d];
          s[j] = dot * scale;
          mx = s[j] > mx ? s[j] : mx;
        }
        double sum = 0;
        for (int j = 0; j < len; j++) sum += std::exp(s[j] - mx);
        for (int j = 0; j < T; j++) p[j] = j < len ? S(std::exp(s[j] - mx) / sum) : S(0);
        for (int d = 0; d < HS; d++) {
          double y = 0;
          for (int j = 0; j < T; j++) y += double(p[j]) * qkv[((long)b * T + j) * C3 + 2 * C + h * HS + d];
          out[((long)b * T + i) * C + h * HS + d] = S(y);
        }
      }
}

template <class S>
void attention_backward_naive(S* dqkv, const S* dout, const S* qkv, const S* att, int B, int T,
                              int C, int NH, bool causal) {
  (void)causal;
  const int HS = C / NH, C3 = 3 * C;
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
            dp[j] += dy * at(qkv, b, j, 2 * C + h * HS + d);
            dqkv[((long)b * T + j) * C3 + 2 * C + h * HS + d] += S(p[j] * dy);
          }
        double dot = 0;
        for (int j = 0; j < T; j++) dot += p[j] * dp[j];
        for (int j = 0; j < T; j++) {
          const double ds = p[j] * (dp[j] - dot) * scale;
          for (int d = 0; d < HS; d++) {
            dqkv[((long)b * T + i) * C3 + h * HS + d] += S(ds * at(qkv, b, j, C + h * HS + d));
            dqkv[((long)b * T + j) * C3 + C + h * HS + d] += S(ds * at(qkv, b, i, h * HS + d));
          }
        }
      }
}

#define NL_INSTANTIATE(S)                                                                        \
  template void attention_forward<S>(S*, S*, const S*, int, int, int, int, bool, const uint8_t*); \
  template void attention_backward<S>(S*, S*, const S*, const S*, const S*, int, int, int, int, \
                                      bool);                                                     \
  template void attention_forward_naive<S>(S*, S*, const S*, int, int, int, int, bool,          \
                                           const uint8_t*);                                      \
  template void attention_backward_naive<S>(S*, const S*, const S*, const S*, int, int, int,    \
                                            int, bool);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

template <class S>
void attention_jvp(S* tout, S* tatt, const S* tqkv, const S* qkv, const S* att, int K, int B, int T,
                   int C, int NH) {
  const int HS = C / NH, C3 = 3 * C;
  const S scale = S(1.0 / std::sqrt(double(HS)));
  for (int kt = 0; kt < K; kt++) {
    const S* tq_all = tqkv + (long)kt * B * T * C3;
    S* ty_all = tout + (long)kt * B * T * C;
#pragma omp parallel for schedule(static) if((long)B * T * T * C > kParallelMinWork)
    for (int bh = 0; bh < B * NH; bh++) {
      const int b = bh / NH, h = bh % NH;
      const S* q = qkv + (long)b * T * C3 + h * HS;
      const S* k = q + C;
      const S* v = q + 2 * C;
      const S* tq = tq_all + (long)b * T * C3 + h * HS;
      const S* tk = tq + C;
      const S* tv = tq + 2 * C;
      const S* p = att + (long)bh * T * T;
      S* tp = tatt + (long)bh * T * T;
      S* ty = ty_all + (long)b * T * C + h * HS;
      gemm<S>(Trans::No, Trans::Yes, T, T, HS, scale, tq, C3, k, C3, S(0), tp, T);
      gemm<S>(Trans::No, Trans::Yes, T, T, HS, scale, q, C3, tk, C3, S(1), tp, T);
      for (int i = 0; i < T; i++) {
        const S* pr = p + (long)i * T;
        S* tr = tp + (long)i * T;
        double dot = 0;
        for (int j = 0; j < T; j++) dot += double(pr[j]) * tr[j];
        for (int j = 0; j < T; j++) tr[j] = S(pr[j] * (tr[j] - dot));  // masked: P = 0 gives 0
      }
      gemm<S>(Trans::No, Trans::No, T, HS, T, S(1), tp, T, v, C3, S(0), ty, C);
      gemm<S>(Trans::No, Trans::No, T, HS, T, S(1), p, T, tv, C3, S(1), ty, C);
    }
  }
}

template void attention_jvp<float>(float*, float*, const float*, const float*, const float*, int,
                                   int, int, int, int);
template void attention_jvp<double>(double*, double*, const double*, const double*, const double*,
                                    int, int, int, int, int);
}  // namespace normlab::ops
