// fma_peak.cpp: the machine's measured arithmetic peak, the yardstick of "GFLOP/s against the FMA
// peak" in the training-step benchmark (bench/run.sh): every thread (OpenMP, all cores) runs 12
// independent chains of fused multiply-adds on registers, no memory traffic, and the rate is
// counted as 2 FLOPs per lane per FMA. Measured separately for
//   fp32_256   float32 FMA on 256-bit vectors (AVX2 + FMA)
//   fp32_512   float32 FMA on 512-bit vectors (AVX-512F), when the CPU has it
//   bf16_dot   vdpbf16ps on 512-bit vectors (AVX512_BF16: 32 bf16 products summed into 16 floats,
//              64 FLOPs per instruction), when the CPU has it
// A core whose 512-bit FMA is split into two 256-bit halves (AMD Zen 4) shows fp32_512 = fp32_256;
// one with full 512-bit units (Intel server cores, AMD Zen 5) shows about 2x. Prints one JSON line
// {"impl": "fma_peak", "threads", "fp32_256", "fp32_512", "bf16_dot"} in GFLOP/s (null: not on
// this CPU), the best of 5 runs of about 0.2 s each. Usage: fma_peak
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace {

constexpr int kChains = 12;  // more than FMA latency x throughput, so the units never wait

__attribute__((target("avx2,fma"))) float chains_256(long iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; i++) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < kChains; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  float lanes[8], sum = 0;
  for (int i = 0; i < kChains; i++) {
    _mm256_storeu_ps(lanes, acc[i]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

// (not _mm512_reduce_add_ps: GCC 12's header warns about its own undefined upper half)
__attribute__((target("avx512f"))) float sum_lanes(const __m512* acc) {
  alignas(64) float lanes[16];
  float sum = 0;
  for (int i = 0; i < kChains; i++) {
    _mm512_store_ps(lanes, acc[i]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

__attribute__((target("avx512f"))) float chains_512(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; i++) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < kChains; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  return sum_lanes(acc);
}

__attribute__((target("avx512f,avx512bf16"))) float chains_bf16(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; i++) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(6e-8f), _mm512_set1_ps(6e-8f));
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < kChains; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  return sum_lanes(acc);
}

// GFLOP/s of `chains` (flops_per_fma per instruction) on every thread at once, best of 5
template <class F>
double peak(F chains, double flops_per_fma, long iters) {
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    int threads = 1;
#pragma omp parallel
    {
      const float s = chains(iters);
#pragma omp critical
      sink = sink + s;
#pragma omp single
      threads = omp_get_num_threads();
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops_per_fma * kChains * double(iters) * threads / sec / 1e9);
  }
  return best;
}

std::string field(const char* name, bool present, double v) {
  char buf[64];
  if (present)
    std::snprintf(buf, sizeof buf, "\"%s\": %.1f", name, v);
  else
    std::snprintf(buf, sizeof buf, "\"%s\": null", name);
  return buf;
}

}  // namespace

int main() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  if (!avx2) {
    std::fprintf(stderr, "fma_peak: this CPU has no AVX2 + FMA\n");
    return 1;
  }
  const long iters = 20'000'000;  // about 0.2 s per run at 4 GHz
  const double f256 = peak(chains_256, 2 * 8, iters);
  const double f512 = avx512 ? peak(chains_512, 2 * 16, iters) : 0;
  const double fbf = bf16 ? peak(chains_bf16, 2 * 32, iters / 2) : 0;
  std::printf("{\"impl\": \"fma_peak\", \"threads\": %d, %s, %s, %s}\n", omp_get_max_threads(),
              field("fp32_256", true, f256).c_str(), field("fp32_512", avx512, f512).c_str(),
              field("bf16_dot", bf16, fbf).c_str());
  return 0;
}
