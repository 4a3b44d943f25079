// lanczos.h: dense stream Jacobians by forward mode, and matrix-free extreme singular values of a stream Jacobian J (sub-layers [first, last)
// of a model, restricted to chosen input and output tokens), each product J^T J v being one
// forward-mode (jvp) and one reverse-mode (vjp) pass. For Jacobians too large to form.
//
// The largest k: implicitly restarted Lanczos (Spectra) on J^T J.
//
// The smallest k, multiplicities included:
// 1. Structural zeros. When the last sub-layer ends in a norm (post, prepost, deepnorm), J = N R with
//    N = diag over output tokens of the norm's Jacobian diag(gamma) J_1, J_1 symmetric. So J^T u = 0
//    for u = diag(gamma)^+ w (w in the null space of J_1, zero wherever gamma is), token by token:
//    J_1 annihilates 1 (LayerNorm, always) and z - mean (LayerNorm) or z (RMSNorm) only at eps = 0;
//    each gamma_i = 0 adds e_i. These S = sum over tokens of that dimension are exact zeros of J,
//    counted from structure, reported as 0 and certified by ||J^T U||_F.
// 2. The rest, in the orthogonal complement of those directions (on the output side, J J^T): by a
//    block Davidson / thick-restarted block Lanczos with locking (block_eigs.h), which keeps the
//    multiplicity of clusters that single-vector Lanczos loses -- e.g. the T values of order
//    eps^(number of post sub-layers) that a Post-LN stack with eps > 0 has on top of its T exact zeros
//    (about 1e-20 with eps = 1e-5 and four sub-layers: numerically zero, not structurally).
//    Operators: for causal models with no structural zeros and invertible d x d diagonal blocks J_ii,
//    J is block lower triangular and (J^T J)^{-1} = J^{-1} J^{-T} is applied by block substitution
//    (T jvps + T vjps, shift-invert at 0); for encoders the same by GMRES preconditioned by the
//    diagonal blocks; otherwise (singular diagonal blocks: every stack ending in a norm) the shifted
//    Gram c I - G with c = 1.001 sigma_max^2. (Shift-invert on the deflated operator would need the
//    right null space of J, which has no closed form, and with eps > 0 the eps-cluster above keeps the
//    deflated diagonal blocks numerically singular anyway.)
// 3. Verification, independent of the solver: Rayleigh-Ritz of G on the returned vectors from fresh
//    products (q vjps and one jvp with q tangents). With R its residual block, every value is within
//    eta = min(||R||, ||R||^2 / gap) of an eigenvalue of G (Kahan; the quadratic residual bound), gap
//    = the distance from the block to the guard -- the next eigenvalue, which the solver locks as well
//    and confirms as the first pair to converge in a fresh random search space -- so
//    |sigma - sigma_true| <= min(sqrt(eta), eta / sigma). converged = every such bound <=
//    kSmallestAtol sigma_max + kSmallestRtol sigma, the largest converged, the structural
//    certificate <= kStructuralTol, within the budget. The quadratic bound assumes that no eigenvalue
//    was missed below the guard, which the block, the random directions and the fresh confirmation
//    make very unlikely but do not prove. When the shift-invert values fail it, the shifted Gram is
//    tried with what is left of the budget.
//
// Budget: work is counted in J^T J products (a jvp tangent + a vjp = 1; a substitution solve = T; a
// diagonal block = d/2), everything included, and capped at clamp(50 n, 10000, 20000) for input
// dimension n unless the caller gives another cap: 50 products per dimension, at least 10000 (small
// Jacobians cost little per product, and a shift-invert solve costs T of them) and at most 20000
// (measured ~8 ms per product for d 128, T 32, 4 layers on one core: under 3 minutes). The largest
// get at most a quarter of it. When it runs out the result says converged = false with the reason;
// `smallest` then holds only the structural zeros, which are certain, and the solver's estimates are
// kept apart as unverified.
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace normlab::analysis {

// The dense Jacobian (row-major, out x in) of sub-layers [first, last) on one sequence (B = 1), for
// perturbations of the tokens in `in_tokens` and outputs at `out_tokens` (all channels): for one
// whole block with at least half the tokens perturbed, from d x d blocks (Model::block_jacobian,
// which says which ranges it covers: one block of a one-stream gpt or encoder); otherwise one
// forward-mode pass with a unit tangent per input coordinate.
std::vector<double> stream_jacobian(const Model<double>& model, int first, int last,
                                    const std::vector<int>& in_tokens, const std::vector<int>& out_tokens);

// The token-local Jacobian dx'_i / dx_i (C x C, row-major out x in) of sub-layers [first, last) at
// one token of one sequence (B = 1), the same matrix as stream_jacobian(model, first, last, {i}, {i}).
// For one whole block, or whole blocks of a causal model, it is chained from
// Model::jvp_block_token_local at cost independent of T; otherwise it is stream_jacobian.
std::vector<double> token_local_jacobian(const Model<double>& model, int first, int last, int token);

// What "converged" promises for each smallest value s (sigma_max the largest singular value):
// |s - s_true| <= kSmallestAtol sigma_max + kSmallestRtol s.
inline constexpr double kSmallestAtol = 1e-8;
inline constexpr double kSmallestRtol = 1e-6;
// ||J^T U||_F / sigma_max above which the structural null space is not trusted (rounding: ~1e-15)
inline constexpr double kStructuralTol = 1e-10;

// The default cap on the work of extreme_singular_values, in J^T J products, for input dimension n:
// clamp(50 n, 10000, 20000).
long default_lanczos_budget(long n);

struct ExtremeSingularValues {
  int n = 0;                     // dimension of the input space
  std::vector<double> largest;   // descending
  std::vector<double> smallest;  // ascending, the structural zeros first; only verified values
  bool converged = false;
  std::string reason;            // why not converged (empty when converged)
  long products = 0;             // all work, in J^T J products (see above)
  long budget = 0;               // the cap on products
  std::string smallest_method;   // "inverse (block substitution)", "inverse (GMRES)", "shifted" or
                                 // "structure" (every wanted value a structural zero)
  long solves = 0;               // (J^T J)^{-1} v applications (inverse method)
  int structural_zeros = 0;      // exact zeros known from the last norm (see above)
  double structural_residual = 0;  // ||J^T U||_F / sigma_max over their directions U
  double smallest_error_bound = 0; // max over the smallest of the bound on |s - s_true|, / sigma_max
  std::vector<double> smallest_unverified;  // not converged: the solver's estimates, ascending
};

// k values at each end; budget <= 0: default_lanczos_budget(n).
ExtremeSingularValues extreme_singular_values(Model<double>& model, int first, int last,
                                              const std::vector<int>& in_tokens,
                                              const std::vector<int>& out_tokens, int k, long budget = 0);

// Encoder-decoder models. Stream Jacobians within one stack are the functions above with a slot range
// of that stack (ModelConfig::slot; the decoder's are [first_decoder_slot(), n_slots()), the memory
// held fixed; its J is block lower triangular over tokens, so the inverse method substitutes). The
// Jacobian of the decoder's last stream (out_tokens, (B, T, C) with B = 1) by the encoder's input
// stream (src_tokens, source positions), through the encoder, its final norm, every cross-attention
// and the decoder: dense by forward mode (Model::jvp_encdec, the target held fixed), and its extremes
// as above (structural zeros from the decoder's last norm; the smallest by the shifted Gram, as J is
// rectangular: T d x S d).
std::vector<double> source_jacobian(const Model<double>& model, const std::vector<int>& src_tokens,
                                    const std::vector<int>& out_tokens);
ExtremeSingularValues extreme_singular_values_source(Model<double>& model, const std::vector<int>& src_tokens,
                                                     const std::vector<int>& out_tokens, int k, long budget = 0);

}  // namespace normlab::analysis
