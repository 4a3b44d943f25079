// jacobian.h: the Jacobian instrument (docs/INSTRUMENTS.md; claims in docs/SOURCES.md): at every norm site, the LayerNorm /
// RMSNorm Jacobian in closed form against autodiff, its singular values, numerical rank, kernel and
// what eps and gamma change; per block the token-local (d x d) and full-sequence ((T d) x (T d))
// Jacobians with the Pre-LN bound sigma_min(I + A) >= 1 - ||A|| and the Post-LN rank check; and the
// end-to-end Jacobian with the product bound prod(1 - ||A_l||). Everything is computed in double
// through the model's public forward-mode (jvp) path. For an encoder-decoder model: the decoder's and
// the source's stream Jacobians (analyze_jacobian_encdec, below).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace normlab::analysis {

struct Spectrum {
  int rows = 0, cols = 0;
  std::vector<double> sv;  // descending
  double tol = 0;          // rank tolerance
  int rank = 0;
  double max() const { return sv.empty() ? 0 : sv.front(); }
  double min() const { return sv.empty() ? 0 : sv.back(); }
};

struct NormSiteReport {
  std::string site;            // e.g. "h.0.attn.ln_in", "ln_f"
  int token = 0;
  double closed_form_err = 0;  // max |J_closed_form - J_autodiff|
  Spectrum spectrum;
  bool statistic = true;       // the kind divides by a statistic (LayerNorm, RMSNorm; not DyT, Derf):
                               // the predictions below exist only then (0 otherwise)
  double var = 0;              // variance (LayerNorm) or mean square (RMSNorm) of the input row
  double scale = 0;            // s = sqrt(var + eps)
  double predicted_bulk = 0;   // 1/s: the d-2 (LayerNorm) or d-1 (RMSNorm) equal singular values
  double predicted_small = 0;  // (1/s) eps / (var + eps): the z_hat direction, 0 at eps = 0
  double measured_bulk_spread = 0;  // max relative deviation of the bulk from 1/s (gamma = 1 only)
  double j_ones = 0, j_zhat = 0;    // ||J 1|| / ||1||, ||J zhat|| / ||zhat||
  bool unit_gamma = true;
  double gamma_max_dev = 0;    // max |gamma_i - 1| of the site's own gain
  double gamma_left_err = 0;   // max |J_gamma - diag(gamma) J_1|  (gamma multiplies from the left)
  double gamma_right_err = 0;  // max |J_gamma - J_1 diag(gamma)|  (source 000 Remark 1.2's claim, docs/SOURCES.md)
};

struct BlockReport {
  int layer = 0;
  std::string placement;
  Spectrum local;                // d x d, dy_i / dx_i at the token (n d x n d with n hyper-connected streams)
  std::optional<Spectrum> full;  // (T d) x (T d) (likewise)
  bool residual_form = false;    // x + ... (methods.h residual_form: pre, sandwich, none, rezero, ...): J = I + A
  double local_norm_a = 0;       // ||J_local - I||_2
  std::optional<double> full_norm_a;
  std::string bound_verdict;     // sigma_min(J) >= 1 - ||A|| (residual-form blocks)
  std::string rank_verdict;      // rank <= d - 2 (blocks ending in a norm)
};

struct EndToEndReport {
  Spectrum local;
  std::optional<Spectrum> full;
  // matrix-free (Lanczos on J^T J) extremes of the full-sequence Jacobian, and when the dense one
  // exists too, the largest relative difference between the two
  // (analysis/lanczos.h: the smallest start with the structural zeros; only verified values)
  std::vector<double> lanczos_largest, lanczos_smallest;
  bool lanczos_converged = false;
  std::string lanczos_reason;               // why not converged (empty when converged)
  long lanczos_products = 0;                // all work, in J^T J products
  long lanczos_budget = 0;                  // the cap on it
  std::string lanczos_smallest_method;      // "inverse (block substitution)", "inverse (GMRES)", "shifted" or "structure"
  long lanczos_solves = 0;                  // (J^T J)^{-1} v applications (inverse method)
  int lanczos_structural_zeros = 0;         // exact zeros from the last norm's left null space
  double lanczos_structural_residual = 0;   // ||J^T U||_F / sigma_max over those directions
  double lanczos_smallest_error_bound = 0;  // bound on |s - s_true| / sigma_max over the smallest
  std::vector<double> lanczos_smallest_unverified;  // not converged: the solver's estimates
  std::optional<double> lanczos_smallest_vs_dense;  // max |s - s_dense| / s_dense over the smallest
  std::optional<double> lanczos_vs_dense;
  std::optional<double> product_bound;  // prod_l (1 - ||A_l||) when every block is residual-form
  std::string verdict;
};

