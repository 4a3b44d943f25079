// test_qk_clip.cpp: QK-Clip (train.qk_clip; Kimi K2, arXiv 2507.20534, in Megatron-LM's grouped form)
// against recomputations written here: the attention kernel's largest scores against a loop over q.k,
// the model's per-head maxima against the same loop over its saved (RoPE-rotated) q and k, and the
// rescale by what it must do: every logit of a clipped key-value group times eta = tau / S_max (so the
// group's largest becomes tau), W_q's rows times eta^alpha and W_k's times eta^(1 - alpha), nothing
// else moved; the refusals; and a training run that logs what it clipped.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

#include "check.h"
#include "model_fixture.h"
#include "ops/attention.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;
namespace fs = std::filesystem;

namespace {

// The largest q_i . k_j / sqrt(HS) of head h over the batch, by loops: rows of width W = [q (NH HS) | k | v].
double largest_score(const double* qkv, int B, int T, int NH, int KVH, int HS, int h, bool causal,
                     const uint8_t* mask = nullptr) {
  const int W = (NH + 2 * KVH) * HS;
  double best = -std::numeric_limits<double>::infinity();
  for (int b = 0; b < B; b++)
    for (int i = 0; i < T; i++)
      for (int j = 0; j < (causal ? i + 1 : T); j++) {
        if (mask && !mask[size_t(b) * T + j]) continue;
        double s = 0;
        for (int e = 0; e < HS; e++)
          s += qkv[(size_t(b) * T + i) * W + h * HS + e] * qkv[(size_t(b) * T + j) * W + NH * HS + (h / (NH / KVH)) * HS + e];
        best = std::max(best, s / std::sqrt(double(HS)));
      }
  return best;
}

}  // namespace

TEST(QkClip, TheKernelsMaximaAreTheLargestScores) {
  for (auto [B, T, C, NH, KVH] : {std::tuple{2, 5, 12, 6, 3}, std::tuple{1, 1, 8, 4, 4}, std::tuple{2, 37, 16, 4, 1}})
    for (bool causal : {true, false})
      for (bool sink : {false, true}) {
        SCOPED_TRACE(testing::Message() << "T=" << T << " NH=" << NH << " KVH=" << KVH << " causal=" << causal
                                        << " sink=" << sink);
        const int HS = C / NH;
        const std::vector<double> qkv = randn(size_t(B) * T * (C + 2 * KVH * HS), 81, 2.0);
        const std::vector<double> sinks(size_t(NH), 50.0);  // a sink above every score: it must not count
        std::vector<uint8_t> mask(size_t(B) * T, 1);
        if (T > 2) mask[size_t(B) * T - 2] = 0;
        std::vector<double> y(size_t(B) * T * C), att(size_t(B) * NH * T * T), m(size_t(NH), 1e300);
        // += max: a value above every score stays
        ops::attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data(),
                               ops::Precision::Fp32, {}, sink ? sinks.data() : nullptr, m.data());
        for (double v : m) EXPECT_EQ(v, 1e300);
        std::fill(m.begin(), m.end(), -std::numeric_limits<double>::infinity());
        ops::attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data(),
                               ops::Precision::Fp32, {}, sink ? sinks.data() : nullptr, m.data());
        for (int h = 0; h < NH; h++)
          EXPECT_NEAR(m[size_t(h)], largest_score(qkv.data(), B, T, NH, KVH, HS, h, causal, mask.data()), 1e-12)
              << "head " << h;
      }
}

