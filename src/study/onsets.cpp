// onsets.cpp: which signal of an instability moved first in a learning-rate sweep (onsets.h).
#include "study/onsets.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <optional>

#include "study/lr_sensitivity.h"
#include "study/results_view.h"

namespace normlab::study {

using json = nlohmann::json;
using namespace view;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A logged quantity of a run over its steps: |value| (the largest over the layers for a per-layer
// one), NaN where a step logged none.
struct Series {
  std::vector<long> step;
  std::vector<double> value;
};

// |x| of a JSON number, or of the largest finite |x| of an array of them; NaN when there is none
double magnitude(const json& x) {
  if (x.is_number()) return std::abs(x.get<double>());
  double out = kNaN;
  if (x.is_array())
    for (const json& v : x)
      if (v.is_number() && std::isfinite(v.get<double>()))
        out = std::isnan(out) ? std::abs(v.get<double>()) : std::max(out, std::abs(v.get<double>()));
  return out;
}

std::optional<Series> series_of(const json& steps, const json& values) {
  if (!steps.is_array() || !values.is_array() || steps.size() != values.size() || steps.empty()) return std::nullopt;
  Series s;
  for (size_t k = 0; k < steps.size(); k++) {
    if (!steps[k].is_number_integer()) return std::nullopt;
    s.step.push_back(steps[k].get<long>());
    s.value.push_back(magnitude(values[k]));
  }
  return s;
}

// The series of one of kOnsetSignals' keys, or of "loss", in a run (nullopt when it did not log it)
std::optional<Series> signal_series(const json& run, const std::string& key) {
  if (key == "grad_norm" || key == "loss") {
    if (!run.contains("train") || !run["train"].is_object()) return std::nullopt;
    const json& t = run["train"];
    return series_of(t.value("step", json()), t.value(key, json()));
  }
  if (!run.contains("layer_log") || !run["layer_log"].is_object()) return std::nullopt;
  const json& log = run["layer_log"];
  // every logged step (run_metrics.cpp's "signals"), where the study read them; else the steps kept
  // for the report (results.json from before)
  if (log.contains("signals") && log["signals"].is_object()) {
    const json& all = log["signals"];
    const char* name = key == "max_attn_logit" ? "max_attn_logit" : "log_z_mean";  // (the log Z only from the forward)
    if (key != "max_attn_logit" && key != "abs_log_z") return std::nullopt;
    return all.contains(name) ? series_of(all.value("step", json()), all[name]) : std::nullopt;
  }
  if (key == "max_attn_logit") {
    if (!log.contains("values") || !log["values"].is_object()) return std::nullopt;
    return series_of(log.value("step", json()), log["values"].value("attn_max_logit", json()));
  }
  if (key == "abs_log_z" && log.value("log_z_of", std::string()) == "forward")  // earlier logs read the gradient
    return series_of(log.value("step", json()), log.value("log_z_mean", json()));
  return std::nullopt;
}

// The largest gap between consecutive logged steps (the resolution of a step read from the series)
json spacing(const std::optional<Series>& s) {
  if (!s || s->step.size() < 2) return nullptr;
  long gap = 0;
  for (size_t k = 1; k < s->step.size(); k++) gap = std::max(gap, s->step[k] - s->step[k - 1]);
  return gap;
}

// When a run's loss fell behind the reference's: {step, level_until}, step the first of the stretch,
// ending at the run's last step compared, over which its training loss is above the reference's at the
// same step (NaN is above), level_until the step compared before it (null when none was); both null
// when the last step compared is not behind. A diverged run is behind from the step it diverged at.
json loss_behind(const json& run, const json& reference) {
  const auto loss = signal_series(run, "loss"), ref = signal_series(reference, "loss");
  json step = nullptr, until = nullptr, last_level = nullptr, last_compared = nullptr;
  bool behind = false;
  if (loss && ref) {
    std::map<long, double> ref_at;
    for (size_t k = 0; k < ref->step.size(); k++) ref_at[ref->step[k]] = ref->value[k];
    for (size_t k = 0; k < loss->step.size(); k++) {
      const auto r = ref_at.find(loss->step[k]);
      if (r == ref_at.end()) continue;
      const bool now = !(loss->value[k] <= r->second);
      if (now && !behind) step = loss->step[k], until = last_level;
      if (!now) last_level = loss->step[k];
      behind = now;
      last_compared = loss->step[k];
    }
  }
  if (!behind && run.value("status", std::string()) == "diverged") {
    behind = true;
    until = last_compared;
    if (run.contains("diverged") && run["diverged"].is_object() && run["diverged"].contains("step"))
      step = run["diverged"]["step"];  // the run's "diverged" record
    else if (run.contains("summary") && run["summary"].is_object())
      step = run["summary"].value("diverged_step", 0L);
  }
  if (!behind) step = until = nullptr;
  return {{"step", step}, {"level_until", until}};
}

// A signal's onset against the reference's range, and its order against the loss's: "before" when its
// first logged step out of range is at or before the loss's last level step (it moved first whatever
// happened between the logged steps), "after" when it was still in range at a step the loss was
// already behind, "unresolved" when the two moments fall between the same logged steps.
json signal_onset(const json& run, const json& reference, const std::string& key, const json& behind) {
  const auto s = signal_series(run, key), ref = signal_series(reference, key);
  if (!s || !ref) return nullptr;
  double ref_max = kNaN;
  for (double v : ref->value)
    if (std::isfinite(v)) ref_max = std::isnan(ref_max) ? v : std::max(ref_max, v);
  if (std::isnan(ref_max)) return nullptr;
  json onset = nullptr, in_range_until = nullptr;
  for (size_t k = 0; k < s->step.size() && onset.is_null(); k++) {
    if (s->value[k] > ref_max || std::isinf(s->value[k]))
      onset = s->step[k];
    else
      in_range_until = s->step[k];
  }
  json lead = nullptr, order = nullptr;
  const json& loss_step = behind["step"];
  if (!loss_step.is_null()) {
    const long L = loss_step.get<long>();
    if (!onset.is_null()) lead = L - onset.get<long>();
    const json& level = behind["level_until"];
    if (!onset.is_null() && !level.is_null() && onset.get<long>() <= level.get<long>())
      order = "before";
    else if (!in_range_until.is_null() && in_range_until.get<long>() >= L)
      order = onset.is_null() ? "never" : "after";  // never: in range at every logged step
    else
      order = "unresolved";
  }
  return {{"reference_max", ref_max}, {"onset_step", onset}, {"in_range_until", in_range_until}, {"lead", lead},
          {"order", order}};
}

std::string outcome_of(const json& run, const json& behind) {
  if (run.value("status", std::string()) == "diverged") return "diverged";
  if (learned_only_unigram(run)) return "learned nothing";
  return behind["step"].is_null() ? "level" : "fell behind";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

json instability_onsets(const json& results, const json& sensitivity) {
  json out = json::array();
  if (!sensitivity.is_array()) return out;
  const std::vector<SweptSetting> settings = swept_settings(results);
  for (const json& e : sensitivity) {
    if (!e.contains("best_lr_by_seed") || !e["best_lr_by_seed"].is_array()) continue;
    const std::string name = e.value("setting", std::string());
    const auto s = std::find_if(settings.begin(), settings.end(), [&](const SweptSetting& x) {
      return (x.name.empty() ? std::string("all runs") : x.name) == name;
    });
    if (s == settings.end()) continue;
    json runs = json::array();
    json layer_every = nullptr, train_every = nullptr;
    for (size_t i = 0; i < e["seeds"].size() && i < e["best_lr_by_seed"].size(); i++) {
      const std::string seed = e["seeds"][i].get<std::string>();
      const double best = e["best_lr_by_seed"][i].get<double>();
      const auto& by_rate = s->by_seed.at(seed);
      const json& reference = *by_rate.at(best);
      if (reference.value("status", std::string()) != "finished" || learned_only_unigram(reference)) continue;
      for (const auto& [lr, run] : by_rate) {
        if (lr <= best) continue;
        const json behind = loss_behind(*run, reference);
        json signals = json::object();
        for (const OnsetSignal& sig : kOnsetSignals) signals[sig.key] = signal_onset(*run, reference, sig.key, behind);
        runs.push_back({{"seed", seed}, {"lr", lr}, {"best_lr", best}, {"outcome", outcome_of(*run, behind)},
                        {"loss_behind_step", behind["step"]},
                        {"loss_level_until", behind["level_until"]}, {"signals", signals}});
        if (layer_every.is_null()) layer_every = spacing(signal_series(*run, "max_attn_logit"));
        if (train_every.is_null()) train_every = spacing(signal_series(*run, "loss"));
      }
    }
    if (runs.empty()) continue;
    out.push_back({{"setting", name}, {"runs", runs}, {"layer_log_every", layer_every}, {"train_log_every", train_every}});
  }
  return out;
}

std::vector<std::string> instability_onsets_text(const json& onsets) {
  std::vector<std::string> out;
  if (!onsets.is_array()) return out;
  for (const json& e : onsets) {
    std::vector<const json*> behind;
    for (const json& r : e["runs"])
      if (!r["loss_behind_step"].is_null()) behind.push_back(&r);
    if (behind.empty()) continue;
    std::vector<std::string> parts;
    for (const OnsetSignal& sig : kOnsetSignals) {
      std::map<std::string, int> count;
      std::vector<double> leads;  // of the runs where it moved first
      int unlogged = 0;
      for (const json* r : behind) {
        const json& x = (*r)["signals"][sig.key];
        if (x.is_null()) {
          unlogged++;
          continue;
        }
        const std::string order = x["order"].get<std::string>();
        count[order]++;
        if (order == "before") leads.push_back(x["lead"].get<double>());
      }
      if (unlogged == int(behind.size())) continue;
      std::string p = fmt::format("{} first in {}", sig.words, count["before"]);
      if (!leads.empty())
        p += fmt::format(" (by {:g} steps, median; {:g} to {:g})", median(leads), *std::min_element(leads.begin(), leads.end()),
                         *std::max_element(leads.begin(), leads.end()));
      p += fmt::format(", after the loss in {}, never out of range in {}, too close to order at the logs' spacing in {}",
                       count["after"], count["never"], count["unresolved"]);
      if (unlogged) p += fmt::format(", not logged in {}", unlogged);
      parts.push_back(p);
    }
    std::vector<std::string> where;
    for (const json* r : behind)
      where.push_back(fmt::format("lr {:g} seed {}: {}", (*r)["lr"].get<double>(), (*r)["seed"].get<std::string>(),
                                  (*r)["loss_behind_step"].get<long>()));
    std::string resolution;
    if (e["layer_log_every"].is_number() && e["train_log_every"].is_number())
      resolution = fmt::format(" (the per-layer log every {} steps, the loss every {})", e["layer_log_every"].get<long>(),
                               e["train_log_every"].get<long>());
    if (out.empty())
      out.push_back("Which signal moved first (each run above its seed's best rate against the best rate's run of the same "
                    "seed: the step from which its training loss stays above the reference's, and the first logged step "
                    "each signal exceeded the largest value the reference logged in its whole run; \"first\" only when "
                    "that step is at or before the loss's last level step):");
    out.push_back(fmt::format("  {}: the loss fell behind in {} of {} runs (step {}); {}{}.", e["setting"].get<std::string>(),
                              behind.size(), e["runs"].size(), fmt::join(where, ", "),
                              parts.empty() ? std::string("no signal logged") : fmt::format("{}", fmt::join(parts, "; ")), resolution));
  }
  return out;
}

}  // namespace normlab::study
