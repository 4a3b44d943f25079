// vecmath.h: element-wise math that the compiler can vectorize (no library calls in the loop):
// exp for float, by Cody-Waite range reduction and Cephes' degree-6 polynomial (relative error
// about 1 ulp on its range), and `exp_of`, which picks it for float and std::exp for double so the
// double-precision checks stay exact. NaN propagates (divergence detection relies on it);
// x > 88.72 gives +inf, x < -87.3 gives 0.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace normlab::ops {

inline float exp_fast(float x) {
  const float hi = 88.7228391f, lo = -87.3365447f;
  const bool overflow = x > hi, underflow = x < lo;
  float xc = x > hi ? hi : x;  // comparisons written so that NaN passes through unchanged
  xc = xc < lo ? lo : xc;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (exact for |n| < 2^22 in round-to-nearest), which
  // unlike std::floor compiles to plain vector adds without -ffast-math
  const float shifter = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + shifter) - shifter;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  // 2^n from its exponent bits; n reaches 128 just below the overflow bound, so that case is
  // taken as 2 * 2^127
  const bool top = n > 127.0f;
  // NaN input: n is NaN, whose conversion to int is undefined; 0 instead (p is NaN already)
  const float n_exp = top ? n - 1.0f : (n == n ? n : 0.0f);
  const int32_t e = (int32_t(n_exp) + 127) << 23;
  float result = (top ? p * 2.0f : p) * std::bit_cast<float>(e);
  result = overflow ? std::numeric_limits<float>::infinity() : result;
  result = underflow ? 0.0f : result;
  return result;
}

inline float exp_of(float x) { return exp_fast(x); }
inline double exp_of(double x) { return std::exp(x); }

}  // namespace normlab::ops
