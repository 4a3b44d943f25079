// depth.cpp: the claims about how a byte-LM stack behaves with depth, on one seed's models:
// source 002's rank collapse (its endpoint and its rate) and "||A||_2 rises toward sqrt(n) with depth
// in Post-LN", source 003's additive growth of Pre-LN, exponential growth of Post-LN's LayerNorm
// inputs and kappa^L gradient decay, and source 004's sqrt(l) growth, 1/sqrt(l) branch ratio, larger
// lower-layer gradients, effective depth (a layer reading nearly its predecessor's input; Prop. 2's
// sqrt(L) and its shares) and exponential Lipschitz constant (Thm 2) in Pre-LN, and its uniform
// gradients in Post-LN. Source 004's statements assume a branch comparable to the stream, so they are
// measured at Xavier init, not under GPT-2's depth-scaled init (which shrinks every branch by 1/sqrt(2L)).
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <type_traits>

#include "analysis/attention.h"
#include "analysis/dynamics.h"
#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "theory/checks.h"
#include "util/error.h"

namespace normlab::theory::detail {

namespace {

double depth_slope(const std::vector<double>& x, const std::vector<double>& y) {
  double a = 0;
  fit_rss(x, y, [](double v) { return v; }, &a);
  return a;
}

// The layers' gradient norms, in decades: the fitted change of log10 ||dL/d theta_l|| from layer 0 to
// the last (> 0: larger toward the output), the effect of "004 lower layers larger gradients" (whose
// source states one decade: "bottom 1e-2 to 1e-1, top 1e-3 to 1e-2"), and the per-layer log10 norms.
struct GradientDecades {
  double decades = 0;
  std::vector<double> log10_norms;
};
GradientDecades gradient_decades(const DynamicsReport& d) {
  GradientDecades g;
  std::vector<double> layer;
  for (size_t i = 0; i < d.layers.size(); i++) layer.push_back(double(i)), g.log10_norms.push_back(std::log10(d.layers[i].grad_norm));
  g.decades = depth_slope(layer, g.log10_norms) * double(d.layers.size() - 1);
  return g;
}

// mean over the tokens of ||r||, the input of a Post-LN sub-layer's LayerNorm (x + F(x))
template <class S>
double ln_input_norm(const Model<S>& m, int slot, int T) {
  const int C = m.config().d_model;
  const S* r = m.acts(slot).r;
  double sum = 0;
  for (int t = 0; t < T; t++) sum += row_norm(r + size_t(t) * C, C) / T;
  return sum;
}

}  // namespace

// Source 004's effective depth: in Pre-LN, sub-layer s+1 applied to x_{s+1} nearly equals it
// applied to x_s, ||F_{s+1}(N(x_{s+1})) - F_{s+1}(N(x_s))|| / ||F_{s+1}(N(x_{s+1}))||, over one
// sequence. Exact, not linearized: with sub-layer s's branch switched off (its output projection
// zeroed) a Pre-LN stack hands x_s on unchanged, so sub-layer s+1 reads x_s. One value per s.
template <class S>
std::vector<double> next_branch_shift(Model<S>& m, const std::vector<int32_t>& ids) {
  const ModelConfig& c = m.config();
  const int T = int(ids.size());
  const size_t n = size_t(T) * size_t(c.d_model);
  std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);
  auto branch_of = [&](int slot) {  // F_slot(N(input of slot)) = x_{slot+1} - x_slot after a forward
    std::vector<double> f(n);
    for (size_t i = 0; i < n; i++) f[i] = double(m.stream(slot + 1)[i]) - double(m.stream(slot)[i]);
    return f;
  };
  m.forward(ids.data(), labels.data(), 1, T);
  std::vector<std::vector<double>> branch;  // F_s(N(x_s)), s = 0 .. n_slots - 1
  for (int s = 0; s < c.n_slots(); s++) branch.push_back(branch_of(s));
  std::vector<double> shift;
  for (int s = 0; s + 1 < c.n_slots(); s++) {
    std::vector<std::pair<S*, std::vector<S>>> saved;
    for (const char* name : {".proj.weight", ".proj.bias"}) {
      const ParamSpec* p = m.table().find(slot_prefix(c, s) + name);
      if (!p && std::string(name) == ".proj.bias") continue;  // bias = none
      if (!p) throw Error("theory: the parameter " + slot_prefix(c, s) + name + " is missing");
      S* w = m.params().data() + p->offset;
      saved.emplace_back(w, std::vector<S>(w, w + p->numel));
      std::fill(w, w + p->numel, S(0));
    }
    m.forward(ids.data(), labels.data(), 1, T);
    const std::vector<double> moved = branch_of(s + 1);  // F_{s+1}(N(x_s))
    for (auto& [w, v] : saved) std::copy(v.begin(), v.end(), w);
    double diff = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
      diff += (branch[size_t(s) + 1][i] - moved[i]) * (branch[size_t(s) + 1][i] - moved[i]);
      ref += branch[size_t(s) + 1][i] * branch[size_t(s) + 1][i];
    }
    shift.push_back(std::sqrt(diff / std::max(ref, 1e-300)));
  }
  return shift;
}
template std::vector<double> next_branch_shift(Model<double>&, const std::vector<int32_t>&);
template std::vector<double> next_branch_shift(Model<float>&, const std::vector<int32_t>&);

}  // namespace normlab::theory::detail

