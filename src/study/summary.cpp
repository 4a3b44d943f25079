// summary.cpp: the summary table, the written summary and the mean and spread over seeds of a study.
#include "study/summary.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "theory/theory.h"
#include "study/lr_sensitivity.h"
#include "study/onsets.h"
#include "study/results_view.h"

namespace normlab::study {

namespace {

using json = nlohmann::json;
using namespace view;

constexpr double kEffectMargin = 0.1;  // nats: smaller differences are called "about the same"
// Below this corpus BLEU (0-100) no setting translates yet: a few matching words, no phrases (the
// published 6L-6L models score about 35), so BLEU cannot rank the settings.
constexpr double kNoTranslationBleu = 1.0;

bool any_bleu(const json& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const json& r) { return run_bleu(r).has_value(); });
}

std::optional<double> grad_ratio(const json& run) {
  if (!run.contains("instruments") || !run["instruments"].contains("init")) return std::nullopt;
  return number(run["instruments"]["init"]["dynamics"], "grad_norm_last_over_first");
}

// An encoder-decoder's gradient-norm ratio (last layer / first) at initialization of one stack
// ("encoder" or "decoder"), if it was probed.
std::optional<double> stack_grad_ratio(const json& run, const char* stack) {
  if (!run.contains("instruments") || !run["instruments"].contains("init")) return std::nullopt;
  const json& d = run["instruments"]["init"]["dynamics"];
  return d.contains(stack) ? number(d[stack], "grad_norm_last_over_first") : std::nullopt;
}

bool any_stack_ratio(const json& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const json& r) { return stack_grad_ratio(r, "encoder").has_value(); });
}

std::optional<double> w2_grad_ratio(const json& run) {
  if (!run.contains("instruments") || !run["instruments"].contains("init")) return std::nullopt;
  return number(run["instruments"]["init"]["dynamics"], "ffn_out_grad_norm_last_over_first");
}

std::string loss_text(const json& run) {
  if (run["status"] == "diverged") return fmt::format("diverged at step {}", run["diverged"].value("step", 0L));
  const auto v = val_loss(run);
  return v ? fmt::format("{:.3f}", *v) : std::string(run["status"]);
}

// Items grouped by a key, the groups in the order their keys first appear (the study's run order).
template <class T>
using Groups = std::vector<std::pair<std::string, std::vector<T>>>;
template <class T>
std::vector<T>& group_of(Groups<T>& groups, const std::string& key) {
  auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == key; });
  return (g == groups.end() ? groups.insert(groups.end(), {key, {}}) : g)->second;
}

const json* find_run(const json& runs, const std::vector<std::string>& varying,
                     const std::map<std::string, std::string>& want) {
  for (const auto& r : runs) {
    bool ok = r.contains("summary");
    for (const auto& k : varying)
      if (ok && want.count(k) && grid_value(r, k) != want.at(k)) ok = false;
    if (ok) return &r;
  }
  return nullptr;
}

// The known warm-up effect: Post-LN without warm-up vs Pre-LN without warm-up (and Post-LN with),
// at every setting of the other varying keys where the three runs exist.
void warmup_effect(const json& runs, const std::vector<std::string>& varying, json& out) {
  const bool has_placement = std::count(varying.begin(), varying.end(), "model.placement");
  const bool has_warmup = std::count(varying.begin(), varying.end(), "train.warmup_steps");
  if (!has_placement || !has_warmup) return;
  // the smallest and largest warm-up in the study, other keys as in the first post run
  long lo = LONG_MAX, hi = LONG_MIN;
  for (const auto& r : runs) {
    const long w = r["config"]["train"]["warmup_steps"].get<long>();
    lo = std::min(lo, w);
    hi = std::max(hi, w);
  }
  std::set<std::string> done;  // one statement per setting of the other keys (e.g. per learning rate)
  for (const auto& first : runs) {
    if (grid_value(first, "model.placement") != "post" || !first.contains("summary")) continue;
    std::map<std::string, std::string> want;
    for (const auto& k : varying) want[k] = grid_value(first, k);
    want["train.warmup_steps"] = std::to_string(lo);
    const json* post_cold = find_run(runs, varying, want);
    want["model.placement"] = "pre";
    const json* pre_cold = find_run(runs, varying, want);
    want["train.warmup_steps"] = std::to_string(hi);
    want["model.placement"] = "post";
    const json* post_warm = find_run(runs, varying, want);
    if (!post_cold || !pre_cold) continue;
    const std::string where = signature(*post_cold, varying, "model.placement");
    if (!done.insert(where).second) continue;
    const auto pc = val_loss(*post_cold), pr = val_loss(*pre_cold);
    const bool post_bad = post_cold->value("status", "") == "diverged" || !pc || (pr && *pc > *pr + kEffectMargin);
    out.push_back(fmt::format(
        "Known effect, Post-LN needs warm-up: at {}{}, Post-LN ended at {} and Pre-LN at {} (validation loss): {}.",
        where,
        std::count(varying.begin(), varying.end(), "train.lr") ? ""
                                                                : fmt::format(" (lr {})", first["config"]["train"]["lr"].dump()), loss_text(*post_cold), loss_text(*pre_cold),
        post_bad ? "Post-LN without warm-up did worse, the known effect appears"
                 : "Post-LN without warm-up did not do worse here, the known effect does NOT appear in this setting"));
    if (post_warm && post_warm != post_cold) {
      const auto pw = val_loss(*post_warm);
      const bool helped = pw && (!pc || *pw < *pc - kEffectMargin);
      out.push_back(fmt::format("With {} warm-up steps Post-LN ended at {} instead of {}: warm-up {}.", hi,
                                loss_text(*post_warm), loss_text(*post_cold),
                                helped ? "helped" : "made no clear difference (within 0.1 nats)"));
    }
  }
}

