// trainer.cpp: a training run, in one process or data-parallel over MPI ranks (TrainOptions::comm):
// opening it (the model, the optimizer, a resumed run's state; its data in train/run_data.h and its
// directory in train/run_dir.h) and the loop over its steps (TrainingLoop).
#include "util/clock.h"
#include "train/trainer.h"

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
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
#include "train/run_data.h"
#include "train/run_dir.h"
#include "train/spikes.h"
#include "train/step.h"
#include "io/safetensors.h"
#include "train/translation.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"
#include "util/rng.h"

namespace normlab {

namespace fs = std::filesystem;

namespace {

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
    resumed = resume_state_from_metadata(safetensors::read_index(resumed_path).metadata, resumed_path);
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

// One run's loop over its steps, from its opened model, optimizer, data and directory: the state
// carried from step to step (the data order, the plateau, the health checks, the logs) and the records
// it writes. prepare() restores a resumed run's state and does what precedes the first step; run() takes
// the steps; finish() scores the final parameters and writes the summary.
class TrainingLoop {
 public:
  TrainingLoop(const RunConfig& cfg, const TrainOptions& options, const RunStart& begin, Model<float>& model,
               AdamW& optimizer, const RunData& data, RunDirectory& dir, const nlohmann::json& resolved_json,
               TrainResult& result)
      : cfg_(cfg), tc_(cfg.train), options_(options), comm_(options.comm), quiet_(options.quiet || !comm_.root()),
        begin_(begin), model_(model), optimizer_(optimizer), data_(data), dir_(dir), resolved_json_(resolved_json),
        result_(result), sched_{tc_.schedule, tc_.lr, tc_.warmup_steps, tc_.min_lr, int(tc_.steps)},
        data_rng_(uint64_t(tc_.seed), 1), shard_(shard_of(data.B, comm_)),
        tokens_per_step_(double(data.B) * data.Tb * tc_.grad_accum),
        health_(result.unigram_entropy, result.unigram_unit, std::max<long>(tc_.warmup_steps, tc_.steps / 4)),
        blocks_(block_ranges(model.table(), model.config())) {}

  void prepare(const KeptMetrics& kept);
  void run();
  void finish();

 private:
  void write(const nlohmann::json& record) { dir_.write(record); }
  void warn(const HealthWarning& w) {
    result_.warnings.push_back(w.text);
    write({{"type", "warning"}, {"step", w.step}, {"what", w.what}, {"text", w.text}});
    if (!quiet_) fmt::print("warning: {}\n", w.text);
  }
  void checkpoint(long step, const std::array<uint64_t, 4>& rng, long row) {
    if (comm_.root())
      save_run_checkpoint(dir_.path(), model_, optimizer_,
                          ResumeState{step, rng, row, resolved_json_, comm_.size(), plateau_}, tc_.keep_checkpoints);
  }
  void print_header() const;
  void profile_admin();
  void probe_logits(std::vector<float>& out) {
    model_.set_training(false);
    model_.forward(probe_->ids.data(), probe_->labels.data(), probe_->B, probe_->T, probe_->types_or_null(),
                   probe_->mask_or_null(), probe_->source());
    out.assign(model_.logits(), model_.logits() + size_t(probe_->B) * probe_->T * model_.config().vocab_size());
  }
  // One optimizer step: false when the run stops there (diverged).
  bool step(long step);
  // The gradients of step's batch (its micro-batches, summed over the ranks): the mean loss, NaN or
  // infinite when a micro-batch's loss was not finite (then the gradients are incomplete).
  double gradients(long step, bool& bad_loss);
  void diverged(long step, double loss, bool bad_loss, const std::array<uint64_t, 4>& rng_before, long row_before);
  void evaluate(long step, bool last);
  void print_progress(long step, bool last, double loss, double lr, double gnorm);

