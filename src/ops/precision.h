// precision.h: the precision of the training GEMMs (train.precision): its names in configs. What each
// precision computes, and which library runs it, is ops/gemm_backend.h; this header has no library
// dependency, so the config readers (and the parser fuzzers, fuzz/) can use it alone.
#pragma once

#include <optional>
#include <string_view>

namespace normlab::ops {

enum class Precision { Fp32, Bf16 };

inline const char* to_string(Precision p) { return p == Precision::Bf16 ? "bf16" : "fp32"; }

inline std::optional<Precision> precision_from_string(std::string_view s) {
  if (s == "fp32") return Precision::Fp32;
  if (s == "bf16") return Precision::Bf16;
  return std::nullopt;
}

}  // namespace normlab::ops
