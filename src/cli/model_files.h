// model_files.h: the commands that write a model, or a model's readings, to a file: `normlab grads`
// (loss, logits, gradients and hidden states of a checkpoint on a token file), `normlab init` (a
// freshly initialized checkpoint) and `normlab export` (a checkpoint as a Hugging Face directory).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace normlab::cli {

struct GradsCommand {
  CLI::App* grads = nullptr;
  std::string checkpoint, tokens, out;
  bool force = false;
};
struct InitCommand {
  CLI::App* init = nullptr;
  std::string config_path, out;
  std::vector<std::string> sets;
  bool force = false;
};
struct ExportCommand {
  CLI::App* exp = nullptr;
  std::string checkpoint, hf_dir;
  bool force = false;
};

void add_grads_command(CLI::App& app, GradsCommand& cmd);
void add_init_command(CLI::App& app, InitCommand& cmd);
void add_export_command(CLI::App& app, ExportCommand& cmd);
int run_grads(const GradsCommand& cmd);
int run_init(const InitCommand& cmd);
int run_export(const ExportCommand& cmd);

}  // namespace normlab::cli
