// test_mup.cpp: the maximal update parametrization (model.mup_base_width; docs/MODEL.md "muP"). At the
// base width it is the standard parametrization bit for bit; at twice the base the logits are the
// standard model's (with the scores scaled 1 / HS) divided by 2, the gradients agree with finite
// differences, hidden matrices start at 1 / sqrt(m) of the scheme's scale (Xavier's unchanged), Adam
// steps them m times smaller with the decay unchanged, and the coordinate check of Yang et al. (how
// much a few Adam steps move the logits, across widths) is flat under muP where the standard
// parametrization's grows with the width.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/model.h"
#include "model/params.h"
#include "model_fixture.h"
#include "train/optimizer.h"

using namespace normlab;
using namespace normlab::test;

namespace {

ModelConfig gpt(int width, int base) {
  ModelConfig c;
  c.d_model = width, c.n_heads = 2, c.n_layers = 2, c.d_ff = 2 * width, c.vocab = 37, c.seq_len = 16;
  c.init = InitScheme::Gpt2;
  c.mup_base_width = base;
  return c;
}

double sd_of(const std::vector<double>& p, const ParamSpec& s) {
  double ss = 0;
  for (size_t i = 0; i < s.numel; i++) ss += p[s.offset + i] * p[s.offset + i];
  return std::sqrt(ss / double(s.numel));
}

}  // namespace

TEST(Mup, AtTheBaseWidthItIsTheStandardParametrization) {
  ModelConfig sp = gpt(32, 0), mup = gpt(32, 32);
  Model<double> a(sp), b(mup);
  EXPECT_EQ(a.params(), b.params());
  const Tokens tok = tokens_for(sp, 2, 8, 3);
  EXPECT_EQ(a.forward(tok.ids.data(), tok.labels.data(), 2, 8), b.forward(tok.ids.data(), tok.labels.data(), 2, 8));
  a.zero_grad(), b.zero_grad();
  a.backward(), b.backward();
  EXPECT_EQ(a.grads(), b.grads());
  for (double m : adam_step_multipliers(b.table(), mup)) EXPECT_EQ(m, 1.0);
}

// At m = 2 the logits are those of the standard model holding the same weights, whose scores are
// scaled as muP's (1 / sqrt(HS) / sqrt(2)), divided by 2; and the gradients agree with finite differences.
TEST(Mup, TheLogitsAreDividedByTheWidthMultiplierAndTheScoresScaleAsOneOverTheHeadSize) {
  ModelConfig mup = tiny(Arch::Gpt, {Placement::Pre}, NormKind::LayerNorm);
  mup.d_model = 8, mup.mup_base_width = 4;
  ASSERT_TRUE(mup.violations().empty());
  ModelConfig sp = mup;
  sp.mup_base_width = 0;
  sp.attn_scale = 1.0 / std::sqrt(double(mup.head_size())) / std::sqrt(2.0);
  EXPECT_DOUBLE_EQ(mup.attention_scale(), *sp.attn_scale);
  const Tokens tok = tokens_for(mup, 2, 8, 11);
  const std::vector<double> with_mup = logits_with_weights_of(mup, mup, tok);
  const std::vector<double> plain = logits_with_weights_of(mup, sp, tok);
  ASSERT_EQ(with_mup.size(), plain.size());
  for (size_t i = 0; i < plain.size(); i++) EXPECT_NEAR(with_mup[i], plain[i] / 2, 1e-12 * (1 + std::fabs(plain[i])));
  check_model_gradients(mup);
  mup.head = Head::Untied;
  check_model_gradients(mup);
}

TEST(Mup, HiddenMatricesStartAtOneOverRootMOfTheirScale) {
  Model<double> sp(gpt(128, 0)), mup(gpt(128, 32));  // m = 4
  int hidden = 0;
  for (const ParamSpec& s : sp.table().specs) {
    const double a = sd_of(sp.params(), s), b = sd_of(mup.params(), s);
    if (mup_hidden(s, mup.config())) {
      hidden++;
      EXPECT_NEAR(b / a, 0.5, 1e-12) << s.name;  // the same draws, times 1 / sqrt(4)
    } else {
      EXPECT_EQ(a, b) << s.name;  // embeddings, output, gains, biases: as the scheme draws them
    }
  }
  EXPECT_EQ(hidden, 2 * 4);  // qkv, attn proj, fc, mlp proj in each of 2 layers
  ModelConfig xsp = gpt(128, 0), xmup = gpt(128, 32);
  xsp.init = xmup.init = InitScheme::Xavier;  // already 1 / fan-in scaled: unchanged
  EXPECT_EQ(Model<double>(xsp).params(), Model<double>(xmup).params());
  ModelConfig deep = gpt(128, 32);
  deep.init = InitScheme::DeepNet;
  EXPECT_FALSE(deep.violations().empty());  // a scheme muP is not defined for here: refused by name
}

