// test_health.cpp: the warnings of a run that has stopped learning (train/health.h): the rules on
// constructed sequences of losses and gradient norms, a run made to die (a learning rate far too high
// for a Post-LN without warm-up) that says so and a healthy run that says nothing, and the ratio of
// two norms that is not a ratio when its denominator is 0 (analysis/stats.h); and spike scores (train/spikes.h).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/stats.h"
#include "model/config.h"
#include "model/model.h"
#include "train/health.h"
#include "train/spikes.h"
#include "train/run_config.h"
#include "train/trainer.h"

using namespace normlab;
namespace fs = std::filesystem;

TEST(Health, TheUnigramLevelIsFlaggedAtTwoEvaluationsInARowAfterTheQuietSteps) {
  RunHealth h(3.0, "byte", 100);
  EXPECT_FALSE(h.on_eval(50, 3.1));   // within the quiet steps
  EXPECT_FALSE(h.on_eval(100, 3.1));  // (100 is still quiet)
  EXPECT_FALSE(h.on_eval(150, 2.96)); // at the level (3.0 - 0.05 = 2.95): once
  EXPECT_FALSE(h.on_eval(200, 2.90)); // below it: the count starts again
  EXPECT_FALSE(h.on_eval(250, 2.99));
  const auto w = h.on_eval(300, 3.2);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->what, "unigram");
  EXPECT_EQ(w->step, 300);
  EXPECT_NE(w->text.find("byte unigram entropy 3.0000"), std::string::npos) << w->text;
  EXPECT_FALSE(h.on_eval(350, 3.2));  // said once
  EXPECT_EQ(h.at_end(400, 3.0).size(), 1u);  // and again at the end while it holds
  EXPECT_TRUE(h.at_end(400, 2.5).empty());
  RunHealth unknown(std::nan(""), "token", 0);  // a token file: no entropy, no judgement
  EXPECT_FALSE(unknown.on_eval(10, 9.0));
  EXPECT_FALSE(unknown.on_eval(20, 9.0));
  EXPECT_TRUE(unknown.at_end(30, 9.0).empty());
}

TEST(Health, VanishedBlockGradientsAreFlaggedAfterTenStepsInARow) {
  RunHealth h(3.0, "byte", 0);
  for (long s = 1; s <= 9; s++) EXPECT_FALSE(h.on_gradient(s, 0.0, 1.0));
  EXPECT_FALSE(h.on_gradient(10, 1e-3, 1.0));  // a live step: the count starts again
  for (long s = 11; s <= 19; s++) EXPECT_FALSE(h.on_gradient(s, 1e-7, 1.0));
  const auto w = h.on_gradient(20, 0.0, 1.0);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->what, "blocks_vanished");
  EXPECT_EQ(h.at_end(20, 2.0).size(), 1u);
  EXPECT_FALSE(h.on_gradient(21, 0.5, 1.0));
  EXPECT_TRUE(h.at_end(21, 2.0).empty());  // recovered by the end
  RunHealth zero(3.0, "byte", 0);  // a zero whole gradient (a constant loss) is no vanished share
  for (long s = 1; s <= 20; s++) EXPECT_FALSE(zero.on_gradient(s, 0.0, 0.0));
}

namespace {

// A run of a small byte GPT (heads of 16; the same depth, data and evaluations for both runs)
TrainResult small_run(const fs::path& out, const std::string& placement, int width, int T, int batch, double lr,
                      long warmup, long steps) {
  const nlohmann::json doc = {
      {"model", {{"d_model", width}, {"n_heads", width / 16}, {"n_layers", 2}, {"seq_len", T}, {"placement", placement}}},
      {"train", {{"steps", steps}, {"batch_size", batch}, {"lr", lr}, {"warmup_steps", warmup}, {"eval_every", 50},
                 {"eval_batches", 4}, {"out_dir", out.string()}, {"checkpoint_every", 0}}}};
  TrainOptions quiet;
  quiet.quiet = true;
  return train(run_config_from_json(doc, "test"), quiet);
}

}  // namespace

