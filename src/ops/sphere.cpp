// sphere.cpp: nGPT's operations on the unit sphere (ops/sphere.h); reductions in double.
#include "ops/sphere.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/common.h"

namespace normlab::ops {

namespace {
double sign_of(double u) { return u > 0 ? 1.0 : u < 0 ? -1.0 : 0.0; }  // (torch's: 0 at 0)
}  // namespace

template <class S>
void sphere_residual_forward(S* out, S* r, const S* x, const S* g, const S* a, double factor, double eps, long N,
                             int C) {
#pragma omp parallel for schedule(static) if(N * C > kParallelMinWork)
  for (long n = 0; n < N; n++) {
    const S* xn = x + n * C;
    double ss = 0;
    for (int c = 0; c < C; c++) ss += double(xn[c]) * xn[c];
    const double rn = 1.0 / std::sqrt(ss + eps);
    r[n] = S(rn);
    for (int c = 0; c < C; c++) {
      const double A = xn[c] * rn, lr = std::abs(double(a[c]) * factor);
      out[n * C + c] = S(A + lr * (double(g[n * C + c]) - A));
    }
  }
}

template <class S>
void sphere_residual_backward(S* dx, S* dg, S* da, const S* dout, const S* x, const S* g, const S* a, double factor,
                              const S* r, long N, int C) {
#pragma omp parallel for schedule(static) if(N * C > kParallelMinWork)
  for (long n = 0; n < N; n++) {
    const S* xn = x + n * C;
    const S* dy = dout + n * C;
    const double rn = r[n];
    // dA = (1 - |a|) dy;  dx = r dA - r^3 x (x . dA)
    double dot = 0;
    for (int c = 0; c < C; c++) dot += double(xn[c]) * (1.0 - std::abs(double(a[c]) * factor)) * dy[c];
    for (int c = 0; c < C; c++) {
      const double lr = std::abs(double(a[c]) * factor);
      dx[n * C + c] += S(rn * (1.0 - lr) * dy[c] - rn * rn * rn * xn[c] * dot);
      dg[n * C + c] += S(lr * dy[c]);
    }
  }
  if (!da) return;
  // da_c = factor sign(a_c factor) sum_n dy_nc (g_nc - A_nc), a block of channels per thread
#pragma omp parallel for schedule(static) if(N * C > kParallelMinWork)
  for (int c0 = 0; c0 < C; c0 += kColumnBlock) {
    const int width = std::min(kColumnBlock, C - c0);
    double acc[kColumnBlock] = {};
    for (long n = 0; n < N; n++)
      for (int k = 0; k < width; k++) {
        const long i = n * C + c0 + k;
        acc[k] += double(dout[i]) * (double(g[i]) - double(x[i]) * double(r[n]));
      }
    for (int k = 0; k < width; k++) da[c0 + k] += S(acc[k] * factor * sign_of(double(a[c0 + k]) * factor));
  }
}

template <class S>
void sphere_residual_jvp(S* tout, const S* tx, const S* tg, const S* x, const S* r, const S* a, double factor, long KN,
                         long N, int C) {
#pragma omp parallel for schedule(static) if(KN * C > kParallelMinWork)
  for (long kn = 0; kn < KN; kn++) {
    const long n = kn % N;
    const S* xn = x + n * C;
    const S* t = tx + kn * C;
    const double rn = r[n];
    double dot = 0;
    for (int c = 0; c < C; c++) dot += double(xn[c]) * t[c];
    for (int c = 0; c < C; c++) {
      const double lr = std::abs(double(a[c]) * factor), tA = rn * t[c] - rn * rn * rn * xn[c] * dot;
      tout[kn * C + c] = S((1.0 - lr) * tA + lr * double(tg[kn * C + c]));
    }
  }
}

template <class S>
void sphere_heads_forward(S* buf, int ld, long rows, int H, int HS, int period, const S* s, double factor, double eps,
                          S* raw, S* r) {
  const long W = long(H) * HS;
#pragma omp parallel for schedule(static) if(rows * W > kParallelMinWork)
  for (long n = 0; n < rows; n++)
    for (int h = 0; h < H; h++) {
      S* y = buf + n * ld + long(h) * HS;
      S* x = raw + n * W + long(h) * HS;
      double ss = 0;
      for (int j = 0; j < HS; j++) {
        x[j] = y[j];
        ss += double(y[j]) * y[j];
      }
      const double rn = 1.0 / std::sqrt(ss + eps);
      r[n * H + h] = S(rn);
      const int col0 = int((long(h) * HS) % period);
      for (int j = 0; j < HS; j++) y[j] = S(double(s[col0 + j]) * factor * x[j] * rn);
    }
}

template <class S>
void sphere_heads_backward(S* dbuf, S* ds, int ld, long rows, int H, int HS, int period, const S* s, double factor,
                           const S* raw, const S* r) {
  const long W = long(H) * HS;
  // ds first (it reads dy), in double, a column at a time over rows in row order
  if (ds) {
    std::vector<double> acc(size_t(period), 0.0);
    for (long n = 0; n < rows; n++)
      for (int h = 0; h < H; h++) {
        const S* dy = dbuf + n * ld + long(h) * HS;
        const S* x = raw + n * W + long(h) * HS;
        const double rn = r[n * H + h];
        const int col0 = int((long(h) * HS) % period);
        for (int j = 0; j < HS; j++) acc[size_t(col0 + j)] += double(dy[j]) * x[j] * rn;
      }
    for (int j = 0; j < period; j++) ds[j] += S(acc[size_t(j)] * factor);
  }
#pragma omp parallel for schedule(static) if(rows * W > kParallelMinWork)
  for (long n = 0; n < rows; n++)
    for (int h = 0; h < H; h++) {
      S* d = dbuf + n * ld + long(h) * HS;
      const S* x = raw + n * W + long(h) * HS;
      const double rn = r[n * H + h];
      const int col0 = int((long(h) * HS) % period);
      // y = s z, z = r x:  dz = s dy;  dx = r dz - r^3 x (x . dz)
      double dot = 0;
      for (int j = 0; j < HS; j++) dot += double(x[j]) * double(s[col0 + j]) * factor * d[j];
      for (int j = 0; j < HS; j++)
        d[j] = S(rn * double(s[col0 + j]) * factor * d[j] - rn * rn * rn * x[j] * dot);
    }
}

template <class S>
void sphere_heads_jvp(S* tbuf, int ld, long KR, long R, long row0, int H, int HS, int period, const S* s,
                      double factor, const S* raw, const S* r) {
  const long W = long(H) * HS;
#pragma omp parallel for schedule(static) if(KR * W > kParallelMinWork)
  for (long kr = 0; kr < KR; kr++) {
    const long n = row0 + kr % R;
    for (int h = 0; h < H; h++) {
      S* t = tbuf + kr * ld + long(h) * HS;
      const S* x = raw + n * W + long(h) * HS;
      const double rn = r[n * H + h];
      const int col0 = int((long(h) * HS) % period);
      double dot = 0;
      for (int j = 0; j < HS; j++) dot += double(x[j]) * t[j];
      for (int j = 0; j < HS; j++) t[j] = S(double(s[col0 + j]) * factor * (rn * t[j] - rn * rn * rn * x[j] * dot));
    }
  }
}

template <class S>
void scale_columns(S* out, const S* in, long rows, int W, const S* s, double factor) {
#pragma omp parallel for schedule(static) if(rows * W > kParallelMinWork)
  for (long n = 0; n < rows; n++)
    for (int j = 0; j < W; j++) out[n * W + j] = S(double(in[n * W + j]) * double(s[j]) * factor);
}

template <class S>
void scale_columns_param_grad(S* ds, const S* dout, const S* in, long rows, int W, double factor) {
#pragma omp parallel for schedule(static) if(rows * W > kParallelMinWork)
  for (int j0 = 0; j0 < W; j0 += kColumnBlock) {
    const int width = std::min(kColumnBlock, W - j0);
    double acc[kColumnBlock] = {};
    for (long n = 0; n < rows; n++)
      for (int k = 0; k < width; k++) acc[k] += double(dout[n * W + j0 + k]) * in[n * W + j0 + k];
    for (int k = 0; k < width; k++) ds[j0 + k] += S(acc[k] * factor);
  }
}

#define NL_INSTANTIATE(S)                                                                                        \
  template void sphere_residual_forward<S>(S*, S*, const S*, const S*, const S*, double, double, long, int);     \
  template void sphere_residual_backward<S>(S*, S*, S*, const S*, const S*, const S*, const S*, double, const S*, \
                                            long, int);                                                          \
  template void sphere_residual_jvp<S>(S*, const S*, const S*, const S*, const S*, const S*, double, long, long,  \
                                       int);                                                                     \
  template void sphere_heads_forward<S>(S*, int, long, int, int, int, const S*, double, double, S*, S*);         \
  template void sphere_heads_backward<S>(S*, S*, int, long, int, int, int, const S*, double, const S*, const S*); \
  template void sphere_heads_jvp<S>(S*, int, long, long, long, int, int, int, const S*, double, const S*,         \
                                    const S*);                                                                   \
  template void scale_columns<S>(S*, const S*, long, int, const S*, double);                                      \
  template void scale_columns_param_grad<S>(S*, const S*, const S*, long, int, double);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab::ops
