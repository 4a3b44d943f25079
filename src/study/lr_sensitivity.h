// lr_sensitivity.h: the learning-rate sensitivity of a study that sweeps train.lr (Wortsman et al.
// 2023, "Small-scale proxies for large-scale Transformer training instabilities", arXiv 2309.14322):
// how much worse than its best a setting ends, on average over the swept rates.
//
// For each setting of the other varied keys (the seed keys aside), and each seed that ran every rate
// of the setting: the final validation loss at each rate, clipped at the loss the run started from
// (the first step's training loss, before any update; a diverged run, which has no final loss, counts
// as that loss), as their definition clips at the loss at initialization; the seed's sensitivity is
// the mean over the rates of (clipped loss - the seed's lowest clipped loss), their
// E_eta[min(l(eta), l_0) - l*] with the rates as the sample of eta (evenly spaced in log eta when the
// sweep doubles or decades). Over the seeds: the mean sensitivity with its 95% Student-t interval,
// the mean clipped curve, the rate of its lowest point, and each seed's best rate.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab::study {

// The runs of a study that sweeps train.lr, grouped as the readings below read them: one entry per
// setting of the other varied keys (the seed keys aside), its finished and diverged runs by seed and
// rate (pointers into `results`, which must outlive the entries). Empty when train.lr is not varied.
struct SweptSetting {
  std::string name;     // the other keys' values, "key=value key=value" ("" when there are none)
  nlohmann::json keys;  // the setting's value of each other varied key (grid_value text)
  std::map<std::string, std::map<double, const nlohmann::json*>> by_seed;  // seed -> rate -> run
  std::vector<std::string> seed_order;  // the seeds in the order their first run appears
  std::vector<double> rates;            // every rate any seed ran, ascending
};
std::vector<SweptSetting> swept_settings(const nlohmann::json& results);

// [{setting, rates: [lr...], seeds (the seeds counted), left_out: ["seed ...: why"], curve: [{lr, loss}],
//   best_lr, best_lr_by_seed: [...], learned_rates_by_seed: [how many rates learned more than the unigram
//   frequencies, null where the runs carry no unigram entropy], learned_nowhere (every seed learned at no
//   rate: the curve is flat at the unigram loss and the sensitivity, about 0, measures nothing),
//   signals: {max_attn_logit, abs_log_z: per rate the mean over the counted seeds of each run's largest
//   attention logit (over its layers and logged steps) and largest |mean log Z| of its output logits
//   (over the logged steps), null where none logged it: Wortsman et al.'s two instabilities against
//   the rate}, sensitivity: {n, mean, lo, hi, values}}], one per setting with at least two rates; empty when the
//   study does not vary train.lr.
nlohmann::json lr_sensitivity(const nlohmann::json& results);
// One sentence per setting, for the written summary (none when the list is empty).
std::vector<std::string> lr_sensitivity_text(const nlohmann::json& sensitivity);

// How far the best learning rate moves with the model's size (Wortsman et al.'s question; muP's and
// CompleteP's claim that it does not), from lr_sensitivity's entries: for model.n_layers and
// model.d_model, each group of settings that differ only in that key (at least two sizes), and each
// seed with a best rate at both the smallest and the largest size, log2(best at the largest / best at
// the smallest); over the seeds the mean with its 95% Student-t interval. A seed that learned at no rate
// of either size is left out (its best rate is the lowest point of a flat curve).
// [{size_key, setting (the other keys), sizes: [{size, best_lr (of the mean clipped curve),
//   best_lr_by_seed, seeds}], seeds, left_out: ["seed ...: why"], shift: {n, mean, lo, hi, values} or null}]
nlohmann::json best_lr_shift(const nlohmann::json& sensitivity);
std::vector<std::string> best_lr_shift_text(const nlohmann::json& shifts);

}  // namespace normlab::study