// A causal Llama-style model (RoPE, q, k, v biases) with one query head made loud (its W_q rows x 6):
// the maxima a training-mode forward keeps are the loop's over the saved q, k; a threshold between
// the loud group's largest score and the quiet ones' clips the loud group alone, after which every
// one of its scores is the old one times eta (its largest is tau), its W_q rows are times eta^alpha and
// its W_k rows eta^(1 - alpha), and every other parameter is bit for bit what it was. With grouped
// queries (4 heads, 2 key-value heads) and multi-head attention, alpha 0.5 (Kimi K2's) and 0.3.
TEST(QkClip, AClippedGroupsLogitsScaleByEtaAndNothingElseMoves) {
  for (int kv : {2, 4})
    for (double alpha : {0.5, 0.3}) {
      SCOPED_TRACE(testing::Message() << "kv_heads " << kv << " alpha " << alpha);
      ModelConfig c = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
      c.n_heads = 4, c.n_kv_heads = kv, c.positions = Positions::Rope, c.bias = LinearBias::Qkv;
      const int NH = 4, HS = 2, C = 8, B = 2, T = 6, A = NH * HS, group = NH / kv;
      Model<double> m(c);
      const ParamSpec* w = m.table().find("h.0.attn.qkv.weight");
      const ParamSpec* bias = m.table().find("h.0.attn.qkv.bias");
      ASSERT_NE(w, nullptr);
      ASSERT_NE(bias, nullptr);
      for (int r = 0; r < HS; r++) {  // head 0 loud
        for (int k = 0; k < C; k++) m.params()[w->offset + size_t(r) * C + k] *= 6;
        m.params()[bias->offset + size_t(r)] = 0.7;
      }
      for (size_t k = 0; k < bias->numel; k++) m.params()[bias->offset + k] += 0.1 * double(k % 3);
      const Tokens tok = tokens_for(c, B, T, 5);
      m.set_training(true);
      m.set_qk_clip(1e9, alpha);  // on, nothing clipped yet: read the maxima first
      m.forward(tok.ids.data(), tok.labels.data(), B, T);
      std::vector<double> before(NH);
      for (int h = 0; h < NH; h++) {
        before[size_t(h)] = largest_score(m.acts(0).hid, B, T, NH, kv, HS, h, true);
        EXPECT_NEAR(m.attention_logit_max()[size_t(h)], before[size_t(h)], 1e-12) << "head " << h;
      }
      for (int h = 0; h < NH; h++)  // layer 1's attention (slot 2)
        EXPECT_NEAR(m.attention_logit_max()[size_t(2 * NH + h)], largest_score(m.acts(2).hid, B, T, NH, kv, HS, h, true),
                    1e-12);
      // tau between the loud group's largest and every other group's
      double quiet = -1e300;
      for (int h = group; h < NH; h++) quiet = std::max(quiet, before[size_t(h)]);
      for (int h = 0; h < NH; h++) quiet = std::max(quiet, m.attention_logit_max()[size_t(2 * NH + h)]);
      const double loud = *std::max_element(before.begin(), before.begin() + group);
      ASSERT_GT(loud, 1.5 * quiet);
      const double tau = 0.5 * (loud + quiet), eta = tau / loud;
      m.set_qk_clip(tau, alpha);
      m.forward(tok.ids.data(), tok.labels.data(), B, T);
      const std::vector<double> params = m.params();
      EXPECT_EQ(m.clip_qk(), 1);
      for (double v : m.attention_logit_max()) EXPECT_EQ(v, -std::numeric_limits<double>::infinity());  // reset
      for (size_t k = 0; k < params.size(); k++) {
        const long row = long(k) - long(w->offset);
        const long brow = long(k) - long(bias->offset);
        const long r = row >= 0 && size_t(row) < w->numel ? row / C : brow >= 0 && size_t(brow) < bias->numel ? brow : -1;
        const bool q_row = r >= 0 && r < group * HS, k_row = r >= A && r < A + HS;
        const double want = q_row ? params[k] * std::pow(eta, alpha) : k_row ? params[k] * std::pow(eta, 1 - alpha) : params[k];
        if (q_row || k_row)
          EXPECT_NEAR(m.params()[k], want, 1e-15 * std::abs(want)) << "parameter " << k;
        else
          EXPECT_EQ(m.params()[k], params[k]) << "parameter " << k;
      }
      m.forward(tok.ids.data(), tok.labels.data(), B, T);
      for (int h = 0; h < group; h++)  // the clipped group: every score times eta, its largest tau
        EXPECT_NEAR(largest_score(m.acts(0).hid, B, T, NH, kv, HS, h, true), eta * before[size_t(h)], 1e-12 * loud);
      EXPECT_NEAR(*std::max_element(m.attention_logit_max().begin(), m.attention_logit_max().begin() + group), tau,
                  1e-12 * tau);
      for (int h = group; h < NH; h++) EXPECT_NEAR(largest_score(m.acts(0).hid, B, T, NH, kv, HS, h, true), before[size_t(h)], 1e-12);
    }
}

