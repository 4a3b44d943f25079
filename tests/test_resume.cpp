// test_resume.cpp: exact resume (train/resume.h). A run stopped at step k (the stop flag, as Ctrl-C
// sets it; or a crash: an exception thrown out of the loop after step k, leaving metrics past the
// last checkpoint) and resumed gives bit-identical train and validation losses, per-layer records,
// parameters and AdamW moments to a run never stopped, for a GPT with dropout, grad_accum 2 and
// per-layer logs with the model update, an encoder (masking draws), a token file of rows and an
// encoder-decoder on a parallel corpus; stops at the first step, just before, at and just after a
// checkpoint; and in the middle of a gradient accumulation (between micro-batches, with grad_accum 2
// and 3): the stop flag set there lets the step finish, a crash there leaves the previous step's
// state (no partial accumulation is saved); tests/cli_resume.sh kills real processes at random
// moments. Also: raising train.steps, the config check naming the difference,
// bad resume directories, and the removal of a killed run's temporary files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstring>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/resume.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

fs::path resume_temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("normlab_resume_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TrainOptions quiet_run(bool resume = false) {
  TrainOptions o;
  o.quiet = true;
  o.resume = resume;
  return o;
}

enum class Kind { Gpt, Encoder, Rows, EncDec, AttnRes };

// 12 steps, checkpoints every 4, the last 2 kept.
RunConfig tiny_run(const fs::path& out, Kind kind, const fs::path& data_dir) {
  nlohmann::json doc = {
      {"model", {{"d_model", 32}, {"n_heads", 2}, {"n_layers", 2}, {"seq_len", 16}, {"dropout", 0.1}}},
      {"train",
       {{"steps", 12}, {"batch_size", 4}, {"grad_accum", 2}, {"lr", 3e-3}, {"warmup_steps", 3},
        {"eval_every", 5}, {"eval_batches", 2}, {"checkpoint_every", 4}, {"keep_checkpoints", 2},
        {"log_every_layers", 3}, {"log_model_update", true}, {"out_dir", out.string()}}}};
  if (kind == Kind::Encoder) {
    doc["model"]["arch"] = "encoder";
    doc["model"]["vocab"] = 257;
  }
  if (kind == Kind::Rows) doc["data"] = {{"tokens", (data_dir / "rows.safetensors").string()}};
  if (kind == Kind::AttnRes) {  // the streams, the final read and their parameters carried through a stop
    doc["model"]["hyper"] = "attn_res";
    doc["model"]["attn_res_block"] = 3;
  }
  if (kind == Kind::EncDec) {
    doc["model"]["arch"] = "encdec";
    doc["model"]["vocab"] = 258;
    doc["data"] = {{"parallel", (data_dir / "parallel").string()}, {"bleu_sentences", 3}};
  }
  return run_config_from_json(doc, "test");
}

// The inputs of the Rows and EncDec kinds: a token file of 10 rows, a parallel corpus of 24 pairs.
void write_inputs(const fs::path& dir) {
  const int B = 10, T = 16;
  std::vector<int32_t> ids(size_t(B) * T), labels(size_t(B) * T);
  for (size_t i = 0; i < ids.size(); i++) {
    ids[i] = int32_t((i * 37 + 11) % 200);
    labels[i] = int32_t((i * 37 + 48) % 200);
  }
  safetensors::write((dir / "rows.safetensors").string(),
                     {{"input_ids", safetensors::DType::I32, {B, T}, ids.data()},
                      {"labels", safetensors::DType::I32, {B, T}, labels.data()}},
                     {}, true);
  fs::create_directories(dir / "parallel");
  const char* words[] = {"in the beginning", "and the earth", "was without form", "and void", "and darkness",
                         "upon the face", "of the deep", "and the spirit"};
  for (const char* split : {"train", "valid"}) {
    std::ofstream src(dir / "parallel" / (std::string(split) + ".src")), tgt(dir / "parallel" / (std::string(split) + ".tgt"));
    for (int i = 0; i < (std::string(split) == "train" ? 24 : 6); i++) {
      src << words[i % 8] << " " << i << "\n";
      tgt << words[(i + 3) % 8] << " " << i % 5 << "\n";
    }
  }
}