TEST(Health, ARunMadeToDieSaysSoAndAHealthyRunSaysNothing) {
  const fs::path dir = fs::temp_directory_path() / ("normlab_test_health_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const TrainResult dead = small_run(dir / "dead", "post", 32, 32, 8, 0.05, 0, 300);
  ASSERT_FALSE(dead.diverged);
  ASSERT_GE(dead.warnings.size(), 2u);  // while it ran, and at its end
  EXPECT_NE(dead.warnings.front().find("unigram entropy"), std::string::npos) << dead.warnings.front();
  EXPECT_NE(dead.warnings.back().find("at the end of the run (step 300)"), std::string::npos) << dead.warnings.back();
  int records = 0;
  std::ifstream in(dir / "dead" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "warning") records++;
    if (j["type"] == "summary") { EXPECT_EQ(j["warnings"].size(), dead.warnings.size()); }
  }
  EXPECT_EQ(records, int(dead.warnings.size()));
  // healthy: it leaves the unigram level within 50 steps (2.70 against 3.07 at step 50, 2.24 at the end,
  // on the AVX-512 and AVX2 paths alike), far from the warning's threshold
  const TrainResult healthy = small_run(dir / "healthy", "pre", 64, 64, 16, 3e-3, 30, 400);
  EXPECT_LT(healthy.last_val_loss, healthy.unigram_entropy - 0.2);
  EXPECT_TRUE(healthy.warnings.empty()) << healthy.warnings.front();
  fs::remove_all(dir);
}

TEST(Health, TheBlocksAreEveryParameterUnderALayerPrefix) {
  ModelConfig cfg;
  cfg.d_model = 16, cfg.n_heads = 2, cfg.n_layers = 2, cfg.seq_len = 8;
  Model<float> m(cfg);
  size_t in_blocks = 0;
  for (const auto& [offset, n] : block_ranges(m.table(), cfg)) in_blocks += n;
  size_t expected = 0;
  for (const ParamSpec& s : m.table().specs)
    if (s.name.starts_with("h.")) expected += s.numel;
  EXPECT_EQ(in_blocks, expected);
  EXPECT_LT(in_blocks, m.table().total);  // the embeddings and the final norm are not blocks
  std::vector<float> g(m.table().total, 0.0f);
  for (const auto& [offset, n] : block_ranges(m.table(), cfg)) g[offset] = 3, g[offset + n - 1] += 4;
  double expected_sq = 0;
  for (const auto& [offset, n] : block_ranges(m.table(), cfg)) expected_sq += n == 1 ? 49 : 25;
  EXPECT_NEAR(ranges_norm(g, block_ranges(m.table(), cfg)), std::sqrt(expected_sq), 1e-9);
}

TEST(NormRatio, AZeroDenominatorIsNoRatio) {
  EXPECT_DOUBLE_EQ(analysis::norm_ratio(3, 2), 1.5);
  EXPECT_TRUE(std::isnan(analysis::norm_ratio(0, 0)));
  EXPECT_TRUE(std::isnan(analysis::norm_ratio(1, 0)));
  EXPECT_TRUE(std::isnan(analysis::norm_ratio(INFINITY, 1)));
  EXPECT_EQ(analysis::ratio_text(analysis::norm_ratio(0, 0), 3), "undefined (0 / 0)");
  EXPECT_EQ(analysis::ratio_text(0.123456, 3), "0.123");
}

