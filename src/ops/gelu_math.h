// gelu_math.h: GELU's tanh form and its slope at one scalar, shared by the element-wise GELU kernels
// (ops/activation.cpp, also in their AVX-512 build) and GeGLU's gate (ops/glu.cpp).
#pragma once

#include "ops/vecmath.h"

namespace normlab::ops {

inline constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluCubic = 0.044715;

// 0.5 (1 + tanh u) = sigmoid(2u) = 1 / (1 + exp(-2u)): one exp instead of a tanh, and stable at
// both ends (exp overflowing to +inf gives exactly 0).
template <class S>
[[gnu::always_inline]] inline S gelu_value(S x) {
  const S u = S(kGeluScale) * (x + S(kGeluCubic) * x * x * x);
  return x / (S(1) + exp_of(S(-2) * u));
}

// gelu = x s with s = sigmoid(2u):  d/dx = s + x s (1 - s) 2 du/dx,
// du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <class S>
[[gnu::always_inline]] inline S gelu_slope(S x) {
  const S u = S(kGeluScale) * (x + S(kGeluCubic) * x * x * x);
  const S s = S(1) / (S(1) + exp_of(S(-2) * u));
  const S du = S(kGeluScale) * (S(1) + S(3 * kGeluCubic) * x * x);
  return s + x * s * (S(1) - s) * S(2) * du;
}

}  // namespace normlab::ops
