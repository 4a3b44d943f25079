// rmsnorm.cpp: RMSNorm forward, backward and JVP: the double path, which is also the reference, and
// the float path with vectorized row reductions in an AVX2 and an AVX-512 build (ops/isa.h).
#include "ops/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/common.h"
#include "ops/isa.h"

namespace normlab::ops {

// dweight += sum_n dy * xhat (both paths; sums in double in row order)
template <class S>
static void rmsnorm_param_grads(S* dweight, const S* dout, const S* inp, const S* rstd, int N, int C) {
  if (!dweight) return;  // a weightless site (model.qk_norm_affine = false)
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int c0 = 0; c0 < C; c0 += kColumnBlock) {
    const int width = std::min(kColumnBlock, C - c0);
    double dw[kColumnBlock] = {};
    for (int n = 0; n < N; n++) {
      const S* dy = dout + (long)n * C + c0;
      const S* x = inp + (long)n * C + c0;
      const S r = rstd[n];
      for (int k = 0; k < width; k++) dw[k] += double(dy[k] * (x[k] * r));
    }
    for (int k = 0; k < width; k++) dweight[c0 + k] += S(dw[k]);
  }
}

// The reference and the double path: every reduction in double, in channel order.
template <class S>
static void rmsnorm_forward_ref(S* out, S* rstd, const S* inp, const S* weight, int N, int C, double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    double ss = 0;
    for (int c = 0; c < C; c++) ss += double(x[c]) * x[c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    S* y = out + (long)n * C;
    for (int c = 0; c < C; c++) y[c] = S(x[c] * r) * weight[c];
    rstd[n] = S(r);
  }
}

template <class S>
static void rmsnorm_backward_ref(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
                                 const S* rstd, int N, int C) {
  // forward: y = xhat * w,  xhat = x * r;   dx = r * (dxhat - xhat * mean(dxhat * xhat))
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    const S* dy = dout + (long)n * C;
    const double r = rstd[n];
    double sum = 0;
    for (int c = 0; c < C; c++) sum += double(dy[c]) * weight[c] * (x[c] * r);
    const double mean_dxhat_xhat = sum / C;
    S* dx = dinp + (long)n * C;
    for (int c = 0; c < C; c++)
      dx[c] += S(r * (double(dy[c]) * weight[c] - x[c] * r * mean_dxhat_xhat));
  }
  rmsnorm_param_grads(dweight, dout, inp, rstd, N, C);
}

// The float path: the same math with the row reductions vectorized (double lanes in a fixed order:
// the result depends on the vector width, not on the run); the forward compiled for AVX2 and for
// AVX-512, the backward for AVX2 only (an AVX-512 build of it was not faster).
// 1 / sqrt(mean(x^2) + eps) of one row, the sum of squares in double lanes
[[gnu::always_inline]] static inline double rms_inverse_f32(const float* x, int C, double eps) {
  double ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; c++) ss += double(x[c]) * x[c];
  return 1.0 / std::sqrt(ss / C + eps);
}
[[gnu::always_inline]] static inline void rmsnorm_forward_row_f32(float* y, float* rstd, const float* x,
                                                                  const float* w, int C, double eps) {
  const double r = rms_inverse_f32(x, C, eps);
  for (int c = 0; c < C; c++) y[c] = float(x[c] * r) * w[c];
  *rstd = float(r);
}

[[gnu::always_inline]] static inline void rmsnorm_backward_row_f32(float* dx, const float* dy, const float* x,
                                                                   const float* w, double r, int C) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += double(dy[c]) * w[c] * (x[c] * r);
  const double mean_dxhat_xhat = sum / C;
  for (int c = 0; c < C; c++) dx[c] += float(r * (double(dy[c]) * w[c] - x[c] * r * mean_dxhat_xhat));
}

