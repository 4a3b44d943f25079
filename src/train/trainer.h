// trainer.h: the training loop: batches from a corpus or a fixed token file, gradient accumulation,
// clipping, AdamW with a schedule, periodic validation and checkpoints, metrics as JSON Lines, live
// progress, and divergence detection (a non-finite loss or gradient stops the run, naming the step
// and the first offending tensor, keeping the metrics and the last good checkpoint).
#pragma once

#include <string>

#include "train/run_config.h"

namespace normlab {

struct TrainOptions {
  bool overwrite = false;  // allow reusing an out_dir that already holds a run
  bool quiet = false;      // no progress lines
};

struct TrainResult {
  long steps_done = 0;
  double last_train_loss = 0, last_val_loss = 0;  // val NaN when there is no validation data
  bool diverged = false;
  long diverged_step = 0;
  std::string diverged_tensor;  // "loss" or a parameter name
  double tokens_per_s = 0;
  double seconds = 0;
  double unigram_entropy = 0;   // of the training bytes (nats), NaN with a token file
};

TrainResult train(const RunConfig& cfg, const TrainOptions& options);

}  // namespace normlab
