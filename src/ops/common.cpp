// common.cpp: the GEMM wrapper over CBLAS (OpenBLAS, OpenMP build).
#include "ops/common.h"

#include <cblas.h>

namespace normlab::ops {

static CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::Yes ? CblasTrans : CblasNoTrans; }

template <>
void gemm<float>(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, alpha, A, lda, B, ldb, beta,
              C, ldc);
}

template <>
void gemm<double>(Trans ta, Trans tb, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), M, N, K, alpha, A, lda, B, ldb, beta,
              C, ldc);
}

}  // namespace normlab::ops
