// sgemm_avx2.h: normlab's own float32 GEMM for AVX2 + FMA CPUs (AMD Zen 2/3, Intel Haswell to
// Alder Lake): the BLIS scheme (operands packed into cache-sized panels, a 6 x 16 register-blocked
// micro-kernel of 12 ymm accumulators) written for the shapes a Transformer step has, where the
// libraries measured here lose a third of the FMA peak (docs/BENCHMARK.md "The AVX2 machines").
// ops/gemm_backend.cpp decides where it runs; this file only computes.
#pragma once

#include "ops/common.h"

namespace normlab::ops {

// C (M x N, ldc) = alpha * op(A) op(B) + beta * C, row-major, the contract of gemm<float>
// (ops/common.h): op(A) is M x K (A stored (M, K), or (K, M) when ta), op(B) K x N (B stored (K, N),
// or (N, K) when tb). beta = 0 never reads C (it may hold NaN). Single-threaded in the calling
// thread (normlab splits GEMMs over threads itself); deterministic: the sum over K runs in a fixed
// order (blocks of kKc in order, each accumulated in float).
void sgemm_avx2(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                int ldb, float beta, float* C, int ldc);

}  // namespace normlab::ops
