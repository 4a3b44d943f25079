// train.h: `normlab train`: a run from a TOML config and --set overrides, or --resume of a run
// directory; Ctrl-C stops it after the current step with its files complete (exit 130).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "train/run_config.h"

namespace normlab::cli {

struct TrainCommand {
  CLI::App* train = nullptr;
  std::string config_path, resume_dir;
  std::vector<std::string> sets;
  bool force = false, quiet = false;
};

void add_train_command(CLI::App& app, TrainCommand& cmd);
int run_train(const TrainCommand& cmd);

// A run config from a TOML file ("" = every default) with the --set overrides (also `normlab init`'s).
RunConfig load_run_config(const std::string& config_path, const std::vector<std::string>& sets);

}  // namespace normlab::cli
