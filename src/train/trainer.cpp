// trainer.cpp: the training loop, in one process or data-parallel over MPI ranks (TrainOptions::comm).
#include "util/clock.h"
#include "train/trainer.h"

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <optional>

#include "ops/isa.h"
#include "model/model.h"
#include "ops/common.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/health.h"
#include "train/layer_log.h"
#include "train/resume.h"
#include "train/step.h"
#include "io/safetensors.h"
#include "train/translation.h"
#include "model/decode.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"
#include "util/rng.h"

namespace normlab {

namespace fs = std::filesystem;

namespace {


std::string format_duration(double s) {
  const long total = long(s + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

// The model config of the run: the checkpoint's when starting from one (a [model] table, if given,
// must agree with it), else the config's.
ModelConfig resolve_model(const RunConfig& cfg) {
  if (cfg.train.init_from.empty()) return cfg.model;
  ModelConfig from = checkpoint_config(cfg.train.init_from);
  if (cfg.model_given) {
    nlohmann::json a = model_config_to_json(cfg.model), b = model_config_to_json(from);
    std::vector<std::string> diffs;
    for (const auto& [key, value] : b.items())
      if (key != "seed" && key != "dropout" && key != "init" && key != "init_std" && a[key] != value)
        diffs.push_back(fmt::format("{}: config {} vs checkpoint {}", key, a[key].dump(), value.dump()));
    if (!diffs.empty())
      throw Error(fmt::format("[model] disagrees with train.init_from '{}': {}", cfg.train.init_from,
                              fmt::join(diffs, "; ")));
    from.dropout = cfg.model.dropout;
  }
  return from;
}

// Name of the first parameter (canonical order) whose gradient is not finite.
std::string first_nonfinite(const Model<float>& model) {
  for (const ParamSpec& p : model.table().specs)
    for (size_t i = 0; i < p.numel; i++)
      if (!std::isfinite(model.grads()[p.offset + i])) return p.name;
  return "(none)";
}

// The labelled positions of a batch (the tokens its mean loss is over).
int64_t labelled_positions(const Batch& b) {
  int64_t n = 0;
  for (int32_t label : b.labels) n += label != ops::kIgnoreLabel;
  return n;
}

// A rank's shard of a global batch of B rows: rows [B r / P, B (r + 1) / P), contiguous, at most one
// row more than any other rank's.
struct Shard {
  long first = 0;
  int rows = 0;
};
Shard shard_of(int B, const dist::Comm& comm) {
  const long first = long(B) * comm.rank() / comm.size();
  return {first, int(long(B) * (comm.rank() + 1) / comm.size() - first)};
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

class MetricsFile {
 public:
  // append: a resumed run continues the file (already cut back to its checkpoint's step). A new
  // run's metrics file that cannot be created, or whose first line cannot be written, is removed
  // with the run's config.json, so a full disk leaves no half run that would refuse the next attempt.
  MetricsFile(const std::string& path, bool append)
      : path_(path), out_(path, append ? std::ios::app : std::ios::trunc), append_(append) {
    if (!out_) {
      const int err = errno;
      discard();
      throw Error(fmt::format("cannot write metrics file '{}': {}", path, std::strerror(err)));
    }
  }
  void write(const nlohmann::json& line) {
    errno = 0;
    out_ << dump_json(line) << '\n';
    out_.flush();
    if (!out_) {
      const int err = errno;
      if (lines_ == 0) discard();  // (a resumed run's file is kept)
      throw Error(fmt::format("write to '{}' failed: {}", path_, err ? std::strerror(err) : "disk full?"));
    }
    lines_++;
  }

 private:
  void discard() {
    if (append_) return;
    out_.close();
    std::error_code ec;
    fs::remove(path_, ec);
    fs::remove(fs::path(path_).parent_path() / "config.json", ec);
  }

 public:

 private:
  std::string path_;
  std::ofstream out_;
  bool append_;
  long lines_ = 0;
};

// Where a run starts: with options.resume, the newest checkpoint of the run directory (its state,
// path and model config), refused with the reason when its config, the run's own config.json, the
// number of ranks or train.steps do not allow an exact continuation; otherwise the model config
// resolved from cfg (train/resume.h).
struct RunStart {
  std::optional<ResumeState> resumed;
  std::string resumed_path;
  ModelConfig model_cfg;
};

RunStart start_of_run(const RunConfig& cfg, const TrainOptions& options) {
  const TrainConfig& tc = cfg.train;
  RunStart start;
  std::optional<ResumeState>& resumed = start.resumed;
  std::string& resumed_path = start.resumed_path;
  if (options.resume) {
    const auto newest = newest_checkpoint(tc.out_dir);
    if (!newest) (void)resume_run_config(tc.out_dir);  // throws the message saying what the directory is
    resumed_path = *newest;
    resumed = resume_state_from_metadata(safetensors::read(resumed_path).metadata, resumed_path);
  }
  start.model_cfg = resumed ? model_config_from_json(resumed->run_config.at("model"), resumed_path + " config")
                                  : resolve_model(cfg);
  if (resumed) {
    RunConfig wanted = cfg;
    if (!tc.init_from.empty() && !cfg.model_given) wanted.model = start.model_cfg;
    nlohmann::json w = run_config_to_json(wanted);
    const nlohmann::json& saved = resumed->run_config;
    if (!tc.init_from.empty())  // what resolve_model ignores: the parameters come from init_from
      for (const char* key : {"seed", "init", "init_std"})
        if (saved.contains("model") && saved["model"].contains(key)) w["model"][key] = saved["model"][key];
    const std::vector<std::string> diffs = resume_config_differences(saved, w);
    if (!diffs.empty())
      throw Error(fmt::format("--resume '{}': the config differs from its checkpoint's ({}): {}. Only train.steps, "
                              "train.log_every, train.checkpoint_every and train.keep_checkpoints may change at resume",
                              tc.out_dir, resumed_path, fmt::join(diffs, "; ")));
    // the run's own config.json, written when it started: a newest checkpoint of another model (copied
    // into checkpoints/, say) is not this run's, and resuming from it would rewrite the config, rotate
    // away the run's own checkpoints and mix two models in metrics.jsonl
    if (const fs::path own = fs::path(tc.out_dir) / "config.json"; fs::exists(own)) {
      const nlohmann::json mine = parse_json(read_file(own.string(), "run config"), own.string());
      const std::vector<std::string> foreign = resume_config_differences(saved, mine);
      if (!foreign.empty())
        throw Error(fmt::format("--resume '{}': its newest checkpoint {} is not of this run (its config differs "
                                "from the run's config.json: {}); move that file out of the run directory to "
                                "resume from the run's own checkpoints",
                                tc.out_dir, resumed_path, fmt::join(foreign, "; ")));
    }
    if (resumed->ranks != options.comm.size())
      throw Error(fmt::format("--resume '{}': the run was trained on {} MPI rank{} ({}), and this launch has {}: resume "
                              "it with {} (the losses of a data-parallel run depend on the number of ranks at "
                              "float32 rounding, so a resume with another number would not be exact)",
                              tc.out_dir, resumed->ranks, resumed->ranks == 1 ? "" : "s", resumed_path,
                              options.comm.size(),
                              resumed->ranks == 1 ? std::string("one process (no mpirun)")
                                                  : fmt::format("mpirun -np {}", resumed->ranks)));
    if (tc.steps < resumed->step)
      throw Error(fmt::format("--resume '{}': train.steps = {} is below the checkpoint's step {}", tc.out_dir,
                              tc.steps, resumed->step));
  }
  return start;
}

}  // namespace

TrainResult train(const RunConfig& cfg, const TrainOptions& options) {
  const TrainConfig& tc = cfg.train;
  const dist::Comm& comm = options.comm;
  const bool quiet = options.quiet || !comm.root();  // rank 0 alone prints
  RunStart begin = start_of_run(cfg, options);
  const std::optional<ResumeState>& resumed = begin.resumed;
  const std::string& resumed_path = begin.resumed_path;
  ModelConfig& model_cfg = begin.model_cfg;
  if (!model_cfg.has_logits())
    throw Error("the model has no head (model.head = none, e.g. an imported BertModel): there is no loss to "
                "train; set model.head = \"mlm\" (a new masked-LM head) or \"tied\"");
  if (model_cfg.on_sphere() && tc.adamw.weight_decay > 0)
    throw Error(fmt::format("train.weight_decay = {}: an nGPT model (placement \"ngpt\") keeps its matrices on the unit "
                            "sphere after every step, and nGPT trains without weight decay: set train.weight_decay = 0",
                            tc.adamw.weight_decay));
  if (tc.precision == ops::Precision::Bf16 && !options.quiet)
    if (const std::string why = ops::bf16_unsupported_reason(); !why.empty())
      fmt::print(stderr, "note: train.precision = \"bf16\": {}\n", why);
  Model<float> model(model_cfg);
  model.set_precision(tc.precision);
  model.set_label_smoothing(tc.label_smoothing);
  model.set_z_loss(tc.z_loss);
  model.set_qk_clip(tc.qk_clip, tc.qk_clip_alpha);  // (refuses a model whose attention cannot take it)
  if (!tc.init_from.empty() && !resumed) load_params(tc.init_from, model);
  // the optimizer, and a resumed run's weights and moments, read (and checked: finite, shapes of the
  // config) before anything in the run directory is written, so a refusal changes nothing there
  AdamW optimizer(model.table(), tc.adamw);
  if (resumed) load_training_checkpoint(resumed_path, model, optimizer);

  // data: a corpus (text, or a token stream in data.tokens), rows of a token file, or parallel pairs
  std::optional<TokenRows> rows;
  std::optional<Corpus> corpus;
  std::optional<TranslationData> parallel;
  Masking masking;
  const int T = tc.seq_len > 0 ? tc.seq_len : model_cfg.seq_len;
  if (T > model_cfg.seq_len)
    throw Error(fmt::format("train.seq_len = {} exceeds the model's seq_len {}", T, model_cfg.seq_len));
  TrainResult result;
  result.unigram_entropy = std::numeric_limits<double>::quiet_NaN();
  result.last_train_loss = result.last_val_loss = std::numeric_limits<double>::quiet_NaN();
  if (!cfg.data.parallel.empty() && !model_cfg.encdec())
    throw Error(fmt::format("data.parallel is a translation corpus: it needs model.arch = \"encdec\" (this model is {})",
                            to_string(model_cfg.arch)));
  std::string input;  // what the run trains on, in words (printed and in the summary)
  if (!cfg.data.tokens.empty() && !is_token_stream(cfg.data.tokens)) {
    const Batch all = load_token_file(cfg.data.tokens);
    check_batch(all, model_cfg, cfg.data.tokens);
    rows = split_token_rows(all, cfg.data.tokens, cfg.data.val_fraction, cfg.data.test_fraction);
    input = rows->description();
  } else if (!cfg.data.tokens.empty()) {
    if (model_cfg.encdec())
      throw Error(fmt::format("data.tokens '{}' is a token stream; an encoder-decoder trains on source-target rows "
                              "(a seq2seq token file) or data.parallel",
                              cfg.data.tokens));
    corpus = load_token_stream(cfg.data.tokens, cfg.data.val_fraction, T, cfg.data.test_fraction);
    check_model_fits_corpus(model_cfg, *corpus);
    masking = model_cfg.arch == Arch::Encoder ? corpus->masking() : Masking{};
    result.unigram_entropy = unigram_entropy(corpus->train);
    result.unigram_unit = corpus->unit();
  } else if (model_cfg.encdec()) {
    if (cfg.data.parallel.empty())
      throw Error("an encoder-decoder (model.arch = \"encdec\") trains on a parallel corpus: set data.parallel "
                  "(a directory of {train,valid}.{src,tgt}, or es-en / web-kjv) or data.tokens");
    if (model_cfg.vocab_size() < kEosToken + 1 || model_cfg.src_vocab_size() < kEosToken + 1)
      throw Error(fmt::format("data.parallel is byte-level with BOS {} and EOS {}: model.vocab must be >= {}",
                              kBosToken, kEosToken, kEosToken + 1));
    parallel = load_translation(cfg.data.parallel, T);
    input = fmt::format("parallel corpus '{}'", parallel->dir);
    if (!quiet)
      fmt::print("parallel corpus '{}': {} training and {} validation pairs ({} and {} longer than seq_len {} "
                 "left out)\n",
                 parallel->dir, parallel->train.size(), parallel->valid.size(), parallel->dropped_train,
                 parallel->dropped_valid, T);
  } else {
    corpus = load_corpus(cfg.data.corpus, cfg.data.val_fraction, T, cfg.data.tokenizer, size_t(cfg.data.max_bytes),
                         cfg.data.test_fraction);
    check_model_fits_corpus(model_cfg, *corpus);
    masking = model_cfg.arch == Arch::Encoder ? corpus->masking() : Masking{};
    result.unigram_entropy = unigram_entropy(corpus->train);
    result.unigram_unit = corpus->unit();
  }
  if (corpus)
    input = fmt::format("{}: {} training{}{} validation {}s{}", corpus->description(), corpus->train.size(),
                        corpus->test.empty() ? " and " : ", ", corpus->val.size(), corpus->unit(),
                        corpus->test.empty() ? "" : fmt::format(" and {} test {}s", corpus->test.size(), corpus->unit()));

  const int rows_per_batch = rows ? std::min(tc.batch_size, rows->train.B) : tc.batch_size;
  if (rows_per_batch < comm.size())  // (checked alike on every rank, before anything is written)
    throw Error(fmt::format("a batch of {} row{} over {} MPI ranks leaves a rank without a row: every rank takes a "
                            "shard of each batch, so train.batch_size must be at least the number of ranks",
                            rows_per_batch, rows_per_batch == 1 ? "" : "s", comm.size()));

  // run directory: never clobber an earlier run unless asked to
  const fs::path dir(tc.out_dir);
  const fs::path metrics_path = dir / "metrics.jsonl", ckpt_path = dir / "checkpoint.safetensors";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw Error(fmt::format("train.out_dir '{}': cannot create directory ({})", tc.out_dir,
                            ec ? ec.message() : "a file is in the way"));
  if (!resumed && !options.overwrite && (fs::exists(metrics_path) || fs::exists(ckpt_path)))
    throw Error(fmt::format("train.out_dir '{}' already holds a run; choose another out_dir or pass "
                            "--force to replace it (or --resume it)",
                            tc.out_dir));
  if (!options.overwrite && !resumed && fs::exists(dir / "config.json"))  // someone's file, not a run of ours
    throw Error(fmt::format("train.out_dir '{}' holds a config.json but no run (no metrics.jsonl or checkpoint); "
                            "normlab would replace it: choose another out_dir or pass --force",
                            tc.out_dir));
  // every rank has made the checks above before rank 0 writes anything: they all agree
  comm.barrier();
  KeptMetrics kept{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  RunConfig resolved = cfg;
  resolved.model = model_cfg;
  const nlohmann::json resolved_json = run_config_to_json(resolved);
  std::optional<MetricsFile> metrics_file;
  if (comm.root()) {
    remove_stale_temporaries(dir);  // of runs killed here before
    if (resumed) {
      kept = truncate_metrics(metrics_path, resumed->step);
    } else {  // a run replaced (--force): its checkpoints must not be mistaken for this run's
      remove_step_checkpoints(dir);
      fs::remove(ckpt_path, ec);
    }
    // config.json first, atomically (a full disk leaves nothing), then metrics.jsonl
    write_file_atomic((dir / "config.json").string(), dump_json(resolved_json, 2) + "\n");
    metrics_file.emplace(metrics_path.string(), resumed.has_value());
  }
  auto write_metrics = [&](const nlohmann::json& record) {
    if (metrics_file) metrics_file->write(record);
    if (metrics_file && options.on_record) options.on_record(record);
  };

  const ScheduleConfig sched{tc.schedule, tc.lr, tc.warmup_steps, tc.min_lr, int(tc.steps)};
  Rng data_rng(uint64_t(tc.seed), 1);
  // rows: batch_size consecutive training rows (fewer if the file has fewer)
  const int B = rows_per_batch;
  const int Tb = rows ? rows->train.T : T;
  long next_row = 0;
  long start = 0;  // steps done before this process (a resumed run)
  Plateau plateau;  // train.stop_patience: the validation losses so far (train/plateau.h)
  if (resumed) {
    plateau = resumed->plateau;
    data_rng.set_state(resumed->data_rng);
    next_row = resumed->next_row;
    start = result.steps_done = resumed->step;
    result.last_train_loss = kept.last_train_loss;
    result.last_val_loss = kept.last_val_loss;
    if (!quiet) fmt::print("resuming from step {} ({})\n", start, resumed_path);
  }
  plateau.min_improvement = tc.stop_min_improvement;
  plateau.patience = tc.stop_patience;
  plateau.uncounted_until = tc.stop_after_warmup ? tc.warmup_steps : 0;
  result.stopped_at_plateau = plateau.reached();  // (a resumed run that had stopped at one)
  auto checkpoint = [&](long step, const std::array<uint64_t, 4>& rng, long row) {
    if (comm.root())
      save_run_checkpoint(dir, model, optimizer,
                          ResumeState{step, rng, row, resolved_json, comm.size(), plateau}, tc.keep_checkpoints);
  };
  const Shard shard = shard_of(B, comm);
  double tokens_per_step = double(B) * Tb * tc.grad_accum;  // a translation batch: its real tokens
  if (!quiet) {
    fmt::print("normlab train: {} params, {} layers ({}), {} d_model, batch {}x{}x{}, {} steps -> {}\n",
               model.table().total, model_cfg.n_layers, to_string(model_cfg.placement_of(0)),
               model_cfg.d_model, B, Tb, tc.grad_accum, tc.steps, tc.out_dir);
    fmt::print("input: {}\n", input);
    if (comm.size() > 1)
      fmt::print("data parallel over {} MPI ranks: each takes {} rows of every batch of {}; OpenMP threads per "
                 "rank: {}\n",
                 comm.size(),
                 B % comm.size() ? fmt::format("{} or {}", B / comm.size(), B / comm.size() + 1)
                                 : fmt::format("{}", B / comm.size()),
                 B,
                 dist::threads_per_rank() ? fmt::format("{} (the cores this rank may use / ranks on this node)",
                                                        *dist::threads_per_rank())
                                          : std::string("OMP_NUM_THREADS"));
    if (rows && B < tc.batch_size)
      fmt::print("train.batch_size = {}: the token file has {} training rows, so a batch is those {} rows\n",
                 tc.batch_size, rows->train.B, B);
  }

  auto evaluate = [&]() -> double {
    if (parallel) {  // the first eval_batches x batch_size validation pairs, in order
      model.set_training(false);
      double sum = 0;
      int64_t count = 0;
      const size_t n = std::min(parallel->valid.size(), size_t(tc.eval_batches) * size_t(tc.batch_size));
      for (size_t first = 0; first < n; first += size_t(tc.batch_size)) {
        const Batch b = translation_batch(parallel->valid, first, int(std::min(size_t(tc.batch_size), n - first)));
        const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T, nullptr, b.mask_or_null(),
                                          b.source());
        sum += loss * double(model.label_count());
        count += model.label_count();
      }
      return sum / double(count);
    }
    if (rows) {  // the validation rows, in order, eval_batches x batch_size at most
      if (rows->val.B == 0) return std::numeric_limits<double>::quiet_NaN();
      model.set_training(false);
      double sum = 0;
      int64_t count = 0;
      const long n = std::min<long>(rows->val.B, long(tc.eval_batches) * tc.batch_size);
      for (long first = 0; first < n; first += tc.batch_size) {
        const Batch b = batch_rows(rows->val, first, int(std::min<long>(tc.batch_size, n - first)));
        const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T, b.types_or_null(),
                                          b.mask_or_null(), b.source());
        sum += loss * double(model.label_count());
        count += model.label_count();
      }
      return count > 0 ? sum / double(count) : std::numeric_limits<double>::quiet_NaN();
    }
    if (!corpus) return std::numeric_limits<double>::quiet_NaN();
    model.set_training(false);
    Rng eval_rng(uint64_t(tc.seed), 2);  // the same validation batches every time
    double sum = 0;
    int64_t count = 0;
    for (int k = 0; k < tc.eval_batches; k++) {
      Batch b = sample_batch(corpus->val, model_cfg.arch, tc.batch_size, T, eval_rng, masking);
      const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T);
      sum += loss * double(model.label_count());
      count += model.label_count();
    }
    return sum / double(count);
  };

  // The test split, read once by the final parameters: every test row, or every window of the
  // corpus's test ids from its first to its last (window_batch); the loss per labelled position
  auto score_test = [&]() -> std::pair<double, int64_t> {
    model.set_training(false);
    double sum = 0;
    int64_t count = 0;
    const auto add = [&](const Batch& b) {
      const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T, b.types_or_null(),
                                        b.mask_or_null(), b.source());
      sum += loss * double(model.label_count());
      count += model.label_count();
    };
    if (rows) {
      for (long first = 0; first < rows->test.B; first += tc.batch_size)
        add(batch_rows(rows->test, first, int(std::min<long>(tc.batch_size, rows->test.B - first))));
    } else if (corpus) {
      Rng mask_rng(uint64_t(tc.seed), 5);  // an encoder's masked positions: the same for every run of a seed
      const size_t windows = window_count(corpus->test, model_cfg.arch, T);
      for (size_t first = 0; first < windows; first += size_t(tc.batch_size))
        add(window_batch(corpus->test, model_cfg.arch, first, int(std::min(size_t(tc.batch_size), windows - first)), T,
                         mask_rng, masking));
    }
    return {count > 0 ? sum / double(count) : std::numeric_limits<double>::quiet_NaN(), count};
  };
  const bool has_test = (rows && rows->test.B > 0) || (corpus && !corpus->test.empty());

