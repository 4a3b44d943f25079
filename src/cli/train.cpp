// train.cpp: `normlab train` (train.h): the config or the resumed run's, the run, and what it prints
// at the end (done, interrupted, diverged).
#include "cli/train.h"

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>

#include "distributed/comm.h"
#include "train/resume.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/interrupt.h"

namespace normlab::cli {

RunConfig load_run_config(const std::string& config_path, const std::vector<std::string>& sets) {
  nlohmann::json doc = config_path.empty() ? nlohmann::json::object() : read_toml(config_path);
  apply_overrides(doc, sets);
  return run_config_from_json(doc, config_path.empty() ? "(command line)" : "'" + config_path + "'");
}

namespace {

// train --resume DIR: the config of the newest checkpoint in DIR (or --config, which must then agree
// with it; the trainer checks), with the --set overrides; the run directory is DIR.
RunConfig load_resume_config(const std::string& dir, const std::string& config_path,
                             const std::vector<std::string>& sets) {
  nlohmann::json doc = resume_run_config(dir);  // also says why DIR cannot be resumed
  if (!config_path.empty()) doc = read_toml(config_path);
  apply_overrides(doc, sets);
  RunConfig cfg = run_config_from_json(doc, config_path.empty() ? "(the checkpoint's config in '" + dir + "')"
                                                                : "'" + config_path + "'");
  cfg.train.out_dir = dir;
  return cfg;
}

// Ctrl-C stops after the current step (util/interrupt.h); the run's files are then complete.
int train_and_report(const RunConfig& cfg, TrainOptions options) {
  const StopOnInterrupt interrupt(Signals::InterruptAndTerminate);
  options.stop = interrupt.flag();
  const TrainResult r = train(cfg, options);
  if (!options.comm.root())  // rank 0 speaks for the run; every rank leaves with the same code
    return r.interrupted ? kInterruptedExitCode : r.diverged ? 2 : 0;
  if (r.interrupted) {
    std::cerr << fmt::format("normlab: interrupted after step {} of {}: {} in {} (a second Ctrl-C kills at once){}\n",
                             r.steps_done, cfg.train.steps,
                             r.steps_done > 0 ? "the checkpoint, metrics and summary are" : "no step done; the metrics and summary are",
                             cfg.train.out_dir,
                             r.steps_done > 0 ? fmt::format("; continue it with: normlab train --resume {}", cfg.train.out_dir)
                                              : std::string());
    return kInterruptedExitCode;
  }
  if (r.diverged) {
    std::cerr << fmt::format("normlab: training diverged at step {} (non-finite {})\n",
                             r.diverged_step, r.diverged_tensor);
    return 2;
  }
  fmt::print("done: {} steps in {:.1f} s, {:.0f} tokens/s, final train loss {:.4f}", r.steps_done,
             r.seconds, r.tokens_per_s, r.last_train_loss);
  if (std::isfinite(r.last_val_loss)) fmt::print(", validation loss {:.4f}", r.last_val_loss);
  if (std::isfinite(r.last_val_loss) && std::isfinite(r.unigram_entropy))
    fmt::print(" ({} unigram entropy {:.4f} nats per {})", r.unigram_unit, r.unigram_entropy, r.unigram_unit);
  if (std::isfinite(r.bleu)) fmt::print(", validation BLEU {:.2f}", r.bleu);
  if (std::isfinite(r.test_loss)) fmt::print(", test loss {:.4f}", r.test_loss);
  fmt::print("\n");
  if (std::isfinite(r.spikes.any))
    fmt::print("spike scores (OLMo 2's measure: steps more than {:g} sd above the mean of the previous {}): loss "
               "{:.2f}%, gradient norm {:.2f}% of {} steps\n",
               kSpikeSd, kSpikeWindow, 100 * r.spikes.loss, 100 * r.spikes.grad_norm, r.spikes.steps);
  // A warning said at step 89 has scrolled away by the end: the last line recalls that there were some
  if (!r.warnings.empty())
    fmt::print("this run warned {} time{} (the lines starting 'warning:' above; records of type \"warning\" in "
               "{}/metrics.jsonl): read them before trusting its numbers\n",
               r.warnings.size(), r.warnings.size() == 1 ? "" : "s", cfg.train.out_dir);
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, TrainCommand& cmd) {
  cmd.train = app.add_subcommand("train", "train a model (TOML config plus --set overrides)");
  cmd.train->add_option("--config,-c", cmd.config_path, "TOML config with [model], [train], [data]");
  cmd.train->add_option("--set", cmd.sets, "override, e.g. --set train.lr=3e-4 --set model.placement=post");
  cmd.train->add_flag("--force", cmd.force, "replace a run already in train.out_dir");
  cmd.train->add_option("--resume", cmd.resume_dir,
                        "continue the run in DIR from its newest checkpoint, bit for bit (its own config; --set "
                        "train.steps=N trains longer)");
  cmd.train->add_flag("--quiet,-q", cmd.quiet, "no progress lines");
}

int run_train(const TrainCommand& cmd) {
  TrainOptions options;
  options.overwrite = cmd.force;
  options.quiet = cmd.quiet;
  if (cmd.resume_dir.empty()) return train_and_report(load_run_config(cmd.config_path, cmd.sets), options);
  if (cmd.force) throw Error("--resume continues a run and --force replaces it: give one of them");
  options.resume = true;
  const int code = train_and_report(load_resume_config(cmd.resume_dir, cmd.config_path, cmd.sets), options);
  // a run of a study (STUDY/runs/NAME): its results.json and report are the study's to rebuild
  std::filesystem::path run = std::filesystem::absolute(cmd.resume_dir).lexically_normal();
  if (run.filename().empty()) run = run.parent_path();  // (a trailing '/')
  const std::filesystem::path study = run.parent_path();
  if (study.filename() == "runs" && std::filesystem::is_regular_file(study.parent_path() / "study.json") &&
      dist::world().root())
    fmt::print("note: this run belongs to the study in '{}'; its results.json and report do not change with "
               "train --resume: `normlab compare --resume {}` (with the study's --study or --config) takes the "
               "run's new records into them\n",
               study.parent_path().string(), study.parent_path().string());
  return code;
}

}  // namespace normlab::cli
