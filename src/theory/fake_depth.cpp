// fake_depth.cpp: source 004's "fake depth" tested by what the layers do rather than by norms, on a
// trained model (theory's trained column) or a given one (`theory --checkpoint`, any norm kind): the
// loss increase when one layer's branches are removed, and the angular distance between consecutive
// layers' streams (Gromov et al. 2024's measure), per layer (analysis/fake_depth.h). 004 says Pre-LN's
// deep layers change the stream less and matter less (the stack acts wider than deep) and contrasts
// it with Post-LN, whose layers all take part. Each is judged on the interior layers 1 .. L-2 (the
// first and last are reported apart) by the rank correlation of the reading with depth, over units of
// windows (at least 4,096 tokens in all); on trained models also as Pre-LN's trend against a Post-LN
// of the same size trained by the same recipe (a paired comparison on the same windows). Fresh models
// have no function to test: no rows.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/fake_depth.h"
#include "analysis/stats.h"
#include "theory/checks.h"

namespace normlab::theory::detail {

namespace {

constexpr int kFakeDepthTokens = 4096;  // tokens over all seeds (windows) together
constexpr int kUnitTokens = 256;        // tokens per unit of windows (one trend per unit)

// One model's readings on the units of one seed.
struct Profile {
  std::vector<double> angle_trend, removal_trend;  // per unit, over the interior layers
  std::vector<double> first_cost, last_cost, interior_median_cost;  // per unit (removal)
  analysis::FakeDepth first;                       // the first unit's readings
};

template <class S>
Profile profile_of(Model<S>& m, const std::vector<std::vector<int32_t>>& units, int B) {
  Profile p;
  for (const auto& ids : units) {
    analysis::FakeDepth f = analysis::measure_fake_depth(m, ids, true, B);
    p.angle_trend.push_back(analysis::interior_trend(f.angular));
    if (f.with_loss) {
      p.removal_trend.push_back(analysis::interior_trend(f.ablation));
      std::vector<double> inner(f.ablation.begin() + 1, f.ablation.end() - 1);
      std::nth_element(inner.begin(), inner.begin() + long(inner.size() / 2), inner.end());
      p.first_cost.push_back(f.ablation.front()), p.last_cost.push_back(f.ablation.back());
      p.interior_median_cost.push_back(inner[inner.size() / 2]);
    }
    if (p.first.angular.empty()) p.first = std::move(f);
  }
  return p;
}

double mean_of(const std::vector<double>& v) { return analysis::summarize(v).mean; }

}  // namespace

void fake_depth_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.fresh && !b.given) return;  // a fresh model has no function to test
  const TheoryOptions& o = b.opt;
  if (!b.given && o.deep_layers < 5) return;  // no interior trend to read (the tests' small tables)
  // a given model may be large: it is read in float32, as it is (its own parameters, no gradients: errors
  // ~1e-5 nats against costs of 1e-3 and more); a trained model in float64
  struct Subject {
    std::string who;
    std::unique_ptr<Model<double>> model;
    std::unique_ptr<Model<float>> own;  // a float32 copy of a given model (when the claims read float64 copies)
    Model<float>* narrow = nullptr;     // that copy, or the given model itself (read in float32)
    const ModelConfig& config() const { return model ? model->config() : narrow->config(); }
  };
  std::vector<Subject> subjects;
  if (b.given) {
    Subject s;
    s.who = "the checkpoint";
    if (o.float32) {
      s.narrow = std::get<Model<float>*>(b.models->given_measured());
    } else {
      s.own = model_with_params<float>(o.model->config, o.model->params(), /*forward_only=*/true);
      s.narrow = s.own.get();
    }
    subjects.push_back(std::move(s));
  } else {
    for (Placement p : {Placement::Pre, Placement::Post}) {
      // trained from GPT-2's init, as the trained depth claims (depth.cpp: from Xavier's a 24-layer Post-LN
      // does not learn)
      const ModelConfig c = gpt_config(o, p, 1e-5, o.deep_layers);
      Subject s;
      s.who = fmt::format("the trained {}-layer {} model (from GPT-2 init)", o.deep_layers, to_string(p));
      s.model = b.models->make(c, true);
      subjects.push_back(std::move(s));
    }
  }
  // the units of windows, the same for every subject (paired), picked by the seed
  const ModelConfig& c0 = subjects.front().config();
  const int T = std::min(64, c0.seq_len), B = std::max(1, kUnitTokens / T);
  const int repetitions = b.given ? o.seeds : o.trained_seeds;
  const int units = std::max(2, (kFakeDepthTokens + repetitions * B * T - 1) / (repetitions * B * T));
  const std::vector<std::vector<int32_t>> windows = window_units(b.corpus, units, B, T, uint64_t(o.seed), 61, o.bos);
  const std::string inputs = fmt::format("{} units of {} windows of {} tokens of the corpus picked by the {} ({} tokens "
                                         "in all over {} {}s)",
                                         units, B, T, b.given ? "window seed" : "seed", units * B * T * repetitions,
                                         repetitions, b.given ? "window seed" : "seed");
  std::vector<Profile> profiles(subjects.size());
  const std::vector<std::string> names = {"004 fake depth: angular distance", "004 fake depth: layer removal"};
  for (size_t k = 0; k < subjects.size(); k++) {
    const ModelConfig& c = subjects[k].config();
    const Placement p = c.placement_of(0);
    bool uniform = true;
    for (int l = 0; l < c.total_layers(); l++) uniform &= c.placement_of(l) == p;
    attempt(b, out, names, [&] {
      if (!b.given) b.models->used(c);  // made before this block: a model that did not learn voids it
      if (c.encdec()) throw NotApplicable("the claim reads one stack; this model is an encoder-decoder");
      if (c.hyper_connected()) throw NotApplicable(hyper_not_applicable(c));
      if (!uniform || (p != Placement::Pre && p != Placement::Post))
        throw NotApplicable(fmt::format("the claim contrasts Pre-LN with Post-LN; this model's placement is {}",
                                        uniform ? to_string(p) : std::string("a per-layer mix")));
      if (c.n_layers < 5)
        throw NotApplicable(fmt::format("a trend over the interior layers needs at least 3 of them (5 layers); this "
                                        "model has {}", c.n_layers));
      if (windows.empty()) throw NotApplicable("the corpus is shorter than one window");
      profiles[k] = subjects[k].narrow ? profile_of(*subjects[k].narrow, windows, B)
                                       : profile_of(*subjects[k].model, windows, B);
      const Profile& pr = profiles[k];
      const bool pre = p == Placement::Pre;
      const std::string setting = fmt::format("{} ({}, {} layers, {}), {}; the trend over the interior layers 1 .. {} "
                                              "(the first and last reported apart)",
                                              subjects[k].who, to_string(p), c.n_layers, to_string(c.norm), inputs,
                                              c.n_layers - 2);
      out.push_back(effect({names[0],
                            pre ? "in Pre-LN a deep layer changes the stream less and less (x_t and x_(t+1) nearly equal "
                                  "for large t)"
                                : "in Post-LN every layer takes part about equally (its contribution Theta(1) at every "
                                  "depth): no decline with depth",
                            setting,
                            "Spearman rank correlation of the angular distance arccos(cos(x_l, x_(l+1)))/pi (mean over "
                            "tokens) with the layer l, per unit of windows"},
                           pr.angle_trend, EffectRule::towards(pre ? -1 : 0),
                           fmt::format("angular distance by layer [{:.3f}]", fmt::join(pr.first.angular, ", ")),
                           {{"angular_distance", pr.first.angular}, {"trend_by_unit", pr.angle_trend}}));
      out.back().reported = "source 004 (an argument); Gromov et al. 2024 measured it on pretrained Llama-family models: "
                            "deep layers' consecutive angular distances are small, except the last";
      if (pr.removal_trend.empty()) {
        Measurement s;
        s.head.source = names[1];
        s.skipped = "the layer-removal test reads a next-token loss; this model is not a causal language model";
        out.push_back(std::move(s));
        return;
      }
      out.push_back(effect({names[1],
                            pre ? "in Pre-LN the deep layers matter less: removing one costs less the deeper it is"
                                : "in Post-LN every layer matters about equally: no decline with depth",
                            setting,
                            "Spearman rank correlation of the loss increase when layer l's branches are removed with the "
                            "layer l, per unit of windows (negative costs kept)"},
                           pr.removal_trend, EffectRule::towards(pre ? -1 : 0),
                           fmt::format("loss {:.3f} nats; removing layer l adds [{:.3g}]; apart from the trend: the first "
                                       "layer {:.3g}, the last {:.3g}, the interior's median {:.3g} (means over units)",
                                       pr.first.loss, fmt::join(pr.first.ablation, ", "), mean_of(pr.first_cost),
                                       mean_of(pr.last_cost), mean_of(pr.interior_median_cost)),
                           {{"loss", pr.first.loss}, {"loss_increase", pr.first.ablation},
                            {"trend_by_unit", pr.removal_trend}, {"first_layer_cost", pr.first_cost},
                            {"last_layer_cost", pr.last_cost}, {"interior_median_cost", pr.interior_median_cost}}));
      out.back().reported = "source 004 (an argument); Gromov et al. 2024: pretrained Llama-family models lose little when "
                            "deep layers are pruned";
    });
  }
  if (b.given) return;  // one model: no contrast
  // 004's contrast: Pre-LN's trend against Post-LN's, trained by the same recipe, on the same units
  const std::vector<std::string> contrast = {"004 fake depth: Pre-LN against Post-LN"};
  attempt(b, out, contrast, [&] {
    for (const auto& s : subjects) b.models->used(s.model->config());
    const Profile &pre = profiles[0], &post = profiles[1];
    if (pre.removal_trend.empty() || post.removal_trend.empty()) return;  // measured in the blocks above
    out.push_back(comparison({contrast[0],
                              "Pre-LN's deep layers matter less than Post-LN's: the cost of removing a layer falls with "
                              "depth in Pre-LN more than in Post-LN",
                              fmt::format("the trained {}-layer Pre-LN and Post-LN models (same size, recipe and "
                                          "windows), {}", o.deep_layers, inputs),
                              "Pre-LN's Spearman correlation of layer-removal cost with depth (interior layers) minus "
                              "Post-LN's, paired by unit of windows (< 0: Pre-LN's falls more)"},
                             post.removal_trend, pre.removal_trend,
                             EffectRule::towards(-1).between("Post-LN", "Pre-LN"),
                             fmt::format("mean trend Pre-LN {:.3f}, Post-LN {:.3f}; angular distance trend Pre-LN {:.3f}, "
                                         "Post-LN {:.3f}", mean_of(pre.removal_trend), mean_of(post.removal_trend),
                                         mean_of(pre.angle_trend), mean_of(post.angle_trend)),
                             {{"pre_removal_trend", pre.removal_trend}, {"post_removal_trend", post.removal_trend},
                              {"pre_angle_trend", pre.angle_trend}, {"post_angle_trend", post.angle_trend}}));
    out.back().reported = "source 004: Pre-LN's effective depth grows like sqrt(L), Post-LN's like L";
  });
}

}  // namespace normlab::theory::detail
