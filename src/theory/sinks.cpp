// sinks.cpp: the pre-norm phenomena of 2024-2026 as claims, read by the sinks instrument
// (analysis/sinks.h) on trained models (theory's trained column: the deep Pre-LN and Post-LN byte LMs
// the fake-depth claims read, same recipe and windows) and on a given one (`theory --checkpoint`):
//   Sun et al. 2024 (arXiv 2402.17762): trained LLMs hold a few massive activations, by their
//     criterion an entry of the stream above 100 in magnitude and about 1,000 times the median.
//   ... and their values "largely stay constant regardless of the input" (their abstract): across the
//     windows of a unit, the massive entry's relative spread sd / mean |x| against the median of the
//     same position's other dimensions' (a model without a massive activation cannot answer it).
//   Gu et al. 2024 (arXiv 2410.10781): language models develop attention sinks on the first token,
//     by their metric (a head of a window has one when the first token's mean attention from the
//     queries that see it exceeds 0.3).
//   2603.05498: pre-norm is what makes massive activations appear: a Pre-LN's largest activation
//     ratio above a Post-LN's of the same size and training (a paired comparison on the same windows).
//   2603.17771: "the RMSNorm Jacobian attenuates gradients roughly in inverse proportion to input norm"
//     (its abstract), which is how a massive activation regulates the gradient sink at its token: per
//     unit, the slope of log (the gain of the norm that reads the stream) against log ||x_t|| over tokens
//     spanning the unit's norms, at the stream point of the largest activation (-1 for 1 / ||x||).
//   ... and "under causal masking, attention sinks can induce pronounced gradient concentration" on
//     the sink token (its abstract): the gradient a self-attention sends to its normalized input, at
//     the first position against the median one, in layers with sinks against layers without (the
//     causal mask alone already favours the first position, which every query sees).
// Fresh models have no training to have produced them: no rows.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <limits>

#include "analysis/linalg.h"
#include "analysis/norm_gain.h"
#include "analysis/sinks.h"
#include "model/methods.h"
#include "model/norm_of.h"
#include "theory/checks.h"

