// l2norm.cpp: the unit-sphere projection (ops/l2norm.h); every reduction in double, in channel order.
#include "ops/l2norm.h"

#include <cmath>

#include "ops/common.h"

namespace normlab::ops {

template <class S>
void l2norm_forward(S* out, S* r, const S* inp, int N, int C, double eps) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    double ss = 0;
    for (int c = 0; c < C; c++) ss += double(x[c]) * x[c];
    const double rn = 1.0 / std::sqrt(ss + eps);
    S* y = out + (long)n * C;
    for (int c = 0; c < C; c++) y[c] = S(x[c] * rn);
    r[n] = S(rn);
  }
}

// y = x r, r = (|x|^2 + eps)^(-1/2):  dx = r dy - r^3 x (x . dy)
template <class S>
void l2norm_backward(S* dinp, const S* dout, const S* inp, const S* r, int N, int C) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    const S* dy = dout + (long)n * C;
    const double rn = r[n];
    double dot = 0;
    for (int c = 0; c < C; c++) dot += double(x[c]) * dy[c];
    S* dx = dinp + (long)n * C;
    for (int c = 0; c < C; c++) dx[c] += S(rn * dy[c] - rn * rn * rn * x[c] * dot);
  }
}

template <class S>
void l2norm_jvp(S* tout, const S* tinp, const S* inp, const S* r, int K, int N, int C) {
#pragma omp parallel for schedule(static) if((long)K * N * C > kParallelMinWork)
  for (long kn = 0; kn < (long)K * N; kn++) {
    const int n = int(kn % N);
    const S* x = inp + (long)n * C;
    const S* tx = tinp + kn * C;
    const double rn = r[n];
    double dot = 0;
    for (int c = 0; c < C; c++) dot += double(x[c]) * tx[c];
    S* ty = tout + kn * C;
    for (int c = 0; c < C; c++) ty[c] = S(rn * tx[c] - rn * rn * rn * x[c] * dot);
  }
}

#define NL_INSTANTIATE(S)                                                                     \
  template void l2norm_forward<S>(S*, S*, const S*, int, int, double);                        \
  template void l2norm_backward<S>(S*, const S*, const S*, const S*, int, int);               \
  template void l2norm_jvp<S>(S*, const S*, const S*, const S*, int, int, int);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab::ops
