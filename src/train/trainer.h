// trainer.h: the training loop: batches from a corpus or a fixed token file, gradient accumulation,
// clipping, AdamW with a schedule, periodic validation and checkpoints, metrics as JSON Lines, live
// progress, and divergence detection (a non-finite loss or gradient stops the run, naming the step
// and the first offending tensor, keeping the metrics and the last good checkpoint); and resume from a
// run directory's newest checkpoint (the files and state in train/resume.h).
#pragma once

#include <limits>

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "distributed/comm.h"
#include "train/run_config.h"
#include "train/spikes.h"

namespace normlab {

// What the loop reports after every optimizer step (for a caller's own progress display).
struct StepInfo {
  long step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double elapsed_s = 0;
};

struct TrainOptions {
  bool overwrite = false;  // allow reusing an out_dir that already holds a run
  // Continue the run in train.out_dir from its newest checkpoint (train/resume.h): the result is
  // bit-identical to a run never stopped (same machine and thread count). The config must equal the
  // checkpoint's except train.steps (not below the checkpoint's step), log_every, checkpoint_every,
  // keep_checkpoints and out_dir; anything else is an Error naming each difference.
  bool resume = false;
  bool quiet = false;      // no progress lines
  std::function<void(const StepInfo&)> on_step;  // called after every step when set
  // Called with every record as it is written to metrics.jsonl (train, val, layers, summary, ...;
  // rank 0) when set: the Python module's live callback.
  std::function<void(const nlohmann::json&)> on_record;
  // Called after every micro-batch's backward pass (micro in [0, grad_accum)) when set: tests stop or
  // crash a run there, in the middle of a gradient accumulation (tests/test_resume.cpp).
  std::function<void(long step, int micro)> on_micro_batch;
  // When set and true, the loop stops before its next step: the metrics, a checkpoint of the last
  // completed step and a summary marked "interrupted" are written (Ctrl-C in `normlab compare`).
  // Set during a step (between its micro-batches too), it lets that step finish first.
  const std::atomic<bool>* stop = nullptr;
  // The ranks that train this run together (data parallelism, `mpirun -np P normlab train`): each
  // takes a contiguous shard of the rows of every global batch (the batch one process would draw),
  // the gradients are summed in rank order (distributed/comm.h), weighted by each shard's share of the batch's
  // labelled tokens, and every rank takes the same AdamW step. Rank 0 alone writes config.json,
  // metrics.jsonl and checkpoints, evaluates and prints. A study runs each run on dist::self().
  dist::Comm comm = dist::world();
};

struct TrainResult {
  long steps_done = 0;
  double last_train_loss = 0, last_val_loss = 0;  // val NaN when there is no validation data
  bool diverged = false;
  bool interrupted = false;     // stopped early through TrainOptions::stop
  bool stopped_at_plateau = false;  // stopped early at a validation plateau (train.stop_patience)
  long diverged_step = 0;
  std::string diverged_tensor;  // "loss" or a parameter name
  double tokens_per_s = 0;
  double seconds = 0;
  double unigram_entropy = 0;   // of the training ids (nats per byte or token), NaN with a token file
  std::string unigram_unit = "byte";  // "byte", or "token" with data.tokenizer
  double bleu = std::numeric_limits<double>::quiet_NaN();  // encdec on data.parallel: validation BLEU
  // data.test_fraction > 0: the loss of the final parameters on the whole test split, and its
  // labelled positions (NaN and 0 without a test split, or when the run diverged or was interrupted)
  double test_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t test_tokens = 0;
  std::vector<std::string> warnings;  // train/health.h: a run that stopped learning, as it was said
  SpikeScores spikes;                 // train/spikes.h: of every step in metrics.jsonl (rank 0)
};

TrainResult train(const RunConfig& cfg, const TrainOptions& options);

}  // namespace normlab
