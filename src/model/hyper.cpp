// hyper.cpp: hyper-connections (model/hyper.h), the arithmetic (their config rules, parameters and
// initialization are model/hyper_params.cpp): the read and write of one sub-layer over a batch of
// tokens and their reverse, mhc's Sinkhorn-Knopp
// projection (over blocks of tokens side by side) and mhc_lite's permutations, and the mixes' gains.
// The maps of the streams' norms to the weights run as GEMMs; a token's mixes of n streams and their
// dot products run in S, in an order that vectorizes over the channels; the sums over tokens of the
// parameter gradients run in double.
#include "model/hyper.h"

#include <algorithm>
#include <cmath>
#include <Eigen/Dense>
#include <fmt/format.h>

#include "model/methods.h"
#include "ops/common.h"
#include "ops/isa.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/vecmath.h"
#include "util/error.h"
#include "util/flush_subnormals.h"

namespace normlab {

namespace {

constexpr double kSinkhornEps = kHyperSinkhornEps;
constexpr double kPreEps = kHyperPreEps;

// The exponentials of the weights below are ops::exp_of in the model's precision: in float the inlined
// polynomial (about 1 ulp; the loops over a token's values vectorize, where a libm call per value was
// 3.6% of an mhc_lite step at width 64), in double std::exp, so the double checks are unchanged.

// mhc and mhc_lite alike: one token's read weights P_s = sigmoid(s_p h_s + b_s) + eps into wa[s (n+1)]
// and write weights b_s = 2 sigmoid(s_q h_(n+s) + b_(n+s)) into wb[s], from its projection h
template <class S, class P>
void mhc_read_write_weights(const P& p, const S* h, int n, S* wa, S* wb) {
  S e[2 * kMaxHyperStreams];  // exp(-x) of the 2n pre-activations
  for (int s = 0; s < n; s++) {
    e[s] = S(-(double(p.scale[0]) * h[s] + double(p.bias[s])));
    e[n + s] = S(-(double(p.scale[1]) * h[n + s] + double(p.bias[n + s])));
  }
  for (int k = 0; k < 2 * n; k++) e[k] = ops::exp_of(e[k]);
  for (int s = 0; s < n; s++) {
    wa[s * (n + 1)] = S(1.0 / (1.0 + double(e[s])) + kPreEps);
    wb[s] = S(2.0 / (1.0 + double(e[n + s])));
  }
}
// ... and their reverse: y[s] = d(the pre-activation of P_s), y[n + s] = that of b_s, from dP (dwa) and db
template <class S>
void mhc_read_write_weights_backward(const S* wa, const S* wb, const S* dwa, const S* db, int n, S* y) {
  for (int s = 0; s < n; s++) {
    const double q = double(wa[s * (n + 1)]) - kPreEps, o = double(wb[s]) / 2.0;
    y[s] = S(double(dwa[s * (n + 1)]) * q * (1.0 - q));
    y[n + s] = S(double(db[s]) * 2.0 * o * (1.0 - o));
  }
}

// mhc_lite: one token's weights of the permutations, softmax_q(s_r h_(2n+q) + B_res,q) over its Rp = n!
// values (the exponentials in the model's precision, their sum and quotients in double); each computed
// once per pass (the forward and the reverse compute the same)
template <class S, class P>
void lite_weights(const P& p, const S* h, int n, int Rp, double* w) {
  S e[kMaxLitePermutations];
  double mx = -1e300, z = 0;
  for (int q = 0; q < Rp; q++) mx = std::max(mx, double(p.scale[2]) * h[2 * n + q] + double(p.bias[2 * n + q]));
  for (int q = 0; q < Rp; q++) e[q] = S(double(p.scale[2]) * h[2 * n + q] + double(p.bias[2 * n + q]) - mx);
  for (int q = 0; q < Rp; q++) e[q] = ops::exp_of(e[q]);
  for (int q = 0; q < Rp; q++) z += (w[q] = double(e[q]));
  for (int q = 0; q < Rp; q++) w[q] /= z;
}

}  // namespace

// ---- Sinkhorn-Knopp (mhc) ----

namespace {

// Tokens whose n x n matrices are normalized side by side: the iterates are laid out (entry, token),
// so every step is the same arithmetic over the block's tokens (it vectorizes, and no token waits on
// another's divisions).
constexpr int kSinkhornBlock = 16;

// One operation on the kSinkhornBlock lanes (tokens) of a step, on pointers that do not alias: the
// compiler vectorizes them (with plain pointers into one scratch buffer it must assume that a store
// may change the next load, and kept them scalar: the Sinkhorn reverse was a fifth of an mhc step at
// width 64). Each lane's arithmetic is the same as one token's alone.
template <class S>
inline void lanes_add(S* __restrict acc, const S* __restrict x) {
  for (int b = 0; b < kSinkhornBlock; b++) acc[b] += x[b];
}
template <class S>
inline void lanes_add_product(S* __restrict acc, const S* __restrict x, const S* __restrict y) {
  for (int b = 0; b < kSinkhornBlock; b++) acc[b] += x[b] * y[b];
}
template <class S>
inline void lanes_scale(S* __restrict out, const S* __restrict x, const S* __restrict by) {
  for (int b = 0; b < kSinkhornBlock; b++) out[b] = x[b] * by[b];
}
template <class S>
inline void lanes_scaled_difference(S* __restrict out, const S* __restrict x, const S* __restrict minus,
                                    const S* __restrict by) {
  for (int b = 0; b < kSinkhornBlock; b++) out[b] = (x[b] - minus[b]) * by[b];
}
template <class S>
inline void lanes_inverse(S* __restrict x) {  // x = 1 / (x + eps)
  for (int b = 0; b < kSinkhornBlock; b++) x[b] = S(1) / (x[b] + S(kSinkhornEps));
}

// One normalization of the iterates: o = a with each group divided by (its sum + eps), a group being a
// row (entries g n + j) when Rows, else a column (entries j n + g); every group's sum first, then their
// inverses (n independent divisions, pipelined), then the scaling. inv: n kSinkhornBlock scratch. N > 0:
// n = N known when compiled (n = 4, the papers' and the default): the loops unroll into constant
// offsets; N = 0: any n. The arithmetic is the same.
template <int N, bool Rows, class S>
inline void sinkhorn_normalize(const S* a, S* o, int n_any, S* inv) {
  constexpr int B = kSinkhornBlock;
  const int n = N > 0 ? N : n_any;
  const auto at = [n](int g, int j) { return (Rows ? g * n + j : g + j * n) * B; };
  std::fill(inv, inv + size_t(n) * B, S(0));
  for (int g = 0; g < n; g++)
    for (int j = 0; j < n; j++) lanes_add(inv + g * B, a + at(g, j));
  for (int g = 0; g < n; g++) lanes_inverse(inv + g * B);
  for (int g = 0; g < n; g++)
    for (int j = 0; j < n; j++) lanes_scale(o + at(g, j), a + at(g, j), inv + g * B);
}
// Its reverse: prev = d(a) from cur = d(o); o = a / (s + eps) over each group gives
// da = (do - sum_group do o) / (s + eps), with inv the group's 1 / (s + eps) the iterates kept.
// dots: n kSinkhornBlock scratch.
template <int N, bool Rows, class S>
inline void sinkhorn_normalize_backward(const S* o, const S* inv, const S* cur, S* prev, int n_any, S* dots) {
  constexpr int B = kSinkhornBlock;
  const int n = N > 0 ? N : n_any;
  const auto at = [n](int g, int j) { return (Rows ? g * n + j : g + j * n) * B; };
  std::fill(dots, dots + size_t(n) * B, S(0));
  for (int g = 0; g < n; g++)
    for (int j = 0; j < n; j++) lanes_add_product(dots + g * B, cur + at(g, j), o + at(g, j));
  for (int g = 0; g < n; g++)
    for (int j = 0; j < n; j++) lanes_scaled_difference(prev + at(g, j), cur + at(g, j), dots + g * B, inv + g * B);
}

// The iterates of `count` <= kSinkhornBlock tokens into T ((2 iters) n^2 kSinkhornBlock): T_0 =
// softmax_rows(X) + eps, then T_1 = columns-normalized T_0, then rows, columns, ... (2 iters - 1
// normalizations after T_0; step k >= 1 normalizes rows when k is even, columns when odd). X: token b's
// matrix at X + b ldx, row-major. The block's unused lanes hold a zero matrix (their results unread).
// inverses: null, or ((2 iters - 1) n kSinkhornBlock) to keep each step's 1 / (group sum + eps) for
// the reverse (step k's at (k - 1) n kSinkhornBlock). N: as sinkhorn_normalize's.
template <int N, class S>
[[gnu::always_inline]] inline void sinkhorn_block_iterates_n(const S* X, long ldx, int count, int n_any, int iters,
                                                             S* T, S* inverses = nullptr) {
  constexpr int B = kSinkhornBlock;
  const int n = N > 0 ? N : n_any;
  const int nn = n * n, steps = 2 * iters - 1;
  for (int k = 0; k < nn; k++)
    for (int b = 0; b < B; b++) T[k * B + b] = b < count ? X[b * ldx + k] : S(0);
  alignas(64) S mx[B], z[B];
  for (int k = 0; k < n; k++) {
    S* row = T + size_t(k) * n * B;
    for (int b = 0; b < B; b++) mx[b] = row[b];
    for (int m = 1; m < n; m++)
      for (int b = 0; b < B; b++) mx[b] = std::max(mx[b], row[m * B + b]);
    std::fill(z, z + B, S(0));
    for (int m = 0; m < n; m++)
      for (int b = 0; b < B; b++) z[b] += (row[m * B + b] = ops::exp_of(row[m * B + b] - mx[b]));
    for (int b = 0; b < B; b++) z[b] = S(1) / z[b];
    for (int m = 0; m < n; m++)
      for (int b = 0; b < B; b++) row[m * B + b] = row[m * B + b] * z[b] + S(kSinkhornEps);
  }
  alignas(64) S inv[kMaxHyperStreams * B];
  for (int step = 1; step <= steps; step++) {
    const S* a = T + size_t(step - 1) * nn * B;
    S* o = T + size_t(step) * nn * B;
    S* group_inv = inverses ? inverses + size_t(step - 1) * n * B : inv;
    if (step % 2 == 0)
      sinkhorn_normalize<N, true>(a, o, n, group_inv);
    else
      sinkhorn_normalize<N, false>(a, o, n, group_inv);
  }
}
// The normalizations' scratch holds kMaxHyperStreams groups
void check_sinkhorn_size(int n) {
  if (n < 1 || n > kMaxHyperStreams)
    throw Error(fmt::format("Sinkhorn-Knopp of a {} x {} matrix: n must be in [1, {}]", n, n, kMaxHyperStreams));
}

// The reverse's scratch D per block: the gradient's two iterates and the kept inverses.
size_t sinkhorn_reverse_scratch(int n, int iters) {
  return (size_t(2) * n * n + size_t(2 * iters) * n) * kSinkhornBlock;
}

// The reverse for the same block: dX (token b's at dX + b ldx) from dM (at dM + b ldx). T: the
// iterates' scratch; D: sinkhorn_reverse_scratch(n, iters) more.
template <int N, class S>
[[gnu::always_inline]] inline void sinkhorn_block_backward_n(const S* X, const S* dM, long ldx, int count, int n_any,
                                                             int iters, S* T, S* D, S* dX) {
  constexpr int B = kSinkhornBlock;
  const int n = N > 0 ? N : n_any;
  const int nn = n * n, steps = 2 * iters - 1;
  S* cur = D;
  S* prev = D + size_t(nn) * B;
  S* inverses = D + size_t(2 * nn) * B;
  sinkhorn_block_iterates_n<N>(X, ldx, count, n, iters, T, inverses);
  for (int k = 0; k < nn; k++)
    for (int b = 0; b < B; b++) cur[k * B + b] = b < count ? dM[b * ldx + k] : S(0);
  alignas(64) S dots[kMaxHyperStreams * B];  // every group's, as in the iterates
  for (int step = steps; step >= 1; step--) {
    const S* o = T + size_t(step) * nn * B;
    const S* inv = inverses + size_t(step - 1) * n * B;
    if (step % 2 == 0)
      sinkhorn_normalize_backward<N, true>(o, inv, cur, prev, n, dots);
    else
      sinkhorn_normalize_backward<N, false>(o, inv, cur, prev, n, dots);
    std::swap(cur, prev);
  }
  alignas(64) S dot[B];
  // T_0 = softmax(X) + eps, row by row:  dX = p (dT - sum p dT)
  for (int k = 0; k < n; k++) {
    std::fill(dot, dot + B, S(0));
    for (int m = 0; m < n; m++)
      for (int b = 0; b < B; b++) dot[b] += (T[(k * n + m) * B + b] - S(kSinkhornEps)) * cur[(k * n + m) * B + b];
    for (int m = 0; m < n; m++)
      for (int b = 0; b < count; b++)
        dX[b * ldx + k * n + m] = (T[(k * n + m) * B + b] - S(kSinkhornEps)) * (cur[(k * n + m) * B + b] - dot[b]);
  }
}
// The block functions compiled twice, for the build's AVX2 and for AVX-512 (a block's 16 float lanes
// are one AVX-512 register), chosen at run time as the kernels in ops/ are.
template <int N, class S>
void sinkhorn_iterates_avx2(const S* X, long ldx, int count, int n, int iters, S* T) {
  sinkhorn_block_iterates_n<N>(X, ldx, count, n, iters, T);
}
template <int N, class S>
[[gnu::target(NL_AVX512_TARGET)]] void sinkhorn_iterates_avx512(const S* X, long ldx, int count, int n, int iters,
                                                                 S* T) {
  sinkhorn_block_iterates_n<N>(X, ldx, count, n, iters, T);
}
template <int N, class S>
void sinkhorn_backward_avx2(const S* X, const S* dM, long ldx, int count, int n, int iters, S* T, S* D, S* dX) {
  sinkhorn_block_backward_n<N>(X, dM, ldx, count, n, iters, T, D, dX);
}
template <int N, class S>
[[gnu::target(NL_AVX512_TARGET)]] void sinkhorn_backward_avx512(const S* X, const S* dM, long ldx, int count, int n,
                                                                 int iters, S* T, S* D, S* dX) {
  sinkhorn_block_backward_n<N>(X, dM, ldx, count, n, iters, T, D, dX);
}

template <class S>
void sinkhorn_block_iterates(const S* X, long ldx, int count, int n, int iters, S* T) {
  check_sinkhorn_size(n);
  const bool wide = ops::use_avx512();
  if (n == 4)
    (wide ? sinkhorn_iterates_avx512<4, S> : sinkhorn_iterates_avx2<4, S>)(X, ldx, count, n, iters, T);
  else
    (wide ? sinkhorn_iterates_avx512<0, S> : sinkhorn_iterates_avx2<0, S>)(X, ldx, count, n, iters, T);
}

template <class S>
void sinkhorn_block_backward(const S* X, const S* dM, long ldx, int count, int n, int iters, S* T, S* D, S* dX) {
  check_sinkhorn_size(n);
  FlushSubnormals flush;  // (util/flush_subnormals.h: the reverse's damped parts fall below 1e-38)
  const bool wide = ops::use_avx512();
  if (n == 4)
    (wide ? sinkhorn_backward_avx512<4, S> : sinkhorn_backward_avx2<4, S>)(X, dM, ldx, count, n, iters, T, D, dX);
  else
    (wide ? sinkhorn_backward_avx512<0, S> : sinkhorn_backward_avx2<0, S>)(X, dM, ldx, count, n, iters, T, D, dX);
}

}  // namespace

void sinkhorn_forward(const double* X, int n, int iters, double* M) {
  std::vector<double> T(size_t(2 * iters) * n * n * kSinkhornBlock);
  sinkhorn_block_iterates(X, 0, 1, n, iters, T.data());
  const double* last = T.data() + size_t(2 * iters - 1) * n * n * kSinkhornBlock;
  for (int k = 0; k < n * n; k++) M[k] = last[k * kSinkhornBlock];
}

void sinkhorn_backward(const double* X, int n, int iters, const double* dM, double* dX) {
  std::vector<double> T(size_t(2 * iters) * n * n * kSinkhornBlock), D(sinkhorn_reverse_scratch(n, iters));
  sinkhorn_block_backward(X, dM, 0, 1, n, iters, T.data(), D.data(), dX);
}

// ---- mHC-lite's permutations ----

std::vector<int> hyper_lite_permutations(int n) {
  std::vector<int> perm(static_cast<size_t>(n)), out;
  for (int k = 0; k < n; k++) perm[size_t(k)] = k;
  do out.insert(out.end(), perm.begin(), perm.end());
  while (std::next_permutation(perm.begin(), perm.end()));
  return out;
}

// ---- one sub-layer's read and write ----

// The layout of the per-token weights of `rows` tokens (mix, and hc's pre, dmix, dpre): [P_s | M[s,
// 0..n)] of every token, (rows, n, n+1), then every token's b, (rows, n). hc's pre holds tanh of
// the input-dependent parts in the same layout; mhc's holds h = z phi^T (rows, 2n + n^2) in MaxText's
// column order: h_pre (n), h_post (n), h_res (n^2, row-major (s, t)).
namespace {

template <class S>
struct MixView {
  S* a;  // (rows, n, n+1)
  S* b;  // (rows, n)
  MixView(S* base, long rows, int n) : a(base), b(base + rows * n * (n + 1)) {}
};

// out_t = sum_s w[s * stride + t] h_s over C channels, t < m: the rows of a small (n x m) weight
// matrix applied to n streams, in float order (s outer, c inner: the c loop vectorizes).
// (The first term assigns: a zero fill before it was one memset call per row of C values.)
template <class S>
inline void mix_streams(S* out, const S* w, int stride, int m, const S* h, int n, int C) {
  for (int t = 0; t < m; t++) {
    S* o = out + size_t(t) * C;
    if (n == 0) std::fill(o, o + C, S(0));
    for (int s = 0; s < n; s++) {
      const S a = w[s * stride + t];
      const S* hs = h + size_t(s) * C;
      if (s == 0)
        for (int c = 0; c < C; c++) o[c] = a * hs[c];
      else
        for (int c = 0; c < C; c++) o[c] += a * hs[c];
    }
  }
}

// x . y over C channels in 16 interleaved partial sums (the channels c = k mod 16 in part k), added
// pairwise at the end: the loop vectorizes, where one running sum is a chain of dependent adds (without
// -ffast-math the compiler keeps that order) at 4 cycles each: at C = 64 the dots of the backward
// were a fifth of an mhc step
template <class S>
inline S hyper_dot(const S* x, const S* y, int C) {
  constexpr int K = 16;
  S part[K] = {};
  int c = 0;
  for (; c + K <= C; c += K)
    for (int k = 0; k < K; k++) part[k] += x[c + k] * y[c + k];
  S a = 0;
  for (; c < C; c++) a += x[c] * y[c];
  for (int w = K / 2; w > 0; w /= 2)  // the parts pairwise: 4 dependent adds, not 16 (each vectorizes)
    for (int k = 0; k < w; k++) part[k] += part[k + w];
  return a + part[0];
}

// A projection of an RMSNorm's output with the norm folded in (hc's and mhc's reads): y = z F^T with
// z = rstd x * gamma (rows of `width`) is computed as y = rstd (x (F diag gamma)^T), the division by the
// norm after the GEMM as mHC's fused kernel orders it (2512.24880, section 4.3): the normalized rows
// are never written, nor read again by the reverse. F: (outs, width); rstd from ops::rmsnorm_rstd.
template <class S>
std::vector<S> fold_gain(const S* F, const S* gamma, int outs, int width, bool transposed) {
  std::vector<S> out(size_t(outs) * width);
  for (int j = 0; j < outs; j++)
    for (int k = 0; k < width; k++)
      out[transposed ? size_t(k) * outs + j : size_t(j) * width + k] = F[size_t(j) * width + k] * gamma[k];
  return out;
}
template <class S>
void folded_projection_forward(S* y, const S* x, const S* rstd, const S* F, const S* gamma, long rows, int width,
                               int outs) {
  const std::vector<S> folded = fold_gain(F, gamma, outs, width, false);
  ops::matmul_forward(y, x, folded.data(), static_cast<const S*>(nullptr), int(rows), width, outs);
#pragma omp parallel for schedule(static) if(rows * width > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++)
    for (int j = 0; j < outs; j++) y[r * outs + j] *= rstd[r];
}
// Its reverse for one or two projections of the same rows (F2 null for one): with G = F diag gamma,
//   dx += rstd dX - (rstd^3 / width) (x . dX) x,  dX = dy G (+ dy2 G2)     (d rstd / dx = -rstd^3 x / width)
//   dF += (sum_r rstd dy^T x) diag gamma,  dgamma += sum_j F_j * (sum_r rstd dy_j x)
// dy and dy2 are scaled by rstd in place; dX (rows, width) is scratch.
template <class S>
void folded_projection_backward(S* dx, S* dF, S* dF2, S* dgamma, S* dy, S* dy2, S* dX, const S* x, const S* rstd,
                                const S* F, const S* F2, const S* gamma, long rows, int width, int outs, int outs2) {
  const std::vector<S> folded_t = fold_gain(F, gamma, outs, width, true);
  ops::matmul_forward(dX, dy, folded_t.data(), static_cast<const S*>(nullptr), int(rows), outs, width);
  const std::vector<S> folded2 = F2 ? fold_gain(F2, gamma, outs2, width, false) : std::vector<S>();
#pragma omp parallel for schedule(static) if(rows * width > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    const S* xr = x + r * width;
    S* d = dX + r * width;
    for (int j = 0; j < (F2 ? outs2 : 0); j++) {  // (the second projection is narrow: hc's w_b, one output)
      const S a = dy2[r * outs2 + j];
      const S* g2 = folded2.data() + size_t(j) * width;
      for (int k = 0; k < width; k++) d[k] += a * g2[k];
    }
    double dot = 0;
#pragma omp simd reduction(+ : dot)  // (in double lanes, as ops/rmsnorm.cpp's row sums: a chain of dependent adds otherwise)
    for (int k = 0; k < width; k++) dot += double(xr[k]) * d[k];
    const S rs = rstd[r], c = S(double(rs) * rs * rs * dot / width);
    S* o = dx + r * width;
    for (int k = 0; k < width; k++) o[k] += rs * d[k] - c * xr[k];
    for (int j = 0; j < outs; j++) dy[r * outs + j] *= rs;
    for (int j = 0; j < (F2 ? outs2 : 0); j++) dy2[r * outs2 + j] *= rs;
  }
  std::vector<double> dg(size_t(width), 0.0);
  auto weight_part = [&](const S* Fp, S* dFp, const S* dyp, int o) {
    std::vector<S> G(size_t(o) * width, S(0));  // sum_r rstd dy^T x
    ops::matmul_backward(static_cast<S*>(nullptr), G.data(), static_cast<S*>(nullptr), dyp, x,
                         static_cast<const S*>(nullptr), int(rows), width, o);
    for (int j = 0; j < o; j++)
      for (int k = 0; k < width; k++) {
        const S g = G[size_t(j) * width + k];
        dFp[size_t(j) * width + k] += g * gamma[k];
        dg[size_t(k)] += double(g) * Fp[size_t(j) * width + k];
      }
  };
  weight_part(F, dF, dy, outs);
  if (F2) weight_part(F2, dF2, dy2, outs2);
  for (int k = 0; k < width; k++) dgamma[k] += S(dg[size_t(k)]);
}

// attn_res's weights of one token: [P | M] with P_s = softmax_{s < sources}(w . hn_s) (0 for the other
// streams), M = I, and b = e_target; hn (n, C) its normalized streams
template <class S>
void attn_res_weights(const HyperParams<S>& p, const S* hn, int n, int C, S* wa, S* wb) {
  const int n1 = n + 1;
  std::fill(wa, wa + n * n1, S(0));
  std::fill(wb, wb + n, S(0));
  double mx = -1e300, z = 0;
  for (int s = 0; s < p.sources; s++) mx = std::max(mx, double(wa[s * n1] = hyper_dot(hn + size_t(s) * C, p.query, C)));
  for (int s = 0; s < p.sources; s++) z += std::exp(double(wa[s * n1]) - mx);
  for (int s = 0; s < p.sources; s++) wa[s * n1] = S(std::exp(double(wa[s * n1]) - mx) / z);
  for (int s = 0; s < n; s++) wa[s * n1 + 1 + s] = S(1);
  if (p.target < n) wb[p.target] = S(1);  // (the final read writes nothing)
}

}  // namespace

