// analyze.cpp: `normlab analyze jacobian`, `analyze attention`, `analyze dynamics` and `analyze sinks`: model and
// input loading shared by the instruments (for an encoder-decoder: a source-target pair or a seq2seq
// token file), and their --json output.
#include "cli/analyze.h"

#include <filesystem>
#include <fmt/format.h>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <type_traits>

#include "analysis/attention.h"
#include "analysis/dynamics.h"
#include "analysis/sinks.h"
#include "analysis/jacobian.h"
#include "analysis/precision.h"
#include "analysis/updates.h"
#include "io/text_input.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "ops/common.h"
#include "train/checkpoint.h"
#include "train/model_source.h"
#include "train/own_tokenizer.h"
#include "train/data.h"
#include "train/run_config.h"
#include "train/translation.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/progress.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::cli {

void add_analyze_command(CLI::App& app, AnalyzeCommand& cmd) {
  cmd.analyze = app.add_subcommand("analyze", "instruments: measure a model (see docs/INSTRUMENTS.md)");
  cmd.analyze->require_subcommand(1);
  cmd.jacobian = cmd.analyze->add_subcommand(
      "jacobian", "norm-site, block and end-to-end Jacobians: spectra, ranks, theory checks");
  cmd.attention = cmd.analyze->add_subcommand(
      "attention", "per layer and head: ||A||_2, column sums, the source 002 bound, entropies");
  cmd.dynamics = cmd.analyze->add_subcommand(
      "dynamics", "per layer: stream norms, branch ratios, gradient norms, rank collapse");
  cmd.dynamics->add_option("--batches", cmd.batches, "batches to average over (default 4)");
  cmd.dynamics->add_option("--batch-size", cmd.batch_size, "sequences per batch (default 8)");
  cmd.dynamics->add_option("--update-steps", cmd.update_steps,
                           "AdamW steps for update ratios and output change (default 5; 0: skip)");
  cmd.dynamics->add_option("--lr", cmd.update_lr, "learning rate of those steps (default 1e-3)");
  cmd.sinks = cmd.analyze->add_subcommand(
      "sinks", "per layer: massive activations (largest |x|, its dimension and token, kurtosis); per head: attention "
               "sinks (Gu et al.'s sink rate); for a causal model with a head, gradient sinks (a backward pass of the "
               "next-token loss: the gradient at the first position against the median, at the stream and before "
               "each attention's input norm) and the norm's Jacobian gain at the largest token");
  cmd.sinks->add_option("--batches", cmd.batches, "batches of windows (default 4)");
  cmd.sinks->add_option("--batch-size", cmd.batch_size, "windows per batch (default 8)");
  for (CLI::App* sub : {cmd.attention, cmd.dynamics, cmd.sinks})
    sub->add_option("--precision", cmd.precision,
                   "float64 (a float64 copy of the model: 16 bytes a parameter with its gradients, 8 for attention), "
                   "float32 (the model's own float32 parameters, no copy: 8 bytes a parameter, 4 for attention; "
                   "dynamics' update steps train the model itself) or auto (default: float64 when that copy takes at "
                   "most a quarter of this machine's memory)")
      ->check(CLI::IsMember({"auto", "float64", "float32"}));
  for (CLI::App* sub : {cmd.jacobian, cmd.attention, cmd.dynamics, cmd.sinks}) {
    sub->add_option("--checkpoint", cmd.checkpoint, "a checkpoint from normlab train or init, or a Hugging Face directory");
    sub->add_option("--config,-c", cmd.config, "a TOML config (fresh model from its [model])");
    sub->add_option("--set", cmd.sets, "config override, e.g. --set model.placement=post");
    sub->add_option("--tokens", cmd.tokens,
                    "token file: a stream (input_ids only, or .bin uint16) gives a window of its validation split "
                    "like --corpus; a file of rows (with labels) gives its first row (encdec: Hugging Face seq2seq names)");
    sub->add_option("--corpus", cmd.corpus,
                    "a text file whose validation split gives the input window (bytes, or through --tokenizer; "
                    "default: the built-in corpus data/kjv.txt)");
    cmd.text_options.push_back(sub->add_option("--text", cmd.text, "text to analyze, through --tokenizer (encdec: the target, as bytes)"));
    cmd.source_options.push_back(sub->add_option("--source-text", cmd.source_text,
                                                 "encdec: the source sentence (UTF-8 bytes + EOS); --text is the target"));
    sub->add_option("--text-file", cmd.text_file, "a UTF-8 file to analyze, through --tokenizer");
    sub->add_option("--tokenizer", cmd.tokenizer,
                    "tokenizer for --text and --corpus: a tokenizer file or directory, gpt2, or bytes (default: "
                    "the Hugging Face model directory's own; bytes for a byte-level model)");
    sub->add_option("--seq-len", cmd.seq_len, "T of the input sequence (default 16)");
    sub->add_option("--json", cmd.json_out, "write the complete results as JSON to this file");
    sub->add_flag("--force", cmd.force, "replace --json if it exists");
  }
  // options only some instruments use are offered only there (dynamics averages corpus batches; only
  // the Jacobians single out a token)
  for (CLI::App* sub : {cmd.jacobian, cmd.attention})
    sub->add_flag("--random", cmd.random, "random token ids instead of a window of the corpus");
  cmd.jacobian->add_option("--token", cmd.token, "token whose local Jacobians are reported (default last)");
  cmd.jacobian->add_flag("--no-full", cmd.no_full, "skip the full-sequence (T d) x (T d) Jacobians");
  cmd.jacobian->add_option("--full-max-dim", cmd.full_max_dim,
                           "largest T * d for the full-sequence Jacobians (default 4096)");
  cmd.jacobian->add_option("--lanczos-k", cmd.lanczos_k,
                           "end-to-end extreme singular values computed matrix-free (default 5; 0: off)");
}