namespace normlab::theory::detail {

namespace {

constexpr int kSinkUnitTokens = 512;  // tokens per unit of windows (one reading per unit)
constexpr int kSinkUnits = 2;         // units per seed (window seed on a given model)
constexpr double kSunMin = analysis::kMassiveMin, kSunRatio = analysis::kMassiveRatio;
constexpr int kGainTokens = 16;       // tokens per unit whose norm gain the 1 / ||x|| slope fits

// One model's readings on one unit of windows.
struct SinkReading {
  double log_ratio = 0;   // log10 of the largest |x| over the median |x|, at the stream point where it is largest
  double largest = 0;     // that |x|
  int layer = 0, token = 0, dim = 0;  // where (the stream entering `layer`; n_layers: after the last)
  double sink_rate = 0;   // Gu et al.'s, in percent
  int first_massive_layer = -1;
  bool massive = false;   // the largest entry passes both of Sun et al.'s criteria
  // across the windows of the unit, at the largest entry's (layer, token): log10 of its relative spread
  // sd / mean |x| and the median of the other dimensions' (NaN with one window)
  double log_spread = 0, log_spread_others = 0;
  // the norm that reads the largest entry's stream point (a pre-norm input norm, or the final norm): its
  // name ("" when none reads it) and the slope of log10 of its Jacobian's largest singular value against
  // log10 ||x_t|| over kGainTokens tokens of the unit at evenly spaced ranks of ||x_t|| (the smallest to
  // the largest), least squares
  std::string gain_site;
  double gain_slope = std::nan("");
  double gain_norm_range = 0;  // log10 of the largest over the smallest of those ||x_t||
  GradientSinkContrast grad_sink;  // layers with sinks against the others (checks.h)
};

// The norm that reads stream point `layer` of m (the stream entering that layer; n_layers: after the
// last block): a pre-norm sub-layer's input norm, or the final norm; null (and no name) when none does.
template <class S>
const NormParams<S>* reading_norm(const Model<S>& m, int layer, std::string& site) {
  const ModelConfig& c = m.config();
  if (layer >= c.n_layers) {
    if (!c.has_final_norm()) return nullptr;
    site = "ln_f";
    return &m.final_norm();
  }
  if (!c.has_sublayer(2 * layer)) return nullptr;
  const Slot slot = c.slot(2 * layer);
  if (!norm_sites(c.placement_of(slot.layer), slot.kind).in) return nullptr;
  site = fmt::format("h.{}.{}.ln_in", layer, to_string(slot.kind));
  return &m.sublayer_params_of(2 * layer).ln_in;
}

// A float32 model's norm parameters widened to float64 (held in `store`), for the closed-form Jacobian.
const NormParams<double>& widened(const NormParams<double>& p, int, std::vector<double>&) { return p; }
NormParams<double> widened(const NormParams<float>& p, int C, std::vector<double>& store) {
  NormParams<double> w;
  w.scale = p.scale;
  store.reserve(2 * size_t(C) + 2);  // (no reallocation below: the views stay valid)
  auto take = [&](const float* v, int n) -> double* {
    if (!v) return nullptr;
    double* at = store.data() + store.size();
    store.insert(store.end(), v, v + n);
    return at;
  };
  w.weight = take(p.weight, C);
  w.bias = take(p.bias, C);
  w.alpha = take(p.alpha, 1);
  w.shift = take(p.shift, 1);
  return w;
}

// The slope of log10 gain against log10 ||x_t|| (above) over the n tokens of x (n, C), the Jacobian in
// float64 (from a float32 model's stream and parameters widened).
template <class S>
double gain_slope(const ModelConfig& c, const NormParams<S>& narrow, const S* x, size_t n, double& range) {
  const int C = c.d_model;
  std::vector<double> store;
  const NormParams<double>& p = widened(narrow, C, store);
  std::vector<std::pair<double, size_t>> by_norm;
  for (size_t k = 0; k < n; k++) by_norm.push_back({analysis::row_norm(x + k * C, C), k});
  std::sort(by_norm.begin(), by_norm.end());
  std::vector<double> lx, ly;
  const size_t picks = std::min(n, size_t(kGainTokens));
  for (size_t i = 0; i < picks; i++) {
    const auto& [norm, k] = by_norm[picks > 1 ? i * (n - 1) / (picks - 1) : 0];
    const std::vector<double> z(x + k * C, x + (k + 1) * C);
    const double gain = analysis::norm_jacobian_gain(c.norm, z.data(), p, C, c.eps);
    lx.push_back(std::log10(norm)), ly.push_back(std::log10(gain));
  }
  range = lx.back() - lx.front();
  double mx = 0, my = 0;
  for (size_t i = 0; i < lx.size(); i++) mx += lx[i] / double(lx.size()), my += ly[i] / double(ly.size());
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < lx.size(); i++) sxy += (lx[i] - mx) * (ly[i] - my), sxx += (lx[i] - mx) * (lx[i] - mx);
  return sxx > 0 ? sxy / sxx : std::nan("");
}

// log10 (sd / mean |x|) of one entry across the B windows of the stream x (B, T, C) at (token, dim)
template <class S>
double log_relative_spread(const S* x, int B, int T, int C, int token, int dim) {
  double mean_abs = 0, mean = 0;
  for (int w = 0; w < B; w++) {
    const double v = x[(size_t(w) * T + token) * C + dim];
    mean_abs += std::fabs(v) / B, mean += v / B;
  }
  double var = 0;
  for (int w = 0; w < B; w++) {
    const double v = x[(size_t(w) * T + token) * C + dim];
    var += (v - mean) * (v - mean) / (B - 1);
  }
  return std::log10(std::sqrt(var) / mean_abs);
}

template <class S>
SinkReading read_sinks(Model<S>& m, const std::vector<int32_t>& ids, int B, int T) {
  Batch batch;
  batch.B = B, batch.T = T;
  batch.ids = ids;
  batch.labels.assign(ids.size(), ops::kIgnoreLabel);
  const analysis::SinksReport r = analysis::analyze_sinks(m, {batch}, /*with_gradients=*/true);
  SinkReading s;
  s.log_ratio = -std::numeric_limits<double>::infinity();
  for (const analysis::StreamSinks& p : r.streams) {
    if (p.top.empty() || !(p.median_abs > 0)) continue;
    const double lr = std::log10(std::fabs(p.top[0].value) / p.median_abs);
    if (!(lr > s.log_ratio)) continue;
    s = SinkReading{};
    s.log_ratio = lr;
    s.largest = std::fabs(p.top[0].value);
    s.layer = p.layer;
    s.token = p.top[0].token;
    s.dim = p.top[0].dim;
  }
  s.sink_rate = r.sink_rate;
  s.first_massive_layer = r.first_massive_layer;
  s.grad_sink = gradient_sink_contrast(r);
  s.massive = s.largest > kSunMin && s.log_ratio >= std::log10(kSunRatio);
  // the stream at the largest entry's point, every window (the instrument runs one window at a time)
  m.forward(batch.ids.data(), batch.labels.data(), B, T);
  const ModelConfig& c = m.config();
  const S* x = m.stream(s.layer < c.n_layers ? 2 * s.layer : c.n_slots());
  std::vector<double> others;
  for (int d = 0; d < c.d_model && B > 1; d++)
    if (d != s.dim) others.push_back(log_relative_spread(x, B, T, c.d_model, s.token, d));
  s.log_spread = B > 1 ? log_relative_spread(x, B, T, c.d_model, s.token, s.dim) : std::nan("");
  if (!others.empty()) {
    std::nth_element(others.begin(), others.begin() + long(others.size() / 2), others.end());
    s.log_spread_others = others[others.size() / 2];
  }
  if (const NormParams<S>* p = reading_norm(m, s.layer, s.gain_site))
    s.gain_slope = gain_slope(c, *p, x, size_t(B) * T, s.gain_norm_range);
  return s;
}

}  // namespace

