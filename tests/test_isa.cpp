// test_isa.cpp: the runtime ISA dispatch (ops/isa.h): the choice from the CPU and NORMLAB_ISA, the
// process' reported choice, and every float kernel that has an AVX-512 variant run on both paths:
// each path against the double reference, the two paths against each other, and each path against
// itself run to run (bit for bit). Sizes sweep 1, odd sizes, non-multiples of 8 and 16 lanes, and
// the benchmark models' widths.
//
// Tolerances (eps_f = 2^-23, the float unit roundoff times 2):
//   - float path vs double reference: the float kernels compute in double and round once or twice,
//     or evaluate exp in float (exp_fast, ~1 ulp): kRefTol = 16 eps_f relative to the tensor's
//     largest magnitude plus 16 eps_f relative elementwise;
//   - AVX2 vs AVX-512: the paths differ only in the order of double-lane sums, rounded to float
//     once: kPathTol = 4 eps_f (same form). Element-wise kernels (GELU, the cross-entropy backward)
//     must agree bit for bit.
// The norms' backward has no AVX-512 variant (it was not faster); its float path is still checked
// here against the double reference on both settings.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "ops/activation.h"
#include "ops/common.h"
#include "ops/gemm_backend.h"
#include "ops/isa.h"
#include "ops/layernorm.h"
#include "ops/rmsnorm.h"
#include "ops/softmax_xent.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::ops;
using namespace normlab::test;
using Vec = std::vector<double>;
using FVec = std::vector<float>;

namespace {

constexpr double kEpsF = FLT_EPSILON;
constexpr double kRefTol = 16 * kEpsF;
constexpr double kPathTol = 4 * kEpsF;

FVec to_f(const Vec& v) { return FVec(v.begin(), v.end()); }
Vec to_d(const FVec& v) { return Vec(v.begin(), v.end()); }
// Seeded normal values that floats hold exactly: the double reference and the float kernels then
// see the same inputs.
Vec randn_f(size_t n, uint64_t seed, double scale = 1.0) { return to_d(to_f(randn(n, seed, scale))); }
double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// |a - b| <= tol * (|b| + max|b|): relative to the element and to the tensor's scale.
void expect_near_scaled(const std::string& name, const FVec& a, const Vec& b, double tol) {
  expect_close(name, to_d(a), b, tol, tol * max_abs(b));
}
void expect_bitwise(const std::string& name, const FVec& a, const FVec& b) {
  ASSERT_EQ(a.size(), b.size()) << name;
  for (size_t i = 0; i < a.size(); i++)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << name << ": index " << i << " " << a[i] << " vs " << b[i];
}

// The paths this machine can run (AVX2 always; AVX-512 if the CPU and OS support it).
std::vector<Isa> runnable_isas() {
  std::vector<Isa> v{Isa::Avx2};
  if (detect_cpu().avx512) v.push_back(Isa::Avx512);
  return v;
}

// Runs `kernel` (which returns its float outputs, concatenated) on every runnable path twice:
// checks each run against the double reference `ref`, determinism, and the paths against each other
// (bit for bit if `elementwise`). Restores the process' choice afterwards.
void check_paths(const std::string& name, const std::function<FVec()>& kernel, const Vec& ref,
                 bool elementwise) {
  const Isa saved = active_isa();
  std::vector<FVec> results;
  for (Isa isa : runnable_isas()) {
    force_isa(isa);
    const FVec first = kernel(), second = kernel();
    const std::string tag = name + " [" + to_string(isa) + "]";
    expect_bitwise(tag + " run to run", first, second);
    expect_near_scaled(tag + " vs double reference", first, ref, kRefTol);
    results.push_back(first);
  }
  force_isa(saved);
  if (results.size() < 2) return;  // an AVX2-only machine: the AVX-512 variant cannot run here
  if (elementwise) expect_bitwise(name + " avx2 vs avx512", results[0], results[1]);
  else expect_near_scaled(name + " avx2 vs avx512", results[0], to_d(results[1]), kPathTol);
}

struct Rows {
  int N, C;
};
const Rows kRows[] = {{1, 1}, {1, 2}, {3, 5}, {7, 17}, {2, 33}, {5, 127}, {4, 256}, {3, 768}};

}  // namespace

