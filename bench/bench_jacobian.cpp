// bench_jacobian.cpp: times the Jacobian instruments on one pre-norm GPT block (bench/run_jacobian.sh
// compares them with PyTorch and JAX, bench/jacobian_peers.py). The block is layer 0 of a 1-layer
// model loaded from a checkpoint (made by `normlab init`, so both sides use the same parameters),
// run in double precision on the input ids (7 t + 3) % 256, t = 0..T-1; the Jacobian is that of the
// block output (T, d) with respect to the residual stream entering it (T, d), all tokens.
//
//   build     the full (T d) x (T d) Jacobian, row-major, from d x d blocks (Model::block_jacobian:
//             the causal zeros skipped, the blocks by GEMMs; src/model/model_jacobian.cpp)
//   build_tangents  the same by forward mode, the path before block_jacobian: jvp_sublayers with the
//             T d identity tangents at once (column k of J = tangent output k, so J column-major;
//             "transpose_ms" is the extra cost of a row-major copy, not included in "ms"); kept to
//             time the two in one process ("speedup_vs_tangents" in build's line when both run)
//   build_svd build + all singular values (LAPACK dgesdd, values only, on the column-major J)
//   extremes  the 5 largest and 5 smallest singular values matrix-free (implicitly restarted Lanczos:
//             on J^T J for the largest, on (J^T J)^-1 by block substitution for the smallest;
//             analysis/lanczos.h)
//
// Prints one JSON line per measurement: ms (median of --iters after --warmup), every timing, and
// the 5 largest / 5 smallest singular values found (for the agreement check against the peers).
//
// Usage: bench_jacobian --checkpoint M.safetensors [--measure build|build_tangents|build_svd|extremes|all|none]
//                       [--iters 3] [--warmup 1] [--dump-jacobian J.f64]
//   --dump-jacobian writes the row-major J (float64, little-endian, (T d)^2 values) once, untimed
//   (with --measure none: only that).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "model/model.h"
#include "ops/common.h"
#include "train/checkpoint.h"
#include "util/error.h"

using namespace normlab;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU seconds all cores were busy since boot, and this process' CPU seconds: "other_cpu" over the
// timed part (as bench/torch_step.py and bench/measure.py)
double machine_busy_s() {
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return 0;
  unsigned long long v[8] = {};
  if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                  &v[5], &v[6], &v[7]) != 8)
    v[0] = 0;
  std::fclose(f);
  unsigned long long sum = 0;
  for (auto x : v) sum += x;
  return double(sum - v[3] - v[4]) / double(sysconf(_SC_CLK_TCK));
}
double self_cpu_s() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<double> head(const std::vector<double>& v, size_t k) {
  return {v.begin(), v.begin() + std::min(k, v.size())};
}
std::vector<double> tail_ascending(const std::vector<double>& desc, size_t k) {
  std::vector<double> out(desc.end() - std::min(k, desc.size()), desc.end());
  std::reverse(out.begin(), out.end());
  return out;
}

// the full Jacobian, row-major, from d x d blocks
std::vector<double> build_jacobian(const Model<double>& m, int n) {
  std::vector<double> J(size_t(n) * n);
  m.block_jacobian(J.data(), 0);
  return J;
}

// the full Jacobian by the tangents, column-major (tout row k = J column k)
std::vector<double> build_jacobian_tangents(const Model<double>& m, int n) {
  std::vector<int64_t> unit(static_cast<size_t>(n));
  for (int k = 0; k < n; k++) unit[size_t(k)] = k;
  std::vector<double> tout(size_t(n) * n);
  m.jvp_sublayers_unit(tout.data(), unit.data(), n, 0, 2);
  return tout;
}