  // Admin's profiled omega: one pass over a batch of its own (the training data order is unchanged)
  bool admin = false;
  for (int l = 0; l < model_cfg.total_layers(); l++) admin |= model_cfg.placement_of(l) == Placement::Admin;
  if (admin && model_cfg.admin_init == AdminInit::Profile && tc.init_from.empty() && !resumed) {
    Rng profile_rng(uint64_t(tc.seed), 3);
    const Batch b = parallel ? translation_batch(parallel->train, 0, B)
                    : rows   ? batch_rows(rows->train, 0, B)
                             : sample_batch(corpus->train, model_cfg.arch, B, T, profile_rng, masking);
    const std::vector<double> omegas =
        model.profile_admin(b.ids.data(), b.B, b.T, b.mask_or_null(), b.source());
    write_metrics({{"type", "admin_profile"}, {"omega", omegas}});
    if (!quiet) fmt::print("admin: profiled omega by sub-layer: {:.3f}\n", fmt::join(omegas, " "));
  }

  // every rank starts from rank 0's parameters (they agree already unless thread counts differ)
  comm.broadcast(model.params().data(), model.params().size());

  // per-layer logs (train.log_every_layers) and DeepNet's model update on a fixed probe batch
  std::optional<LayerLogger> layer_logger;
  if (tc.log_every_layers > 0 && comm.root()) layer_logger.emplace(model);
  std::optional<Batch> probe;
  if (tc.log_model_update && comm.root()) {
    Rng probe_rng(uint64_t(tc.seed), 4);
    if (parallel) {  // the first validation pairs (training pairs if there are none)
      const std::vector<TokenPair>& pairs = parallel->valid.empty() ? parallel->train : parallel->valid;
      probe = translation_batch(pairs, 0, int(std::min(size_t(B), pairs.size())));
    } else {
      // rows: the first validation rows (training rows if there are none); a corpus: a validation window
      probe = rows ? batch_rows(rows->val.B > 0 ? rows->val : rows->train, 0, B)
                   : sample_batch(corpus->val, model_cfg.arch, B, T, probe_rng, masking);
    }
  }
  auto probe_logits = [&](std::vector<float>& out) {
    model.set_training(false);
    model.forward(probe->ids.data(), probe->labels.data(), probe->B, probe->T, probe->types_or_null(),
                  probe->mask_or_null(), probe->source());
    out.assign(model.logits(), model.logits() + size_t(probe->B) * probe->T * model_cfg.vocab_size());
  };
  std::vector<float> logits_before;