struct Outcome {
  std::vector<std::string> records;  // train, val and layers records without the timings, in file order
  std::vector<float> params, m, v;
};

Outcome outcome_of(const fs::path& dir, const RunConfig& cfg) {
  Outcome o;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    const std::string type = j["type"];
    if (type != "train" && type != "val" && type != "layers") continue;
    j.erase("elapsed_s");
    j.erase("tokens_per_s");
    o.records.push_back(j.dump());
  }
  const std::string ckpt = (dir / "checkpoint.safetensors").string();
  Model<float> model(checkpoint_config(ckpt));
  AdamW opt(model.table(), cfg.train.adamw);
  load_training_checkpoint(ckpt, model, opt);
  o.params = model.params();
  o.m = opt.m();
  o.v = opt.v();
  return o;
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.records.size(), b.records.size()) << what;
  for (size_t i = 0; i < a.records.size(); i++) EXPECT_EQ(a.records[i], b.records[i]) << what << " record " << i;
  for (auto [x, y, name] : {std::tuple{&a.params, &b.params, "params"}, {&a.m, &b.m, "adam m"}, {&a.v, &b.v, "adam v"}}) {
    ASSERT_EQ(x->size(), y->size()) << what;
    EXPECT_EQ(std::memcmp(x->data(), y->data(), x->size() * sizeof(float)), 0) << what << ": " << name << " differ";
  }
}

struct Crash : std::runtime_error {
  Crash() : std::runtime_error("simulated crash") {}
};

// Runs cfg stopping after step k (Ctrl-C's flag, or a crash), then resumes it to the end.
void stop_and_resume(const RunConfig& cfg, long k, bool crash) {
  std::atomic<bool> stop{false};
  TrainOptions first;
  first.quiet = true;
  first.stop = &stop;
  first.on_step = [&](const StepInfo& s) {
    if (s.step == k && crash) throw Crash();
    if (s.step == k) stop = true;
  };
  if (crash) {
    EXPECT_THROW(train(cfg, first), Crash);
  } else {
    const TrainResult r = train(cfg, first);
    EXPECT_TRUE(r.interrupted);
    EXPECT_EQ(r.steps_done, k);
  }
  TrainOptions again;
  again.quiet = true;
  again.resume = true;
  const TrainResult r = train(cfg, again);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.steps_done, cfg.train.steps);
}

void check_kind(Kind kind, const std::string& name, const std::vector<std::pair<long, bool>>& stops) {
  const fs::path dir = resume_temp_dir(name);
  write_inputs(dir);
  const RunConfig whole = tiny_run(dir / "whole", kind, dir);
  train(whole, quiet_run());
  const Outcome reference = outcome_of(dir / "whole", whole);
  for (const auto& [k, crash] : stops) {
    const fs::path out = dir / fmt::format("stop{}{}", k, crash ? "crash" : "");
    const RunConfig cfg = tiny_run(out, kind, dir);
    stop_and_resume(cfg, k, crash);
    expect_same(reference, outcome_of(out, cfg), fmt::format("{} stopped at {} ({})", name, k, crash ? "crash" : "stop flag"));
    // the newest two step files are kept, and the link is the newest
    EXPECT_TRUE(fs::exists(out / "checkpoints" / "step-000000012.safetensors"));
    EXPECT_EQ(newest_checkpoint(out).value_or(""), (out / "checkpoints" / "step-000000012.safetensors").string());
    int files = 0;
    for (const auto& e : fs::directory_iterator(out / "checkpoints")) files += e.is_regular_file();
    EXPECT_EQ(files, 2);
  }
  fs::remove_all(dir);
}

}  // namespace

