// sample.h: `normlab sample`: text from a GPT checkpoint, greedy or sampled (temperature, top-k,
// seed), with the prompt and the output through the checkpoint's tokenizer when it has one (bytes
// otherwise).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace normlab::cli {

struct SampleCommand {
  CLI::App* sample = nullptr;
  CLI::Option* prompt_option = nullptr;
  std::string checkpoint, prompt, tokenizer;
  int max_new = 64, top_k = 0;
  double temperature = 0;
  long long seed = 0;
  bool ids = false;
};

void add_sample_command(CLI::App& app, SampleCommand& cmd);
int run_sample(const SampleCommand& cmd);

}  // namespace normlab::cli
