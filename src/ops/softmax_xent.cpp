// softmax_xent.cpp: fused softmax cross-entropy forward and in-place backward.
#include "ops/softmax_xent.h"

#include <cmath>
#include <limits>

#include "ops/common.h"
#include "ops/vecmath.h"

namespace normlab::ops {

template <class S>
double softmax_xent_forward(S* lse, const S* logits, const int32_t* labels, int N, int V,
                            int64_t* count) {
  double total = 0;
  int64_t labelled = 0;
  // per-row results first (parallel), then a serial sum in row order: deterministic for any
  // thread count
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* row = logits + (long)n * V;
    S mx = -std::numeric_limits<S>::infinity();
    for (int v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) sum += exp_of(S(row[v] - mx));
    lse[n] = S(double(mx) + std::log(sum));
  }
  for (int n = 0; n < N; n++) {
    if (labels[n] == kIgnoreLabel) continue;
    total += double(lse[n]) - double(logits[(long)n * V + labels[n]]);
    labelled++;
  }
  *count = labelled;
  return total;
}

template <class S>
void softmax_xent_backward(S* logits_to_dlogits, const S* lse, const int32_t* labels, double scale,
                           int N, int V) {
#pragma omp parallel for schedule(static) if((long)N * V > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    S* row = logits_to_dlogits + (long)n * V;
    if (labels[n] == kIgnoreLabel) {
      for (int v = 0; v < V; v++) row[v] = S(0);
      continue;
    }
    const S l = lse[n], sc = S(scale);
    for (int v = 0; v < V; v++) row[v] = exp_of(S(row[v] - l)) * sc;
    row[labels[n]] -= S(scale);
  }
}

template double softmax_xent_forward<float>(float*, const float*, const int32_t*, int, int,
                                            int64_t*);
template double softmax_xent_forward<double>(double*, const double*, const int32_t*, int, int,
                                             int64_t*);
template void softmax_xent_backward<float>(float*, const float*, const int32_t*, double, int, int);
template void softmax_xent_backward<double>(double*, const double*, const int32_t*, double, int,
                                            int);

}  // namespace normlab::ops