template <class S>
void hyper_read_forward(const ModelConfig& cfg, const HyperParams<S>& p, const S* H, long rows, S* u, S* R, S* hn,
                        S* hrstd, S* mix, S* pre) {
  const int n = cfg.hyper_streams, C = cfg.d_model, n1 = n + 1, W = 2 * n + hyper_res_width(cfg);
  const MixView<S> w(mix, rows, n), t(pre, rows, n);
  switch (cfg.hyper) {
    case HyperMix::None:
      break;
    case HyperMix::HcStatic:
      break;
    case HyperMix::Hc:  // Za = Hn W_a^T (rows n, n+1), Zb = Hn w_b (rows n): pre holds them, then their tanh
      ops::rmsnorm_rstd(hrstd, H, int(rows * n), C, cfg.eps);
      folded_projection_forward(t.a, H, hrstd, p.alpha_fn, p.norm.weight, rows * n, C, n1);
      folded_projection_forward(t.b, H, hrstd, p.beta_fn, p.norm.weight, rows * n, C, 1);
      break;
    case HyperMix::Mhc:  // h = z phi^T (rows, 2n + n^2, or 2n + n! for mhc_lite)
    case HyperMix::MhcLite:
      ops::rmsnorm_rstd(hrstd, H, int(rows), n * C, cfg.eps);
      folded_projection_forward(pre, H, hrstd, p.phi, p.norm.weight, rows, n * C, W);
      break;
    case HyperMix::AttnRes:  // the keys: every stream's RMSNorm with the gain gamma (rows n, C)
      ops::rmsnorm_forward(hn, hrstd, H, p.norm.weight, int(rows * n), C, cfg.eps);
      break;
  }
  const long nn = long(n) * n;
  if (cfg.hyper == HyperMix::Mhc) {  // P, b token by token; M in blocks of tokens (Sinkhorn-Knopp)
    const long blocks = (rows + kSinkhornBlock - 1) / kSinkhornBlock;
#pragma omp parallel if(rows * n * C > ops::kParallelMinWork)
    {
      std::vector<S> X(size_t(kSinkhornBlock) * nn), T(size_t(2 * cfg.sinkhorn_iters) * nn * kSinkhornBlock);
#pragma omp for schedule(static)
      for (long blk = 0; blk < blocks; blk++) {
        const long r0 = blk * kSinkhornBlock;
        const int count = int(std::min<long>(kSinkhornBlock, rows - r0));
        for (int b = 0; b < count; b++) {
          const long r = r0 + b;
          const S* h = pre + r * W;
          mhc_read_write_weights(p, h, n, w.a + r * n * n1, w.b + r * n);
          for (long k = 0; k < nn; k++) X[b * nn + k] = p.scale[2] * h[2 * n + k] + p.bias[2 * n + k];
        }
        sinkhorn_block_iterates(X.data(), nn, count, n, cfg.sinkhorn_iters, T.data());
        const S* last = T.data() + size_t(2 * cfg.sinkhorn_iters - 1) * nn * kSinkhornBlock;
        for (int b = 0; b < count; b++)
          for (int s = 0; s < n; s++)
            for (int m = 0; m < n; m++) w.a[(r0 + b) * n * n1 + s * n1 + 1 + m] = last[(s * n + m) * kSinkhornBlock + b];
      }
    }
  }
  const std::vector<int> perms = cfg.hyper == HyperMix::MhcLite ? hyper_lite_permutations(n) : std::vector<int>();
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    S* wa = w.a + r * n * n1;
    S* wb = w.b + r * n;
    if (cfg.hyper == HyperMix::MhcLite) {  // P, b as mhc; M = sum_p softmax(s_r h_res + B_res)_p Perm_p
      const S* h = pre + r * W;
      mhc_read_write_weights(p, h, n, wa, wb);
      for (int s = 0; s < n; s++)
        for (int m = 0; m < n; m++) wa[s * n1 + 1 + m] = S(0);
      double weight[kMaxLitePermutations];
      lite_weights(p, h, n, W - 2 * n, weight);
      for (int q = 0; q < W - 2 * n; q++)
        for (int k = 0; k < n; k++) wa[k * n1 + 1 + perms[size_t(q) * n + k]] += S(weight[q]);
    } else if (cfg.hyper == HyperMix::AttnRes) {  // P = softmax over the sources of w . Hn_s; M = I; b = e_target
      attn_res_weights(p, hn + r * n * C, n, C, wa, wb);
      if (R) std::copy(H + r * n * C, H + (r + 1) * n * C, R + r * n * C);
      mix_streams(u + r * C, wa, n1, 1, H + r * n * C, p.sources, C);
      continue;
    } else if (cfg.hyper == HyperMix::HcStatic) {
      std::copy(p.alpha, p.alpha + n * n1, wa);
      std::copy(p.beta, p.beta + n, wb);
    } else if (cfg.hyper == HyperMix::Hc) {
      S* ta = t.a + r * n * n1;
      S* tb = t.b + r * n;
      for (int k = 0; k < n * n1; k++) {
        ta[k] = std::tanh(ta[k]);
        wa[k] = p.alpha[k] + *p.alpha_scale * ta[k];
      }
      for (int s = 0; s < n; s++) {
        tb[s] = std::tanh(tb[s]);
        wb[s] = p.beta[s] + *p.beta_scale * tb[s];
      }
    }
    // u = sum_s P_s H_s;  R_t = sum_s M[s, t] H_s
    const S* h = H + r * n * C;
    mix_streams(u + r * C, wa, n1, 1, h, n, C);
    mix_streams(R + r * n * C, wa + 1, n1, n, h, n, C);
  }
}

