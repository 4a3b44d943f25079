// onsets.h: which signal of an instability moved first, and how many steps before the loss did, in a
// study that sweeps the learning rate (the stability suite's question; Wortsman et al. 2023 track the
// largest attention logit and the output logits' log Z because they grow before a run fails).
//
// The reference of every comparison is a run of the same study, not a threshold: for each setting
// (lr_sensitivity.h's grouping) and each seed whose best rate (lowest clipped final loss) learned more
// than the unigram frequencies, every run of that seed at a higher rate is read against the run at the
// best rate, which drew the same initialization and the same batches:
// - the loss fell behind at the first logged training step from which the run's training loss stays
//   above the reference's at the same step to the run's end (a diverged run is behind from the step it
//   diverged at); a run that ends level with or below the reference did not fall behind;
// - a signal left the reference's range at the first step it logged a value larger than the largest
//   the reference logged over its whole run (|value|): the largest attention logit over the layers
//   and |mean log Z| of the output logits (layer_log.signals: every logged step, where results.json
//   has them; else the steps layer_log keeps for the report; log Z only from logs that read it from the
//   forward) and the gradient norm (the training curve, before clipping);
// - the order: the signal moved first when its first logged step out of range is at or before the
//   loss's last level step (whatever happened between logged steps), after when it was still in range at
//   a logged step at which the loss was already behind (never when it stayed in range throughout), and
//   unresolved when both moments fall between the same two logged steps. The per-layer log is sparser
//   than the training curve (train.log_every_layers against train.log_every): its spacing, which each
//   entry states, decides how often the order can be told;
// - the lead is the loss's step minus the signal's first step out of range (positive: the signal first).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab::study {

// The signals read, in the order the text names them: {key in the entries, words}.
struct OnsetSignal {
  const char* key;
  const char* words;
};
inline constexpr OnsetSignal kOnsetSignals[] = {{"max_attn_logit", "the largest attention logit"},
                                                {"abs_log_z", "|mean log Z|"},
                                                {"grad_norm", "the gradient norm"}};

// [{setting, runs: [{seed, lr, best_lr, outcome ("diverged", "learned nothing", "fell behind", "level"),
//   loss_behind_step (null: did not fall behind), loss_level_until (the step compared before it),
//   signals: {key: {reference_max, onset_step (null: stayed in range), in_range_until (its last logged
//   step before the onset), lead, order ("before", "after", "never", "unresolved"; null when the loss did
//   not fall behind)}} (null where either run did not log the signal)}],
//   layer_log_every (the per-layer log's step spacing, null when none), train_log_every}], one per
// setting with a run above its seed's best rate; empty when the study does not vary train.lr.
nlohmann::json instability_onsets(const nlohmann::json& results, const nlohmann::json& sensitivity);
// One sentence per setting with a run that fell behind, for the written summary (none otherwise).
std::vector<std::string> instability_onsets_text(const nlohmann::json& onsets);

}  // namespace normlab::study
