// common.h: what every kernel file shares: the dimension legend, the BLAS GEMM wrapper templated on
// the scalar type, and the label convention of the loss.
//
// Legend: B batch, T sequence, C channels (d_model), NH heads, HS head size (C / NH), F feed-forward
// width, V vocab, N rows (B * T).
//
// Conventions, stated once for every kernel in ops/:
//   - argument order: outputs, saved activations, inputs, parameters, dimensions;
//   - backward ADDS into gradients (+=); zeroing is the caller's job. The one exception is
//     softmax_xent_backward, which turns the logits buffer into dlogits in place (documented there);
//   - _jvp (forward-mode tangent, parameters held fixed) ASSIGNS tangents (=), and takes K tangents
//     at once laid out (K, <primal shape>), so that GEMM does the work;
//   - kernels never allocate, never read the config, never know the model;
//   - every kernel is a template on the scalar type S (float for training, double for checks), with
//     explicit instantiations for both in its .cpp;
//   - reductions (means, variances, dot products of a row) accumulate in double.
#pragma once

#include <cstdint>

namespace normlab::ops {

// Label value meaning "no loss at this position" (the Hugging Face convention used in token files).
inline constexpr int32_t kIgnoreLabel = -100;

enum class Trans { No, Yes };

// Sums over rows (bias and gain gradients) walk the rows in the outer loop over a block of this
// many channels, each block owned by one thread: cache-friendly, and the same result for any
// thread count. The block's double accumulators live on the stack.
inline constexpr int kColumnBlock = 64;

// Parallel regions only pay off above this much work (elements, or multiply-adds for GEMMs): below
// it a region's fork and barrier cost more than the loop, and when another process holds a core a
// barrier can wait a whole scheduler time slice. Tiny models (tests, analysis) run serially.
inline constexpr long kParallelMinWork = 1 << 14;

// C (M x N, leading dim ldc) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C, all row-major.
// Inside an OpenMP parallel region the OpenMP build of OpenBLAS runs single-threaded, so per-head
// calls from a parallel loop do not oversubscribe the cores.
template <class S>
void gemm(Trans ta, Trans tb, int M, int N, int K, S alpha, const S* A, int lda, const S* B, int ldb,
          S beta, S* C, int ldc);

}  // namespace normlab::ops
