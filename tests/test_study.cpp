// test_study.cpp: studies: grid expansion (product per [[grid]], union over grids), labels from the
// keys that vary, --set overrides and their conflicts, strict errors; steps-to-target and loss spikes
// against naive computations; a side-by-side job's records read back, and a damaged one kept instead
// of lost. The written summary and the headline are tests/test_summary.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <string>
#include <tuple>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

#include "study/jobs.h"
#include "study/start.h"
#include "study/study.h"
#include "study/summary.h"
#include "train/run_config.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::study;
using json = nlohmann::json;

namespace {

json two_grids() {
  return json::parse(R"({
    "study": {"name": "t", "loss_target": 2.5},
    "base": {"model": {"d_model": 32, "n_heads": 2, "n_layers": 2}, "train": {"steps": 10}},
    "grid": [{"model": {"placement": ["post", "pre", "sandwich"]}, "train.warmup_steps": [0, 50]},
             {"model.placement": ["post"], "model.n_layers": [6]}]})");
}

}  // namespace

TEST(Study, GridsAreProductsAndTheStudyIsTheirUnion) {
  const Study s = study_from_json(two_grids(), {}, "test");
  ASSERT_EQ(s.runs.size(), 3u * 2u + 1u);
  EXPECT_EQ(s.varying, (std::vector<std::string>{"model.placement", "train.warmup_steps", "model.n_layers"}));
  // the last grid key varies fastest; the base fills what a grid leaves out
  EXPECT_EQ(s.runs[0].label, "placement=post warmup_steps=0 n_layers=2");
  EXPECT_EQ(s.runs[1].label, "placement=post warmup_steps=50 n_layers=2");
  EXPECT_EQ(s.runs[5].label, "placement=sandwich warmup_steps=50 n_layers=2");
  EXPECT_EQ(s.runs[6].label, "placement=post warmup_steps=30 n_layers=6");  // the default warm-up
  EXPECT_EQ(s.runs[6].config.model.n_layers, 6);
  EXPECT_EQ(s.runs[6].config.train.warmup_steps, TrainConfig{}.warmup_steps);
  EXPECT_EQ(s.runs[3].config.model.placement_of(1), Placement::Pre);
  EXPECT_EQ(s.runs[3].config.train.warmup_steps, 50);
  EXPECT_EQ(s.runs[0].name, "01-placement=post_warmup_steps=0_n_layers=2");
  for (const auto& r : s.runs) EXPECT_EQ(r.config.model.d_model, 32);
}

TEST(Study, KeysWithOneValueEverywhereAreNotInTheLabels) {
  json doc = two_grids();
  doc["grid"] = json::array({json::parse(R"({"model.placement": ["post", "pre"], "train.lr": [1e-3]})")});
  const Study s = study_from_json(doc, {}, "test");
  EXPECT_EQ(s.varying, std::vector<std::string>{"model.placement"});
  EXPECT_EQ(s.runs[1].label, "placement=pre");
}

TEST(Study, SeedsOfInitAndDataAreNamedApart) {
  // the translation study's form: one grid per seed, train.seed and model.seed moving together
  json doc = two_grids();
  doc["grid"] = json::array();
  for (int seed : {1, 2})
    doc["grid"].push_back({{"model.placement", {"post", "pre"}}, {"model.seed", {seed}}, {"train.seed", {seed}}});
  const Study s = study_from_json(doc, {}, "test");
  ASSERT_EQ(s.runs.size(), 4u);
  EXPECT_EQ(s.varying, (std::vector<std::string>{"model.placement", "model.seed", "train.seed"}));
  EXPECT_EQ(s.runs[0].label, "placement=post model.seed=1 train.seed=1");
  EXPECT_EQ(s.runs[3].label, "placement=pre model.seed=2 train.seed=2");
  EXPECT_EQ(s.runs[3].config.model.seed, 2);
  EXPECT_EQ(s.runs[3].config.train.seed, 2);
}

