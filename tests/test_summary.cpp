// test_summary.cpp: what a study's written summary and headline say, on hand-made results: the
// known warm-up effect appears or does not (at every learning rate, over seeds), divergence, Wortsman
// et al.'s LR sensitivity by hand, seed groups with loss and BLEU, an encoder-decoder's probe, spikes
// shared by the same batches, and the headline's answer in plain words.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "study/lr_sensitivity.h"
#include "study/study.h"
#include "study/summary.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::study;
using json = nlohmann::json;

namespace {

bool any_contains(const json& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.get<std::string>().find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

namespace {

json run(const std::string& placement, int warmup, double val, const std::string& status = "finished") {
  json r = {{"label", placement + " w" + std::to_string(warmup)},
            {"grid", {{"model.placement", placement}, {"train.warmup_steps", warmup}}},
            {"config", {{"model", {{"placement", json::array({placement, placement})}, {"n_layers", 2}}},
                        {"train", {{"warmup_steps", warmup}, {"lr", 3e-3}}}}},
            {"status", status}, {"unigram_entropy", 3.07}, {"loss_target", 2.6},
            {"summary", {{"val_loss", val}, {"train_loss", val}}},
            {"steps_to_target", val < 2.6 ? json(int(100 * val)) : json(nullptr)}};
  if (status == "diverged") {
    r["summary"]["val_loss"] = nullptr;
    r["diverged"] = {{"step", 17}, {"tensor", "loss"}};
  }
  return r;
}

json results_of(std::vector<json> runs) {
  return {{"study", {{"varying", {"model.placement", "train.warmup_steps"}}}}, {"runs", runs}};
}

}  // namespace

TEST(Summary, SaysWhenTheWarmupEffectAppears) {
  const json s = written_summary(results_of({run("post", 0, 3.07), run("post", 100, 2.55), run("pre", 0, 2.29),
                                             run("pre", 100, 2.22)}));
  EXPECT_TRUE(any_contains(s, "Post-LN without warm-up did worse, the known effect appears")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "warm-up helped")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "Did not get below the byte unigram entropy")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "post w0 (3.070)")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "Best final validation loss: pre w100 (2.220 nats)")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "Fastest to the loss target 2.60: pre w100 (step 222); never reached it: post w0"))
      << s.dump(1);
  EXPECT_TRUE(any_contains(s, "No run diverged")) << s.dump(1);
  // what each varied key changed: one sentence per key, not one per setting of the others
  int varying_lines = 0;
  for (const auto& line : s) varying_lines += line.get<std::string>().starts_with("Varying ");
  EXPECT_EQ(varying_lines, 2) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "Varying warmup_steps (final validation loss): at placement=post: 0 -> 3.070, 100 -> 2.550; "
                              "at placement=pre: 0 -> 2.290, 100 -> 2.220.")) << s.dump(1);
}

TEST(Summary, SaysPlainlyWhenTheEffectDoesNotAppear) {
  const json s = written_summary(results_of({run("post", 0, 2.30), run("post", 100, 2.28), run("pre", 0, 2.29),
                                             run("pre", 100, 2.22)}));
  EXPECT_TRUE(any_contains(s, "the known effect does NOT appear in this setting")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "warm-up made no clear difference")) << s.dump(1);
  EXPECT_FALSE(any_contains(s, "Did not get below")) << s.dump(1);
}

TEST(Summary, StatesTheWarmupEffectAtEveryLearningRate) {
  std::vector<json> runs;
  for (double lr : {1e-3, 1e-2})
    for (const auto& [p, w, v] : std::vector<std::tuple<std::string, int, double>>{
             {"post", 0, lr < 5e-3 ? 2.30 : 3.07}, {"post", 100, 2.5}, {"pre", 0, 2.29}, {"pre", 100, 2.2}}) {
      json r = run(p, w, v);
      r["grid"]["train.lr"] = lr;
      r["config"]["train"]["lr"] = lr;
      runs.push_back(r);
    }
  json results = results_of(runs);
  results["study"]["varying"].push_back("train.lr");
  const json s = written_summary(results);
  // one statement per learning rate: the effect at 1e-2, not at 1e-3
  int statements = 0;
  for (const auto& line : s) statements += line.get<std::string>().rfind("Known effect", 0) == 0;
  EXPECT_EQ(statements, 2) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "lr=0.001, Post-LN ended at 2.300")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "the known effect does NOT appear in this setting")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "lr=0.01, Post-LN ended at 3.070")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "Post-LN without warm-up did worse, the known effect appears")) << s.dump(1);
}