namespace {

// The [model] of --config with --set (a fresh model's), read once for either precision.
ModelConfig fresh_model_config(const AnalyzeCommand& cmd) {
  nlohmann::json doc = cmd.config.empty() ? nlohmann::json::object() : read_toml(cmd.config);
  apply_overrides(doc, cmd.sets);
  return run_config_from_json(doc, cmd.config.empty() ? "(command line)" : "'" + cmd.config + "'").model;
}

// The model under study, in double: the checkpoint's (read straight in when the source was opened
// without its float model, else its float parameters widened) or a config's. No parameter gradients
// where nothing runs backward (half the memory): attention, and a Jacobian without Lanczos (its
// products J v are forward-mode; Lanczos also takes J^T v).
std::unique_ptr<Model<double>> load_double_model(const AnalyzeCommand& cmd, const ModelSource* source) {
  const bool forward_only = cmd.attention->parsed() || (cmd.jacobian->parsed() && cmd.lanczos_k == 0);
  if (source && !source->model) return load_model_double(source->path, forward_only);
  if (source) return model_with_params<double>(source->model->config(), source->model->params(), forward_only);
  return std::make_unique<Model<double>>(fresh_model_config(cmd));
}

// Whether an option of the instrument's was given (each subcommand registers its own copy).
bool given(const std::vector<CLI::Option*>& options) {
  return std::any_of(options.begin(), options.end(), [](const CLI::Option* o) { return o->count() > 0; });
}

bool has_text(const AnalyzeCommand& cmd) { return given(cmd.text_options) || !cmd.text_file.empty(); }

// The tokenizer of --text and --corpus: "" for bytes (--tokenizer bytes, or a byte-level model
// without one), else what load_tokenizer reads ("gpt2" resolved to the vendored directory).
std::string resolve_tokenizer(const AnalyzeCommand& cmd, const ModelConfig& cfg, const char* what) {
  if (cmd.tokenizer == "bytes") return "";
  if (cmd.tokenizer == "gpt2") return "gpt2";
  if (!cmd.tokenizer.empty()) return cmd.tokenizer;
  // the model's own, found as every command finds it (train/own_tokenizer.h: a Hugging Face directory's,
  // a GGUF file's, or a directory holding one GGUF file's)
  if (!cmd.checkpoint.empty())
    if (std::string own = own_tokenizer_path(cmd.checkpoint, ""); !own.empty()) return own;
  if (cfg.vocab_size() == kByteVocab || cfg.vocab_size() == kByteVocab + 1) return "";
  throw Error(fmt::format("{} needs --tokenizer (a tokenizer file or directory, gpt2, or bytes): the model's "
                          "vocabulary ({}) is not byte-level and --checkpoint is not a Hugging Face directory with "
                          "its own tokenizer",
                          what, cfg.vocab_size()));
}

// One input sequence and what it is, in words ("input: ..." on the terminal, "input" in --json).
struct Input {
  std::vector<int32_t> ids;
  std::string description;
};

void check_ids_fit(const std::vector<int32_t>& ids, const ModelConfig& cfg, const std::string& where) {
  for (int32_t id : ids)
    if (id < 0 || id >= cfg.vocab_size())
      throw Error(fmt::format("{}: token id {} is outside the model's vocabulary of {} (is this the model's tokenizer?)",
                              where, id, cfg.vocab_size()));
}

// --text / --text-file: the text through the tokenizer (or as UTF-8 bytes), checked against the model.
Input text_input(const AnalyzeCommand& cmd, const ModelConfig& cfg) {
  const bool text = given(cmd.text_options);
  if (text && !cmd.text_file.empty()) throw Error("give --text or --text-file, not both");
  if (!cmd.tokens.empty() || cmd.random) throw Error("give one input: --text/--text-file, --tokens or --random");
  const std::string tokenizer = resolve_tokenizer(cmd, cfg, "--text");
  const TextInput given_text = read_text_input(cmd.text, text ? "" : cmd.text_file,
                                               max_text_bytes(cfg.seq_len, !tokenizer.empty()));
  const std::string& content = given_text.text;
  const std::string& where = given_text.where;
  Input in;
  std::string unit = "bytes (UTF-8)";
  if (tokenizer.empty()) {
    for (unsigned char c : content) in.ids.push_back(int32_t(c));
  } else {
    const Tokenizer tok = load_tokenizer(tokenizer == "gpt2" ? builtin_gpt2_tokenizer_dir() : tokenizer);
    try {
      in.ids = tok.encode(content);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", where, e.what()));
    }
    unit = fmt::format("tokens of {}", tok.description());
  }
  if (in.ids.empty()) throw Error(fmt::format("{}: the text has no tokens", where));
  if ((int)in.ids.size() > cfg.seq_len)
    throw Error(fmt::format("{}: {} tokens, more than the model's seq_len {}", where, in.ids.size(), cfg.seq_len));
  check_ids_fit(in.ids, cfg, where);
  in.description = fmt::format("{}, {} {}", where, in.ids.size(), unit);
  return in;
}

// The corpus of --corpus (or the built-in one), or the token stream of --tokens, split as training
// reads it (the last 10% is validation), for windows of T ids.
Corpus analyze_corpus(const AnalyzeCommand& cmd, const ModelConfig& cfg, int T) {
  if (!cmd.tokens.empty()) {
    if (!cmd.corpus.empty()) throw Error("give --corpus or --tokens, not both");
    Corpus c = load_token_stream(cmd.tokens, cmd.val_fraction, T, cmd.test_fraction);
    if (c.vocab > cfg.vocab_size())
      throw Error(fmt::format("--tokens '{}': token id {} is outside the model's vocabulary of {}", cmd.tokens,
                              c.vocab - 1, cfg.vocab_size()));
    return c;
  }
  const std::string path = cmd.corpus.empty() ? builtin_corpus_path() : cmd.corpus;
  const std::string tokenizer = resolve_tokenizer(cmd, cfg, "--corpus");
  Corpus c = load_corpus(path, cmd.val_fraction, T, tokenizer, size_t(cmd.corpus_max_bytes), cmd.test_fraction);
  if (c.bytes() && cfg.vocab_size() < kByteVocab)
    throw Error(fmt::format("model vocab {} is too small for the bytes of {} (needs >= 256)", cfg.vocab_size(),
                            c.description()));
  if (!c.bytes() && c.vocab > cfg.vocab_size())
    throw Error(fmt::format("{}: the tokenizer's {} ids do not fit the model's vocabulary of {}", c.description(),
                            c.vocab, cfg.vocab_size()));
  return c;
}

// The windows of analyze dynamics and sinks from a corpus's training split: `batches` of B random
// windows of T ids (seed 11), drawn for `arch` (an encoder's masked), each starting with the run's
// data.bos if it had one; `input` says what they are.
std::vector<Batch> corpus_windows(const AnalyzeCommand& cmd, const Corpus& corpus, Arch arch, int T,
                                  std::string& input) {
  Rng rng(11, 3);
  std::vector<Batch> batches;
  for (int k = 0; k < cmd.batches; k++) {
    Batch b = sample_batch(corpus.train, arch, cmd.batch_size, T, rng);
    batches.push_back(cmd.bos >= 0 ? with_first_token(std::move(b), cmd.bos) : b);
  }
  input = fmt::format("{} batches of {} windows of {} {}s of {}, training split (seed 11){}", cmd.batches,
                      cmd.batch_size, T, corpus.unit(), corpus.description(),
                      cmd.bos >= 0 ? fmt::format(", each starting with id {} as the run's did (data.bos)", cmd.bos)
                                   : "");
  return batches;
}

// --tokens names a stream (windows) rather than a file of rows (its first row)
bool tokens_are_stream(const AnalyzeCommand& cmd) { return !cmd.tokens.empty() && is_token_stream(cmd.tokens); }

Input input_ids(const AnalyzeCommand& cmd, const ModelConfig& cfg) {
  const int given_inputs = int(has_text(cmd)) + int(!cmd.tokens.empty()) + int(cmd.random) + int(!cmd.corpus.empty());
  if (given_inputs > 1) throw Error("give one input: --corpus, --text/--text-file, --tokens or --random");
  if (has_text(cmd)) return text_input(cmd, cfg);
  if (!cmd.tokens.empty() && !tokens_are_stream(cmd)) {
    Batch b = load_token_file(cmd.tokens);
    check_batch(b, cfg, cmd.tokens);
    return {std::vector<int32_t>(b.ids.begin(), b.ids.begin() + b.T),
            fmt::format("the first row of token file '{}' ({} of {} rows, T = {})", cmd.tokens, 1, b.B, b.T)};
  }
  const int T = cmd.seq_len;
  if (T < 1 || T > cfg.seq_len)
    throw Error(fmt::format("--seq-len {} must be in [1, model seq_len = {}]", T, cfg.seq_len));
  Rng rng(7);
  if (cmd.random) {
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (auto& id : ids) id = int32_t(rng.below(uint64_t(std::min(cfg.vocab_size(), kByteVocab))));
    return {ids, fmt::format("{} random ids in [0, {}) (seed 7)", T, std::min(cfg.vocab_size(), kByteVocab))};
  }
  const Corpus corpus = analyze_corpus(cmd, cfg, T);
  const size_t start = rng.below(corpus.val.size() - size_t(T));  // sample_batch's window, B = 1
  Input in{window_ids(corpus.val, start, T, cmd.bos), ""};  // (after the run's first token, data.bos)
  check_ids_fit(in.ids, cfg, corpus.description());
  in.description = fmt::format("{} {}s of {}, validation split, offset {} (of {}){}", T, corpus.unit(),
                               corpus.description(), start, corpus.val.size(),
                               cmd.bos >= 0 ? fmt::format(", after id {} as the run's windows began (data.bos)", cmd.bos)
                                            : "");
  return in;
}

bool has_source(const AnalyzeCommand& cmd) { return given(cmd.source_options); }

// The encdec input: one source-target pair from --source-text and --text/--text-file (bytes, as
// translation training reads them: source bytes + EOS; decoder input BOS + target bytes, labels the
// target bytes + EOS), or a seq2seq token file (all rows when all_rows, else its first row with the
// trailing padding cut). Says what it read.
Batch encdec_input(const AnalyzeCommand& cmd, const ModelConfig& cfg, bool all_rows, std::string& input) {
  const bool text = has_text(cmd);
  if (cmd.random) throw Error("an encoder-decoder model takes --source-text (with --text) or --tokens, not --random");
  if (!cmd.tokens.empty()) {
    if (text || has_source(cmd)) throw Error("give one input: --source-text with --text/--text-file, or --tokens");
    Batch b = load_token_file(cmd.tokens);
    if (b.src.empty())
      throw Error(fmt::format("--tokens '{}': an encoder-decoder model needs a source: a token file with input_ids "
                              "(the source) and decoder_input_ids (the target), Hugging Face's seq2seq names",
                              cmd.tokens));
    check_batch(b, cfg, "--tokens '" + cmd.tokens + "'", all_rows);
    if (!all_rows && b.B > 1) {  // the first row, without its trailing padding
      const auto real_len = [](const std::vector<uint8_t>& mask, int len) {
        while (!mask.empty() && len > 1 && mask[size_t(len) - 1] == 0) len--;
        return len;
      };
      Batch r;
      r.B = 1;
      r.S = real_len(b.src_mask, b.S);
      r.T = real_len(b.mask, b.T);
      r.src.assign(b.src.begin(), b.src.begin() + r.S);
      if (!b.src_mask.empty()) r.src_mask.assign(b.src_mask.begin(), b.src_mask.begin() + r.S);
      r.ids.assign(b.ids.begin(), b.ids.begin() + r.T);
      r.labels.assign(b.labels.begin(), b.labels.begin() + r.T);
      if (!b.mask.empty()) r.mask.assign(b.mask.begin(), b.mask.begin() + r.T);
      b = r;
    }
    input = fmt::format("{} from token file '{}': source {} tokens, target {} tokens",
                        all_rows ? fmt::format("{} rows", b.B) : std::string("the first row"), cmd.tokens, b.S, b.T);
    fmt::print("input: {}\n", input);
    return b;
  }
  if (!has_source(cmd))
    throw Error("an encoder-decoder model needs a source: give --source-text \"...\" (and the target as --text or "
                "--text-file), or --tokens with a seq2seq token file (input_ids, decoder_input_ids, labels)");
  if (!cmd.tokenizer.empty())
    throw Error("an encoder-decoder model reads UTF-8 bytes (source + EOS, BOS + target); --tokenizer does not apply");
  if (given(cmd.text_options) && !cmd.text_file.empty())
    throw Error("give --text or --text-file, not both");
  // the target: BOS + its bytes fit seq_len
  TextInput given_target = read_text_input(cmd.text, cmd.text_file, size_t(std::max(1, cfg.seq_len - 1)));
  if (!text && cmd.text_file.empty()) given_target.where = "no target text";
  const std::string& target = given_target.text;
  const std::string& where = given_target.where;
  const TextInput source = read_text_input(cmd.source_text, "", 0, "--source-text");
  TokenPair pair{source_ids(source.text), {}};
  for (unsigned char c : target) pair.tgt.push_back(int32_t(c));
  if (int(pair.src.size()) > cfg.seq_len)
    throw Error(fmt::format("--source-text: {} tokens ({} bytes + EOS), more than the model's seq_len {}",
                            pair.src.size(), pair.src.size() - 1, cfg.seq_len));
  if (int(pair.tgt.size()) + 1 > cfg.seq_len)
    throw Error(fmt::format("{}: {} tokens (BOS + {} bytes), more than the model's seq_len {}", where,
                            pair.tgt.size() + 1, pair.tgt.size(), cfg.seq_len));
  Batch b = translation_batch({pair}, 0, 1);
  b.mask.clear();  // one row, nothing padded
  b.src_mask.clear();
  check_batch(b, cfg, "--source-text / " + where);
  input = fmt::format("source {} tokens from --source-text (UTF-8 bytes + EOS), target {} tokens from {} (BOS + "
                      "bytes; labels: the bytes + EOS)", b.S, b.T, where);
  fmt::print("input: {}\n", input);
  return b;
}

// Writes the results (with the model config) to --json, atomically; returns the exit code.
template <typename S>
int write_json(const AnalyzeCommand& cmd, nlohmann::json results, const Model<S>& model) {
  if (cmd.json_out.empty()) return 0;
  results["model"] = model_config_to_json(model.config());
  try {
    write_file_atomic(cmd.json_out, dump_json(results, 1) + '\n');
  } catch (const Error& e) {
    throw Error(fmt::format("--json: {}", e.what()));
  }
  fmt::print("\nfull results: {}\n", cmd.json_out);
  return 0;
}

// The instruments on an encoder-decoder model (analysis/*_encdec, attention.h).
int run_analyze_encdec(const AnalyzeCommand& cmd, Model<double>& model) {
  const ModelConfig& cfg = model.config();
  if (!cmd.corpus.empty())
    throw Error("--corpus does not apply to an encoder-decoder model: give --source-text with --text, or --tokens "
                "with a seq2seq token file");
  nlohmann::json results;
  std::string input;
  if (cmd.dynamics->parsed()) {
    const Batch b = encdec_input(cmd, cfg, true, input);
    const analysis::EncDecDynamicsReport rep = analysis::analyze_dynamics_encdec(model, {b});
    analysis::print_report(rep);
    if (cmd.update_steps > 0)
      fmt::print("update ratios and output change: not measured for encoder-decoder models (those steps train on "
                 "the byte corpus); skipped\n");
    results = analysis::to_json(rep);
  } else {
    const Batch b = encdec_input(cmd, cfg, false, input);
    const std::vector<int32_t> labels(b.ids.size(), ops::kIgnoreLabel);
    model.forward(b.ids.data(), labels.data(), 1, b.T, nullptr, b.mask_or_null(), b.source());
    if (cmd.jacobian->parsed()) {
      analysis::JacobianOptions opts;
      opts.full = !cmd.no_full;
      opts.full_max_dim = cmd.full_max_dim;
      opts.lanczos_k = cmd.lanczos_k;
      const analysis::EncDecJacobianReport rep = analysis::analyze_jacobian_encdec(model, opts);
      analysis::print_report(rep);
      results = analysis::to_json(rep);
    } else {
      const analysis::AttentionReport rep = analysis::analyze_attention(model);
      analysis::print_report(rep);
      results = analysis::to_json(rep);
    }
    results["input_ids"] = b.ids;
    results["source_ids"] = b.src;
  }
  results["input"] = input;
  return write_json(cmd, results, model);
}

// The "precision:" line of attention, dynamics and sinks; `why`: how --precision auto chose.
template <typename S>
void print_precision(const Model<S>&, const std::string& why) {
  fmt::print("precision: {}{}{}\n", std::is_same_v<S, float> ? "float32" : "float64",
             std::is_same_v<S, float> ? ", the model's own parameters (every reading summed in float64)" : "", why);
}

// analyze dynamics on a GPT or encoder: averaged over batches of corpus windows (--corpus, the
// built-in corpus, or a token stream), or on one given batch (--text: one row; --tokens with rows: all
// of them). The update steps train on windows of the corpus (or stream): --corpus names it when the
// measured batch is --text or rows; the built-in corpus otherwise, said so.
template <typename S>
int run_dynamics(const AnalyzeCommand& cmd, Model<S>& model, const std::string& why) {
  const ModelConfig& cfg = model.config();
  const bool stream = tokens_are_stream(cmd), rows = !cmd.tokens.empty() && !stream;
  if (has_text(cmd) && !cmd.tokens.empty()) throw Error("give one input: --text/--text-file or --tokens");
  if (!rows && !has_text(cmd) && (cmd.seq_len < 1 || cmd.seq_len > cfg.seq_len))
    throw Error(fmt::format("--seq-len {} must be in [1, model seq_len = {}]", cmd.seq_len, cfg.seq_len));
  if (cmd.batches < 1 || cmd.batch_size < 1) throw Error("--batches and --batch-size must be >= 1");
  if (cmd.update_steps < 0 || cmd.update_steps > 10000 || !(cmd.update_lr > 0))
    throw Error("--update-steps must be in [0, 10000] and --lr > 0");
  std::optional<Batch> batch;  // a given batch: --tokens rows (all, with their labels) or --text (one row)
  std::string input;
  if (rows) {
    batch = load_token_file(cmd.tokens);
    check_batch(*batch, cfg, cmd.tokens, cfg.has_logits());
    input = fmt::format("token file '{}': all {} rows of T = {}, with their labels", cmd.tokens, batch->B, batch->T);
  } else if (has_text(cmd)) {  // one row; the loss (if any) is the model's own objective on it
    const Input in = text_input(cmd, cfg);
    Batch b;
    b.ids = in.ids;
    b.B = 1;
    b.T = int(b.ids.size());
    b.labels.assign(b.ids.size(), ops::kIgnoreLabel);
    if (cfg.causal())
      for (int t = 0; t + 1 < b.T; t++) b.labels[size_t(t)] = b.ids[size_t(t) + 1];
    else
      for (int t = 0; t < b.T; t++) b.labels[size_t(t)] = b.ids[size_t(t)];  // reconstruction, no masking
    batch = b;
    input = in.description + (cfg.causal() ? ", labels the next tokens" : ", labels the tokens themselves");
  }
  const int T = batch ? batch->T : cmd.seq_len;  // the update steps train on corpus windows of this length
  // the corpus of the windows: of the measurement (no given batch) and of the update steps
  // (the built-in corpus is bytes: a model of another vocabulary needs --corpus for its update steps)
  const bool byte_level = cfg.vocab_size() == kByteVocab || cfg.vocab_size() == kByteVocab + 1;
  const bool steps = cmd.update_steps > 0 && cfg.has_logits();
  const bool steps_without_corpus = steps && batch && cmd.corpus.empty() && !byte_level && cmd.tokenizer.empty();
  std::optional<Corpus> corpus;
  if (!batch || (steps && !steps_without_corpus)) {
    AnalyzeCommand c = cmd;
    if (rows) c.tokens.clear();  // rows are the batch; the update steps read --corpus or the built-in corpus
    corpus = analyze_corpus(c, cfg, T);
  }
  const std::vector<Batch> batches = batch ? std::vector<Batch>{*batch} : corpus_windows(cmd, *corpus, cfg.arch, T, input);
  // the update steps' memory, checked before any reading and again before the steps (the readings'
  // activations are held then): refused when --update-steps was given, skipped with the reason when the
  // default was (a 1 B model's AdamW moments alone are 10 GB)
  const bool steps_given = cmd.dynamics->get_option("--update-steps")->count() > 0;
  const auto update_memory = [&] {
    if (!steps || steps_without_corpus) return std::string();
    double bytes = analysis::update_steps_bytes(model.table(), cfg, cmd.batch_size, T);
    if constexpr (std::is_same_v<S, double>) bytes += 2.0 * sizeof(float) * double(model.params().size());  // their float copy
    const std::string what = fmt::format("AdamW's two moments{} for the {} update steps{} of {} parameters",
                                         std::is_same_v<S, double> ? " and the float32 copy they train" : "",
                                         cmd.update_steps, steps_given ? "" : " (the default)", model.params().size());
    const std::string message = memory_shortfall(bytes, what, "; --update-steps 0 skips them");
    if (!message.empty() && steps_given) throw Error(message);
    return message;
  };
  std::string no_room = update_memory();
  fmt::print("input: {}\n", input);
  print_precision(model, why);
  const analysis::DynamicsReport rep = analysis::analyze_dynamics(model, batches);
  analysis::print_report(rep);
  nlohmann::json results = analysis::to_json(rep);
  results["input"] = input;
  if (no_room.empty()) no_room = update_memory();
  if (cmd.update_steps > 0 && !cfg.has_logits()) {
    fmt::print("update ratios and output change skipped: the model has no head (no loss to step on)\n");
  } else if (!no_room.empty()) {
    fmt::print("update ratios and output change skipped: {}\n", no_room);
    results["updates_skipped"] = no_room;
  } else if (steps_without_corpus) {
    fmt::print("update ratios and output change skipped: they train on corpus windows, and this model's vocabulary "
               "({}) is not byte-level: give --corpus FILE (with --tokenizer) to train them\n", cfg.vocab_size());
  } else if (cmd.update_steps > 0) {
    const std::string on = fmt::format("{} AdamW steps (lr {:g}) on batches of {} windows of {} {}s of {}, training "
                                       "split (seed 12){}",
                                       cmd.update_steps, cmd.update_lr, cmd.batch_size, T, corpus->unit(),
                                       corpus->description(),
                                       cmd.bos >= 0 ? fmt::format(", each starting with id {} as the run's did (data.bos)",
                                                                  cmd.bos)
                                                    : "");
    fmt::print("update steps: {}\n", on);
    analysis::UpdateReport up;
    if constexpr (std::is_same_v<S, float>)  // (the last reading: the model itself is trained, no copy)
      up = analysis::analyze_updates_in_place(model, corpus->train, cmd.update_steps, cmd.batch_size, T,
                                              cmd.update_lr, 12, cmd.bos);
    else
      up = analysis::analyze_updates(model, corpus->train, cmd.update_steps, cmd.batch_size, T, cmd.update_lr, 12,
                                     cmd.bos);
    analysis::print_report(up);
    results["updates"] = analysis::to_json(up);
    results["updates"]["input"] = on;
  }
  return write_json(cmd, results, model);
}

// analyze sinks on a GPT or encoder: windows of the corpus's training split (--corpus, the built-in
// corpus, a token stream; --seq-len 64 unless given), or the given rows (--tokens rows, --text: one).
template <typename S>
int run_sinks(const AnalyzeCommand& cmd, Model<S>& model, const std::string& why) {
  const ModelConfig& cfg = model.config();
  const bool stream = tokens_are_stream(cmd), rows = !cmd.tokens.empty() && !stream;
  if (has_text(cmd) && !cmd.tokens.empty()) throw Error("give one input: --text/--text-file or --tokens");
  const int T = cmd.sinks->get_option("--seq-len")->count() ? cmd.seq_len : std::min(64, cfg.seq_len);
  if (!rows && !has_text(cmd) && (T < 1 || T > cfg.seq_len))
    throw Error(fmt::format("--seq-len {} must be in [1, model seq_len = {}]", T, cfg.seq_len));
  if (cmd.batches < 1 || cmd.batch_size < 1 || long(cmd.batches) * cmd.batch_size > 4096)
    throw Error("--batches and --batch-size must be >= 1, with at most 4096 windows in all");
  std::vector<Batch> batches;
  std::string input;
  if (rows) {
    batches.push_back(load_token_file(cmd.tokens));
    check_batch(batches[0], cfg, cmd.tokens, false);
    input = fmt::format("token file '{}': all {} rows of T = {}", cmd.tokens, batches[0].B, batches[0].T);
  } else if (has_text(cmd)) {
    const Input in = text_input(cmd, cfg);
    Batch b;
    b.ids = in.ids;
    b.B = 1;
    b.T = int(b.ids.size());
    b.labels.assign(b.ids.size(), ops::kIgnoreLabel);
    batches.push_back(b);
    input = in.description;
  } else {
    AnalyzeCommand c = cmd;
    c.seq_len = T;
    const Corpus corpus = analyze_corpus(c, cfg, T);
    batches = corpus_windows(cmd, corpus, Arch::Gpt, T, input);  // plain windows, no masking
  }
  fmt::print("input: {}\n", input);
  print_precision(model, why);
  const analysis::SinksReport rep = analysis::analyze_sinks(model, batches);
  analysis::print_report(rep);
  nlohmann::json results = analysis::to_json(rep);
  results["input"] = input;
  return write_json(cmd, results, model);
}

// analyze attention on a GPT or encoder: one forward on the input window (input_ids), then every
// self-attention head's spectrum and bounds.
template <typename S>
int run_attention(const AnalyzeCommand& cmd, Model<S>& model, const std::string& why) {
  const Input in = input_ids(cmd, model.config());
  fmt::print("input: {}\n", in.description);
  print_precision(model, why);
  const std::vector<int32_t> labels(in.ids.size(), ops::kIgnoreLabel);
  model.forward(in.ids.data(), labels.data(), 1, int(in.ids.size()));
  const analysis::AttentionReport rep = analysis::analyze_attention(model);
  analysis::print_report(rep);
  nlohmann::json results = analysis::to_json(rep);
  results["input_ids"] = in.ids;
  results["input"] = in.description;
  return write_json(cmd, results, model);
}

// --source-text is an encoder-decoder's input only.
void refuse_source_text(const AnalyzeCommand& cmd, const ModelConfig& cfg) {
  if (has_source(cmd))
    throw Error(fmt::format("--source-text needs an encoder-decoder model (model.arch = \"encdec\"); this one is {}",
                            to_string(cfg.arch)));
}

// The model of analyze attention, dynamics or sinks in float32 when --precision asks for it, or auto
// finds its float64 copy (16 bytes a parameter with gradients; attention's, without them, 8) over a
// quarter of this machine's memory: the checkpoint's own (taken from `source`) or a config's; null when
// the float64 model is the one to read (or the model is an encoder-decoder, whose instruments read
// float64 only). `why` says how auto chose.
std::unique_ptr<Model<float>> float_model(const AnalyzeCommand& cmd, ModelSource* source, std::string& why) {
  const bool gradients = !cmd.attention->parsed();
  if (source) {
    const Model<float>& m = *source->model;
    if (m.config().encdec() || (gradients && m.forward_only())) return nullptr;
    if (analysis::instruments_in_float32(cmd.precision, m.params().size(), gradients, &why))
      return std::move(source->model);
    return nullptr;
  }
  if (cmd.precision != "float32") return nullptr;  // (a config's fresh model: float64 unless asked)
  const ModelConfig cfg = fresh_model_config(cmd);
  if (cfg.encdec()) return nullptr;
  return std::make_unique<Model<float>>(cfg);
}

}  // namespace

