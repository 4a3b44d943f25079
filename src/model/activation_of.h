// activation_of.h: the feed-forward activation chosen by the config (model.activation), dispatched to
// its kernel (forward, backward, JVP) by one closed switch each; shared by the model, its forward-mode
// products and the incremental decoder. The element-wise kinds map hid (N, F) to (N, F); the gated
// ones (swiglu, geglu: ops/glu.h) map hid (N, 2F), rows [gate | up], to (N, F): activation_width()
// says which, and the fc projection's output has activation_width(act) * F columns.
#pragma once

#include <cstddef>

#include "model/config.h"
#include "ops/activation.h"
#include "ops/glu.h"

namespace normlab {

// Columns of hid per output column: 1 element-wise, 2 gated.
inline int activation_width(Activation act) {
  switch (act) {
    case Activation::Gelu:
    case Activation::GeluExact:
    case Activation::Relu: return 1;
    case Activation::SwiGlu:
    case Activation::GeGlu: return 2;
  }
  return 1;
}

// out (N, F) = act(hid (N, width F))
template <class S>
void activation_forward(Activation act, S* out, const S* hid, int N, int F) {
  const size_t n = size_t(N) * F;
  switch (act) {
    case Activation::Gelu: return ops::gelu_forward(out, hid, n);
    case Activation::GeluExact: return ops::gelu_exact_forward(out, hid, n);
    case Activation::Relu: return ops::relu_forward(out, hid, n);
    case Activation::SwiGlu: return ops::glu_forward(ops::GluAct::Silu, out, hid, N, F);
    case Activation::GeGlu: return ops::glu_forward(ops::GluAct::Gelu, out, hid, N, F);
  }
}
// dhid (N, width F) += J^T dout (N, F)
template <class S>
void activation_backward(Activation act, S* dhid, const S* hid, const S* dout, int N, int F) {
  const size_t n = size_t(N) * F;
  switch (act) {
    case Activation::Gelu: return ops::gelu_backward(dhid, hid, dout, n);
    case Activation::GeluExact: return ops::gelu_exact_backward(dhid, hid, dout, n);
    case Activation::Relu: return ops::relu_backward(dhid, hid, dout, n);
    case Activation::SwiGlu: return ops::glu_backward(ops::GluAct::Silu, dhid, hid, dout, N, F);
    case Activation::GeGlu: return ops::glu_backward(ops::GluAct::Gelu, dhid, hid, dout, N, F);
  }
}
// tout (K, N, F) = J thid (K, N, width F), at hid (N, width F)
template <class S>
void activation_jvp(Activation act, S* tout, const S* hid, const S* thid, int N, int F, int K) {
  const size_t n = size_t(N) * F;
  switch (act) {
    case Activation::Gelu: return ops::gelu_jvp(tout, hid, thid, n, K);
    case Activation::GeluExact: return ops::gelu_exact_jvp(tout, hid, thid, n, K);
    case Activation::Relu: return ops::relu_jvp(tout, hid, thid, n, K);
    case Activation::SwiGlu: return ops::glu_jvp(ops::GluAct::Silu, tout, hid, thid, N, F, K);
    case Activation::GeGlu: return ops::glu_jvp(ops::GluAct::Gelu, tout, hid, thid, N, F, K);
  }
}

}  // namespace normlab