TEST(Summary, SpreadOverSeeds) {
  std::vector<json> runs;
  const double post[3] = {3.07, 2.95, 3.01}, pre[3] = {2.30, 2.28, 2.32};
  for (int seed = 1; seed <= 3; seed++)
    for (const char* p : {"post", "pre"}) {
      json r = run(p, 0, std::string(p) == "post" ? post[seed - 1] : pre[seed - 1]);
      r["grid"]["train.seed"] = seed;
      r["config"]["train"]["seed"] = seed;
      runs.push_back(r);
    }
  runs.push_back(run("post", 0, 0, "diverged"));
  runs.back()["grid"]["train.seed"] = 4;
  runs.back()["config"]["train"]["seed"] = 4;
  json results = results_of(runs);
  results["study"]["varying"] = {"model.placement", "train.seed"};
  const json s = written_summary(results);
  // naive: mean and sample standard deviation of the hand-made numbers
  auto text = [](std::vector<double> v) {
    double mean = 0, ss = 0;
    for (double x : v) mean += x / double(v.size());
    for (double x : v) ss += (x - mean) * (x - mean);
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return fmt::format("{:.3f} +- {:.3f} ({:.3f} to {:.3f}, {} seeds)", mean, std::sqrt(ss / double(v.size() - 1)), *lo, *hi,
                       v.size());
  };
  EXPECT_TRUE(any_contains(s, "placement=post: " + text({3.07, 2.95, 3.01}) + ", 1 more diverged or unfinished")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "placement=pre: " + text({2.30, 2.28, 2.32}) + ";") || any_contains(s, "placement=pre: " + text({2.30, 2.28, 2.32}) + "."))
      << s.dump(1);
  EXPECT_TRUE(any_contains(s, "the settings differ by more than twice the seed spread")) << s.dump(1);
}

// Wortsman et al.'s LR sensitivity by hand: per seed the mean over the rates of the final loss clipped at
// the start loss, minus the seed's best; a diverged run counts as the start loss; a seed missing a
// rate is left out, by name
TEST(Summary, LrSensitivityByHand) {
  std::vector<json> runs;
  const double rates[3] = {1e-3, 3e-3, 1e-2};
  // seed 1: 2.5, 2.3, diverged; seed 2: 2.6, 2.2, 6.0 (above the start 5.5); seed 3 ran two rates
  const double finals[3][3] = {{2.5, 2.3, NAN}, {2.6, 2.2, 6.0}, {2.4, 2.1, NAN}};
  for (int seed = 1; seed <= 3; seed++)
    for (int k = 0; k < (seed == 3 ? 2 : 3); k++) {
      const bool diverged = std::isnan(finals[seed - 1][k]);
      json r = run("post", 0, diverged ? 0 : finals[seed - 1][k], diverged ? "diverged" : "finished");
      r["grid"]["train.lr"] = rates[k];
      r["config"]["train"]["lr"] = rates[k];
      r["grid"]["train.seed"] = seed;
      r["train"] = {{"step", {1, 2}}, {"loss", {5.5, 5.4}}};
      // the signals: largest attention logit 10 k + seed (a null slot and a smaller step besides), and
      // |mean log Z| as large, negative
      const double top = 10.0 * k + seed;
      r["layer_log"] = {{"step", {1, 100}}, {"log_z_mean", {0.1, -top}}, {"log_z_of", "forward"},
                        {"values", {{"attn_max_logit", {{0.5, nullptr}, {-1.0, top}}}}}};
      runs.push_back(r);
    }
  json results = results_of(runs);
  results["study"]["varying"] = {"model.placement", "train.lr", "train.seed"};
  const json e = lr_sensitivity(results);
  // the mean over the counted seeds 1 and 2 (seed 3, left out, does not count): 10 k + 1.5
  EXPECT_EQ(e[0]["signals"]["max_attn_logit"], json({1.5, 11.5, 21.5})) << e[0].dump(1);
  EXPECT_EQ(e[0]["signals"]["abs_log_z"], json({1.5, 11.5, 21.5}));
  EXPECT_TRUE(any_contains(written_summary(results), "by lr, the largest attention logit 1.5, 11.5, 21.5 and the largest"));
  ASSERT_EQ(e.size(), 1u) << e.dump(1);
  const std::vector<double> want = {(0.2 + 0.0 + 3.2) / 3, (0.4 + 0.0 + 3.3) / 3};
  const json& s = e[0]["sensitivity"];
  ASSERT_EQ(s["n"], 2) << e.dump(1);
  EXPECT_NEAR(s["values"][0].get<double>(), want[0], 1e-12);
  EXPECT_NEAR(s["values"][1].get<double>(), want[1], 1e-12);
  const double mean = (want[0] + want[1]) / 2, half = 12.7062047361747 * std::fabs(want[0] - want[1]) / 2;  // t(0.975, 1) sd / sqrt(2)
  EXPECT_NEAR(s["mean"].get<double>(), mean, 1e-12);
  EXPECT_NEAR(s["lo"].get<double>(), mean - half, 1e-4);  // (stats.h's t table has 3 decimals)
  EXPECT_NEAR(s["hi"].get<double>(), mean + half, 1e-4);
  EXPECT_EQ(e[0]["best_lr"].get<double>(), 3e-3);
  EXPECT_EQ(e[0]["best_lr_by_seed"], json({3e-3, 3e-3}));
  EXPECT_NEAR(e[0]["curve"][2]["loss"].get<double>(), 5.5, 1e-12);
  ASSERT_EQ(e[0]["left_out"].size(), 1u);
  EXPECT_NE(e[0]["left_out"][0].get<std::string>().find("2 of the 3 rates"), std::string::npos);
  EXPECT_TRUE(any_contains(written_summary(results), "LR sensitivity at placement=post: 1.183 [")) << written_summary(results).dump(1);
  // each seed learned (below the unigram entropy 3.07 - 0.05) at two of the three rates
  EXPECT_EQ(e[0]["learned_rates_by_seed"], json({2, 2}));
  EXPECT_FALSE(e[0]["learned_nowhere"].get<bool>());
  EXPECT_TRUE(any_contains(written_summary(results), "learned beyond the unigram frequencies at 2, 2 of the 3 rates (by seed)"));
  // no sweep of the rate: no sensitivity
  results["study"]["varying"] = {"model.placement", "train.seed"};
  EXPECT_TRUE(lr_sensitivity(results).empty());
}

