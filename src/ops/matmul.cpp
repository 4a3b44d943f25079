// matmul.cpp: linear layer forward/backward on GEMM, and the naive references.
#include "ops/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "ops/common.h"

namespace normlab::ops {

// The GEMMs are split into one independent block per thread (single-threaded OpenBLAS calls
// inside the parallel region), along the larger free dimension: no reduction crosses threads, so
// results do not depend on the split, and small GEMMs avoid OpenBLAS's per-call synchronization.
// In bf16 (float only) the activations are rounded to bf16 once per call, each thread its share of
// the rows, and shared: otherwise a GEMM rounds its own operands, which the column split makes every
// thread do for the whole input, and the backward's two GEMMs for the same dout.
namespace {
struct Range {
  int begin, end;
};
Range thread_share(int n) {
  const int t = omp_get_thread_num(), nt = omp_get_num_threads();
  return {int(long(n) * t / nt), int(long(n) * (t + 1) / nt)};
}

// The calling thread's buffer for n rounded activations (every thread of the region it opens
// writes its share): one per thread that calls matmul, so concurrent callers never share one.
uint16_t* bf16_scratch(int which, size_t n) {
  thread_local std::vector<uint16_t> buffers[2];
  buffers[which].resize(n);
  return buffers[which].data();
}

template <class S>
constexpr bool rounds_here(Precision prec) {
  return sizeof(S) == sizeof(float) && prec == Precision::Bf16;
}

// y (OC) = W (OC, IC) x (IC) + beta y: one row through the layer, as in decoding with the KV cache.
// A GEMM would copy (pack) all of W for that one row: OpenBLAS's sgemm_incopy was 71% of `normlab
// sample` on SmolLM2 (Zen 3), a matrix-vector product reads W once.
template <class S>
void gemv(int OC, int IC, const S* W, const S* x, S beta, S* y) {
  if constexpr (std::is_same_v<S, float>)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, W, IC, x, 1, beta, y, 1);
  else
    cblas_dgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0, W, IC, x, 1, beta, y, 1);
}
}  // namespace

template <class S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int IC, int OC,
                    Precision prec, const uint16_t* weight16) {
  uint16_t* inp16 = rounds_here<S>(prec) ? bf16_scratch(0, size_t(N) * IC) : nullptr;
  // out = inp @ W^T (+ b): split rows of out (N) or its columns (OC, rows of W)
#pragma omp parallel if((long)N * IC * OC > kParallelMinWork)
  {
    if constexpr (sizeof(S) == sizeof(float))
      if (inp16) round_rows_to_bf16_together(inp16, inp, N, IC, IC);
    const bool by_rows = N >= OC;
    const Range r = thread_share(by_rows ? N : OC);
    const int rows = by_rows ? r.end - r.begin : N, cols = by_rows ? OC : r.end - r.begin;
    S* o = by_rows ? out + (long)r.begin * OC : out + r.begin;
    const long x_at = by_rows ? (long)r.begin * IC : 0, w_at = by_rows ? 0 : (long)r.begin * IC;
    if (bias) {
      const S* b = by_rows ? bias : bias + r.begin;
      for (int n = 0; n < rows; n++)
        for (int k = 0; k < cols; k++) o[(long)n * OC + k] = b[k];
    }
    if (rows == 1 && cols > 0 && !rounds_here<S>(prec))  // (bf16 rounding stays on the GEMM path)
      gemv<S>(cols, IC, weight + w_at, inp + x_at, bias ? S(1) : S(0), o);
    else if (rows > 0 && cols > 0)
      gemm_linear<S>(prec, Trans::No, Trans::Yes, rows, cols, IC, S(1), inp + x_at, IC, weight + w_at, IC,
                     bias ? S(1) : S(0), o, OC,
                     {inp16 ? inp16 + x_at : nullptr, weight16 ? weight16 + w_at : nullptr});
  }
}

template <class S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                     int N, int IC, int OC, Precision prec, const uint16_t* weight16) {
  const bool round = rounds_here<S>(prec);
  uint16_t* dout16 = round ? bf16_scratch(0, size_t(N) * OC) : nullptr;
  uint16_t* inp16 = round ? bf16_scratch(1, size_t(N) * IC) : nullptr;
  // out = inp @ W^T + b:  dinp += dout @ W;  dW += dout^T @ inp;  db += sum_n dout
#pragma omp parallel if((long)N * IC * OC > kParallelMinWork)
  {
    if constexpr (sizeof(S) == sizeof(float))
      if (round) {
        round_rows_to_bf16_together(dout16, dout, N, OC, OC);
        round_rows_to_bf16_together(inp16, inp, N, IC, IC);
      }
    if (dinp) {  // rows of dinp
      const Range r = thread_share(N);
      if (r.end > r.begin)
        gemm_linear<S>(prec, Trans::No, Trans::No, r.end - r.begin, IC, OC, S(1), dout + (long)r.begin * OC, OC,
                       weight, IC, S(1), dinp + (long)r.begin * IC, IC,
                       {round ? dout16 + (long)r.begin * OC : nullptr, weight16});
    }
    {  // rows of dW (output channels), each with its bias gradient
      const Range r = thread_share(OC);
      if (r.end > r.begin)
        gemm_linear<S>(prec, Trans::Yes, Trans::No, r.end - r.begin, IC, N, S(1), dout + r.begin, OC, inp, IC,
                       S(1), dweight + (long)r.begin * IC, IC, {round ? dout16 + r.begin : nullptr, inp16});
      if (dbias && r.end > r.begin) {  // db[o] += sum over rows n, in double, n in order (rows streamed)
        thread_local std::vector<double> sum;
        const int width = r.end - r.begin;
        sum.assign(width, 0.0);
        double* acc = sum.data();
        for (int n = 0; n < N; n++) {
          const S* row = dout + (long)n * OC + r.begin;
#pragma omp simd
          for (int k = 0; k < width; k++) acc[k] += double(row[k]);
        }
        for (int k = 0; k < width; k++) dbias[r.begin + k] += S(acc[k]);
      }
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
  template void matmul_forward<S>(S*, const S*, const S*, const S*, int, int, int, Precision,   \
                                  const uint16_t*);                                             \
  template void matmul_backward<S>(S*, S*, S*, const S*, const S*, const S*, int, int, int,     \
                                   Precision, const uint16_t*);                                 \
  template void matmul_forward_naive<S>(S*, const S*, const S*, const S*, int, int, int);       \
  template void matmul_backward_naive<S>(S*, S*, S*, const S*, const S*, const S*, int, int, int);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

template <class S>
void matmul_jvp(S* tout, const S* tinp, const S* weight, int K, int N, int IC, int OC) {
  matmul_forward<S>(tout, tinp, weight, nullptr, K * N, IC, OC);
}

template void matmul_jvp<float>(float*, const float*, const float*, int, int, int, int);
template void matmul_jvp<double>(double*, const double*, const double*, int, int, int, int);
}  // namespace normlab::ops
