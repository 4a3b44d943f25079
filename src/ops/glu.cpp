// glu.cpp: SwiGLU and GeGLU forward, backward and JVP (one vectorizable path for float and double;
// GeGLU's gate is the element-wise GELU's math, ops/gelu_math.h).
#include "ops/glu.h"

#include <cmath>

#include "ops/common.h"
#include "ops/gelu_math.h"
#include "ops/vecmath.h"

namespace normlab::ops {

namespace {

// The gate's value and slope, the activation a template argument so that each row loop below is
// compiled once per activation without a branch inside it, and vectorizes (exp_of: the vectorizable
// float exp of ops/vecmath.h, std::exp in double; a libm call per element before, 15% of a Llama
// step at d = 128).
template <GluAct A, class S>
[[gnu::always_inline]] inline S act_value(S x) {
  if constexpr (A == GluAct::Silu) return x / (S(1) + exp_of(-x));
  else return gelu_value(x);  // the element-wise GELU's own (ops/gelu_math.h)
}

template <GluAct A, class S>
[[gnu::always_inline]] inline S act_slope(S x) {
  if constexpr (A == GluAct::Silu) {
    const S s = S(1) / (S(1) + exp_of(-x));  // sigmoid; (x s)' = s (1 + x (1 - s))
    return s * (S(1) + x * (S(1) - s));
  } else {
    return gelu_slope(x);
  }
}

// Both at once for the backward: SiLU's one sigmoid serves the value and the slope (one exp per
// element, not two); GeGLU's gate takes the element-wise GELU's two functions.
template <GluAct A, class S>
[[gnu::always_inline]] inline void act_value_slope(S x, S& value, S& slope) {
  if constexpr (A == GluAct::Silu) {
    const S s = S(1) / (S(1) + exp_of(-x));
    value = x * s;
    slope = s * (S(1) + x * (S(1) - s));
  } else {
    value = gelu_value(x);
    slope = gelu_slope(x);
  }
}

template <GluAct A, class S>
void forward_rows(S* out, const S* hid, int N, int F) {
#pragma omp parallel for schedule(static) if((long)N * F > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* g = hid + (long)n * 2 * F;
    const S* u = g + F;
    S* y = out + (long)n * F;
#pragma omp simd
    for (int f = 0; f < F; f++) y[f] = act_value<A>(g[f]) * u[f];
  }
}

// y = act(g) u:  dg = act'(g) u dy;  du = act(g) dy
template <GluAct A, class S>
void backward_rows(S* dhid, const S* hid, const S* dout, int N, int F) {
#pragma omp parallel for schedule(static) if((long)N * F > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* g = hid + (long)n * 2 * F;
    const S* u = g + F;
    const S* dy = dout + (long)n * F;
    S* dg = dhid + (long)n * 2 * F;
    S* du = dg + F;
#pragma omp simd
    for (int f = 0; f < F; f++) {
      S value, slope;
      act_value_slope<A>(g[f], value, slope);
      dg[f] += slope * u[f] * dy[f];
      du[f] += value * dy[f];
    }
  }
}

template <GluAct A, class S>
void jvp_rows(S* tout, const S* hid, const S* thid, int N, int F, int K) {
  const long NF = (long)N * F, NF2 = 2 * NF;
#pragma omp parallel for schedule(static) if((long)K * NF > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* g = hid + (long)n * 2 * F;
    const S* u = g + F;
    for (int f = 0; f < F; f++) {
      const S slope_u = act_slope<A>(g[f]) * u[f], value = act_value<A>(g[f]);
      for (int k = 0; k < K; k++) {
        const S* t = thid + k * NF2 + (long)n * 2 * F;
        tout[k * NF + (long)n * F + f] = slope_u * t[f] + value * t[F + f];
      }
    }
  }
}

}  // namespace

template <class S>
void glu_forward(GluAct act, S* out, const S* hid, int N, int F) {
  if (act == GluAct::Silu) return forward_rows<GluAct::Silu>(out, hid, N, F);
  forward_rows<GluAct::Gelu>(out, hid, N, F);
}

template <class S>
void glu_backward(GluAct act, S* dhid, const S* hid, const S* dout, int N, int F) {
  if (act == GluAct::Silu) return backward_rows<GluAct::Silu>(dhid, hid, dout, N, F);
  backward_rows<GluAct::Gelu>(dhid, hid, dout, N, F);
}

template <class S>
void glu_jvp(GluAct act, S* tout, const S* hid, const S* thid, int N, int F, int K) {
  if (act == GluAct::Silu) return jvp_rows<GluAct::Silu>(tout, hid, thid, N, F, K);
  jvp_rows<GluAct::Gelu>(tout, hid, thid, N, F, K);
}

template void glu_forward<float>(GluAct, float*, const float*, int, int);
template void glu_forward<double>(GluAct, double*, const double*, int, int);
template void glu_backward<float>(GluAct, float*, const float*, const float*, int, int);
template void glu_backward<double>(GluAct, double*, const double*, const double*, int, int);
template void glu_jvp<float>(GluAct, float*, const float*, const float*, int, int, int);
template void glu_jvp<double>(GluAct, double*, const double*, const double*, int, int, int);

}  // namespace normlab::ops
