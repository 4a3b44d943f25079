// attention.cpp: the attention-spectrum instrument.
#include "analysis/attention.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "analysis/linalg.h"

namespace normlab::analysis {

AttentionMatrixStats attention_matrix_stats(const double* A, int n) {
  AttentionMatrixStats s;
  s.norm2 = singular_values(std::vector<double>(A, A + size_t(n) * n), n, n).front();
  std::vector<double> col(size_t(n), 0.0);
  s.entropy_min = INFINITY;
  s.entropy_max = -INFINITY;
  for (int i = 0; i < n; i++) {
    double h = 0;
    for (int j = 0; j < n; j++) {
      const double p = A[size_t(i) * n + j];
      col[size_t(j)] += p;
      if (p > 0) h -= p * std::log(p);
    }
    s.entropy_mean += h / n;
    s.entropy_min = std::min(s.entropy_min, h);
    s.entropy_max = std::max(s.entropy_max, h);
  }
  s.c_max = *std::max_element(col.begin(), col.end());
  const double slack = 1e-12 * n;
  s.chain_holds = 1 - slack <= s.norm2 && s.norm2 <= std::sqrt(s.c_max) + slack &&
                  std::sqrt(s.c_max) <= std::sqrt(double(n)) + slack;
  return s;
}

AttentionReport analyze_attention(const Model<double>& model) {
  const ModelConfig& cfg = model.config();
  const int T = model.planned_T(), C = cfg.d_model, NH = cfg.n_heads, HS = C / NH;
  AttentionReport rep{T, C, NH, {}};
  for (int l = 0; l < cfg.n_layers; l++) {
    const SublayerActs<double>& a = model.acts(2 * l);
    const SublayerParams<double>& p = model.sublayer_params_of(2 * l);
    // the norm whose output feeds this attention: its own ln_in, else the previous sub-layer's ln_out
    // (in an attention-only model the previous sub-layer is the last attention)
    const SublayerParams<double>* prev =
        l == 0 ? nullptr : &model.sublayer_params_of(cfg.has_sublayer(2 * l - 1) ? 2 * l - 1 : 2 * l - 2);
    const double* gamma = p.ln_in.weight;
    bool has_beta = p.ln_in.bias != nullptr;
    if (!gamma && prev) {
      gamma = prev->ln_out.weight;
      has_beta = prev->ln_out.bias != nullptr;
    }
    for (int h = 0; h < NH; h++) {
      HeadReport r;
      r.layer = l;
      r.head = h;
      r.stats = attention_matrix_stats(a.att + size_t(h) * T * T, T);
      // this head's rows of the query and key projections: (HS, C) blocks of qkv.weight
      r.sigma_q = singular_values(std::vector<double>(p.w1 + size_t(h) * HS * C, p.w1 + size_t(h + 1) * HS * C), HS, C).front();
      r.sigma_k = singular_values(std::vector<double>(p.w1 + size_t(C + h * HS) * C, p.w1 + size_t(C + (h + 1) * HS) * C), HS, C).front();
      if (!gamma) {
        r.bound_verdict = "n/a: no norm feeds this attention";
      } else {
        double g = 0;
        for (int c = 0; c < C; c++) g = std::max(g, std::abs(gamma[c]));
        r.gamma_max = g;
        // |<q_i, k_j>| / sqrt(HS) <= (Gamma sqrt(d))^2 sigma_Q sigma_K / sqrt(HS) = M; for one head
        // of size d this is source 002's M (docs/SOURCES.md) = Gamma^2 sigma_Q sigma_K sqrt(d)
        const double M = g * g * r.sigma_q * r.sigma_k * C / std::sqrt(double(HS));
        r.seed_bound = std::sqrt(T / (1 + (T - 1) * std::exp(-2 * M)));
        double beta_max = 0, qk_bias_max = 0;
        const double* beta = p.ln_in.weight ? p.ln_in.bias : (prev ? prev->ln_out.bias : nullptr);
        if (has_beta && beta)
          for (int c = 0; c < C; c++) beta_max = std::max(beta_max, std::abs(beta[c]));
        for (int c = 0; c < 2 * C; c++) qk_bias_max = std::max(qk_bias_max, std::abs(p.b1[c]));
        const bool holds = r.stats.norm2 <= *r.seed_bound * (1 + 1e-12);
        r.bound_verdict = fmt::format("{}: ||A|| = {:.4g} {} bound {:.4g} (M = {:.3g})", holds ? "holds" : "VIOLATED",
                                      r.stats.norm2, holds ? "<=" : ">", *r.seed_bound, M);
        if (!holds && cfg.causal())
          r.bound_verdict += " (source 002 derives it for rows of n entries; a causal row i has only "
                             "i + 1, so early columns collect more mass)";
        if (beta_max > 0 || qk_bias_max > 0)
          r.bound_verdict += fmt::format("; the bound assumes beta = 0 and no q/k bias, here max|beta| = "
                                         "{:.3g}, max|q,k bias| = {:.3g}",
                                         beta_max, qk_bias_max);
      }
      rep.heads_by_layer.push_back(r);
    }
  }
  return rep;
}

nlohmann::json to_json(const AttentionReport& r) {
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : r.heads_by_layer)
    heads.push_back({{"layer", h.layer}, {"head", h.head}, {"norm2", h.stats.norm2}, {"c_max", h.stats.c_max},
                     {"sqrt_c_max", std::sqrt(h.stats.c_max)}, {"sqrt_n", std::sqrt(double(r.T))},
                     {"chain_holds", h.stats.chain_holds}, {"entropy_mean", h.stats.entropy_mean},
                     {"entropy_min", h.stats.entropy_min}, {"entropy_max", h.stats.entropy_max},
                     {"gamma_max", h.gamma_max ? nlohmann::json(*h.gamma_max) : nlohmann::json(nullptr)},
                     {"sigma_q", h.sigma_q}, {"sigma_k", h.sigma_k},
                     {"seed_bound", h.seed_bound ? nlohmann::json(*h.seed_bound) : nlohmann::json(nullptr)},
                     {"bound_verdict", h.bound_verdict}});
  return {{"T", r.T}, {"d", r.d}, {"heads", r.heads}, {"per_head", heads}};
}

void print_report(const AttentionReport& r) {
  fmt::print("Attention spectra, T = {} (sqrt(n) = {:.4g}), {} heads\n", r.T, std::sqrt(double(r.T)), r.heads);
  fmt::print("{:>5} {:>4} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9} {:>9}  {}\n", "layer", "head", "||A||_2",
             "sqrt(c)", "c_max", "chain", "H mean", "sigma_Q", "sigma_K", "002 bound");
  for (const auto& h : r.heads_by_layer)
    fmt::print("{:>5} {:>4} {:>9.4f} {:>9.4f} {:>9.4f} {:>6} {:>9.4f} {:>9.4f} {:>9.4f}  {}\n", h.layer, h.head,
               h.stats.norm2, std::sqrt(h.stats.c_max), h.stats.c_max, h.stats.chain_holds ? "holds" : "FAILS",
               h.stats.entropy_mean, h.sigma_q, h.sigma_k, h.bound_verdict);
}

}  // namespace normlab::analysis