// One AdamW step from zero moments with a multiplier of 1/4 on one tensor equals a step at lr / 4 for
// that tensor (without decay); the decay is lr x weight_decay for every tensor, multiplier or not.
TEST(Mup, AdamStepsHiddenMatricesMTimesSmallerAndDecaysAlike) {
  const ModelConfig cfg = gpt(64, 16);  // m = 4
  Model<float> m(cfg);
  const ParamTable& t = m.table();
  const std::vector<double> mult = adam_step_multipliers(t, cfg);
  std::vector<float> g(t.total);
  Rng rng(3);
  for (float& x : g) x = float(rng.normal());
  const double lr = 1e-2;
  std::vector<float> with = m.params(), full = m.params(), quarter = m.params();
  AdamW(t, {0.9, 0.95, 1e-8, 0.0}, {mult}).step(with.data(), g.data(), lr, 1);
  AdamW(t, {0.9, 0.95, 1e-8, 0.0}).step(full.data(), g.data(), lr, 1);
  AdamW(t, {0.9, 0.95, 1e-8, 0.0}).step(quarter.data(), g.data(), lr / 4, 1);
  int hidden = 0;
  for (size_t i = 0; i < t.specs.size(); i++) {
    const ParamSpec& s = t.specs[i];
    const std::vector<float>& want = mult[i] == 1.0 ? full : quarter;
    hidden += mult[i] != 1.0;
    if (mult[i] != 1.0) {
      EXPECT_DOUBLE_EQ(mult[i], 0.25) << s.name;
    }
    for (size_t k = s.offset; k < s.offset + s.numel; k++) ASSERT_EQ(with[k], want[k]) << s.name;
  }
  EXPECT_EQ(hidden, 8);
  std::vector<float> zero(t.total, 0.0f), decayed = m.params();
  AdamW(t, {0.9, 0.95, 1e-8, 0.1}, {mult}).step(decayed.data(), zero.data(), lr, 1);
  for (const ParamSpec& s : t.specs) {
    if (!s.decays()) continue;
    for (size_t k = s.offset; k < s.offset + s.numel; k++) ASSERT_EQ(decayed[k], m.params()[k] * float(1 - lr * 0.1)) << s.name;
  }
}

// Yang et al.'s coordinate check: 5 Adam steps (lr 1e-2, no decay) on one batch at widths 32, 64, 128
// and 256 (base 32, 2 heads), the RMS change of the logits on that batch. Under the standard
// parametrization it grows with the width (Adam moves every entry by ~lr whatever the fan-in, so the
// output moves ~width x lr); under muP it stays within a factor of 1.5 from the base width to 8 x.
TEST(Mup, CoordinateCheckTheLogitsMoveAlikeAtEveryWidth) {
  const auto change = [](int width, int base) {
    ModelConfig c = gpt(width, base);
    Model<double> m(c);
    const Tokens tok = tokens_for(c, 4, 16, 21);
    m.forward(tok.ids.data(), tok.labels.data(), 4, 16);
    const std::vector<double> before(m.logits(), m.logits() + size_t(4) * 16 * c.vocab_size());
    std::vector<float> p(m.params().begin(), m.params().end()), g(p.size());
    AdamW opt(m.table(), {0.9, 0.95, 1e-8, 0.0}, adam_scaling(m.table(), c));
    for (int step = 1; step <= 5; step++) {
      for (size_t k = 0; k < p.size(); k++) m.params()[k] = p[k];
      m.forward(tok.ids.data(), tok.labels.data(), 4, 16);
      m.zero_grad();
      m.backward();
      for (size_t k = 0; k < p.size(); k++) g[k] = float(m.grads()[k]);
      opt.step(p.data(), g.data(), 1e-2, step);
    }
    for (size_t k = 0; k < p.size(); k++) m.params()[k] = p[k];
    m.forward(tok.ids.data(), tok.labels.data(), 4, 16);
    double ss = 0;
    for (size_t k = 0; k < before.size(); k++) ss += std::pow(m.logits()[k] - before[k], 2);
    return std::sqrt(ss / double(before.size()));
  };
  std::vector<double> sp, mup;
  for (int w : {32, 64, 128, 256}) sp.push_back(change(w, 0)), mup.push_back(change(w, 32));
  for (size_t i = 0; i < sp.size(); i++) std::printf("width %d: SP %.4g, muP %.4g\n", 32 << i, sp[i], mup[i]);
  EXPECT_DOUBLE_EQ(sp[0], mup[0]);  // the base width: the same model
  EXPECT_GT(sp[3] / sp[0], 3.0);
  EXPECT_LT(std::max(mup[3] / mup[0], mup[0] / mup[3]), 1.5);
}
