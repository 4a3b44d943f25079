// corpus.h: `normlab corpus bible`: builds the verse-aligned Bible translation corpus (es-en,
// web-kjv; rules in io/bible.h) from Debian's SWORD modules into the cache, once.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace normlab::cli {

struct CorpusCommand {
  CLI::App* corpus = nullptr;
  CLI::App* bible = nullptr;
  std::string out;  // "" -> bible::default_corpus_root()
  bool force = false;
};

void add_corpus_command(CLI::App& app, CorpusCommand& cmd);
int run_corpus(const CorpusCommand& cmd);

}  // namespace normlab::cli
