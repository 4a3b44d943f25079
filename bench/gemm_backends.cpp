// gemm_backends.cpp: which GEMM library is fastest HERE on normlab's real GEMM shapes (the linear
// layers' forward, input-gradient and weight-gradient GEMMs and the per-head attention GEMMs of the
// benchmark shapes (a), (b), (c)), float32 and bf16-in / float32-out. Not a test: the measurement
// behind the choice made in src/ops/gemm_backend.cpp.
//
// Every GEMM is called the way normlab calls it: inside one OpenMP parallel region, one
// single-threaded library call per thread on that thread's block of rows (or columns), exactly as
// src/ops/matmul.cpp and src/ops/attention.cpp split them. Backends are measured interleaved
// (A B C A B C ...) in one process, best and median of the rounds, and the load average is printed beside.
//
// Backends: OpenBLAS cblas_sgemm (the library normlab links; its cblas_sbgemm is not exported by
// Debian's build), oneDNN's matmul
// primitive (f32, and bf16 src / weights with f32 dst; primitives created once and reused),
// libxsmm 1.17 (libxsmm_sgemm / libxsmm_bsgemm; only when built with NORMLAB_BENCH_LIBXSMM), and
// BLIS (cblas_sgemm of a libblis.so given by --blis PATH, loaded privately with RTLD_DEEPBIND so its
// BLAS symbols do not clash with OpenBLAS's), normlab's own AVX2 kernel (ops/sgemm_avx2.h), and
// "openblas-1call": the whole linear-layer GEMM in one cblas_sgemm call on OpenBLAS's own threads
// (which share one packed copy of an operand; normlab's split makes each thread pack its own).
// Usage: gemm_backends [--shapes abc] [--rounds R] [--blis /path/libblis.so.4] [--bf16-only|--fp32-only]
//                      [--xsmm-bf16]
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "dnnl.hpp"
#include "ops/sgemm_avx2.h"
#ifdef NORMLAB_BENCH_LIBXSMM
#include <libxsmm.h>
#endif

