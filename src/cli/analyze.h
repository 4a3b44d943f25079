// analyze.h: `normlab analyze ...`: the instruments, on a fresh model from a config or on a
// checkpoint or Hugging Face directory, at one input sequence (a window of a corpus or a token
// stream, a token file's first row, random ids, or text through a tokenizer or as bytes; for an
// encoder-decoder, a source-target pair: --source-text with --text, or a seq2seq token file). Every
// instrument says what its input was, on the terminal and in --json ("input").
#pragma once

#include <CLI/CLI.hpp>

namespace normlab::cli {

// The `analyze` subcommand's parsed options; add_analyze_command registers them on the app and
// run_analyze runs whichever instrument was given.
struct AnalyzeCommand {
  CLI::App* analyze = nullptr;
  CLI::App* jacobian = nullptr;
  CLI::App* attention = nullptr;
  CLI::App* dynamics = nullptr;
  CLI::App* sinks = nullptr;
  int batches = 4, batch_size = 8, update_steps = 5;
  double update_lr = 1e-3;
  std::string precision = "auto";  // analyze dynamics: float64, float32, or auto (float64 when it fits; run_analyze)
  std::string checkpoint, config, tokens, json_out;
  std::string corpus;  // --corpus: a text file (bytes, or through --tokenizer); "" = the built-in corpus
  // A checkpoint's run read only its corpus's first bytes (data.max_bytes; 0 = all) and validated on
  // its last val_fraction (before its test_fraction): the corpus's windows come from the same split
  // (with_run_inputs sets them).
  long corpus_max_bytes = 0;
  double val_fraction = 0.1, test_fraction = 0;
  // A checkpoint's run started every window with this id (data.bos; -1: none): the windows analyze
  // draws from a corpus start with it too.
  int bos = -1;
  std::string text, text_file, tokenizer;  // --text / --text-file through --tokenizer (or the model dir's)
  std::string source_text;                 // encdec: the source sentence (UTF-8 bytes + EOS)
  // --text and --source-text of each instrument (one each per subcommand: "given" means on any)
  std::vector<CLI::Option*> text_options, source_options;
  std::vector<std::string> sets;
  int seq_len = 16, token = -1;
  bool random = false, force = false, no_full = false;
  long full_max_dim = 4096;
  int lanczos_k = 5;
};

void add_analyze_command(CLI::App& app, AnalyzeCommand& cmd);
int run_analyze(const AnalyzeCommand& cmd);

}  // namespace normlab::cli