template <class S>
void hyper_write_forward(int n, const S* mix, const S* g, long rows, int C, S* H, S* sum) {
  const MixView<S> w(const_cast<S*>(mix), rows, n);
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    const S* b = w.b + r * n;
    const S* gr = g + r * C;
    S* out = sum + r * C;
    for (int t = 0; t < n; t++) {
      S* h = H + (r * n + t) * C;
      const S bt = b[t];
      for (int c = 0; c < C; c++) h[c] += bt * gr[c];
      if (t == 0)
        std::copy(h, h + C, out);
      else
        for (int c = 0; c < C; c++) out[c] += h[c];
    }
  }
}

template <class S>
void hyper_write_backward(int n, const S* mix, const S* g, const S* dH, long rows, int C, S* dg, S* dmix) {
  const MixView<S> w(const_cast<S*>(mix), rows, n), dw(dmix, rows, n);
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    const S* b = w.b + r * n;
    const S* d = dH + r * n * C;
    mix_streams(dg + r * C, b, 1, 1, d, n, C);  // dg = sum_t b_t dH'_t
    for (int t = 0; t < n; t++) dw.b[r * n + t] = hyper_dot(d + size_t(t) * C, g + r * C, C);
  }
}

template <class S>
void hyper_read_backward(const ModelConfig& cfg, const HyperParams<S>& p, const HyperParams<S>& dp, const S* H,
                         long rows, const S* du, const S* dR, const S* hn, const S* hrstd, const S* mix,
                         const S* pre, S* dH, S* dmix, S* dpre, S* dhn) {
  const int n = cfg.hyper_streams, C = cfg.d_model, n1 = n + 1, W = 2 * n + hyper_res_width(cfg);
  const HyperMix form = cfg.hyper;
  const std::vector<int> perms = form == HyperMix::MhcLite ? hyper_lite_permutations(n) : std::vector<int>();
  const MixView<S> w(const_cast<S*>(mix), rows, n), dw(dmix, rows, n), t(const_cast<S*>(pre), rows, n),
      dt(dpre, rows, n);
  S* dy = dpre + rows * W;  // mhc: d(the pre-activations s h + bias), h's layout
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    const S* h = H + r * n * C;
    const S* wa = w.a + r * n * n1;
    S* dwa = dw.a + r * n * n1;
    const S* dr = dR ? dR + r * n * C : nullptr;
    if (form == HyperMix::AttnRes) {  // M = I: dH_s = P_s du + dR_s; dP_s = <du, H_s> over the sources
      for (int s = 0; s < n; s++) {
        dwa[s * n1] = s < p.sources ? hyper_dot(du + r * C, h + size_t(s) * C, C) : S(0);
        S* o = dH + (r * n + s) * C;
        const S ps = wa[s * n1];
        for (int c = 0; c < C; c++) o[c] = ps * du[r * C + c] + (dR ? dr[size_t(s) * C + c] : S(0));
      }
      // d(logit_s) = P_s (dP_s - sum_s' P_s' dP_s'), into dpre (rows, n)
      double dot = 0;
      for (int s = 0; s < p.sources; s++) dot += double(wa[s * n1]) * dwa[s * n1];
      for (int s = 0; s < n; s++) dpre[r * n + s] = s < p.sources ? S(double(wa[s * n1]) * (dwa[s * n1] - dot)) : S(0);
      continue;
    }
    // dP_s = <du, H_s>, dM[s, t] = <dR_t, H_s>;  dH_s = P_s du + sum_t M[s, t] dR_t
    for (int s = 0; s < n; s++) {
      dwa[s * n1] = hyper_dot(du + r * C, h + size_t(s) * C, C);
      for (int tt = 0; tt < n; tt++) dwa[s * n1 + 1 + tt] = hyper_dot(dr + size_t(tt) * C, h + size_t(s) * C, C);
    }
    S* dh = dH + r * n * C;
    for (int s = 0; s < n; s++) {
      S* o = dh + size_t(s) * C;
      const S ps = wa[s * n1];
      for (int c = 0; c < C; c++) o[c] = ps * du[r * C + c];
      for (int tt = 0; tt < n; tt++) {
        const S m = wa[s * n1 + 1 + tt];
        const S* d = dr + size_t(tt) * C;
        for (int c = 0; c < C; c++) o[c] += m * d[c];
      }
    }
    if (form == HyperMix::Hc) {  // d(tanh argument)
      const S* ta = t.a + r * n * n1;
      const S* tb = t.b + r * n;
      S* da = dt.a + r * n * n1;
      S* db = dt.b + r * n;
      for (int k = 0; k < n * n1; k++) da[k] = dwa[k] * *p.alpha_scale * (S(1) - ta[k] * ta[k]);
      for (int s = 0; s < n; s++) db[s] = dw.b[r * n + s] * *p.beta_scale * (S(1) - tb[s] * tb[s]);
    } else if (form == HyperMix::MhcLite) {  // dy for P, b as mhc's; the softmax over the permutations
      const S* hr = pre + r * W;
      S* y = dpre + rows * W + r * W;
      mhc_read_write_weights_backward(wa, w.b + r * n, dwa, dw.b + r * n, n, y);
      // weight_q = softmax(x)_q, M = sum_q weight_q Perm_q:  dweight_q = sum_k dM[k, perm_q[k]];
      // dx = weight (dweight - sum weight dweight)
      const int Rp = W - 2 * n;
      double weights[kMaxLitePermutations], dot = 0;
      lite_weights(p, hr, n, Rp, weights);
      for (int q = 0; q < Rp; q++) {
        const double weight = weights[q];
        double dweight = 0;
        for (int k = 0; k < n; k++) dweight += dwa[k * n1 + 1 + perms[size_t(q) * n + k]];
        y[2 * n + q] = S(weight);  // (weight for now; turned into dx below)
        dot += weight * dweight;
        dpre[r * W + 2 * n + q] = S(dweight);
      }
      for (int q = 0; q < Rp; q++) y[2 * n + q] = S(double(y[2 * n + q]) * (double(dpre[r * W + 2 * n + q]) - dot));
      S* d = dpre + r * W;
      for (int j = 0; j < W; j++) d[j] = y[j] * p.scale[j < n ? 0 : j < 2 * n ? 1 : 2];
    }
  }
  if (form == HyperMix::Mhc) {  // dy = d(s h + bias), dh = s dy (rows, 2n + n^2), M's part in blocks of tokens
    const long nn = long(n) * n, blocks = (rows + kSinkhornBlock - 1) / kSinkhornBlock;
#pragma omp parallel if(rows * n * C > ops::kParallelMinWork)
    {
      std::vector<S> X(size_t(kSinkhornBlock) * nn), dM(size_t(kSinkhornBlock) * nn),
          dX(size_t(kSinkhornBlock) * nn), T(size_t(2 * cfg.sinkhorn_iters) * nn * kSinkhornBlock),
          D(sinkhorn_reverse_scratch(n, cfg.sinkhorn_iters));
#pragma omp for schedule(static)
      for (long blk = 0; blk < blocks; blk++) {
        const long r0 = blk * kSinkhornBlock;
        const int count = int(std::min<long>(kSinkhornBlock, rows - r0));
        for (int b = 0; b < count; b++) {
          const long r = r0 + b;
          const S* wa = w.a + r * n * n1;
          const S* dwa = dw.a + r * n * n1;
          const S* hr = pre + r * W;
          S* y = dy + r * W;
          mhc_read_write_weights_backward(wa, w.b + r * n, dwa, dw.b + r * n, n, y);
          for (long k = 0; k < nn; k++) X[b * nn + k] = p.scale[2] * hr[2 * n + k] + p.bias[2 * n + k];
          for (int s = 0; s < n; s++)
            for (int m = 0; m < n; m++) dM[b * nn + s * n + m] = dwa[s * n1 + 1 + m];
        }
        sinkhorn_block_backward(X.data(), dM.data(), nn, count, n, cfg.sinkhorn_iters, T.data(), D.data(), dX.data());
        for (int b = 0; b < count; b++) {
          S* y = dy + (r0 + b) * W;
          for (long k = 0; k < nn; k++) y[2 * n + k] = dX[b * nn + k];
          S* d = dpre + (r0 + b) * W;
          for (int j = 0; j < W; j++) d[j] = y[j] * p.scale[j < n ? 0 : j < 2 * n ? 1 : 2];
        }
      }
    }
  }
  // the parameter gradients, each a sum over the tokens in token order (the tokens outer, so the rows
  // are read in memory order; every column's sum keeps that order)
  if (form == HyperMix::HcStatic || form == HyperMix::Hc) {
    std::vector<double> a(size_t(n) * n1, 0.0), b(size_t(n), 0.0);
    for (long r = 0; r < rows; r++) {
      for (int k = 0; k < n * n1; k++) a[size_t(k)] += dw.a[r * n * n1 + k];
      for (int s = 0; s < n; s++) b[size_t(s)] += dw.b[r * n + s];
    }
    for (int k = 0; k < n * n1; k++) dp.alpha[k] += S(a[size_t(k)]);
    for (int s = 0; s < n; s++) dp.beta[s] += S(b[size_t(s)]);
  }
  if (form == HyperMix::Hc) {
    double sa = 0, sb = 0;
#pragma omp simd reduction(+ : sa)
    for (long k = 0; k < rows * n * n1; k++) sa += double(dw.a[k]) * t.a[k];
#pragma omp simd reduction(+ : sb)
    for (long k = 0; k < rows * n; k++) sb += double(dw.b[k]) * t.b[k];
    *dp.alpha_scale += S(sa);
    *dp.beta_scale += S(sb);
    // Za = Hn W_a^T, Zb = Hn w_b, the norm folded into both
    folded_projection_backward(dH, dp.alpha_fn, dp.beta_fn, dp.norm.weight, dt.a, dt.b, dhn, H, hrstd, p.alpha_fn,
                               p.beta_fn, p.norm.weight, rows * n, C, n1, 1);
  }
  if (form == HyperMix::AttnRes) {
    // logit_s = w . Hn_s:  dHn_s = dlogit_s w, dw += sum dlogit_s Hn_s; then the keys' RMSNorm
    std::vector<double> a(size_t(C), 0.0);
    for (long k = 0; k < rows * n; k++)
      if (dpre[k] != S(0))
        for (int c = 0; c < C; c++) a[size_t(c)] += double(dpre[k]) * hn[k * C + c];
    for (int c = 0; c < C; c++) dp.query[c] += S(a[size_t(c)]);
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
    for (long k = 0; k < rows * n; k++)
      for (int c = 0; c < C; c++) dhn[k * C + c] = dpre[k] * p.query[c];
    ops::rmsnorm_backward(dH, dp.norm.weight, dhn, H, p.norm.weight, hrstd, int(rows * n), C);
  }
  if (form == HyperMix::Mhc || form == HyperMix::MhcLite) {
    double sc[3] = {0, 0, 0};
    std::vector<double> a(size_t(W), 0.0), b(size_t(W), 0.0);
    for (long r = 0; r < rows; r++)
      for (int j = 0; j < W; j++) {
        a[size_t(j)] += dy[r * W + j];
        b[size_t(j)] += double(dy[r * W + j]) * pre[r * W + j];
      }
    for (int j = 0; j < W; j++) {
      dp.bias[j] += S(a[size_t(j)]);
      sc[j < n ? 0 : j < 2 * n ? 1 : 2] += b[size_t(j)];
    }
    for (int k = 0; k < 3; k++) dp.scale[k] += S(sc[k]);
    // h = z phi^T, the norm folded in
    folded_projection_backward(dH, dp.phi, static_cast<S*>(nullptr), dp.norm.weight, dpre, static_cast<S*>(nullptr),
                               dhn, H, hrstd, p.phi, static_cast<const S*>(nullptr), p.norm.weight, rows, n * C, W, 0);
  }
}

