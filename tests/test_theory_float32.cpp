// test_theory_float32.cpp: a given model's claims read in float32 (TheoryOptions::float32, theory
// --checkpoint --precision float32: the model's own parameters, shared by the claims) against the same
// claims on its float64 copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "theory/checks.h"
#include "theory/theory.h"

using namespace normlab;
using namespace normlab::theory;

namespace {

// The given-model claims of one seed (the lemmas, depth, fake depth and sinks) on `o.model`.
std::vector<detail::Measurement> given_claims(const TheoryOptions& o, const std::vector<int32_t>& corpus) {
  detail::ClaimModels models(o, corpus, corpus);
  detail::Bench b;
  b.opt = o, b.corpus = corpus, b.models = &models, b.fresh = false, b.given = true;
  b.ids.assign(corpus.begin() + 100, corpus.begin() + 100 + o.seq_len);
  std::vector<detail::Measurement> out;
  detail::lemma_checks(b, out);
  detail::depth_checks(b, out);
  detail::fake_depth_checks(b, out);
  detail::sink_checks(b, out);
  return out;
}

bool near(double a, double b) { return std::fabs(a - b) <= 1e-4 * std::max(std::fabs(a), std::fabs(b)) + 1e-6; }

}  // namespace

// Read in float32, every claim float32 can answer gives the float64 copies' numbers to float32's
// rounding (each effect, bound and law point within 1e-4 relative); the claims checked to rounding
// through Jacobians are skipped saying --precision float64 measures them; the rows are the same, in the
// same order; and the shared model's parameters are as they were (the ablations restore them).
TEST(TheoryFloat32, AGivenModelsClaimsInFloat32AreItsFloat64ClaimsToRounding) {
  std::vector<int32_t> corpus;
  for (int i = 0; i < 6000; i++) corpus.push_back(int32_t(i % 7 == 0 ? 'e' : 'a' + (i * 13) % 20));
  for (Placement p : {Placement::Pre, Placement::Post}) {
    SCOPED_TRACE(to_string(p));
    ModelConfig c;
    c.d_model = 16, c.n_heads = 2, c.n_layers = 4, c.seq_len = 32, c.placement = {p}, c.seed = 5;
    TheoryOptions o;
    o.seeds = 2, o.seed = 1337, o.d_model = 16, o.n_heads = 2, o.n_layers = o.deep_layers = 4, o.seq_len = 16;
    Model<float> wide(c);
    o.model = std::make_shared<TheoryModel>(TheoryModel{"given", c, model_with_params<float>(c, wide.params(), true)});
    const std::vector<detail::Measurement> f64 = given_claims(o, corpus);

    auto held = model_with_params<float>(c, wide.params(), /*forward_only=*/true);
    held->enable_gradients();
    o.model = std::make_shared<TheoryModel>(TheoryModel{"given", c, std::move(held)});
    o.float32 = true;
    const std::vector<detail::Measurement> f32 = given_claims(o, corpus);
    EXPECT_EQ(o.model->model->params(), wide.params());

    ASSERT_EQ(f32.size(), f64.size());
    int compared = 0, float64_only = 0;
    for (size_t i = 0; i < f64.size(); i++) {
      const detail::Measurement &a = f64[i], &b = f32[i];
      SCOPED_TRACE(a.head.source);
      EXPECT_EQ(a.head.source, b.head.source);
      if (!b.skipped.empty() && b.skipped == detail::float64_only()) {
        EXPECT_TRUE(a.skipped.empty()) << a.skipped;  // measured in float64
        float64_only++;
        continue;
      }
      EXPECT_EQ(a.skipped, b.skipped);
      if (!a.skipped.empty()) continue;
      EXPECT_EQ(a.kind, b.kind);
      ASSERT_EQ(a.effects.size(), b.effects.size());
      for (size_t k = 0; k < a.effects.size(); k++) EXPECT_TRUE(near(a.effects[k], b.effects[k])) << a.effects[k] << " " << b.effects[k];
      EXPECT_TRUE(near(a.value, b.value)) << a.value << " " << b.value;
      EXPECT_TRUE(near(a.bound, b.bound)) << a.bound << " " << b.bound;
      ASSERT_EQ(a.series.y.size(), b.series.y.size());
      for (size_t k = 0; k < a.series.y.size(); k++) EXPECT_TRUE(near(a.series.y[k], b.series.y[k])) << k;
      compared++;
    }
    EXPECT_GE(compared, 8);       // rank collapse, growth, gradients, fake depth, sinks...
    EXPECT_GE(float64_only, 3);   // the lemmas and 004 Thm 2 (Pre-LN) or 000's Post-LN theorems
  }
}

// A collapse below float32's floor is a bound, not a reading: with every attention's qkv weights zero,
// pure attention (no skips, no MLP) makes every row the same after one layer, so res(X) reaches 0. In
// float64 the rank-collapse claims read it; in float32 they are skipped saying the floor bounds it (a
// spread over windows of floored values would be the floor's, not the model's).
TEST(TheoryFloat32, ACollapseBelowFloat32sFloorIsSkippedNotRead) {
  std::vector<int32_t> corpus;
  for (int i = 0; i < 6000; i++) corpus.push_back(int32_t('a' + (i * 13) % 20));
  ModelConfig c;
  c.d_model = 16, c.n_heads = 2, c.n_layers = 4, c.seq_len = 32, c.placement = {Placement::Pre}, c.seed = 5;
  Model<float> m(c);
  for (const ParamSpec& p : m.table().specs)
    if (p.name.find("qkv") != std::string::npos) std::fill_n(m.params().begin() + long(p.offset), p.numel, 0.0f);
  TheoryOptions o;
  o.seeds = 1, o.seed = 1337, o.d_model = 16, o.n_heads = 2, o.n_layers = o.deep_layers = 4, o.seq_len = 16;
  for (bool float32 : {false, true}) {
    SCOPED_TRACE(float32 ? "float32" : "float64");
    auto held = model_with_params<float>(c, m.params(), /*forward_only=*/!float32);
    if (float32) held->enable_gradients();
    o.model = std::make_shared<TheoryModel>(TheoryModel{"given", c, std::move(held)});
    o.float32 = float32;
    detail::ClaimModels models(o, corpus, corpus);
    detail::Bench b;
    b.opt = o, b.corpus = corpus, b.models = &models, b.fresh = false, b.given = true;
    b.ids.assign(corpus.begin(), corpus.begin() + o.seq_len);
    std::vector<detail::Measurement> out;
    detail::depth_checks(b, out);
    int seen = 0;
    for (const auto& r : out)
      if (r.head.source == "002 rank collapse" || r.head.source == "002 skips prevent collapse") {
        seen++;
        if (float32) {
          EXPECT_NE(r.skipped.find("float32's floor"), std::string::npos) << r.skipped;
        } else {
          EXPECT_TRUE(r.skipped.empty()) << r.skipped;
          EXPECT_FALSE(r.effects.empty());
        }
      }
    EXPECT_EQ(seen, 2);
  }
}
