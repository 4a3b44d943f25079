// gguf.h (cli): `normlab gguf FILE`: what a GGUF file holds (metadata, tensor table, whether
// normlab can load it as a model and tokenizer), and `--dequantize OUT` to write every tensor as
// float32 safetensors under its GGUF name, in PyTorch order, nothing permuted.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace normlab::cli {

struct GgufCommand {
  CLI::App* gguf = nullptr;
  std::string path, dequantize_out;
  bool force = false, json = false;
};

void add_gguf_command(CLI::App& app, GgufCommand& cmd);
int run_gguf(const GgufCommand& cmd);

}  // namespace normlab::cli
