// summary.h: what a study's results say, in words and as a table, generated from the data alone
// (results.json as written by the runner): which runs diverged or did not learn, which trained best
// and fastest, what each varied key changed, whether the known effects appeared, the BLEU of
// translation runs and the mean and spread over seeds, what was not measured and why, what the
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

// Loss spikes told apart. A spike of one run at step s is "shared" (data-dependent: a hard batch)
// when another run that drew the same batches (same train.seed, batch size, grad_accum, sequence
// length and data) also rose more than kSharedSpikeNats above the mean of its own previous 20 losses
// at s; "own" (an instability of this run) when none of them did; "unknown" when no other run drew
// the same batches. One other run is enough: runs in different states react to a hard batch
// differently (runs stuck at the unigram entropy rise together on a batch of rare bytes while runs
// that learned do not), but an instability is a run's alone. Per run, in results order: {label, spikes: [{step, loss, jump,
// kind, others (runs compared), rising (of them, how many rose)}]}.
inline constexpr double kSharedSpikeNats = kSpikeNats / 2;
nlohmann::json classify_spikes(const nlohmann::json& results);

// The answer. First the study's question in plain words: one sentence per setting of the varied keys
// other than the family (the placement when it varies), saying which families learned, which learned
// nothing beyond the unigram frequencies (view::learned_only_unigram) and which diverged ("Without
// warm-up at 4 layers, Post-LN and DeepNorm learned nothing beyond byte frequencies, while Pre-LN and
// Sandwich-LN learned."), one per family beyond six settings; then a sentence naming the runs whose
// lower layers' gradients vanished (at most 1e-6 of the largest layer's, at initialization or at the
// last per-layer log). Then three sentences: what ends best (each placement or family at its own best
// learning rate when the learning rate varies, else the settings ranked, over seeds), whether the
// seeds separate it from the runner-up (the 95% Welch interval of the gap), and what was unstable
// (divergence, spikes of a run's own, bumps shared by the runs that drew the same batches).
nlohmann::json headline(const nlohmann::json& results);
// results["headline"] as text for the terminal and summary.txt: "In short: ...", wrapped at 100
// columns ("" when there is none, e.g. the pretrained study).
std::string headline_text(const nlohmann::json& results);

// Per run: label, status, final train and validation loss, BLEU (translation runs), divergence
// step, steps to the loss target, tokens/s, and the gradient-norm ratio (last layer / first) at
// initialization; then, with a grid over seeds, one line per setting of the other keys with the mean
// and spread of the validation loss and the BLEU over its seeds.
std::string summary_table(const nlohmann::json& results);

// Over seeds: when train.seed or model.seed varies, one entry per setting of the other varying keys
// (in the order of the study's runs): {setting, runs: [run names (labels when unnamed)], finished, val_loss: stats, bleu:
// stats}, stats = {n, mean, sd (sample standard deviation, null for n < 2), min, max} over the runs
// that finished (a diverged or unfinished run has no final numbers; `finished` says how many did),
// null when none has the number. An empty array when no seed varies.
nlohmann::json seed_groups(const nlohmann::json& results);

// The written summary: a JSON array of sentences.
nlohmann::json written_summary(const nlohmann::json& results);

}  // namespace normlab::study
