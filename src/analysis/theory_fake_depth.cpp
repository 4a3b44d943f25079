// theory_fake_depth.cpp: source 004's "fake depth" tested by what the layers do rather than by norms:
// on a trained model (theory's trained column) or a given one (`theory --checkpoint`, any norm kind),
// the loss increase when one layer's branches are removed, and the angular distance between
// consecutive layers' streams (Gromov et al. 2024's measure), each against the layer index. 004 says
// Pre-LN's deep layers change the stream less and matter less (the stack acts wider than deep), and
// Post-LN's layers all take part. Fresh models have no function to test: no rows.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/stats.h"
#include "analysis/theory_checks.h"
#include "model/params.h"
#include "ops/common.h"
#include "util/rng.h"

namespace normlab::analysis {

namespace {

template <class S>
double loss_on(Model<S>& m, const std::vector<int32_t>& ids) {
  std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);  // the next token
  for (size_t t = 0; t + 1 < ids.size(); t++) labels[t] = ids[t + 1];
  return m.forward(ids.data(), labels.data(), 1, int(ids.size()));
}

double slope_of(const std::vector<double>& x, const std::vector<double>& y) {
  double a = 0;
  fit_rss(x, y, [](double v) { return v; }, &a);
  return a;
}

}  // namespace

double FakeDepth::angular_exponent() const {
  std::vector<double> log_l, log_angle;
  for (size_t l = 0; l < angular.size(); l++)
    log_l.push_back(std::log(double(l + 1))), log_angle.push_back(std::log(std::max(angular[l], 1e-300)));
  return slope_of(log_l, log_angle);
}

int FakeDepth::removal_layers() const {
  return int(std::count_if(ablation.begin(), ablation.end(), [](double v) { return v > 0; }));
}

double FakeDepth::removal_exponent() const {
  std::vector<double> lx, ly;
  for (size_t l = 0; l < ablation.size(); l++)
    if (ablation[l] > 0) lx.push_back(std::log(double(l + 1))), ly.push_back(std::log(ablation[l]));
  return lx.size() >= 3 ? slope_of(lx, ly) : std::nan("");
}

Region fake_depth_region(Placement p) { return p == Placement::Pre ? Region::below(0) : Region::between(-0.25, 0.25); }

template <class S>
FakeDepth measure_fake_depth(Model<S>& m, const std::vector<int32_t>& ids, bool removal) {
  const ModelConfig& c = m.config();
  const int L = c.n_layers, T = int(ids.size()), C = c.d_model;
  FakeDepth f;
  f.with_loss = removal && c.causal() && c.has_logits();
  std::vector<int32_t> none(ids.size(), ops::kIgnoreLabel);
  f.loss = f.with_loss ? loss_on(m, ids) : m.forward(ids.data(), none.data(), 1, T);
  // angular distance between the streams entering layer l and l + 1, mean over tokens
  for (int l = 0; l < L; l++) {
    const S* a = m.stream(2 * l);
    const S* b = m.stream(2 * l + 2);
    double mean = 0;
    for (int t = 0; t < T; t++) {
      double ab = 0, aa = 0, bb = 0;
      for (int k = 0; k < C; k++) {
        const double x = double(a[size_t(t) * C + k]), y = double(b[size_t(t) * C + k]);
        ab += x * y, aa += x * x, bb += y * y;
      }
      mean += std::acos(std::clamp(ab / std::sqrt(std::max(aa * bb, 1e-300)), -1.0, 1.0)) / std::numbers::pi / T;
    }
    f.angular.push_back(mean);
  }
  if (!f.with_loss) return f;
  for (int l = 0; l < L; l++) {  // layer l's branches off: each sub-layer's output projection (and bias) zeroed
    std::vector<std::pair<S*, std::vector<S>>> saved;
    for (int s : {2 * l, 2 * l + 1}) {
      if (!c.slot(s).present) continue;
      for (const char* name : {".proj.weight", ".proj.bias"}) {
        const ParamSpec* p = m.table().find(slot_prefix(c, s) + name);
        if (!p) continue;  // bias = none
        S* w = m.params().data() + p->offset;
        saved.emplace_back(w, std::vector<S>(w, w + p->numel));
        std::fill(w, w + p->numel, S(0));
      }
    }
    f.ablation.push_back(loss_on(m, ids) - f.loss);
    for (auto& [w, v] : saved) std::copy(v.begin(), v.end(), w);
  }
  return f;
}

template FakeDepth measure_fake_depth(Model<float>&, const std::vector<int32_t>&, bool);
template FakeDepth measure_fake_depth(Model<double>&, const std::vector<int32_t>&, bool);

}  // namespace normlab::analysis

