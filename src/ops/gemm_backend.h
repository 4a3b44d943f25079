// gemm_backend.h: the one place that decides which library runs a GEMM and in which precision:
// the precision policy of mixed-precision training (train.precision) and the library choice, made
// by measurement (bench/gemm_backends.cpp, docs/BENCHMARK.md):
//   - fp32: by the CPU's ISA, each where it measured faster: with AVX-512 the linear layers on oneDNN's
//     f32 matmul and attention's per-head GEMMs on OpenBLAS; with AVX2 only the linear layers on
//     OpenBLAS and attention on normlab's own kernel (gemm_f32_linear, gemm_f32_attention).
//   - bf16: both operands rounded to bfloat16 (round to nearest even), products accumulated in
//     float32 by oneDNN's matmul primitive (brgemm, AVX512_BF16 instructions), result in float32.
//     Everything else (master weights, optimizer state, norms, softmax, loss) stays float32, and
//     double GEMMs (the analysis) are never affected.
// The CPU is checked at run time: without AVX512_BF16 (where oneDNN 2.6 has no bf16 matmul at all)
// the bf16 GEMM is emulated on the float32 GEMM with inputs rounded to bf16: the same numerics up to
// the summation order, no speed-up, never an illegal instruction (bf16_unsupported_reason says so).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ops/common.h"
#include "ops/precision.h"

namespace normlab::ops {

// Empty when bf16 GEMMs run natively here (oneDNN, AVX512_BF16); otherwise one sentence naming the
// CPU's ISA and saying that they are emulated.
std::string bf16_unsupported_reason();

// One line for `normlab --version`: which kernels run the GEMMs here (OpenBLAS' core, oneDNN's
// ISA or the emulation). NORMLAB_ISA=avx2 also caps oneDNN at AVX2; OpenBLAS chose its kernels when
// it loaded, so the line says when OPENBLAS_CORETYPE=Haswell is needed to switch AVX-512 off there.
std::string gemm_kernels();

// The kernels OpenBLAS chose when it loaded ("SkylakeX", "Haswell", "Prescott", ...): its
// OPENBLAS_CORETYPE, or its own pick from the CPU model (ops/isa.h openblas_coretype says why normlab
// sets the variable).
std::string openblas_core();

// float -> bfloat16 bits, round to nearest even; NaN stays NaN, +-Inf stays +-Inf.
inline uint16_t round_to_bf16(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return __builtin_bit_cast(float, uint32_t(h) << 16); }

// Operands already rounded to bf16 (round_to_bf16 bits), each laid out exactly as the float operand
// it stands for (same shape, same leading dimension): a model's weights, rounded once per step, or
// activations rounded once and shared by the GEMMs (and threads) that read them. Null: round here.
struct Bf16Copies {
  const uint16_t* a = nullptr;
  const uint16_t* b = nullptr;
};

// C (M x N, ldc) = alpha * op(A) op(B) + beta * C, row-major, as gemm<float> (ops/common.h) but
// with A and B rounded to bf16 and float32 accumulation (oneDNN, or the emulation above).
// Single-threaded inside an OpenMP parallel region (as normlab calls it), deterministic for a fixed
// machine and thread count. An operand given in `pre` is not read in float: the same bits as
// rounding it here.
void gemm_bf16(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc, Bf16Copies pre = {});

// dst[i] = round_to_bf16(src[i]) for n floats, over the OpenMP threads (called outside a parallel
// region)
void round_to_bf16(uint16_t* dst, const float* src, size_t n);

// The same, for this thread's share of the rows of a rows x cols block (leading dimension ld, the
// same for dst) when called by every thread of a parallel region; returns after a barrier, so the
// whole block is rounded when any thread goes on. Outside a parallel region: the whole block.
void round_rows_to_bf16_together(uint16_t* dst, const float* src, int rows, int cols, int ld);

// float32 C = alpha op(A) op(B) + beta C for the linear layers, single-threaded in the calling
// thread, deterministic for a fixed machine and thread count. The library is chosen by the ISA
// (ops/isa.h), each where it measured faster on the model's own GEMMs (bench/gemm_backends,
// docs/BENCHMARK.md "Which GEMM library"):
//   - AVX-512 (Zen 4): oneDNN's matmul primitive, operands read in place: 5-19% faster than OpenBLAS
//     on every linear-layer GEMM of the benchmark shapes, measured quiet;
//   - AVX2 only (Zen 3): OpenBLAS sgemm. oneDNN 2.6 runs its older `gemm:jit` there, half as fast on
//     the weight gradients of b (57 against 115 GFLOP/s) and on a's fc2 input gradient (55 against
//     153), and never more than ~15% ahead anywhere (the whole step of b: 907 -> 783 ms, mean of 3).
void gemm_f32_linear(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                     int ldb, float beta, float* C, int ldc);

// The same contract for attention's small per-head GEMMs (T x T x head size and T x head size x T):
// OpenBLAS sgemm on AVX-512; on AVX2 only normlab's own kernel (ops/sgemm_avx2.h), about 2x
// OpenBLAS's rate on q k^T and 1.4x on P v at shape b's sizes, where OpenBLAS's packing and call
// overhead cost as much as its arithmetic.
void gemm_f32_attention(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                        const float* B, int ldb, float beta, float* C, int ldc);

// The GEMMs of the linear layers (ops/matmul.cpp): float Bf16 -> gemm_bf16, float Fp32 ->
// gemm_f32_linear, double (the analysis) -> gemm<double> (OpenBLAS).
template <class S>
inline void gemm_linear(Precision p, Trans ta, Trans tb, int M, int N, int K, S alpha, const S* A, int lda,
                        const S* B, int ldb, S beta, S* C, int ldc, Bf16Copies pre = {}) {
  if constexpr (sizeof(S) == sizeof(float)) {
    if (p == Precision::Bf16) return gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, pre);
    return gemm_f32_linear(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  gemm<S>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The other GEMMs of the kernels in ops/ (attention's): precision Bf16 sends float GEMMs to
// gemm_bf16, Fp32 ones to gemm_f32_attention, every double GEMM to gemm<S> (OpenBLAS).
template <class S>
inline void gemm_with(Precision p, Trans ta, Trans tb, int M, int N, int K, S alpha, const S* A, int lda,
                      const S* B, int ldb, S beta, S* C, int ldc) {
  if constexpr (sizeof(S) == sizeof(float)) {
    if (p == Precision::Bf16) return gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return gemm_f32_attention(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  gemm<S>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace normlab::ops