// A checkpoint of a normlab run knows what it read: that run's tokenizer and its corpus (or token
// stream) are the defaults of an analysis that names none, and another --tokenizer is refused.
AnalyzeCommand with_run_inputs(const AnalyzeCommand& given, const std::optional<DataConfig>& data) {
  AnalyzeCommand cmd = given;
  if (cmd.checkpoint.empty() || !data) return cmd;
  refuse_other_tokenizer(cmd.tokenizer, cmd.checkpoint);
  if (cmd.tokenizer.empty()) cmd.tokenizer = data->tokenizer;
  cmd.bos = data->bos;  // what every window of its training began with, whatever the corpus
  const bool input_given = has_text(cmd) || !cmd.tokens.empty() || cmd.random || !cmd.corpus.empty() || has_source(cmd);
  if (!input_given) {
    if (!data->tokens.empty()) cmd.tokens = data->tokens;
    else if (data->corpus != "builtin") cmd.corpus = data->corpus;
    if (data->tokens.empty()) cmd.corpus_max_bytes = data->max_bytes;
    cmd.val_fraction = data->val_fraction;
    cmd.test_fraction = data->test_fraction;
    if (!cmd.tokens.empty() || !cmd.corpus.empty())
      fmt::print("input: the run's own data ({}, its config.json)\n", !cmd.tokens.empty() ? "data.tokens '" + cmd.tokens + "'"
                                                                                         : "data.corpus '" + cmd.corpus + "'");
  }
  return cmd;
}

