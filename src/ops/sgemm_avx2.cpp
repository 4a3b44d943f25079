// sgemm_avx2.cpp: the packed, register-blocked float32 GEMM of sgemm_avx2.h.
//
// Loops (outermost first), as in BLIS:
//   columns of C in blocks of kNc  -> op(B)'s kKc x kNc block packed into 16-column panels (L3)
//   K in blocks of kKc            -> (each block adds to C; the first applies beta)
//   rows of C in blocks of kMc    -> op(A)'s kMc x kKc block packed into 6-row panels (L2)
//   16-column panels, 6-row panels -> the micro-kernel: a 6 x 16 tile of C in 12 ymm registers,
//                                     one k step = 2 loads of B, 6 broadcasts of A, 12 FMAs
// Panels are zero-padded to whole tiles, so the kernel never branches on the edge inside its loop;
// an edge tile is written through a 6 x 16 scratch tile. When op(B) is one or two panels wide (the
// attention's P v, dq, dk and dv at head sizes up to 32) a packed block of A would serve at most two
// micro-kernel calls, so packing it cost as much as multiplying: those rows are read where they are
// (kernel_rows), in the same order of sums, so the result is the same to the bit.
#include "ops/sgemm_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace normlab::ops {

namespace {

constexpr int kMr = 6, kNr = 16;  // the register tile
constexpr int kKc = 256;          // K block: a 16-column panel of B (kKc x 16 floats, 16 KiB) stays in L1
constexpr int kMc = 144;          // rows of A packed at once (144 x 256 floats, 144 KiB: L2)
constexpr int kNc = 2048;         // columns of B packed at once (256 x 2048 floats, 2 MiB: L3)

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// A per-thread buffer of at least n floats, 64-byte aligned, grown as needed (kept between calls).
float* scratch(int which, size_t n) {
  thread_local std::unique_ptr<float, FreeDeleter> buf[2];
  thread_local size_t cap[2] = {0, 0};
  if (cap[which] < n) {
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    buf[which].reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!buf[which]) throw std::bad_alloc();
    cap[which] = n;
  }
  return buf[which].get();
}

// r[0..7] <- its transpose: r[k] = (r[0][k], ..., r[7][k])
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]),
               t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]),
               t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]),
               t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
               u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
               u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
               u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// op(A)[i0 .. i0+m, k0 .. k0+kc] into 6-row panels: panel p holds rows 6p .. 6p+5 as kc columns of
// 6 (row index fastest); rows past m are zero. The buffer needs 2 floats past the last panel: a full
// panel of stored rows is transposed 8 columns at a time and each column written as 8 floats, whose
// last 2 the next column (or panel) overwrites.
void pack_a(float* dst, const float* A, int lda, bool ta, int i0, int m, int k0, int kc) {
  for (int p = 0; p < m; p += kMr) {
    const int rows = std::min(kMr, m - p);
    float* out = dst + (long)p * kc;
    if (!ta) {  // A stored (M, K): row i is contiguous in k
      int k = 0;
      if (rows == kMr)
        for (; k + 8 <= kc; k += 8) {
          __m256 r[8];
          for (int i = 0; i < kMr; i++) r[i] = _mm256_loadu_ps(A + (long)(i0 + p + i) * lda + k0 + k);
          r[6] = r[7] = _mm256_setzero_ps();
          transpose8(r);
          for (int j = 0; j < 8; j++) _mm256_storeu_ps(out + (k + j) * kMr, r[j]);
        }
      for (int r = 0; r < rows; r++) {
        const float* src = A + (long)(i0 + p + r) * lda + k0;
        for (int kk = k; kk < kc; kk++) out[kk * kMr + r] = src[kk];
      }
    } else {  // A stored (K, M): column k of op(A) is contiguous in i; read 6 lanes, written as 8
      const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
      if (rows == kMr)
        for (int k = 0; k < kc; k++)
          _mm256_storeu_ps(out + k * kMr, _mm256_maskload_ps(A + (long)(k0 + k) * lda + i0 + p, six));
      else
        for (int k = 0; k < kc; k++) {
          const float* src = A + (long)(k0 + k) * lda + i0 + p;
          for (int r = 0; r < rows; r++) out[k * kMr + r] = src[r];
        }
    }
    for (int r = rows; r < kMr; r++)
      for (int k = 0; k < kc; k++) out[k * kMr + r] = 0.0f;
  }
}