TEST(Resume, GptBitIdenticalAfterStopsAndCrashes) {
  // 1: the first step; 3: just before the checkpoint of step 4; 4: at it; 5: just after it. Crashes
  // at 5 and 7 leave metrics past the last checkpoint (4), cut back at resume; a crash at 8 comes
  // after step 8's metrics and before its checkpoint.
  check_kind(Kind::Gpt, "gpt", {{1, false}, {3, false}, {4, false}, {5, false}, {5, true}, {7, true}, {8, true}});
}

TEST(Resume, AttentionResidualsBitIdentical) { check_kind(Kind::AttnRes, "attn_res", {{5, false}, {7, true}}); }

TEST(Resume, EncoderRowsAndEncDecBitIdentical) {
  check_kind(Kind::Encoder, "encoder", {{5, false}, {6, true}});
  check_kind(Kind::Rows, "rows", {{3, false}, {7, true}});
  check_kind(Kind::EncDec, "encdec", {{4, false}, {6, true}});
}

// Stops (the stop flag, as Ctrl-C sets it) or crashes a run right after micro-batch `micro` of step
// k, then resumes it. The flag is seen only between steps, so step k finishes and is the last one
// done and checkpointed; a crash leaves the step-4 checkpoint and metrics up to step k - 1.
void stop_mid_accumulation_and_resume(const RunConfig& cfg, long k, int micro, bool crash) {
  std::atomic<bool> stop{false};
  TrainOptions first = quiet_run();
  first.stop = &stop;
  int micro_batches_after = 0;  // of step k, after the stop
  first.on_micro_batch = [&](long step, int m) {
    if (step == k && m == micro && crash) throw Crash();
    if (step == k && m == micro) stop = true;
    else if (stop) micro_batches_after++;
  };
  if (crash) {
    EXPECT_THROW(train(cfg, first), Crash);
    EXPECT_EQ(newest_checkpoint(cfg.train.out_dir).value_or(""),
              (fs::path(cfg.train.out_dir) / "checkpoints" / "step-000000004.safetensors").string());
  } else {
    const TrainResult r = train(cfg, first);
    EXPECT_TRUE(r.interrupted);
    EXPECT_EQ(r.steps_done, k) << "the step in progress finishes";
    EXPECT_EQ(micro_batches_after, cfg.train.grad_accum - 1 - micro) << "its other micro-batches run, and no more";
    EXPECT_EQ(newest_checkpoint(cfg.train.out_dir).value_or(""),
              (fs::path(cfg.train.out_dir) / "checkpoints" / fmt::format("step-{:09}.safetensors", k)).string());
  }
  const TrainResult r = train(cfg, quiet_run(true));
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.steps_done, cfg.train.steps);
}

TEST(Resume, StopsAndCrashesMidAccumulationBitIdentical) {
  const fs::path dir = resume_temp_dir("accum");
  for (int accum : {2, 3}) {
    RunConfig whole = tiny_run(dir / fmt::format("whole{}", accum), Kind::Gpt, dir);
    whole.train.grad_accum = accum;
    train(whole, quiet_run());
    const Outcome reference = outcome_of(whole.train.out_dir, whole);
    // step 6: between checkpoints; 7: just before the checkpoint of step 8; micro 0 and, with 3
    // micro-batches, 1: after the first and after a middle one
    for (int micro = 0; micro < accum - 1; micro++)
      for (auto [k, crash] : std::vector<std::pair<long, bool>>{{6, false}, {7, false}, {6, true}}) {
        RunConfig cfg = whole;
        cfg.train.out_dir = (dir / fmt::format("a{}_k{}_m{}{}", accum, k, micro, crash ? "crash" : "")).string();
        stop_mid_accumulation_and_resume(cfg, k, micro, crash);
        expect_same(reference, outcome_of(cfg.train.out_dir, cfg),
                    fmt::format("grad_accum {} stopped after micro-batch {} of step {} ({})", accum, micro, k,
                                crash ? "crash" : "stop flag"));
      }
  }
  fs::remove_all(dir);
}

