// matmul.h: the linear layer out = inp @ weight^T + bias (PyTorch nn.Linear layout), on GEMM, plus
// its naive triple-loop reference. Legend and conventions: ops/common.h.
#pragma once

#include "ops/gemm_backend.h"

namespace normlab::ops {

// out (N, OC); inp (N, IC); weight (OC, IC); bias (OC) or null. prec: the GEMMs' input precision
// (ops/gemm_backend.h; Bf16 rounds inp and weight to bf16, accumulates in float; double ignores it).
// weight16: the weight already rounded to bf16 (the model rounds its parameters once per step, in
// the forward or in the optimizer's pass: Model::bf16_weights_buffer), or
// null to round it here; used by Bf16 only, the same bits either way.
template <class S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int IC, int OC,
                    Precision prec = Precision::Fp32, const uint16_t* weight16 = nullptr);

// dinp (N, IC) += (or null), dweight (OC, IC) +=, dbias (OC) += (or null); dout (N, OC).
template <class S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                     int N, int IC, int OC, Precision prec = Precision::Fp32, const uint16_t* weight16 = nullptr);

// Naive references (double accumulation, no BLAS): the documentation of the math above.
template <class S>
void matmul_forward_naive(S* out, const S* inp, const S* weight, const S* bias, int N, int IC,
                          int OC);
template <class S>
void matmul_backward_naive(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                           const S* weight, int N, int IC, int OC);

// Forward-mode tangent for K tangents: tout (K, N, OC) = tinp (K, N, IC) @ W^T -- one GEMM over
// all K * N rows (parameters fixed, so the bias drops out).
template <class S>
void matmul_jvp(S* tout, const S* tinp, const S* weight, int K, int N, int IC, int OC);

}  // namespace normlab::ops
