// gguf_quants.cpp: ggml's block formats and their dequantization to float32. Each format packs a
// block of 32 (or 256, the "K" formats) weights as small integers q with float16 scales; the value
// is d * q (symmetric formats, q centred by subtracting 8, 16 or 32) or d * q + m / d_j * q - m_j
// (with a minimum). The arithmetic is the reference's, operation for operation, in float32 and
// without fused multiply-adds (this file is compiled with -ffp-contract=off), so the values equal
// the `gguf` package's bit for bit: the test tests/torch/gguf_check.py holds them to it.
#include <cstring>
#include <fmt/format.h>

#include "io/gguf.h"
#include "util/error.h"
#include "util/half.h"

namespace normlab::gguf {

namespace {

constexpr int kQK = 32;   // weights per block of the legacy formats
constexpr int kQKK = 256; // weights per super-block of the K formats

float f16(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// Q8_0: d (f16), 32 x int8.
void q8_0(const unsigned char* b, float* y) {
  const float d = f16(b);
  for (int j = 0; j < kQK; j++) y[j] = float(int8_t(b[2 + j])) * d;
}

// Q4_0: d (f16), 16 bytes: low nibbles are weights 0..15, high nibbles 16..31; q - 8.
void q4_0(const unsigned char* b, float* y) {
  const float d = f16(b);
  const unsigned char* qs = b + 2;
  for (int j = 0; j < kQK / 2; j++) {
    y[j] = d * float((qs[j] & 0x0F) - 8);
    y[j + kQK / 2] = d * float((qs[j] >> 4) - 8);
  }
}

// Q4_1: d, m (f16), 16 bytes of nibbles as Q4_0; d q + m.
void q4_1(const unsigned char* b, float* y) {
  const float d = f16(b), m = f16(b + 2);
  const unsigned char* qs = b + 4;
  for (int j = 0; j < kQK / 2; j++) {
    y[j] = d * float(qs[j] & 0x0F) + m;
    y[j + kQK / 2] = d * float(qs[j] >> 4) + m;
  }
}

// Q5_0 / Q5_1: d (, m), u32 of fifth bits (bit j for weight j), 16 bytes of nibbles.
void q5(const unsigned char* b, float* y, bool with_min) {
  const float d = f16(b), m = with_min ? f16(b + 2) : 0.0f;
  const unsigned char* p = b + (with_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const unsigned char* qs = p + 4;
  for (int j = 0; j < kQK / 2; j++) {
    const int lo = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4), hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    if (with_min) {
      y[j] = d * float(lo) + m;
      y[j + kQK / 2] = d * float(hi) + m;
    } else {
      y[j] = d * float(lo - 16);
      y[j + kQK / 2] = d * float(hi - 16);
    }
  }
}

// The 8 six-bit scales and minimums of a Q4_K / Q5_K super-block, packed in 12 bytes.
void scale_min_k4(const unsigned char* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; j++) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// Q4_K: d, dmin (f16), 12 bytes of scales, 128 bytes of nibbles: 8 sub-blocks of 32, sub-block
// 2i from the low nibbles of bytes 32i.., 2i+1 from their high nibbles; (d sc) q - (dmin m).
// Q5_K adds 32 bytes of fifth bits before the nibbles (bit k of byte l for sub-block k).
void qk45(const unsigned char* b, float* y, bool five) {
  const float d = f16(b), dmin = f16(b + 2);
  uint8_t sc[8], mn[8];
  scale_min_k4(b + 4, sc, mn);
  const unsigned char* qh = b + 16;
  const unsigned char* qs = five ? b + 48 : b + 16;
  for (int k = 0; k < 8; k++) {
    const float dk = d * float(sc[k]), mk = dmin * float(mn[k]);
    const unsigned char* q = qs + 32 * (k / 2);
    const int shift = 4 * (k % 2);
    for (int l = 0; l < 32; l++) {
      const int v = ((q[l] >> shift) & 0x0F) | (five ? ((qh[l] >> k) & 1) << 4 : 0);
      y[32 * k + l] = dk * float(v) - mk;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales, d (f16);
// (d sc) (q - 32), one scale per 16 weights.
void q6_k(const unsigned char* b, float* y) {
  const unsigned char* ql = b;
  const unsigned char* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16(b + 208);
  for (int half = 0; half < 2; half++) {
    for (int l = 0; l < 32; l++) {
      const int q[4] = {
          ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32,
          ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32,
          ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
          ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32,
      };
      for (int r = 0; r < 4; r++) {
        const int idx = 32 * r + l;  // within this half of 128
        y[idx] = (d * float(sc[idx / 16])) * float(q[r]);
      }
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

struct Format {
  int64_t block;   // elements per block
  uint64_t bytes;  // bytes per block
};

Format format(TensorType t) {
  switch (t) {
    case TensorType::F32: return {1, 4};
    case TensorType::F16:
    case TensorType::BF16: return {1, 2};
    case TensorType::Q8_0: return {kQK, 34};
    case TensorType::Q4_0: return {kQK, 18};
    case TensorType::Q4_1: return {kQK, 20};
    case TensorType::Q5_0: return {kQK, 22};
    case TensorType::Q5_1: return {kQK, 24};
    case TensorType::Q4_K: return {kQKK, 144};
    case TensorType::Q5_K: return {kQKK, 176};
    case TensorType::Q6_K: return {kQKK, 210};
  }
  throw Error("gguf: unknown tensor type");
}

}  // namespace

std::string type_name(uint32_t t) {
  static const char* names[] = {"F32",  "F16",  "Q4_0",    "Q4_1",   "Q4_2",   "Q4_3",    "Q5_0",  "Q5_1",
                                "Q8_0", "Q8_1", "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",    "Q6_K",  "Q8_K",
                                "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
                                "I8",   "I16",  "I32",     "I64",    "F64",    "IQ1_M",   "BF16"};
  if (t < sizeof(names) / sizeof(names[0])) return names[t];
  return fmt::format("type {}", t);
}

int64_t block_length(TensorType type) { return format(type).block; }

uint64_t type_bytes(TensorType type, int64_t n) {
  const Format f = format(type);
  return uint64_t(n / f.block) * f.bytes;
}

void dequantize(TensorType type, const unsigned char* src, int64_t n, float* out) {
  const Format f = format(type);
  const int64_t blocks = n / f.block;
  for (int64_t i = 0; i < blocks; i++) {
    const unsigned char* b = src + uint64_t(i) * f.bytes;
    float* y = out + i * f.block;
    switch (type) {
      case TensorType::F32: std::memcpy(y, b, 4); break;
      case TensorType::F16: *y = f16(b); break;
      case TensorType::BF16: {
        uint16_t h;
        std::memcpy(&h, b, 2);
        *y = bf16_to_float(h);
        break;
      }
      case TensorType::Q8_0: q8_0(b, y); break;
      case TensorType::Q4_0: q4_0(b, y); break;
      case TensorType::Q4_1: q4_1(b, y); break;
      case TensorType::Q5_0: q5(b, y, false); break;
      case TensorType::Q5_1: q5(b, y, true); break;
      case TensorType::Q4_K: qk45(b, y, false); break;
      case TensorType::Q5_K: qk45(b, y, true); break;
      case TensorType::Q6_K: q6_k(b, y); break;
    }
  }
}

}  // namespace normlab::gguf
