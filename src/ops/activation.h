// activation.h: element-wise activations of the feed-forward block: GELU (tanh form, as GPT-2), exact
// GELU (erf form, as BERT) and ReLU. Legend and conventions: ops/common.h.
#pragma once

#include <cstddef>

namespace normlab::ops {

// out (n) = gelu(inp) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class S>
void gelu_forward(S* out, const S* inp, size_t n);
// dinp (n) += gelu'(inp) * dout
template <class S>
void gelu_backward(S* dinp, const S* inp, const S* dout, size_t n);

// out (n) = gelu_exact(inp) = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))  (BERT's "gelu")
template <class S>
void gelu_exact_forward(S* out, const S* inp, size_t n);
// dinp (n) += (Phi(x) + x phi(x)) * dout
template <class S>
void gelu_exact_backward(S* dinp, const S* inp, const S* dout, size_t n);

// out = max(x, 0); its derivative at 0 is taken as 0
template <class S>
void relu_forward(S* out, const S* inp, size_t n);
template <class S>
void relu_backward(S* dinp, const S* inp, const S* dout, size_t n);

// Forward-mode tangents: tout (n) = act'(inp (n % primal_n)) * tinp (n), for K tangents laid out
// (K, primal_n).
template <class S>
void gelu_jvp(S* tout, const S* inp, const S* tinp, size_t primal_n, int K);
template <class S>
void gelu_exact_jvp(S* tout, const S* inp, const S* tinp, size_t primal_n, int K);
template <class S>
void relu_jvp(S* tout, const S* inp, const S* tinp, size_t primal_n, int K);

}  // namespace normlab::ops
