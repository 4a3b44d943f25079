// matmul.cpp: linear layer forward/backward on GEMM, and the naive references.
#include "ops/matmul.h"

#include <algorithm>

#include "ops/common.h"

namespace normlab::ops {

template <class S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int IC, int OC) {
  if (bias) {
    // start from the bias rows so the GEMM accumulates into them (beta = 1)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) out[(long)n * OC + o] = bias[o];
  }
  gemm<S>(Trans::No, Trans::Yes, N, OC, IC, S(1), inp, IC, weight, IC, bias ? S(1) : S(0), out, OC);
}

template <class S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                     int N, int IC, int OC) {
  // out = inp @ W^T + b:  dinp += dout @ W;  dW += dout^T @ inp;  db += sum_n dout
  if (dinp) gemm<S>(Trans::No, Trans::No, N, IC, OC, S(1), dout, OC, weight, IC, S(1), dinp, IC);
  gemm<S>(Trans::Yes, Trans::No, OC, IC, N, S(1), dout, OC, inp, IC, S(1), dweight, IC);
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += kColumnBlock) {
      const int width = std::min(kColumnBlock, OC - o0);
      double sum[kColumnBlock] = {};
      for (int n = 0; n < N; n++) {
        const S* row = dout + (long)n * OC + o0;
        for (int k = 0; k < width; k++) sum[k] += double(row[k]);
      }
      for (int k = 0; k < width; k++) dbias[o0 + k] += S(sum[k]);
    }
  }
}

template <class S>
void matmul_forward_naive(S* out, const S* inp, const S* weight, const S* bias, int N, int IC,
                          int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double sum = bias ? double(bias[o]) : 0.0;
      for (int i = 0; i < IC; i++) sum += double(inp[(long)n * IC + i]) * weight[(long)o * IC + i];
      out[(long)n * OC + o] = S(sum);
    }
}

template <class S>
void matmul_backward_naive(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                           const S* weight, int N, int IC, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      const double d = dout[(long)n * OC + o];
      for (int i = 0; i < IC; i++) {
        if (dinp) dinp[(long)n * IC + i] += S(d * weight[(long)o * IC + i]);
        dweight[(long)o * IC + i] += S(d * inp[(long)n * IC + i]);
      }
      if (dbias) dbias[o] += S(d);
    }
}

#define NL_INSTANTIATE(S)                                                                        \
  template void matmul_forward<S>(S*, const S*, const S*, const S*, int, int, int);             \
  template void matmul_backward<S>(S*, S*, S*, const S*, const S*, const S*, int, int, int);    \
  template void matmul_forward_naive<S>(S*, const S*, const S*, const S*, int, int, int);       \
  template void matmul_backward_naive<S>(S*, S*, S*, const S*, const S*, const S*, int, int, int);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab::ops