TEST(Resume, RaisingStepsContinuesAFinishedRun) {
  const fs::path dir = resume_temp_dir("longer");
  RunConfig cfg = tiny_run(dir / "r", Kind::Gpt, dir);
  cfg.train.schedule = Schedule::Warmup;  // a schedule that does not depend on train.steps
  RunConfig longer = cfg;
  longer.train.steps = 16;
  longer.train.out_dir = (dir / "whole").string();
  train(longer, quiet_run());
  train(cfg, quiet_run());
  longer.train.out_dir = cfg.train.out_dir;
  train(longer, quiet_run(true));
  Outcome a = outcome_of(dir / "whole", longer), b = outcome_of(dir / "r", longer);
  // the first run's last step (12) logged its layers and validation as a last step: drop those
  std::erase_if(b.records, [](const std::string& r) {
    const auto j = nlohmann::json::parse(r);
    return j["step"] == 12 && j["type"] != "train";
  });
  std::erase_if(a.records, [](const std::string& r) {
    const auto j = nlohmann::json::parse(r);
    return j["step"] == 12 && j["type"] != "train";
  });
  expect_same(a, b, "12 steps, then resumed to 16");
  // a finished run resumed with the same steps does nothing more, and its summary is whole again
  const TrainResult r = train(longer, quiet_run(true));
  EXPECT_EQ(r.steps_done, 16);
  EXPECT_TRUE(std::isfinite(r.last_train_loss));
  fs::remove_all(dir);
}

TEST(Resume, MismatchedConfigIsRefusedNamingTheKeyAndChangesNothing) {
  const fs::path dir = resume_temp_dir("mismatch");
  RunConfig cfg = tiny_run(dir / "r", Kind::Gpt, dir);
  std::atomic<bool> stop{false};
  TrainOptions first = quiet_run();
  first.on_step = [&](const StepInfo& s) { stop = s.step == 6; };
  first.stop = &stop;
  train(cfg, first);
  const auto bytes = [&](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string metrics = bytes(dir / "r" / "metrics.jsonl"), ckpt = bytes(dir / "r" / "checkpoint.safetensors");
  RunConfig other = cfg;
  other.train.lr = 2e-3;
  other.model.placement = {Placement::Post};
  try {
    train(other, quiet_run(true));
    ADD_FAILURE() << "a mismatched config was resumed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train.lr: checkpoint 0.003, now 0.002"), std::string::npos) << what;
    EXPECT_NE(what.find(R"(model.placement: checkpoint ["pre","pre"], now ["post","post"])"), std::string::npos) << what;
  }
  RunConfig fewer = cfg;
  fewer.train.steps = 5;
  EXPECT_THROW(train(fewer, quiet_run(true)), Error);
  EXPECT_EQ(bytes(dir / "r" / "metrics.jsonl"), metrics);
  EXPECT_EQ(bytes(dir / "r" / "checkpoint.safetensors"), ckpt);
  fs::remove_all(dir);
}

