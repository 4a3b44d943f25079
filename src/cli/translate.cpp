// translate.cpp: `normlab translate` (translate.h): reads the sources, decodes, prints.
#include "cli/translate.h"

#include <fmt/format.h>

#include "io/parallel.h"
#include "io/text_input.h"
#include "model/decode.h"
#include "train/model_source.h"
#include "train/translation.h"
#include "util/error.h"

namespace normlab::cli {

void add_translate_command(CLI::App& app, TranslateCommand& cmd) {
  cmd.translate = app.add_subcommand("translate", "translate text with an encoder-decoder checkpoint");
  cmd.translate->add_option("--checkpoint", cmd.checkpoint, "an encdec checkpoint (.safetensors)")->required();
  cmd.translate->add_option("--text", cmd.text, "one sentence to translate");
  cmd.translate->add_option("--text-file", cmd.text_file, "a UTF-8 file: one sentence a line");
  cmd.translate->add_option("--beam", cmd.beam, "beam size (1: greedy; default 1)");
  cmd.translate->add_option("--length-penalty", cmd.length_penalty,
                            "beam score = log p / length^penalty (default 1)");
  cmd.translate->add_option("--max-len", cmd.max_len, "target positions, BOS included (default: seq_len)");
}

int run_translate(const TranslateCommand& cmd) {
  if (cmd.text.empty() == cmd.text_file.empty()) throw Error("give one of --text or --text-file");
  if (cmd.beam < 1 || cmd.beam > 64) throw Error(fmt::format("--beam {} must be in [1, 64]", cmd.beam));
  if (!(cmd.length_penalty >= 0 && cmd.length_penalty <= 10))
    throw Error(fmt::format("--length-penalty {} must be in [0, 10]", cmd.length_penalty));
  const ModelSource source = open_model(cmd.checkpoint, {.forward_only = true});
  const auto& model = source.model;
  if (!model->config().encdec())
    throw Error(fmt::format("'{}' is a {} model; translate needs an encoder-decoder (model.arch = \"encdec\")",
                            cmd.checkpoint, to_string(model->config().arch)));
  if (cmd.max_len < 0 || cmd.max_len > model->config().seq_len)
    throw Error(fmt::format("--max-len {} must be in [1, {}] (the model's seq_len)", cmd.max_len, model->config().seq_len));
  // a file's lines are checked as read (read_text_lines names the line); --text as every text
  const std::vector<std::string> lines = cmd.text_file.empty()
                                             ? std::vector<std::string>{read_text_input(cmd.text, "", 0).text}
                                             : read_text_lines(cmd.text_file);
  std::vector<std::vector<int32_t>> sources;
  for (const std::string& line : lines) sources.push_back(source_ids(line));
  DecodeOptions options;
  options.beam = cmd.beam;
  options.length_penalty = cmd.length_penalty;
  options.max_len = cmd.max_len;
  for (const auto& ids : translate(*model, sources, options)) fmt::print("{}\n", target_text(ids));
  return 0;
}

}  // namespace normlab::cli