struct JacobianReport {
  std::vector<NormSiteReport> norms;
  std::vector<BlockReport> blocks;
  EndToEndReport end_to_end;
  int T = 0, d = 0, token = 0;
  // the values per token of the blocks' and the end-to-end Jacobians: d, or n d for n hyper-connected
  // streams (model.hyper; each block maps the token's n streams)
  int state = 0, streams = 1;
  double eps = 0;
  NormKind norm_kind = NormKind::LayerNorm;
};

struct JacobianOptions {
  int token = -1;           // -1: the last token
  bool full = true;         // also the full-sequence Jacobians
  long full_max_dim = 4096; // skip the full-sequence Jacobians when T * d exceeds this
  int lanczos_k = 5;        // extreme singular values computed matrix-free (0: skip)
  long lanczos_budget = 0;  // cap on their work in J^T J products (0: clamp(50 T d, 10000, 20000))
};

// The model must have run forward on one sequence (B = 1) in evaluation mode.
// (Non-const: the matrix-free path runs reverse mode, which writes the parameter gradients.)
JacobianReport analyze_jacobian(Model<double>& model, const JacobianOptions& options);

// The singular values of a dense row-major (rows, cols) matrix, with its rank tolerance and rank.
Spectrum spectrum_of(const std::vector<double>& m, int rows, int cols);


nlohmann::json to_json(const JacobianReport& report);
void print_report(const JacobianReport& report);

// ---- Encoder-decoder models (jacobian_encdec.cpp) ----
//
// Two Jacobians of the decoder's last stream (before ln_f, (T d) rows), each dense by forward mode
// while it fits (both dimensions <= full_max_dim) and by its lanczos_k extreme singular values
// matrix-free (lanczos.h), compared with each other when both exist:
// - "decoder": by the decoder's input stream (T d columns), the memory held fixed: the decoder stack
//   alone (self-attention, cross-attention, FFN per layer);
// - "source": by the encoder's input stream (S d columns), through the encoder, its final norm, every
//   cross-attention and the decoder.
struct EncDecJacobian {
  std::string name;              // "decoder" or "source"
  int rows = 0, cols = 0;
  std::optional<Spectrum> dense;
  std::vector<double> lanczos_largest, lanczos_smallest;  // as EndToEndReport's
  bool lanczos_converged = false;
  std::string lanczos_reason, lanczos_smallest_method;
  long lanczos_products = 0, lanczos_budget = 0;
  int lanczos_structural_zeros = 0;
  double lanczos_structural_residual = 0, lanczos_smallest_error_bound = 0;
  std::vector<double> lanczos_smallest_unverified;
  std::optional<double> lanczos_vs_dense;           // max |s - s_dense| / sigma_max
  std::optional<double> lanczos_smallest_vs_dense;  // max |s - s_dense| / s_dense where resolvable
};

struct EncDecJacobianReport {
  int T = 0, S = 0, d = 0;
  NormKind norm_kind = NormKind::LayerNorm;
  double eps = 0;
  EncDecJacobian decoder, source;
};

// The model (an encdec) must have run forward on one source-target pair (B = 1) in evaluation mode.
// options.token is not used (the token-local block Jacobians are gpt / encoder only).
EncDecJacobianReport analyze_jacobian_encdec(Model<double>& model, const JacobianOptions& options);
nlohmann::json to_json(const EncDecJacobianReport& report);
void print_report(const EncDecJacobianReport& report);

}  // namespace normlab::analysis