// Spike scores (train/spikes.h) by hand: 128 values alternating 1 and 3 (mean 2, sd 1, so a spike is
// above 8): 8.5 is one; then the window holds 127 of them and 8.5 (mean 2.06, sd 1.15, a spike above
// 8.95), so 9.5 is one and 8.5 would not be; a value of 3 is not; a flat history (sd 0) judges
// nothing; fewer than 128 steps give no score.
TEST(Spikes, AStepIsASpikeAboveSixSdOfThePrevious128) {
  std::vector<long> steps;
  std::vector<double> loss, grad;
  for (int i = 0; i < 128; i++) steps.push_back(i + 1), loss.push_back(i % 2 ? 3 : 1), grad.push_back(5);
  for (double v : {8.5, 9.5, 3.0}) steps.push_back(long(steps.size()) + 1), loss.push_back(v), grad.push_back(5);
  grad.back() = 6;  // after 130 equal values: sd 0, no judgement
  const SpikeScores s = spike_scores(steps, loss, grad);
  EXPECT_EQ(s.steps, 131);
  EXPECT_EQ(s.first_loss_spike, 129);
  EXPECT_DOUBLE_EQ(s.loss, 2.0 / 131);
  EXPECT_EQ(s.first_grad_norm_spike, -1);
  EXPECT_DOUBLE_EQ(s.grad_norm, 0.0);
  EXPECT_DOUBLE_EQ(s.any, 2.0 / 131);
  // 9.5 against the window after 8.5 joined it, by hand
  double mean = 0, var = 0;
  for (int i = 1; i < 128; i++) mean += (i % 2 ? 3.0 : 1.0) / 128;
  mean += 8.5 / 128;
  for (int i = 1; i < 128; i++) var += std::pow((i % 2 ? 3.0 : 1.0) - mean, 2) / 128;
  var += std::pow(8.5 - mean, 2) / 128;
  EXPECT_GT(9.5, mean + 6 * std::sqrt(var));
  EXPECT_LT(8.5, mean + 6 * std::sqrt(var));
  steps.resize(127), loss.resize(127), grad.resize(127);
  EXPECT_TRUE(std::isnan(spike_scores(steps, loss, grad).any));
}

// ... and from a run's metrics.jsonl: a run's summary holds the scores of its "train" records (a
// Post-LN at lr 0.05 without warm-up, as above; 0 spikes by this rule), and a file's last record of a
// step counts (a resumed run's), the other records and torn lines ignored
TEST(Spikes, ARunsSummaryHoldsTheScoresOfItsTrainRecords) {
  const fs::path dir = fs::temp_directory_path() / ("normlab_test_spikes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const TrainResult r = small_run(dir / "run", "post", 32, 32, 8, 0.05, 0, 300);
  std::vector<long> steps;
  std::vector<double> loss, grad;
  nlohmann::json summary;
  std::ifstream in(dir / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "train") steps.push_back(j["step"]), loss.push_back(j["loss"]), grad.push_back(j["grad_norm"]);
    if (j["type"] == "summary") summary = j;
  }
  ASSERT_EQ(steps.size(), 300u);
  const SpikeScores want = spike_scores(steps, loss, grad);
  EXPECT_DOUBLE_EQ(r.spikes.any, want.any);
  EXPECT_DOUBLE_EQ(summary["spike_score"].get<double>(), want.any);
  EXPECT_DOUBLE_EQ(summary["spike_score_loss"].get<double>(), want.loss);
  EXPECT_DOUBLE_EQ(summary["spike_score_grad_norm"].get<double>(), want.grad_norm);
  EXPECT_FALSE(std::isnan(want.any));
  std::ofstream f(dir / "hand.jsonl");
  for (int i = 1; i <= 130; i++) {
    const double v = i <= 128 ? (i % 2 ? 1.0 : 3.0) : 100.0;
    f << nlohmann::json{{"type", "train"}, {"step", i}, {"loss", i == 129 ? 2.0 : v}, {"grad_norm", v}}.dump() << "\n";
    if (i == 129)
      f << nlohmann::json{{"type", "val"}, {"step", i}, {"loss", 50.0}}.dump() << "\n{\"type\": \"tr\n"
        << R"({"type": "train", "step": "129", "loss": 9, "grad_norm": 9})" << "\n"
        << R"({"type": 3, "step": 129})" << "\n[1, 2]\n";
  }
  f << nlohmann::json{{"type", "train"}, {"step", 129}, {"loss", 100.0}, {"grad_norm", 1.0}}.dump() << "\n";  // resumed
  f.close();
  const SpikeScores hand = spike_scores_of_metrics((dir / "hand.jsonl").string());
  EXPECT_EQ(hand.steps, 130);
  EXPECT_EQ(hand.first_loss_spike, 129);        // the last record of step 129 (loss 100)
  EXPECT_EQ(hand.first_grad_norm_spike, 130);   // (its gradient norm 1 is none)
  EXPECT_DOUBLE_EQ(hand.any, 2.0 / 130);
  fs::remove_all(dir);
}
