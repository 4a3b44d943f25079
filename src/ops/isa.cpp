// isa.cpp: CPU feature detection (cpuid, xgetbv) and the process-wide ISA choice (ops/isa.h).
#include "ops/isa.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "util/error.h"

namespace normlab::ops {

const char* to_string(Isa isa) { return isa == Isa::Avx512 ? "avx512" : "avx2"; }

// XCR0, the register that says which register states the OS saves on a context switch. Read only
// after cpuid says OSXSAVE (xgetbv is an illegal instruction otherwise).
static uint64_t isa_read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures detect_cpu() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & bit_FMA, avx = c & bit_AVX, osxsave = c & bit_OSXSAVE;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = isa_read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;     // SSE and AVX (YMM upper halves) state
  const bool os_zmm = (xcr0 & 0xE6) == 0xE6;  // plus opmask, ZMM0-15 upper halves, ZMM16-31
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2_fma = os_ymm && fma && (b & bit_AVX2);
  f.avx512 = f.avx2_fma && os_zmm && (b & bit_AVX512F) && (b & bit_AVX512DQ) && (b & bit_AVX512BW) &&
             (b & bit_AVX512VL);
  return f;
}

IsaChoice choose_isa(const char* env_value, const CpuFeatures& cpu) {
  const std::string v = env_value ? env_value : "";
  const char* lacking =
      "this CPU or OS does not support AVX-512 (F, DQ, BW and VL, with the ZMM state saved by the OS)";
  if (v.empty() || v == "auto") {
    const std::string how = v.empty() ? "NORMLAB_ISA unset" : "NORMLAB_ISA=auto";
    if (cpu.avx512) return {Isa::Avx512, how + ": the CPU and OS support AVX-512 (F, DQ, BW, VL)"};
    return {Isa::Avx2, how + ": " + lacking};
  }
  if (v == "avx2") return {Isa::Avx2, "forced by NORMLAB_ISA=avx2"};
  if (v == "avx512") {
    if (!cpu.avx512)
      throw Error(fmt::format("NORMLAB_ISA=avx512, but {}; unset NORMLAB_ISA or set it to avx2", lacking));
    return {Isa::Avx512, "forced by NORMLAB_ISA=avx512"};
  }
  throw Error(fmt::format("NORMLAB_ISA='{}' is not a known value; use auto (or unset), avx2 or avx512", v));
}

// The one mutable copy of the choice (function-local: made on first use, thread-safe).
static IsaChoice& isa_state() {
  static IsaChoice state = choose_isa(std::getenv("NORMLAB_ISA"), detect_cpu());
  return state;
}

const IsaChoice& isa_choice() { return isa_state(); }

void force_isa(Isa isa) {
  if (isa == Isa::Avx512 && !detect_cpu().avx512)
    throw Error("force_isa(avx512): this CPU or OS does not support AVX-512");
  IsaChoice& s = isa_state();
  s.isa = isa;
  s.reason = fmt::format("forced to {} by force_isa (tests)", to_string(isa));
}

}  // namespace normlab::ops