// op(B)[k0 .. k0+kc, j0 .. j0+n] into 16-column panels: panel p holds columns 16p .. 16p+15 as kc
// rows of 16; columns past n are zero.
void pack_b(float* dst, const float* B, int ldb, bool tb, int k0, int kc, int j0, int n) {
  for (int p = 0; p < n; p += kNr) {
    const int cols = std::min(kNr, n - p);
    float* out = dst + (long)p * kc;
    if (!tb) {  // B stored (K, N): row k of op(B) is contiguous in j
      for (int k = 0; k < kc; k++) {
        const float* src = B + (long)(k0 + k) * ldb + j0 + p;
        float* o = out + k * kNr;
        if (cols == kNr) {
          _mm256_store_ps(o, _mm256_loadu_ps(src));
          _mm256_store_ps(o + 8, _mm256_loadu_ps(src + 8));
        } else {
          for (int c = 0; c < cols; c++) o[c] = src[c];
          for (int c = cols; c < kNr; c++) o[c] = 0.0f;
        }
      }
    } else {  // B stored (N, K): column j of op(B) is contiguous in k; 8 x 8 blocks transposed
      int k = 0;
      if (cols == kNr)
        for (; k + 8 <= kc; k += 8)
          for (int half = 0; half < 2; half++) {
            __m256 r[8];
            for (int c = 0; c < 8; c++) r[c] = _mm256_loadu_ps(B + (long)(j0 + p + 8 * half + c) * ldb + k0 + k);
            transpose8(r);
            for (int j = 0; j < 8; j++) _mm256_store_ps(out + (k + j) * kNr + 8 * half, r[j]);
          }
      for (int c = 0; c < cols; c++) {
        const float* src = B + (long)(j0 + p + c) * ldb + k0;
        for (int kk = k; kk < kc; kk++) out[kk * kNr + c] = src[kk];
      }
      for (int c = cols; c < kNr; c++)
        for (int k = 0; k < kc; k++) out[k * kNr + c] = 0.0f;
    }
  }
}

// C tile (m x n of 6 x 16, ldc) = alpha acc + beta C (beta 0: C not read).
[[gnu::always_inline]] inline void store_tile(const __m256 (&acc)[kMr][2], float* c, int ldc, float alpha, float beta,
                                              int m, int n) {
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  if (m == kMr && n == kNr) {
    for (int r = 0; r < kMr; r++) {
      float* row = c + (long)r * ldc;
      __m256 lo = _mm256_mul_ps(va, acc[r][0]), hi = _mm256_mul_ps(va, acc[r][1]);
      if (beta != 0.0f) {
        lo = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row), lo);
        hi = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row + 8), hi);
      }
      _mm256_storeu_ps(row, lo);
      _mm256_storeu_ps(row + 8, hi);
    }
    return;
  }
  alignas(32) float tile[kMr][kNr];
  for (int r = 0; r < kMr; r++) {
    _mm256_store_ps(tile[r], acc[r][0]);
    _mm256_store_ps(tile[r] + 8, acc[r][1]);
  }
  for (int r = 0; r < m; r++) {
    float* row = c + (long)r * ldc;
    for (int j = 0; j < n; j++) row[j] = alpha * tile[r][j] + (beta != 0.0f ? beta * row[j] : 0.0f);
  }
}

// C tile (m x n <= 6 x 16, ldc) = alpha * a_panel b_panel + beta * C over kc steps. The 12
// accumulators are named variables: held in an array, GCC keeps them in memory.
void kernel(int kc, const float* __restrict a, const float* __restrict b, float* c, int ldc, float alpha,
            float beta, int m, int n) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
         c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 ar = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ar, b0, c00);
    c01 = _mm256_fmadd_ps(ar, b1, c01);
    ar = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ar, b0, c10);
    c11 = _mm256_fmadd_ps(ar, b1, c11);
    ar = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ar, b0, c20);
    c21 = _mm256_fmadd_ps(ar, b1, c21);
    ar = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ar, b0, c30);
    c31 = _mm256_fmadd_ps(ar, b1, c31);
    ar = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ar, b0, c40);
    c41 = _mm256_fmadd_ps(ar, b1, c41);
    ar = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ar, b0, c50);
    c51 = _mm256_fmadd_ps(ar, b1, c51);
    a += kMr;
    b += kNr;
  }
  const __m256 acc[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  store_tile(acc, c, ldc, alpha, beta, m, n);
}