TEST(Isa, ChoiceFromCpuAndEnvironment) {
  const CpuFeatures with{true, true}, without{true, false};
  EXPECT_EQ(choose_isa(nullptr, with).isa, Isa::Avx512);
  EXPECT_EQ(choose_isa("auto", with).isa, Isa::Avx512);
  EXPECT_EQ(choose_isa(nullptr, without).isa, Isa::Avx2);
  EXPECT_EQ(choose_isa("", without).isa, Isa::Avx2);
  EXPECT_EQ(choose_isa("avx2", with).isa, Isa::Avx2);
  EXPECT_NE(choose_isa("avx2", with).reason.find("NORMLAB_ISA=avx2"), std::string::npos);
  EXPECT_EQ(choose_isa("avx512", with).isa, Isa::Avx512);
  try {
    choose_isa("avx512", without);
    ADD_FAILURE() << "NORMLAB_ISA=avx512 accepted on a CPU without AVX-512";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not support AVX-512"), std::string::npos) << e.what();
  }
  try {
    choose_isa("avx-512", with);
    ADD_FAILURE() << "an unknown NORMLAB_ISA value accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto (or unset), avx2 or avx512"), std::string::npos) << e.what();
  }
}

// The CPU feature bits against an independent reader: GCC's own cpu model (libgcc, which also checks
// that the OS saves the ZMM state).
TEST(Isa, DetectionAgreesWithCompilerRuntime) {
  __builtin_cpu_init();
  const bool gcc_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const bool gcc_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const CpuFeatures f = detect_cpu();
  EXPECT_EQ(f.avx512, gcc_avx512);
  EXPECT_EQ(f.avx2_fma, gcc_avx2);
}

// The process' choice follows NORMLAB_ISA (ctest runs this once as is and once with
// NORMLAB_ISA=avx2: the forced path is the one reported).
TEST(Isa, ProcessChoiceFollowsEnvironment) {
  const char* env = std::getenv("NORMLAB_ISA");
  const IsaChoice& c = isa_choice();
  if (env && std::string(env) == "avx2") {
    EXPECT_EQ(c.isa, Isa::Avx2);
    EXPECT_EQ(c.reason, "forced by NORMLAB_ISA=avx2");
  } else if (!env || !*env || std::string(env) == "auto") {
    EXPECT_EQ(c.isa, detect_cpu().avx512 ? Isa::Avx512 : Isa::Avx2) << c.reason;
  } else if (std::string(env) == "avx512") {
    EXPECT_EQ(c.isa, Isa::Avx512);
  }
}

// NORMLAB_ISA=avx2 switches AVX-512 off in the libraries too: oneDNN is capped at AVX2 (bf16 is
// emulated), and OpenBLAS runs AVX2 kernels when OPENBLAS_CORETYPE=Haswell is set as well (it picks
// its kernels when it loads; scripts/test.sh sets both for its second pass); without that variable
// the version line says OpenBLAS still runs AVX-512.
TEST(Isa, Avx2SwitchesTheLibrariesOffAvx512) {
  const char* env = std::getenv("NORMLAB_ISA");
  const std::string kernels = gemm_kernels();
  if (!env || std::string(env) != "avx2") {
    if (detect_cpu().avx512 && __builtin_cpu_supports("avx512bf16")) {
      EXPECT_EQ(bf16_unsupported_reason(), "") << "bf16 should run natively on this CPU: " << kernels;
    }
    return;
  }
  const std::string why = bf16_unsupported_reason();
  EXPECT_NE(why, "") << kernels;
  if (detect_cpu().avx512) {
    EXPECT_NE(why.find("NORMLAB_ISA=avx2 switches AVX-512 off"), std::string::npos) << why;
  }
  EXPECT_NE(kernels.find("bf16 on the float32 GEMM (emulated)"), std::string::npos) << kernels;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::string core = openblas_get_corename();
  for (char& ch : core) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (coretype && std::string(coretype) == "Haswell") {
    EXPECT_EQ(core, "haswell") << kernels;
    EXPECT_EQ(kernels.find("still runs AVX-512"), std::string::npos) << kernels;
  } else if (core == "cooperlake" || core == "skylakex" || core == "sapphirerapids") {
    EXPECT_NE(kernels.find("set OPENBLAS_CORETYPE=Haswell"), std::string::npos) << kernels;
  }
}