// A setting that learned at no rate (every final loss at the unigram entropy, 3.07, or diverged) has a flat
// curve and a sensitivity near 0: it is flagged, its text says there is none to read, and its seeds'
// best rates (the lowest point of a flat curve) are left out of the best rate's shift with width.
TEST(Summary, LrSensitivityOfASettingThatLearnedNowhere) {
  std::vector<json> runs;
  const double rates[3] = {1e-3, 4e-3, 1.6e-2};
  for (const std::string p : {"pre", "dyt"})
    for (int width : {32, 128})
      for (int seed = 1; seed <= 2; seed++)
        for (int k = 0; k < 3; k++) {
          const bool stuck = p == "dyt" && width == 128;
          const bool diverged = stuck && k == 2 && seed == 1;
          // pre: best at the middle rate; dyt at 32 learns at the first two rates only
          const double loss = stuck ? 3.073 + 0.0005 * k : (p == "dyt" && k == 2 ? 3.1 : 2.0 + 0.1 * std::abs(k - 1) + 0.01 * seed);
          json r = run(p, 0, diverged ? 0 : loss, diverged ? "diverged" : "finished");
          r["grid"] = {{"model.placement", p}, {"model.d_model", width}, {"train.lr", rates[k]}, {"train.seed", seed}};
          r["config"]["train"]["lr"] = rates[k];
          r["train"] = {{"step", {1, 2}}, {"loss", {5.5, 5.4}}};
          runs.push_back(r);
        }
  json results = results_of(runs);
  results["study"]["varying"] = {"model.placement", "model.d_model", "train.lr", "train.seed"};
  const json e = lr_sensitivity(results);
  ASSERT_EQ(e.size(), 4u) << e.dump(1);
  for (const json& x : e) {
    const bool stuck = x["keys"]["model.placement"] == "dyt" && x["keys"]["model.d_model"] == "128";
    EXPECT_EQ(x["learned_nowhere"].get<bool>(), stuck) << x.dump(1);
    if (x["keys"]["model.placement"] == "dyt") {
      EXPECT_EQ(x["learned_rates_by_seed"], stuck ? json({0, 0}) : json({2, 2})) << x.dump(1);
    }
  }
  const json s = written_summary(results);
  EXPECT_TRUE(any_contains(s, "LR sensitivity at placement=dyt d_model=128: none to read: over 2 seeds no run learned")) << s.dump(1);
  EXPECT_FALSE(any_contains(s, "LR sensitivity at placement=dyt d_model=128: 0.")) << s.dump(1);
  const json shifts = best_lr_shift(e);
  bool saw_dyt = false;
  for (const json& x : shifts) {
    if (x["setting"] != "placement=dyt") continue;
    saw_dyt = true;
    EXPECT_TRUE(x["shift"].is_null()) << x.dump(1);
    ASSERT_EQ(x["left_out"].size(), 2u) << x.dump(1);
    EXPECT_NE(x["left_out"][0].get<std::string>().find("learned at no rate at 128"), std::string::npos);
  }
  EXPECT_TRUE(saw_dyt) << shifts.dump(1);
}