// A list of settings that vary together: the runs take its entries in turn (model.seed and train.seed
// paired), crossed with the other keys; written in TOML as an array of inline tables.
TEST(Study, SettingsThatVaryTogetherArePairedNotCrossed) {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() / ("normlab_paired_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(file) << R"([study]
name = "t"
[base.model]
d_model = 32
n_heads = 2
n_layers = 2
[base.train]
steps = 10
[[grid]]
model.placement = ["post", "pre"]
seeds = [{model.seed = 1, train.seed = 1}, {model.seed = 2, train.seed = 2}, {model.seed = 3, train.seed = 3}]
)";
  const json doc = read_toml(file.string());
  fs::remove(file);
  const Study s = study_from_json(doc, {}, "test");
  ASSERT_EQ(s.runs.size(), 2u * 3u);  // not 2 x 3 x 3
  EXPECT_EQ(s.varying, (std::vector<std::string>{"model.placement", "model.seed", "train.seed"}));
  for (const StudyRun& r : s.runs) EXPECT_EQ(r.config.model.seed, r.config.train.seed) << r.label;
  EXPECT_EQ(s.runs[0].label, "placement=post model.seed=1 train.seed=1");
  EXPECT_EQ(s.runs[5].label, "placement=pre model.seed=3 train.seed=3");
  // the same runs, labels and configs as one grid per seed (the form studies used before)
  json per_seed = doc;
  per_seed["grid"] = json::array();
  for (int seed : {1, 2, 3})
    per_seed["grid"].push_back({{"model.placement", {"post", "pre"}}, {"model.seed", {seed}}, {"train.seed", {seed}}});
  const Study t = study_from_json(per_seed, {}, "test");
  ASSERT_EQ(t.runs.size(), s.runs.size());
  std::map<std::string, json> a, b;  // by label: the order differs (here the seeds vary fastest)
  for (size_t i = 0; i < s.runs.size(); i++) {
    a[s.runs[i].label] = run_config_to_json(s.runs[i].config);
    b[t.runs[i].label] = run_config_to_json(t.runs[i].config);
  }
  EXPECT_EQ(a, b);
  // strict: entries with other keys, a key set twice, a list value, a key outside a section
  auto fails = [&](const char* grid, const std::string& needle) {
    json d = doc;
    d["grid"] = json::array({json::parse(grid)});
    try {
      study_from_json(d, {}, "test");
    } catch (const Error& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(fails(R"({"seeds": [{"model.seed": 1, "train.seed": 1}, {"model.seed": 2}]})", "the same keys"));
  EXPECT_TRUE(fails(R"({"model.seed": [1, 2], "seeds": [{"model.seed": 1, "train.seed": 1}]})", "set twice"));
  EXPECT_TRUE(fails(R"({"seeds": [{"model.seed": [1, 2]}]})", "one value"));
  EXPECT_TRUE(fails(R"({"seeds": [{"seed": 1}]})", "section.key"));
  EXPECT_TRUE(fails(R"({"seeds": [{}]})", "empty entry"));
  EXPECT_THROW(study_from_json(doc, {"train.seed=4"}, "test"), Error);  // a grid key, by way of the list
}

// A study whose runs start from another study's finished runs (start.h): each "start:<name>" picks the
// one finished run its filter matches, filled in with the run's own seed; the strict checks.
TEST(Study, RunsStartFromTheMatchingRunOfAnotherStudy) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("normlab_starts_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // the finished study: post and pre, seeds 1 and 2, at two learning rates; one run diverged
  json results = {{"runs", json::array()}};
  for (const char* p : {"post", "pre"})
    for (double lr : {1e-3, 2e-3})
      for (int seed : {1, 2}) {
        const std::string name = fmt::format("{:02}-{}_{}_{}", results["runs"].size() + 1, p, lr, seed);
        const bool diverged = std::string(p) == "pre" && lr == 2e-3 && seed == 2;
        results["runs"].push_back({{"name", name}, {"status", diverged ? "diverged" : "finished"},
                                   {"grid", {{"model.placement", p}, {"train.lr", lr}, {"model.seed", seed}}},
                                   {"config", {{"train", {{"lr", lr}}}}}});
        fs::create_directories(dir / "runs" / name);
        std::ofstream(dir / "runs" / name / "checkpoint.safetensors") << "x";
        std::ofstream(dir / "runs" / name / "metrics.jsonl") << "{\"type\":\"summary\",\"interrupted\":false}\n";
      }
  std::ofstream(dir / "results.json") << results.dump();
  json doc = json::parse(R"({
    "study": {"name": "fine", "start_from": "", "starts": {
        "post": "model.placement=post train.lr=0.001 model.seed={model.seed}",
        "pre": "model.placement=pre train.lr=2e-3 model.seed={model.seed}"}},
    "base": {"model": {"d_model": 32, "n_heads": 2, "n_layers": 2}, "train": {"steps": 10, "lr": 5e-4}},
    "grid": [{"start": [{"model.placement": "post", "train.init_from": "start:post"},
                        {"model.placement": "pre", "train.init_from": "start:pre"},
                        {"model.placement": "post", "train.init_from": ""}],
              "model.seed": [1, 2]}]})");
  doc["study"]["start_from"] = dir.string();
  const Study s = study_from_json(doc, {}, "t");
  ASSERT_EQ(s.runs.size(), 6u);
  EXPECT_EQ(s.runs[2].label, "placement=post seed=1 init_from=none");  // a fresh model: "none"
  // pre's seed 2 at lr 2e-3 diverged: no finished run to start from, said before anything runs
  try {
    resolve_starts(s);
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("start 'pre' (\"model.placement=pre train.lr=2e-3 model.seed=2\") matches no "
                                         "finished runs of"),
              std::string::npos) << e.what();
  }
  doc["study"]["starts"]["pre"] = "model.placement=pre train.lr=0.001 model.seed={model.seed}";
  const ResolvedStarts resolved = resolve_starts(study_from_json(doc, {}, "t"));
  EXPECT_TRUE(resolved.missing.empty());
  const Study& r = resolved.study;
  std::map<std::string, std::string> from;
  for (const StudyRun& run : r.runs) from[run.label] = fs::path(run.config.train.init_from).filename().string();
  EXPECT_EQ(from["placement=post seed=1 init_from=start:post"], "01-post_0.001_1");
  EXPECT_EQ(from["placement=post seed=2 init_from=start:post"], "02-post_0.001_2");
  EXPECT_EQ(from["placement=pre seed=2 init_from=start:pre"], "06-pre_0.001_2");
  EXPECT_EQ(from["placement=post seed=2 init_from=none"], "");
  EXPECT_EQ(from.size(), 6u);
  // a run directory without its checkpoint, one whose training was stopped, one without metrics: each
  // to be trained again from its recorded config, listed once however many runs start from it
  fs::remove(dir / "runs" / "06-pre_0.001_2" / "checkpoint.safetensors");
  std::ofstream(dir / "runs" / "02-post_0.001_2" / "metrics.jsonl")
      << "{\"type\":\"summary\",\"interrupted\":true}\n{\"type\":\"train\",\"step\":3}\n";
  fs::remove(dir / "runs" / "05-pre_0.001_1" / "metrics.jsonl");
  const ResolvedStarts gone = resolve_starts(study_from_json(doc, {}, "t"));
  std::vector<std::string> missing;
  for (const MissingStart& m : gone.missing) missing.push_back(fs::path(m.dir).filename().string());
  EXPECT_EQ(missing, (std::vector<std::string>{"05-pre_0.001_1", "02-post_0.001_2", "06-pre_0.001_2"}));
  EXPECT_EQ(gone.missing[0].record["config"]["train"]["lr"], 0.001);
  // a filter that matches two runs; a picked run without its recorded config
  auto fails = [&](const json& d, const std::string& needle, bool resolve) {
    try {
      const Study t = study_from_json(d, {}, "t");
      if (resolve) resolve_starts(t);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return true;
    }
    return false;
  };
  json d = doc;
  d["study"]["starts"]["post"] = "model.placement=post model.seed={model.seed}";
  EXPECT_TRUE(fails(d, "matches 2 finished runs", true));
  // when the study is read: an unknown start, an unused one, no start_from, a key the run does not have
  d = doc, d["grid"][0]["start"][0]["train.init_from"] = "start:pots";
  EXPECT_TRUE(fails(d, "names no start of [study.starts] (known: post, pre)", false));
  d = doc, d["study"]["starts"]["spare"] = "model.seed=1";
  EXPECT_TRUE(fails(d, "study.starts.spare is used by no run", false));
  d = doc, d["study"].erase("start_from");
  EXPECT_TRUE(fails(d, "study.start_from must name the study directory", false));
  d = doc, d["study"]["starts"]["post"] = "model.seed={model.sed}";
  EXPECT_TRUE(fails(d, "{model.sed} in \"model.seed={model.sed}\" is not a section.key of the run's config", false));
  d = doc, d["study"]["starts"] = json::array({"x"});
  EXPECT_TRUE(fails(d, "[study.starts] must be a table", false));
  d = doc, d["study"]["start_from"] = (dir / "nothing").string();
  EXPECT_TRUE(fails(d, "no results.json", true));
  results["runs"][1].erase("config");
  std::ofstream(dir / "results.json") << results.dump();
  EXPECT_TRUE(fails(doc, "keeps no config for the run '02-post_0.001_2'", true));
  // a hostile results.json: a run named to leave the directory
  results["runs"][0]["name"] = "../../etc";
  std::ofstream(dir / "results.json") << results.dump();
  EXPECT_TRUE(fails(doc, "which is not the name of a directory in its runs/", true));
  fs::remove_all(dir);
}

TEST(Study, SetOverridesEveryRunButNotAGridKey) {
  const Study s = study_from_json(two_grids(), {"train.steps=3", "model.d_ff=16"}, "test");
  for (const auto& r : s.runs) {
    EXPECT_EQ(r.config.train.steps, 3);
    EXPECT_EQ(r.config.model.ff(), 16);
  }
  EXPECT_THROW(study_from_json(two_grids(), {"model.placement=pre"}, "test"), Error);
}

TEST(Study, StrictAboutEverything) {
  auto with = [](const char* patch) {
    json doc = two_grids();
    doc.merge_patch(json::parse(patch));
    return doc;
  };
  auto fails = [](const json& doc, const std::string& needle) {
    try {
      study_from_json(doc, {}, "test");
    } catch (const Error& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(fails(with(R"({"study": {"colour": 1}})"), "unknown [study] key 'colour'"));
  EXPECT_TRUE(fails(with(R"({"study": {"loss_target": -1}})"), "loss_target"));
  EXPECT_TRUE(fails(with(R"({"study": {"probe_seq_len": 1}})"), "probe_seq_len"));
  EXPECT_TRUE(fails(with(R"({"study": {"theory": "yes"}})"), "wrong type"));
  EXPECT_TRUE(fails(with(R"({"extra": {}})"), "unknown table 'extra'"));
  EXPECT_TRUE(fails(with(R"({"grid": [{"model.placement": []}]})"), "non-empty array"));
  EXPECT_TRUE(fails(with(R"({"grid": [{"model.n_layers": [0]}]})"), "n_layers"));
  EXPECT_TRUE(fails(with(R"({"grid": [{"a.b.c": [1]}]})"), "section.key"));
  EXPECT_TRUE(fails(with(R"({"base": {"train": {"nosuch": 1}}})"), "nosuch"));
  EXPECT_TRUE(fails(with(R"({"base": {"data": {"tokens": "x.safetensors"}}})"), "data.tokens"));
  json big = two_grids();
  big["grid"] = json::array({json::parse(R"({"train.seed": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],
                                             "train.lr": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]})")});
  EXPECT_TRUE(fails(big, "more than 256 runs"));
}

TEST(Study, EveryBuiltInStudyReads) {
  const auto names = builtin_study_names();
  for (const char* want : {"default", "warmup", "depth", "deepnorm", "effective-depth"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& n : names) {
    const Study s = builtin_study(n, {});
    EXPECT_EQ(s.name, n);
    EXPECT_GE(s.runs.size(), 2u);
  }
  EXPECT_THROW(builtin_study("nosuch", {}), Error);
}

TEST(Study, StepsToTargetMatchesANaiveMovingAverage) {
  json train = {{"step", json::array()}, {"loss", json::array()}};
  std::vector<double> loss;
  for (int i = 0; i < 200; i++) {
    loss.push_back(5.0 * std::exp(-i / 50.0) + 0.3 * std::sin(i));
    train["step"].push_back(i + 1);
    train["loss"].push_back(loss.back());
  }
  for (double target : {4.0, 2.5, 1.0, 0.1}) {
    json naive = nullptr;
    for (size_t i = kTargetWindow - 1; i < loss.size() && naive.is_null(); i++) {
      double m = 0;
      for (size_t k = i + 1 - kTargetWindow; k <= i; k++) m += loss[k] / kTargetWindow;
      if (m <= target) naive = int(i + 1);
    }
    EXPECT_EQ(steps_to_target(train, target), naive) << target;
  }
}

TEST(Study, LossSpikesAreFoundAndMergedLikeANaiveScan) {
  // a smooth decay with two planted spikes: one of 3 steps (one spike, at its peak), one of 1 step
  json train = {{"step", json::array()}, {"loss", json::array()}};
  std::vector<double> loss;
  for (int i = 0; i < 300; i++) {
    double x = 2.0 + 3.0 * std::exp(-i / 40.0) + 0.02 * std::sin(i);
    if (i >= 100 && i < 103) x += 0.5 + 0.1 * (i - 100);  // peak at step 103 (index 102)
    if (i == 200) x += 1.0;
    loss.push_back(x);
    train["step"].push_back(i + 1);
    train["loss"].push_back(x);
  }
  const json spikes = loss_spikes(train);
  ASSERT_EQ(spikes.size(), 2u) << spikes.dump();
  EXPECT_EQ(spikes[0]["step"], 103);
  EXPECT_EQ(spikes[1]["step"], 201);
  // the naive reference: mean of the previous 20 losses, recomputed from scratch
  auto jump_at = [&](size_t i) {
    double m = 0;
    for (size_t k = i - kTargetWindow; k < i; k++) m += loss[k] / kTargetWindow;
    return loss[i] - m;
  };
  EXPECT_NEAR(spikes[0]["jump"].get<double>(), jump_at(102), 1e-12);
  EXPECT_NEAR(spikes[1]["jump"].get<double>(), jump_at(200), 1e-12);
  // every step the naive scan flags lies in one of the two spikes
  for (size_t i = kTargetWindow; i < loss.size(); i++)
    if (jump_at(i) > kSpikeNats) {
      EXPECT_TRUE((i >= 100 && i < 103) || i == 200) << i;
    }
  // a smooth decay has none
  json smooth = {{"step", json::array()}, {"loss", json::array()}};
  for (int i = 0; i < 300; i++) smooth["step"].push_back(i + 1), smooth["loss"].push_back(2.0 + 3.0 * std::exp(-i / 40.0));
  EXPECT_TRUE(loss_spikes(smooth).empty());
}

// A job's records (compare --jobs): read and removed; a damaged file is kept under a name of its own
// (never over an earlier one, never where the next sitting's sweep would delete it) and reported,
// instead of stopping the study before it writes the other runs' results.
TEST(JobParts, ADamagedRecordIsKeptAndReportedNotThrown) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("normlab_job_parts_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto slurp = [](const fs::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  EXPECT_TRUE(take_job_part(dir, 1).problem.empty());  // none written: nothing to read
  EXPECT_EQ(take_job_part(dir, 1).records, json::object());

  write_job_part(dir, 1, json{{"runs", {{"3", {{"status", "finished"}}}}}, {"interrupted", false}});
  const JobPart good = take_job_part(dir, 1);
  EXPECT_TRUE(good.problem.empty());
  EXPECT_EQ(good.records["runs"]["3"]["status"], "finished");
  EXPECT_FALSE(fs::exists(dir / ".jobs-1.json"));  // taken

  for (const char* keep : {"jobs-1-corrupt.json", "jobs-1-corrupt-2.json"}) {
    const std::string damaged = std::string("{\"runs\": {\"3\": ") + keep;  // cut off mid-way
    std::ofstream(dir / ".jobs-1.json") << damaged;
    const JobPart bad = take_job_part(dir, 1);
    EXPECT_NE(bad.problem.find("corrupt"), std::string::npos) << bad.problem;
    EXPECT_NE(bad.problem.find(keep), std::string::npos) << bad.problem;
    EXPECT_EQ(bad.records, json::object());
    EXPECT_FALSE(fs::exists(dir / ".jobs-1.json"));
    EXPECT_EQ(slurp(dir / keep), damaged);  // the bytes kept as they were, the earlier one untouched
  }
  RunQueue::create(dir, {0, 1});  // the next sitting's sweep of stale records leaves them alone
  EXPECT_TRUE(fs::exists(dir / "jobs-1-corrupt.json"));
  EXPECT_TRUE(fs::exists(dir / "jobs-1-corrupt-2.json"));
  fs::remove_all(dir);
}
