// jacobian.cpp: the Jacobian instrument.
#include "analysis/jacobian.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "model/norm_of.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/interrupt.h"
#include "util/progress.h"

namespace normlab::analysis {

Spectrum spectrum_of(const std::vector<double>& m, int rows, int cols) {
  Spectrum s;
  s.rows = rows;
  s.cols = cols;
  s.sv = singular_values(m, rows, cols);
  s.tol = rank_tolerance(s.sv, rows, cols);
  s.rank = numerical_rank(s.sv, s.tol);
  return s;
}

namespace {

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// ||J v|| / ||v|| for a row-major d x d matrix J
double gain(const std::vector<double>& J, const std::vector<double>& v, int d) {
  double num = 0, den = 0;
  for (int i = 0; i < d; i++) {
    double r = 0;
    for (int j = 0; j < d; j++) r += J[size_t(i) * d + j] * v[j];
    num += r * r;
    den += v[i] * v[i];
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

// ||M - I||_2 for a square row-major matrix
double norm_minus_identity(std::vector<double> m, int n) {
  for (int i = 0; i < n; i++) m[size_t(i) * n + i] -= 1.0;
  return singular_values(std::move(m), n, n).front();
}

std::string bound_verdict(double sigma_min, double norm_a) {
  if (norm_a >= 1.0)
    return fmt::format("vacuous: ||A|| = {:.4g} >= 1, the bound 1 - ||A|| <= 0 says nothing", norm_a);
  const bool holds = sigma_min >= (1.0 - norm_a) * (1 - 1e-12) - 1e-12;
  return fmt::format("{}: sigma_min = {:.6g} {} 1 - ||A|| = {:.6g}", holds ? "holds" : "VIOLATED",
                     sigma_min, holds ? ">=" : "<", 1.0 - norm_a);
}

// A block ending in a norm whose Jacobian has a k-dimensional kernel at eps = 0 (LayerNorm 2, RMSNorm
// 1: norm_structural_kernel) has rank <= d - k.
std::string rank_verdict(const Spectrum& s, int d, int k, double eps) {
  if (s.rank <= d - k)
    return fmt::format("holds: numerical rank {} <= d - {} = {}", s.rank, k, d - k);
  return fmt::format("holds only at eps = 0: numerical rank {} > d - {} = {} (eps = {:g} leaves a "
                     "singular value of {:.3g}, tiny but not zero)",
                     s.rank, k, d - k, eps, s.sv[size_t(d - k)]);
}

NormSiteReport analyze_norm_site(const Model<double>& model, const std::string& site,
                                 const double* row, const NormParams<double>& params, int token) {
  const ModelConfig& cfg = model.config();
  const int d = cfg.d_model;
  NormSiteReport r;
  r.site = site;
  r.token = token;
  // statistics of the input row
  double mean = 0, ms = 0;
  for (int c = 0; c < d; c++) mean += row[c] / d;
  for (int c = 0; c < d; c++) ms += row[c] * row[c] / d;
  const NormStatistic stat = norm_statistic(cfg.norm);
  const bool layernorm = stat == NormStatistic::Variance;
  r.statistic = stat != NormStatistic::None;
  r.var = stat == NormStatistic::SumSquare ? ms * d : ms;  // L2 divides by the length: var is |z|^2
  if (layernorm) {
    double v = 0;
    for (int c = 0; c < d; c++) v += (row[c] - mean) * (row[c] - mean) / d;
    r.var = v;
  }
  // the predictions are those of a kind that divides by a statistic (LayerNorm, RMSNorm); a point-wise
  // kind (DyT, Derf) has a diagonal Jacobian and no such prediction (left 0, reported as n/a)
  if (r.statistic) {
    r.scale = std::sqrt(r.var + cfg.eps);
    r.predicted_bulk = params.scale / r.scale;  // a site's constant output scale (LayerNorm Scaling) included
    r.predicted_small = r.predicted_bulk * cfg.eps / (r.var + cfg.eps);
  }
  // autodiff: the kernel's jvp applied to the d unit tangents
  const double saved_mean = mean, saved_rstd = 1.0 / r.scale;
  std::vector<double> tin(size_t(d) * d, 0.0), tout(tin.size());
  for (int k = 0; k < d; k++) tin[size_t(k) * d + k] = 1.0;
  model.norm_jvp(tout.data(), tin.data(), row, params, &saved_mean, &saved_rstd, d, 1);
  std::vector<double> J(size_t(d) * d);
  for (int k = 0; k < d; k++)
    for (int c = 0; c < d; c++) J[size_t(c) * d + k] = tout[size_t(k) * d + c];
  const std::vector<double> closed = norm_jacobian_closed_form(cfg.norm, row, params, d, cfg.eps);
  r.closed_form_err = max_abs_diff(J, closed);
  r.spectrum = spectrum_of(J, d, d);
  const std::vector<double> gains = effective_gain(cfg.norm, params, d);  // (a parameterless kind: 1; SSNorm: its scalar)
  const double* gamma0 = gains.data();
  r.unit_gamma = std::all_of(gamma0, gamma0 + d, [](double g) { return g == 1.0; });
  for (int i = 0; i < d; i++) r.gamma_max_dev = std::max(r.gamma_max_dev, std::abs(gamma0[i] - 1.0));
  if (r.unit_gamma && r.statistic) {
    const int bulk = layernorm ? d - 2 : d - 1;
    for (int i = 0; i < std::min(bulk, d); i++)
      r.measured_bulk_spread = std::max(
          r.measured_bulk_spread, std::abs(r.spectrum.sv[size_t(i)] - r.predicted_bulk) / r.predicted_bulk);
  }
  // the kernel directions: the constant vector (LayerNorm) and the normalized input
  std::vector<double> ones(size_t(d), 1.0), zhat(row, row + d);
  if (layernorm)
    for (auto& z : zhat) z -= mean;
  r.j_ones = gain(closed, ones, d);
  r.j_zhat = gain(closed, zhat, d);
  // gamma: with unit gains probe a random gain so left and right multiplication differ (a kind
  // without a gain, L2, has none to place: both errors stay 0)
  if (!params.weight) return r;
  std::vector<double> gamma(gamma0, gamma0 + d), unit(size_t(d), 1.0);
  if (r.unit_gamma) {
    Rng rng(17);
    for (auto& g : gamma) g = 1.0 + 0.5 * rng.normal();
  }
  NormParams<double> p1 = params, pg = params;
  p1.weight = unit.data();
  pg.weight = gamma.data();
  const std::vector<double> j1 = norm_jacobian_closed_form(cfg.norm, row, p1, d, cfg.eps);
  const std::vector<double> jg = norm_jacobian_closed_form(cfg.norm, row, pg, d, cfg.eps);
  std::vector<double> left(j1.size()), right(j1.size());
  for (int i = 0; i < d; i++)
    for (int j = 0; j < d; j++) {
      left[size_t(i) * d + j] = gamma[size_t(i)] * j1[size_t(i) * d + j];
      right[size_t(i) * d + j] = j1[size_t(i) * d + j] * gamma[size_t(j)];
    }
  r.gamma_left_err = max_abs_diff(jg, left);
  r.gamma_right_err = max_abs_diff(jg, right);
  return r;
}

}  // namespace

JacobianReport analyze_jacobian(Model<double>& model, const JacobianOptions& options) {
  refuse_second_stream(model.config(), "analyze jacobian");  // a two-stream model (ResiDual) is refused by name
  const ModelConfig& cfg = model.config();
  // w: a block's values per token (the token's n streams with hyper-connections; the norm sites are d)
  const int T = model.planned_T(), d = cfg.d_model, w = model.state_width(), L = cfg.n_layers;
  JacobianReport rep;
  rep.T = T;
  rep.d = d;
  rep.state = w;
  rep.streams = cfg.n_streams();
  rep.eps = cfg.eps;
  rep.norm_kind = cfg.norm;
  if (options.token < -1 || options.token >= T)
    throw Error(fmt::format("--token {} is outside the input's {} tokens (give 0 to {}, or leave it out for the last)",
                            options.token, T, T - 1));
  const int tok = options.token < 0 ? T - 1 : options.token;
  rep.token = tok;
  // norm sites, in the model's order
  for (int i = 0; i < 2 * L; i++) {
    const SublayerActs<double>& a = model.acts(i);
    const SublayerParams<double>& p = model.sublayer_params_of(i);
    if (!cfg.has_sublayer(i)) continue;
    const Slot slot = cfg.slot(i);
    const std::string prefix = fmt::format("h.{}.{}", slot.layer, to_string(slot.kind));
    const size_t off = size_t(tok) * d;
    const NormSites sites = norm_sites(cfg.placement_of(slot.layer), slot.kind);
    if (sites.in) rep.norms.push_back(analyze_norm_site(model, prefix + ".ln_in", a.x_in + off, p.ln_in, tok));
    if (sites.branch) rep.norms.push_back(analyze_norm_site(model, prefix + ".ln_branch", a.f + off, p.ln_branch, tok));
    if (sites.out) rep.norms.push_back(analyze_norm_site(model, prefix + ".ln_out", a.r + off, p.ln_out, tok));
  }
  if (cfg.has_final_norm())
    rep.norms.push_back(analyze_norm_site(model, "ln_f", model.stream(2 * L) + size_t(tok) * d,
                                          model.final_norm(), tok));
  // blocks
  const bool full = options.full && long(T) * w <= options.full_max_dim;
  std::vector<int> all_tokens(T);
  for (int t = 0; t < T; t++) all_tokens[t] = t;
  bool all_residual = true;
  double product = 1.0;
  // (progress: the blocks, then the end-to-end Jacobians, about as long as two more)
  const long steps = L + 2 + (options.lanczos_k > 0 ? 2 : 0);
  report_progress("analyze jacobian", 0, steps, "");
  for (int l = 0; l < L; l++) {
    throw_if_interrupted();
    report_progress("analyze jacobian", l, steps, "steps");
    BlockReport b;
    b.layer = l;
    const Placement p = cfg.placement_of(l);
    b.placement = to_string(p);
    b.residual_form = residual_form(p) && cfg.residual;
    const std::vector<double> local = token_local_jacobian(model, 2 * l, 2 * l + 2, tok);
    b.local = spectrum_of(local, w, w);
    std::vector<double> jfull;
    if (full) {
      jfull = stream_jacobian(model, 2 * l, 2 * l + 2, all_tokens, all_tokens);
      b.full = spectrum_of(jfull, T * w, T * w);
    }
    if (b.residual_form) {
      b.local_norm_a = norm_minus_identity(local, w);
      if (full) b.full_norm_a = norm_minus_identity(jfull, T * w);
      const double na = b.full_norm_a.value_or(b.local_norm_a);
      const double smin = b.full ? b.full->min() : b.local.min();
      b.bound_verdict = bound_verdict(smin, na) + (b.full ? " (full sequence)" : " (token-local)");
      product *= std::max(0.0, 1.0 - na);
    } else {
      all_residual = false;
    }
    // the kernel the last norm has at eps = 0 (its dimension does not depend on the row)
    const int kernel = norm_kernel_dimension(cfg.norm);
    const Sublayer last = cfg.slot(2 * l + 1).present ? Sublayer::Mlp : Sublayer::Attn;
    if (norm_sites(p, last).out && kernel > 0)
      b.rank_verdict = rank_verdict(b.local, d, kernel, cfg.eps) + " (token-local)";
    rep.blocks.push_back(std::move(b));
  }
  // end to end
  report_progress("analyze jacobian", L, steps, "steps");
  const std::vector<double> e2e = token_local_jacobian(model, 0, 2 * L, tok);
  rep.end_to_end.local = spectrum_of(e2e, w, w);
  if (full) rep.end_to_end.full = spectrum_of(stream_jacobian(model, 0, 2 * L, all_tokens, all_tokens), T * w, T * w);
  if (options.lanczos_k > 0) {
    report_progress("analyze jacobian", L + 2, steps, "steps");
    EndToEndReport& e = rep.end_to_end;
    const ExtremeSingularValues x =
        extreme_singular_values(model, 0, 2 * L, all_tokens, all_tokens, options.lanczos_k, options.lanczos_budget);
    e.lanczos_largest = x.largest;
    e.lanczos_smallest = x.smallest;
    e.lanczos_converged = x.converged;
    e.lanczos_reason = x.reason;
    e.lanczos_products = x.products;
    e.lanczos_budget = x.budget;
    e.lanczos_smallest_method = x.smallest_method;
    e.lanczos_solves = x.solves;
    e.lanczos_structural_zeros = x.structural_zeros;
    e.lanczos_structural_residual = x.structural_residual;
    e.lanczos_smallest_error_bound = x.smallest_error_bound;
    e.lanczos_smallest_unverified = x.smallest_unverified;
    if (e.full && !x.largest.empty()) {
      double worst = 0;
      const auto& sv = e.full->sv;
      for (size_t i = 0; i < x.largest.size(); i++)
        worst = std::max(worst, std::abs(x.largest[i] - sv[i]) / sv[0]);
      double worst_small = 0;
      bool resolvable = !x.smallest.empty();  // relative to themselves only where the dense SVD resolves them
      for (size_t i = 0; i < x.smallest.size(); i++) {
        const double dense = sv[sv.size() - 1 - i];
        worst = std::max(worst, std::abs(x.smallest[i] - dense) / sv[0]);
        worst_small = std::max(worst_small, std::abs(x.smallest[i] - dense) / std::max(dense, 1e-300));
        resolvable = resolvable && dense > 1e-10 * sv[0];
      }
      e.lanczos_vs_dense = worst;
      if (resolvable) e.lanczos_smallest_vs_dense = worst_small;
    }
  }
  if (all_residual) {
    rep.end_to_end.product_bound = product;
    const auto& e = rep.end_to_end;
    const double smin = e.full ? e.full->min() : (!e.lanczos_smallest.empty() ? e.lanczos_smallest.front() : e.local.min());
    const bool holds = smin >= product * (1 - 1e-12) - 1e-12;
    rep.end_to_end.verdict =
        product <= 0 ? "vacuous: some ||A_l|| >= 1, the product bound is 0"
                     : fmt::format("{}: sigma_min = {:.6g} {} prod(1 - ||A_l||) = {:.6g}",
                                   holds ? "holds" : "VIOLATED", smin, holds ? ">=" : "<", product);
  } else {
    rep.end_to_end.verdict = "no product bound: not every block is of the form x + F(x)";
  }
  report_progress("analyze jacobian", steps, steps, "");  // (done: a terminal's line cleared)
  return rep;
}

namespace {

nlohmann::json spectrum_json(const Spectrum& s) {
  return {{"rows", s.rows}, {"cols", s.cols}, {"singular_values", s.sv}, {"rank", s.rank},
          {"rank_tolerance", s.tol}, {"sigma_max", s.max()}, {"sigma_min", s.min()}};
}

}  // namespace

nlohmann::json to_json(const JacobianReport& r) {
  nlohmann::json norms = nlohmann::json::array(), blocks = nlohmann::json::array();
  for (const auto& n : r.norms)
    norms.push_back({{"site", n.site}, {"token", n.token}, {"closed_form_max_abs_err", n.closed_form_err},
                     {"spectrum", spectrum_json(n.spectrum)}, {"input_variance", n.var},
                     {"scale", n.statistic ? nlohmann::json(n.scale) : nlohmann::json(nullptr)},
                     {"predicted_bulk_sv", n.statistic ? nlohmann::json(n.predicted_bulk) : nlohmann::json(nullptr)},
                     {"predicted_small_sv", n.statistic ? nlohmann::json(n.predicted_small) : nlohmann::json(nullptr)},
                     {"bulk_max_rel_deviation", n.unit_gamma && n.statistic ? nlohmann::json(n.measured_bulk_spread) : nlohmann::json(nullptr)},
                     {"gain_on_ones", n.j_ones}, {"gain_on_zhat", n.j_zhat}, {"unit_gamma", n.unit_gamma},
                     {"gamma_left_max_err", n.gamma_left_err}, {"gamma_right_max_err", n.gamma_right_err}});
  for (const auto& b : r.blocks) {
    nlohmann::json j = {{"layer", b.layer}, {"placement", b.placement}, {"token_local", spectrum_json(b.local)},
                        {"full_sequence", b.full ? spectrum_json(*b.full) : nlohmann::json(nullptr)},
                        {"residual_form", b.residual_form}};
    if (b.residual_form) {
      j["token_local_norm_A"] = b.local_norm_a;
      j["full_sequence_norm_A"] = b.full_norm_a ? nlohmann::json(*b.full_norm_a) : nlohmann::json(nullptr);
      j["bound_verdict"] = b.bound_verdict;
    }
    if (!b.rank_verdict.empty()) j["rank_verdict"] = b.rank_verdict;
    blocks.push_back(j);
  }
  const auto& e = r.end_to_end;
  return {{"T", r.T}, {"d", r.d}, {"state_width", r.state}, {"streams", r.streams}, {"token", r.token}, {"eps", r.eps},
          {"norm", to_string(r.norm_kind)},
          {"norm_sites", norms}, {"blocks", blocks},
          {"end_to_end", {{"token_local", spectrum_json(e.local)},
                          {"full_sequence", e.full ? spectrum_json(*e.full) : nlohmann::json(nullptr)},
                          {"product_bound", e.product_bound ? nlohmann::json(*e.product_bound) : nlohmann::json(nullptr)},
                          {"lanczos", {{"largest", e.lanczos_largest}, {"smallest", e.lanczos_smallest},
                                       {"converged", e.lanczos_converged},
                                       {"not_converged_reason", e.lanczos_converged ? nlohmann::json(nullptr) : nlohmann::json(e.lanczos_reason)},
                                       {"products", e.lanczos_products}, {"budget", e.lanczos_budget},
                                       {"smallest_method", e.lanczos_smallest_method}, {"solves", e.lanczos_solves},
                                       {"structural_zeros", e.lanczos_structural_zeros},
                                       {"structural_residual", e.lanczos_structural_residual},
                                       {"smallest_error_bound", e.lanczos_smallest_error_bound},
                                       {"smallest_unverified", e.lanczos_smallest_unverified},
                                       {"smallest_max_rel_diff_vs_dense", e.lanczos_smallest_vs_dense ? nlohmann::json(*e.lanczos_smallest_vs_dense) : nlohmann::json(nullptr)},
                                       {"max_rel_diff_vs_dense", e.lanczos_vs_dense ? nlohmann::json(*e.lanczos_vs_dense) : nlohmann::json(nullptr)}}},
                          {"verdict", e.verdict}}}};
}

void print_report(const JacobianReport& r) {
  fmt::print("Jacobians at token {} of T = {}, d = {}, {} eps = {:g}\n\n", r.token, r.T, r.d, to_string(r.norm_kind), r.eps);
  fmt::print("Norm sites (closed form vs autodiff; singular values; kernel; gamma)\n");
  fmt::print("{:<20} {:>10} {:>10} {:>10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "site",
             "|J-J_ad|", "sv max", "sv min", "rank", "1/s", "eps-sv", "|J1|", "|Jz|", "left err", "right err");
  for (const auto& n : r.norms)
    fmt::print("{:<20} {:>10.2e} {:>10.4g} {:>10.3e} {:>3}/{:<2} {:>10} {:>10} {:>10.2e} {:>10.2e} {:>10.2e} {:>10.2e}\n",
               n.site, n.closed_form_err, n.spectrum.max(), n.spectrum.min(), n.spectrum.rank, r.d,
               n.statistic ? fmt::format("{:.4g}", n.predicted_bulk) : "n/a",
               n.statistic ? fmt::format("{:.3e}", n.predicted_small) : "n/a", n.j_ones, n.j_zhat,
               n.gamma_left_err, n.gamma_right_err);
  fmt::print("columns: site: the norm (layer, sub-layer); |J-J_ad|: max |closed form - autodiff| of the Jacobian; sv max, "
             "sv min: its extreme singular values; rank: numerical rank / d; 1/s: the predicted bulk singular value "
             "(s = sqrt(var + eps)); eps-sv: the predicted z-hat singular value (1/s) eps/(var + eps); |J1|, |Jz|: the "
             "gains ||J 1||/||1|| and ||J zhat||/||zhat|| (source 000 Thm 3.6: 0 at eps = 0); left err, right err: max "
             "|J_gamma - diag(gamma) J| and |J_gamma - J diag(gamma)| for a random gain (000 Remark 1.2); n/a: a point-wise "
             "kind (dyt, derf) divides by no statistic, its Jacobian is diagonal. Claims: "
             "docs/THEORY.md\n");
  if (r.streams > 1)
    fmt::print("\n{} hyper-connected streams: a block maps a token's n d = {} values (its streams side by side), and "
               "the end to end is the streams leaving the last block by those entering the first (all equal to the "
               "embedding's output)\n",
               r.streams, r.state);
  const char* nd = r.streams > 1 ? "n d" : "d";
  fmt::print("\nBlocks (token-local {0} x {0}{1})\n", nd,
             r.blocks.empty() || !r.blocks[0].full ? "" : fmt::format("; full (T {0}) x (T {0})", nd));
  for (const auto& b : r.blocks) {
    fmt::print("layer {:>3} {:<9} local sv [{:.4g}, {:.4g}] rank {}", b.layer, b.placement, b.local.min(),
               b.local.max(), b.local.rank);
    if (b.full) fmt::print(" | full sv [{:.4g}, {:.4g}] rank {}", b.full->min(), b.full->max(), b.full->rank);
    fmt::print("\n");
    if (b.residual_form)
      fmt::print("          ||A|| local {:.4g}{}; {}\n", b.local_norm_a,
                 b.full_norm_a ? fmt::format(", full {:.4g}", *b.full_norm_a) : "", b.bound_verdict);
    if (!b.rank_verdict.empty()) fmt::print("          rank check: {}\n", b.rank_verdict);
  }
  const auto& e = r.end_to_end;
  fmt::print("\nEnd to end ({} blocks): local sv [{:.4g}, {:.4g}]", r.blocks.size(), e.local.min(), e.local.max());
  if (e.full) fmt::print(" | full sv [{:.4g}, {:.4g}]", e.full->min(), e.full->max());
  fmt::print("\n");
  if (!e.lanczos_largest.empty()) {
    fmt::print("  matrix-free ({} of a budget of {} J^T J products; smallest by the {} method{}, {} structural "
               "zeros, error bound {:.2e} sigma_max{}): largest [{:.4g}], smallest [{:.4g}]{}{}\n",
               e.lanczos_products, e.lanczos_budget, e.lanczos_smallest_method,
               e.lanczos_solves ? fmt::format(" with {} (J^T J)^-1 solves", e.lanczos_solves) : "",
               e.lanczos_structural_zeros, e.lanczos_smallest_error_bound,
               e.lanczos_converged ? "" : ", NOT converged",
               fmt::join(e.lanczos_largest, ", "), fmt::join(e.lanczos_smallest, ", "),
               e.lanczos_vs_dense ? fmt::format("; vs dense: max rel diff {:.2e} (of sigma_max)", *e.lanczos_vs_dense) : "",
               e.lanczos_smallest_vs_dense ? fmt::format(", smallest {:.2e} (of themselves)", *e.lanczos_smallest_vs_dense) : "");
    if (!e.lanczos_converged)
      fmt::print("  NOT converged: {}{}\n", e.lanczos_reason,
                 e.lanczos_smallest_unverified.empty()
                     ? ""
                     : fmt::format("; unverified estimates of the smallest [{:.4g}]", fmt::join(e.lanczos_smallest_unverified, ", ")));
  }
  fmt::print("  {}\n", e.verdict);
}

}  // namespace normlab::analysis