// How far the best rate moves with depth, by hand: two parametrizations x depths 2, 4, 8 x rates 1e-3,
// 2e-3, 4e-3 x seeds 1-3. "sp": the best rate halves from 2 to 8 layers in seeds 1 and 2 and quarters in
// seed 3; "completep": it stays, but for seed 3, where it doubles. Each run's final loss is 2 + |log2(lr /
// best)| (every loss below the start 5.5, so no clipping).
TEST(Summary, BestLrShiftWithDepthByHand) {
  std::vector<json> runs;
  const double rates[3] = {1e-3, 2e-3, 4e-3};
  const auto best = [](const std::string& p, int layers, int seed) {
    if (p == "completep") return seed == 3 && layers == 8 ? 4e-3 : 2e-3;
    if (layers == 2) return 4e-3;
    if (layers == 4) return seed == 3 ? 2e-3 : 4e-3;
    return seed == 3 ? 1e-3 : 2e-3;
  };
  for (const std::string p : {"sp", "completep"})
    for (int layers : {2, 4, 8})
      for (int seed = 1; seed <= 3; seed++)
        for (double lr : rates) {
          json r = run("pre", 0, 2 + std::fabs(std::log2(lr / best(p, layers, seed))));
          r["grid"] = {{"model.parametrization", p}, {"model.n_layers", layers}, {"train.lr", lr}, {"train.seed", seed}};
          r["config"]["train"]["lr"] = lr;
          r["train"] = {{"step", {1, 2}}, {"loss", {5.5, 5.4}}};
          runs.push_back(r);
        }
  json results = results_of(runs);
  results["study"]["varying"] = {"model.parametrization", "model.n_layers", "train.lr", "train.seed"};
  const json shifts = best_lr_shift(lr_sensitivity(results));
  ASSERT_EQ(shifts.size(), 2u) << shifts.dump(1);  // one per parametrization, over model.n_layers
  for (const json& e : shifts) {
    EXPECT_EQ(e["size_key"], "model.n_layers");
    const bool sp = e["setting"] == "parametrization=sp";
    ASSERT_TRUE(sp || e["setting"] == "parametrization=completep") << e.dump(1);
    const std::vector<double> want = sp ? std::vector<double>{-1, -1, -2} : std::vector<double>{0, 0, 1};
    EXPECT_EQ(e["shift"]["values"].get<std::vector<double>>(), want);
    const double mean = (want[0] + want[1] + want[2]) / 3;
    EXPECT_NEAR(e["shift"]["mean"].get<double>(), mean, 1e-12);
    double ss = 0;
    for (double w : want) ss += (w - mean) * (w - mean);
    const double half = 4.303 * std::sqrt(ss / 2) / std::sqrt(3.0);  // t(0.975, 2)
    EXPECT_NEAR(e["shift"]["lo"].get<double>(), mean - half, 1e-3);
    EXPECT_NEAR(e["shift"]["hi"].get<double>(), mean + half, 1e-3);
    ASSERT_EQ(e["sizes"].size(), 3u);
    EXPECT_EQ(e["sizes"][0]["size"].get<double>(), 2.0);
    EXPECT_EQ(e["sizes"][2]["size"].get<double>(), 8.0);
  }
  EXPECT_TRUE(any_contains(written_summary(results), "Best lr by n_layers at parametrization=sp: 0.004 at 2, "))
      << written_summary(results).dump(1);
  // one depth only: nothing to compare
  results["study"]["varying"] = {"model.parametrization", "train.lr", "train.seed"};
  EXPECT_TRUE(best_lr_shift(lr_sensitivity(results)).empty());
}

TEST(Summary, SeedGroupsGiveMeanAndSpreadOfLossAndBleu) {
  std::vector<json> runs;
  const double post_loss[3] = {2.61, 2.58, 2.70}, pre_loss[3] = {2.55, 2.66, 2.57};
  const double post_bleu[3] = {1.5, 0.0, 2.25}, pre_bleu[3] = {3.0, 1.0, 0.5};
  for (int seed = 1; seed <= 3; seed++)
    for (const char* p : {"post", "pre"}) {
      const bool post = std::string(p) == "post";
      json r = run(p, 0, post ? post_loss[seed - 1] : pre_loss[seed - 1]);
      r["name"] = fmt::format("{}-{}", p, seed);
      r["summary"]["bleu"] = post ? post_bleu[seed - 1] : pre_bleu[seed - 1];
      for (const char* k : {"model.seed", "train.seed"}) r["grid"][k] = seed;
      runs.push_back(r);
    }
  runs.push_back(run("pre", 0, 0, "diverged"));  // counted in its group, not in the numbers
  runs.back()["name"] = "pre-4";
  runs.back()["grid"]["model.seed"] = runs.back()["grid"]["train.seed"] = 4;
  json results = results_of(runs);
  results["study"]["varying"] = {"model.placement", "model.seed", "train.seed"};
  const json g = seed_groups(results);
  ASSERT_EQ(g.size(), 2u) << g.dump(1);
  EXPECT_EQ(g[0]["setting"], "placement=post");
  EXPECT_EQ(g[1]["runs"], json({"pre-1", "pre-2", "pre-3", "pre-4"}));
  EXPECT_EQ(g[1]["finished"], 3);
  // naive: two-pass mean and sample variance
  auto check = [](const json& st, std::vector<double> v) {
    double mean = 0, ss = 0;
    for (double x : v) mean += x / 3;
    for (double x : v) ss += (x - mean) * (x - mean) / 2;
    EXPECT_EQ(st["n"], 3);
    EXPECT_NEAR(st["mean"].get<double>(), mean, 1e-12);
    EXPECT_NEAR(st["sd"].get<double>(), std::sqrt(ss), 1e-12);
    EXPECT_EQ(st["min"].get<double>(), *std::min_element(v.begin(), v.end()));
    EXPECT_EQ(st["max"].get<double>(), *std::max_element(v.begin(), v.end()));
  };
  check(g[0]["val_loss"], {2.61, 2.58, 2.70});
  check(g[0]["bleu"], {1.5, 0.0, 2.25});
  check(g[1]["val_loss"], {2.55, 2.66, 2.57});
  check(g[1]["bleu"], {3.0, 1.0, 0.5});
  EXPECT_NEAR(g[0]["bleu"]["sd"].get<double>(), 1.14564392373896, 1e-12);  // by hand: sqrt((0.25^2 + 1.25^2 + 1^2) / 2)
  // the written summary: BLEU over seeds, and these differences are within the seed spread
  const json s = written_summary(results);
  EXPECT_TRUE(any_contains(s, "validation BLEU (mean +- sample standard deviation): placement=post: 1.25 +- 1.15 (0.00 to 2.25, 3 seeds)"))
      << s.dump(1);
  EXPECT_TRUE(any_contains(s, "these seeds do not separate them")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "Best validation BLEU")) << s.dump(1);
  // the table: a BLEU column and a line per setting
  const std::string t = summary_table(results);
  EXPECT_NE(t.find("BLEU"), std::string::npos) << t;
  EXPECT_NE(t.find(fmt::format("{:<24}  val loss {:.4f} +- ", "placement=pre", (2.55 + 2.66 + 2.57) / 3)), std::string::npos) << t;
  // BLEU below 1 everywhere: said plainly, no ranking by BLEU
  for (auto& r : results["runs"])
    if (r["summary"].contains("bleu")) r["summary"]["bleu"] = r["summary"]["bleu"].get<double>() / 10;
  EXPECT_TRUE(any_contains(written_summary(results), "Every setting's mean BLEU is below 1: no setting translates yet"))
      << written_summary(results).dump(1);
  // without a seed key there are no groups
  results["study"]["varying"] = {"model.placement"};
  EXPECT_TRUE(seed_groups(results).empty());
}

