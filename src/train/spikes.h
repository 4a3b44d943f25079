// spikes.h: a training run's spike scores, the loss and gradient-norm instability measure of OLMo 2
// (arXiv 2501.00656), by the rule of the OLMo team's own training code (OLMo-core's
// StabilityMonitorCallback): a step's value is a spike when it exceeds the mean of the previous
// kSpikeWindow values by more than kSpikeSd of their standard deviation (population; none while
// fewer than kSpikeWindow values came before it, or when that deviation is below 1e-10), and the
// spike score is the share of all the run's steps that were spikes. Read from the run's own
// metrics.jsonl (every step's "train" record), so a run resumed from a checkpoint has the same
// scores as one that ran through.
#pragma once

#include <limits>
#include <string>
#include <vector>

namespace normlab {

inline constexpr int kSpikeWindow = 128;    // OLMo-core's window_size
inline constexpr double kSpikeSd = 6.0;     // OLMo-core's threshold_std

struct SpikeScores {
  long steps = 0;  // steps read
  // shares of the steps (NaN when fewer than kSpikeWindow steps: none could be judged)
  double loss = std::numeric_limits<double>::quiet_NaN();
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  double any = std::numeric_limits<double>::quiet_NaN();  // a spike in either (OLMo-core's SpikeScore)
  long first_loss_spike = -1, first_grad_norm_spike = -1;  // the step of the first of each, or -1
};

// Over a run's steps in order: their step numbers, losses and gradient norms (pre-clip).
SpikeScores spike_scores(const std::vector<long>& steps, const std::vector<double>& loss,
                         const std::vector<double>& grad_norm);
// The same from a metrics.jsonl: its "train" records (the last one of a step counts).
SpikeScores spike_scores_of_metrics(const std::string& metrics_path);

}  // namespace normlab