  const RunConfig& cfg_;
  const TrainConfig& tc_;
  const TrainOptions& options_;
  const dist::Comm& comm_;
  const bool quiet_;  // rank 0 alone prints
  const RunStart& begin_;
  Model<float>& model_;
  AdamW& optimizer_;
  const RunData& data_;
  RunDirectory& dir_;
  const nlohmann::json& resolved_json_;
  TrainResult& result_;
  const ScheduleConfig sched_;
  Rng data_rng_;
  const Shard shard_;
  double tokens_per_step_;  // a translation batch: its real tokens
  long next_row_ = 0;       // a token file's next training row
  long start_ = 0;          // steps done before this process (a resumed run)
  Plateau plateau_;         // train.stop_patience: the validation losses so far (train/plateau.h)
  RunHealth health_;        // a run that stops learning says so (train/health.h)
  const std::vector<std::pair<size_t, size_t>> blocks_;
  std::optional<LayerLogger> layer_logger_;  // train.log_every_layers
  std::optional<Batch> probe_;               // DeepNet's model update on a fixed probe batch
  std::vector<float> logits_before_;
  Clock::time_point t0_;
  double window_tokens_ = 0, window_seconds_ = 0;
};

void TrainingLoop::prepare(const KeptMetrics& kept) {
  if (const std::optional<ResumeState>& resumed = begin_.resumed) {
    plateau_ = resumed->plateau;
    data_rng_.set_state(resumed->data_rng);
    next_row_ = resumed->next_row;
    start_ = result_.steps_done = resumed->step;
    result_.last_train_loss = kept.last_train_loss;
    result_.last_val_loss = kept.last_val_loss;
    if (!quiet_) fmt::print("resuming from step {} ({})\n", start_, begin_.resumed_path);
  }
  plateau_.min_improvement = tc_.stop_min_improvement;
  plateau_.patience = tc_.stop_patience;
  plateau_.uncounted_until = tc_.stop_after_warmup ? tc_.warmup_steps : 0;
  result_.stopped_at_plateau = plateau_.reached();  // (a resumed run that had stopped at one)
  if (!quiet_) print_header();
  profile_admin();
  // every rank starts from rank 0's parameters (they agree already unless thread counts differ)
  comm_.broadcast(model_.params().data(), model_.params().size());
  if (tc_.log_every_layers > 0 && comm_.root()) layer_logger_.emplace(model_);
  if (tc_.log_model_update && comm_.root()) probe_ = data_.probe_batch(uint64_t(tc_.seed));
}

void TrainingLoop::print_header() const {
  const ModelConfig& mc = model_.config();
  const int B = data_.B;
  fmt::print("normlab train: {} params, {} layers ({}), {} d_model, batch {}x{}x{}, {} steps -> {}\n",
             model_.table().total, mc.n_layers, to_string(mc.placement_of(0)), mc.d_model, B, data_.Tb,
             tc_.grad_accum, tc_.steps, tc_.out_dir);
  fmt::print("input: {}\n", data_.input);
  if (comm_.size() > 1)
    fmt::print("data parallel over {} MPI ranks: each takes {} rows of every batch of {}; OpenMP threads per "
               "rank: {}\n",
               comm_.size(),
               B % comm_.size() ? fmt::format("{} or {}", B / comm_.size(), B / comm_.size() + 1)
                                : fmt::format("{}", B / comm_.size()),
               B,
               dist::threads_per_rank() ? fmt::format("{} (the cores this rank may use / ranks on this node)",
                                                      *dist::threads_per_rank())
                                        : std::string("OMP_NUM_THREADS"));
  if (data_.rows && B < tc_.batch_size)
    fmt::print("train.batch_size = {}: the token file has {} training rows, so a batch is those {} rows\n",
               tc_.batch_size, data_.rows->train.B, B);
}

// Admin's profiled omega: one pass over a batch of its own (the training data order is unchanged)
void TrainingLoop::profile_admin() {
  const ModelConfig& mc = model_.config();
  bool admin = false;
  for (int l = 0; l < mc.total_layers(); l++) admin |= mc.placement_of(l) == Placement::Admin;
  if (!admin || mc.admin_init != AdminInit::Profile || !tc_.init_from.empty() || begin_.resumed) return;
  const Batch b = data_.profile_batch(uint64_t(tc_.seed));
  const std::vector<double> omegas = model_.profile_admin(b.ids.data(), b.B, b.T, b.mask_or_null(), b.source());
  write({{"type", "admin_profile"}, {"omega", omegas}});
  if (!quiet_) fmt::print("admin: profiled omega by sub-layer: {:.3f}\n", fmt::join(omegas, " "));
}

void TrainingLoop::run() {
  t0_ = Clock::now();
  for (long s = start_ + 1; s <= tc_.steps && !result_.stopped_at_plateau; s++) {
    if (comm_.any(options_.stop && options_.stop->load())) {  // every rank stops at the same step
      result_.interrupted = true;
      if (result_.steps_done > 0) checkpoint(result_.steps_done, data_rng_.state(), next_row_);
      break;
    }
    if (!step(s)) break;
  }
}

double TrainingLoop::gradients(long step, bool& bad_loss) {
  model_.zero_grad();
  double loss = 0;
  bad_loss = false;
  if (data_.parallel) tokens_per_step_ = 0;
  for (int micro = 0; micro < tc_.grad_accum; micro++) {
    const Batch sampled = data_.train_batch(data_rng_, next_row_, tokens_per_step_);
    // one process: the whole batch; several ranks: this rank's rows, whose mean loss weighs by its
    // share of the batch's labelled tokens (translation shards differ by their padding)
    const Batch mine = comm_.size() > 1 ? batch_rows(sampled, shard_.first, shard_.rows) : Batch{};
    const Batch& batch = comm_.size() > 1 ? mine : sampled;
    model_.set_training(true, uint64_t(step) * 65536 + micro, shard_.first);
    const double l_mine = model_.forward(batch.ids.data(), batch.labels.data(), batch.B, batch.T,
                                         batch.types_or_null(), batch.mask_or_null(), batch.source());
    double l = l_mine, weight = 1;
    if (comm_.size() > 1) {
      const double labelled = double(labelled_positions(sampled)), n_mine = double(model_.label_count());
      weight = n_mine / labelled;
      double sum = 0;  // the batch's mean loss: the ranks' sums, added in rank order
      for (double part : comm_.all_gather(n_mine > 0 ? l_mine * n_mine : 0.0)) sum += part;
      l = sum / labelled;
    }
    if (!std::isfinite(l)) {
      bad_loss = true;
      return l;
    }
    if (weight > 0) model_.backward(weight / tc_.grad_accum);
    loss += l / tc_.grad_accum;
    if (options_.on_micro_batch) options_.on_micro_batch(step, micro);
  }
  comm_.sum_in_rank_order(model_.grads().data(), model_.grads().size());
  return loss;
}

void TrainingLoop::diverged(long step, double loss, bool bad_loss, const std::array<uint64_t, 4>& rng_before,
                            long row_before) {
  result_.diverged = true;
  result_.diverged_step = step;
  result_.diverged_tensor = bad_loss ? "loss" : first_nonfinite(model_);
  write({{"type", "diverged"}, {"step", step}, {"tensor", result_.diverged_tensor},
         {"loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)}});
  // the parameters have not been updated this step: if finite they are the last good state
  if (all_finite(model_.params())) checkpoint(step - 1, rng_before, row_before);
  if (!quiet_)
    fmt::print("diverged at step {}: non-finite {}{}; metrics and the last good checkpoint are in {}\n", step,
               bad_loss ? "loss" : "gradient in ", bad_loss ? "" : result_.diverged_tensor, tc_.out_dir);
}

bool TrainingLoop::step(long step) {
  const std::array<uint64_t, 4> rng_before = data_rng_.state();  // for a checkpoint of step - 1
  const long row_before = next_row_;
  const auto step_t0 = Clock::now();
  const double lr = learning_rate(sched_, step);
  bool bad_loss = false;
  const double loss = gradients(step, bad_loss);
  const double gnorm = bad_loss ? std::numeric_limits<double>::quiet_NaN() : grad_norm(model_.grads());
  if (bad_loss || !std::isfinite(gnorm)) {
    diverged(step, loss, bad_loss, rng_before, row_before);
    return false;
  }
  if (comm_.root())
    if (const auto w = health_.on_gradient(step, ranges_norm(model_.grads(), blocks_), gnorm)) warn(*w);
  // at step 1, every log_every_layers steps and the last: the readings of this step's last
  // micro-batch, its gradients and its update
  const bool log_layers = layer_logger_ && (step == 1 || step % tc_.log_every_layers == 0 || step == tc_.steps);
  if (log_layers) layer_logger_->begin(model_);
  if (log_layers && probe_) probe_logits(logits_before_);
  const UpdateNotes update = apply_update(model_, optimizer_, lr, step, clip_scale(gnorm, tc_.grad_clip), &comm_);
  if (log_layers) {
    nlohmann::json record = layer_logger_->finish(model_, step);
    if (probe_) {
      std::vector<float> logits_after;
      probe_logits(logits_after);
      record["model_update"] = model_update_norm(logits_before_, logits_after.data(), long(probe_->B) * probe_->T,
                                                 model_.config().vocab_size());
    }
    write(record);
  }
  const double dt = seconds_since(step_t0);
  window_tokens_ += tokens_per_step_;
  window_seconds_ += dt;
  result_.steps_done = step;
  result_.last_train_loss = loss;
  nlohmann::json train_record = {{"type", "train"}, {"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm},
                                 {"tokens_per_s", tokens_per_step_ / dt}, {"elapsed_s", seconds_since(t0_)}};
  if (tc_.qk_clip > 0)  // QK-Clip: the step's largest score (before the rescale) and the groups rescaled
    train_record.update({{"max_logit", update.max_logit}, {"qk_clipped", update.qk_clipped}});
  write(train_record);
  if (options_.on_step && comm_.root()) options_.on_step({step, tc_.steps, loss, lr, gnorm, seconds_since(t0_)});
  const bool last = step == tc_.steps;
  if ((tc_.eval_every > 0 && step % tc_.eval_every == 0) || last) evaluate(step, last);
  print_progress(step, last, loss, lr, gnorm);
  if ((tc_.checkpoint_every > 0 && step % tc_.checkpoint_every == 0) || last || result_.stopped_at_plateau)
    checkpoint(step, data_rng_.state(), next_row_);
  return true;
}

void TrainingLoop::evaluate(long step, bool last) {
  const double val = comm_.root() ? data_.validation_loss(model_, tc_) : std::numeric_limits<double>::quiet_NaN();
  result_.last_val_loss = val;
  if (std::isfinite(val)) {
    write({{"type", "val"}, {"step", step}, {"loss", val}});
    if (!quiet_) fmt::print("step {:>6} | validation loss {:.4f}\n", step, val);
    if (const auto w = health_.on_eval(step, val)) warn(*w);
  }
  // every rank stops at the same step (only the root evaluates)
  result_.stopped_at_plateau = comm_.any(comm_.root() && std::isfinite(val) && plateau_.update(val, step)) && !last;
  if (!result_.stopped_at_plateau) return;
  write({{"type", "plateau"}, {"step", step}, {"lowest_val_loss", plateau_.lowest}, {"lowest_step", plateau_.lowest_step}});
  if (!quiet_)
    fmt::print("step {:>6} | a validation plateau: no improvement of {:g}% in {} evaluations (lowest "
               "{:.4f} at step {}); training stops here\n",
               step, 100 * tc_.stop_min_improvement, tc_.stop_patience, plateau_.lowest, plateau_.lowest_step);
}

void TrainingLoop::print_progress(long step, bool last, double loss, double lr, double gnorm) {
  if (quiet_ || !(step % tc_.log_every == 0 || step == 1 || last)) return;
  const double elapsed = seconds_since(t0_);
  fmt::print("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | "
             "elapsed {} | eta {}\n",
             step, tc_.steps, loss, lr, gnorm, window_tokens_ / window_seconds_, format_duration(elapsed),
             format_duration(elapsed / double(step - start_) * double(tc_.steps - step)));
  std::fflush(stdout);
  window_tokens_ = window_seconds_ = 0;
}

void TrainingLoop::finish() {
  const bool completed = result_.steps_done > 0 && !result_.diverged && comm_.root();
  // a stopped run ends at once: no evaluation starts after Ctrl-C (the greedy decoding of an early model
  // runs every sentence to seq_len: minutes), and `normlab translate` / `bleu` score its checkpoint later
  if (data_.parallel && cfg_.data.bleu_sentences > 0 && completed && result_.interrupted && !quiet_)
    fmt::print("validation BLEU skipped: the run was stopped (normlab translate and normlab bleu score its checkpoint)\n");
  if (data_.parallel && cfg_.data.bleu_sentences > 0 && completed && !result_.interrupted) {
    model_.set_training(false);
    const BleuResult bleu = validation_bleu(model_, *data_.parallel, cfg_.data.bleu_sentences);
    result_.bleu = bleu.bleu;
    write({{"type", "bleu"}, {"step", result_.steps_done}, {"bleu", bleu.bleu},
           {"sentences", bleu.sentences}, {"detail", bleu.detail}, {"decoding", "greedy"}});
    if (!quiet_) fmt::print("validation BLEU (greedy, first {} pairs): {}\n", bleu.sentences, bleu.detail);
  }
  if (data_.has_test() && completed && !result_.interrupted) {
    std::tie(result_.test_loss, result_.test_tokens) = data_.test_loss(model_, tc_);
    write({{"type", "test"}, {"step", result_.steps_done}, {"loss", result_.test_loss},
           {"tokens", result_.test_tokens}});
    if (!quiet_)
      fmt::print("test loss {:.4f}: the final parameters (step {}) on the whole test split ({} labelled positions, "
                 "never trained or validated on)\n",
                 result_.test_loss, result_.steps_done, result_.test_tokens);
  }
  if (completed && !result_.interrupted)
    for (const HealthWarning& w : health_.at_end(result_.steps_done, result_.last_val_loss)) warn(w);
  if (comm_.root()) result_.spikes = spike_scores_of_metrics((dir_.path() / "metrics.jsonl").string());
  result_.seconds = seconds_since(t0_);
  result_.tokens_per_s = double(result_.steps_done - start_) * tokens_per_step_ / std::max(1e-9, result_.seconds);
  auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  write({{"type", "summary"},
         {"steps", result_.steps_done},
         {"train_loss", result_.last_train_loss},
         {"val_loss", finite_or_null(result_.last_val_loss)},
         {"diverged", result_.diverged},
         {"bleu", finite_or_null(result_.bleu)},
         {"test_loss", finite_or_null(result_.test_loss)},
         {"test_tokens", result_.test_tokens},
         {"warnings", result_.warnings},
         {"spike_score", finite_or_null(result_.spikes.any)},
         {"spike_score_loss", finite_or_null(result_.spikes.loss)},
         {"spike_score_grad_norm", finite_or_null(result_.spikes.grad_norm)},
         {"interrupted", result_.interrupted},
         {"stopped_at_plateau", result_.stopped_at_plateau},
         {"lowest_val_loss", finite_or_null(plateau_.lowest)},
         {"lowest_val_step", plateau_.lowest_step},
         {"diverged_step", result_.diverged_step},
         {"tokens_per_s", result_.tokens_per_s},
         {"seconds", result_.seconds},
         {"kernels", ops::to_string(ops::active_isa())},  // ops/isa.h: the path this run took
         {"unigram_unit", result_.unigram_unit},
         {"input", data_.input},
         {"unigram_entropy", finite_or_null(result_.unigram_entropy)}});
}

}  // namespace

// A run: opened (the model of its config or checkpoint, the optimizer, a resumed run's state, the
// data), its directory (checked on every rank, then written by rank 0), the loop.
TrainResult train(const RunConfig& cfg, const TrainOptions& options) {
  const TrainConfig& tc = cfg.train;
  const dist::Comm& comm = options.comm;
  const bool quiet = options.quiet || !comm.root();  // rank 0 alone prints
  const RunStart begin = start_of_run(cfg, options);
  const ModelConfig& model_cfg = begin.model_cfg;
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
  if (!tc.init_from.empty() && !begin.resumed) load_params(tc.init_from, model);
  // the optimizer, and a resumed run's weights and moments, read (and checked: finite, shapes of the
  // config) before anything in the run directory is written, so a refusal changes nothing there
  AdamW optimizer(model.table(), tc.adamw, adam_scaling(model.table(), model.config()));
  if (begin.resumed) load_training_checkpoint(begin.resumed_path, model, optimizer);
  const RunData data = open_run_data(cfg, model_cfg, quiet);
  TrainResult result;
  result.unigram_entropy = data.unigram_entropy;
  result.unigram_unit = data.unigram_unit;
  result.last_train_loss = result.last_val_loss = std::numeric_limits<double>::quiet_NaN();
  if (data.B < comm.size())  // (checked alike on every rank, before anything is written)
    throw Error(fmt::format("a batch of {} row{} over {} MPI ranks leaves a rank without a row: every rank takes a "
                            "shard of each batch, so train.batch_size must be at least the number of ranks",
                            data.B, data.B == 1 ? "" : "s", comm.size()));

  // the run directory: never clobber an earlier run unless asked to
  RunDirectory dir(tc.out_dir, begin.resumed.has_value(), options.overwrite);
  // every rank has made the checks above before rank 0 writes anything: they all agree
  comm.barrier();
  KeptMetrics kept{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  RunConfig resolved = cfg;
  resolved.model = model_cfg;
  const nlohmann::json resolved_json = run_config_to_json(resolved);
  if (comm.root())
    kept = dir.open(resolved_json, begin.resumed ? std::optional<long>(begin.resumed->step) : std::nullopt,
                    options.on_record);

  TrainingLoop loop(cfg, options, begin, model, optimizer, data, dir, resolved_json, result);
  loop.prepare(kept);
  loop.run();
  loop.finish();
  return result;
}

}  // namespace normlab
