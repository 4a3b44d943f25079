// gemm_backend.cpp: the bf16 GEMM on oneDNN's matmul primitive (one primitive per distinct shape,
// created once and reused), its fallback for CPUs without AVX512_BF16 (oneDNN 2.6 has no bf16
// matmul there at all: primitive creation fails), the capability check, and the precision names.
#include "ops/gemm_backend.h"

#include <omp.h>

#include <algorithm>
#include <cblas.h>
#include <cctype>
#include <dnnl.hpp>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "ops/isa.h"
#include "ops/sgemm_avx2.h"
#include "util/error.h"

namespace normlab::ops {

namespace {

// oneDNN's ISA, capped at AVX2 first when NORMLAB_ISA=avx2 switches AVX-512 off (ops/isa.h): once,
// before oneDNN creates anything. Its ISA values are cumulative bit masks; the effective ISA also
// honours DNNL_MAX_CPU_ISA (how the tests simulate an older CPU).
unsigned onednn_isa() {
  static const unsigned isa = [] {
    if (isa_choice().isa == Isa::Avx2) dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    return unsigned(dnnl::get_effective_cpu_isa());
  }();
  return isa;
}

// oneDNN's CPU engine, made after onednn_isa() has capped the ISA (it must come first)
dnnl::engine& onednn_engine() {
  static dnnl::engine e = [] {
    onednn_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// The primitive of one GEMM: (bf16, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta). bf16 operands are
// either given rounded (read in place: their own lda, ldb) or packed to contiguous copies first (lda,
// ldb are then the packed ones); f32 ones are read in place.
using PrimKey = std::tuple<bool, bool, bool, int, int, int, int, int, int, float, float>;
struct Prim {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, scratch;
};

Prim make_prim(const PrimKey& k) {
  const auto [bf16, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = k;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  const dt in = bf16 ? dt::bf16 : dt::f32;
  // op(A) is M x K: stored (M, K) row-major, or (K, M) when transposed; op(B) likewise (K, N) / (N, K)
  dnnl::memory::desc a({M, K}, in, ta ? dims{1, lda} : dims{lda, 1});
  dnnl::memory::desc b({K, N}, in, tb ? dims{1, ldb} : dims{ldb, 1});
  dnnl::memory::desc c({M, N}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  // Our scratchpad, one per thread: the library's own is shared by every execution of a primitive
  // (Debian's build does not enable concurrent execution), so two threads running the same shape
  // at once would overwrite each other's packed blocks (found by test_bf16: runs differed).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, onednn_engine());
  return {dnnl::matmul(pd), a, b, c, pd.scratchpad_desc()};
}

// C = alpha op(A) op(B) + beta C on oneDNN's matmul, one primitive per key shared by all threads
// (execution is thread-safe in oneDNN), run single-threaded in the calling thread
void run_matmul(const PrimKey& key, const void* A, const void* B, float* C) {
  const auto [bf16, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta] = key;
  if (K == 0) {  // oneDNN refuses K = 0; C = beta * C
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(long)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(long)i * ldc + j];
    return;
  }
  static std::mutex mutex;
  static std::map<PrimKey, Prim> cache;
  const Prim* prim;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, make_prim(key)).first;
    prim = &it->second;
  }
  thread_local dnnl::stream stream(onednn_engine());
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max<size_t>(1, prim->scratch.get_size()));
  dnnl::memory ma(prim->a, onednn_engine(), const_cast<void*>(A)), mb(prim->b, onednn_engine(), const_cast<void*>(B)),
      mc(prim->c, onednn_engine(), C), ms(prim->scratch, onednn_engine(), scratch.data());
  prim->prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                              {DNNL_ARG_SCRATCHPAD, ms}});
  stream.wait();
}

// Rounds the stored rows x cols block of a (leading dimension ld) into out (leading dimension ldo).
// The one loop body of both ISA variants (the AVX-512 one is 1.5x faster in cache, measured).
inline void round_block(uint16_t* out, int ldo, const float* a, int rows, int cols, int ld) {
  for (int r = 0; r < rows; r++) {
    const float* row = a + (long)r * ld;
    uint16_t* o = out + (long)r * ldo;
    for (int c = 0; c < cols; c++) o[c] = round_to_bf16(row[c]);
  }
}
[[gnu::target(NL_AVX512_TARGET)]] void round_block_avx512(uint16_t* out, int ldo, const float* a, int rows, int cols,
                                                           int ld) {
  round_block(out, ldo, a, rows, cols, ld);
}
void round_block_dispatch(uint16_t* out, int ldo, const float* a, int rows, int cols, int ld) {
  if (use_avx512()) return round_block_avx512(out, ldo, a, rows, cols, ld);
  round_block(out, ldo, a, rows, cols, ld);
}

// A packed (contiguous) bf16 copy of the block
void pack_bf16(uint16_t* out, const float* a, int rows, int cols, int ld) {
  round_block_dispatch(out, cols, a, rows, cols, ld);
}

// The fallback: a block rounded to bf16 (or given rounded, a16) but kept as float, packed, for the
// float32 GEMM (products of bf16 numbers are exact in float, so this is the bf16 GEMM up to the
// summation order).
void pack_bf16_as_float(float* out, const float* a, const uint16_t* a16, int rows, int cols, int ld) {
  for (int r = 0; r < rows; r++) {
    float* o = out + (long)r * cols;
    for (int c = 0; c < cols; c++)
      o[c] = bf16_to_float(a16 ? a16[(long)r * ld + c] : round_to_bf16(a[(long)r * ld + c]));
  }
}