// {n, mean, sd, min, max} of the values, sd the sample standard deviation (null for n < 2); null
// for no values.
json seed_stats(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  double mean = 0;
  for (double x : v) mean += x / double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {{"n", v.size()}, {"mean", mean}, {"sd", v.size() > 1 ? json(std::sqrt(ss / double(v.size() - 1))) : json(nullptr)},
          {"min", *lo}, {"max", *hi}};
}

// "2.345 +- 0.012 (2.33 to 2.36, 3 seeds)"
std::string seed_stats_text(const json& st, int digits) {
  if (st.is_null()) return "-";
  const std::string sd = st["sd"].is_number() ? fmt::format(" +- {:.{}f}", st["sd"].get<double>(), digits) : "";
  return fmt::format("{:.{}f}{} ({:.{}f} to {:.{}f}, {} seed{})", st["mean"].get<double>(), digits, sd,
                     st["min"].get<double>(), digits, st["max"].get<double>(), digits, st["n"].get<size_t>(),
                     st["n"].get<size_t>() == 1 ? "" : "s");
}

}  // namespace

json seed_groups(const json& results) {
  json out = json::array();
  const std::vector<std::string> varying = results.at("study").value("varying", std::vector<std::string>{});
  std::vector<std::string> others;
  bool seeds = false;
  for (const auto& k : varying) {
    if (is_seed_key(k)) seeds = true;
    else others.push_back(k);
  }
  if (!seeds) return out;
  Groups<const json*> groups;
  for (const auto& r : results["runs"])
    if (r.contains("summary") && r["status"] != "interrupted" && r["status"] != "not run")
      group_of(groups, signature(r, others, "")).push_back(&r);
  for (const auto& [sig, members] : groups) {
    std::vector<double> losses, bleus;
    json names = json::array();
    size_t finished = 0;
    for (const json* r : members) {
      names.push_back(r->contains("name") ? (*r)["name"] : (*r)["label"]);
      if ((*r)["status"] != "finished") continue;
      finished++;
      if (const auto v = val_loss(*r)) losses.push_back(*v);
      if (const auto b = run_bleu(*r)) bleus.push_back(*b);
    }
    out.push_back({{"setting", sig.empty() ? std::string("all runs") : sig}, {"runs", names}, {"finished", finished},
                   {"val_loss", seed_stats(losses)}, {"bleu", seed_stats(bleus)}});
  }
  return out;
}

json steps_to_target(const json& train, double target) {
  const json& loss = train["loss"];
  double sum = 0;
  for (size_t i = 0; i < loss.size(); i++) {
    sum += loss[i].get<double>();
    if (i >= size_t(kTargetWindow)) sum -= loss[i - kTargetWindow].get<double>();
    if (i + 1 >= size_t(kTargetWindow) && sum / kTargetWindow <= target) return train["step"][i];
  }
  return nullptr;
}

