// tokenize.h: `normlab tokenize`: text -> token ids with a GPT-2 or BERT tokenizer (a file, a
// directory, or `gpt2` for the vendored GPT-2 vocabulary); prints the ids, or {ids, tokens} as
// JSON, and can write them as an int32 input_ids (1, T) safetensors file; --jsonl tokenizes many
// texts in one call (one JSON string per line in, one line of ids or JSON per text out).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace normlab::cli {

struct TokenizeCommand {
  CLI::App* tokenize = nullptr;
  std::string tokenizer = "gpt2";
  std::string text, text_file, jsonl, out;
  CLI::Option* text_option = nullptr;
  std::string lowercase, strip_accents;  // vocab.txt only; "" means unset
  bool json = false, no_special = false, force = false;
};

void add_tokenize_command(CLI::App& app, TokenizeCommand& cmd);
int run_tokenize(const TokenizeCommand& cmd);

}  // namespace normlab::cli
