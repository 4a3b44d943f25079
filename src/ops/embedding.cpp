// embedding.cpp: token + position embedding forward and backward.
#include "ops/embedding.h"

namespace normlab::ops {

template <class S>
void embedding_forward(S* out, const int32_t* ids, const S* wte, const S* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * T; n++) {
    const S* te = wte + (long)ids[n] * C;
    const S* pe = wpe + (long)(n % T) * C;
    S* o = out + (long)n * C;
    for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
  }
}

template <class S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* ids, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; c++)
    for (int n = 0; n < B * T; n++) {
      const S d = dout[(long)n * C + c];
      dwte[(long)ids[n] * C + c] += d;
      dwpe[(long)(n % T) * C + c] += d;
    }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int,
                                       int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int,
                                        int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int,
                                         int);

}  // namespace normlab::ops