TEST(QkClip, RefusesWhatItCannotClipAndBadValues) {
  auto refused = [](ModelConfig c, double tau, double alpha, const std::string& says) {
    Model<float> m(c);
    try {
      m.set_qk_clip(tau, alpha);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  ModelConfig plain = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  ModelConfig qk = plain;
  qk.qk_norm = QkNorm::Heads;
  refused(qk, 10, 0.5, "QK-norm");
  ModelConfig hybrid = tiny(Arch::Gpt, {Placement::HybridNorm}, NormKind::RMSNorm);  // QKV-norm by its method
  refused(hybrid, 10, 0.5, "QK-norm");
  ModelConfig capped = plain;
  capped.attn_softcap = 20;
  refused(capped, 10, 0.5, "attn_softcap");
  refused(plain, -1, 0.5, "train.qk_clip");
  refused(plain, 10, 1.5, "train.qk_clip_alpha");
  Model<float> off(qk);
  off.set_qk_clip(0, 0.5);  // off: any model
  EXPECT_TRUE(off.attention_logit_max().empty());
  EXPECT_EQ(off.clip_qk(), 0);
  EXPECT_THROW(run_config_from_json(nlohmann::json{{"train", {{"qk_clip", -3.0}}}}, "test"), Error);
  EXPECT_THROW(run_config_from_json(nlohmann::json{{"train", {{"qk_clip_alpha", 2.0}}}}, "test"), Error);
  EXPECT_EQ(run_config_from_json(nlohmann::json{{"train", {{"qk_clip", 100.0}}}}, "test").train.qk_clip, 100.0);
}

// train with a threshold below the scores the model starts with: every step's record says how large
// the step's largest score was and how many groups it clipped, and the largest scores come down.
TEST(QkClip, TrainingLogsTheLargestScoreAndTheGroupsClipped) {
  const fs::path dir = fs::temp_directory_path() / ("normlab_qk_clip_" + std::to_string(getpid()));
  fs::remove_all(dir);
  RunConfig rc;
  rc.model.d_model = 16, rc.model.n_heads = 4, rc.model.n_kv_heads = 2, rc.model.n_layers = 2, rc.model.seq_len = 16;
  rc.model.positions = Positions::Rope, rc.model.init_std = 0.2;
  rc.train.steps = 6, rc.train.batch_size = 4, rc.train.seq_len = 16, rc.train.lr = 1e-2, rc.train.eval_every = 0;
  rc.train.qk_clip = 0.3;
  rc.train.out_dir = dir.string();
  rc.data.max_bytes = 20000;
  TrainOptions options;
  options.quiet = true;
  const TrainResult r = train(rc, options);
  ASSERT_EQ(r.steps_done, 6);
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  int records = 0, clipped = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] != "train") continue;
    records++;
    ASSERT_TRUE(j.contains("max_logit") && j.contains("qk_clipped")) << line;
    EXPECT_GT(j["max_logit"].get<double>(), 0.0);
    if (j["max_logit"].get<double>() > 0.3) EXPECT_GT(j["qk_clipped"].get<int>(), 0) << line;
    else EXPECT_EQ(j["qk_clipped"].get<int>(), 0) << line;
    clipped += j["qk_clipped"].get<int>();
  }
  EXPECT_EQ(records, 6);
  EXPECT_GT(clipped, 0);
  fs::remove_all(dir);
}
