// residual.cpp: scaled and gated residual adds: forward, backward and JVP.
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
template <class S>
void gated_residual_forward(S* out, const S* x, const S* g, const S* omega, const S* lambda, int lambda_c,
                            S alpha, long N, int C) {
#pragma omp parallel for schedule(static) if(N * C > kParallelMinWork)
  for (long n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      const long i = n * C + c;
      const S w = omega ? omega[c] : alpha;
      const S l = lambda ? lambda[lambda_c == 1 ? 0 : c] : S(1);
      out[i] = w * x[i] + l * g[i];
    }
}

template <class S>
void gated_residual_backward(S* dx, S* dg, S* domega, S* dlambda, const S* dout, const S* x, const S* g,
                             const S* omega, const S* lambda, int lambda_c, S alpha, long N, int C) {
#pragma omp parallel for schedule(static) if(N * C > kParallelMinWork)
  for (long n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      const long i = n * C + c;
      dx[i] += (omega ? omega[c] : alpha) * dout[i];
      dg[i] += (lambda ? lambda[lambda_c == 1 ? 0 : c] : S(1)) * dout[i];
    }
  // parameter gradients: sums over rows in double, a block of channels per thread (ops/common.h)
  if (!omega && !lambda) return;
  double lambda_total = 0;
#pragma omp parallel for schedule(static) reduction(+ : lambda_total) if(N * C > kParallelMinWork)
  for (int c0 = 0; c0 < C; c0 += kColumnBlock) {
    const int c1 = c0 + kColumnBlock < C ? c0 + kColumnBlock : C;
    double so[kColumnBlock] = {}, sl[kColumnBlock] = {};
    for (long n = 0; n < N; n++)
      for (int c = c0; c < c1; c++) {
        const long i = n * C + c;
        so[c - c0] += double(dout[i]) * x[i];
        sl[c - c0] += double(dout[i]) * g[i];
      }
    for (int c = c0; c < c1; c++) {
      if (omega) domega[c] += S(so[c - c0]);
      if (lambda && lambda_c != 1) dlambda[c] += S(sl[c - c0]);
      lambda_total += sl[c - c0];
    }
  }
  if (lambda && lambda_c == 1) dlambda[0] += S(lambda_total);
}

template <class S>
void gated_residual_jvp(S* tout, const S* tx, const S* tg, const S* omega, const S* lambda, int lambda_c,
                        S alpha, long N, int C) {
  gated_residual_forward(tout, tx, tg, omega, lambda, lambda_c, alpha, N, C);
}

#define NL_INSTANTIATE(S)                                                                               \
  template void gated_residual_forward<S>(S*, const S*, const S*, const S*, const S*, int, S, long, int); \
  template void gated_residual_backward<S>(S*, S*, S*, S*, const S*, const S*, const S*, const S*,        \
                                           const S*, int, S, long, int);                                \
  template void gated_residual_jvp<S>(S*, const S*, const S*, const S*, const S*, int, S, long, int);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab::ops