// ---- the mixes' gains ----

namespace {

HyperGain gain_of(const Eigen::MatrixXd& A) {
  HyperGain g;
  g.forward = A.cwiseAbs().rowwise().sum().maxCoeff();
  g.backward = A.cwiseAbs().colwise().sum().maxCoeff();
  g.spectral = Eigen::JacobiSVD<Eigen::MatrixXd>(A).singularValues()(0);
  return g;
}

void keep_max(HyperGain& into, const HyperGain& g) {
  into.forward = std::max(into.forward, g.forward);
  into.backward = std::max(into.backward, g.backward);
  into.spectral = std::max(into.spectral, g.spectral);
}

}  // namespace

template <class S>
HyperGains hyper_gains(int n, const std::vector<const S*>& mixes, long rows) {
  const int n1 = n + 1;
  HyperGains out;
  out.own.resize(mixes.size());
  out.composite.resize(mixes.size());
  Eigen::MatrixXd res(n, n), comp(n, n);
  for (long r = 0; r < rows; r++) {
    comp.setIdentity();
    for (size_t l = 0; l < mixes.size(); l++) {
      const S* w = mixes[l] + r * n * n1;
      for (int t = 0; t < n; t++)
        for (int s = 0; s < n; s++) res(t, s) = w[s * n1 + 1 + t];  // H^res[t, s] = M[s, t]
      comp = res * comp;
      keep_max(out.own[l], gain_of(res));
      keep_max(out.composite[l], gain_of(comp));
    }
  }
  return out;
}

#define NL_HYPER(S)                                                                                                 \
  template void hyper_read_forward(const ModelConfig&, const HyperParams<S>&, const S*, long, S*, S*, S*, S*, S*,   \
                                   S*);                                                                             \
  template void hyper_write_forward(int, const S*, const S*, long, int, S*, S*);                                    \
  template void hyper_write_backward(int, const S*, const S*, const S*, long, int, S*, S*);                         \
  template void hyper_read_backward(const ModelConfig&, const HyperParams<S>&, const HyperParams<S>&, const S*,     \
                                    long, const S*, const S*, const S*, const S*, const S*, const S*, S*, S*, S*, \
                                    S*);                                                                            \
  template HyperGains hyper_gains(int, const std::vector<const S*>&, long);
NL_HYPER(float)
NL_HYPER(double)
#undef NL_HYPER

}  // namespace normlab
