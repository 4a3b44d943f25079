// reproduce.h: a study's reproductions of published results. A study TOML may list [[reproduce]]
// tables, each one paper result that its runs answer:
//
//   [[reproduce]]
//   claim  = "a well-trained Post-LN ends better than Pre-LN, each at its own best learning rate"
//   source = "source 001, source 004; Liu et al. 2020"
//   paper  = "IWSLT14 De-En 6L-6L BLEU: Post-LN 35.64, Pre-LN 35.50"   # the source's own numbers
//   a      = "model.placement=post"        # the runs of side a: section.key=value ..., all must match
//   b      = "model.placement=pre"
//   expect = "a < b"                       # or "a > b": the claim, on the metric
//   metric = "val_loss"                    # final validation loss (default), "lowest_val_loss" (the
//                                          # lowest of its evaluations: a run stopped at a plateau), "bleu",
//                                          # "test_loss" (the final parameters on the test split:
//                                          # data.test_fraction), "lr_sensitivity" (a side is one setting
//                                          # over a sweep of train.lr; each seed's value its LR sensitivity,
//                                          # lr_sensitivity.h; no best_lr / best_of), "max_attn_logit" (the
//                                          # largest attention logit over the layers and the logged steps of
//                                          # log_every_layers) or "abs_log_z" (the largest |mean log Z| of
//                                          # the output logits over the logged steps)
//   select = "val_loss"                    # what chooses a side's best setting (best_of, best_lr): the
//                                          # metric itself by default, the final validation loss for
//                                          # test_loss; never test_loss
//   best_lr = true                         # each side at its own best train.lr (default false)
//   best_of = ["train.lr", "train.warmup_steps"]  # or: at its best combination of these grid keys
//
// The report puts each next to normlab's numbers with the verdict of the one rule of stats.h: the
// per-seed difference a - b (paired by seed when both sides ran the same seeds, else the Welch
// interval of the means) gives a 95% interval; "holds" when it lies on the claimed side of 0,
// "violated" on the other, else "not distinguishable at this scale". A side all of whose runs
// diverged (no final numbers) is the worse one: the claim holds when it was expected to be worse,
// and is violated otherwise; runs that diverged on a side that also finished runs are counted and
// named, and left out of the mean. An lr_sensitivity side that learned at no rate is not compared (its
// sensitivity of about 0 is a flat curve, not robustness). While a run of either side has not finished (not run yet, stopped
// part-way, running) the verdict is "not yet": the bests can still move, so the numbers so far are
// shown and not read. Reproductions are analysis: they change no run, so they may be
// added to a study after its runs (compare --resume DIR --study S rewrites the report).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab::study {

// Checks a document's "reproduce" entries (types, keys, expect, metric, filter syntax) and that each
// side matches at least one of `runs` ({grid, config} objects); an Error names the entry and field.
void check_reproductions(const nlohmann::json& document, const std::vector<nlohmann::json>& runs,
                         const std::string& where);

// Does a run ({grid, config}) match a side's filter "section.key=value ..."? Numbers compare as
// numbers (1e-3 matches 0.001).
bool matches_filter(const nlohmann::json& run, const std::string& filter);

// One object per entry of results.study.document.reproduce: {claim, source, paper, metric, expect,
// a: side, b: side, difference: {kind ("paired" | "welch" | "diverged" | "none"), n, mean, lo, hi},
// gap_by_step: [{step, kind, n, mean, lo, hi}] (the loss metrics: a - b at every evaluation step,
// each run's value there, its lowest so far for lowest_val_loss, a run stopped earlier keeping its
// last), gap_by_step_text (one sentence at 1000 x 2^k steps and the last; "" with fewer than two
// steps), verdict, measured (one sentence)}; side = {filter, lr (best_lr), lr_edge, left_out (the
// settings with fewer seeds done than the most, not compared), runs, finished, diverged, pending (not
// finished yet), values, mean, sd}. An empty array when the study lists none.
nlohmann::json reproductions(const nlohmann::json& results);

// The reproductions as text lines for summary.txt and the terminal ("" when none).
std::string reproductions_text(const nlohmann::json& results);

}  // namespace normlab::study
