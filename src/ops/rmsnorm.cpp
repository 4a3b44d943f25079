// rmsnorm.cpp: RMSNorm forward and backward.
#include "ops/rmsnorm.h"

#include <cmath>

namespace normlab::ops {

template <class S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C, double eps) {
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; c++) {
    double dw = 0;
    for (int n = 0; n < N; n++) dw += double(dout[(long)n * C + c]) * inp[(long)n * C + c] * rstd[n];
    dweight[c] += S(dw);
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int);

}  // namespace normlab::ops