TEST(Summary, SaysWhatATranslationRunSkipped) {
  json r = run("post", 0, 2.5);
  r.erase("loss_target");
  r.erase("steps_to_target");
  r.erase("unigram_entropy");
  r["skipped"] = {{"rank_collapse", "not measured on encoder-decoders"}};
  json other = run("pre", 0, 2.4);
  other.erase("loss_target");
  other.erase("steps_to_target");
  const json s = written_summary(results_of({r, other}));
  EXPECT_TRUE(any_contains(s, "Not measured, rank_collapse: not measured on encoder-decoders (post w0).")) << s.dump(1);
  EXPECT_FALSE(any_contains(s, "loss target")) << s.dump(1);
  EXPECT_EQ(summary_table(results_of({r, other})).find("to target: first step"), std::string::npos);
}

// An encoder-decoder's probe: the gradient ratio per stack, in the table and the written summary.
TEST(Summary, GivesAnEncoderDecodersGradientRatioPerStack) {
  const auto probed = [](json r, double enc, double dec) {
    const auto stack = [](int layers, double ratio) {
      return json{{"layers", std::vector<json>(size_t(layers), json::object())}, {"grad_norm_last_over_first", ratio}};
    };
    r["instruments"]["init"] = {{"arch", "encdec"}, {"dynamics", {{"encoder", stack(6, enc)}, {"decoder", stack(4, dec)}}}};
    return r;
  };
  const json results = results_of({probed(run("post", 0, 2.5), 0.23, 3.93), probed(run("pre", 0, 2.4), 0.35, 0.71),
                                   probed(run("post", 100, 2.45), 0.25, 4.5)});
  const std::string t = summary_table(results);
  EXPECT_NE(t.find(" 0.23/3.93\n"), std::string::npos) << t;
  EXPECT_NE(t.find(" 0.35/0.71\n"), std::string::npos) << t;
  EXPECT_NE(t.find("(encoder-decoders: encoder/decoder, each within its stack)"), std::string::npos) << t;
  const json s = written_summary(results);
  EXPECT_TRUE(any_contains(s, "post (6+4 layers) encoder 0.23 to 0.25, decoder 3.93 to 4.50; pre (6+4 layers) encoder "
                              "0.35, decoder 0.71.")) << s.dump(1);
  // a language model's table keeps its one ratio and note
  EXPECT_EQ(summary_table(results_of({run("post", 0, 2.5)})).find("encoder-decoders"), std::string::npos);
}

TEST(Summary, CountsADivergedPostRunAsTheEffect) {
  const json s = written_summary(results_of({run("post", 0, 0, "diverged"), run("pre", 0, 2.29)}));
  EXPECT_TRUE(any_contains(s, "Diverged: post w0 (step 17, non-finite loss)")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "Post-LN ended at diverged at step 17")) << s.dump(1);
  EXPECT_TRUE(any_contains(s, "the known effect appears")) << s.dump(1);
}

