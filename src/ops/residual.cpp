// residual.cpp: scaled residual add, forward and backward.
#include "ops/residual.h"
#include "ops/common.h"

namespace normlab::ops {

template <class S>
void residual_forward(S* out, const S* x, const S* g, S alpha, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) out[i] = alpha * x[i] + g[i];
}

template <class S>
void residual_backward(S* dx, S* dg, const S* dout, S alpha, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) {
    dx[i] += alpha * dout[i];
    dg[i] += dout[i];
  }
}

template void residual_forward<float>(float*, const float*, const float*, float, size_t);
template void residual_forward<double>(double*, const double*, const double*, double, size_t);
template void residual_backward<float>(float*, float*, const float*, float, size_t);
template void residual_backward<double>(double*, double*, const double*, double, size_t);

template <class S>
void residual_jvp(S* tout, const S* tx, const S* tg, S alpha, size_t n) {
  residual_forward(tout, tx, tg, alpha, n);
}

template void residual_jvp<float>(float*, const float*, const float*, float, size_t);
template void residual_jvp<double>(double*, const double*, const double*, double, size_t);
}  // namespace normlab::ops
