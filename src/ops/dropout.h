// dropout.h: seeded inverted dropout whose mask is a pure function of (seed, index), so backward
// recomputes it instead of storing it. Keep probability 1 - p, kept values scaled by 1 / (1 - p).
#pragma once

#include <cstddef>
#include <cstdint>

namespace normlab::ops {

// out (n) = inp * mask / (1 - p); out may alias inp. p in [0, 1); p = 0 copies. Element i's mask is
// that of index first + i: a shard of a batch (MPI data parallelism) passes its first element's
// index in the whole batch and draws the masks the whole batch would.
template <class S>
void dropout_forward(S* out, const S* inp, double p, uint64_t seed, size_t n, size_t first = 0);

// dinp (n) += dout * mask / (1 - p), with the same (p, seed, first) as the forward call.
template <class S>
void dropout_backward(S* dinp, const S* dout, double p, uint64_t seed, size_t n, size_t first = 0);

}  // namespace normlab::ops