namespace {

// A run of the headline tests: placement, lr, seed (data order = train.seed), final validation loss,
// a training curve with optional planted bumps {step -> nats}.
json lr_run(const std::string& p, double lr, int seed, double val, const std::map<int, double>& bumps = {},
            const std::string& status = "finished") {
  json r = {{"label", fmt::format("{} lr={} seed={}", p, lr, seed)},
            {"grid", {{"model.placement", p}, {"train.lr", lr}, {"train.seed", seed}}},
            {"config", {{"model", {{"placement", json::array({p, p})}, {"n_layers", 2}, {"seq_len", 32}}},
                        {"train", {{"lr", lr}, {"seed", seed}, {"batch_size", 4}, {"grad_accum", 1}, {"seq_len", 0}}},
                        {"data", {{"corpus", "builtin"}}}}},
            {"status", status}, {"summary", {{"val_loss", val}, {"train_loss", val}}},
            {"train", {{"step", json::array()}, {"loss", json::array()}}}};
  for (int i = 1; i <= 200; i++) {
    const double x = 2.0 + std::exp(-i / 30.0) + 0.01 * std::sin(i * (1 + seed + lr));
    r["train"]["step"].push_back(i);
    r["train"]["loss"].push_back(x + (bumps.count(i) ? bumps.at(i) : 0.0));
  }
  if (status == "diverged") {
    r["summary"]["val_loss"] = nullptr;
    r["diverged"] = {{"step", 150}, {"tensor", "loss"}};
  }
  return r;
}

json lr_results(std::vector<json> runs) {
  return {{"study", {{"varying", {"model.placement", "train.lr", "train.seed"}}}}, {"runs", runs}};
}

// The headline's last three sentences (what ends best, the lead, stability), after the plain words.
json last_three(const json& h) {
  EXPECT_GE(h.size(), 3u) << h.dump(1);
  return json(std::vector<json>(h.end() - std::min<long>(3, long(h.size())), h.end()));
}

}  // namespace

TEST(Summary, SpikesSharedByTheSameBatchesAreTheData) {
  // seed 1: every run rises at step 100 (a hard batch); only post rises at step 150 (its own)
  std::vector<json> runs;
  for (const char* p : {"post", "pre", "sandwich"})
    runs.push_back(lr_run(p, 1e-3, 1, 2.5, std::string(p) == "post" ? std::map<int, double>{{100, 0.6}, {150, 0.8}}
                                                                       : std::map<int, double>{{100, 0.5}}));
  runs.push_back(lr_run("post", 1e-3, 2, 2.5, {{60, 0.9}}));  // seed 2: no other run drew its batches
  const json c = classify_spikes(lr_results(runs));
  ASSERT_EQ(c.size(), 4u);
  ASSERT_EQ(c[0]["spikes"].size(), 2u) << c.dump(1);
  EXPECT_EQ(c[0]["spikes"][0]["step"], 100);
  EXPECT_EQ(c[0]["spikes"][0]["kind"], "shared");
  EXPECT_EQ(c[0]["spikes"][0]["rising"], 2);
  EXPECT_EQ(c[0]["spikes"][1]["step"], 150);
  EXPECT_EQ(c[0]["spikes"][1]["kind"], "own");
  EXPECT_EQ(c[0]["spikes"][1]["others"], 2);
  EXPECT_EQ(c[0]["spikes"][1]["rising"], 0);
  EXPECT_EQ(c[1]["spikes"][0]["kind"], "shared");
  EXPECT_EQ(c[3]["spikes"][0]["kind"], "unknown");
  // one other run rising is enough: at step 170 sandwich spikes and only pre rises (by 0.2, not a spike)
  runs[1]["train"]["loss"][169] = runs[1]["train"]["loss"][169].get<double>() + 0.2;
  runs[2]["train"]["loss"][169] = runs[2]["train"]["loss"][169].get<double>() + 0.7;
  const json c2 = classify_spikes(lr_results(runs));
  ASSERT_EQ(c2[2]["spikes"].size(), 2u) << c2[2].dump(1);
  EXPECT_EQ(c2[2]["spikes"][1]["step"], 170);
  EXPECT_EQ(c2[2]["spikes"][1]["rising"], 1);
  EXPECT_EQ(c2[2]["spikes"][1]["kind"], "shared");
  const json h = last_three(headline(lr_results(runs)));
  EXPECT_NE(h[2].get<std::string>().find("post lr=0.001 seed=1 had loss spikes of its own"), std::string::npos) << h[2];
  EXPECT_NE(h[2].get<std::string>().find("the loss bumps at steps 100 and 170 were shared"), std::string::npos) << h[2];
  EXPECT_NE(h[2].get<std::string>().find("1 spike cannot be attributed"), std::string::npos) << h[2];
}

