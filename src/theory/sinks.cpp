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
// Fresh models have no training to have produced them: no rows.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <limits>

#include "analysis/sinks.h"
#include "theory/checks.h"

namespace normlab::theory::detail {

namespace {

constexpr int kSinkUnitTokens = 512;  // tokens per unit of windows (one reading per unit)
constexpr int kSinkUnits = 2;         // units per seed (window seed on a given model)
constexpr double kSunMin = analysis::kMassiveMin, kSunRatio = analysis::kMassiveRatio;

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
};

// log10 (sd / mean |x|) of one entry across the B windows of the stream x (B, T, C) at (token, dim)
double log_relative_spread(const double* x, int B, int T, int C, int token, int dim) {
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

SinkReading read_sinks(Model<double>& m, const std::vector<int32_t>& ids, int B, int T) {
  Batch batch;
  batch.B = B, batch.T = T;
  batch.ids = ids;
  batch.labels.assign(ids.size(), ops::kIgnoreLabel);
  const analysis::SinksReport r = analysis::analyze_sinks(m, {batch}, /*with_gradients=*/false);
  SinkReading s;
  s.log_ratio = -std::numeric_limits<double>::infinity();
  for (const analysis::StreamSinks& p : r.streams) {
    if (p.top.empty() || !(p.median_abs > 0)) continue;
    const double lr = std::log10(std::fabs(p.top[0].value) / p.median_abs);
    if (lr > s.log_ratio) s = {lr, std::fabs(p.top[0].value), p.layer, p.top[0].token, p.top[0].dim, 0, -1};
  }
  s.sink_rate = r.sink_rate;
  s.first_massive_layer = r.first_massive_layer;
  s.massive = s.largest > kSunMin && s.log_ratio >= std::log10(kSunRatio);
  // the stream the instrument's forward left: the largest entry's point, every window
  const ModelConfig& c = m.config();
  const double* x = m.stream(s.layer < c.n_layers ? 2 * s.layer : c.n_slots());
  std::vector<double> others;
  for (int d = 0; d < c.d_model && B > 1; d++)
    if (d != s.dim) others.push_back(log_relative_spread(x, B, T, c.d_model, s.token, d));
  s.log_spread = B > 1 ? log_relative_spread(x, B, T, c.d_model, s.token, s.dim) : std::nan("");
  if (!others.empty()) {
    std::nth_element(others.begin(), others.begin() + long(others.size() / 2), others.end());
    s.log_spread_others = others[others.size() / 2];
  }
  return s;
}

}  // namespace

void sink_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.fresh && !b.given) return;  // nothing trained: no phenomenon to read
  const TheoryOptions& o = b.opt;
  if (!b.given && o.deep_layers < 5) return;  // (the tests' small tables train no deep models)
  struct Subject {
    std::string who;
    std::unique_ptr<Model<double>> model;
  };
  std::vector<Subject> subjects;
  if (b.given) {
    subjects.push_back({"the checkpoint", b.models->given()});
  } else {
    for (Placement p : {Placement::Pre, Placement::Post}) {  // the fake-depth claims' models (cached, shared)
      const ModelConfig c = gpt_config(o, p, 1e-5, o.deep_layers);
      subjects.push_back({fmt::format("the trained {}-layer {} model (from GPT-2 init)", o.deep_layers, to_string(p)),
                          b.models->make(c, true)});
    }
  }
  const ModelConfig& c0 = subjects.front().model->config();
  const int T = std::min(64, c0.seq_len), B = std::max(1, kSinkUnitTokens / T);
  const std::vector<std::vector<int32_t>> units = window_units(b.corpus, kSinkUnits, B, T, uint64_t(o.seed), 67);
  const std::string inputs = fmt::format("{} units of {} windows of {} tokens of the corpus per {}", kSinkUnits, B, T,
                                         b.given ? "window seed" : "seed");
  std::vector<std::vector<SinkReading>> readings(subjects.size());
  const std::vector<std::string> names = {"Sun et al. 2024 massive activations", "Sun et al. 2024 massive activations are fixed",
                                          "Gu et al. 2024 attention sinks"};
  for (size_t k = 0; k < subjects.size(); k++) {
    Model<double>& m = *subjects[k].model;
    const ModelConfig& c = m.config();
    attempt(b, out, names, [&] {
      if (!b.given) b.models->used(c);
      if (c.encdec()) throw NotApplicable("the sinks instrument reads one stack; this model is an encoder-decoder");
      if (units.empty()) throw NotApplicable("the corpus is shorter than one window");
      for (const auto& ids : units) readings[k].push_back(read_sinks(m, ids, B, T));
      const std::vector<SinkReading>& r = readings[k];
      std::vector<double> excess, rates, largest;
      for (const SinkReading& s : r)
        excess.push_back(s.log_ratio - std::log10(kSunRatio)), rates.push_back(s.sink_rate), largest.push_back(s.largest);
      const SinkReading& f = r.front();
      const std::string setting = fmt::format("{} ({}, {} layers, {}), {}", subjects[k].who,
                                              to_string(c.placement_of(0)), c.n_layers, to_string(c.norm), inputs);
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
    });
  }
  if (b.given) return;  // one model: no contrast
  const std::vector<std::string> contrast = {"2603.05498 pre-norm makes massive activations"};
  attempt(b, out, contrast, [&] {
    for (const auto& s : subjects) b.models->used(s.model->config());
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
