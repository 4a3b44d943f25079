// dropout.cpp: counter-based dropout mask (splitmix64 of seed and index), eight floats at a time
// with AVX2 (the baseline ISA, ops/isa.h): the same masks as the scalar function, bit for bit.
#include "ops/dropout.h"

#include <immintrin.h>

#include <cmath>

#include "ops/common.h"

namespace normlab::ops {

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL, kMul1 = 0xbf58476d1ce4e5b9ULL, kMul2 = 0x94d049bb133111ebULL;

// Element i is kept when u >= p, u = (z >> 11) 2^-53 uniform in [0, 1) from splitmix64 of seed and
// i. u >= p is k = z >> 11 >= p 2^53, and since k is an integer, k >= ceil(p 2^53): the threshold.
uint64_t keep_threshold(double p) { return uint64_t(std::ceil(std::ldexp(p, 53))); }

bool keep(uint64_t seed, uint64_t i, uint64_t threshold) {
  uint64_t z = seed + kGolden * (i + 1);
  z = (z ^ (z >> 30)) * kMul1;
  z = (z ^ (z >> 27)) * kMul2;
  z ^= z >> 31;
  return (z >> 11) >= threshold;
}

// x * c mod 2^64 in each 64-bit lane (AVX2 multiplies 32 x 32 -> 64 bits only).
inline __m256i mul64(__m256i x, uint64_t c) {
  const __m256i c_lo = _mm256_set1_epi64x(int64_t(c & 0xffffffffULL)), c_hi = _mm256_set1_epi64x(int64_t(c >> 32));
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), c_lo), _mm256_mul_epu32(x, c_hi));
  return _mm256_add_epi64(_mm256_mul_epu32(x, c_lo), _mm256_slli_epi64(cross, 32));
}

// keep() of indices i .. i+3 as all-ones / all-zeros 64-bit lanes (threshold - 1 >= 0: p > 0, and
// k < 2^53, so the signed compare is the unsigned one).
inline __m256i keep4(uint64_t seed, uint64_t i, __m256i threshold_less_1) {
  const __m256i idx = _mm256_add_epi64(_mm256_set1_epi64x(int64_t(i + 1)), _mm256_setr_epi64x(0, 1, 2, 3));
  __m256i z = _mm256_add_epi64(_mm256_set1_epi64x(int64_t(seed)), mul64(idx, kGolden));
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), kMul1);
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), kMul2);
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
  return _mm256_cmpgt_epi64(_mm256_srli_epi64(z, 11), threshold_less_1);
}

// keep() of indices i .. i+7 as float lanes: the low halves of two 4-lane masks.
inline __m256 keep8(uint64_t seed, uint64_t i, __m256i threshold_less_1) {
  const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m256i a = _mm256_permutevar8x32_epi32(keep4(seed, i, threshold_less_1), low_halves);
  const __m256i b = _mm256_permutevar8x32_epi32(keep4(seed, i + 4, threshold_less_1), low_halves);
  return _mm256_castsi256_ps(_mm256_permute2x128_si256(a, b, 0x20));
}

// f(i, kept) for every element, blocks of eight in parallel; float takes the vector masks.
template <class S, class Scalar, class Vector>
void for_each_mask(double p, uint64_t seed, size_t n, size_t first, Scalar scalar, Vector vector) {
  const uint64_t threshold = keep_threshold(p);
  const long blocks = long(n / 8);
  const __m256i thr1 = _mm256_set1_epi64x(int64_t(threshold - 1));
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long blk = 0; blk < blocks; blk++) {
    const size_t i = size_t(blk) * 8;
    if constexpr (sizeof(S) == sizeof(float)) {
      vector(i, keep8(seed, first + i, thr1));
    } else {
      for (size_t j = i; j < i + 8; j++) scalar(j, keep(seed, first + j, threshold));
    }
  }
  for (size_t j = size_t(blocks) * 8; j < n; j++) scalar(j, keep(seed, first + j, threshold));
}

}  // namespace

template <class S>
void dropout_forward(S* out, const S* inp, double p, uint64_t seed, size_t n, size_t first) {
  if (p == 0.0) {
    for (size_t i = 0; i < n; i++) out[i] = inp[i];
    return;
  }
  const S scale = S(1.0 / (1.0 - p));
  for_each_mask<S>(
      p, seed, n, first, [&](size_t i, bool kept) { out[i] = kept ? inp[i] * scale : S(0); },
      [&](size_t i, __m256 kept) {
        if constexpr (sizeof(S) == sizeof(float)) {
          const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(inp + i), _mm256_set1_ps(scale));
          _mm256_storeu_ps(out + i, _mm256_and_ps(x, kept));
        }
      });
}

template <class S>
void dropout_backward(S* dinp, const S* dout, double p, uint64_t seed, size_t n, size_t first) {
  if (p == 0.0) {
    for (size_t i = 0; i < n; i++) dinp[i] += dout[i];
    return;
  }
  const S scale = S(1.0 / (1.0 - p));
  for_each_mask<S>(
      // one rounding (a fused multiply-add), as the compiler contracted dinp += dout * scale before
      p, seed, n, first, [&](size_t i, bool kept) { if (kept) dinp[i] = std::fma(dout[i], scale, dinp[i]); },
      [&](size_t i, __m256 kept) {
        if constexpr (sizeof(S) == sizeof(float)) {
          const __m256 d = _mm256_loadu_ps(dinp + i);  // a dropped element keeps its bits (-0 stays -0)
          const __m256 sum = _mm256_fmadd_ps(_mm256_loadu_ps(dout + i), _mm256_set1_ps(scale), d);
          _mm256_storeu_ps(dinp + i, _mm256_blendv_ps(d, sum, kept));
        }
      });
}

template void dropout_forward<float>(float*, const float*, double, uint64_t, size_t, size_t);
template void dropout_forward<double>(double*, const double*, double, uint64_t, size_t, size_t);
template void dropout_backward<float>(float*, const float*, double, uint64_t, size_t, size_t);
template void dropout_backward<double>(double*, const double*, double, uint64_t, size_t, size_t);

}  // namespace normlab::ops
