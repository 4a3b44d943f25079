// test_completep.cpp: CompleteP (model.completep_base_depth; docs/MODEL.md "CompleteP"). At the base
// depth it is the plain model bit for bit; at L = 4 base every branch reaches the stream times 1/4
// (the stream's update is the plain model's over 4, checked sub-layer by sub-layer), the gradients
// agree with finite differences (with a per-channel branch gain and with Admin's learned shortcut,
// so beta multiplies lambda and not omega), Adam's epsilon is divided by m_L (and by m with muP), the
// init resolves to one without a depth term, and the configurations it cannot mean are refused by
// name. The PyTorch golden cases (tests/torch/golden_cases.py, "completep") check the forward, every
// gradient and ten training steps against nanoGPT-mup's completep branch; the block and token-local
// Jacobians and the decoder are in their own tests' tables.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/model.h"
#include "model/params.h"
#include "model_fixture.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;

namespace {

ModelConfig deep(int layers, int base) {
  ModelConfig c = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  c.n_layers = layers;
  c.seq_len = 8;
  c.completep_base_depth = base;
  return c;
}

}  // namespace

TEST(CompleteP, AtTheBaseDepthItIsThePlainModelBitForBit) {
  ModelConfig plain = deep(3, 0), base = deep(3, 3);
  plain.init = InitScheme::Normal;
  EXPECT_EQ(base.resolved_init(), InitScheme::Normal);  // auto: the init without a depth term
  EXPECT_EQ(base.branch_multiplier(), 1.0);
  Model<double> a(plain), b(base);
  EXPECT_EQ(a.params(), b.params());
  const Tokens tok = tokens_for(plain, 2, 8, 3);
  EXPECT_EQ(a.forward(tok.ids.data(), tok.labels.data(), 2, 8), b.forward(tok.ids.data(), tok.labels.data(), 2, 8));
  a.zero_grad(), b.zero_grad();
  a.backward(), b.backward();
  EXPECT_EQ(a.grads(), b.grads());
  EXPECT_EQ(adam_scaling(b.table(), base).eps, 1.0);
}

// With the same weights, each sub-layer's update of the stream (its output minus its input) is the
// branch's value times base / L, where the plain model adds the value itself.
TEST(CompleteP, EveryBranchReachesTheStreamTimesBaseOverDepth) {
  const ModelConfig c = deep(4, 1);
  EXPECT_DOUBLE_EQ(c.branch_multiplier(), 0.25);
  Model<double> m(c);
  const Tokens tok = tokens_for(c, 2, 8, 4);
  m.forward(tok.ids.data(), tok.labels.data(), 2, 8);
  const size_t n = size_t(2) * 8 * c.d_model;
  for (int i = 0; i < c.n_slots(); i++) {
    SCOPED_TRACE(i);
    const double* x = m.stream(i);
    const double* y = m.stream(i + 1);
    const double* g = m.acts(i).f;  // Pre-LN: the value is the branch's output
    double worst = 0, scale = 0;
    for (size_t k = 0; k < n; k++) {
      worst = std::max(worst, std::abs((y[k] - x[k]) - 0.25 * g[k]));
      scale = std::max(scale, std::abs(g[k]));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 1e-14 * (scale + 1));
  }
}

TEST(CompleteP, GradientsAgainstFiniteDifferences) {
  for (Placement p : {Placement::Pre, Placement::Post, Placement::LayerScale, Placement::Admin}) {
    SCOPED_TRACE(method_of(p).name);
    ModelConfig c = deep(3, 1);
    c.placement = {p};
    c.init = InitScheme::Normal;  // (Admin's own scheme is refused; its omega starts from admin_init)
    if (p == Placement::LayerScale) c.init = InitScheme::Xavier;
    check_model_gradients(c);
  }
  ModelConfig enc = tiny(Arch::Encoder, {Placement::Post, Placement::Pre, Placement::Sandwich}, NormKind::LayerNorm);
  enc.completep_base_depth = 2;
  check_model_gradients(enc, /*padding=*/true);
}

TEST(CompleteP, AdamEpsilonIsDividedByTheDepthMultiplierAndByTheWidthMultiplierWithMup) {
  ModelConfig c = deep(4, 2);
  EXPECT_DOUBLE_EQ(adam_scaling(make_param_table(c), c).eps, 0.5);
  c.d_model = 16, c.n_heads = 2, c.mup_base_width = 4;  // m = 4
  ASSERT_TRUE(c.violations().empty());
  const AdamScaling s = adam_scaling(make_param_table(c), c);
  EXPECT_DOUBLE_EQ(s.eps, 0.125);
  bool scaled = false;  // muP's step factors are still there
  for (double f : s.step) scaled = scaled || f == 0.25;
  EXPECT_TRUE(scaled);
}

TEST(CompleteP, ConfigurationsItCannotMeanAreRefusedByName) {
  const auto refused = [](ModelConfig c, const std::string& what) {
    const std::vector<std::string> v = c.violations();
    bool found = false;
    for (const std::string& s : v) found = found || s.find(what) != std::string::npos;
    EXPECT_TRUE(found) << what;
  };
  ModelConfig gpt2 = deep(4, 2);
  gpt2.init = InitScheme::Gpt2;  // its projections shrink as 1 / sqrt(2 L)
  refused(gpt2, "init without a depth term");
  ModelConfig deepnorm = deep(4, 2);
  deepnorm.placement = {Placement::DeepNorm};
  deepnorm.init = InitScheme::Auto;  // resolves to DeepNet's depth-scaled init
  refused(deepnorm, "init without a depth term");
  ModelConfig ngpt = deep(4, 2);
  ngpt.placement = {Placement::NGpt};
  ngpt.norm = NormKind::L2;
  ngpt.bias = LinearBias::None;
  ngpt.positions = Positions::Rope;
  refused(ngpt, "nGPT");
  ModelConfig encdec = tiny(Arch::EncDec, {Placement::Pre}, NormKind::LayerNorm);
  encdec.completep_base_depth = 1;
  refused(encdec, "one stack");
  for (int bad : {-1, kMaxLayers + 1}) refused(deep(4, bad), "completep_base_depth");
}