  // a run that stops learning says so (train/health.h): after its warm-up and a quarter of its steps
  RunHealth health(result.unigram_entropy, result.unigram_unit, std::max<long>(tc.warmup_steps, tc.steps / 4));
  const std::vector<std::pair<size_t, size_t>> blocks = block_ranges(model.table(), model_cfg);
  auto warn = [&](const HealthWarning& w) {
    result.warnings.push_back(w.text);
    write_metrics({{"type", "warning"}, {"step", w.step}, {"what", w.what}, {"text", w.text}});
    if (!quiet) fmt::print("warning: {}\n", w.text);
  };

  const auto t0 = Clock::now();
  double window_tokens = 0, window_seconds = 0;
  for (long step = start + 1; step <= tc.steps && !result.stopped_at_plateau; step++) {
    if (comm.any(options.stop && options.stop->load())) {  // every rank stops at the same step
      result.interrupted = true;
      if (result.steps_done > 0) checkpoint(result.steps_done, data_rng.state(), next_row);
      break;
    }
    const std::array<uint64_t, 4> rng_before = data_rng.state();  // for a checkpoint of step - 1
    const long row_before = next_row;
    const auto step_t0 = Clock::now();
    const double lr = learning_rate(sched, step);
    model.zero_grad();
    double loss = 0;
    bool bad_loss = false;
    if (parallel) tokens_per_step = 0;
    for (int micro = 0; micro < tc.grad_accum; micro++) {
      Batch sampled;
      if (parallel) {
        sampled = sample_translation_batch(parallel->train, B, data_rng);
        for (uint8_t m : sampled.src_mask) tokens_per_step += m;
        for (uint8_t m : sampled.mask) tokens_per_step += m;
      } else if (rows) {
        sampled = batch_rows(rows->train, next_row, B);
        next_row = (next_row + B) % rows->train.B;
      } else {
        sampled = sample_batch(corpus->train, model_cfg.arch, B, T, data_rng, masking);
      }
      // one process: the whole batch; several ranks: this rank's rows, whose mean loss weighs by its
      // share of the batch's labelled tokens (translation shards differ by their padding)
      const Batch mine = comm.size() > 1 ? batch_rows(sampled, shard.first, shard.rows) : Batch{};
      const Batch& batch = comm.size() > 1 ? mine : sampled;
      model.set_training(true, uint64_t(step) * 65536 + micro, shard.first);
      const double l_mine = model.forward(batch.ids.data(), batch.labels.data(), batch.B, batch.T,
                                          batch.types_or_null(), batch.mask_or_null(), batch.source());
      double l = l_mine, weight = 1;
      if (comm.size() > 1) {
        const double labelled = double(labelled_positions(sampled)), n_mine = double(model.label_count());
        weight = n_mine / labelled;
        double sum = 0;  // the batch's mean loss: the ranks' sums, added in rank order
        for (double part : comm.all_gather(n_mine > 0 ? l_mine * n_mine : 0.0)) sum += part;
        l = sum / labelled;
      }
      if (!std::isfinite(l)) {
        bad_loss = true;
        loss = l;
        break;
      }
      if (weight > 0) model.backward(weight / tc.grad_accum);
      loss += l / tc.grad_accum;
      if (options.on_micro_batch) options.on_micro_batch(step, micro);
    }
    if (!bad_loss) comm.sum_in_rank_order(model.grads().data(), model.grads().size());
    const double gnorm = bad_loss ? std::numeric_limits<double>::quiet_NaN() : grad_norm(model.grads());
    if (bad_loss || !std::isfinite(gnorm)) {
      result.diverged = true;
      result.diverged_step = step;
      result.diverged_tensor = bad_loss ? "loss" : first_nonfinite(model);
      write_metrics({{"type", "diverged"}, {"step", step}, {"tensor", result.diverged_tensor},
                     {"loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)}});
      // the parameters have not been updated this step: if finite they are the last good state
      if (all_finite(model.params())) checkpoint(step - 1, rng_before, row_before);
      if (!quiet)
        fmt::print("diverged at step {}: non-finite {}{}; metrics and the last good checkpoint are "
                   "in {}\n",
                   step, bad_loss ? "loss" : "gradient in ", bad_loss ? "" : result.diverged_tensor,
                   tc.out_dir);
      break;
    }
    if (comm.root())
      if (const auto w = health.on_gradient(step, ranges_norm(model.grads(), blocks), gnorm)) warn(*w);
    // at step 1, every log_every_layers steps and the last: the readings of this step's last
    // micro-batch, its gradients and its update
    const bool log_layers = layer_logger && (step == 1 || step % tc.log_every_layers == 0 || step == tc.steps);
    if (log_layers) layer_logger->begin(model);
    if (log_layers && probe) probe_logits(logits_before);
    const UpdateNotes update = apply_update(model, optimizer, lr, step, clip_scale(gnorm, tc.grad_clip), &comm);
    if (log_layers) {
      nlohmann::json record = layer_logger->finish(model, step);
      if (probe) {
        std::vector<float> logits_after;
        probe_logits(logits_after);
        record["model_update"] = model_update_norm(logits_before, logits_after.data(),
                                                   long(probe->B) * probe->T, model_cfg.vocab_size());
      }
      write_metrics(record);
    }
    const double dt = seconds_since(step_t0);
    window_tokens += tokens_per_step;
    window_seconds += dt;
    result.steps_done = step;
    result.last_train_loss = loss;
    nlohmann::json train_record = {{"type", "train"}, {"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm},
                                   {"tokens_per_s", tokens_per_step / dt}, {"elapsed_s", seconds_since(t0)}};
    if (tc.qk_clip > 0)  // QK-Clip: the step's largest score (before the rescale) and the groups rescaled
      train_record.update({{"max_logit", update.max_logit}, {"qk_clipped", update.qk_clipped}});
    write_metrics(train_record);
    if (options.on_step && comm.root()) options.on_step({step, tc.steps, loss, lr, gnorm, seconds_since(t0)});
    const bool last = step == tc.steps;
    if ((tc.eval_every > 0 && step % tc.eval_every == 0) || last) {
      const double val = comm.root() ? evaluate() : std::numeric_limits<double>::quiet_NaN();  // once
      result.last_val_loss = val;
      if (std::isfinite(val)) {
        write_metrics({{"type", "val"}, {"step", step}, {"loss", val}});
        if (!quiet) fmt::print("step {:>6} | validation loss {:.4f}\n", step, val);
        if (const auto w = health.on_eval(step, val)) warn(*w);
      }
      // every rank stops at the same step (only the root evaluates)
      result.stopped_at_plateau = comm.any(comm.root() && std::isfinite(val) && plateau.update(val, step)) && !last;
      if (result.stopped_at_plateau) {
        write_metrics({{"type", "plateau"}, {"step", step}, {"lowest_val_loss", plateau.lowest},
                       {"lowest_step", plateau.lowest_step}});
        if (!quiet)
          fmt::print("step {:>6} | a validation plateau: no improvement of {:g}% in {} evaluations (lowest "
                     "{:.4f} at step {}); training stops here\n",
                     step, 100 * tc.stop_min_improvement, tc.stop_patience, plateau.lowest, plateau.lowest_step);
      }
    }
    if (!quiet && (step % tc.log_every == 0 || step == 1 || last)) {
      const double elapsed = seconds_since(t0);
      fmt::print("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | "
                 "elapsed {} | eta {}\n",
                 step, tc.steps, loss, lr, gnorm, window_tokens / window_seconds,
                 format_duration(elapsed), format_duration(elapsed / double(step - start) * double(tc.steps - step)));
      std::fflush(stdout);
      window_tokens = window_seconds = 0;
    }
    if ((tc.checkpoint_every > 0 && step % tc.checkpoint_every == 0) || last || result.stopped_at_plateau)
      checkpoint(step, data_rng.state(), next_row);
  }
  if (parallel && cfg.data.bleu_sentences > 0 && result.steps_done > 0 && !result.diverged && comm.root()) {
    model.set_training(false);
    const BleuResult bleu = validation_bleu(model, *parallel, cfg.data.bleu_sentences);
    result.bleu = bleu.bleu;
    write_metrics({{"type", "bleu"}, {"step", result.steps_done}, {"bleu", bleu.bleu},
                   {"sentences", bleu.sentences}, {"detail", bleu.detail}, {"decoding", "greedy"}});
    if (!quiet)
      fmt::print("validation BLEU (greedy, first {} pairs): {}\n", bleu.sentences, bleu.detail);
  }
  if (has_test && result.steps_done > 0 && !result.diverged && !result.interrupted && comm.root()) {
    std::tie(result.test_loss, result.test_tokens) = score_test();
    write_metrics({{"type", "test"}, {"step", result.steps_done}, {"loss", result.test_loss},
                   {"tokens", result.test_tokens}});
    if (!quiet)
      fmt::print("test loss {:.4f}: the final parameters (step {}) on the whole test split ({} labelled positions, "
                 "never trained or validated on)\n",
                 result.test_loss, result.steps_done, result.test_tokens);
  }
  if (result.steps_done > 0 && !result.diverged && !result.interrupted && comm.root())
    for (const HealthWarning& w : health.at_end(result.steps_done, result.last_val_loss)) warn(w);
  result.seconds = seconds_since(t0);
  result.tokens_per_s = double(result.steps_done - start) * tokens_per_step / std::max(1e-9, result.seconds);
  write_metrics({{"type", "summary"},
                 {"steps", result.steps_done},
                 {"train_loss", result.last_train_loss},
                 {"val_loss", std::isfinite(result.last_val_loss) ? nlohmann::json(result.last_val_loss)
                                                                  : nlohmann::json(nullptr)},
                 {"diverged", result.diverged},
                 {"bleu", std::isfinite(result.bleu) ? nlohmann::json(result.bleu) : nlohmann::json(nullptr)},
                 {"test_loss", std::isfinite(result.test_loss) ? nlohmann::json(result.test_loss) : nlohmann::json(nullptr)},
                 {"test_tokens", result.test_tokens},
                 {"warnings", result.warnings},
                 {"interrupted", result.interrupted},
                 {"stopped_at_plateau", result.stopped_at_plateau},
                 {"lowest_val_loss", std::isfinite(plateau.lowest) ? nlohmann::json(plateau.lowest)
                                                                   : nlohmann::json(nullptr)},
                 {"lowest_val_step", plateau.lowest_step},
                 {"diverged_step", result.diverged_step},
                 {"tokens_per_s", result.tokens_per_s},
                 {"seconds", result.seconds},
                 {"kernels", ops::to_string(ops::active_isa())},  // ops/isa.h: the path this run took
                 {"unigram_unit", result.unigram_unit},
                 {"input", input},
                 {"unigram_entropy", std::isfinite(result.unigram_entropy)
                                         ? nlohmann::json(result.unigram_entropy)
                                         : nlohmann::json(nullptr)}});
  return result;
}

}  // namespace normlab