GradientSinkContrast gradient_sink_contrast(const analysis::SinksReport& r) {
  GradientSinkContrast c;
  if (r.attn_input_gradients.empty()) {
    c.none = !r.no_gradients.empty() ? r.no_gradients
                                      : "no self-attention reads its input through a norm (a post-norm stack)";
    return c;
  }
  double ws = 0, wo = 0, rs = 0, ro = 0;
  int read = 0;
  for (const analysis::StreamGradient& g : r.attn_input_gradients) {
    if (!(g.ratio > 0) || !std::isfinite(g.ratio)) continue;  // a zero median: no ratio
    const double w = r.layer_sink_rate[size_t(g.layer)] / 100.0, lr = std::log10(g.ratio);
    ws += w, wo += 1 - w, rs += w * lr, ro += (1 - w) * lr, read++;
  }
  if (ws > 0) c.sinks = rs / ws;
  if (wo > 0) c.others = ro / wo;
  if (ws > 0 && wo > 0) c.gap = c.sinks - c.others;
  else if (read == 0) c.none = "no layer's gradient has a nonzero median, so no ratio";
  else if (ws > 0) c.none = "every head of every layer has a sink in every window: no layer without one to contrast";
  else c.none = "no head has a sink (Gu et al.'s metric) in any window: no sink to induce anything";
  return c;
}

