// dropout.h: seeded inverted dropout whose mask is a pure function of (seed, index), so backward
// recomputes it instead of storing it. Keep probability 1 - p, kept values scaled by 1 / (1 - p).
#pragma once

#include <cstddef>
#include <cstdint>

namespace normlab::ops {

// out (n) = inp * mask / (1 - p); out may alias inp. p in [0, 1); p = 0 copies.
template <class S>
void dropout_forward(S* out, const S* inp, double p, uint64_t seed, size_t n);

// dinp (n) += dout * mask / (1 - p), with the same (p, seed) as the forward call.
template <class S>
void dropout_backward(S* dinp, const S* dout, double p, uint64_t seed, size_t n);

}  // namespace normlab::ops
