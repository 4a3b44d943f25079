// embedding.cpp: token + position (+ token-type) embedding forward and backward.
#include "ops/embedding.h"

#include <algorithm>

#include "ops/common.h"

namespace normlab::ops {

template <class S>
void embedding_forward(S* out, const int32_t* ids, const S* wte, const S* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static) if((long)B * T * C > kParallelMinWork)
  for (int n = 0; n < B * T; n++) {
    const S* te = wte + (long)ids[n] * C;
    S* o = out + (long)n * C;
    if (!wpe) {  // no learned positions (RoPE, or none)
      for (int c = 0; c < C; c++) o[c] = te[c];
      continue;
    }
    const S* pe = wpe + (long)(n % T) * C;
    for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
  }
}

template <class S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* ids, int B, int T, int C) {
#pragma omp parallel for schedule(static) if((long)B * T * C > kParallelMinWork)
  for (int c0 = 0; c0 < C; c0 += kColumnBlock) {
    const int width = std::min(kColumnBlock, C - c0);
    for (int n = 0; n < B * T; n++) {
      const S* d = dout + (long)n * C + c0;
      S* te = dwte + (long)ids[n] * C + c0;
      for (int k = 0; k < width; k++) te[k] += d[k];
      if (!dwpe) continue;
      S* pe = dwpe + (long)(n % T) * C + c0;
      for (int k = 0; k < width; k++) pe[k] += d[k];
    }
  }
}

template <class S>
void token_type_forward(S* out, const int32_t* types, const S* wtt, int N, int C) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int n = 0; n < N; n++) {
    const S* tt = wtt + (long)types[n] * C;
    S* o = out + (long)n * C;
    for (int c = 0; c < C; c++) o[c] += tt[c];
  }
}

template <class S>
void token_type_backward(S* dwtt, const S* dout, const int32_t* types, int N, int C) {
#pragma omp parallel for schedule(static) if((long)N * C > kParallelMinWork)
  for (int c0 = 0; c0 < C; c0 += kColumnBlock) {
    const int width = std::min(kColumnBlock, C - c0);
    for (int n = 0; n < N; n++) {
      const S* d = dout + (long)n * C + c0;
      S* tt = dwtt + (long)types[n] * C + c0;
      for (int k = 0; k < width; k++) tt[k] += d[k];
    }
  }
}

template void token_type_forward<float>(float*, const int32_t*, const float*, int, int);
template void token_type_forward<double>(double*, const int32_t*, const double*, int, int);
template void token_type_backward<float>(float*, const float*, const int32_t*, int, int);
template void token_type_backward<double>(double*, const double*, const int32_t*, int, int);

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int,
                                       int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int,
                                        int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int,
                                         int);

}  // namespace normlab::ops
