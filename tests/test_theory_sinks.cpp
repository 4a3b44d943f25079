// test_theory_sinks.cpp: the massive-activation and sink claims of normlab theory (theory/sinks.cpp) on
// given models built here: a planted massive entry and the same model without it.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "analysis/sinks.h"
#include "theory/checks.h"
#include "theory/rules.h"
#include "theory/theory.h"

using namespace normlab;
using namespace normlab::theory;

// The sink claims on a given model (sinks.cpp): a GPT whose embedding of one frequent byte holds an
// entry of 5,000 (the others at the init's 0.02 scale) passes Sun et al.'s 1,000 x the median at the
// stream entering layer 0, so the massive-activation claim holds there and the detail says where; the
// same model without it does not reach the criterion (violated) and has no massive entry to hold fixed
// (that row skipped, with the reason); the sink rate is a percentage; a given model makes no Pre/Post
// comparison row.
TEST(TheorySinks, MassiveActivationClaimFollowsSunEtAlsCriterion) {
  std::vector<int32_t> corpus;
  for (int i = 0; i < 4000; i++) corpus.push_back(int32_t(i % 7 == 0 ? 'e' : 'a' + (i * 13) % 20));
  ModelConfig c;
  c.d_model = 16, c.n_heads = 2, c.n_layers = 2, c.seq_len = 32, c.placement = {Placement::Pre};
  for (bool planted : {true, false}) {
    SCOPED_TRACE(planted ? "planted" : "plain");
    Model<double> m(c);
    if (planted) m.params()[m.table().find("wte.weight")->offset + size_t('e') * 16 + 5] = 5000;
    TheoryOptions o;
    o.seeds = 2;
    o.model = std::make_shared<TheoryModel>(
        TheoryModel{"planted", c, model_with_params<float>(c, m.params(), /*forward_only=*/true)});
    std::vector<detail::Measurement> out;
    for (int seed = 0; seed < 2; seed++) {
      o.seed = 1337 + seed;
      detail::ClaimModels src(o, corpus, corpus);
      detail::Bench b;
      b.opt = o, b.corpus = corpus, b.models = &src, b.fresh = false, b.given = true;
      detail::sink_checks(b, out);
    }
    std::vector<double> massive, rates;
    int fixed_rows = 0, gradient_rows = 0;
    for (const auto& r : out) {
      if (r.head.source == "2603.17771 attention sinks induce gradient sinks") {  // measured, or skipped saying why
        gradient_rows++;
        if (!r.skipped.empty()) {
          EXPECT_NE(r.skipped.find("no contrast"), std::string::npos) << r.skipped;
        }
        for (double v : r.effects) EXPECT_TRUE(std::isfinite(v));
        continue;
      }
      if (r.head.source == "Sun et al. 2024 massive activations are fixed") {  // only where there is one to hold fixed
        fixed_rows++;
        EXPECT_EQ(r.skipped.empty(), planted) << r.skipped;
        for (double v : r.effects) EXPECT_TRUE(std::isfinite(v));
        continue;
      }
      EXPECT_TRUE(r.skipped.empty()) << r.skipped;
      EXPECT_EQ(r.head.source.find("2603.05498"), std::string::npos);  // no comparison on one model
      if (r.head.source == "Sun et al. 2024 massive activations") {
        massive.insert(massive.end(), r.effects.begin(), r.effects.end());
        if (planted) {
          EXPECT_NE(r.detail.find("dimension 5"), std::string::npos) << r.detail;
        }
      }
      if (r.head.source == "Gu et al. 2024 attention sinks") {
        for (double v : r.effects) EXPECT_TRUE(v >= 0 && v <= 100) << v;
      }
    }
    EXPECT_EQ(fixed_rows, 2);
    EXPECT_EQ(gradient_rows, 2);
    ASSERT_EQ(massive.size(), 4u);  // 2 window seeds x 2 units
    const Judgement j = judge_effect(EffectRule::towards(1), massive);
    EXPECT_EQ(j.verdict, planted ? Verdict::Holds : Verdict::Violated) << j.text;
  }
}

