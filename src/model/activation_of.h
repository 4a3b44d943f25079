// activation_of.h: the feed-forward activation chosen by the config, dispatched to its kernel
// (forward, backward, JVP); shared by the model and the incremental decoder.
#pragma once

#include <cstddef>

#include "model/config.h"
#include "ops/activation.h"

namespace normlab {

template <class S>
void activation_forward(Activation act, S* out, const S* inp, size_t n) {
  switch (act) {
    case Activation::Gelu: return ops::gelu_forward(out, inp, n);
    case Activation::GeluExact: return ops::gelu_exact_forward(out, inp, n);
    case Activation::Relu: return ops::relu_forward(out, inp, n);
  }
}
template <class S>
void activation_backward(Activation act, S* dinp, const S* inp, const S* dout, size_t n) {
  switch (act) {
    case Activation::Gelu: return ops::gelu_backward(dinp, inp, dout, n);
    case Activation::GeluExact: return ops::gelu_exact_backward(dinp, inp, dout, n);
    case Activation::Relu: return ops::relu_backward(dinp, inp, dout, n);
  }
}
template <class S>
void activation_jvp(Activation act, S* tout, const S* inp, const S* tinp, size_t primal_n, int K) {
  switch (act) {
    case Activation::Gelu: return ops::gelu_jvp(tout, inp, tinp, primal_n, K);
    case Activation::GeluExact: return ops::gelu_exact_jvp(tout, inp, tinp, primal_n, K);
    case Activation::Relu: return ops::relu_jvp(tout, inp, tinp, primal_n, K);
  }
}

}  // namespace normlab