// The same tile from 6 rows of op(A) read in place: row r's k-th value at rows[r][k * ks] (ks 1 for
// A stored (M, K), lda for A stored (K, M)); the same FMAs in the same order as kernel.
void kernel_rows(int kc, const float* const rows[kMr], long ks, const float* __restrict b, float* c, int ldc,
                 float alpha, float beta, int m, int n) {
  const float *a0 = rows[0], *a1 = rows[1], *a2 = rows[2], *a3 = rows[3], *a4 = rows[4], *a5 = rows[5];
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
         c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 ar = _mm256_broadcast_ss(a0);
    c00 = _mm256_fmadd_ps(ar, b0, c00);
    c01 = _mm256_fmadd_ps(ar, b1, c01);
    ar = _mm256_broadcast_ss(a1);
    c10 = _mm256_fmadd_ps(ar, b0, c10);
    c11 = _mm256_fmadd_ps(ar, b1, c11);
    ar = _mm256_broadcast_ss(a2);
    c20 = _mm256_fmadd_ps(ar, b0, c20);
    c21 = _mm256_fmadd_ps(ar, b1, c21);
    ar = _mm256_broadcast_ss(a3);
    c30 = _mm256_fmadd_ps(ar, b0, c30);
    c31 = _mm256_fmadd_ps(ar, b1, c31);
    ar = _mm256_broadcast_ss(a4);
    c40 = _mm256_fmadd_ps(ar, b0, c40);
    c41 = _mm256_fmadd_ps(ar, b1, c41);
    ar = _mm256_broadcast_ss(a5);
    c50 = _mm256_fmadd_ps(ar, b0, c50);
    c51 = _mm256_fmadd_ps(ar, b1, c51);
    a0 += ks;
    a1 += ks;
    a2 += ks;
    a3 += ks;
    a4 += ks;
    a5 += ks;
    b += kNr;
  }
  const __m256 acc[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  store_tile(acc, c, ldc, alpha, beta, m, n);
}

}  // namespace

void sgemm_avx2(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // C = beta C (beta 0: zeros, C not read)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(long)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(long)i * ldc + j];
    return;
  }
  const bool tA = ta == Trans::Yes, tB = tb == Trans::Yes;
  const int nc_max = std::min(kNc, (N + kNr - 1) / kNr * kNr), kc_max = std::min(kKc, K);
  float* bp = scratch(0, size_t(nc_max) * kc_max);
  float* ap = scratch(1, size_t(std::min(kMc, (M + kMr - 1) / kMr * kMr)) * kc_max + 2);  // + pack_a's spill
  for (int j0 = 0; j0 < N; j0 += kNc) {
    const int nc = std::min(kNc, N - j0);
    for (int k0 = 0; k0 < K; k0 += kKc) {
      const int kc = std::min(kKc, K - k0);
      const float b_eff = k0 == 0 ? beta : 1.0f;
      pack_b(bp, B, ldb, tB, k0, kc, j0, nc);
      if (nc <= 2 * kNr) {  // narrow op(B): A's rows in place (rows past M repeat the last; not stored)
        const long ks = tA ? lda : 1;
        for (int ir = 0; ir < M; ir += kMr) {
          const float* rows[kMr];
          for (int r = 0; r < kMr; r++) {
            const long i = std::min(ir + r, M - 1);
            rows[r] = tA ? A + (long)k0 * lda + i : A + i * lda + k0;
          }
          for (int jr = 0; jr < nc; jr += kNr)
            kernel_rows(kc, rows, ks, bp + (long)jr * kc, C + (long)ir * ldc + j0 + jr, ldc, alpha, b_eff,
                        std::min(kMr, M - ir), std::min(kNr, nc - jr));
        }
        continue;
      }
      for (int i0 = 0; i0 < M; i0 += kMc) {
        const int mc = std::min(kMc, M - i0);
        pack_a(ap, A, lda, tA, i0, mc, k0, kc);
        for (int jr = 0; jr < nc; jr += kNr)
          for (int ir = 0; ir < mc; ir += kMr)
            kernel(kc, ap + (long)ir * kc, bp + (long)jr * kc, C + (long)(i0 + ir) * ldc + j0 + jr, ldc,
                   alpha, b_eff, std::min(kMr, mc - ir), std::min(kNr, nc - jr));
      }
    }
  }
}

}  // namespace normlab::ops
