// sample.cpp: `normlab sample` (sample.h): option checks, finding the checkpoint's tokenizer, and
// printing the text (or the ids).
#include "cli/sample.h"

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <iostream>
#include <optional>

#include "io/gguf.h"
#include "io/hf.h"
#include "io/text_input.h"
#include "io/tokenizer.h"
#include "model/generate.h"
#include "train/model_source.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::cli {

namespace fs = std::filesystem;

void add_sample_command(CLI::App& app, SampleCommand& cmd) {
  cmd.sample = app.add_subcommand("sample", "generate text from a GPT checkpoint (greedy, temperature, top-k)");
  cmd.sample->add_option("--checkpoint", cmd.checkpoint,
                         "a gpt checkpoint (.safetensors), its run directory, or a Hugging Face directory")
      ->required();
  cmd.prompt_option = cmd.sample->add_option("--prompt", cmd.prompt, "the text to continue (non-empty)")->required();
  cmd.sample->add_option("--max-new", cmd.max_new, "tokens to generate (default 64; in [1, 100000])");
  cmd.sample->add_option("--temperature", cmd.temperature,
                         "0: greedy, the most likely token each time (default); > 0: sample from "
                         "softmax(logits / temperature) (at most 100)");
  cmd.sample->add_option("--top-k", cmd.top_k, "sample only among the k most likely tokens (default 0: all)");
  cmd.sample->add_option("--seed", cmd.seed, "seed of the draws: the same seed gives the same text (default 0)");
  cmd.sample->add_option("--tokenizer", cmd.tokenizer,
                         "the model's tokenizer (a file or directory, gpt2, or bytes); default: the "
                         "checkpoint's own (a Hugging Face directory's, or data.tokenizer of the run it "
                         "came from), else bytes");
  cmd.sample->add_flag("--ids", cmd.ids, "print the generated token ids (one line) instead of the text");
  cmd.sample->footer(
      "The output is the prompt followed by its continuation. A context longer than the model's seq_len\n"
      "slides: each new token sees the last seq_len tokens. Greedy decoding ignores --seed and --top-k.\n");
}

namespace {

std::string bytes_text(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += id < 256 ? std::string(1, char(id)) : fmt::format("<{}>", id);
  return out;
}

}  // namespace

int run_sample(const SampleCommand& cmd) {
  if (cmd.prompt.empty()) throw Error("--prompt is empty: give some text to continue");
  (void)read_text_input(cmd.prompt, "", 0, "--prompt");  // UTF-8, as every text
  if (cmd.max_new < 1 || cmd.max_new > 100000) throw Error(fmt::format("--max-new {} must be in [1, 100000]", cmd.max_new));
  if (!(cmd.temperature >= 0 && cmd.temperature <= 100))
    throw Error(fmt::format("--temperature {} must be in [0, 100] (0: greedy)", cmd.temperature));
  if (cmd.seed < 0) throw Error(fmt::format("--seed {} must be >= 0", cmd.seed));
  const ModelSource source = open_model(cmd.checkpoint, {.forward_only = true});
  const auto& model = source.model;
  const ModelConfig& cfg = model->config();
  if (cfg.arch != Arch::Gpt)
    throw Error(fmt::format("'{}' is an {} model; sample needs a gpt model (model.arch = \"gpt\"){}", cmd.checkpoint,
                            to_string(cfg.arch),
                            cfg.encdec() ? "; an encoder-decoder translates: normlab translate" : ""));
  if (!cfg.has_logits()) throw Error(fmt::format("'{}' has no head (model.head = none): nothing to sample", cmd.checkpoint));
  const int V = cfg.vocab_size();
  if (cmd.top_k < 0 || cmd.top_k > V) throw Error(fmt::format("--top-k {} must be in [0, {}] (the vocabulary)", cmd.top_k, V));

  // the tokenizer to read the prompt and write the output with; nullopt: bytes
  const std::optional<Tokenizer>& tok = source.tokenizer(cmd.tokenizer);
  std::vector<int32_t> prompt;
  if (tok) {
    prompt = tok->encode(cmd.prompt, false);  // as training read the corpus: no special tokens
    if (prompt.empty()) throw Error("--prompt has no tokens");
    for (int32_t id : prompt)
      if (id >= V)
        throw Error(fmt::format("--prompt: token id {} is outside the model's vocabulary of {} (is {} the model's "
                                "tokenizer?)", id, V, tok->description()));
  } else {
    if (V > kByteVocab + 1 && cmd.tokenizer != "bytes")
      throw Error(fmt::format("the model has {} token ids, not bytes, and no tokenizer came with '{}': give "
                              "--tokenizer (its file or directory, or gpt2), or --tokenizer bytes",
                              V, cmd.checkpoint));
    for (unsigned char c : cmd.prompt) prompt.push_back(int32_t(c));
    for (int32_t id : prompt)
      if (id >= V)
        throw Error(fmt::format("--prompt: byte {} is outside the model's vocabulary of {} (a token model needs "
                                "--tokenizer)", id, V));
  }
  const int lead = source.run_data && source.run_data->bos >= 0 ? 1 : 0;  // (its data.bos, read first)
  if (int(prompt.size()) + lead > cfg.seq_len)
    throw Error(fmt::format("--prompt is {} {}, longer than the model's context (seq_len) of {}{}", prompt.size(),
                            tok ? "tokens" : "bytes", cfg.seq_len - lead,
                            lead ? " after the run's first token (data.bos)" : ""));

  SampleOptions options;
  options.max_new = cmd.max_new;
  options.temperature = cmd.temperature;
  options.top_k = cmd.top_k;
  options.seed = uint64_t(cmd.seed);
  // a run that started every window with data.bos reads the prompt after it, as it trained
  if (source.run_data && source.run_data->bos >= 0) options.first = source.run_data->bos;
  const std::vector<int32_t> out = generate(*model, prompt, options);
  std::cerr << fmt::format("sample: {} prompt {}{}, {} new, {}\n", prompt.size(),
                           tok ? fmt::format("tokens ({})", tok->description()) : std::string("bytes"),
                           options.first >= 0 ? fmt::format(" after id {} (the run's data.bos)", options.first) : "",
                           out.size(),
                           cmd.temperature == 0 ? std::string("greedy")
                                                : fmt::format("temperature {} top-k {} seed {}", cmd.temperature,
                                                              cmd.top_k == 0 ? std::string("all") : std::to_string(cmd.top_k), cmd.seed));
  if (cmd.ids) {
    fmt::print("{}\n", fmt::join(out, " "));
    return 0;
  }
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), out.begin(), out.end());
  std::cout << (tok ? tok->decode(all, false) : bytes_text(all)) << '\n';
  return 0;
}

}  // namespace normlab::cli
