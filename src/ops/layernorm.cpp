// layernorm.cpp: LayerNorm forward, backward and JVP (rows in parallel; parameter gradients reduced
// per channel so the result does not depend on the thread count): the double path, which is also
// the reference, and the float path with vectorized row reductions in an AVX2 and an AVX-512 build.
#include "ops/layernorm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/common.h"
#include "ops/isa.h"

namespace normlab::ops {

// dweight += sum_n dy * xhat;  dbias += sum_n dy (both paths; sums in double in row order)
template <class S>
static void layernorm_param_grads(S* dweight, S* dbias, const S* dout, const S* inp, const S* mean, const S* rstd,
                                  int N, int C) {
  if (!dweight && !dbias) return;  // a weightless site (model.qk_norm_affine = false)
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int c0 = 0; c0 < C; c0 += kColumnBlock) {
    const int width = std::min(kColumnBlock, C - c0);
    double dw[kColumnBlock] = {}, db[kColumnBlock] = {};
    for (int n = 0; n < N; n++) {
      const S* dy = dout + (long)n * C + c0;
      const S* x = inp + (long)n * C + c0;
      const S m = mean[n], s = rstd[n];
      for (int k = 0; k < width; k++) {
        dw[k] += double(dy[k] * ((x[k] - m) * s));
        db[k] += double(dy[k]);
      }
    }
    for (int k = 0; k < width; k++) {
      if (dweight) dweight[c0 + k] += S(dw[k]);
      if (dbias) dbias[c0 + k] += S(db[k]);
    }
  }
}

// The reference and the double path: every reduction in double, in channel order.
template <class S>
static void layernorm_forward_ref(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                                  int N, int C, double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    double sum = 0;
    for (int c = 0; c < C; c++) sum += x[c];
    const double m = sum / C;
    double var = 0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    const double s = 1.0 / std::sqrt(var / C + eps);
    S* y = out + (long)n * C;
    for (int c = 0; c < C; c++) {
      const S xhat = S((x[c] - m) * s);
      y[c] = bias ? xhat * weight[c] + bias[c] : xhat * weight[c];
    }
    mean[n] = S(m);
    rstd[n] = S(s);
  }
}

template <class S>
static void layernorm_backward_ref(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                                   const S* mean, const S* rstd, int N, int C) {
  // forward: y = xhat * w + b,  xhat = (x - mean) * rstd
  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * w
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    const S* dy = dout + (long)n * C;
    const double m = mean[n], s = rstd[n];
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int c = 0; c < C; c++) {
      const double dxhat = double(dy[c]) * weight[c];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * ((x[c] - m) * s);
    }
    const double mean_dxhat = sum_dxhat / C, mean_dxhat_xhat = sum_dxhat_xhat / C;
    S* dx = dinp + (long)n * C;
    for (int c = 0; c < C; c++) {
      const double xhat = (x[c] - m) * s;
      const double dxhat = double(dy[c]) * weight[c];
      dx[c] += S(s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
  layernorm_param_grads(dweight, dbias, dout, inp, mean, rstd, N, C);
}

// The float path: the same math with the row reductions vectorized (`omp simd reduction`: double
// lanes summed in a fixed order, so the result depends on the ISA's vector width but not on the
// run or the thread count). The forward rows are compiled twice, for the AVX2 baseline and for
// AVX-512 (ops/isa.h picks one); the backward only for AVX2 (an AVX-512 build of it was not faster:
// docs/BENCHMARK.md "Kernel dispatch benchmark").
[[gnu::always_inline]] static inline void layernorm_forward_row_f32(float* y, float* mean, float* rstd, const float* x,
                                                                    const float* w, const float* b, int C, double eps) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += x[c];
  const double m = sum / C;
  double var = 0;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
  const double s = 1.0 / std::sqrt(var / C + eps);
  for (int c = 0; c < C; c++) {
    const float xhat = float((x[c] - m) * s);
    y[c] = b ? xhat * w[c] + b[c] : xhat * w[c];
  }
  *mean = float(m);
  *rstd = float(s);
}