namespace normlab::theory {

Series collapse_series(const std::vector<double>& res, double floor) {
  Series s;
  for (size_t i = 1; i < res.size(); i++) {
    const double y = std::log(res[0] / res[i]);
    if (!(res[i] > std::max(1e-12 * res[0], floor)) || !(y > 0)) continue;
    s.x.push_back(double(i));
    s.y.push_back(std::log(y));
  }
  return s;
}

LawRule collapse_law() {
  return {"l (layer)", "log log(res_0 / res_l) of pure attention",
          {detail::exponential_law("doubly exponential: res_l ~ c^(b^l)"),
           detail::fixed_power(1, "geometric: a constant factor per layer"), Law::flat("no further collapse")}};
}

}  // namespace normlab::theory

namespace normlab::theory::detail {

// The per-block (and per-sub-layer) Jacobians chain into the stack's only when each block is a function
// of the stream alone; with value residual learning the first layer's values reach every layer beside it.
static void refuse_unchained(const ModelConfig& c) {
  if (c.value_residual > 0)
    throw NotApplicable("with value residual learning the first layer's values reach every layer beside the stream, so "
                        "the block Jacobians do not chain into the stack's");
}

std::vector<double> prefix_lipschitz(Model<double>& m, const std::vector<int32_t>& ids) {
  refuse_unchained(m.config());
  const std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);
  m.forward(ids.data(), labels.data(), 1, int(ids.size()));
  const int d = m.config().d_model, tok = int(ids.size()) - 1;
  std::vector<double> prefix(size_t(d) * d, 0.0), norms;
  for (int i = 0; i < d; i++) prefix[size_t(i) * d + i] = 1.0;
  for (int l = 0; l < m.config().n_layers; l++) {
    const std::vector<double> block = token_local_jacobian(m, 2 * l, 2 * l + 2, tok);
    std::vector<double> next(size_t(d) * d, 0.0);
    for (int i = 0; i < d; i++)
      for (int k = 0; k < d; k++)
        for (int j = 0; j < d; j++) next[size_t(i) * d + j] += block[size_t(i) * d + k] * prefix[size_t(k) * d + j];
    prefix = std::move(next);
    norms.push_back(singular_values(prefix, d, d).front());
  }
  return norms;
}

double lipschitz_bound(Model<double>& m, const std::vector<int32_t>& ids) {
  refuse_unchained(m.config());
  const std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);
  m.forward(ids.data(), labels.data(), 1, int(ids.size()));
  const int d = m.config().d_model, tok = int(ids.size()) - 1;
  double product = 1;
  for (int s = 0; s < m.config().n_slots(); s++) {
    std::vector<double> branch = token_local_jacobian(m, s, s + 1, tok);  // I + J_(F o N) of a residual sub-layer
    for (int i = 0; i < d; i++) branch[size_t(i) * d + i] -= 1.0;
    product *= 1 + singular_values(branch, d, d).front();
  }
  return product;
}

