// theory.h: `normlab theory`: the claims of docs/THEORY.md measured over seeds on fresh and trained
// models (the default), or on one given model (--checkpoint), on the built-in corpus or --corpus.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "theory/theory.h"

namespace normlab::cli {

struct TheoryCommand {
  CLI::App* theory = nullptr;
  theory::TheoryOptions opts;
  long trained_steps = theory::kTheoryTrainedSteps;
  std::string json_out, checkpoint;
  std::string precision = "auto";  // with --checkpoint: float64, float32 or auto (TheoryOptions::float32)
  bool force = false;
};

void add_theory_command(CLI::App& app, TheoryCommand& cmd);
int run_theory(TheoryCommand& cmd);

}  // namespace normlab::cli
