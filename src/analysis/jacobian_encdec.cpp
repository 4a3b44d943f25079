// jacobian_encdec.cpp: the Jacobian instrument on an encoder-decoder model: the decoder's last stream
// by the decoder's input stream (memory fixed) and by the encoder's input stream (through both
// stacks), dense and matrix-free (jacobian.h).
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/jacobian.h"
#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "util/error.h"

namespace normlab::analysis {

namespace {


// Copies the matrix-free result into the report and compares it with the dense spectrum, if any.
void take_extremes(EncDecJacobian& e, const ExtremeSingularValues& x) {
  e.lanczos_largest = x.largest;
  e.lanczos_smallest = x.smallest;
  e.lanczos_converged = x.converged;
  e.lanczos_reason = x.reason;
  e.lanczos_products = x.products;
  e.lanczos_budget = x.budget;
  e.lanczos_smallest_method = x.smallest_method;
  e.lanczos_structural_zeros = x.structural_zeros;
  e.lanczos_structural_residual = x.structural_residual;
  e.lanczos_smallest_error_bound = x.smallest_error_bound;
  e.lanczos_smallest_unverified = x.smallest_unverified;
  if (!e.dense || x.largest.empty()) return;
  const std::vector<double>& sv = e.dense->sv;  // min(rows, cols) values, descending
  double worst = 0, worst_small = 0;
  for (size_t i = 0; i < x.largest.size(); i++) worst = std::max(worst, std::abs(x.largest[i] - sv[i]) / sv[0]);
  bool resolvable = !x.smallest.empty();  // relative to themselves only where the dense SVD resolves them
  for (size_t i = 0; i < x.smallest.size() && i < sv.size(); i++) {
    const double dense = sv[sv.size() - 1 - i];
    worst = std::max(worst, std::abs(x.smallest[i] - dense) / sv[0]);
    worst_small = std::max(worst_small, std::abs(x.smallest[i] - dense) / std::max(dense, 1e-300));
    resolvable = resolvable && dense > 1e-10 * sv[0];
  }
  e.lanczos_vs_dense = worst;
  if (resolvable) e.lanczos_smallest_vs_dense = worst_small;
}

nlohmann::json encdec_jacobian_json(const EncDecJacobian& e) {
  const auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json dense = nullptr;
  if (e.dense)
    dense = {{"rows", e.dense->rows}, {"cols", e.dense->cols}, {"singular_values", e.dense->sv},
             {"rank", e.dense->rank}, {"rank_tolerance", e.dense->tol}, {"sigma_max", e.dense->max()},
             {"sigma_min", e.dense->min()}};
  return {{"rows", e.rows}, {"cols", e.cols}, {"dense", dense},
          {"lanczos", {{"largest", e.lanczos_largest}, {"smallest", e.lanczos_smallest},
                       {"converged", e.lanczos_converged},
                       {"not_converged_reason", e.lanczos_converged ? nlohmann::json(nullptr) : nlohmann::json(e.lanczos_reason)},
                       {"products", e.lanczos_products}, {"budget", e.lanczos_budget},
                       {"smallest_method", e.lanczos_smallest_method},
                       {"structural_zeros", e.lanczos_structural_zeros},
                       {"structural_residual", e.lanczos_structural_residual},
                       {"smallest_error_bound", e.lanczos_smallest_error_bound},
                       {"smallest_unverified", e.lanczos_smallest_unverified},
                       {"max_rel_diff_vs_dense", opt(e.lanczos_vs_dense)},
                       {"smallest_max_rel_diff_vs_dense", opt(e.lanczos_smallest_vs_dense)}}}};
}

}  // namespace

EncDecJacobianReport analyze_jacobian_encdec(Model<double>& model, const JacobianOptions& options) {
  const ModelConfig& cfg = model.config();
  if (!cfg.encdec()) throw Error("analyze_jacobian_encdec needs an encoder-decoder model");
  if (model.planned_B() != 1) throw Error("analyze jacobian: the instrument takes one source-target pair (B = 1)");
  const int T = model.planned_T(), S = model.planned_S(), d = cfg.d_model;
  EncDecJacobianReport rep;
  rep.T = T;
  rep.S = S;
  rep.d = d;
  rep.norm_kind = cfg.norm;
  rep.eps = cfg.eps;
  std::vector<int> tgt(static_cast<size_t>(T)), src(static_cast<size_t>(S));
  for (int t = 0; t < T; t++) tgt[size_t(t)] = t;
  for (int s = 0; s < S; s++) src[size_t(s)] = s;
  const int dec0 = cfg.first_decoder_slot(), last = cfg.n_slots();
  rep.decoder.name = "decoder";
  rep.decoder.rows = rep.decoder.cols = T * d;
  rep.source.name = "source";
  rep.source.rows = T * d;
  rep.source.cols = S * d;
  const long cap = options.full ? options.full_max_dim : 0;
  if (long(T) * d <= cap)
    rep.decoder.dense = spectrum_of(stream_jacobian(model, dec0, last, tgt, tgt), T * d, T * d);
  if (long(T) * d <= cap && long(S) * d <= cap)
    rep.source.dense = spectrum_of(source_jacobian(model, src, tgt), T * d, S * d);
  if (options.lanczos_k > 0) {
    take_extremes(rep.decoder,
                  extreme_singular_values(model, dec0, last, tgt, tgt, options.lanczos_k, options.lanczos_budget));
    take_extremes(rep.source, extreme_singular_values_source(model, src, tgt, options.lanczos_k, options.lanczos_budget));
  }
  return rep;
}

nlohmann::json to_json(const EncDecJacobianReport& r) {
  return {{"arch", "encdec"}, {"T", r.T}, {"S", r.S}, {"d", r.d}, {"eps", r.eps}, {"norm", to_string(r.norm_kind)},
          {"decoder", encdec_jacobian_json(r.decoder)}, {"source", encdec_jacobian_json(r.source)}};
}

void print_report(const EncDecJacobianReport& r) {
  fmt::print("Jacobians of the decoder's last stream (T = {}, d = {}, {} eps = {:g}); source S = {}\n", r.T, r.d,
             to_string(r.norm_kind), r.eps, r.S);
  for (const EncDecJacobian* e : {&r.decoder, &r.source}) {
    fmt::print("\n{} ({} x {}): {}\n", e->name, e->rows, e->cols,
               e == &r.decoder ? "by the decoder's input stream, the memory held fixed"
                               : "by the encoder's input stream, through both stacks");
    if (e->dense)
      fmt::print("  dense: sv [{:.6g}, {:.6g}], rank {} of {}\n", e->dense->min(), e->dense->max(), e->dense->rank,
                 e->dense->sv.size());
    else
      fmt::print("  dense: skipped (--no-full, or a dimension above --full-max-dim)\n");
    if (e->lanczos_largest.empty() && e->lanczos_budget == 0) continue;
    fmt::print("  matrix-free ({} of {} J^T J products; smallest by the {} method, {} structural zeros, error bound "
               "{:.2e} sigma_max{}): largest [{:.6g}], smallest [{:.6g}]{}{}\n",
               e->lanczos_products, e->lanczos_budget, e->lanczos_smallest_method, e->lanczos_structural_zeros,
               e->lanczos_smallest_error_bound, e->lanczos_converged ? "" : ", NOT converged",
               fmt::join(e->lanczos_largest, ", "), fmt::join(e->lanczos_smallest, ", "),
               e->lanczos_vs_dense ? fmt::format("; vs dense: max rel diff {:.2e} (of sigma_max)", *e->lanczos_vs_dense) : "",
               e->lanczos_smallest_vs_dense ? fmt::format(", smallest {:.2e} (of themselves)", *e->lanczos_smallest_vs_dense) : "");
    if (!e->lanczos_converged) fmt::print("  NOT converged: {}\n", e->lanczos_reason);
  }
}

}  // namespace normlab::analysis