std::string summary_table(const json& results) {
  const json& runs = results["runs"];
  const bool with_bleu = any_bleu(runs);
  size_t w = 24;
  for (const auto& r : runs) w = std::max(w, r["label"].get<std::string>().size());
  std::string t = fmt::format("{:<{}}  {:<11} {:>10} {:>10}{} {:>11} {:>10} {:>9} {:>11}\n", "run", w, "status",
                              "train loss", "val loss", with_bleu ? fmt::format(" {:>6}", "BLEU") : "", "diverged at",
                              "to target", "tokens/s", "grad L/1");
  for (const auto& r : runs) {
    const json s = r.value("summary", json::object());
    auto num = [&](const char* k, const char* f) {
      const auto v = number(s, k);
      return v ? fmt::format(fmt::runtime(f), *v) : std::string("-");
    };
    const std::string div = r.value("status", "") == "diverged" ? std::to_string(r["diverged"].value("step", 0L)) : "-";
    const std::string target = r.contains("steps_to_target") && r["steps_to_target"].is_number()
                                   ? std::to_string(r["steps_to_target"].get<long>()) : "-";
    const auto g = grad_ratio(r);
    const auto ge = stack_grad_ratio(r, "encoder"), gd = stack_grad_ratio(r, "decoder");
    const std::string ratio = g ? fmt::format("{:.3f}", *g) : ge && gd ? fmt::format("{:.2f}/{:.2f}", *ge, *gd) : "-";
    t += fmt::format("{:<{}}  {:<11} {:>10} {:>10}{} {:>11} {:>10} {:>9} {:>11}\n", r["label"].get<std::string>(), w,
                     r["status"].get<std::string>(), num("train_loss", "{:.4f}"), num("val_loss", "{:.4f}"),
                     with_bleu ? fmt::format(" {:>6}", num("bleu", "{:.2f}")) : "", div, target,
                     num("tokens_per_s", "{:.0f}"), ratio);
  }
  std::vector<std::string> notes = {
      "run: the run's label (the grid values that differ between runs); status: finished | diverged | interrupted | "
      "failed | not run; train loss: training loss of the last step; val loss: validation loss at the end; diverged at: the "
      "step of the first non-finite loss or gradient; tokens/s: training throughput"};
  // each distinct data input once; the checkpoints runs start from counted, not listed (each run's own
  // is its record's input and its config's train.init_from)
  std::vector<std::string> inputs;
  std::set<std::string> checkpoints;
  int from_checkpoint = 0;
  for (const auto& r : runs) {
    if (!r.contains("input") || !r["input"].is_string()) continue;
    std::string input = r["input"].get<std::string>();
    if (const size_t at = input.find(view::kFromCheckpoint); at != std::string::npos) {
      checkpoints.insert(input.substr(at));
      input.resize(at);
      from_checkpoint++;
    }
    if (std::find(inputs.begin(), inputs.end(), input) == inputs.end()) inputs.push_back(input);
  }
  std::string starts;  // one checkpoint is named; several are counted
  if (checkpoints.size() == 1)
    starts = fmt::format("{} ({} run{})", *checkpoints.begin(), from_checkpoint, from_checkpoint == 1 ? "" : "s");
  else if (checkpoints.size() > 1)
    starts = fmt::format("; {} runs start from the parameters of a checkpoint ({} distinct; results.json names each "
                         "run's in its input)", from_checkpoint, checkpoints.size());
  if (!inputs.empty()) notes.push_back(fmt::format("input: {}{}", fmt::join(inputs, ", "), starts));
  const auto with_target = std::find_if(runs.begin(), runs.end(), [](const json& r) { return r.contains("loss_target"); });
  if (with_target != runs.end())
    notes.push_back(fmt::format("to target: first step where the mean of the last 20 training losses is <= {:.3f} nats",
                                (*with_target)["loss_target"].get<double>()));
  notes.push_back(any_stack_ratio(runs)
                      ? "grad L/1: gradient norm of the last layer / the first, at initialization (encoder-decoders: "
                        "encoder/decoder, each within its stack)"
                      : "grad L/1: gradient norm of the last layer / the first, at initialization");
  if (with_bleu) notes.push_back("BLEU: corpus BLEU of greedy translations of the first data.bleu_sentences validation pairs");
  t += fmt::format("{}\n", fmt::join(notes, "; "));
  const json groups = results.contains("seed_groups") ? results["seed_groups"] : seed_groups(results);
  if (!groups.empty()) {
    size_t gw = 24;
    for (const auto& g : groups) gw = std::max(gw, g["setting"].get<std::string>().size());
    t += fmt::format("\nover seeds (mean +- sample standard deviation, min to max, finished runs only):\n");
    for (const auto& g : groups)
      t += fmt::format("{:<{}}  val loss {}{}\n", g["setting"].get<std::string>(), gw, seed_stats_text(g["val_loss"], 4),
                       with_bleu ? "  BLEU " + seed_stats_text(g["bleu"], 2) : "");
  }
  return t;
}

