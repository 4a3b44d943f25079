// bench_kernels.cpp: the AVX2 and AVX-512 paths of every dispatched float kernel (ops/isa.h), A/B
// interleaved in one process on the benchmark models' real sizes (shapes a, b, c of bench_step, and the practical study's model),
// with the CPU the rest of the machine used meanwhile. Prints one JSON line per kernel and shape:
// median and least microseconds per call of each path, and their ratios. Not a test.
// Usage: bench_kernels [--rounds N] [--shape a|b|c|study]
#include <sys/resource.h>
#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/isa.h"
#include "ops/layernorm.h"
#include "ops/rmsnorm.h"
#include "ops/softmax_xent.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::ops;

namespace {

struct Shape {
  const char* name;
  int V, d, L, H, T, B;
};
constexpr Shape kShapes[] = {{"a", 50257, 768, 12, 12, 64, 4},
                             {"b", 256, 256, 6, 8, 128, 16},
                             {"c", 256, 128, 48, 4, 64, 8},
                             {"study", 256, 64, 6, 4, 128, 16}};  // docs/STUDIES.md's practical study

// Busy and total CPU time of the whole machine (/proc/stat, clock ticks).
struct MachineCpu {
  double busy = 0, total = 0;
};
MachineCpu machine_cpu() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  double user, nice, sys, idle, iowait, irq, softirq, steal;
  f >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal;
  const double busy = user + nice + sys + irq + softirq + steal;
  return {busy, busy + idle + iowait};
}
double own_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

std::vector<float> randf(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(scale * rng.normal());
  return v;
}

// Times `fn` (calls per sample chosen so a sample lasts >= 2 ms) on both paths, interleaved.
void ab(const char* kernel, const Shape& s, int rounds, const std::function<void()>& fn) {
  const bool have512 = detect_cpu().avx512;
  force_isa(Isa::Avx2);
  fn();
  int calls = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; i++) fn();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 2e-3) break;
    calls *= 2;
  }
  std::vector<double> t2, t5;
  const MachineCpu m0 = machine_cpu();
  const double own0 = own_cpu_seconds();
  const auto w0 = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; r++)
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
      if (isa == Isa::Avx512 && !have512) continue;
      force_isa(isa);
      fn();  // warm: the other path just ran
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; i++) fn();
      const double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6 / calls;
      (isa == Isa::Avx2 ? t2 : t5).push_back(us);
    }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const MachineCpu m1 = machine_cpu();
  const double own = own_cpu_seconds() - own0;
  const double tick = double(sysconf(_SC_CLK_TCK));
  // CPU used by other processes during the measurement, in cores (the machine has 2)
  const double others = std::max(0.0, ((m1.busy - m0.busy) / tick - own) / wall);
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto least = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); };
  const double a = median(t2), b = median(t5), amin = least(t2), bmin = least(t5);
  std::printf("{\"kernel\": \"%s\", \"shape\": \"%s\", \"avx2_us\": %.2f, \"avx512_us\": %.2f, \"speedup\": %.3f, "
              "\"avx2_min_us\": %.2f, \"avx512_min_us\": %.2f, \"speedup_min\": %.3f, "
              "\"rounds\": %d, \"calls_per_sample\": %d, \"threads\": %d, \"others_cores\": %.2f}\n",
              kernel, s.name, a, b, b > 0 ? a / b : 0.0, amin, bmin, bmin > 0 ? amin / bmin : 0.0, rounds, calls,
              omp_get_max_threads(), others);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 21;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--shape")) only = argv[i + 1];
  }
  std::printf("{\"isa\": \"%s\", \"reason\": \"%s\"}\n", to_string(isa_choice().isa), isa_choice().reason.c_str());
  for (const Shape& s : kShapes) {
    if (!only.empty() && only != s.name) continue;
    const int N = s.B * s.T, C = s.d, F = 4 * s.d, V = s.V;
    const auto x = randf(size_t(N) * C, 1, 2.0), w = randf(C, 2), b = randf(C, 3);
    std::vector<float> y(size_t(N) * C), mean(N), rstd(N);
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    ab("layernorm_forward", s, rounds,
       [&] { layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5); });
    ab("rmsnorm_forward", s, rounds, [&] { rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6); });

    const size_t nf = size_t(N) * F;
    const auto h = randf(nf, 5, 2.0), dh = randf(nf, 6);
    std::vector<float> gh(nf), dhin(nf);
    ab("gelu_forward", s, rounds, [&] { gelu_forward(gh.data(), h.data(), nf); });
    ab("gelu_backward", s, rounds, [&] { gelu_backward(dhin.data(), h.data(), dh.data(), nf); });

    const auto logits = randf(size_t(N) * V, 7, 3.0);
    std::vector<float> lse(N), work(logits.size());
    std::vector<int32_t> labels(N);
    for (int n = 0; n < N; n++) labels[n] = (n * 7919) % V;
    int64_t count = 0;
    ab("softmax_xent_forward", s, rounds,
       [&] { softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count); });
    ab("softmax_xent_backward", s, rounds, [&] {
      std::copy(logits.begin(), logits.end(), work.begin());  // in place: restore the logits (a copy; both paths)
      softmax_xent_backward(work.data(), lse.data(), labels.data(), 1.0 / N, N, V);
    });

    // causal self-attention of one layer (its per-head GEMMs and softmax), multi-head
    const auto qkv = randf(size_t(N) * 3 * C, 8), dout = randf(size_t(N) * C, 9);
    std::vector<float> out(size_t(N) * C), att(size_t(s.B) * s.H * s.T * s.T), datt(att.size()),
        dqkv(qkv.size());
    ab("attention_forward", s, rounds,
       [&] { attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, C, s.H, s.H, true); });
    ab("attention_backward", s, rounds, [&] {
      attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, C, s.H, s.H, true);
    });

  }
  return 0;
}
