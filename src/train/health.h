// health.h: what a training run says when it has stopped learning. Two conditions, each said once
// while the run goes on (a warning record in metrics.jsonl and a line on the terminal) and again at
// its end if it still holds:
// - its validation loss sits at (or above) the unigram entropy of its training data, less
//   kStuckMargin: it predicts no better than the frequencies of its tokens (at two evaluations in a row
//   after its warm-up and the first quarter of its steps: a byte model that learns often sits at that
//   level for a while first);
// - the gradient of every block has vanished (below kVanishedShare of the whole gradient's norm) for
//   kVanishedSteps steps in a row: a saturated nonlinearity or a dead normalization; only the
//   embeddings and the head still learn.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace normlab {

inline constexpr double kStuckMargin = 0.05;      // nats: "at the unigram entropy" (studies use it too)
inline constexpr double kVanishedShare = 1e-6;    // of the whole gradient's norm
inline constexpr long kVanishedSteps = 10;

struct HealthWarning {
  long step = 0;
  std::string what;  // "unigram" or "blocks_vanished"
  std::string text;  // one sentence for the terminal and the record
};

class RunHealth {
 public:
  // unigram_entropy: NaN when unknown (then the loss is not judged); unit: "byte" or "token"
  RunHealth(double unigram_entropy, std::string unit, long quiet_until);
  // At an evaluation: a warning the first time the loss sits at the unigram entropy at two evaluations in
  // a row after quiet_until.
  std::optional<HealthWarning> on_eval(long step, double val);
  // At a step, the norms of the blocks' gradient and of the whole gradient: a warning the first time the
  // blocks' has been below kVanishedShare of the whole for kVanishedSteps steps in a row.
  std::optional<HealthWarning> on_gradient(long step, double block_norm, double total_norm);
  // At the end of a run (its last step and validation loss): the conditions that still hold.
  std::vector<HealthWarning> at_end(long step, double last_val) const;

 private:
  HealthWarning unigram(long step, double val, bool end) const;
  HealthWarning vanished(long step, bool end) const;
  double entropy_;
  std::string unit_;
  long quiet_until_;
  bool warned_unigram_ = false, warned_vanished_ = false;
  int unigram_run_ = 0;    // evaluations in a row at the unigram entropy after quiet_until
  long vanished_run_ = 0;  // steps in a row with the blocks' gradient vanished
};

// The [offset, offset + numel) ranges of the flat parameter buffer that belong to the blocks (every
// parameter named under a layer_prefix), and the L2 norm of a gradient over them.
std::vector<std::pair<size_t, size_t>> block_ranges(const ParamTable& table, const ModelConfig& cfg);
double ranges_norm(const std::vector<float>& grads, const std::vector<std::pair<size_t, size_t>>& ranges);

}  // namespace normlab
