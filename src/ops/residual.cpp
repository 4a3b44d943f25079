// residual.cpp: the gated residual add: forward, backward and JVP.
#include "ops/residual.h"
#include "ops/common.h"

namespace normlab::ops {

template <class S>
void gated_residual_forward(S* out, const S* x, const S* g, const S* omega, const S* lambda, int lambda_c,
                            S alpha, long N, int C, S beta) {
#pragma omp parallel for schedule(static) if(N * C > kParallelMinWork)
  for (long n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      const long i = n * C + c;
      const S w = omega ? omega[c] : alpha;
      const S l = lambda ? beta * lambda[lambda_c == 1 ? 0 : c] : beta;
      out[i] = w * x[i] + l * g[i];
    }
}

template <class S>
void gated_residual_backward(S* dx, S* dg, S* domega, S* dlambda, const S* dout, const S* x, const S* g,
                             const S* omega, const S* lambda, int lambda_c, S alpha, long N, int C, S beta) {
#pragma omp parallel for schedule(static) if(N * C > kParallelMinWork)
  for (long n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      const long i = n * C + c;
      dx[i] += (omega ? omega[c] : alpha) * dout[i];
      dg[i] += (lambda ? beta * lambda[lambda_c == 1 ? 0 : c] : beta) * dout[i];
    }
  // parameter gradients: sums over rows in double, a block of channels per thread (ops/common.h)
  if (!(omega && domega) && !(lambda && dlambda)) return;
  double lambda_total = 0;
#pragma omp parallel for schedule(static) reduction(+ : lambda_total) if(N * C > kParallelMinWork)
  for (int c0 = 0; c0 < C; c0 += kColumnBlock) {
    const int c1 = c0 + kColumnBlock < C ? c0 + kColumnBlock : C;
    double so[kColumnBlock] = {}, sl[kColumnBlock] = {};
    for (long n = 0; n < N; n++)
      for (int c = c0; c < c1; c++) {
        const long i = n * C + c;
        so[c - c0] += double(dout[i]) * x[i];
        sl[c - c0] += double(dout[i]) * g[i] * beta;
      }
    for (int c = c0; c < c1; c++) {
      if (omega && domega) domega[c] += S(so[c - c0]);
      if (lambda && dlambda && lambda_c != 1) dlambda[c] += S(sl[c - c0]);
      lambda_total += sl[c - c0];
    }
  }
  if (lambda && dlambda && lambda_c == 1) dlambda[0] += S(lambda_total);
}

template <class S>
void gated_residual_jvp(S* tout, const S* tx, const S* tg, const S* omega, const S* lambda, int lambda_c,
                        S alpha, long N, int C, S beta) {
  gated_residual_forward(tout, tx, tg, omega, lambda, lambda_c, alpha, N, C, beta);
}

#define NL_INSTANTIATE(S)                                                                               \
  template void gated_residual_forward<S>(S*, const S*, const S*, const S*, const S*, int, S, long, int, S); \
  template void gated_residual_backward<S>(S*, S*, S*, S*, const S*, const S*, const S*, const S*,           \
                                           const S*, int, S, long, int, S);                                \
  template void gated_residual_jvp<S>(S*, const S*, const S*, const S*, const S*, int, S, long, int, S);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab::ops