// Decided once per process (oneDNN reads DNNL_MAX_CPU_ISA on first use).
bool bf16_native() {
  static const bool native = bf16_unsupported_reason().empty();
  return native;
}

const char* onednn_isa_name(unsigned isa) {
  const auto has = [isa](dnnl::cpu_isa i) { return (isa & unsigned(i)) == unsigned(i); };
  return has(dnnl::cpu_isa::avx512_core_bf16) ? "AVX-512 with AVX512_BF16"
         : has(dnnl::cpu_isa::avx512_core)    ? "AVX-512"
         : has(dnnl::cpu_isa::avx2)           ? "AVX2"
                                              : "pre-AVX2";
}
}  // namespace

std::string bf16_unsupported_reason() {
  const unsigned isa = onednn_isa(), bf16 = unsigned(dnnl::cpu_isa::avx512_core_bf16);
  if ((isa & bf16) == bf16) return "";
  const std::string why = isa_choice().isa == Isa::Avx2 && detect_cpu().avx512
                              ? "NORMLAB_ISA=avx2 switches AVX-512 off, AVX512_BF16 included"
                              : "this CPU has no AVX512_BF16 instructions";
  return fmt::format(
      "{} (oneDNN sees {}): bf16 GEMMs are emulated on the float32 GEMM (inputs rounded to bf16, "
      "float32 accumulation): the same numerics, no speed-up",
      why, onednn_isa_name(isa));
}

std::string openblas_core() { return openblas_get_corename(); }

std::string gemm_kernels() {
  const std::string core = openblas_core();
  std::string s = fmt::format("float32 on {}, bf16 on {}",
                              use_avx512() ? fmt::format("oneDNN ({}, linear layers) and OpenBLAS ({} kernels, attention)",
                                                         onednn_isa_name(onednn_isa()), core)
                                           : fmt::format("OpenBLAS ({} kernels, linear layers) and normlab's AVX2 "
                                                         "kernel (attention)", core),
                              bf16_unsupported_reason().empty()
                                  ? fmt::format("oneDNN ({})", onednn_isa_name(onednn_isa()))
                                  : std::string("the float32 GEMM (emulated)"));
  // OpenBLAS picks its kernels when it loads, before normlab runs: only its own variable moves it
  std::string lower = core;
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  const bool blas_avx512 = lower == "skylakex" || lower == "cooperlake" || lower == "sapphirerapids";
  if (isa_choice().isa == Isa::Avx2 && blas_avx512)
    s += "; OpenBLAS still runs AVX-512: set OPENBLAS_CORETYPE=Haswell as well to switch it off";
  return s;
}

void round_to_bf16(uint16_t* dst, const float* src, size_t n) {
  constexpr size_t kChunk = 1 << 16;  // rounded as 1-row blocks of this many floats
  const long chunks = long((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; c++) {
    const size_t begin = size_t(c) * kChunk, len = std::min(kChunk, n - begin);
    round_block_dispatch(dst + begin, int(len), src + begin, 1, int(len), int(len));
  }
}

void round_rows_to_bf16_together(uint16_t* dst, const float* src, int rows, int cols, int ld) {
  const int t = omp_get_thread_num(), nt = omp_get_num_threads();
  const int begin = int(long(rows) * t / nt), end = int(long(rows) * (t + 1) / nt);
  round_block_dispatch(dst + (long)begin * ld, ld, src + (long)begin * ld, end - begin, cols, ld);
#pragma omp barrier
}

void gemm_bf16(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc, Bf16Copies pre) {
  if (M <= 0 || N <= 0) return;
  const bool tA = ta == Trans::Yes, tB = tb == Trans::Yes;
  const int arows = tA ? K : M, acols = tA ? M : K, brows = tB ? N : K, bcols = tB ? K : N;
  if (!bf16_native()) {
    thread_local std::vector<float> af, bf;
    af.resize(size_t(M) * K);
    bf.resize(size_t(K) * N);
    pack_bf16_as_float(af.data(), A, pre.a, arows, acols, lda);
    pack_bf16_as_float(bf.data(), B, pre.b, brows, bcols, ldb);
    gemm<float>(ta, tb, M, N, K, alpha, af.data(), acols, bf.data(), bcols, beta, C, ldc);
    return;
  }
  // operands not given rounded are packed here: per thread, grown as needed (they stop allocating
  // after the first step)
  thread_local std::vector<uint16_t> a16, b16;
  const uint16_t *ap = pre.a, *bp = pre.b;
  if (!ap) {
    a16.resize(size_t(M) * K);
    pack_bf16(a16.data(), A, arows, acols, lda);
    ap = a16.data();
  }
  if (!bp) {
    b16.resize(size_t(K) * N);
    pack_bf16(b16.data(), B, brows, bcols, ldb);
    bp = b16.data();
  }
  run_matmul({true, tA, tB, M, N, K, pre.a ? lda : acols, pre.b ? ldb : bcols, ldc, alpha, beta}, ap, bp, C);
}

void gemm_f32_linear(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                     int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (!use_avx512()) return gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  run_matmul({false, ta == Trans::Yes, tb == Trans::Yes, M, N, K, lda, ldb, ldc, alpha, beta}, A, B, C);
}

void gemm_f32_attention(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                        const float* B, int ldb, float beta, float* C, int ldc) {
  if (use_avx512()) return gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  sgemm_avx2(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace normlab::ops