// The norm-gain claim (2603.17771, sinks.cpp) against the closed form: RMSNorm's Jacobian at x is
// g / rms(x) (I - x x^T / ||x||^2) at eps = 0, so with equal gains its largest singular value is
// g sqrt(C) / ||x||, a slope of exactly -1 against ||x|| on every unit: the row's slopes are -1 to
// rounding and the rule finds the size as stated. Gains that differ by dimension (the model's own
// embedding dimension 5 planted at 5,000, so the largest-norm token points along it, and dimension 5's
// gain set 10 times the others) break the closed form: the projection removes the large gain at that
// token only, so the slope is steeper than -1, as the row must report, not force to -1.
TEST(TheorySinks, NormGainSlopeIsMinusOneForEqualRmsNormGains) {
  std::vector<int32_t> corpus;
  for (int i = 0; i < 4000; i++) corpus.push_back(int32_t(i % 7 == 0 ? 'e' : 'a' + (i * 13) % 20));
  ModelConfig c;
  c.d_model = 16, c.n_heads = 2, c.n_layers = 2, c.seq_len = 32, c.placement = {Placement::Pre};
  c.norm = NormKind::RMSNorm, c.eps = 1e-30;
  for (bool uneven : {false, true}) {
    SCOPED_TRACE(uneven ? "uneven gains" : "equal gains");
    Model<double> m(c);
    m.params()[m.table().find("wte.weight")->offset + size_t('e') * 16 + 5] = 5000;
    if (uneven)  // the input norm that reads the planted stream point (layer 0's attention)
      m.params()[m.table().find("h.0.attn.ln_in.weight")->offset + 5] = 10;
    TheoryOptions o;
    o.seed = 1337;
    o.model = std::make_shared<TheoryModel>(
        TheoryModel{"planted", c, model_with_params<float>(c, m.params(), /*forward_only=*/true)});
    detail::ClaimModels src(o, corpus, corpus);
    detail::Bench b;
    b.opt = o, b.corpus = corpus, b.models = &src, b.fresh = false, b.given = true;
    std::vector<detail::Measurement> out;
    detail::sink_checks(b, out);
    const detail::Measurement* row = nullptr;
    for (const auto& r : out)
      if (r.head.source == "2603.17771 the norm gain is inverse to the input norm") row = &r;
    ASSERT_NE(row, nullptr);
    ASSERT_TRUE(row->skipped.empty()) << row->skipped;
    ASSERT_EQ(row->effects.size(), 2u);
    EXPECT_NE(row->detail.find("h.0.attn.ln_in"), std::string::npos) << row->detail;
    for (double slope : row->effects) {
      if (!uneven) {
        EXPECT_NEAR(slope, -1.0, 1e-9);
      } else {
        EXPECT_LT(slope, -1.05);
      }
    }
    const Judgement j = judge_effect(EffectRule::towards(-1).stated(1, "test"), row->effects);
    EXPECT_EQ(j.verdict, Verdict::Holds) << j.text;
    if (!uneven) {
      EXPECT_NE(j.size, Size::Smaller) << j.text;
    }
  }
}

// The gradient-sink contrast (sinks.cpp) by hand: three layers with sink rates 100%, 0% and 50% and
// first-over-median gradient ratios 100, 2 and 10 at their attention's input: weighted by the sink rate
// (2 + 0.5 x 1) / 1.5, by one minus it (log10 2 + 0.5 x 1) / 1.5; no weight on a side is no contrast.
TEST(TheorySinks, GradientSinkContrastWeighsLayersByTheirSinkRate) {
  analysis::SinksReport r;
  r.layer_sink_rate = {100, 0, 50};
  for (int l = 0; l < 3; l++) {
    analysis::StreamGradient g;
    g.layer = l, g.ratio = std::vector<double>{100, 2, 10}[size_t(l)];
    r.attn_input_gradients.push_back(g);
  }
  const detail::GradientSinkContrast c = detail::gradient_sink_contrast(r);
  EXPECT_TRUE(c.none.empty()) << c.none;
  EXPECT_NEAR(c.sinks, 2.5 / 1.5, 1e-12);
  EXPECT_NEAR(c.others, (std::log10(2.0) + 0.5) / 1.5, 1e-12);
  EXPECT_NEAR(c.gap, c.sinks - c.others, 1e-15);
  r.layer_sink_rate = {0, 0, 0};
  EXPECT_NE(detail::gradient_sink_contrast(r).none.find("no head has a sink"), std::string::npos);
  EXPECT_TRUE(std::isnan(detail::gradient_sink_contrast(r).gap));
  r.layer_sink_rate = {100, 100, 100};
  EXPECT_NE(detail::gradient_sink_contrast(r).none.find("no layer without one"), std::string::npos);
  r.attn_input_gradients.clear();
  r.no_gradients = "an encoder has no next-token loss";
  EXPECT_EQ(detail::gradient_sink_contrast(r).none, r.no_gradients);
  r.no_gradients.clear();
  EXPECT_NE(detail::gradient_sink_contrast(r).none.find("post-norm"), std::string::npos);
}
