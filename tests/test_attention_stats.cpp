// test_attention_stats.cpp: the attention-spectrum instrument (analysis/attention.h): the statistics of
// row-stochastic matrices against constructed and random ones, every head's chain of bounds and source
// 002's bound on models, the bounds of QK-norm and nGPT against the scores the model computed, and a
// float32 model's readings against the float64 model's of the same parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <numbers>

#include "analysis/attention.h"
#include "analysis/linalg.h"
#include "model/norm_of.h"
#include "analysis_models.h"
#include "check.h"
#include "ops/common.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::analysis;
using namespace normlab::test;

TEST(AttentionStats, AdversarialUniformAndRandomMatrices) {
  const int n = 9;
  // every row attending to one token: ||A||_2 = sqrt(n) = sqrt(c_max)
  std::vector<double> one(n * n, 0.0);
  for (int i = 0; i < n; i++) one[i * n + 2] = 1.0;
  AttentionMatrixStats s = attention_matrix_stats(one.data(), n);
  EXPECT_NEAR(s.norm2, 3.0, 1e-12);
  EXPECT_NEAR(s.c_max, 9.0, 1e-12);
  EXPECT_TRUE(s.chain_holds);
  EXPECT_NEAR(s.entropy_max, 0.0, 1e-15);
  // uniform rows: ||A||_2 = 1, entropy log n
  std::vector<double> uni(n * n, 1.0 / n);
  s = attention_matrix_stats(uni.data(), n);
  EXPECT_NEAR(s.norm2, 1.0, 1e-12);
  EXPECT_NEAR(s.entropy_mean, std::log(double(n)), 1e-12);
  // identity: 1
  std::vector<double> eye(n * n, 0.0);
  for (int i = 0; i < n; i++) eye[i * n + i] = 1.0;
  EXPECT_NEAR(attention_matrix_stats(eye.data(), n).norm2, 1.0, 1e-12);
  // random softmax rows (and causal ones): the chain 1 <= ||A|| <= sqrt(c_max) <= sqrt(n) holds
  Rng rng(5);
  for (int trial = 0; trial < 50; trial++) {
    std::vector<double> a(n * n, 0.0);
    const bool causal = trial % 2;
    for (int i = 0; i < n; i++) {
      const int len = causal ? i + 1 : n;
      double sum = 0;
      for (int j = 0; j < len; j++) sum += a[i * n + j] = std::exp(3 * rng.normal());
      for (int j = 0; j < len; j++) a[i * n + j] /= sum;
    }
    EXPECT_TRUE(attention_matrix_stats(a.data(), n).chain_holds) << "trial " << trial;
  }
}

TEST(AttentionStats, ModelHeadsSatisfyTheChain) {
  ModelConfig c = small(Placement::Pre, NormKind::LayerNorm, 1e-5);
  c.arch = Arch::Encoder;
  c.vocab = 257;
  auto m = run(c, 6);
  const AttentionReport r = analyze_attention(*m);
  ASSERT_EQ(r.heads_by_layer.size(), 6u);
  for (const auto& h : r.heads_by_layer) {
    EXPECT_TRUE(h.stats.chain_holds);
    ASSERT_TRUE(h.seed_bound);  // pre: ln_in feeds every attention; no biases at init
    EXPECT_LE(h.stats.norm2, *h.seed_bound + 1e-12) << h.bound_verdict;
    EXPECT_TRUE(h.bound_premises) << h.bound_verdict;  // bidirectional rows, no q/k or norm bias
  }
  // the bound's premises fail for causal rows, and for a q/k bias (theory's "002 bound in M")
  c.arch = Arch::Gpt;
  c.vocab = 256;
  auto g = run(c, 6);
  for (const auto& h : analyze_attention(*g).heads_by_layer) EXPECT_FALSE(h.bound_premises) << h.bound_verdict;
  c.arch = Arch::Encoder;
  c.vocab = 257;
  auto biased = run(c, 6);
  const ParamSpec* qkv = biased->table().find("h.0.attn.qkv.bias");
  ASSERT_TRUE(qkv);
  biased->params()[qkv->offset] = 0.1;  // the first query bias of layer 0
  std::vector<int32_t> ids(6), labels(6, ops::kIgnoreLabel);
  for (int t = 0; t < 6; t++) ids[size_t(t)] = t * 7 % 256;
  biased->forward(ids.data(), labels.data(), 1, 6);
  const AttentionReport rb = analyze_attention(*biased);
  for (const auto& h : rb.heads_by_layer) EXPECT_EQ(h.bound_premises, h.layer != 0) << h.bound_verdict;
}

