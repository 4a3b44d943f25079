// lanczos.h: dense stream Jacobians by forward mode, and matrix-free extreme singular values of a stream Jacobian J (sub-layers [first, last)
// of a model, restricted to chosen input and output tokens): the largest k and smallest k
// eigenvalues of J^T J by implicitly restarted Lanczos (Spectra), each product J^T J v being one
// forward-mode (jvp) and one reverse-mode (vjp) pass. For Jacobians too large to form.
//
// The smallest: near zero, J^T J's eigenvalues are too close together for Lanczos on J^T J. For a
// causal model over whole sequences, J is block lower triangular over tokens (output token i
// depends on input tokens j <= i), so J^{-1} and J^{-T} are applied matrix-free by block
// substitution (one jvp or vjp per token, plus the LU factors of the d x d diagonal blocks J_ii),
// and Lanczos on (J^T J)^{-1} = J^{-1} J^{-T} finds 1/sigma_min^2 first (shift-invert at 0). For
// bidirectional models J^{-1} and J^{-T} come from GMRES preconditioned by the diagonal blocks.
// Otherwise (a singular diagonal block, as in every block ending in a LayerNorm, whose Jacobian
// annihilates the constant direction, or GMRES not converging) Lanczos runs on sigma_max^2 I - J^T J.
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace normlab::analysis {

// The dense Jacobian (row-major, out x in) of sub-layers [first, last) on one sequence (B = 1), for
// perturbations of the tokens in `in_tokens` and outputs at `out_tokens` (all channels): one
// forward-mode pass with a unit tangent per input coordinate.
std::vector<double> stream_jacobian(const Model<double>& model, int first, int last,
                                    const std::vector<int>& in_tokens, const std::vector<int>& out_tokens);

// The token-local Jacobian dx'_i / dx_i (C x C, row-major out x in) of sub-layers [first, last) at
// one token of one sequence (B = 1), the same matrix as stream_jacobian(model, first, last, {i}, {i}).
// For one whole block, or whole blocks of a causal model, it is chained from
// Model::jvp_block_token_local at cost independent of T; otherwise it is stream_jacobian.
std::vector<double> token_local_jacobian(const Model<double>& model, int first, int last, int token);

struct ExtremeSingularValues {
  int n = 0;                     // dimension of the input space
  std::vector<double> largest;   // descending
  std::vector<double> smallest;  // ascending
  bool converged = false;
  long products = 0;             // J^T J v products used
  std::string smallest_method;   // "inverse (block substitution)", "inverse (GMRES)" or "shifted"
  long solves = 0;               // (J^T J)^{-1} v applications (inverse method), T jvps + T vjps each
};

ExtremeSingularValues extreme_singular_values(Model<double>& model, int first, int last,
                                              const std::vector<int>& in_tokens,
                                              const std::vector<int>& out_tokens, int k);

}  // namespace normlab::analysis
