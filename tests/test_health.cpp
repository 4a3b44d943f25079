// test_health.cpp: the warnings of a run that has stopped learning (train/health.h): the rules on
// constructed sequences of losses and gradient norms, a run made to die (a learning rate far too high
// for a Post-LN without warm-up) that says so and a healthy run that says nothing, and the ratio of
// two norms that is not a ratio when its denominator is 0 (analysis/stats.h).
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
    if (j["type"] == "summary") EXPECT_EQ(j["warnings"].size(), dead.warnings.size());
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
