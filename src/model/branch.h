// branch.h: what the branch files (model/branch_attn.cpp, branch_cross.cpp, branch_mlp.cpp: one file
// per kind of sub-layer, its forward, backward, forward-mode, token-local and decoding step side by
// side) share with the skeleton that runs them (model.cpp, model_jvp.cpp, decode.cpp): the threaded
// zeroing and scaling of a buffer. Internal to src/model/.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstring>

#include "ops/common.h"

namespace normlab::branch {

// Zeroes a buffer (before a backward kernel adds into it, or all gradients), split across threads:
// for GPT-2-small sizes the gradients are half a gigabyte.
template <class S>
void zero(S* p, size_t n) {
#pragma omp parallel if((long)n > ops::kParallelMinWork)
  {
    const size_t t = size_t(omp_get_thread_num()), nt = size_t(omp_get_num_threads());
    const size_t begin = n * t / nt, end = n * (t + 1) / nt;
    std::memset(p + begin, 0, (end - begin) * sizeof(S));
  }
}

// v (n) *= c, in place
template <class S>
void scale_in_place(S* v, size_t n, S c) {
#pragma omp parallel for schedule(static) if((long)n > ops::kParallelMinWork)
  for (long i = 0; i < (long)n; i++) v[i] *= c;
}

}  // namespace normlab::branch
