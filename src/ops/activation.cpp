// activation.cpp: GELU (tanh form), exact GELU (erf form) and ReLU: forward, backward, jvp; the float
// GELU loops also in an AVX-512 build (ops/isa.h).
#include "ops/activation.h"
#include "ops/common.h"

#include <cmath>
#include <type_traits>

#include "ops/isa.h"

#include "ops/gelu_math.h"
#include "ops/vecmath.h"

namespace normlab::ops {

// The float loops compiled for AVX-512 (ops/isa.h); element-wise, so the same bits as the AVX2 build.
[[gnu::target(NL_AVX512_TARGET)]] static void gelu_forward_f32_avx512(float* out, const float* inp, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) out[i] = gelu_value(inp[i]);
}
[[gnu::target(NL_AVX512_TARGET)]] static void gelu_backward_f32_avx512(float* dinp, const float* inp,
                                                                       const float* dout, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) dinp[i] += gelu_slope(inp[i]) * dout[i];
}

template <class S>
void gelu_forward(S* out, const S* inp, size_t n) {
  if constexpr (std::is_same_v<S, float>)
    if (use_avx512()) return gelu_forward_f32_avx512(out, inp, n);
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) out[i] = gelu_value(inp[i]);
}

template <class S>
void gelu_backward(S* dinp, const S* inp, const S* dout, size_t n) {
  if constexpr (std::is_same_v<S, float>)
    if (use_avx512()) return gelu_backward_f32_avx512(dinp, inp, dout, n);
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) dinp[i] += gelu_slope(inp[i]) * dout[i];
}

static constexpr double kInvSqrt2 = 0.7071067811865476;    // 1 / sqrt(2)
static constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)

// gelu_exact'(x) = Phi(x) + x phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2)), phi(x) = exp(-x^2/2) / sqrt(2 pi)
template <class S>
static S gelu_exact_derivative(S x) {
  return S(0.5) * (S(1) + std::erf(x * S(kInvSqrt2))) + x * S(kInvSqrt2Pi) * std::exp(S(-0.5) * x * x);
}

template <class S>
void gelu_exact_forward(S* out, const S* inp, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) {
    const S x = inp[i];
    out[i] = S(0.5) * x * (S(1) + std::erf(x * S(kInvSqrt2)));
  }
}

template <class S>
void gelu_exact_backward(S* dinp, const S* inp, const S* dout, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) dinp[i] += gelu_exact_derivative(inp[i]) * dout[i];
}

template void gelu_exact_forward<float>(float*, const float*, size_t);
template void gelu_exact_forward<double>(double*, const double*, size_t);
template void gelu_exact_backward<float>(float*, const float*, const float*, size_t);
template void gelu_exact_backward<double>(double*, const double*, const double*, size_t);

template <class S>
void relu_forward(S* out, const S* inp, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++) out[i] = inp[i] > S(0) ? inp[i] : S(0);
}

template <class S>
void relu_backward(S* dinp, const S* inp, const S* dout, size_t n) {
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++)
    if (inp[i] > S(0)) dinp[i] += dout[i];
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);
template void relu_forward<float>(float*, const float*, size_t);
template void relu_forward<double>(double*, const double*, size_t);
template void relu_backward<float>(float*, const float*, const float*, size_t);
template void relu_backward<double>(double*, const double*, const double*, size_t);

template <class S>
void gelu_jvp(S* tout, const S* inp, const S* tinp, size_t primal_n, int K) {
#pragma omp parallel for schedule(static) if((long)(primal_n * K) > kParallelMinWork)
  for (long i = 0; i < (long)(primal_n * K); i++) {
    tout[i] = gelu_slope(inp[i % primal_n]) * tinp[i];
  }
}

template <class S>
void gelu_exact_jvp(S* tout, const S* inp, const S* tinp, size_t primal_n, int K) {
#pragma omp parallel for schedule(static) if((long)(primal_n * K) > kParallelMinWork)
  for (long i = 0; i < (long)(primal_n * K); i++) tout[i] = gelu_exact_derivative(inp[i % primal_n]) * tinp[i];
}

template void gelu_exact_jvp<float>(float*, const float*, const float*, size_t, int);
template void gelu_exact_jvp<double>(double*, const double*, const double*, size_t, int);

template <class S>
void relu_jvp(S* tout, const S* inp, const S* tinp, size_t primal_n, int K) {
#pragma omp parallel for schedule(static) if((long)(primal_n * K) > kParallelMinWork)
  for (long i = 0; i < (long)(primal_n * K); i++) tout[i] = inp[i % primal_n] > S(0) ? tinp[i] : S(0);
}

template void gelu_jvp<float>(float*, const float*, const float*, size_t, int);
template void gelu_jvp<double>(double*, const double*, const double*, size_t, int);
template void relu_jvp<float>(float*, const float*, const float*, size_t, int);
template void relu_jvp<double>(double*, const double*, const double*, size_t, int);
}  // namespace normlab::ops
