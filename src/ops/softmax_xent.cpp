// softmax_xent.cpp: fused softmax cross-entropy forward and in-place backward; the float row loops
// also in an AVX-512 build (ops/isa.h).
#include "ops/softmax_xent.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/common.h"
#include "ops/isa.h"
#include "ops/vecmath.h"

namespace normlab::ops {

// One row's logsumexp (stable: subtracts the row max; the exp sum in double, vectorized).
template <class S>
[[gnu::always_inline]] static inline S xent_row_lse(const S* row, int V) {
  S mx = -std::numeric_limits<S>::infinity();
  for (int v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; v++) sum += exp_of(S(row[v] - mx));
  return S(double(mx) + std::log(sum));
}

// One row of the backward, in place: dlogits = scale * ((1 + 2 zeta lse) softmax - (1 - eps) onehot(label)
// - eps / V), zeta the z-loss coefficient.
template <class S>
[[gnu::always_inline]] static inline void xent_row_backward(S* row, S lse, int32_t label, double scale, int V,
                                                            double eps, double zeta) {
  if (label == kIgnoreLabel) {
    for (int v = 0; v < V; v++) row[v] = S(0);
    return;
  }
  const S sc = S(scale * (1 + 2 * zeta * double(lse)));
  if (eps == 0) {
    for (int v = 0; v < V; v++) row[v] = exp_of(S(row[v] - lse)) * sc;
  } else {
    const S uniform = S(scale * eps / V);
    for (int v = 0; v < V; v++) row[v] = exp_of(S(row[v] - lse)) * sc - uniform;
  }
  row[label] -= S(scale * (1 - eps));
}

// The float row loops compiled for AVX-512 (ops/isa.h).
[[gnu::target(NL_AVX512_TARGET)]] static void xent_lse_f32_avx512(float* lse, const float* logits, int N, int V) {
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
  for (int n = 0; n < N; n++) lse[n] = xent_row_lse(logits + (long)n * V, V);
}
[[gnu::target(NL_AVX512_TARGET)]] static void xent_backward_f32_avx512(float* logits_to_dlogits, const float* lse,
                                                                       const int32_t* labels, double scale, int N,
                                                                       int V, double eps, double zeta) {
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
  for (int n = 0; n < N; n++)
    xent_row_backward(logits_to_dlogits + (long)n * V, lse[n], labels[n], scale, V, eps, zeta);
}

template <class S>
static void xent_lse_rows(S* lse, const S* logits, int N, int V) {
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
  for (int n = 0; n < N; n++) lse[n] = xent_row_lse(logits + (long)n * V, V);
}

// The mean of each labelled row's logits (smoothing's uniform part), in double; 0 for other rows. In a
// buffer of this thread's kept across calls (a training step allocates nothing after the first).
template <class S>
static const std::vector<double>& labelled_row_means(const S* logits, const int32_t* labels, int N, int V) {
  thread_local std::vector<double> mean;
  mean.assign(size_t(N), 0.0);
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    if (labels[n] == kIgnoreLabel) continue;
    const S* row = logits + (long)n * V;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += double(row[v]);
    mean[size_t(n)] = sum / V;
  }
  return mean;
}

template <class S>
double softmax_xent_forward(S* lse, const S* logits, const int32_t* labels, int N, int V,
                            int64_t* count, double smoothing, double z_loss) {
  // per-row results first (parallel), then a serial sum in row order: deterministic for any
  // thread count
  if constexpr (std::is_same_v<S, float>) {
    if (use_avx512()) xent_lse_f32_avx512(lse, logits, N, V);
    else xent_lse_rows(lse, logits, N, V);
  } else {
    xent_lse_rows(lse, logits, N, V);
  }
  static const std::vector<double> none;
  const std::vector<double>& mean = smoothing > 0 ? labelled_row_means(logits, labels, N, V) : none;
  double total = 0;
  int64_t labelled = 0;
  for (int n = 0; n < N; n++) {
    if (labels[n] == kIgnoreLabel) continue;
    const double z = double(logits[(long)n * V + labels[n]]);
    total += smoothing > 0 ? double(lse[n]) - (1 - smoothing) * z - smoothing * mean[size_t(n)]
                           : double(lse[n]) - z;
    if (z_loss > 0) total += z_loss * double(lse[n]) * double(lse[n]);
    labelled++;
  }
  *count = labelled;
  return total;
}

// One row with capped logits y = c tanh(z / c): dz = dy (1 - (y / c)^2), y read before it is overwritten.
template <class S>
static void xent_row_backward_capped(S* row, S lse, int32_t label, double scale, int V, double cap, double eps,
                                     double zeta) {
  if (label == kIgnoreLabel) {
    for (int v = 0; v < V; v++) row[v] = S(0);
    return;
  }
  for (int v = 0; v < V; v++) {
    const double y = double(row[v]), t = y / cap;
    const double target = (v == label ? 1.0 - eps : 0.0) + eps / V;
    const double dy = ((1 + 2 * zeta * double(lse)) * std::exp(y - double(lse)) - target) * scale;
    row[v] = S(dy * (1.0 - t * t));
  }
}

template <class S>
void softmax_xent_backward(S* logits_to_dlogits, const S* lse, const int32_t* labels, double scale,
                           int N, int V, double softcap, double smoothing, double z_loss) {
  if (softcap > 0) {
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
    for (int n = 0; n < N; n++)
      xent_row_backward_capped(logits_to_dlogits + (long)n * V, lse[n], labels[n], scale, V, softcap, smoothing, z_loss);
    return;
  }
  if constexpr (std::is_same_v<S, float>)
    if (use_avx512()) return xent_backward_f32_avx512(logits_to_dlogits, lse, labels, scale, N, V, smoothing, z_loss);
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
  for (int n = 0; n < N; n++)
    xent_row_backward(logits_to_dlogits + (long)n * V, lse[n], labels[n], scale, V, smoothing, z_loss);
}

template <class S>
void softcap_in_place(S* x, size_t n, double c) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) x[i] = S(c * std::tanh(double(x[i]) / c));
}

template void softcap_in_place<float>(float*, size_t, double);
template void softcap_in_place<double>(double*, size_t, double);
template double softmax_xent_forward<float>(float*, const float*, const int32_t*, int, int,
                                            int64_t*, double, double);
template double softmax_xent_forward<double>(double*, const double*, const int32_t*, int, int,
                                             int64_t*, double, double);
template void softmax_xent_backward<float>(float*, const float*, const int32_t*, double, int, int, double,
                                           double, double);
template void softmax_xent_backward<double>(double*, const double*, const int32_t*, double, int, int, double,
                                            double, double);

}  // namespace normlab::ops