TEST(Summary, HeadlineAnswersWhichPlacementAtItsBestLearningRate) {
  // post is best at lr 1e-3 (2.40, 2.42, 2.44), pre at 3e-3 (2.50, 2.53, 2.53); post at 3e-3 diverges
  // once; pre at 1e-3 is worse. Lead 0.10, per seed 0.10, 0.11, 0.09: resolved.
  std::vector<json> runs;
  const double post1[] = {2.40, 2.42, 2.44}, post3[] = {2.60, 2.62, 0}, pre1[] = {2.70, 2.71, 2.72},
               pre3[] = {2.50, 2.53, 2.53};
  for (int s = 1; s <= 3; s++) {
    runs.push_back(lr_run("post", 1e-3, s, post1[s - 1]));
    runs.push_back(lr_run("post", 3e-3, s, post3[s - 1], {}, s == 3 ? "diverged" : "finished"));
    runs.push_back(lr_run("pre", 1e-3, s, pre1[s - 1]));
    runs.push_back(lr_run("pre", 3e-3, s, pre3[s - 1]));
  }
  json all = headline(lr_results(runs));
  ASSERT_EQ(all.size(), 3u) << all.dump(1);  // no unigram entropy in these runs: nothing said about learning
  for (auto& r : runs) r["unigram_entropy"] = 3.07;
  all = headline(lr_results(runs));
  // first in plain words, per learning rate
  ASSERT_EQ(all.size(), 5u) << all.dump(1);
  EXPECT_EQ(all[0], "At lr 0.001, both learned.");
  EXPECT_EQ(all[1], "At lr 0.003, Post-LN learned in 2 of 3 seeds (1 diverged), while Pre-LN learned.");
  json h = last_three(all);
  EXPECT_EQ(h[0], "At its own best learning rate, Post-LN ends lowest (final validation loss 2.420 +- 0.020 nats per "
                  "byte over 3 seeds, at lr 0.001), then Pre-LN (2.520 +- 0.017, lr 0.003).");
  // paired by seed, by hand: differences 0.10, 0.11, 0.09 (sd 0.01), se 0.01 / sqrt(3) = 0.005774,
  // t(2) = 4.303: 0.1 -+ 0.02484 (Welch over the groups would give 0.043 to 0.157)
  EXPECT_EQ(h[1], "Its lead over Pre-LN (0.100 nats) is resolved at these seeds (95% interval of the gap 0.075 to 0.125, "
                  "paired by seed, 3 seeds).");
  EXPECT_NE(h[2].get<std::string>().find("1 of 12 runs diverged (post lr=0.003 seed=3)"), std::string::npos) << h[2];
  // pre at lr 1e-2 has one seed done of three (and the lowest loss): left out of the choice, named
  std::vector<json> part = runs;
  part.push_back(lr_run("pre", 1e-2, 1, 2.10));
  const json with_part = headline(lr_results(part));
  const auto answer = std::find_if(with_part.begin(), with_part.end(),
                                   [](const json& x) { return x.get<std::string>().rfind("At its own best", 0) == 0; });
  ASSERT_NE(answer, with_part.end()) << with_part.dump(1);
  EXPECT_EQ(*answer, h[0]);  // the same answer as without it
  EXPECT_EQ(*(answer + 1), "Left out of the best-rate choice until their seeds finish: placement=pre lr=0.01 (1 of 3 seeds).");
  // and while those seeds have not run, the study says first that it is part-way
  part.push_back(lr_run("pre", 1e-2, 2, 0, {}, "not run"));
  part.push_back(lr_run("pre", 1e-2, 3, 0, {}, "interrupted"));
  EXPECT_EQ(headline(lr_results(part))[0], "The study is part-way (2 of its 15 runs have not finished): what follows reads "
                                           "the runs so far and is not its answer.");
  // with spreads as large as the gap the lead is not resolved
  for (auto& r : runs)
    if (r["grid"]["train.seed"] == 2 && r["status"] == "finished")
      r["summary"]["val_loss"] = r["summary"]["val_loss"].get<double>() + (r["grid"]["model.placement"] == "post" ? 0.3 : -0.3);
  h = last_three(headline(lr_results(runs)));
  EXPECT_NE(h[1].get<std::string>().find("not distinguishable from seed noise"), std::string::npos) << h[1];
  // without seeds: one run per setting, said plainly
  json one = lr_results({lr_run("post", 1e-3, 1, 2.40), lr_run("pre", 1e-3, 1, 2.45)});
  one["study"]["varying"] = {"model.placement"};
  h = last_three(headline(one));
  EXPECT_EQ(h[0], "Lowest final validation loss: placement=post (2.400 nats per byte), then placement=pre (2.450).");
  EXPECT_NE(h[1].get<std::string>().find("comes from one run per setting"), std::string::npos) << h[1];
}

