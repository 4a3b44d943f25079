// run_config.h: the configuration of a training run ([model], [train], [data] in TOML), read
// strictly: unknown sections and keys and ill-typed values are errors, all reported in one message.
// `--set section.key=value` overrides take TOML values (a bare word is taken as a string).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/precision.h"
#include "train/optimizer.h"

namespace normlab {

struct TrainConfig {
  long steps = 300;            // a default run that shows the loss falling in about a minute
  int batch_size = 16;
  int grad_accum = 1;          // micro-batches per optimizer step
  int seq_len = 0;             // T of training batches; 0: the model's seq_len
  double lr = 2e-3;
  Schedule schedule = Schedule::Cosine;
  int warmup_steps = 30;
  double min_lr = 1e-4;        // cosine floor
  // GEMM inputs: fp32, or bf16 (rounded to bfloat16, float32 accumulation; master weights,
  // optimizer state, norms, softmax and loss stay float32): ops/precision.h, ops/gemm_backend.h
  ops::Precision precision = ops::Precision::Fp32;
  AdamWConfig adamw;           // beta1 0.9, beta2 0.95 (GPT-3/nanoGPT), eps 1e-8, weight decay 0.1
  double grad_clip = 1.0;      // global norm; 0 turns clipping off
  long seed = 1;               // data order and dropout
  double label_smoothing = 0;  // of the training loss (ops/softmax_xent.h); validation is plain NLL
  double z_loss = 0;           // z-loss coefficient of the training loss (PaLM: 1e-4); validation is plain NLL
  double qk_clip = 0;          // QK-Clip threshold tau on the self-attention scores (Kimi K2: 100); 0: off
  double qk_clip_alpha = 0.5;  // QK-Clip's balance: W_q times eta^alpha, W_k times eta^(1 - alpha)
  long eval_every = 100;       // validation every N steps (and at the end); 0: only at the end
  int eval_batches = 8;
  // Stop at a validation plateau (train/plateau.h): no improvement of stop_min_improvement of the
  // loss in stop_patience evaluations in a row; 0: run all steps.
  int stop_patience = 0;
  double stop_min_improvement = 0.005;
  bool stop_after_warmup = false;  // evaluations within the warm-up (steps <= warmup_steps) do not count
  long log_every = 10;
  long checkpoint_every = 100; // 0: only at the end (and on Ctrl-C)
  int keep_checkpoints = 2;    // step files kept in checkpoints/: the newest, and one older in case
  long log_every_layers = 0;   // per-layer instruments every N steps (layer_log.h); 0: off
  bool log_model_update = false;  // with them DeepNet's ||Delta F|| on a fixed probe batch (2 extra forwards)
  std::string out_dir = "runs/default";
  std::string init_from;       // checkpoint to start from (its config is the model's)
};

struct DataConfig {
  std::string corpus = "builtin";  // a path, or a name of corpus_path (data.h): "builtin", "bible:es", ...
  long max_bytes = 0;              // > 0: only the corpus's first bytes (whole lines); 0: all of it
  double val_fraction = 0.1;
  // > 0: the corpus's (token stream's, token file's) last test_fraction is a test split, read once,
  // at the end of a run, by its final parameters (the summary's test_loss); validation comes before it
  double test_fraction = 0;
  std::string tokens;              // a token file instead of a corpus: a stream, or rows (data.h)
  std::string tokenizer;           // "" = bytes; "gpt2" (vendored GPT-2 BPE) or a tokenizer path
  std::string parallel;            // encdec: a parallel corpus directory or a Bible pair (es-en, web-kjv)
  int bleu_sentences = 100;        // encdec: validation pairs translated (greedy) for BLEU at the end
  // >= 0: this id starts every window of a GPT's corpus (training, validation, test), the windows'
  // other T - 1 positions read the corpus (data.h with_first_token); -1: none (windows start anywhere)
  int bos = -1;
};

struct RunConfig {
  ModelConfig model;
  bool model_given = false;  // the TOML had a [model] table
  TrainConfig train;
  DataConfig data;
};

// Merges `--set a.b=value` overrides into a JSON document (Error on a malformed override).
void apply_overrides(nlohmann::json& doc, const std::vector<std::string>& overrides);
// Parses a TOML file into JSON (Error with the file, line and column on a syntax error); a .json
// file (a run directory's resolved config.json) is read as JSON. A directory is an Error naming what
// it holds.
nlohmann::json read_toml(const std::string& path);
// Strict conversion; `where` names the source in messages.
RunConfig run_config_from_json(const nlohmann::json& doc, const std::string& where);
// The run config as JSON (everything explicit), for the run directory.
nlohmann::json run_config_to_json(const RunConfig& cfg);

// The [data] of the run that made `checkpoint` (a run directory, or a checkpoint file inside one: its
// config.json, read as any run config); nullopt when there is none (a file of `normlab init`, an
// imported model) or it cannot be read. What the run read is the default input of the commands that
// read that model.
std::optional<DataConfig> run_data_of(const std::string& checkpoint);
// Error when `given` (a --tokenizer: "bytes", "gpt2" or a path) is not the tokenizer the run that
// made `checkpoint` read its data with (a model read through another tokenizer gets ids it never saw).
void refuse_other_tokenizer(const std::string& given, const std::string& checkpoint);

}  // namespace normlab