// A big model's attention read on its own float32 parameters (analyze attention --precision float32):
// every statistic agrees with the float64 model's of the same parameters to float32 rounding, the chain
// of bounds holds within float32's slack, and the verdicts are the same. The oracle is the float64 model.
TEST(AttentionStats, Float32ReadingsAgreeWithFloat64) {
  for (const Placement p : {Placement::Pre, Placement::Post}) {
    ModelConfig c = small(p, NormKind::LayerNorm, 1e-5);
    c.n_layers = 3;
    Model<double> wide(c);
    for (double& w : wide.params()) w *= 3;  // sharper heads than at init
    const std::unique_ptr<Model<float>> narrow = model_with_params<float>(c, wide.params());
    std::copy(narrow->params().begin(), narrow->params().end(), wide.params().begin());  // the same numbers in both
    std::vector<int32_t> ids(12), labels(12, ops::kIgnoreLabel);
    for (int t = 0; t < 12; t++) ids[size_t(t)] = (t * 37 + 11) % 256;
    wide.forward(ids.data(), labels.data(), 1, 12);
    narrow->forward(ids.data(), labels.data(), 1, 12);
    const AttentionReport d = analyze_attention(wide), f = analyze_attention(*narrow);
    ASSERT_EQ(f.heads_by_layer.size(), d.heads_by_layer.size());
    const auto near = [](double a, double b) { return std::abs(a - b) <= 1e-5 * std::abs(b) + 1e-6; };
    for (size_t i = 0; i < d.heads_by_layer.size(); i++) {
      const HeadReport &x = d.heads_by_layer[i], &y = f.heads_by_layer[i];
      EXPECT_TRUE(y.stats.chain_holds) << i;
      EXPECT_TRUE(near(y.stats.norm2, x.stats.norm2)) << i << ": " << y.stats.norm2 << " " << x.stats.norm2;
      EXPECT_TRUE(near(y.stats.c_max, x.stats.c_max)) << i;
      EXPECT_TRUE(near(y.stats.lower, x.stats.lower)) << i;
      // (an entropy near 0 is a sum of -p log p over tiny p, each off by float32's rounding of its score
      // times the score's size: an absolute 1e-5 nats, against log T = 2.5)
      EXPECT_NEAR(y.stats.entropy_mean, x.stats.entropy_mean, 1e-5) << i;
      EXPECT_TRUE(near(y.sigma_q, x.sigma_q) && near(y.sigma_k, x.sigma_k)) << i;
      EXPECT_EQ(y.stats.keys, x.stats.keys) << i;
      EXPECT_EQ(y.bound_premises, x.bound_premises) << i;
      ASSERT_EQ(bool(y.seed_bound), bool(x.seed_bound)) << i;
      if (x.seed_bound) { EXPECT_TRUE(near(*y.seed_bound, *x.seed_bound)) << i; }
      EXPECT_EQ(y.bound_verdict.substr(0, 5), x.bound_verdict.substr(0, 5)) << i;  // "holds" or "VIOLA"
      EXPECT_GT(y.stats.row_sum_dev, x.stats.row_sum_dev);  // (float32's rounding is there to see)
    }
  }
}