TEST(Isa, LayerNormBothPaths) {
  for (const Rows& r : kRows) {
    const int N = r.N, C = r.C;
    const Vec x = randn_f(N * C, 11 + C, 2.0), w = randn_f(C, 12), b = randn_f(C, 13), dy = randn_f(N * C, 14);
    Vec y(N * C), mean(N), rstd(N), dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    Vec fwd_ref = y;
    fwd_ref.insert(fwd_ref.end(), rstd.begin(), rstd.end());
    const FVec xf = to_f(x), wf = to_f(w), bf = to_f(b), dyf = to_f(dy);
    const std::string tag = "layernorm N=" + std::to_string(N) + " C=" + std::to_string(C);
    check_paths(tag + " forward", [&] {
      FVec yf(N * C), mf(N), rf(N);
      layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5);
      yf.insert(yf.end(), rf.begin(), rf.end());
      return yf;
    }, fwd_ref, false);
    // backward from the float forward's saved statistics (the reference gets the same ones)
    FVec yf(N * C), mf(N), rf(N);
    layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5);
    const Vec md = to_d(mf), rd = to_d(rf);
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), md.data(), rd.data(), N, C);
    Vec bwd_ref = dx;
    bwd_ref.insert(bwd_ref.end(), dw.begin(), dw.end());
    bwd_ref.insert(bwd_ref.end(), db.begin(), db.end());
    check_paths(tag + " backward", [&] {
      FVec dxf(N * C, 0.0f), dwf(C, 0.0f), dbf(C, 0.0f);
      layernorm_backward(dxf.data(), dwf.data(), dbf.data(), dyf.data(), xf.data(), wf.data(), mf.data(), rf.data(),
                         N, C);
      dxf.insert(dxf.end(), dwf.begin(), dwf.end());
      dxf.insert(dxf.end(), dbf.begin(), dbf.end());
      return dxf;
    }, bwd_ref, false);
  }
}

TEST(Isa, RmsNormBothPaths) {
  for (const Rows& r : kRows) {
    const int N = r.N, C = r.C;
    const Vec x = randn_f(N * C, 21 + C, 2.0), w = randn_f(C, 22), dy = randn_f(N * C, 24);
    Vec y(N * C), rstd(N), dx(N * C, 0.0), dw(C, 0.0);
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
    Vec fwd_ref = y;
    fwd_ref.insert(fwd_ref.end(), rstd.begin(), rstd.end());
    const FVec xf = to_f(x), wf = to_f(w), dyf = to_f(dy);
    const std::string tag = "rmsnorm N=" + std::to_string(N) + " C=" + std::to_string(C);
    Vec rstd_alone(N);  // rmsnorm_rstd (the norm folded into a GEMM, mHC's read) saves the forward's rstd
    rmsnorm_rstd(rstd_alone.data(), x.data(), N, C, 1e-6);
    EXPECT_EQ(rstd_alone, rstd) << tag;
    check_paths(tag + " forward", [&] {
      FVec yf(N * C), rf(N), rf_alone(N);
      rmsnorm_forward(yf.data(), rf.data(), xf.data(), wf.data(), N, C, 1e-6);
      rmsnorm_rstd(rf_alone.data(), xf.data(), N, C, 1e-6);
      EXPECT_EQ(rf_alone, rf) << tag << ": rmsnorm_rstd against the forward's, bit for bit";
      yf.insert(yf.end(), rf.begin(), rf.end());
      return yf;
    }, fwd_ref, false);
    FVec yf(N * C), rf(N);
    rmsnorm_forward(yf.data(), rf.data(), xf.data(), wf.data(), N, C, 1e-6);
    const Vec rd = to_d(rf);
    rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rd.data(), N, C);
    Vec bwd_ref = dx;
    bwd_ref.insert(bwd_ref.end(), dw.begin(), dw.end());
    check_paths(tag + " backward", [&] {
      FVec dxf(N * C, 0.0f), dwf(C, 0.0f);
      rmsnorm_backward(dxf.data(), dwf.data(), dyf.data(), xf.data(), wf.data(), rf.data(), N, C);
      dxf.insert(dxf.end(), dwf.begin(), dwf.end());
      return dxf;
    }, bwd_ref, false);
  }
}

