// lanczos.h: matrix-free extreme singular values of a stream Jacobian J (sub-layers [first, last)
// of a model, restricted to chosen input and output tokens): the largest k and smallest k
// eigenvalues of J^T J by implicitly restarted Lanczos (Spectra), each product J^T J v being one
// forward-mode (jvp) and one reverse-mode (vjp) pass. For Jacobians too large to form.
#pragma once

#include <vector>

#include "model/model.h"

namespace normlab::analysis {

struct ExtremeSingularValues {
  int n = 0;                     // dimension of the input space
  std::vector<double> largest;   // descending
  std::vector<double> smallest;  // ascending
  bool converged = false;
  long products = 0;             // J^T J v products used
};

ExtremeSingularValues extreme_singular_values(Model<double>& model, int first, int last,
                                              const std::vector<int>& in_tokens,
                                              const std::vector<int>& out_tokens, int k);

}  // namespace normlab::analysis
