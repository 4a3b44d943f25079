// half.h: the two 16-bit float formats that files bring (IEEE binary16 and bfloat16) widened to
// binary32, exactly: every 16-bit value is representable, so nothing here rounds.
#pragma once

#include <cstdint>
#include <cstring>

namespace normlab {

// IEEE binary16 -> binary32, exact (subnormals, infinities and NaN included).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: mant * 2^-24
    float v = float(mant) * 0x1p-24f;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// bfloat16 is the upper half of a binary32.
inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace normlab