[[gnu::always_inline]] static inline void layernorm_backward_row_f32(float* dx, const float* dy, const float* x,
                                                                     const float* w, double m, double s, int C) {
  double sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
  for (int c = 0; c < C; c++) {
    const double dxhat = double(dy[c]) * w[c];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * ((x[c] - m) * s);
  }
  const double mean_dxhat = sum_dxhat / C, mean_dxhat_xhat = sum_dxhat_xhat / C;
  for (int c = 0; c < C; c++) {
    const double xhat = (x[c] - m) * s;
    const double dxhat = double(dy[c]) * w[c];
    dx[c] += float(s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

static void layernorm_forward_f32_avx2(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                       const float* bias, int N, int C, double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++)
    layernorm_forward_row_f32(out + (long)n * C, mean + n, rstd + n, inp + (long)n * C, weight, bias, C, eps);
}
[[gnu::target(NL_AVX512_TARGET)]] static void layernorm_forward_f32_avx512(
    float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N, int C,
    double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++)
    layernorm_forward_row_f32(out + (long)n * C, mean + n, rstd + n, inp + (long)n * C, weight, bias, C, eps);
}

static void layernorm_backward_f32(float* dinp, const float* dout, const float* inp, const float* weight,
                                   const float* mean, const float* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++)
    layernorm_backward_row_f32(dinp + (long)n * C, dout + (long)n * C, inp + (long)n * C, weight, mean[n],
                               rstd[n], C);
}

template <class S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                       int N, int C, double eps) {
  if constexpr (std::is_same_v<S, float>) {
    if (use_avx512()) return layernorm_forward_f32_avx512(out, mean, rstd, inp, weight, bias, N, C, eps);
    return layernorm_forward_f32_avx2(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  layernorm_forward_ref(out, mean, rstd, inp, weight, bias, N, C, eps);
}

template <class S>
void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                        const S* mean, const S* rstd, int N, int C) {
  if constexpr (std::is_same_v<S, float>) {
    layernorm_backward_f32(dinp, dout, inp, weight, mean, rstd, N, C);  // no AVX-512 variant: not faster
    layernorm_param_grads(dweight, dbias, dout, inp, mean, rstd, N, C);
    return;
  }
  layernorm_backward_ref(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, double);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);

template <class S>
void layernorm_jvp(S* tout, const S* tinp, const S* inp, const S* weight, const S* mean,
                   const S* rstd, int K, int N, int C) {
  // y = xhat * w:  txhat = rstd * (tx - mean(tx) - xhat * mean(tx * xhat));  ty = txhat * w
#pragma omp parallel for schedule(static) if((long)K * N * C > kParallelMinWork)
  for (long kn = 0; kn < (long)K * N; kn++) {
    const int n = int(kn % N);
    const S* x = inp + (long)n * C;
    const S* tx = tinp + kn * C;
    const double m = mean[n], s = rstd[n];
    double sum_tx = 0, sum_tx_xhat = 0;
    for (int c = 0; c < C; c++) {
      sum_tx += tx[c];
      sum_tx_xhat += double(tx[c]) * ((x[c] - m) * s);
    }
    const double mean_tx = sum_tx / C, mean_tx_xhat = sum_tx_xhat / C;
    S* ty = tout + kn * C;
    for (int c = 0; c < C; c++)
      ty[c] = S(s * (tx[c] - mean_tx - (x[c] - m) * s * mean_tx_xhat) * weight[c]);
  }
}

template void layernorm_jvp<float>(float*, const float*, const float*, const float*, const float*,
                                   const float*, int, int, int);
template void layernorm_jvp<double>(double*, const double*, const double*, const double*,
                                    const double*, const double*, int, int, int);
}  // namespace normlab::ops
