// test_onsets.cpp: which signal moved first in a learning-rate sweep (study/onsets.h), on hand-made
// runs whose steps are known: the step from which a run's loss stays behind its seed's best rate, the
// first step each signal leaves the best run's range, the leads, a diverged run, a log Z read from the
// logits' gradient (not used), a setting whose best rate learned nothing (no reference), the text; and
// the every-step signals a study reads from a run's metrics.jsonl (run_metrics.h), which the onsets use
// where the report's per-layer series keep only some steps.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>
#include <string>
#include <vector>

#include "study/lr_sensitivity.h"
#include "study/onsets.h"
#include "study/run_metrics.h"
#include "study/summary.h"

using namespace normlab::study;
using json = nlohmann::json;

namespace {

constexpr double kRates[3] = {1e-3, 4e-3, 1.6e-2};

// The reference's training loss at a step (the best rate's run): 5 - 0.02 step
double ref_loss(int step) { return 5.0 - 0.02 * step; }

// A run of setting `p` at kRates[k] for `seed`: a training curve at steps 1, 10, ..., 100 (loss and
// grad_norm), a per-layer log at steps 1, 50, 100 (the largest attention logit of two layers, mean log Z)
json sweep_run(const std::string& p, int k, int seed, double val, const std::vector<double>& loss_offset,
               const std::vector<double>& grad_norm, const std::vector<double>& attn, const std::vector<double>& log_z) {
  json r = {{"label", p}, {"grid", {{"model.placement", p}, {"train.lr", kRates[k]}, {"train.seed", seed}}},
            {"config", {{"model", {{"placement", json::array({p, p})}, {"n_layers", 2}}},
                        {"train", {{"lr", kRates[k]}, {"seed", seed}, {"warmup_steps", 10}}}}},
            {"status", "finished"}, {"unigram_entropy", 3.07}, {"loss_target", 1.0}, {"steps_to_target", nullptr},
            {"summary", {{"val_loss", val}, {"train_loss", val}}},
            {"train", {{"step", json::array()}, {"loss", json::array()}, {"grad_norm", json::array()}}}};
  for (size_t i = 0; i < loss_offset.size(); i++) {
    const int step = i == 0 ? 1 : int(10 * i);
    r["train"]["step"].push_back(step);
    r["train"]["loss"].push_back(ref_loss(step) + loss_offset[i]);
    r["train"]["grad_norm"].push_back(grad_norm[i]);
  }
  json steps = json::array(), attn_rows = json::array();
  for (size_t i = 0; i < attn.size(); i++) {
    steps.push_back(i == 0 ? 1 : int(50 * i));
    attn_rows.push_back({0.5, i % 2 ? -attn[i] : attn[i]});  // the largest |value| of the layers counts
  }
  r["layer_log"] = {{"step", steps}, {"values", {{"attn_max_logit", attn_rows}}}, {"log_z_mean", log_z}, {"log_z_of", "forward"}};
  return r;
}

const std::vector<double> kFlat(11, 0.0);
const std::vector<double> kOnes = {2.0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // the reference's grad norm: largest 2.0 at step 1

json sweep() {
  std::vector<json> runs;
  for (int seed = 1; seed <= 2; seed++) {
    // the lowest rate ends worse than the best, and is never read (it is below the best rate)
    runs.push_back(sweep_run("post", 0, seed, 2.4, std::vector<double>(11, 0.5), kOnes, {1, 50, 80}, {5.5, 9, 9}));
    runs.push_back(sweep_run("post", 1, seed, 2.0, kFlat, kOnes, {1, 5, 8}, {5.5, 4, 3}));
  }
  // seed 1, the highest rate: ahead to step 40, behind at 50, level at 60, behind from 70 to the end; the
  // attention logit leaves the reference's range (8) at step 50 (first), |mean log Z| (5.5) at 150 (in
  // range at 100: after), the gradient norm (2.0) never (its 2.0 at step 1 is not above the reference's)
  runs.push_back(sweep_run("post", 2, 1, 2.3, {-0.1, -0.1, -0.1, -0.1, -0.1, 0.2, 0.0, 0.3, 0.3, 0.3, 0.3},
                           {2.0, 1, 1, 1, 1, 1, 1, 1, 1, 1.5, 1}, {1, 9, 20, 20}, {5.5, 5.0, 5.2, -6.0}));
  // seed 2, the highest rate: diverged at step 35, ahead until then (level at 30); its attention logit
  // logged at step 1 only and its gradient norm to step 30: neither can be ordered; its log Z read from
  // the logits' gradient
  json diverged = sweep_run("post", 2, 2, 0, {-0.1, -0.1, -0.1, -0.1}, {2.0, 1, 1, 1}, {1}, {5.5});
  diverged["status"] = "diverged";
  diverged["summary"] = {{"val_loss", nullptr}, {"train_loss", nullptr}, {"diverged_step", 35}};
  diverged["diverged"] = {{"step", 35}, {"tensor", "loss"}};
  diverged["layer_log"].erase("log_z_of");
  runs.push_back(diverged);
  // dyt learned nothing at any rate: no reference, no entry
  for (int seed = 1; seed <= 2; seed++)
    for (int k = 0; k < 3; k++) runs.push_back(sweep_run("dyt", k, seed, 3.07 + 0.001 * k, kFlat, kOnes, {1, 1, 1}, {5.5, 5.5, 5.5}));
  return {{"study", {{"varying", {"model.placement", "train.lr", "train.seed"}}}}, {"runs", runs}};
}

}  // namespace

TEST(Onsets, StepsAndLeadsByHand) {
  const json results = sweep();
  const json e = instability_onsets(results, lr_sensitivity(results));
  ASSERT_EQ(e.size(), 1u) << e.dump(1);  // dyt's best rate learned nothing: nothing to read against
  EXPECT_EQ(e[0]["setting"], "placement=post");
  EXPECT_EQ(e[0]["layer_log_every"], 50);
  EXPECT_EQ(e[0]["train_log_every"], 10);
  ASSERT_EQ(e[0]["runs"].size(), 2u) << e.dump(1);
  const json& a = e[0]["runs"][0];
  EXPECT_EQ(a["lr"].get<double>(), 1.6e-2);
  EXPECT_EQ(a["best_lr"].get<double>(), 4e-3);
  EXPECT_EQ(a["outcome"], "fell behind");
  EXPECT_EQ(a["loss_behind_step"], 70) << a.dump(1);  // not 50: level again at 60
  EXPECT_EQ(a["loss_level_until"], 60);
  const json& attn = a["signals"]["max_attn_logit"];
  EXPECT_EQ(attn["reference_max"].get<double>(), 8.0);
  EXPECT_EQ(attn["onset_step"], 50);
  EXPECT_EQ(attn["in_range_until"], 1);
  EXPECT_EQ(attn["lead"], 20);
  EXPECT_EQ(attn["order"], "before");
  const json& log_z = a["signals"]["abs_log_z"];
  EXPECT_EQ(log_z["onset_step"], 150);
  EXPECT_EQ(log_z["in_range_until"], 100);
  EXPECT_EQ(log_z["lead"], -80);
  EXPECT_EQ(log_z["order"], "after");
  const json& grad = a["signals"]["grad_norm"];
  EXPECT_EQ(grad["reference_max"].get<double>(), 2.0);
  EXPECT_TRUE(grad["onset_step"].is_null());
  EXPECT_EQ(grad["order"], "never");
  const json& b = e[0]["runs"][1];
  EXPECT_EQ(b["outcome"], "diverged");
  EXPECT_EQ(b["loss_behind_step"], 35) << b.dump(1);
  EXPECT_EQ(b["loss_level_until"], 30);
  EXPECT_TRUE(b["signals"]["max_attn_logit"]["onset_step"].is_null());
  EXPECT_EQ(b["signals"]["max_attn_logit"]["order"], "unresolved");
  EXPECT_TRUE(b["signals"]["abs_log_z"].is_null()) << b.dump(1);  // log Z from the gradient: not a reading
  EXPECT_EQ(b["signals"]["grad_norm"]["order"], "unresolved");
  const std::vector<std::string> text = instability_onsets_text(e);
  ASSERT_EQ(text.size(), 2u);
  EXPECT_NE(text[1].find("placement=post: the loss fell behind in 2 of 2 runs (step lr 0.016 seed ?/1: 70, lr 0.016 seed ?/2: 35)"),
            std::string::npos) << text[1];
  EXPECT_NE(text[1].find("the largest attention logit first in 1 (by 20 steps, median; 20 to 20), after the loss in 0, never out "
                         "of range in 0, too close to order at the logs' spacing in 1;"),
            std::string::npos) << text[1];
  EXPECT_NE(text[1].find("|mean log Z| first in 0, after the loss in 1, never out of range in 0, too close to order at the logs' "
                         "spacing in 0, not logged in 1;"),
            std::string::npos) << text[1];
  EXPECT_NE(text[1].find("the gradient norm first in 0, after the loss in 0, never out of range in 1, too close to order at the "
                         "logs' spacing in 1 (the per-layer log every 50 steps, the loss every 10)."),
            std::string::npos) << text[1];
  bool in_summary = false;
  for (const json& line : written_summary(results)) in_summary |= line.get<std::string>() == text[1];
  EXPECT_TRUE(in_summary);
}

// A run that ends level with its reference, or a sweep with no run above a best rate, says nothing.
TEST(Onsets, NothingToSayWithoutARunThatFellBehind) {
  json results = sweep();
  json& runs = results["runs"];
  runs.erase(runs.begin() + 4, runs.begin() + 6);  // drop the two highest-rate post runs
  runs.push_back(sweep_run("post", 2, 1, 2.1, kFlat, kOnes, {1, 5, 8}, {5.5, 4, 3}));
  runs.push_back(sweep_run("post", 2, 2, 2.1, std::vector<double>(11, -0.01), kOnes, {1, 5, 8}, {5.5, 4, 3}));
  const json e = instability_onsets(results, lr_sensitivity(results));
  ASSERT_EQ(e.size(), 1u) << e.dump(1);
  for (const json& r : e[0]["runs"]) {
    EXPECT_EQ(r["outcome"], "level") << r.dump(1);
    EXPECT_TRUE(r["loss_behind_step"].is_null());
  }
  EXPECT_TRUE(instability_onsets_text(e).empty());
  results["study"]["varying"] = {"model.placement", "train.seed"};
  EXPECT_TRUE(instability_onsets(results, lr_sensitivity(results)).empty());
}

// A run's per-layer log of more records than the report keeps: layer_log.signals has every logged step,
// the largest |attention logit| over the sub-layers and the mean log Z (only when read from the forward).
TEST(Onsets, EveryLoggedStepsSignalsFromTheMetrics) {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("normlab_onsets_" + std::to_string(::getpid()) + ".jsonl");
  for (const bool forward : {true, false}) {
    {
      std::ofstream out(path);
      for (int k = 0; k <= 100; k++) {  // steps 1, 10, ..., 1000: 101 records, more than the 60 kept
        json head = {{"log_z_mean", -0.5 * k}, {"log_z_max", 1.0}};
        if (forward) head["log_z_of"] = "forward";
        json rec = {{"type", "layers"}, {"step", k == 0 ? 1 : 10 * k}, {"head", head}, {"stacks", json::array()},
                    {"sublayers", {{{"slot", 0}, {"layer", 0}, {"sub", "attn"}, {"stack", "decoder"}, {"attn_max_logit", 2.0 * k}},
                                   {{"slot", 1}, {"layer", 0}, {"sub", "mlp"}, {"stack", "decoder"}},
                                   {{"slot", 2}, {"layer", 1}, {"sub", "attn"}, {"stack", "decoder"}, {"attn_max_logit", -3.0 * k}}}}};
        out << rec.dump() << "\n";
      }
    }
    json run = json::object();
    read_metrics(path, run);
    const json& log = run["layer_log"];
    EXPECT_EQ(log["step"].size(), 60u);  // the report's series: thinned
    const json& sig = log["signals"];
    ASSERT_EQ(sig["step"].size(), 101u) << sig.dump();
    EXPECT_EQ(sig["step"][3], 30);
    EXPECT_EQ(sig["max_attn_logit"][3].get<double>(), 9.0);  // |-3 k| over 2 k and a slot with none
    EXPECT_EQ(sig.contains("log_z_mean"), forward);
    if (forward) { EXPECT_EQ(sig["log_z_mean"][3].get<double>(), -1.5); }
  }
  fs::remove(path);
}

// Where a run has the every-step signals, its onsets read them, not the report's thinned series.
TEST(Onsets, ReadTheEveryStepSignalsWhereARunHasThem) {
  json results = sweep();
  json& a = results["runs"][4];  // seed 1 at the highest rate: its attention logit leaves the range (8) at 50
  ASSERT_EQ(a["train"]["loss"].size(), 11u);
  a["layer_log"]["signals"] = {{"step", {1, 10, 20, 30, 40, 50}}, {"max_attn_logit", {1, 2, 3, 8.5, 9, 9}},
                               {"log_z_mean", {5.5, 5, 5, 5, 5, 5}}};
  const json e = instability_onsets(results, lr_sensitivity(results));
  const json& attn = e[0]["runs"][0]["signals"]["max_attn_logit"];
  EXPECT_EQ(attn["onset_step"], 30) << e.dump(1);
  EXPECT_EQ(attn["in_range_until"], 20);
  EXPECT_EQ(attn["order"], "before");
  // |mean log Z| stays in range, but its log ends at step 50, before the loss fell behind (70): unordered
  EXPECT_EQ(e[0]["runs"][0]["signals"]["abs_log_z"]["order"], "unresolved");
}