// QK-norm: the bound's M comes from the norms' gains alone, and it must dominate every score the
// model computed: |<q_i, k_j>| / sqrt(HS) <= M, read from the q and k the attention used (after the
// norms and RoPE, in the activations), with gains moved away from 1 and weights scaled up 30x (which
// the bound must not see).
TEST(AttentionStats, QkNormBoundsDominateTheScoresTheModelComputed) {
  for (QkNorm how : {QkNorm::Heads, QkNorm::Whole})
    for (NormKind norm : {NormKind::RMSNorm, NormKind::LayerNorm, NormKind::DyT})
    for (bool affine : {true, false})  // false: weightless QK-norm (gamma = 1 in the bound)
    for (double mscale : {1.0, 3.0}) {  // 3: RoPE's cos and sin x 3 (model.rope_mscale), the scores up to x 9
      SCOPED_TRACE(fmt::format("{} {} affine={} rope_mscale={}", to_string(how), to_string(norm), affine, mscale));
      ModelConfig c = small(Placement::Reordered, norm, 1e-5);
      c.positions = Positions::Rope;
      c.rope_mscale = mscale;
      c.qk_norm = how;
      c.qk_norm_affine = affine;
      c.n_kv_heads = 1;
      Model<double> m(c);
      Rng rng(3);
      for (const ParamSpec& p : m.table().specs) {
        double* w = m.params().data() + p.offset;
        if (p.name.find("attn.qkv.weight") != std::string::npos)
          for (size_t i = 0; i < p.numel; i++) w[i] *= 30.0;
        if (p.name.find("_norm.weight") != std::string::npos)
          for (size_t i = 0; i < p.numel; i++) w[i] = 0.5 + rng.uniform();
      }
      const int T = 6, C = 12, HS = 4, QW = C + 2 * HS;  // 3 heads of 4, one key-value head
      std::vector<int32_t> ids(T), labels(T, ops::kIgnoreLabel);
      for (int t = 0; t < T; t++) ids[t] = (t * 37 + 11) % 256;
      m.forward(ids.data(), labels.data(), 1, T);
      const AttentionReport r = analyze_attention(m);
      ASSERT_EQ(r.heads_by_layer.size(), 6u);
      for (size_t k = 0; k < r.heads_by_layer.size(); k++) {
        const HeadReport& h = r.heads_by_layer[k];
        ASSERT_TRUE(h.seed_bound) << h.bound_verdict;
        EXPECT_LE(h.stats.norm2, *h.seed_bound + 1e-12) << h.bound_verdict;
        const double M = std::stod(h.bound_verdict.substr(h.bound_verdict.find("M = ") + 4));
        const double* qkv = m.acts(2 * h.layer).hid;
        double worst = 0;
        for (int i = 0; i < T; i++)
          for (int j = 0; j < T; j++) {
            double s = 0;
            for (int e = 0; e < HS; e++) s += qkv[i * QW + h.head * HS + e] * qkv[j * QW + C + e];
            worst = std::max(worst, std::abs(s) / std::sqrt(double(HS)));
          }
        EXPECT_LE(worst, M * (1 + 5e-3)) << h.bound_verdict;  // M is printed to 3 digits (0.5% at most)
        EXPECT_GT(worst, 0.0);
      }
    }
}


// nGPT: the bound's M comes from s_qk alone (unit q and k heads), and it dominates every score the model
// computed (scale q.k, read from the q and k the attention used), with s_qk moved off its start and the
// weights scaled 30x (which the projection onto the sphere makes irrelevant)
TEST(AttentionStats, NGptBoundDominatesTheScoresTheModelComputed) {
  ModelConfig c = small(Placement::NGpt, NormKind::L2, 0.0);
  c.positions = Positions::Rope;
  c.bias = LinearBias::None;
  Model<double> m(c);
  Rng rng(3);
  for (const ParamSpec& p : m.table().specs) {
    double* w = m.params().data() + p.offset;
    if (p.name.ends_with(".sqk"))
      for (size_t i = 0; i < p.numel; i++) w[i] *= 0.5 + 2 * rng.uniform();
    if (p.name.find("attn.qkv.weight") != std::string::npos)
      for (size_t i = 0; i < p.numel; i++) w[i] *= 30.0;
  }
  const int T = 6, C = 12, HS = 4, QW = 3 * C;
  std::vector<int32_t> ids(T), labels(T, ops::kIgnoreLabel);
  for (int t = 0; t < T; t++) ids[t] = (t * 37 + 11) % 256;
  m.forward(ids.data(), labels.data(), 1, T);
  const AttentionReport r = analyze_attention(m);
  ASSERT_FALSE(r.heads_by_layer.empty());
  for (const HeadReport& h : r.heads_by_layer) {
    ASSERT_TRUE(h.seed_bound) << h.bound_verdict;
    EXPECT_NE(h.bound_verdict.find("nGPT's s_qk"), std::string::npos) << h.bound_verdict;
    const double M = std::stod(h.bound_verdict.substr(h.bound_verdict.find("M = ") + 4));
    const double* qkv = m.acts(2 * h.layer).hid;
    double worst = 0;
    for (int i = 0; i < T; i++)
      for (int j = 0; j < T; j++) {
        double s = 0;
        for (int e = 0; e < HS; e++) s += qkv[i * QW + h.head * HS + e] * qkv[j * QW + C + h.head * HS + e];
        worst = std::max(worst, std::abs(s) * c.attention_scale());
      }
    EXPECT_LE(worst, M * (1 + 5e-3)) << h.bound_verdict;
    EXPECT_GT(worst, 0.05 * M) << "the scores are far below M: the test would not see a wrong bound";
  }
}