namespace {

using bf16 = uint16_t;

bf16 to_bf16(float f) {  // round to nearest even (finite inputs only here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return bf16(u >> 16);
}

// One row-major GEMM C (M x N) = op(A) op(B) + beta C.
struct Gemm {
  const char* what;
  bool ta, tb;
  int M, N, K;
  int lda, ldb, ldc;
  float beta;
};

// --- oneDNN: one primitive per distinct (dtype, shape, strides, beta), created once --------------
dnnl::engine& dnnl_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
struct DnnlPrim {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, scratch;
  std::string impl;
};
DnnlPrim make_dnnl(const Gemm& g, int M, int N, bool bf) {
  using dt = dnnl::memory::data_type;
  const dt in = bf ? dt::bf16 : dt::f32;
  dnnl::memory::desc a({M, g.K}, in, g.ta ? dnnl::memory::dims{1, g.lda} : dnnl::memory::dims{g.lda, 1});
  dnnl::memory::desc b({g.K, N}, in, g.tb ? dnnl::memory::dims{1, g.ldb} : dnnl::memory::dims{g.ldb, 1});
  dnnl::memory::desc c({M, N}, dt::f32, {g.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // one per thread, as src/ops/gemm_backend.cpp
  if (g.beta != 0) {
    dnnl::post_ops po;
    po.append_sum(g.beta);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, dnnl_engine());
  return {dnnl::matmul(pd), a, b, c, pd.scratchpad_desc(), pd.impl_info_str()};
}
std::map<std::tuple<const char*, int, int, bool>, DnnlPrim> dnnl_cache;  // filled before timing

// --- BLIS through its own cblas, privately loaded ---------------------------------------------------
using cblas_sgemm_fn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float,
                                const float*, int, const float*, int, float, float*, int);
cblas_sgemm_fn blis_sgemm = nullptr;

enum class Lib { OpenBlas, Dnnl, Blis, Xsmm, Avx2, OpenBlasOneCall };
const char* lib_name(Lib l, bool bf) {
  switch (l) {
    case Lib::OpenBlas: return "openblas-sgemm";
    case Lib::Dnnl: return bf ? "onednn-bf16" : "onednn-f32";
    case Lib::Blis: return "blis-sgemm";
    case Lib::Xsmm: return bf ? "libxsmm-bsgemm" : "libxsmm-sgemm";
    case Lib::Avx2: return "normlab-avx2";
    case Lib::OpenBlasOneCall: return "openblas-1call";
  }
  return "?";
}

// One thread's block: rows [r0, r1) of C (split_rows) or columns.
void call_block(Lib lib, bool bf, const Gemm& g, int m, int n, const void* A, const void* B, float* C) {
  const CBLAS_TRANSPOSE ta = g.ta ? CblasTrans : CblasNoTrans, tb = g.tb ? CblasTrans : CblasNoTrans;
  switch (lib) {
    case Lib::OpenBlas:
    case Lib::OpenBlasOneCall:
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, g.K, 1.0f, (const float*)A, g.lda, (const float*)B, g.ldb,
                    g.beta, C, g.ldc);
      break;
    case Lib::Dnnl: {
      DnnlPrim& p = dnnl_cache.at({g.what, m, n, bf});
      thread_local dnnl::stream s(dnnl_engine());
      thread_local std::vector<uint8_t> scratch;
      scratch.resize(std::max<size_t>(1, p.scratch.get_size()));
      dnnl::memory ma(p.a, dnnl_engine(), const_cast<void*>(A)), mb(p.b, dnnl_engine(), const_cast<void*>(B)),
          mc(p.c, dnnl_engine(), C), ms(p.scratch, dnnl_engine(), scratch.data());
      p.prim.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}});
      s.wait();
      break;
    }
    case Lib::Avx2:
      normlab::ops::sgemm_avx2(g.ta ? normlab::ops::Trans::Yes : normlab::ops::Trans::No,
                               g.tb ? normlab::ops::Trans::Yes : normlab::ops::Trans::No, m, n, g.K, 1.0f,
                               (const float*)A, g.lda, (const float*)B, g.ldb, g.beta, C, g.ldc);
      break;
    case Lib::Blis:
      blis_sgemm(CblasRowMajor, ta, tb, m, n, g.K, 1.0f, (const float*)A, g.lda, (const float*)B, g.ldb, g.beta,
                 C, g.ldc);
      break;
    case Lib::Xsmm: {
#ifdef NORMLAB_BENCH_LIBXSMM
      // column-major: C^T (n x m) = op(B)^T op(A)^T
      const char tA = g.tb ? 'T' : 'N', tB = g.ta ? 'T' : 'N';
      const libxsmm_blasint M_ = n, N_ = m, K_ = g.K, la = g.ldb, lb = g.lda, lc = g.ldc;
      const float one = 1.0f;
      if (bf)
        libxsmm_bsgemm(&tA, &tB, &M_, &N_, &K_, &one, (const libxsmm_bfloat16*)B, &la,
                       (const libxsmm_bfloat16*)A, &lb, &g.beta, C, &lc);
      else
        libxsmm_sgemm(&tA, &tB, &M_, &N_, &K_, &one, (const float*)B, &la, (const float*)A, &lb, &g.beta, C, &lc);
#endif
      break;
    }
  }
}

// Split as src/ops/matmul.cpp does: by rows of C when M >= N, else by columns.
struct Block {
  int m, n;
  long a_off, b_off, c_off;
};
Block block_of(const Gemm& g, int t, int nt) {
  const bool rows = g.M >= g.N;
  const int len = rows ? g.M : g.N, b0 = int(long(len) * t / nt), b1 = int(long(len) * (t + 1) / nt);
  if (rows) return {b1 - b0, g.N, g.ta ? b0 : (long)b0 * g.lda, 0, (long)b0 * g.ldc};
  return {g.M, b1 - b0, 0, g.tb ? (long)b0 * g.ldb : b0, b0};
}

struct Operands {
  std::vector<float> a, b, c;
  std::vector<bf16> a16, b16;
};
Operands operands(const Gemm& g) {
  Operands o;
  o.a.resize(size_t(g.ta ? g.K : g.M) * g.lda);
  o.b.resize(size_t(g.tb ? g.N : g.K) * g.ldb);
  o.c.assign(size_t(g.M) * g.ldc, 0.0f);
  for (size_t i = 0; i < o.a.size(); i++) o.a[i] = float(int((i * 2654435761u) % 2001) - 1000) * 1e-3f;
  for (size_t i = 0; i < o.b.size(); i++) o.b[i] = float(int((i * 40503u + 7) % 2001) - 1000) * 1e-3f;
  for (float x : o.a) o.a16.push_back(to_bf16(x));
  for (float x : o.b) o.b16.push_back(to_bf16(x));
  return o;
}

