// rmsnorm.cpp: RMSNorm forward and backward.
#include "ops/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "ops/common.h"

namespace normlab::ops {

template <class S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C, double eps) {
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
void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
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
  // dweight += sum_n dy * xhat
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

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      double);
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
