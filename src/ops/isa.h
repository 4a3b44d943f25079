// isa.h: the one place that decides which instruction set the float element-wise kernels run on.
//
// The whole program is compiled for AVX2 + FMA (CMakeLists.txt); a few float kernels also carry an
// AVX-512 variant, compiled with `#pragma GCC target` inside their own op file and used only when
// active_isa() says so. The choice is made once per process from the CPU (cpuid: AVX-512 F, DQ, BW
// and VL; xgetbv: the OS saves the opmask and ZMM registers) and the environment variable
// NORMLAB_ISA: unset or "auto" takes the best the CPU and OS support, "avx2" forces the AVX2 path,
// "avx512" requires AVX-512 (an Error on a machine without it). `normlab --version` prints the
// choice and its reason. Results of the two paths differ only in the order of float/double
// reductions (the tolerances are stated in tests/test_isa.cpp); each path is deterministic.
#pragma once

#include <string>

namespace normlab::ops {

enum class Isa { Avx2, Avx512 };
const char* to_string(Isa isa);

// What the CPU and the operating system support.
struct CpuFeatures {
  bool avx2_fma = false;  // AVX2 and FMA, and the OS saves the YMM state (the build's baseline)
  bool avx512 = false;    // AVX-512 F, DQ, BW, VL, and the OS saves the opmask and ZMM state
};
CpuFeatures detect_cpu();

struct IsaChoice {
  Isa isa = Isa::Avx2;
  std::string reason;  // one line: why this ISA (the CPU, or NORMLAB_ISA)
};

// The choice for a given NORMLAB_ISA value (null: unset) on a CPU with these features. Throws
// Error for an unknown value or a forced ISA the CPU or OS does not support. Pure (testable with
// made-up features).
IsaChoice choose_isa(const char* env_value, const CpuFeatures& cpu);

// The process-wide choice, made the first time it is asked for (from detect_cpu() and
// NORMLAB_ISA); throws Error then if NORMLAB_ISA is bad. The CLI asks for it before any work.
const IsaChoice& isa_choice();
inline Isa active_isa() { return isa_choice().isa; }

// Tests and bench/bench_kernels only: switch the process to `isa` (both paths in one process);
// throws Error if the CPU or OS lacks it. Not thread-safe: call it between kernel calls, never
// during one.
void force_isa(Isa isa);

// OpenBLAS's kernels for this ISA: "SkylakeX" (AVX-512) or "Haswell" (AVX2 + FMA), the names its
// OPENBLAS_CORETYPE takes. OpenBLAS picks its kernels when it loads, from a table of CPU models, and
// a model newer than its table gets the SSE3 "Prescott" kernels: Debian's 0.3.21 on an Emerald Rapids
// Xeon (model 207) ran double GEMMs 2 to 3 times slower that way. So normlab does not leave the
// choice to the table: the command sets OPENBLAS_CORETYPE to this (when the user has not) and re-execs
// itself once before any work (cli/main.cpp), the Python module sets it before its extension loads
// OpenBLAS (python/normlab/__init__.py), and both run the same kernels, bit for bit.
inline const char* openblas_coretype(Isa isa) { return isa == Isa::Avx512 ? "SkylakeX" : "Haswell"; }

// Convenience for a float kernel's entry: true when its AVX-512 variant should run.
inline bool use_avx512() { return active_isa() == Isa::Avx512; }

// The target string of every AVX-512 variant (`#pragma GCC target(NL_AVX512_TARGET)` in op files):
// the four subsets detect_cpu() checks, and full-width vectors (GCC may otherwise prefer 256-bit).
#define NL_AVX512_TARGET "avx512f,avx512dq,avx512bw,avx512vl,prefer-vector-width=512"

}  // namespace normlab::ops