TEST(Summary, HeadlineSaysInPlainWordsWhatLearnedInEachSetting) {
  // the default study's shape: four placements with and without warm-up at 4 layers, post and pre at
  // 12 with warm-up; unigram entropy 3.074. Post-LN and DeepNorm stay at it without warm-up, Post-LN
  // at 12 layers too; the rest learn.
  auto run = [](const std::string& p, int warmup, int layers, double val) {
    json r = lr_run(p, 3e-3, 1, val);
    r["label"] = fmt::format("{}, warmup={}, layers={}", p, warmup, layers);
    r["grid"] = {{"model.placement", p}, {"train.warmup_steps", warmup}, {"model.n_layers", layers}};
    r["unigram_entropy"] = 3.074;
    r["unigram_unit"] = "byte";
    return r;
  };
  std::vector<json> runs;
  const std::map<std::string, std::pair<double, double>> four = {
      {"post", {3.073, 2.550}}, {"pre", {2.288, 2.216}}, {"sandwich", {2.431, 2.346}}, {"deepnorm", {3.030, 2.316}}};
  for (int warmup : {0, 100})
    for (const char* p : {"post", "pre", "sandwich", "deepnorm"})
      runs.push_back(run(p, warmup, 4, warmup ? four.at(p).second : four.at(p).first));
  runs.push_back(run("post", 100, 12, 3.077));
  runs.push_back(run("pre", 100, 12, 2.206));
  json results = {{"study", {{"varying", {"model.placement", "train.warmup_steps", "model.n_layers"}}}}, {"runs", runs}};
  json h = headline(results);
  ASSERT_EQ(h.size(), 6u) << h.dump(1);
  // 3.030 is within 0.05 of 3.074: DeepNorm without warm-up learned only the frequencies too
  EXPECT_EQ(h[0], "Without warm-up at 4 layers, Post-LN and DeepNorm learned nothing beyond byte frequencies (a final "
                  "validation loss at the byte unigram entropy, 3.074 nats, or within 0.05 of it), while Pre-LN and "
                  "Sandwich-LN learned.");
  EXPECT_EQ(h[1], "With 100 warm-up steps at 4 layers, all four learned.");
  EXPECT_EQ(h[2], "With 100 warm-up steps at 12 layers, Post-LN learned nothing beyond byte frequencies, while Pre-LN "
                  "learned.");
  EXPECT_NE(h[3].get<std::string>().find("Lowest final validation loss: placement=pre"), std::string::npos) << h[3];
  // a run whose first layer's gradient at initialization is 1e-13 of the last's: said, with the layers
  runs[8]["instruments"]["init"]["dynamics"]["layers"] = json::array();
  for (int l = 0; l < 12; l++)
    runs[8]["instruments"]["init"]["dynamics"]["layers"].push_back({{"layer", l}, {"grad_norm", l == 0 ? 2e-13 : 0.5}});
  results["runs"] = runs;
  h = headline(results);
  ASSERT_EQ(h.size(), 7u) << h.dump(1);
  EXPECT_EQ(h[3], "Gradients vanished in the lower layers (at most 1e-06 of the largest layer's) in post, warmup=100, "
                  "layers=12 (layer 0's gradient norm 2.0e-13, layer 1's 0.5, at initialization).");
  // a ratio of 1e-3 is not vanishing
  runs[8]["instruments"]["init"]["dynamics"]["layers"][0]["grad_norm"] = 5e-4;
  results["runs"] = runs;
  EXPECT_EQ(headline(results).size(), 6u);
  // the same from the per-layer log at its last step
  runs[8]["layer_log"] = {{"step", {1, 400}}, {"rows", {{{"layer", 0}}, {{"layer", 0}}, {{"layer", 1}}}},
                          {"values", {{"grad_norm_total", {{0.1, 0.2, 0.3}, {1e-14, 3e-13, 0.4}}}}}};
  results["runs"] = runs;
  h = headline(results);
  ASSERT_EQ(h.size(), 7u) << h.dump(1);
  EXPECT_NE(h[3].get<std::string>().find("(layer 0's gradient norm 1.0e-14, layer 1's 0.4, at step 400)"),
            std::string::npos) << h[3];
  // beyond six settings of the other keys, one tally per family: 7 learning rates, post stuck at 3
  std::vector<json> sweep;
  for (int k = 0; k < 7; k++)
    for (const char* p : {"post", "pre"}) {
      json r = lr_run(p, 1e-3 * (k + 1), 1, std::string(p) == "post" && k >= 4 ? 3.07 : 2.4);
      r["unigram_entropy"] = 3.074;
      sweep.push_back(r);
    }
  json swept = lr_results(sweep);
  swept["study"]["varying"] = {"model.placement", "train.lr"};
  EXPECT_EQ(headline(swept)[0], "Learned (every seed below the byte unigram entropy by more than 0.05 nats) in the "
                                "settings of the other varied keys: Post-LN in 4 of 7 and Pre-LN in 7 of 7.");
  // a key not crossed with the placement (DyT is Pre-LN's order with another norm) is its own family
  // in the tally: Pre-LN with DyT, which learned nowhere, is not counted inside Pre-LN
  for (auto& r : sweep) r["grid"]["model.norm"] = "rmsnorm";
  for (int k = 0; k < 7; k++) {
    json r = lr_run("pre", 1e-3 * (k + 1), 1, 3.07);
    r["unigram_entropy"] = 3.074;
    r["grid"]["model.norm"] = "dyt";
    sweep.push_back(r);
  }
  swept = lr_results(sweep);
  swept["study"]["varying"] = {"model.placement", "model.norm", "train.lr"};
  EXPECT_EQ(headline(swept)[0], "Learned (every seed below the byte unigram entropy by more than 0.05 nats) in the "
                                "settings of the other varied keys: Post-LN in 4 of 7, Pre-LN with norm = rmsnorm in 7 "
                                "of 7 and Pre-LN with norm = dyt in 0 of 7.");
}