void sink_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.fresh && !b.given) return;  // nothing trained: no phenomenon to read
  const TheoryOptions& o = b.opt;
  if (!b.given && o.deep_layers < 5) return;  // (the tests' small tables train no deep models)
  struct Subject {
    std::string who;
    ClaimModels::Measured model;
    const ModelConfig& config() { return on(model, [](auto& m) -> const ModelConfig& { return m.config(); }); }
  };
  std::vector<Subject> subjects;
  if (b.given) {
    subjects.push_back({"the checkpoint", b.models->given_measured()});
  } else {
    for (Placement p : {Placement::Pre, Placement::Post}) {  // the fake-depth claims' models (cached, shared)
      const ModelConfig c = gpt_config(o, p, 1e-5, o.deep_layers);
      subjects.push_back({fmt::format("the trained {}-layer {} model (from GPT-2 init)", o.deep_layers, to_string(p)),
                          b.models->make(c, true)});
    }
  }
  const ModelConfig& c0 = subjects.front().config();
  const int T = std::min(64, c0.seq_len), B = std::max(1, kSinkUnitTokens / T);
  const std::vector<std::vector<int32_t>> units = window_units(b.corpus, kSinkUnits, B, T, uint64_t(o.seed), 67, o.bos);
  const std::string inputs = fmt::format("{} units of {} windows of {} tokens of the corpus per {}", kSinkUnits, B, T,
                                         b.given ? "window seed" : "seed");
  std::vector<std::vector<SinkReading>> readings(subjects.size());
  const std::vector<std::string> names = {"Sun et al. 2024 massive activations", "Sun et al. 2024 massive activations are fixed",
                                          "Gu et al. 2024 attention sinks", "2603.17771 the norm gain is inverse to the input norm",
                                          "2603.17771 attention sinks induce gradient sinks"};
  for (size_t k = 0; k < subjects.size(); k++) {
    const ModelConfig& c = subjects[k].config();
    attempt(b, out, names, [&] {
      if (!b.given) b.models->used(c);
      if (c.encdec()) throw NotApplicable("the sinks instrument reads one stack; this model is an encoder-decoder");
      if (units.empty()) throw NotApplicable("the corpus is shorter than one window");
      for (const auto& ids : units)
        readings[k].push_back(on(subjects[k].model, [&](auto& m) { return read_sinks(m, ids, B, T); }));
      const std::vector<SinkReading>& r = readings[k];
      std::vector<double> excess, rates, largest;
      for (const SinkReading& s : r)
        excess.push_back(s.log_ratio - std::log10(kSunRatio)), rates.push_back(s.sink_rate), largest.push_back(s.largest);
      const SinkReading& f = r.front();
      const std::string setting =
          fmt::format("{} ({}, {} layers, {}{}), {}", subjects[k].who, to_string(c.placement_of(0)), c.n_layers,
                      to_string(c.norm),
                      c.hyper_connected() ? fmt::format(", {} {} streams: the stream is their sum", c.hyper_streams,
                                                        to_string(c.hyper))
                                          : std::string(),
                      inputs);
      out.push_back(effect({names[0],
                            "a trained language model holds a few massive activations: entries of the residual stream "
                            "about 1,000 times the median magnitude or more (and above 100), at the first token and a "
                            "few fixed dimensions, from one early layer on",
                            setting,
                            "log10 of (the largest |x| of the stream over its median |x|) at the stream point where "
                            "that ratio is largest, minus log10 1,000 (Sun et al.'s criterion), per unit of windows"},
                           excess, EffectRule::towards(1),
                           fmt::format("the largest |x| {:.4g} at layer {} (the stream entering it), token {}, dimension "
                                       "{}: {:.3g} times the median; above 100 as well: {}; the first layer with a "
                                       "massive dimension (both criteria): {}",
                                       f.largest, f.layer, f.token, f.dim, std::pow(10.0, f.log_ratio),
                                       std::all_of(largest.begin(), largest.end(), [](double v) { return v > kSunMin; })
                                           ? "yes, in every unit" : "not in every unit",
                                       f.first_massive_layer < 0 ? std::string("none") : std::to_string(f.first_massive_layer)),
                           {{"log10_ratio_minus_3", excess}, {"largest_abs", largest}, {"layer", f.layer},
                            {"token", f.token}, {"dim", f.dim}, {"first_massive_layer", f.first_massive_layer}}));
      out.back().reported = "Sun et al. 2024: in LLaMA2-7B they sit in two fixed feature dimensions (1415, 2533), at the "
                            "starting token and the first '.' or newline token; 'e.g., 100,000 times larger' than "
                            "other activations (their abstract)";
      // fixed across inputs: only where there is a massive activation in every unit
      if (!std::all_of(r.begin(), r.end(), [](const SinkReading& s) { return s.massive; })) {
        Measurement skip;
        skip.head.source = names[1];
        skip.skipped = "the model has no massive activation by Sun et al.'s criterion in every unit, so none to "
                       "hold fixed";
        out.push_back(std::move(skip));
      } else {
        std::vector<double> gap;
        for (const SinkReading& s : r) gap.push_back(s.log_spread - s.log_spread_others);
        out.push_back(effect({names[1],
                              "massive activations are fixed across inputs: their values largely stay constant "
                              "regardless of the input (they act as biases)",
                              setting,
                              "log10 of the massive entry's relative spread (sd / mean |x| across the unit's windows, at "
                              "its layer, token and dimension) minus the median of the same token's other dimensions', "
                              "per unit of windows"},
                             gap, EffectRule::towards(-1),
                             fmt::format("at layer {}, token {}, dimension {}: relative spread {:.3g} across {} windows, "
                                         "the other dimensions' median {:.3g}",
                                         f.layer, f.token, f.dim, std::pow(10.0, f.log_spread), B,
                                         std::pow(10.0, f.log_spread_others)),
                             {{"log10_spread_gap", gap}}));
        out.back().reported = "Sun et al. 2024: 'their values largely stay constant regardless of the input' (abstract)";
      }
      out.push_back(effect({names[2],
                            "language models trained with softmax attention develop attention sinks: heads that put "
                            "much of their attention on the first token",
                            setting,
                            "Gu et al.'s sink rate in percent (share of layers x heads x windows whose first token's mean "
                            "attention from the queries that see it exceeds 0.3), per unit of windows"},
                           rates, EffectRule::towards(1),
                           fmt::format("sink rate {:.1f}% in the first unit (threshold 0.3, Gu et al.'s)", f.sink_rate),
                           {{"sink_rate", rates}}));
      out.back().reported = "Gu et al. 2024: sinks on the first token emerge in language models during pre-training, once "
                            "the model has seen enough data; the sink rate with threshold 0.3 is their measure of it";
      // the gain of the norm that reads the largest activation's stream point, against ||x_t||
      if (f.gain_site.empty()) {
        Measurement skip;
        skip.head.source = names[3];
        skip.skipped = fmt::format("no norm reads the stream where its largest activation is (layer {}): the model is "
                                   "not pre-norm there (the claim is about the norm a pre-norm sub-layer reads its input "
                                   "through)",
                                   f.layer);
        out.push_back(std::move(skip));
      } else {
        std::vector<double> slopes, ranges;
        for (const SinkReading& s : r) slopes.push_back(s.gain_slope), ranges.push_back(s.gain_norm_range);
        out.push_back(effect({names[3],
                              "the RMSNorm Jacobian attenuates gradients roughly in inverse proportion to the input's "
                              "norm, so a massive activation shrinks the gradient through the norm that reads it",
                              setting,
                              fmt::format("the least-squares slope of log10 (the largest singular value of the Jacobian "
                                          "of the norm that reads the stream) against log10 ||x_t||, over {} tokens of "
                                          "the unit at evenly spaced ranks of ||x_t|| (the smallest to the largest), at "
                                          "the stream point of the largest activation, per unit of windows (-1: gain "
                                          "proportional to 1 / ||x||)",
                                          kGainTokens)},
                             slopes, EffectRule::towards(-1).stated(1, "'roughly in inverse proportion to input norm' (2603.17771, abstract)"),
                             fmt::format("{} ({} norm) at layer {}: slope {:.3f} in the first unit over a span of "
                                         "{:.2f} decades of ||x_t||",
                                         f.gain_site, to_string(c.norm), f.layer, f.gain_slope, f.gain_norm_range),
                             {{"slope", slopes}, {"log10_norm_range", ranges}, {"site", f.gain_site}}));
        out.back().reported = "2603.17771: 'the RMSNorm Jacobian attenuates gradients roughly in inverse proportion to "
                              "input norm', so massive activations act as regulators of the gradient sink at their token";
      }
      // gradient sinks: layers with sinks against layers without, in every unit
      if (const auto lacking = std::find_if(r.begin(), r.end(), [](const SinkReading& s) { return !s.grad_sink.none.empty(); });
          lacking != r.end()) {
        Measurement skip;
        skip.head.source = names[4];
        skip.skipped = "no contrast of sink layers with others: " + lacking->grad_sink.none;
        out.push_back(std::move(skip));
      } else {
        std::vector<double> gaps, sinky, plain;
        for (const SinkReading& s : r)
          gaps.push_back(s.grad_sink.gap), sinky.push_back(s.grad_sink.sinks), plain.push_back(s.grad_sink.others);
        out.push_back(effect({names[4],
                              "under causal masking, attention sinks induce a pronounced concentration of the gradient "
                              "on the sink token (a gradient sink), before the norm's Jacobian scales it",
                              setting,
                              "over the layers whose self-attention reads its input h through a norm: log10 of "
                              "||d(loss)/d(h)|| at the first position over its median over positions (the next-token "
                              "loss), averaged with the layer's sink rate as weight minus averaged with one minus it "
                              "(layers with sinks against layers without; the causal mask alone favours the first "
                              "position in both), per unit of windows"},
                             gaps, EffectRule::towards(1),
                             fmt::format("first position over median, as a factor: {:.3g} in the layers with sinks, "
                                         "{:.3g} in the others (first unit; sink rate {:.1f}%)",
                                         std::pow(10.0, f.grad_sink.sinks), std::pow(10.0, f.grad_sink.others),
                                         f.sink_rate),
                             {{"log10_gap", gaps}, {"log10_first_over_median_sinks", sinky},
                              {"log10_first_over_median_others", plain}}));
        out.back().reported = "2603.17771: 'under causal masking, attention sinks can induce pronounced gradient "
                              "concentration, which we term gradient sinks' (abstract)";
      }
    });
  }
  if (b.given) return;  // one model: no contrast
  const std::vector<std::string> contrast = {"2603.05498 pre-norm makes massive activations"};
  attempt(b, out, contrast, [&] {
    for (auto& s : subjects) b.models->used(s.config());
    if (readings[0].empty() || readings[1].empty()) return;  // measured in the blocks above
    std::vector<double> pre, post;
    for (size_t u = 0; u < readings[0].size(); u++) pre.push_back(readings[0][u].log_ratio), post.push_back(readings[1][u].log_ratio);
    out.push_back(comparison({contrast[0],
                              "pre-norm is what makes massive activations (and sinks) appear: a Pre-LN's largest "
                              "activation ratio exceeds a Post-LN's",
                              fmt::format("the trained {}-layer Pre-LN and Post-LN models (same size, recipe and "
                                          "windows), {}", o.deep_layers, inputs),
                              "Pre-LN's log10 (largest |x| / median |x|) minus Post-LN's, paired by unit of windows"},
                             post, pre, EffectRule::towards(1).between("Post-LN", "Pre-LN"),
                             fmt::format("largest ratio Pre-LN {:.3g}, Post-LN {:.3g}; sink rate Pre-LN {:.1f}%, Post-LN "
                                         "{:.1f}% (first unit)",
                                         std::pow(10.0, pre.front()), std::pow(10.0, post.front()),
                                         readings[0].front().sink_rate, readings[1].front().sink_rate),
                             {{"pre_log10_ratio", pre}, {"post_log10_ratio", post}}));
  });
}

}  // namespace normlab::theory::detail
