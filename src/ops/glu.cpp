// glu.cpp: SwiGLU and GeGLU forward, backward and JVP (one scalar path for float and double; GeGLU's
// gate is the element-wise GELU's math, ops/gelu_math.h).
#include "ops/glu.h"

#include <cmath>

#include "ops/common.h"
#include "ops/gelu_math.h"

namespace normlab::ops {

namespace {

template <class S>
S act_value(GluAct act, S x) {
  switch (act) {
    case GluAct::Silu: return x / (S(1) + std::exp(-x));
    case GluAct::Gelu: return gelu_value(x);  // the element-wise GELU's own (ops/gelu_math.h)
  }
  return x;  // unreachable
}

template <class S>
S act_slope(GluAct act, S x) {
  switch (act) {
    case GluAct::Silu: {
      const S s = S(1) / (S(1) + std::exp(-x));  // sigmoid; (x s)' = s (1 + x (1 - s))
      return s * (S(1) + x * (S(1) - s));
    }
    case GluAct::Gelu: return gelu_slope(x);
  }
  return S(1);  // unreachable
}

}  // namespace

template <class S>
void glu_forward(GluAct act, S* out, const S* hid, int N, int F) {
#pragma omp parallel for schedule(static) if((long)N * F > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* g = hid + (long)n * 2 * F;
    const S* u = g + F;
    S* y = out + (long)n * F;
    for (int f = 0; f < F; f++) y[f] = act_value(act, g[f]) * u[f];
  }
}

template <class S>
void glu_backward(GluAct act, S* dhid, const S* hid, const S* dout, int N, int F) {
  // y = act(g) u:  dg = act'(g) u dy;  du = act(g) dy
#pragma omp parallel for schedule(static) if((long)N * F > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* g = hid + (long)n * 2 * F;
    const S* u = g + F;
    const S* dy = dout + (long)n * F;
    S* dg = dhid + (long)n * 2 * F;
    S* du = dg + F;
    for (int f = 0; f < F; f++) {
      dg[f] += act_slope(act, g[f]) * u[f] * dy[f];
      du[f] += act_value(act, g[f]) * dy[f];
    }
  }
}

template <class S>
void glu_jvp(GluAct act, S* tout, const S* hid, const S* thid, int N, int F, int K) {
  const long NF = (long)N * F, NF2 = 2 * NF;
#pragma omp parallel for schedule(static) if((long)K * NF > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* g = hid + (long)n * 2 * F;
    const S* u = g + F;
    for (int f = 0; f < F; f++) {
      const S slope_u = act_slope(act, g[f]) * u[f], value = act_value(act, g[f]);
      for (int k = 0; k < K; k++) {
        const S* t = thid + k * NF2 + (long)n * 2 * F;
        tout[k * NF + (long)n * F + f] = slope_u * t[f] + value * t[F + f];
      }
    }
  }
}

template void glu_forward<float>(GluAct, float*, const float*, int, int);
template void glu_forward<double>(GluAct, double*, const double*, int, int);
template void glu_backward<float>(GluAct, float*, const float*, const float*, int, int);
template void glu_backward<double>(GluAct, double*, const double*, const double*, int, int);
template void glu_jvp<float>(GluAct, float*, const float*, const float*, int, int, int);
template void glu_jvp<double>(GluAct, double*, const double*, const double*, int, int, int);

}  // namespace normlab::ops