TEST(Resume, BadDirectoriesAreRefusedWithWhatTheyAre) {
  const fs::path dir = resume_temp_dir("bad");
  const auto message = [](const std::string& d) {
    try {
      resume_run_config(d);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message((dir / "missing").string()).find("no such directory"), std::string::npos);
  fs::create_directories(dir / "empty");
  EXPECT_NE(message((dir / "empty").string()).find("not a normlab run directory"), std::string::npos);
  fs::create_directories(dir / "young");
  std::ofstream(dir / "young" / "metrics.jsonl") << "{\"type\":\"admin_profile\"}\n";
  EXPECT_NE(message((dir / "young").string()).find("no checkpoint yet"), std::string::npos);
  // a run that crashed before its first checkpoint: the same message from train, the files kept
  const RunConfig crashed = tiny_run(dir / "crashed", Kind::Gpt, dir);
  TrainOptions crash = quiet_run();
  crash.on_step = [](const StepInfo& s) {
    if (s.step == 2) throw std::runtime_error("crash");
  };
  EXPECT_THROW(train(crashed, crash), std::runtime_error);
  try {
    train(crashed, quiet_run(true));
    ADD_FAILURE() << "resumed a run without a checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint yet"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir / "crashed" / "metrics.jsonl"));
  // a checkpoint without resume state (normlab init)
  fs::create_directories(dir / "init");
  Model<float> model(tiny_run(dir, Kind::Gpt, dir).model);
  save_checkpoint((dir / "init" / "checkpoint.safetensors").string(), model, nullptr, 0, false);
  EXPECT_NE(message((dir / "init").string()).find("without resume state"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Resume, StaleTemporariesOfDeadProcessesAreRemoved) {
  const fs::path dir = resume_temp_dir("stale");
  fs::create_directories(dir / "checkpoints");
  // pid 999999999 is above any pid_max: no such process. Our parent is alive: its file stays. A
  // child that has exited but is not yet reaped (a zombie, as ranks ended by mpirun are for a while)
  // writes nothing more: its file goes.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 500; i++) {  // until it has exited (still unreaped: no waitpid yet)
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string text;
    std::getline(stat, text);
    if (text.find(") Z") != std::string::npos) break;
    ::usleep(10000);
  }
  const std::string dead = "999999999", alive = std::to_string(::getppid()), zombie = std::to_string(child);
  for (const fs::path& p : {dir / ("checkpoint.safetensors.tmp." + dead), dir / ("metrics.jsonl.tmp." + dead),
                            dir / "checkpoints" / ("step-000000004.safetensors.tmp." + dead),
                            dir / "checkpoints" / ("step-000000005.safetensors.tmp." + zombie),
                            dir / ("checkpoint.safetensors.tmp." + alive), dir / "notes.tmp.1"})
    std::ofstream(p) << "x";
  EXPECT_EQ(::kill(child, 0), 0) << "the zombie must still exist for kill(pid, 0)";
  EXPECT_EQ(remove_stale_temporaries(dir), 4);
  EXPECT_TRUE(fs::exists(dir / ("checkpoint.safetensors.tmp." + alive)));
  EXPECT_TRUE(fs::exists(dir / "notes.tmp.1"));
  ::waitpid(child, nullptr, 0);
  fs::remove_all(dir);
}

TEST(Resume, MetricsAreCutBackAtomicallyAndAPartialLineIsDropped) {
  const fs::path dir = resume_temp_dir("cut");
  const fs::path m = dir / "metrics.jsonl";
  std::ofstream(m) << "{\"type\":\"admin_profile\",\"omega\":[1]}\n{\"type\":\"train\",\"step\":1,\"loss\":3}\n"
                      "{\"type\":\"val\",\"step\":2,\"loss\":2.5}\n{\"type\":\"train\",\"step\":2,\"loss\":2}\n"
                      "{\"type\":\"train\",\"step\":3,\"loss\":1}\n{\"type\":\"summary\",\"steps\":3}\n{\"type\":\"tr";
  const KeptMetrics kept = truncate_metrics(m, 2);
  EXPECT_EQ(kept.last_train_loss, 2);
  EXPECT_EQ(kept.last_val_loss, 2.5);
  std::ifstream in(m);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(text, "{\"type\":\"admin_profile\",\"omega\":[1]}\n{\"type\":\"train\",\"step\":1,\"loss\":3}\n"
                  "{\"type\":\"val\",\"step\":2,\"loss\":2.5}\n{\"type\":\"train\",\"step\":2,\"loss\":2}\n");
  // a corrupt complete line: refused, the file untouched
  std::ofstream(m) << "{\"type\":\"train\",\"step\":1}\nnot json\n";
  EXPECT_THROW(truncate_metrics(m, 1), Error);
  std::ifstream again(m);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(again), {}), "{\"type\":\"train\",\"step\":1}\nnot json\n");
  fs::remove_all(dir);
}