static void rmsnorm_forward_f32_avx2(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                     double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) rmsnorm_forward_row_f32(out + (long)n * C, rstd + n, inp + (long)n * C, weight, C, eps);
}
[[gnu::target(NL_AVX512_TARGET)]] static void rmsnorm_forward_f32_avx512(float* out, float* rstd, const float* inp,
                                                                         const float* weight, int N, int C,
                                                                         double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) rmsnorm_forward_row_f32(out + (long)n * C, rstd + n, inp + (long)n * C, weight, C, eps);
}

static void rmsnorm_backward_f32(float* dinp, const float* dout, const float* inp, const float* weight,
                                 const float* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++)
    rmsnorm_backward_row_f32(dinp + (long)n * C, dout + (long)n * C, inp + (long)n * C, weight, rstd[n], C);
}

template <class S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C, double eps) {
  if constexpr (std::is_same_v<S, float>) {
    if (use_avx512()) return rmsnorm_forward_f32_avx512(out, rstd, inp, weight, N, C, eps);
    return rmsnorm_forward_f32_avx2(out, rstd, inp, weight, N, C, eps);
  }
  rmsnorm_forward_ref(out, rstd, inp, weight, N, C, eps);
}

// rstd alone (the values rmsnorm_forward saves, to the bit: the same row reduction in each path)
static void rmsnorm_rstd_f32_avx2(float* rstd, const float* inp, int N, int C, double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) rstd[n] = float(rms_inverse_f32(inp + (long)n * C, C, eps));
}
[[gnu::target(NL_AVX512_TARGET)]] static void rmsnorm_rstd_f32_avx512(float* rstd, const float* inp, int N, int C,
                                                                      double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) rstd[n] = float(rms_inverse_f32(inp + (long)n * C, C, eps));
}

template <class S>
void rmsnorm_rstd(S* rstd, const S* inp, int N, int C, double eps) {
  if constexpr (std::is_same_v<S, float>) {
    if (use_avx512()) return rmsnorm_rstd_f32_avx512(rstd, inp, N, C, eps);
    return rmsnorm_rstd_f32_avx2(rstd, inp, N, C, eps);
  }
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    double ss = 0;
    for (int c = 0; c < C; c++) ss += double(x[c]) * x[c];
    rstd[n] = S(1.0 / std::sqrt(ss / C + eps));
  }
}

template <class S>
void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
                      const S* rstd, int N, int C) {
  if constexpr (std::is_same_v<S, float>) {
    rmsnorm_backward_f32(dinp, dout, inp, weight, rstd, N, C);  // no AVX-512 variant: not faster
    rmsnorm_param_grads(dweight, dout, inp, rstd, N, C);
    return;
  }
  rmsnorm_backward_ref(dinp, dweight, dout, inp, weight, rstd, N, C);
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      double);
template void rmsnorm_rstd<float>(float*, const float*, int, int, double);
template void rmsnorm_rstd<double>(double*, const double*, int, int, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int);

template <class S>
void rmsnorm_jvp(S* tout, const S* tinp, const S* inp, const S* weight, const S* rstd, int K, int N,
                 int C) {
  // y = x * r * w:  ty = r * (tx - xhat * mean(tx * xhat)) * w
#pragma omp parallel for schedule(static) if((long)K * N * C > kParallelMinWork)
  for (long kn = 0; kn < (long)K * N; kn++) {
    const int n = int(kn % N);
    const S* x = inp + (long)n * C;
    const S* tx = tinp + kn * C;
    const double r = rstd[n];
    double sum = 0;
    for (int c = 0; c < C; c++) sum += double(tx[c]) * x[c] * r;
    const double mean_tx_xhat = sum / C;
    S* ty = tout + kn * C;
    for (int c = 0; c < C; c++) ty[c] = S(r * (tx[c] - x[c] * r * mean_tx_xhat) * weight[c]);
  }
}

template void rmsnorm_jvp<float>(float*, const float*, const float*, const float*, const float*,
                                 int, int, int);
template void rmsnorm_jvp<double>(double*, const double*, const double*, const double*,
                                  const double*, int, int, int);
}  // namespace normlab::ops
