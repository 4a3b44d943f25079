// lemmas.cpp: the claims about single operators, measured exactly on one seed's models:
// source 000's LayerNorm Jacobian (Lemma 2.1, Thm 2.2, Remark 1.2, Thm 3.6), its Post-LN rank and
// Pre-LN lower bounds (Thm 3.2, 6.3, 4.6, 6.4) and its Pre-LN full-rank contrast, source 004's "dNorm/dz is about 1/sqrt(d)", source
// 002's attention spectral bounds, and DeepNet's constant (a fact of the formula).
#include <algorithm>
#include <cmath>
#include <map>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/attention.h"
#include "analysis/jacobian.h"
#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "theory/checks.h"
#include "model/norm_of.h"
#include "ops/layernorm.h"
#include "util/rng.h"

namespace normlab::theory::detail {

// The claims about single operators, one attempt() each (long because the claims are many: each
// block reads alone).
void lemma_checks(const Bench& b, std::vector<Measurement>& out) {
  const TheoryOptions& o = b.opt;
  const int d = o.d_model;
  const std::string size = fmt::format("d = {}, {} heads, {} layers, T = {}, {}, {}", d, o.n_heads, o.n_layers,
                                       o.seq_len, weights(b, "GPT-2 init"), b.lm);
  JacobianOptions jopt;
  jopt.lanczos_k = 0;
  // the models (Post-LN and Pre-LN at eps 0 and the model's eps) and their Jacobians, made when a claim
  // first needs them. A given model has one placement and one norm kind: a claim about LayerNorm itself
  // (any_placement) reads it whatever its placement; a claim about residual blocks or attention
  // (any_norm) whatever its norm kind; the others are NotApplicable
  struct Probe {
    std::unique_ptr<Model<double>> model;
    JacobianReport jac;
  };
  const double eps_m = b.given ? o.model->config.eps : 1e-5;  // the model's own eps (MiniLM's is 1e-12)
  const std::string eps_text = fmt::format("eps = {:g}", eps_m);
  std::map<std::tuple<int, double, bool>, Probe> probes;
  auto probe = [&](Placement p, double eps, bool any_placement = false, bool any_norm = false) -> Probe& {
    if (b.given && any_placement) p = o.model->config.placement_of(0);
    auto it = probes.find({int(p), eps, any_norm});
    if (it == probes.end()) {
      Probe pr{forward_on(b, gpt_config(o, p, eps, o.n_layers),
                          any_norm ? ClaimModels::Norm::Any : ClaimModels::Norm::LayerNormOnly),
               {}};
      JacobianOptions popt = jopt;
      popt.full = p == Placement::Pre && eps > 0;  // only Thm 4.6 / 6.4 read full-sequence Jacobians
      pr.jac = analyze_jacobian(*pr.model, popt);
      it = probes.emplace(std::make_tuple(int(p), eps, any_norm), std::move(pr)).first;
    } else {
      b.models->used(it->second.model->config());  // reused by another block: its learned state counts there too
    }
    return it->second;
  };
  // the placement a claim about LayerNorm itself is measured in: the one its setting names, or a given model's
  auto placed = [&](const char* name) {
    return b.given ? fmt::format("the checkpoint ({})", to_string(o.model->config.placement_of(0))) : std::string(name);
  };
  attempt(b, out, {"000 Lemma 2.1"}, [&] {  // Lemma 2.1, in its source's setting: a LayerNorm without eps
    const JacobianReport& jpre0 = probe(Placement::Pre, 0.0, true).jac;
    double exact0 = 0;  // the stated formula against the true Jacobian, every norm site, eps = 0
    for (const auto& n : jpre0.norms) exact0 = std::max(exact0, n.closed_form_err / n.predicted_bulk);
    // separately: what eps changes (the trained models have eps = 1e-5, a given model its own)
    const JacobianReport& jpre = probe(Placement::Pre, eps_m, true).jac;
    const Model<double>* pre = probe(Placement::Pre, eps_m, true).model.get();
    double autodiff = 0, seed_err = 0, scale = 0;
    for (const auto& n : jpre.norms) autodiff = std::max(autodiff, n.closed_form_err / n.predicted_bulk);
    const SublayerActs<double>& a = pre->acts(0);
    std::vector<double> ones(size_t(d), 1.0);
    const NormParams<double> unit_gain{ones.data()};
    const size_t off = size_t(o.seq_len - 1) * d;
    const auto exact = norm_jacobian_closed_form(NormKind::LayerNorm, a.x_in + off, unit_gain, d, eps_m);
    const auto stated = norm_jacobian_closed_form(NormKind::LayerNorm, a.x_in + off, unit_gain, d, 0.0);
    for (size_t i = 0; i < exact.size(); i++) {
      seed_err = std::max(seed_err, std::abs(exact[i] - stated[i]));
      scale = std::max(scale, std::abs(exact[i]));
    }
    out.push_back(identity({"000 Lemma 2.1", "J_LN(z) = (1/sigma)(I - 11^T/d - zhat zhat^T/d)",
                   placed("Pre-LN") + ", " + size + ", eps = 0 (the source's LayerNorm has none), every norm site, last token",
                   "max relative error of the stated formula against the true Jacobian (rounding: ~1e-15)"}, exact0,
                   fmt::format("what eps changes (not the lemma's setting): at {} the formula with sigma = "
                               "sqrt(var + eps) matches to {:.1e}, and without eps it is off by {:.1e} at the first "
                               "norm site (the embedding, input variance {:.2e})",
                               eps_text, autodiff, seed_err / scale, jpre.norms[0].var),
                   {{"eps0_rel_err", exact0}, {"eps_autodiff_rel_err", autodiff},
                    {"eps_formula_without_eps_rel_err", seed_err / scale}}));
  });
  attempt(b, out, {"000 Thm 2.2"}, [&] {
    const JacobianReport& jpost0 = probe(Placement::Post, 0.0, true).jac;
    const JacobianReport& jpost = probe(Placement::Post, eps_m, true).jac;
    // Thm 2.2: rank d - 2, kernel span{1, zhat}
    int ok0 = 0, full_eps = 0;
    for (const auto& n : jpost0.norms) ok0 += n.spectrum.rank == d - 2 && n.j_ones / n.predicted_bulk < 1e-10 &&
                                             n.j_zhat / n.predicted_bulk < 1e-10;
    for (const auto& n : jpost.norms) full_eps += n.spectrum.rank == d - 1;
    out.push_back(identity({"000 Thm 2.2", "rank J_LN = d - 2, kernel span{1, zhat}",
                            placed("Post-LN") + ", " + size + ", eps = 0 (the theorem's)",
                            "number of norm sites whose rank is not d - 2 or whose kernel is not {1, zhat}"},
                           double(jpost0.norms.size()) - ok0,
                           fmt::format("{} of {} sites; at {}, {} of {} sites have rank d - 1 (zhat keeps "
                                       "eps/(var+eps))", ok0, jpost0.norms.size(), eps_text, full_eps, jpost.norms.size()),
                           {{"eps0_sites_ok", ok0}, {"eps_sites_rank_d_minus_1", full_eps}}, 0));
  });
  attempt(b, out, {"000 Remark 1.2"}, [&] {  // Remark 1.2: gamma multiplies from the right
    const JacobianReport& jpre = probe(Placement::Pre, eps_m, true).jac;
    double left = 0, right = 0;
    for (const auto& n : jpre.norms) {
      left = std::max(left, n.gamma_left_err / n.predicted_bulk);
      right = std::max(right, n.gamma_right_err / n.predicted_bulk);
    }
    out.push_back(identity({"000 Remark 1.2", "with gain gamma the Jacobian is J diag(gamma) (gamma on the right)",
                            placed("Pre-LN") + ", " + size + ", a random gamma ~ 1 + 0.5 N(0,1) where the model's gains are 1",
                            "max relative error of J diag(gamma) against the true Jacobian"},
                           right, fmt::format("diag(gamma) J (gamma on the left) matches to {:.1e}", left),
                           {{"left_rel_err", left}, {"right_rel_err", right}}));
  });
  attempt(b, out, {"000 Thm 3.2", "000 Thm 6.3"}, [&] {
    const JacobianReport& jpost0 = probe(Placement::Post, 0.0).jac;
    const JacobianReport& jpost = probe(Placement::Post, eps_m).jac;
    // Thm 3.2 and 6.3: the Post-LN rank bound, one block and L blocks
    int ok0 = 0, ok = 0;
    for (const auto& bl : jpost0.blocks) ok0 += bl.local.rank <= d - 2;
    for (const auto& bl : jpost.blocks) ok += bl.local.rank <= d - 2;
    out.push_back(identity({"000 Thm 3.2", "rank J_PostLN(x) <= d - 2 (token-local)", "Post-LN, " + size + ", eps = 0",
                            "number of Post-LN sub-layer blocks with token-local rank above d - 2"},
                           double(jpost0.blocks.size()) - ok0,
                           fmt::format("{} of {} blocks within; at {}: {} of {}", ok0, jpost0.blocks.size(), eps_text,
                                       ok, jpost.blocks.size()),
                           {{"eps0_blocks_ok", ok0}, {"eps_blocks_ok", ok}}, 0));
    const int r0 = jpost0.end_to_end.local.rank, r = jpost.end_to_end.local.rank;
    out.push_back(identity({"000 Thm 6.3", "L-layer Post-LN: rank of the end-to-end Jacobian <= d - 2",
                            "Post-LN, " + size + ", eps = 0", "token-local end-to-end rank above d - 2 (0 when within)"},
                           std::max(0, r0 - (d - 2)),
                           fmt::format("rank {} at eps = 0, {} at {} (d - 2 = {})", r0, r, eps_text, d - 2),
                           {{"rank_eps0", r0}, {"rank_eps", r}}, 0));
  });
  attempt(b, out, {"000 Pre-LN full rank", "000 Pre-LN final LayerNorm rank"}, [&] {
    // 000 contrasts Post-LN with Pre-LN, "the identity is outermost, so the Jacobian keeps full rank";
    // what the head reads is the stack through its final LayerNorm, whose kernel {1, zhat} the product
    // inherits: the rank bound is LayerNorm's, not Post-LN's
    Model<double>& m = *probe(Placement::Pre, 0.0).model;
    if (!m.config().has_final_norm()) throw NotApplicable("the claim reads the final LayerNorm; this model has none");
    const int L = m.config().n_layers, tok = int(b.ids.size()) - 1;
    const std::vector<double> stack = token_local_jacobian(m, 0, 2 * L, tok);
    const std::vector<double> jf =
        norm_jacobian_closed_form(NormKind::LayerNorm, m.stream(2 * L) + size_t(tok) * d, m.final_norm(), d, 0.0);
    std::vector<double> through(size_t(d) * d, 0.0);  // J_lnf J_stack
    for (int i = 0; i < d; i++)
      for (int k = 0; k < d; k++)
        for (int j = 0; j < d; j++) through[size_t(i) * d + j] += jf[size_t(i) * d + k] * stack[size_t(k) * d + j];
    const Spectrum s_stack = spectrum_of(stack, d, d), s_through = spectrum_of(through, d, d);
    const std::string ranks = fmt::format("the stack up to the last stream has rank {} of {} (smallest singular value "
                                          "{:.3g}); through the final LayerNorm rank {} (its kernel span{{1, zhat}} is "
                                          "inherited)", s_stack.rank, d, s_stack.min(), s_through.rank);
    const nlohmann::json nums = {{"rank_through_final_norm", s_through.rank}, {"rank_stack", s_stack.rank},
                                 {"stack_sigma_min", s_stack.min()}};
    // what the source describes: the residual stack, the identity outermost
    out.push_back(identity({"000 Pre-LN full rank",
                            "in Pre-LN the identity is outermost and untouched by LayerNorm's kernel, so the stack's "
                            "Jacobian keeps full rank d (unlike Post-LN's <= d - 2)",
                            "Pre-LN, the stack of residual blocks up to the last stream, " + size +
                                ", eps = 0, token-local, last token",
                            "d minus the rank of the stack's end-to-end Jacobian J_stack"},
                           double(d - s_stack.rank), ranks, nums, 0));
    // a separate fact: the final LayerNorm (what the head reads) brings LayerNorm's kernel back
    out.push_back(identity({"000 Pre-LN final LayerNorm rank",
                            "appending the final LayerNorm to a Pre-LN stack (what the head reads) brings back LayerNorm's "
                            "kernel: rank J_lnf J_stack <= d - 2 (Thm 2.2 applied to the last norm)",
                            "Pre-LN with its final LayerNorm, " + size + ", eps = 0, token-local, last token",
                            "rank of J_lnf J_stack above d - 2 (0 when within)"},
                           std::max(0, s_through.rank - (d - 2)), ranks, nums, 0));
  });
  attempt(b, out, {"000 Thm 3.6"}, [&] {  // Thm 3.6: the directions 1 and zhat are annihilated
    const JacobianReport& jpost0 = probe(Placement::Post, 0.0, true).jac;
    const JacobianReport& jpost = probe(Placement::Post, eps_m, true).jac;
    double g = 0, gz = 0;
    for (const auto& n : jpost0.norms) g = std::max({g, n.j_ones / n.predicted_bulk, n.j_zhat / n.predicted_bulk});
    for (const auto& n : jpost.norms) gz = std::max(gz, n.j_zhat / n.predicted_bulk);
    out.push_back(identity({"000 Thm 3.6", "perturbations along span{1, zhat} are annihilated by the LayerNorm",
                            placed("Post-LN") + ", " + size + ", eps = 0",
                            "max gain of J_LN on 1 and zhat relative to its bulk 1/sigma"},
                           g, fmt::format("at {} zhat keeps a gain of {:.2e}", eps_text, gz),
                           {{"gain_eps0", g}, {"gain_zhat_eps", gz}}));
  });
  attempt(b, out, {"000 Thm 4.6", "000 Thm 6.4"}, [&] {  // Thm 4.6 and 6.4: the Pre-LN lower bounds
    // about residual blocks I + A: any norm kind (RMSNorm's SmolLM2 too)
    const JacobianReport& jpre = probe(Placement::Pre, eps_m, false, true).jac;
    int holds = 0, vacuous = 0, violated = 0;
    for (const auto& bl : jpre.blocks) {
      if (bl.bound_verdict.empty()) continue;  // not a residual block x + F(x): the theorem does not apply
      if (bl.bound_verdict.rfind("holds", 0) == 0) holds++;
      else if (bl.bound_verdict.rfind("vacuous", 0) == 0) vacuous++;
      else violated++;
    }
    // the bound constrains a block only when ||A|| < 1; a seed where it constrains none says nothing
    // Weyl's inequality: it holds by algebra wherever it says something; a check of the code
    Measurement m46 = identity({"000 Thm 4.6", "Pre-LN: sigma_min(I + A) >= 1 - ||A|| when ||A|| < 1",
                                "Pre-LN, " + size + ", full sequence (token-local where T d > 4096)",
                                "number of Pre-LN blocks below the bound"},
                               double(violated),
                               fmt::format("{} blocks: {} within, {} vacuous (||A|| >= 1: the bound is <= 0), {} below",
                                           jpre.blocks.size(), holds, vacuous, violated),
                               {{"holds", holds}, {"vacuous", vacuous}, {"violated", violated}}, 0);
    m46.vacuous = holds + violated == 0;
    out.push_back(std::move(m46));
    // the product bound says nothing once any factor 1 - ||A_l|| is <= 0 (then it is <= 0)
    const auto& e = jpre.end_to_end;
    // the product of Weyl's bounds: also algebra where every factor is positive
    Measurement m64 = identity({"000 Thm 6.4", "L-layer Pre-LN: sigma_min >= prod(1 - ||A_l||)",
                                "Pre-LN, " + size + ", full sequence (token-local where T d > 4096)",
                                "1 if the end-to-end sigma_min is below the product bound, else 0"},
                               e.verdict.rfind("VIOLATED", 0) == 0 ? 1.0 : 0.0, e.verdict,
                               {{"product_bound", e.product_bound ? nlohmann::json(*e.product_bound) : nlohmann::json(nullptr)}},
                               0);
    m64.vacuous = !e.product_bound || !(*e.product_bound > 0);
    out.push_back(std::move(m64));
  });
  attempt(b, out, {"004 dNorm/dz"}, [&] {
    // 004: dNorm/dz ~ 1/sqrt(d), a law in the width d; Lemma 2.1 says the bulk singular value is 1/sigma.
    // Fitted over a family of widths d/2 .. 4d of fresh Post-LN models (the law needs widths, so a given
    // model cannot answer it); each width's reading is the median over norm sites of the bulk
    if (b.given) throw NotApplicable("a law in the width d: needs fresh models of several widths, not one model");
    if (!b.fresh) return;  // about the operator at initialization
    Series points;
    std::vector<double> by_sigma, widths;
    for (int w : {d / 2, d, 2 * d, 4 * d}) {
      if (w < o.n_heads || w % o.n_heads) continue;
      ModelConfig c = gpt_config(o, Placement::Post, 1e-5, o.n_layers);
      c.d_model = w;
      const auto m = forward_on(b, c);
      // every Post-LN norm site's input x + F(x) at the last token: the normalization's Jacobian (unit
      // gain: the derivative of the normalization itself) and its singular values
      std::vector<double> ones(size_t(w), 1.0);
      const NormParams<double> unit_gain{ones.data()};
      std::vector<double> bulk;
      for (int s = 0; s < c.n_slots(); s++) {
        const double* x = m->acts(s).r + size_t(o.seq_len - 1) * w;
        const std::vector<double> sv = singular_values(norm_jacobian_closed_form(NormKind::LayerNorm, x, unit_gain, w, 1e-5), w, w);
        double mean = 0, var = 0;
        for (int k = 0; k < w; k++) mean += x[k] / w;
        for (int k = 0; k < w; k++) var += (x[k] - mean) * (x[k] - mean) / w;
        std::vector<double> sorted = sv;
        std::sort(sorted.begin(), sorted.end());
        bulk.push_back(sorted[sorted.size() / 2]);
        by_sigma.push_back(bulk.back() * std::sqrt(var + 1e-5));
      }
      std::sort(bulk.begin(), bulk.end());
      widths.push_back(w);
      points.x.push_back(w), points.y.push_back(std::log(bulk[bulk.size() / 2]));
    }
    LawRule rule{"d (width)", "log of the median bulk singular value of J_LN",
                 {fixed_power(-0.5, "~ d^(-1/2) (the claim)"), Law::flat("independent of d"), power_law("~ d^p, p free")}};
    std::vector<double> bulk;
    for (double y : points.y) bulk.push_back(std::exp(y));
    out.push_back(law({"004 dNorm/dz", "the LayerNorm's derivative is about 1/sqrt(d)",
                       fmt::format("Post-LN, widths [{}], {} heads, {} layers, T = {}, {}, eps = 1e-5, every norm site "
                                   "(its input x + F(x) at the last token; the normalization without its gain)",
                                   fmt::join(widths, ", "), o.n_heads, o.n_layers, o.seq_len, weights(b, "GPT-2 init")),
                       "median over norm sites of the bulk (median) singular value of J_LN, against the width d"},
                      rule, points,
                      fmt::format("bulk singular value [{:.4g}] at d = [{}]; (bulk singular value) x sigma is {:.4f} to "
                                  "{:.4f} at every site and width: the bulk is 1/sigma (Lemma 2.1), whatever d",
                                  fmt::join(bulk, ", "), fmt::join(widths, ", "),
                                  *std::min_element(by_sigma.begin(), by_sigma.end()),
                                  *std::max_element(by_sigma.begin(), by_sigma.end())),
                      {{"widths", widths}, {"bulk", bulk}, {"bulk_times_sigma", by_sigma}}));
  });
  attempt(b, out, {"002 spectral bounds", "002 bound in M"}, [&] {  // 002: attention spectral bounds
    // about attention: any placement and norm kind (Dong et al. and the pretrained study read BERT's)
    const AttentionReport ar = analyze_attention(*probe(Placement::Pre, eps_m, true, true).model);
    int bad = 0, n = 0, with_m = 0;
    double worst = 0;
    for (const auto& h : ar.heads_by_layer) {
      n++;
      bad += !h.stats.chain_holds;
      // the bound's premises (source 002's derivation): rows of n entries (bidirectional attention; a
      // causal row i has i + 1, and early columns collect more mass), no q/k bias and beta = 0
      if (h.seed_bound && h.bound_premises)
        worst = std::max(worst, h.stats.norm2 / *h.seed_bound), with_m++;
    }
    // the chain holds by algebra for any row-stochastic matrix: a check
    out.push_back(identity({"002 spectral bounds", "1 <= ||A||_2 <= sqrt(c_max) <= sqrt(n) for a row-stochastic A",
                            placed("Pre-LN") + ", " + size + ", " + attention_kind(b) + ", every head",
                            "number of heads where the chain fails"},
                           double(bad), fmt::format("{} heads, the chain fails on {}", n, bad),
                           {{"heads", n}, {"chain_fails", bad}}, 0));
    // the bound in M = Gamma^2 sigma_Q sigma_K sqrt(d): source 002's own, a bound on a measured value
    Measurement mb = bound({"002 bound in M", "||A||_2 <= sqrt(n/(1+(n-1)exp(-2M))), M = Gamma^2 sigma_Q sigma_K sqrt(d)",
                            placed("Pre-LN") + ", " + size + ", " + attention_kind(b) + ", every head",
                            "largest ||A||_2 / bound over the heads (the bound: 1)"},
                           worst, 1.0,
                           fmt::format("{} of {} heads meet the bound's premises (bidirectional rows of n entries, no "
                                       "q/k bias, beta = 0); largest ||A||_2 / bound there {:.7g}",
                                       with_m, n, worst),
                           {{"heads", n}, {"heads_with_bound", with_m}, {"max_ratio_to_bound", worst}});
    mb.vacuous = with_m == 0;
    out.push_back(std::move(mb));
  });
  if (b.given && o.model->config.norm != NormKind::LayerNorm) {
    attempt(b, out, {"004 DeepNet constant"}, [&] {
      throw NotApplicable(fmt::format("a fact of LayerNorm's formula; this model uses {}", to_string(o.model->config.norm)));
    });
  } else if (b.fresh) {  // (and on a given model: N and d are its own)  // 004 / DeepNet: LN(alpha x + F) = LN(x + F / alpha): a fact of the formula
    const int N = o.n_layers;
    const double alpha = std::pow(2.0 * N, 0.25);
    Rng rng(uint64_t(o.seed), 3);
    std::vector<double> x(static_cast<size_t>(d)), f(static_cast<size_t>(d)), ones(size_t(d), 1.0), zero(size_t(d), 0.0);
    for (int i = 0; i < d; i++) x[i] = rng.normal(), f[i] = rng.normal();
    auto ln = [&](double xs, double fs) {
      std::vector<double> in(static_cast<size_t>(d)), res(static_cast<size_t>(d));
      for (int i = 0; i < d; i++) in[i] = xs * x[i] + fs * f[i];
      double mean = 0, rstd = 0;
      ops::layernorm_forward(res.data(), &mean, &rstd, in.data(), ones.data(), zero.data(), 1, d, 0.0);
      return res;
    };
    const auto lu = ln(alpha, 1), lv = ln(1, 1 / alpha), lw = ln(1, 1 / std::sqrt(2.0 * N));
    double same = 0, stated = 0;
    for (int i = 0; i < d; i++) same = std::max(same, std::abs(lu[i] - lv[i])), stated = std::max(stated, std::abs(lu[i] - lw[i]));
    out.push_back(identity({"004 DeepNet constant", "DeepNorm down-weights the branch by 1/sqrt(2N)",
                            fmt::format("the formula, N = {}, alpha = (2N)^(1/4) = {:.4f}, random x and F in R^{}", N,
                                        alpha, d),
                            "max |LN(alpha x + F) - LN(x + F/sqrt(2N))|"},
                           stated,
                           fmt::format("|LN(alpha x + F) - LN(x + F/alpha)| = {:.1e}: the branch weight is (2N)^(-1/4)",
                                       same),
                           {{"alpha", alpha}, {"same_form_err", same}, {"stated_form_err", stated}}));
    out.back().reported = "DeepNet (Wang et al. 2022): alpha = (2N)^(1/4), beta = (8N)^(-1/4) for an N-layer encoder";
  }
}

}  // namespace normlab::theory::detail