// The claims about growth with depth, one attempt() each (long because the claims are many: each
// block reads alone, and splitting the list would scatter what the table lists together).
void depth_checks(const Bench& b, std::vector<Measurement>& out) {
  const TheoryOptions& o = b.opt;
  const int L = o.deep_layers;
  const std::string lm = fmt::format("d = {}, {} heads, T = {}, {}", o.d_model, o.n_heads, o.seq_len, b.lm);
  auto need_depth = [&] {  // a fit over layers: a given model may be too shallow
    if (L < 3) throw NotApplicable(fmt::format("a fit over depth needs at least 3 layers; this model has {}", L));
  };
  attempt(b, out, {"002 rank collapse", "002 skips prevent collapse", "002 collapse rate"}, [&] {
    // 002 rank collapse: the Pre-LN model's own weights with skips and MLPs removed
    need_depth();
    // Dong et al. measured BERT (Post-LN) as well: a given model is read whatever its placement and norm
    if (b.given && o.model->config.hyper_connected())  // (the ablations remove the skips the mixes replace)
      throw NotApplicable(hyper_not_applicable(o.model->config));
    ClaimModels::Measured deep_pre =
        b.given ? b.models->given_measured()
                : b.models->measured(gpt_config(o, Placement::Pre, 1e-5, L), true, ClaimModels::Norm::Any);
    // the dynamics' batches follow the seed: on a given model the seeds are what varies (the input windows)
    const DynamicsReport dpre = on(deep_pre, [&](auto& m) { return dynamics_on(b, m); });
    const Placement placement = on(deep_pre, [](auto& m) { return m.config().placement_of(0); });
    auto collapse = [&](bool skips, bool mlp) {
      for (const auto& v : dpre.rank_collapse)
        if (v.skips == skips && v.mlp == mlp) return v;
      throw Error("theory: a rank-collapse ablation is missing");
    };
    const auto full = collapse(true, true), attn_skip = collapse(true, false), noskip = collapse(false, true),
               pure = collapse(false, false);
    const std::string setting =
        fmt::format("{}, {} layers, {}, {}; ablations keep the weights",
                    b.given ? fmt::format("the checkpoint ({})", to_string(placement)) : "Pre-LN",
                    L, lm, weights(b, "GPT-2 init"));
    // a float32 stream resolves res(X) only down to dpre.res_floor (a given model read in float32; float64
    // has none): a collapse that reaches it is bounded, not read
    const bool floored = dpre.res_floor > 0 && std::any_of(pure.residual_rank.begin(), pure.residual_rank.end(),
                                                           [&](double r) { return r <= dpre.res_floor; });
    const std::string detail = fmt::format("res(X_L)/res(X_0): pure attention {:.3g}, no skips with MLP {:.3g}, skips "
                                           "without MLP {:.3g}, full model {:.3g}",
                                           pure.ratio, noskip.ratio, attn_skip.ratio, full.ratio);
    const nlohmann::json nums = {{"pure_attention", pure.ratio}, {"noskip_mlp", noskip.ratio},
                                 {"skip_no_mlp", attn_skip.ratio}, {"full", full.ratio}};
    if (floored) {  // a bound, not a reading: its spread over the windows would be the floor's, not the model's
      for (const char* name : {"002 rank collapse", "002 skips prevent collapse"}) {
        Measurement skip;
        skip.head.source = name;
        skip.skipped = fmt::format("pure attention's collapse reaches {}'s floor (res(X) {:g}) in this window: its depth "
                                   "is only bounded; --precision float64 measures it",
                                   dpre.precision, dpre.res_floor);
        out.push_back(std::move(skip));
      }
    } else {
      out.push_back(effect({"002 rank collapse", "without skip connections attention layers drive the tokens to rank one",
                            setting, "log10 res(X_L)/res(X_0) of pure attention (no skips, no MLP): < 0, a collapse"},
                           {std::log10(std::max(pure.ratio, 1e-300))}, EffectRule::towards(-1), detail, nums));
      out.back().reported = "Dong et al. 2021 (bert-base, albert, xlnet, at init and trained): pure attention collapses to "
                            "about 0 within a few layers; every variant with skips does not";
      // "prevent" is an effect against the control (the same weights without the skips), not a level:
      // how many orders of magnitude more of the residual the skips keep (floors: 1e-300)
      const double kept = std::log10(std::max(attn_skip.ratio, 1e-300) / std::max(pure.ratio, 1e-300));
      out.push_back(comparison({"002 skips prevent collapse", "skip connections prevent rank collapse", setting,
                                "log10 res(X_L)/res(X_0) with skips (no MLPs) minus the same without skips: orders of "
                                "magnitude of the residual the skips keep against the control"},
                               {std::log10(std::max(pure.ratio, 1e-300))}, {std::log10(std::max(attn_skip.ratio, 1e-300))},
                               EffectRule::towards(1).between("without skips", "with skips"),
                               fmt::format("{}; kept {:.2f} orders of magnitude", detail, kept), nums));
    }
    // the rate: Dong et al.'s bound shrinks res doubly exponentially, res_L <= (c res_0)^(3^L)
    const Series rate = collapse_series(pure.residual_rank, dpre.res_floor);
    Measurement mr = law({"002 collapse rate", "pure attention loses rank doubly exponentially with depth", setting,
                          "log log(res_0/res_l) against the layer l, over the layers above the rounding floor"},
                         collapse_law(), rate,
                         rate.x.size() < 3 ? fmt::format("res reaches the rounding floor within {} layers: too fast to "
                                                         "fit a rate", rate.x.size())
                                           : fmt::format("res(X_l) [{:.3g}]", fmt::join(pure.residual_rank, ", ")),
                         {{"layers_fitted", rate.x.size()}, {"residual_by_layer", pure.residual_rank}});
    mr.reported = "Dong et al. 2021, Thm 2.2: a bound, res(SAN(X)) <= (4 gamma beta / sqrt(d_qk))^((3^L - 1)/2) res(X)^(3^L); "
                  "their Fig. 2 (pretrained BERT, ALBERT, XLNet) shows pure attention near 0 within a few layers";
    out.push_back(std::move(mr));
  });
  attempt(b, out, {"002 MLP Lipschitz slows collapse"}, [&] {
    // Dong et al.'s SAN with MLPs (attention then MLP, no skips, no norms): the same fresh weights with
    // the MLP's W1, b1 and W2 scaled by a = 2, which multiplies the MLP's Lipschitz bound
    // ||W2|| ||W1|| Lip(GELU) by a^2 = 4; the claim: the collapse is slower. The premise is a signal
    // that reaches the attention (as for 004, below): at Xavier init. Under GPT-2's init without norms
    // the stream shrinks toward 0 layer by layer, every attention row turns uniform whatever the MLP
    // does, and the comparison is void; that reading is reported beside the verdict.
    if (b.given)
      throw NotApplicable("a statement about the architecture at initialization, measured on fresh attention + MLP "
                          "stacks without skips or norms, not on given weights");
    if (!b.fresh) return;  // about initialization: measured on fresh models only
    need_depth();
    auto log_res = [&](double a, InitScheme init) {  // log res(X_l), l = 1 .. L, over 2 batches of 4 (floor 1e-15)
      ModelConfig c = gpt_config(o, Placement::None, 1e-5, L);
      c.residual = false;
      c.init = init;
      auto m = b.models->make(c);
      for (int slot = 1; slot < c.n_slots(); slot += 2) {  // the MLP sub-layers
        const std::string mlp = slot_prefix(c, slot);
        for (const char* name : {".fc.weight", ".fc.bias", ".proj.weight"}) {
          const ParamSpec* p = m->table().find(mlp + name);
          if (!p) throw Error("theory: the MLP parameter " + mlp + name + " is missing");
          for (size_t i = 0; i < p->numel; i++) m->params()[p->offset + i] *= a;
        }
      }
      const DynamicsReport d = dynamics_on(b, *m);
      std::vector<double> v;
      for (int l = 1; l < L; l++) v.push_back(std::log(std::max(1e-15, d.layers[size_t(l)].residual_rank)));
      v.push_back(std::log(std::max(1e-15, d.final_residual_rank)));
      return v;
    };
    // the collapse rate: the fitted slope of log res(X_l) against l over the layers above the floor
    auto rate = [](const std::vector<double>& v) {
      std::vector<double> l, y;
      for (size_t i = 0; i < v.size() && v[i] > std::log(1e-15) + 1; i++) l.push_back(double(i + 1)), y.push_back(v[i]);
      return l.size() >= 3 ? depth_slope(l, y) : std::numeric_limits<double>::quiet_NaN();
    };
    auto mean_gain = [](const std::vector<double>& base, const std::vector<double>& scaled) {
      double g = 0;
      for (size_t i = 0; i < base.size(); i++) g += (scaled[i] - base[i]) / double(base.size());
      return g;
    };
    const std::vector<double> base = log_res(1, InitScheme::Xavier), scaled = log_res(2, InitScheme::Xavier);
    const double rate_base = rate(base), rate_scaled = rate(scaled), ratio = rate_scaled / rate_base;
    const double gpt2_gain = mean_gain(log_res(1, InitScheme::Gpt2), log_res(2, InitScheme::Gpt2));
    // the rates are negative (a collapse); a slower one is larger: scaled minus original > 0
    const bool both = std::isfinite(rate_base) && std::isfinite(rate_scaled);
    Measurement mm = comparison(
        {"002 MLP Lipschitz slows collapse", "an MLP with a larger Lipschitz constant raises the rank more, slowing rank collapse",
         fmt::format("attention + MLP without skips or norms (Dong et al.'s SAN with MLPs), {} layers, {}, Xavier init "
                     "(fresh); the MLP's W1, b1, W2 scaled by 2 (Lipschitz bound x4)", L, lm),
         "the fitted slope of log res(X_l) against l (over the layers above 1e-15) with the scaled MLP minus the same "
         "with the original (> 0: a slower collapse)"},
        both ? std::vector<double>{rate_base} : std::vector<double>{},
        both ? std::vector<double>{rate_scaled} : std::vector<double>{},
        EffectRule::towards(1).between("original MLP", "scaled MLP"),
        fmt::format("log res(X_l) falls {:.3f} per layer with the original MLP, {:.3f} with the scaled one "
                    "(res(X_L): {:.3g}, {:.3g}); at GPT-2 init (a vanishing stream, uniform attention) "
                    "scaling changes the mean log res by {:.2g}",
                    -rate_base, -rate_scaled, std::exp(base.back()), std::exp(scaled.back()), gpt2_gain),
        {{"rate_ratio", ratio}, {"rate_original", rate_base}, {"rate_scaled", rate_scaled},
         {"mean_log_res_gain", mean_gain(base, scaled)}, {"log_res_original", base},
         {"log_res_scaled", scaled}, {"gpt2_init_mean_log_res_gain", gpt2_gain}});
    out.push_back(std::move(mm));
    out.back().reported = "Dong et al. 2021, Sec. 2.3: the MLP's Lipschitz constant enters their bound on the residual of "
                          "a SAN with MLPs; a larger one slows the convergence to rank one (a bound, no measurement)";
  });
  // the Pre-LN and Post-LN stacks at Xavier init (the premise of 003 and 004 at initialization: branches
  // comparable to the stream). Trained, they start from GPT-2's init: a 24-layer Post-LN from Xavier's
  // never leaves the unigram loss in 3,000 steps at any lr from 1e-4 to 3e-3 (measured), so it would
  // void every trained row; from GPT-2's both placements learn
  ModelConfig pre_cfg = gpt_config(o, Placement::Pre, 1e-5, L), post_cfg = gpt_config(o, Placement::Post, 1e-5, L);
  pre_cfg.init = post_cfg.init = b.fresh ? InitScheme::Xavier : InitScheme::Gpt2;
  const std::string xavier =
      fmt::format("{} layers, {}, {}", L, lm, weights(b, b.fresh ? "Xavier init" : "trained from GPT-2 init"));
  attempt(b, out, {"003/004 stream growth", "003 additive, not multiplicative", "004 branch ratio",
                   "004 lower layers larger gradients", "004 effective depth", "004 Thm 2 Pre-LN Lipschitz"}, [&] {
    need_depth();
    ClaimModels::Measured held = b.models->measured(pre_cfg, true, ClaimModels::Norm::Any);
    on(held, [&](auto& pre) {
      const DynamicsReport dp = dynamics_on(b, pre);
      std::vector<double> l, grow, ratio;
      for (size_t i = 1; i < dp.layers.size(); i++) {
        l.push_back(double(i));
        grow.push_back(std::max(1e-300, dp.layers[i].stream_rms * dp.layers[i].stream_rms -
                                            dp.layers[0].stream_rms * dp.layers[0].stream_rms));
        ratio.push_back(dp.layers[i].mlp_branch_ratio);
      }
      std::vector<double> log_l, log_grow, log_ratio;
      for (size_t i = 0; i < l.size(); i++)
        log_l.push_back(std::log(l[i])), log_grow.push_back(std::log(grow[i])), log_ratio.push_back(std::log(ratio[i]));
      const double p = depth_slope(log_l, log_grow), q = depth_slope(log_l, log_ratio);
      // (in the stream's unit, RMS(x) = ||x|| / sqrt(d): a constant factor, so every fit and verdict is
      // the same as in ||x||)
      const std::string norms = fmt::format("rms(x) = ||x|| / sqrt(d) from {:.3f} (entering layer 0) to {:.3f} (after the "
                                            "last of {} layers); ||x_l||^2 - ||x_0||^2 ~ l^{:.2f} as a free power law",
                                            dp.layers[0].stream_rms, dp.final_stream_rms, L, p);
      std::vector<double> stream_rms;
      for (const auto& ly : dp.layers) stream_rms.push_back(ly.stream_rms);
      const Series growth{l, log_grow};
      const std::string grow_y = "log(||x_l||^2 - ||x_0||^2)";
      out.push_back(law({"003/004 stream growth", "Pre-LN grows the stream additively: ||x_l||^2 ~ l, i.e. ||x_l|| ~ sqrt(l)",
                         "Pre-LN, " + xavier, grow_y + " against the layer l = 1 .. L-1"},
                        {"l (layer)", grow_y,
                         {fixed_power(1, "~ l (the claim)"), power_law("~ l^p, p free"), exponential_law("exponential in l"),
                          Law::flat("no growth")}},
                        growth, norms, {{"exponent", p}, {"stream_rms", stream_rms}}));
      out.push_back(law({"003 additive, not multiplicative", "Pre-LN's growth is additive (a power of l), not exponential",
                         "Pre-LN, " + xavier, grow_y + " against the layer l = 1 .. L-1"},
                        {"l (layer)", grow_y,
                         {power_law("a power of l (additive)"), exponential_law("exponential in l (multiplicative)"),
                          Law::flat("no growth")}},
                        growth, norms, {{"exponent", p}}));
      out.push_back(law({"004 branch ratio", "the branch-to-stream ratio ||F_l||/||x_l|| shrinks like 1/sqrt(l)",
                         "Pre-LN, " + xavier, "log of the MLP branch ratio against the layer l = 1 .. L-1"},
                        {"l (layer)", "log ||F_l|| / ||x_l|| (MLP)",
                         {fixed_power(-0.5, "~ l^(-1/2) (the claim)"), power_law("~ l^q, q free"),
                          exponential_law("exponential in l"), Law::flat("constant")}},
                        Series{l, log_ratio},
                        fmt::format("ratio {:.3f} at layer 1, {:.3f} at layer {}; ~ l^{:.2f} as a free power law",
                                    ratio.front(), ratio.back(), L - 1, q),
                        {{"exponent", q}, {"ratios", ratio}}));
      const double lower = dp.layers.front().grad_norm / dp.layers.back().grad_norm;
      const GradientDecades pre_grads = gradient_decades(dp);
      out.push_back(effect({"004 lower layers larger gradients",
                            "in Pre-LN the lower layers get larger gradients than the upper ones", "Pre-LN, " + xavier,
                            "fitted change of log10 ||dL/d theta_l|| from layer 0 to the last, in decades (< 0: larger "
                            "toward the input)"},
                           {pre_grads.decades},
                           EffectRule::towards(-1).stated(1.0, "one decade: source 004, citing Liu et al. 2020, bottom "
                                                               "layers 1e-2 to 1e-1, top layers 1e-3 to 1e-2"),
                           fmt::format("gradient norm {:.3g} at layer 0, {:.3g} at layer {} (ratio {:.3g}); fitted change "
                                       "{:.2f} decades", dp.layers.front().grad_norm, dp.layers.back().grad_norm, L - 1,
                                       lower, pre_grads.decades),
                           {{"ratio", lower}, {"decades", pre_grads.decades}, {"log10_grad_norms", pre_grads.log10_norms}}));
      out.back().reported = "source 004, citing Liu et al. 2020: in Pre-LN the bottom layers' gradients are about 1e-2 to "
                            "1e-1, the top layers' 1e-3 to 1e-2";
      const std::vector<double> shift = next_branch_shift(pre, b.ids);
      std::vector<double> log_s, log_shift;
      for (size_t s = 0; s < shift.size(); s++)
        log_s.push_back(std::log(double(s + 1))), log_shift.push_back(std::log(std::max(1e-300, shift[s])));
      const double decay = depth_slope(log_s, log_shift);
      std::vector<double> sub;
      for (size_t i = 0; i < shift.size(); i++) sub.push_back(double(i));
      const double trend = spearman(sub, shift);
      out.push_back(effect({"004 effective depth",
                            "in Pre-LN a deep layer sees nearly its predecessor's input, F_{s+1}(N(x_{s+1})) ~ "
                            "F_{s+1}(N(x_s)), and more so the deeper it is: the stack acts wider rather than deeper",
                            "Pre-LN, " + xavier + ", one sequence, every sub-layer pair (attention, MLP alternate)",
                            "Spearman rank correlation of the relative change ||F_{s+1}(N(x_{s+1})) - F_{s+1}(N(x_s))|| / "
                            "||F_{s+1}(N(x_{s+1}))|| with the sub-layer s (< 0: smaller the deeper)"},
                           {trend}, EffectRule::towards(-1),
                           fmt::format("relative change {:.3f} at sub-layer 1, {:.3f} at sub-layer {} (median {:.3f}); as a "
                                       "power of s + 1: exponent {:.2f}", shift.front(), shift.back(), shift.size(), [&] {
                                         std::vector<double> v = shift;
                                         std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
                                         return v[v.size() / 2];
                                       }(), decay),
                           {{"spearman", trend}, {"exponent", decay}, {"relative_change", shift}}));
      out.back().reported = "source 004: an argument (for large t, x_t and x_{t+1} differ little), no measurement";
      if constexpr (!std::is_same_v<std::decay_t<decltype(pre)>, Model<double>>) {  // (token-local Jacobians)
        Measurement skip;
        skip.head.source = "004 Thm 2 Pre-LN Lipschitz";
        skip.skipped = float64_only();
        out.push_back(std::move(skip));
      } else {
        // 004 Thm 2: the Pre-LN network's Lipschitz constant is (1 + L_F L_Norm)^L, exponential in depth. Its
        // local version at the last token: the spectral norm of d x_l / d x_0 for every prefix of l layers (the
        // token-local block Jacobians chain at the last token of a causal stack)
        const std::vector<double> lip = prefix_lipschitz(pre, b.ids);
        std::vector<double> lay, log_lip;
        for (size_t l = 0; l < lip.size(); l++) lay.push_back(double(l + 1)), log_lip.push_back(std::log(lip[l]));
        std::vector<double> log_lay;
        for (double v : lay) log_lay.push_back(std::log(v));
        const double power = depth_slope(log_lay, log_lip);
        const double theorem_bound = lipschitz_bound(pre, b.ids);
        out.push_back(bound({"004 Thm 2 Pre-LN Lipschitz",
                             "the Lipschitz constant of an L-layer Pre-LN network is at most (1 + L_F L_Norm)^L: exponential "
                             "in depth",
                             "Pre-LN, " + xavier + ", the last token: ||d x_L / d x_0||_2 against the theorem's product "
                             "with each sub-layer's local constant, prod_s (1 + ||J_(F_s o N_s)||_2)",
                             "||d x_L / d x_0||_2 at the last token (the bound: the product)"},
                            lip.back(), theorem_bound,
                            fmt::format("||d x_l / d x_0||_2 = {:.3g} after 1 layer, {:.3g} after {} (as a power law ~ "
                                        "l^{:.2f}); the product bound {:.3g}: {:.2g} times the measured gain",
                                        lip.front(), lip.back(), L, power, theorem_bound, theorem_bound / lip.back()),
                            {{"power_exponent", power}, {"log_lipschitz", log_lip}, {"bound", theorem_bound}}));
        out.back().reported = "source 004, Thm 2 (an argument, no measurement): L_Pre = (1 + L_F L_Norm)^L ~ e^(L L_F L_Norm)";
      }
    });
  });
  attempt(b, out, {"004 Prop. 2 shares", "004 Prop. 2 effective depth"}, [&] {
    // 004 Prop. 2: r_t = ||F_t|| / ||x_L||, the "contribution" of layer t; the effective depth is the least
    // k with sum_{t<k} r_t >= 0.9, and with r_t ~ L^(-1/2) it is 0.9 sqrt(L). Measured over a family of depths
    if (b.given) throw NotApplicable("needs a family of depths (6, 12, 24, 48 layers) of fresh Pre-LN stacks, not one model");
    if (!b.fresh) return;
    const std::vector<int> depths = {6, 12, 24, 48};
    std::vector<double> log_depth, log_total, log_k, k_doc, k_share, total;
    for (int depth : depths) {
      ModelConfig c = gpt_config(o, Placement::Pre, 1e-5, depth);
      c.init = InitScheme::Xavier;
      auto m = forward_on(b, c);
      const size_t n = b.ids.size() * size_t(o.d_model);
      auto norm = [&](const double* v, const double* minus) {
        double ss = 0;
        for (size_t i = 0; i < n; i++) ss += (v[i] - (minus ? minus[i] : 0.0)) * (v[i] - (minus ? minus[i] : 0.0));
        return std::sqrt(ss);
      };
      const double out_norm = norm(m->stream(2 * depth), nullptr);
      std::vector<double> r;  // r_t, layer t = attention + MLP sub-layers
      for (int t = 0; t < depth; t++) r.push_back(norm(m->stream(2 * t + 2), m->stream(2 * t)) / out_norm);
      double sum = 0, all = 0;
      for (double v : r) all += v;
      int kd = depth + 1, ks = depth;  // depth + 1: the document's sum never reaches 0.9
      for (int t = 0; t < depth; t++) {
        sum += r[size_t(t)];
        if (kd > depth && sum >= 0.9) kd = t + 1;
        if (ks == depth && sum >= 0.9 * all) ks = t + 1;
      }
      log_depth.push_back(std::log(double(depth)));
      total.push_back(all), log_total.push_back(std::log(all));
      k_doc.push_back(kd), k_share.push_back(ks), log_k.push_back(std::log(double(ks)));
    }
    const double total_exp = depth_slope(log_depth, log_total), k_exp = depth_slope(log_depth, log_k);
    const std::string setting = fmt::format("Pre-LN, L in [{}] layers, {}, Xavier init; r_t = ||x_(t+1) - x_t|| / ||x_L|| "
                                            "per layer over one sequence", fmt::join(depths, ", "), lm);
    const std::string detail = fmt::format("L = [{}]: sum of r_t [{:.2f}], the document's k (sum r_t >= 0.9) [{}], "
                                           "k reaching 90% of the sum [{}]",
                                           fmt::join(depths, ", "), fmt::join(total, ", "), fmt::join(k_doc, ", "),
                                           fmt::join(k_share, ", "));
    const nlohmann::json nums = {{"depths", depths}, {"sum_r", total}, {"k_document", k_doc}, {"k_share", k_share},
                                 {"sum_exponent", total_exp}, {"k_share_exponent", k_exp}};
    std::vector<double> depth_x(depths.begin(), depths.end());
    out.push_back(law({"004 Prop. 2 shares",
                       "the layers' contributions r_t are shares of the output: 90% of the contribution is reached when "
                       "sum_{t<k} r_t >= 0.9 (so sum_t r_t = 1 over all L layers)",
                       setting, "log sum_t r_t against the depth L"},
                      {"L (depth)", "log sum_t r_t",
                       {Law::flat("independent of L: shares (the claim)"),
                        fixed_power(0.5, "~ sqrt(L): what r_t ~ L^(-1/2) for every t gives"), power_law("~ L^e, e free")}},
                      Series{depth_x, log_total}, detail, nums));
    out.back().reported = "source 004, Prop. 2: r_t ~ Theta(L^(-1/2)), so sum_{t<k} r_t ~ k / sqrt(L) >= 0.9 gives k ~ 0.9 "
                          "sqrt(L) (with r_t ~ L^(-1/2) for every t the sum over all L layers is ~ sqrt(L), not 1)";
    out.push_back(law({"004 Prop. 2 effective depth", "an L-layer Pre-LN network has effective depth Theta(sqrt(L))",
                       setting, "log k against the depth L, k the fewest layers whose r_t reach 90% of the sum over all "
                                "layers (a share)"},
                      {"L (depth)", "log k",
                       {fixed_power(0.5, "~ sqrt(L) (the claim)"), fixed_power(1, "~ L (every layer counts)"),
                        power_law("~ L^e, e free"), Law::flat("independent of L")}},
                      Series{depth_x, log_k}, detail, nums));
    out.back().reported = "source 004, Prop. 2: effective depth 0.9 sqrt(L); Post-LN's ~ L";
  });
  attempt(b, out, {"003 Post-LN input growth", "003 kappa^L gradient decay", "004 Post-LN gradients uniform",
                   "002 ||A|| rises with depth"}, [&] {
    need_depth();
    // a loss is needed by kappa alone (a headless model skips it)
    ClaimModels::Measured held = b.models->measured(post_cfg, false, ClaimModels::Norm::Any);
    on(held, [&](auto& post) {
      // the LayerNorm inputs, on one sequence
      std::vector<int32_t> labels(b.ids.size(), ops::kIgnoreLabel);
      post.forward(b.ids.data(), labels.data(), 1, int(b.ids.size()));
      std::vector<double> site, log_norm;
      for (int s = 2; s < post.config().n_slots(); s++) {  // slot 0, 1: the embedding's scale
        site.push_back(double(s));
        log_norm.push_back(std::log(ln_input_norm(post, s, int(b.ids.size()))));
      }
      // which law the data favour: exponential, log ||LN input|| linear in the sub-layer s, against a
      // power law, linear in log s (additive growth); a tiny g makes the two indistinguishable, as it should
      const double g = std::exp(depth_slope(site, log_norm)) - 1;
      out.push_back(law({"003 Post-LN input growth", "Post-LN's LayerNorm inputs grow exponentially with depth, like (1+g)^L",
                         "Post-LN, " + xavier, "log ||LN input|| against the sub-layer s = 2 .. 2L-1"},
                        {"s (sub-layer)", "log ||x + F(x)||",
                         {exponential_law("exponential growth (1+g)^s (the claim)"), power_law("a power of s"),
                          Law::flat("no growth")},
                         0, 1},
                        Series{site, log_norm},
                        fmt::format("||x + F(x)|| from {:.3f} to {:.3f}; fitted rate g = {:.4f}, (1+g)^(2L) = {:.3f}",
                                    std::exp(log_norm.front()), std::exp(log_norm.back()), g, std::pow(1 + g, 2.0 * L)),
                        {{"g", g}, {"log_norms", log_norm}}));
      if (post.config().has_logits()) {
        const DynamicsReport dq = dynamics_on(b, post);
        std::vector<double> layer, log_grad;
        for (size_t i = 1; i < dq.layers.size(); i++) layer.push_back(double(i)), log_grad.push_back(std::log(dq.layers[i].grad_norm));
        const double kappa = std::exp(-depth_slope(layer, log_grad));
        // 003's decay is a law of log ||dL/d theta_l|| in l (kappa, the per-layer rate, in the detail);
        // 004's uniformity a bound on the spread, at the source's own one decade
        const GradientDecades post_grads = gradient_decades(dq);
        const double decades = post_grads.decades;
        const std::vector<double>& log10_grad = post_grads.log10_norms;
        const std::string grads = fmt::format("gradient norm {:.3g} at layer 0, {:.3g} at layer {}; fitted change {:.2f} "
                                              "decades; kappa {:.4f} (layers 1 .. L-1)",
                                              dq.layers.front().grad_norm, dq.layers.back().grad_norm, L - 1, decades, kappa);
        out.push_back(law({"003 kappa^L gradient decay", "in Post-LN the gradient decays like kappa^L (kappa < 1) toward the input",
                           "Post-LN, " + xavier, "log ||dL/d theta_l|| against the layer l = 1 .. L-1"},
                          {"l (layer)", "log ||dL/d theta_l||",
                           {exponential_law("geometric: kappa^(L-l) toward the input (the claim)"), power_law("a power of l"),
                            Law::flat("uniform")},
                           0, 1},
                          Series{layer, log_grad}, grads, {{"kappa", kappa}, {"decades", decades}, {"log_grad_norms", log_grad}}));
        // the source's range: every layer within about 1e-2 to 1e-1, one decade
        const auto [lo, hi] = std::minmax_element(log10_grad.begin(), log10_grad.end());
        out.push_back(bound({"004 Post-LN gradients uniform",
                             "in Post-LN the layers' gradient norms are about uniform (all within about 1e-2 to 1e-1), every "
                             "layer learns", "Post-LN, " + xavier,
                             "spread of log10 ||dL/d theta_l|| over the layers, max - min, in decades (the bound: the "
                             "source's range, one decade)"},
                            *hi - *lo, 1.0, grads, {{"spread_decades", *hi - *lo}, {"log10_grad_norms", log10_grad}}));
        out.back().reported = "source 004, citing Liu et al. 2020: Post-LN's gradient norms are more uniform across layers, "
                              "about 1e-2 to 1e-1 each";
      } else {
        for (const char* name : {"003 kappa^L gradient decay", "004 Post-LN gradients uniform"}) {
          Measurement m;
          m.head.source = name;
          m.skipped = "the claim needs gradients of a loss; this model has no head (head = none)";
          out.push_back(std::move(m));
        }
      }
      // 002: in Post-LN ||A||_2 rises toward sqrt(n) with depth
      const AttentionReport ar = analyze_attention(post);
      std::vector<double> lay, norm;
      for (const auto& h : ar.heads_by_layer) lay.push_back(double(h.layer)), norm.push_back(h.stats.norm2 / std::sqrt(double(o.seq_len)));
      const double rise = depth_slope(lay, norm) * (L - 1);
      out.push_back(effect({"002 ||A|| rises with depth", "in Post-LN ||A||_2 rises toward sqrt(n) with depth",
                            "Post-LN, " + xavier + ", " + attention_kind(b) + ", every head",
                            "fitted change of ||A||_2 / sqrt(n) from the first to the last layer (> 0: a rise)"},
                           {rise}, EffectRule::towards(1),
                     fmt::format("||A||_2/sqrt(n) = {:.3f} in layer 0 head 0, {:.3f} in the last layer's head 0", norm.front(),
                                 norm[norm.size() - size_t(o.n_heads)]),
                     {{"rise", rise}}));
    });
  });
}

}  // namespace normlab::theory::detail
