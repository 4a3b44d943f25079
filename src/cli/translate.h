// translate.h: `normlab translate`: an encoder-decoder checkpoint translates text (greedy or beam
// search), one output line per input line.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace normlab::cli {

struct TranslateCommand {
  CLI::App* translate = nullptr;
  std::string checkpoint, text, text_file;
  int beam = 1;
  double length_penalty = 1.0;
  int max_len = 0;
};

void add_translate_command(CLI::App& app, TranslateCommand& cmd);
int run_translate(const TranslateCommand& cmd);

}  // namespace normlab::cli