// Attention's per-(batch, head) GEMMs: B*NH independent small GEMMs in one parallel loop.
struct Problem {
  Gemm g;
  int batch;  // > 1: that many independent copies (heads), one per loop iteration
};

double run_once(Lib lib, bool bf, const Problem& p, Operands& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const void* A = bf ? (const void*)o.a16.data() : (const void*)o.a.data();
  const void* B = bf ? (const void*)o.b16.data() : (const void*)o.b.data();
  const size_t es = bf ? 2 : 4;
  if (p.batch == 1 && lib == Lib::OpenBlasOneCall) {  // one call, OpenBLAS's own threads
    call_block(Lib::OpenBlas, bf, p.g, p.g.M, p.g.N, A, B, o.c.data());
  } else if (p.batch == 1) {
#pragma omp parallel
    {
      const Block k = block_of(p.g, omp_get_thread_num(), omp_get_num_threads());
      if (k.m > 0 && k.n > 0)
        call_block(lib, bf, p.g, k.m, k.n, (const char*)A + k.a_off * es, (const char*)B + k.b_off * es,
                   o.c.data() + k.c_off);
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int h = 0; h < p.batch; h++) call_block(lib, bf, p.g, p.g.M, p.g.N, A, B, o.c.data());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<Problem> problems(char shape) {
  // (N rows, C, F, V, T, NH, B)
  int N, C, V, T, NH, Bt;
  if (shape == 'a') N = 256, C = 768, V = 50257, T = 64, NH = 12, Bt = 4;
  else if (shape == 'b') N = 2048, C = 256, V = 256, T = 128, NH = 8, Bt = 16;
  else N = 512, C = 128, V = 256, T = 64, NH = 4, Bt = 8;
  const int F = 4 * C, HS = C / NH;
  std::vector<Problem> out;
  static std::vector<std::string> names;  // owns the labels (the dnnl cache keys on the pointer)
  names.reserve(1000);
  auto linear = [&](const char* tag, int IC, int OC) {
    auto name = [&](const char* kind) {
      names.push_back(std::string(1, shape) + " " + tag + " " + kind + " " + std::to_string(N) + "x" +
                      std::to_string(IC) + "->" + std::to_string(OC));
      return names.back().c_str();
    };
    out.push_back({{name("fwd"), false, true, N, OC, IC, IC, IC, OC, 0.0f}, 1});   // out = x W^T
    out.push_back({{name("dinp"), false, false, N, IC, OC, OC, IC, IC, 1.0f}, 1}); // dx += dy W
    out.push_back({{name("dW"), true, false, OC, IC, N, OC, IC, IC, 1.0f}, 1});    // dW += dy^T x
  };
  linear("qkv", C, 3 * C);
  linear("proj", C, C);
  linear("fc1", C, F);
  linear("fc2", F, C);
  linear("logits", C, V);
  auto head = [&](const char* tag, bool ta, bool tb, int M, int Nn, int K, int lda, int ldb, int ldc, float beta) {
    names.push_back(std::string(1, shape) + " att " + tag);
    out.push_back({{names.back().c_str(), ta, tb, M, Nn, K, lda, ldb, ldc, beta}, Bt * NH});
  };
  head("qk^T", false, true, T, T, HS, 3 * C, 3 * C, T, 0.0f);
  head("Pv", false, false, T, HS, T, T, 3 * C, C, 0.0f);
  head("P^T dy", true, false, T, HS, T, T, C, 3 * C, 1.0f);
  return out;
}

double load1() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes = "abc", blis_path;
  int rounds = 7;
  bool do_fp32 = true, do_bf16 = true;
  [[maybe_unused]] bool xsmm_bf16 = false;  // used only with libxsmm
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--blis") && i + 1 < argc) blis_path = argv[++i];
    else if (!std::strcmp(argv[i], "--bf16-only")) do_fp32 = false;
    else if (!std::strcmp(argv[i], "--fp32-only")) do_bf16 = false;
    else if (!std::strcmp(argv[i], "--xsmm-bf16")) xsmm_bf16 = true;
    else {
      std::fprintf(stderr, "usage: gemm_backends [--shapes abc] [--rounds R] [--blis PATH] [--bf16-only|--fp32-only] [--xsmm-bf16]\n");
      return 1;
    }
  }
  if (rounds < 1 || shapes.find_first_not_of("abc") != std::string::npos) {
    std::fprintf(stderr, "gemm_backends: --rounds must be >= 1 and --shapes letters of abc\n");
    return 1;
  }
  std::vector<std::pair<Lib, bool>> libs;
  if (do_fp32) libs.insert(libs.end(), {{Lib::OpenBlas, false}, {Lib::Dnnl, false}, {Lib::Avx2, false}, {Lib::OpenBlasOneCall, false}});
  if (!blis_path.empty()) {
    void* h = dlopen(blis_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      std::fprintf(stderr, "gemm_backends: cannot load BLIS '%s': %s\n", blis_path.c_str(), dlerror());
      return 1;
    }
    blis_sgemm = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    auto arch_id = (int (*)())dlsym(h, "bli_arch_query_id");
    auto arch_str = (const char* (*)(int))dlsym(h, "bli_arch_string");
    if (!blis_sgemm) return std::fprintf(stderr, "gemm_backends: no cblas_sgemm in %s\n", blis_path.c_str()), 1;
    if (arch_id && arch_str) std::printf("BLIS config dispatched: %s\n", arch_str(arch_id()));
    if (do_fp32) libs.push_back({Lib::Blis, false});
  }
#ifdef NORMLAB_BENCH_LIBXSMM
  libxsmm_init();
  if (do_fp32) libs.push_back({Lib::Xsmm, false});
  // libxsmm_bsgemm measured 0.2-2 GFLOP/s on every shape here (no JIT kernel for these shapes:
  // a reference loop); it makes a run take an hour, so only on request.
  if (do_bf16 && xsmm_bf16) libs.push_back({Lib::Xsmm, true});
#endif
  // No OpenBLAS bf16 column: Debian's 0.3.21 is built without BUILD_BFLOAT16, so cblas_sbgemm is
  // declared in cblas.h but not exported by libopenblas.so (nm -D shows no sbgemm symbol).
  if (do_bf16) libs.push_back({Lib::Dnnl, true});
  std::printf("OpenBLAS: %s (core %s); threads %d; load average at start %.2f\n", openblas_get_config(),
              openblas_get_corename(), omp_get_max_threads(), load1());
  std::printf("%-34s", "GEMM (GFLOP/s best / median)");
  for (auto [l, bf] : libs) std::printf(" %16s", lib_name(l, bf));
  std::printf("  load\n");
  for (char s : shapes)
    for (const Problem& p : problems(s)) {
      Operands o = operands(p.g);
      // oneDNN primitives for every block size this split produces, created before timing
      for (auto [l, bf] : libs)
        if (l == Lib::Dnnl)
          for (int nt : {1, omp_get_max_threads()})
            for (int t = 0; t < nt; t++) {
              const Block k = p.batch == 1 ? block_of(p.g, t, nt) : Block{p.g.M, p.g.N, 0, 0, 0};
              auto key = std::make_tuple(p.g.what, k.m, k.n, bool(bf));
              if (k.m > 0 && k.n > 0 && !dnnl_cache.count(key)) dnnl_cache.emplace(key, make_dnnl(p.g, k.m, k.n, bf));
            }
      const double flops = 2.0 * p.g.M * p.g.N * p.g.K * p.batch;
      int reps = std::max(1, int(2e8 / flops));  // ~1 ms per timed sample at 200 GFLOP/s
      std::vector<std::vector<double>> t(libs.size());
      for (size_t i = 0; i < libs.size(); i++) run_once(libs[i].first, libs[i].second, p, o);  // warm-up
      for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < libs.size(); i++) {
          double total = 0;
          for (int k = 0; k < reps; k++) total += run_once(libs[i].first, libs[i].second, p, o);
          t[i].push_back(total / reps);
        }
      // best / median of the rounds: on a shared machine the best round is the closest to the
      // library's own rate, the median shows how much the neighbours took
      std::printf("%-34s", p.g.what);
      for (auto& v : t) {
        std::sort(v.begin(), v.end());
        std::printf(" %7.1f /%7.1f", flops / v.front() / 1e9, flops / v[v.size() / 2] / 1e9);
      }
      std::printf("  %.2f\n", load1());
      std::fflush(stdout);
    }
  // which oneDNN kernels ran (impl_info_str of each primitive)
  std::map<std::string, int> impls;
  for (auto& [k, p] : dnnl_cache) impls[p.impl]++;
  for (auto& [name, n] : impls) std::printf("oneDNN implementation: %s (%d primitives)\n", name.c_str(), n);
  return 0;
}