json loss_spikes(const json& train) {
  json spikes = json::array();
  if (!train.is_object() || !train.contains("loss") || !train.contains("step")) return spikes;
  const json& loss = train["loss"];
  double sum = 0;
  size_t last = 0;  // index of the previous spiking step: consecutive ones are one spike, at its peak
  for (size_t i = 0; i < loss.size(); i++) {
    const double x = loss[i].is_number() ? loss[i].get<double>() : NAN;
    if (i >= size_t(kTargetWindow)) {
      const double mean = sum / kTargetWindow, jump = x - mean;
      if (jump > kSpikeNats) {
        if (!spikes.empty() && last + 1 == i) {
          if (jump > spikes.back()["jump"].get<double>()) spikes.back() = {{"step", train["step"][i]}, {"loss", x}, {"jump", jump}};
        } else {
          spikes.push_back({{"step", train["step"][i]}, {"loss", x}, {"jump", jump}});
        }
        last = i;
      }
      sum -= loss[i - kTargetWindow].is_number() ? loss[i - kTargetWindow].get<double>() : NAN;
    }
    sum += x;
  }
  return spikes;
}

json written_summary(const json& results) {
  json out = json::array();
  const json& runs = results["runs"];
  std::vector<std::string> varying = results["study"]["varying"];
  std::vector<const json*> done;
  for (const auto& r : runs)
    if (r.contains("summary") && r["status"] != "interrupted") done.push_back(&r);
  if (results.value("running", false))
    out.push_back(fmt::format("The study is running: {} of {} runs finished so far (a snapshot, written again after "
                              "each run).", done.size(), runs.size()));
  if (results.value("interrupted", false))
    out.push_back(fmt::format("The study was interrupted: {} of {} runs finished; the rest are not in these results.",
                              done.size(), runs.size()));
  for (const auto& r : runs)
    if (r["status"] == "failed")
      out.push_back(fmt::format("{} failed: {}", r["label"].get<std::string>(), r.value("error", "")));
  // what was not measured, and why: one sentence per reason, naming the runs (all runs: "every run")
  Groups<std::string> skipped;
  for (const auto& r : runs)
    if (r.contains("skipped"))
      for (const auto& [what, why] : r["skipped"].items())
        group_of(skipped, what + ": " + why.get<std::string>()).push_back(r["label"]);
  for (const auto& [reason, labels] : skipped)
    out.push_back(fmt::format("Not measured, {} ({}).", reason,
                              labels.size() == runs.size() ? std::string("every run") : fmt::format("{}", fmt::join(labels, ", "))));
  if (done.empty()) return out;

  // divergence
  std::vector<std::string> diverged;
  for (const json* r : done)
    if ((*r)["status"] == "diverged")
      diverged.push_back(fmt::format("{} (step {}, non-finite {})", (*r)["label"].get<std::string>(),
                                     (*r)["diverged"].value("step", 0L), (*r)["diverged"].value("tensor", "")));
  out.push_back(diverged.empty() ? std::string("No run diverged (no non-finite loss or gradient).")
                                 : fmt::format("Diverged: {}.", fmt::join(diverged, "; ")));
  // loss spikes: a sudden rise of the training loss, told apart into bumps every run that drew the
  // same batches shares (the data) and spikes of one run's own (an instability)
  std::vector<std::string> own, shared, unknown;
  std::map<long, std::vector<double>> shared_by_step;  // step -> the jumps of the runs that shared the bump
  for (const auto& e : classify_spikes(results))
    for (const auto& s : e["spikes"]) {
      const std::string kind = s["kind"];
      if (kind == "shared") {
        shared_by_step[s["step"].get<long>()].push_back(s["jump"].get<double>());
        continue;
      }
      (kind == "own" ? own : unknown).push_back(fmt::format("{} at step {} (+{:.2f} nats; {} of {} runs with the same "
                                                            "batches rose too)", e["label"].get<std::string>(),
                                                            s["step"].dump(), s["jump"].get<double>(),
                                                            s["rising"].get<int>(), s["others"].get<int>()));
    }
  for (const auto& [step, jumps] : shared_by_step) {
    const auto [lo, hi] = std::minmax_element(jumps.begin(), jumps.end());
    shared.push_back(fmt::format("step {} (spiked in {} run{}, +{})", step, jumps.size(), jumps.size() == 1 ? "" : "s",
                                 *lo == *hi ? fmt::format("{:.2f} nats", *lo) : fmt::format("{:.2f} to +{:.2f} nats", *lo, *hi)));
  }
  const std::string what = fmt::format("training loss more than {} nats above the mean of the previous {} logged steps",
                                       kSpikeNats, kTargetWindow);
  if (!own.empty()) out.push_back(fmt::format("Loss spikes of a run's own ({}; an instability: no other run that drew the "
                                              "same batches rose by {} nats there): {}.",
                                              what, kSharedSpikeNats, fmt::join(own, "; ")));
  if (!shared.empty()) out.push_back(fmt::format("Loss bumps shared by the runs that drew the same batches (the data, not "
                                                 "an instability): {}.", fmt::join(shared, "; ")));
  if (!unknown.empty()) out.push_back(fmt::format("Loss spikes that cannot be attributed (no other run drew the same "
                                                  "batches): {}.", fmt::join(unknown, "; ")));
  if (own.empty() && shared.empty() && unknown.empty() &&
      std::any_of(done.begin(), done.end(), [](const json* r) { return r->contains("train"); }))
    out.push_back(fmt::format("No loss spikes ({}).", what));
  // runs that learned nothing beyond byte (or token) frequencies
  std::vector<std::string> stuck;
  for (const json* r : done)
    if (learned_only_unigram(*r)) stuck.push_back(fmt::format("{} ({:.3f})", (*r)["label"].get<std::string>(), *val_loss(*r)));
  if (!stuck.empty()) {
    const std::string unit = done[0]->value("unigram_unit", std::string("byte"));  // "token" with data.tokenizer
    out.push_back(fmt::format("Did not get below the {3} unigram entropy of the corpus ({1:.3f} nats per {3}, where a "
                              "model that learned only {3} frequencies sits; final validation loss within {0} nats "
                              "of it or above): {2}.",
                              kStuckMargin, (*done[0])["unigram_entropy"].get<double>(), fmt::join(stuck, "; "), unit));
  }
  // best and fastest
  const json* best = nullptr;
  for (const json* r : done)
    if (val_loss(*r) && (!best || *val_loss(*r) < *val_loss(*best))) best = r;
  if (best) out.push_back(fmt::format("Best final validation loss: {} ({:.3f} nats).", (*best)["label"].get<std::string>(), *val_loss(*best)));
  const json* best_bleu = nullptr;
  for (const json* r : done)
    if (run_bleu(*r) && (!best_bleu || *run_bleu(*r) > *run_bleu(*best_bleu))) best_bleu = r;
  if (best_bleu)
    out.push_back(fmt::format("Best validation BLEU (greedy decoding of the first {} validation pairs): {} ({:.2f}).",
                              best_bleu->contains("bleu") ? (*best_bleu)["bleu"].value("sentences", 0) : 0,
                              (*best_bleu)["label"].get<std::string>(), *run_bleu(*best_bleu)));
  const json* fastest = nullptr;
  std::vector<std::string> never;
  const json* with_target = nullptr;
  for (const json* r : done) {
    if (!r->contains("loss_target")) continue;
    with_target = r;
    const json& s = (*r)["steps_to_target"];
    if (!s.is_number()) never.push_back((*r)["label"]);
    else if (!fastest || s.get<long>() < (*fastest)["steps_to_target"].get<long>()) fastest = r;
  }
  if (with_target) {
    const double target = (*with_target)["loss_target"].get<double>();
    if (fastest)
      out.push_back(fmt::format("Fastest to the loss target {:.2f}: {} (step {}){}.", target, (*fastest)["label"].get<std::string>(),
                                (*fastest)["steps_to_target"].get<long>(),
                                never.empty() ? "" : fmt::format("; never reached it: {}", fmt::join(never, ", "))));
    else
      out.push_back(fmt::format("No run reached the loss target {:.2f}.", target));
  }

  warmup_effect(runs, varying, out);
  const json sensitivity = results.contains("lr_sensitivity") ? results["lr_sensitivity"] : lr_sensitivity(results);
  for (std::string& line : lr_sensitivity_text(sensitivity)) out.push_back(std::move(line));
  for (std::string& line : best_lr_shift_text(best_lr_shift(sensitivity))) out.push_back(std::move(line));
  const json onsets = results.contains("onsets") ? results["onsets"] : instability_onsets(results, sensitivity);
  for (std::string& line : instability_onsets_text(onsets)) out.push_back(std::move(line));

  // over seeds: the mean and spread of the final numbers per setting of the other keys, and whether
  // the differences between settings exceed the spread between seeds
  const json groups = seed_groups(results);
  if (!groups.empty()) {
    std::vector<std::string> seed_keys;
    for (const auto& k : varying)
      if (is_seed_key(k)) seed_keys.push_back(k);
    for (const char* metric : {"val_loss", "bleu"}) {
      const bool is_bleu = std::string(metric) == "bleu";
      if (is_bleu && !any_bleu(runs)) continue;
      std::vector<std::string> parts;
      double lo_mean = INFINITY, hi_mean = -INFINITY, max_sd = 0;
      size_t compared = 0;
      for (const auto& g : groups) {
        const size_t lost = g["runs"].size() - g["finished"].get<size_t>();
        const std::string more = lost ? fmt::format(", {} more diverged or unfinished", lost) : "";
        if (g[metric].is_null()) {
          parts.push_back(fmt::format("{}: none ({} diverged or unfinished)", g["setting"].get<std::string>(), lost));
          continue;
        }
        parts.push_back(fmt::format("{}: {}{}", g["setting"].get<std::string>(), seed_stats_text(g[metric], is_bleu ? 2 : 3), more));
        const double m = g[metric]["mean"].get<double>();
        lo_mean = std::min(lo_mean, m);
        hi_mean = std::max(hi_mean, m);
        if (g[metric]["sd"].is_number()) max_sd = std::max(max_sd, g[metric]["sd"].get<double>());
        compared++;
      }
      out.push_back(fmt::format("Over seeds ({}), {} (mean +- sample standard deviation): {}.", fmt::join(seed_keys, ", "),
                                is_bleu ? "validation BLEU" : "final validation loss", fmt::join(parts, "; ")));
      if (is_bleu && compared > 0 && hi_mean < kNoTranslationBleu)
        out.push_back(fmt::format("Every setting's mean BLEU is below {}: no setting translates yet, so BLEU does not rank "
                                  "them here (the validation loss does).", kNoTranslationBleu));
      else if (compared > 1 && max_sd > 0)
        out.push_back(fmt::format(
            "The {} means of the {} settings span {:.{}f} ({:.{}f} to {:.{}f}); the largest standard deviation over seeds "
            "is {:.{}f}: {}.", is_bleu ? "BLEU" : "validation-loss", compared, hi_mean - lo_mean, is_bleu ? 2 : 3, lo_mean,
            is_bleu ? 2 : 3, hi_mean, is_bleu ? 2 : 3, max_sd, is_bleu ? 2 : 3,
            hi_mean - lo_mean > 2 * max_sd ? "the settings differ by more than twice the seed spread"
                                            : "the differences between settings are within twice the seed spread, "
                                              "so these seeds do not separate them"));
    }
  }

  // what each varied key changed, the other keys held fixed: one sentence per key, its groups (in the
  // order of the study's runs) apart by "; ". Seeds are not here: the spread over seeds is above.
  for (const auto& key : varying) {
    if (is_seed_key(key)) continue;
    Groups<std::string> groups;
    for (const json* r : done)
      group_of(groups, signature(*r, varying, key))
          .push_back(fmt::format("{} -> {}{}", grid_value(*r, key), loss_text(*r),
                                 run_bleu(*r) ? fmt::format(" (BLEU {:.2f})", *run_bleu(*r)) : ""));
    std::vector<std::string> parts;
    for (const auto& [sig, items] : groups)
      if (items.size() > 1) parts.push_back(fmt::format("{}{}", sig.empty() ? "" : "at " + sig + ": ", fmt::join(items, ", ")));
    if (!parts.empty())
      out.push_back(fmt::format("Varying {} (final validation loss): {}.", key_text(key, varying), fmt::join(parts, "; ")));
  }

  // gradient norm by layer at initialization (Xiong et al. 2020)
  Groups<double> ratios, w2_ratios;
  for (const auto& r : runs) {
    const std::string key = fmt::format("{} ({} layers)", placement_name(r), r["config"]["model"]["n_layers"].get<int>());
    if (const auto g = grad_ratio(r)) group_of(ratios, key).push_back(*g);
    if (const auto g = w2_grad_ratio(r)) group_of(w2_ratios, key).push_back(*g);
  }
  auto range = [](const std::vector<double>& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return *lo == *hi ? fmt::format("{:.2f}", *lo) : fmt::format("{:.2f} to {:.2f}", *lo, *hi);
  };
  if (!ratios.empty()) {
    std::vector<std::string> parts;
    for (const auto& [p, v] : ratios) {
      const std::vector<double>& w2 = group_of(w2_ratios, p);
      parts.push_back(fmt::format("{} {}{}", p, range(v), w2.empty() ? "" : fmt::format(" (W2 {})", range(w2))));
    }
    out.push_back(fmt::format("Gradient norm at initialization, last layer / first layer, all of a layer's parameters "
                              "(and the FFN output weights W2 alone, the quantity Xiong et al. 2020 analyse; they "
                              "predict > 1 for Post-LN, about 1 for Pre-LN): {}.", fmt::join(parts, "; ")));
  }

  // the same per stack of an encoder-decoder (Liu et al. 2020)
  Groups<double> enc_ratios, dec_ratios;
  for (const auto& r : runs) {
    const auto ge = stack_grad_ratio(r, "encoder"), gd = stack_grad_ratio(r, "decoder");
    if (!ge || !gd) continue;
    const json& d = r["instruments"]["init"]["dynamics"];
    const std::string key = fmt::format("{} ({}+{} layers)", placement_name(r), d["encoder"]["layers"].size(),
                                        d["decoder"]["layers"].size());
    group_of(enc_ratios, key).push_back(*ge);
    group_of(dec_ratios, key).push_back(*gd);
  }
  if (!enc_ratios.empty()) {
    std::vector<std::string> parts;
    for (const auto& [p, v] : enc_ratios)
      parts.push_back(fmt::format("{} encoder {}, decoder {}", p, range(v), range(group_of(dec_ratios, p))));
    out.push_back(fmt::format("Encoder-decoders: gradient norm at initialization by stack, last layer / first layer of "
                              "the stack, all of a layer's parameters (Liu et al. 2020: at initialization a Post-LN "
                              "decoder's gradients shrink toward its input, a ratio above 1 here, while the encoder's "
                              "stay balanced, about 1): {}.",
                              fmt::join(parts, "; ")));
  }

  // theory claims, per kind of model (fresh, trained)
  if (results.contains("theory")) {
    std::vector<std::string> models;
    for (const auto& c : results["theory"]) {
      const std::string m = c.value("model", "fresh");
      if (std::find(models.begin(), models.end(), m) == models.end()) models.push_back(m);
    }
    for (const auto& model : models) {
      // verdict -> claims, per tally: the empirical claims (laws, effects, comparisons), the bounds, and
      // the checks of algebra (identities), counted apart (theory/rules.h)
      std::map<std::string, std::map<std::string, std::vector<std::string>>> by;
      int n = 0;
      for (const auto& c : results["theory"]) {
        if (c.value("model", "fresh") != model) continue;
        n++;
        const std::string kind = c.value("kind", "effect"), v = c["verdict"], src = c["source"];
        const std::string tally = v == "skipped" || v.rfind("void", 0) == 0 ? "other"
                                  : kind == "identity"                      ? "checks of algebra (identities)"
                                  : kind == "bound"                         ? "bounds"
                                                                            : "empirical claims";
        by[tally][v].push_back(src);
      }
      std::vector<std::string> parts;
      for (const char* tally : {"empirical claims", "bounds", "checks of algebra (identities)", "other"}) {
        if (!by.count(tally)) continue;
        std::vector<std::string> verdicts;
        for (const auto& [v, srcs] : by[tally])
          verdicts.push_back(fmt::format("{} {} ({})", srcs.size(), v, fmt::join(srcs, ", ")));
        parts.push_back(std::string(tally) == "other" ? fmt::format("{}", fmt::join(verdicts, "; "))
                                                      : fmt::format("{}: {}", tally, fmt::join(verdicts, "; ")));
      }
      out.push_back(fmt::format("Theory claims on {} models ({} measured): {}.", model, n, fmt::join(parts, ". ")));
    }
  }
  return out;
}

}  // namespace normlab::study