int run_analyze(const AnalyzeCommand& given) {
  const ProgressDisplay progress;  // the instruments' progress on stderr (util/progress.h)
  if (!given.json_out.empty() && !given.force && std::filesystem::exists(given.json_out))
    throw Error(fmt::format("--json '{}' already exists; pass --force to replace it", given.json_out));
  // a checkpoint, opened once: its parameters and the data its run read (the default input)
  std::optional<ModelSource> source;
  // analyze attention, dynamics and sinks may read the checkpoint's own float32 parameters (dynamics and
  // sinks: opened with their gradients then)
  const bool float_possible =
      (given.attention->parsed() || given.dynamics->parsed() || given.sinks->parsed()) && given.precision != "float64";
  const bool float_gradients = float_possible && !given.attention->parsed();
  std::string why;  // how --precision auto chose
  if (!given.checkpoint.empty()) {
    if (!given.config.empty() || !given.sets.empty())
      throw Error("give either --checkpoint or --config/--set, not both");
    // (a float64 instrument reads the checkpoint straight into float64: no float32 model beside it)
    source = open_model(given.checkpoint, {.forward_only = !float_gradients, .load = float_possible});
  }
  const AnalyzeCommand cmd = with_run_inputs(given, source ? source->run_data : std::nullopt);
  if (cmd.checkpoint.empty() && cmd.config.empty() && cmd.sets.empty())
    fmt::print("no --checkpoint or --config: analyzing a fresh model with the default config\n");
  if (float_possible)
    if (std::unique_ptr<Model<float>> own = float_model(cmd, source ? &*source : nullptr, why)) {
      refuse_source_text(cmd, own->config());
      return cmd.sinks->parsed()       ? run_sinks(cmd, *own, why)
             : cmd.attention->parsed() ? run_attention(cmd, *own, why)
                                       : run_dynamics(cmd, *own, why);
    }
  auto model = load_double_model(cmd, source ? &*source : nullptr);
  source.reset();  // (the float copy: the instruments read the double model)
  if (cmd.sinks->parsed() && model->config().encdec())
    throw Error("analyze sinks reads a GPT or an encoder; this model is an encoder-decoder");
  if (model->config().encdec()) return run_analyze_encdec(cmd, *model);
  refuse_source_text(cmd, model->config());
  if (cmd.dynamics->parsed()) return run_dynamics(cmd, *model, why);
  if (cmd.sinks->parsed()) return run_sinks(cmd, *model, why);
  if (cmd.attention->parsed()) return run_attention(cmd, *model, why);
  const Input in = input_ids(cmd, model->config());
  fmt::print("input: {}\n", in.description);
  const std::vector<int32_t>& ids = in.ids;
  const int T = int(ids.size());
  const std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);
  model->forward(ids.data(), labels.data(), 1, T);
  nlohmann::json results;
  analysis::JacobianOptions opts;
  opts.token = cmd.token;
  opts.full = !cmd.no_full;
  opts.full_max_dim = cmd.full_max_dim;
  opts.lanczos_k = cmd.lanczos_k;
  const analysis::JacobianReport rep = analysis::analyze_jacobian(*model, opts);
  analysis::print_report(rep);
  results = analysis::to_json(rep);
  results["input_ids"] = ids;
  results["input"] = in.description;
  return write_json(cmd, results, *model);
}

}  // namespace normlab::cli
