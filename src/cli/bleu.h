// bleu.h: `normlab bleu --hyp FILE --ref FILE`: corpus BLEU of a hypothesis file against a
// reference file, line by line, as sacrebleu computes it by default (eval/bleu.h); optionally
// per-line sentence BLEU and JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace normlab::cli {

struct BleuCommand {
  CLI::App* bleu = nullptr;
  std::string hyp, ref;
  bool json = false, sentence = false;
};

void add_bleu_command(CLI::App& app, BleuCommand& cmd);
int run_bleu(const BleuCommand& cmd);

}  // namespace normlab::cli