TEST(Isa, GeluBothPaths) {
  for (size_t n : {size_t(1), size_t(7), size_t(17), size_t(33), size_t(1001), size_t(40000)}) {
    Vec x = randn_f(n, 31 + n, 3.0);
    x[0] = -30;  // exp overflow side: exactly 0
    const Vec dy = randn_f(n, 32);
    Vec y(n), dx(n, 0.25);
    gelu_forward(y.data(), x.data(), n);
    gelu_backward(dx.data(), x.data(), dy.data(), n);
    const FVec xf = to_f(x), dyf = to_f(dy);
    check_paths("gelu forward n=" + std::to_string(n), [&] {
      FVec yf(n);
      gelu_forward(yf.data(), xf.data(), n);
      return yf;
    }, y, true);
    check_paths("gelu backward n=" + std::to_string(n), [&] {
      FVec dxf(n, 0.25f);
      gelu_backward(dxf.data(), xf.data(), dyf.data(), n);
      return dxf;
    }, dx, true);
  }
}

TEST(Isa, SoftmaxXentBothPaths) {
  for (const Rows& r : {Rows{1, 1}, Rows{3, 5}, Rows{4, 17}, Rows{5, 257}, Rows{3, 5003}}) {
    const int N = r.N, V = r.C;
    const Vec logits = randn_f(N * V, 41 + V, 4.0);
    std::vector<int32_t> labels(N);
    for (int n = 0; n < N; n++) labels[n] = (n == 1) ? kIgnoreLabel : (n * 7919) % V;
    Vec lse(N), work = logits;
    int64_t count = 0;
    const double total = softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count);
    softmax_xent_backward(work.data(), lse.data(), labels.data(), 0.5, N, V);
    Vec fwd_ref = lse;
    fwd_ref.push_back(total);
    const FVec lf = to_f(logits);
    const std::string tag = "softmax_xent N=" + std::to_string(N) + " V=" + std::to_string(V);
    check_paths(tag + " forward", [&] {
      FVec lsef(N);
      int64_t c = 0;
      const double t = softmax_xent_forward(lsef.data(), lf.data(), labels.data(), N, V, &c);
      EXPECT_EQ(c, count);
      lsef.push_back(float(t));
      return lsef;
    }, fwd_ref, false);
    // backward from the float lse (the reference from the same values)
    FVec lsef(N);
    int64_t c = 0;
    softmax_xent_forward(lsef.data(), lf.data(), labels.data(), N, V, &c);
    const Vec lsed = to_d(lsef);
    Vec dref = logits;
    softmax_xent_backward(dref.data(), lsed.data(), labels.data(), 0.5, N, V);
    check_paths(tag + " backward", [&] {
      FVec d = lf;
      softmax_xent_backward(d.data(), lsef.data(), labels.data(), 0.5, N, V);
      return d;
    }, dref, true);
  }
}
