// dropout.cpp: counter-based dropout mask (splitmix64 of seed and index).
#include "ops/dropout.h"
#include "ops/common.h"

namespace normlab::ops {

static bool dropout_keep(uint64_t seed, uint64_t i, double p) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const double u = double(z >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  return u >= p;
}

template <class S>
void dropout_forward(S* out, const S* inp, double p, uint64_t seed, size_t n, size_t first) {
  const S scale = S(1.0 / (1.0 - p));
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++)
    out[i] = (p == 0.0) ? inp[i] : (dropout_keep(seed, first + uint64_t(i), p) ? inp[i] * scale : S(0));
}

template <class S>
void dropout_backward(S* dinp, const S* dout, double p, uint64_t seed, size_t n, size_t first) {
  const S scale = S(1.0 / (1.0 - p));
#pragma omp parallel for schedule(static) if((long)n > kParallelMinWork)
  for (long i = 0; i < (long)n; i++)
    if (p == 0.0 || dropout_keep(seed, first + uint64_t(i), p)) dinp[i] += (p == 0.0 ? dout[i] : dout[i] * scale);
}

template void dropout_forward<float>(float*, const float*, double, uint64_t, size_t, size_t);
template void dropout_forward<double>(double*, const double*, double, uint64_t, size_t, size_t);
template void dropout_backward<float>(float*, const float*, double, uint64_t, size_t, size_t);
template void dropout_backward<double>(double*, const double*, double, uint64_t, size_t, size_t);

}  // namespace normlab::ops
