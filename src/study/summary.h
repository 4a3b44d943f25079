// summary.h: what a study's results say, in words and as a table, generated from the data alone
// (results.json as written by the runner): which runs diverged or did not learn, which trained best
// and fastest, what each varied key changed, whether the known effects appeared, what the
// instruments read at initialization and which theory claims held.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace normlab::study {

// Steps to a loss target: the first step at which the mean of the last 20 training losses is
// <= target (null when never). `train` holds the arrays "step" and "loss".
inline constexpr int kTargetWindow = 20;
nlohmann::json steps_to_target(const nlohmann::json& train, double target);

// Loss spikes: steps whose training loss exceeds the mean of the previous 20 by more than
// kSpikeNats (after the first 20 steps); consecutive such steps are one spike, reported at its
// largest jump. Returns [{step, loss, jump}] in step order.
inline constexpr double kSpikeNats = 0.3;
nlohmann::json loss_spikes(const nlohmann::json& train);

// Per run: label, status, final train and validation loss, divergence step, steps to the loss
// target, tokens/s, and the gradient-norm ratio (last layer / first) at initialization.
std::string summary_table(const nlohmann::json& results);

// The written summary: a JSON array of sentences.
nlohmann::json written_summary(const nlohmann::json& results);

}  // namespace normlab::study