namespace normlab::analysis::theory_detail {

void fake_depth_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.fresh && !b.given) return;  // a fresh model has no function to test
  const TheoryOptions& o = b.opt;
  // the window: up to 64 tokens of the corpus, picked by the seed (longer than the other claims' 16:
  // a loss over 16 tokens is too noisy to rank layers)
  std::vector<std::pair<std::string, std::unique_ptr<Model<double>>>> subjects;
  if (b.given) {
    subjects.emplace_back("the checkpoint", b.models->given());
  } else {
    for (Placement p : {Placement::Pre, Placement::Post}) {
      ModelConfig c = gpt_config(o, p, 1e-5, o.deep_layers);
      c.init = InitScheme::Xavier;
      subjects.emplace_back(fmt::format("the trained {}-layer {} model", o.deep_layers, to_string(p)), b.models->make(c, true));
    }
  }
  for (auto& [who, m] : subjects) {
    const ModelConfig& c = m->config();
    const Placement p = c.placement_of(0);
    bool uniform = true;
    for (int l = 0; l < c.total_layers(); l++) uniform &= c.placement_of(l) == p;
    const std::vector<std::string> names = {"004 fake depth: angular distance", "004 fake depth: layer removal"};
    attempt(b, out, names, [&] {
      if (!b.given) b.models->used(c);  // made before this block: a model that did not learn voids it
      if (c.encdec()) throw NotApplicable("the claim reads one stack; this model is an encoder-decoder");
      if (!uniform || (p != Placement::Pre && p != Placement::Post))
        throw NotApplicable(fmt::format("the claim contrasts Pre-LN with Post-LN; this model's placement is {}",
                                        uniform ? to_string(p) : std::string("a per-layer mix")));
      if (c.n_layers < 3) throw NotApplicable(fmt::format("a fit over depth needs at least 3 layers; this model has {}", c.n_layers));
      const int T = std::min(64, c.seq_len);
      if (b.corpus.size() < size_t(T) + 1) throw NotApplicable("the corpus is shorter than one window");
      Rng rng(uint64_t(o.seed), 61);
      const size_t start = size_t(rng.uniform() * double(b.corpus.size() - size_t(T)));
      const std::vector<int32_t> ids(b.corpus.begin() + long(start), b.corpus.begin() + long(start) + T);
      const FakeDepth f = measure_fake_depth(*m, ids);
      const bool pre = p == Placement::Pre;
      const std::string setting = fmt::format("{} ({}, {} layers, {}), one window of {} tokens of the corpus picked by the seed",
                                              who, to_string(p), c.n_layers, to_string(c.norm), T);
      const double angle_exp = f.angular_exponent();
      out.push_back({"004 fake depth: angular distance",
                     pre ? "in Pre-LN a deep layer changes the stream less and less (x_t and x_(t+1) nearly equal for large t)"
                         : "in Post-LN every layer takes part about equally (its contribution Theta(1) at every depth)",
                     setting,
                     "exponent e of the angular distance arccos(cos(x_l, x_(l+1)))/pi ~ (l+1)^e over the layers (mean over tokens)",
                     fake_depth_region(p), angle_exp,
                     fmt::format("angular distance by layer [{:.3f}]; exponent {:.2f}", fmt::join(f.angular, ", "), angle_exp),
                     {{"angular_distance", f.angular}, {"exponent", angle_exp}}});
      out.back().reported = "source 004 (an argument); Gromov et al. 2024 measured it on pretrained Llama-family models: "
                            "deep layers' consecutive angular distances are small, except the last";
      if (!f.with_loss) {
        Measurement s;
        s.source = "004 fake depth: layer removal";
        s.skipped = "the layer-removal test reads a next-token loss; this model is not a causal language model";
        out.push_back(std::move(s));
        return;
      }
      // the loss increase of removing layer l: positive and shrinking with depth in Pre-LN
      const double removal_exp = f.removal_exponent();
      const int removal_layers = f.removal_layers();
      Measurement r{"004 fake depth: layer removal",
                    pre ? "in Pre-LN the deep layers matter less: removing one costs less the deeper it is"
                        : "in Post-LN every layer matters about equally",
                    setting,
                    "exponent e of the loss increase when layer l's branches are removed ~ (l+1)^e (layers where it is > 0)",
                    fake_depth_region(p), removal_exp,
                    fmt::format("loss {:.3f} nats; removing layer l adds [{:.3g}]; exponent {:.2f} over {} layers; {} of {} "
                                "layers cost less than 0.1 nats when removed (the cheapest: layer {})",
                                f.loss, fmt::join(f.ablation, ", "), removal_exp, removal_layers,
                                std::count_if(f.ablation.begin(), f.ablation.end(), [](double v) { return v < 0.1; }),
                                f.ablation.size(),
                                std::min_element(f.ablation.begin(), f.ablation.end()) - f.ablation.begin()),
                    {{"loss", f.loss}, {"loss_increase", f.ablation}, {"exponent", removal_exp}}};
      r.vacuous = removal_layers < 3;  // fewer than 3 layers whose removal costs anything: no law to fit
      r.reported = "source 004 (an argument); Gromov et al. 2024: pretrained Llama-family models lose little when deep "
                   "layers are pruned";
      out.push_back(std::move(r));
    });
  }
}

}  // namespace normlab::analysis::theory_detail
