// dynnorm.cpp: DyT and Derf forward, backward and JVP. One scalar path for float and double (the
// reference is the math below; tanh and erf are the C library's); sums over rows in double.
#include "ops/dynnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/common.h"

namespace normlab::ops {

namespace {

constexpr double kTwoOverSqrtPi = 1.1283791670955126;  // d/du erf(u) = 2/sqrt(pi) exp(-u^2)

template <class S>
S squash(Squash phi, S u) {
  switch (phi) {
    case Squash::Tanh: return std::tanh(u);
    case Squash::Erf: return std::erf(u);
  }
  return u;  // unreachable
}

// phi'(u)
template <class S>
S squash_slope(Squash phi, S u) {
  switch (phi) {
    case Squash::Tanh: {
      const S t = std::tanh(u);
      return S(1) - t * t;
    }
    case Squash::Erf: return S(kTwoOverSqrtPi) * std::exp(-u * u);
  }
  return S(1);  // unreachable
}

}  // namespace

template <class S>
void dynnorm_forward(Squash phi, S* out, const S* inp, const S* weight, const S* bias, const S* alpha,
                     const S* shift, int N, int C) {
  const S a = *alpha, s = shift ? *shift : S(0);
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* x = inp + (long)n * C;
    S* y = out + (long)n * C;
    for (int c = 0; c < C; c++) y[c] = weight[c] * squash(phi, a * x[c] + s) + (bias ? bias[c] : S(0));
  }
}

template <class S>
void dynnorm_backward(Squash phi, S* dinp, S* dweight, S* dbias, S* dalpha, S* dshift, const S* dout,
                      const S* inp, const S* weight, const S* alpha, const S* shift, int N, int C) {
  // y = w phi(u) + b, u = a x + s:  dx = dy w a phi'(u);  dw = sum dy phi(u);  db = sum dy;
  // da = sum dy w phi'(u) x;  ds = sum dy w phi'(u)
  const S a = *alpha, s = shift ? *shift : S(0);
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
  std::vector<double> da_block(size_t(blocks), 0.0), ds_block(size_t(blocks), 0.0);
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock, width = std::min(kColumnBlock, C - c0);
    double dw[kColumnBlock] = {}, db[kColumnBlock] = {};
    double da = 0, ds = 0;
    for (int n = 0; n < N; n++) {
      const long row = (long)n * C + c0;
      for (int k = 0; k < width; k++) {
        const S x = inp[row + k], dy = dout[row + k], u = a * x + s;
        const S slope = squash_slope(phi, u), dyw = dy * weight[c0 + k];
        dinp[row + k] += dyw * a * slope;
        dw[k] += double(dy) * double(squash(phi, u));
        db[k] += double(dy);
        da += double(dyw) * double(slope) * double(x);
        ds += double(dyw) * double(slope);
      }
    }
    for (int k = 0; k < width; k++) {
      if (dweight) dweight[c0 + k] += S(dw[k]);
      if (dbias) dbias[c0 + k] += S(db[k]);
    }
    da_block[size_t(blk)] = da;
    ds_block[size_t(blk)] = ds;
  }
  // the blocks' sums in block order: the same result for any thread count
  double da = 0, ds = 0;
  for (int blk = 0; blk < blocks; blk++) {
    da += da_block[size_t(blk)];
    ds += ds_block[size_t(blk)];
  }
  *dalpha += S(da);
  if (dshift) *dshift += S(ds);
}

template <class S>
void dynnorm_jvp(Squash phi, S* tout, const S* tinp, const S* inp, const S* weight, const S* alpha,
                 const S* shift, int K, int N, int C) {
  // ty = w a phi'(a x + s) tx: diagonal
  const S a = *alpha, s = shift ? *shift : S(0);
  const long NC = (long)N * C;
#pragma omp parallel for schedule(static) if((long)K * NC > kParallelMinWork)
  for (long i = 0; i < NC; i++) {
    const S d = weight[i % C] * a * squash_slope(phi, a * inp[i] + s);
    for (int k = 0; k < K; k++) tout[(long)k * NC + i] = d * tinp[(long)k * NC + i];
  }
}

template void dynnorm_forward<float>(Squash, float*, const float*, const float*, const float*, const float*, const float*,
                                   int, int);
template void dynnorm_backward<float>(Squash, float*, float*, float*, float*, float*, const float*, const float*, const float*,
                                    const float*, const float*, int, int);
template void dynnorm_jvp<float>(Squash, float*, const float*, const float*, const float*, const float*, const float*, int, int,
                               int);
template void dynnorm_forward<double>(Squash, double*, const double*, const double*, const double*, const double*, const double*,
                                   int, int);
template void dynnorm_backward<double>(Squash, double*, double*, double*, double*, double*, const double*, const double*, const double*,
                                    const double*, const double*, int, int);
template void dynnorm_jvp<double>(Squash, double*, const double*, const double*, const double*, const double*, const double*, int, int,
                               int);

}  // namespace normlab::ops