std::vector<double> transpose(const std::vector<double>& a, int n) {
  std::vector<double> t(a.size());
  constexpr int bs = 64;
#pragma omp parallel for schedule(static)
  for (int i0 = 0; i0 < n; i0 += bs)
    for (int j0 = 0; j0 < n; j0 += bs)
      for (int i = i0; i < std::min(n, i0 + bs); i++)
        for (int j = j0; j < std::min(n, j0 + bs); j++) t[size_t(j) * n + i] = a[size_t(i) * n + j];
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string checkpoint, measure = "all", dump;
  int iters = 3, warmup = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--checkpoint")) checkpoint = argv[i + 1];
    else if (!std::strcmp(argv[i], "--measure")) measure = argv[i + 1];
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dump-jacobian")) dump = argv[i + 1];
    else {
      std::fprintf(stderr, "bench_jacobian: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const bool all = measure == "all";
  if (checkpoint.empty() || iters < 1 || warmup < 0 ||
      !(all || measure == "none" || measure == "build" || measure == "build_tangents" || measure == "build_svd" ||
        measure == "extremes")) {
    std::fprintf(stderr,
                 "usage: bench_jacobian --checkpoint M.safetensors [--measure build|build_tangents|build_svd|extremes|all|none]"
                 " [--iters 3] [--warmup 1] [--dump-jacobian J.f64]\n");
    return 2;
  }

  try {
    // the checkpoint's float32 parameters, widened into a double model of the same config
    auto mf = load_model(checkpoint);
    const ModelConfig cfg = mf->config();
    // (the peers, bench/jacobian_peers.py, rebuild a 1-layer pre-LN GELU GPT; build and build_tangents
    // take any 1-layer GPT: a Llama-family block times the block path against the tangents too)
    const bool peer_block = cfg.placement_of(0) == Placement::Pre && cfg.norm == NormKind::LayerNorm &&
                            cfg.activation == Activation::Gelu;
    if (cfg.n_layers != 1 || !cfg.causal() || (!peer_block && measure != "build" && measure != "build_tangents")) {
      std::fprintf(stderr, "bench_jacobian: expected a 1-layer GPT checkpoint (pre-LN GELU unless --measure is "
                           "build or build_tangents)\n");
      return 2;
    }
    Model<double> m(cfg);
    if (m.params().size() != mf->params().size()) throw Error("parameter tables differ");
    std::copy(mf->params().begin(), mf->params().end(), m.params().begin());

    const int T = cfg.seq_len, C = cfg.d_model, n = T * C;
    std::vector<int32_t> ids(T), labels(T, ops::kIgnoreLabel);
    for (int t = 0; t < T; t++) ids[t] = (7 * t + 3) % 256;
    m.forward(ids.data(), labels.data(), 1, T);

    std::vector<int> tokens(T);
    for (int t = 0; t < T; t++) tokens[t] = t;

    auto base = [&](const char* what) {
      return nlohmann::json{{"impl", "normlab"}, {"measurement", what}, {"n", n}, {"T", T}, {"d", C},
                            {"heads", cfg.n_heads}, {"d_ff", cfg.ff()}, {"iters", iters},
                            {"warmup", warmup}};
    };
    // runs f warmup + iters times; returns the timed ms and other_cpu over the timed runs
    auto timed = [&](const std::function<void()>& f, std::vector<double>* times) {
      for (int i = 0; i < warmup; i++) f();
      const double busy0 = machine_busy_s(), self0 = self_cpu_s(), w0 = now_ms();
      for (int i = 0; i < iters; i++) {
        const double t0 = now_ms();
        f();
        times->push_back(now_ms() - t0);
      }
      const double wall = (now_ms() - w0) * 1e-3;
      return std::max(0.0, (machine_busy_s() - busy0 - (self_cpu_s() - self0)) / wall);
    };
    auto rounded = [](std::vector<double> v) {
      for (auto& x : v) x = std::round(x * 1000) / 1000;
      return v;
    };

    if (!dump.empty()) {
      const auto J = build_jacobian(m, n);
      FILE* f = std::fopen(dump.c_str(), "wb");
      if (!f || std::fwrite(J.data(), sizeof(double), J.size(), f) != J.size() || std::fclose(f) != 0)
        throw Error("cannot write " + dump);
    }

    double tangents_ms = 0;
    if (all || measure == "build_tangents") {
      std::vector<double> times, ttimes;
      std::vector<double> J;
      const double other = timed([&] { J = build_jacobian_tangents(m, n); }, &times);
      for (int i = 0; i < iters; i++) {
        const double t0 = now_ms();
        auto Jt = transpose(J, n);
        ttimes.push_back(now_ms() - t0);
      }
      auto r = base("build_tangents");
      r["ms"] = tangents_ms = median(times);
      r["times_ms"] = rounded(times);
      r["transpose_ms"] = median(ttimes);
      r["layout"] = "column-major (tangent outputs), row-major copy = +transpose_ms";
      r["other_cpu"] = std::round(other * 100) / 100;
      std::printf("%s\n", r.dump().c_str());
      std::fflush(stdout);
    }
    if (all || measure == "build") {
      std::vector<double> times;
      std::vector<double> J;
      const double other = timed([&] { J = build_jacobian(m, n); }, &times);
      auto r = base("build");
      r["ms"] = median(times);
      r["times_ms"] = rounded(times);
      r["layout"] = "row-major";
      if (tangents_ms > 0) r["speedup_vs_tangents"] = std::round(tangents_ms / median(times) * 100) / 100;
      r["other_cpu"] = std::round(other * 100) / 100;
      std::printf("%s\n", r.dump().c_str());
      std::fflush(stdout);
    }
    if (all || measure == "build_svd") {
      std::vector<double> times, sv;
      const double other = timed([&] { sv = analysis::singular_values(build_jacobian(m, n), n, n); }, &times);
      auto r = base("build_svd");
      r["ms"] = median(times);
      r["times_ms"] = rounded(times);
      r["largest"] = head(sv, 5);
      r["smallest"] = tail_ascending(sv, 5);
      r["other_cpu"] = std::round(other * 100) / 100;
      std::printf("%s\n", r.dump().c_str());
      std::fflush(stdout);
    }
    if (all || measure == "extremes") {
      std::vector<double> times;
      analysis::ExtremeSingularValues ev;
      const double other = timed([&] { ev = analysis::extreme_singular_values(m, 0, 2, tokens, tokens, 5); },
                                 &times);
      auto r = base("extremes");
      r["ms"] = median(times);
      r["times_ms"] = rounded(times);
      r["largest"] = ev.largest;
      r["smallest"] = ev.smallest;
      r["converged"] = ev.converged;
      r["products"] = ev.products;
      r["other_cpu"] = std::round(other * 100) / 100;
      std::printf("%s\n", r.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_jacobian: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
