// lr_sensitivity.cpp: Wortsman et al.'s learning-rate sensitivity of a study's sweep (lr_sensitivity.h).
#include "study/lr_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>

#include "analysis/stats.h"
#include "study/results_view.h"

namespace normlab::study {

using json = nlohmann::json;
using namespace view;

namespace {

// The loss a run started from: its first step's training loss (before any update), if it logged step 1.
std::optional<double> start_loss(const json& run) {
  if (!run.contains("train") || !run["train"].contains("step") || !run["train"].contains("loss")) return std::nullopt;
  const json& steps = run["train"]["step"];
  const json& loss = run["train"]["loss"];
  if (steps.empty() || loss.empty() || steps[0] != 1 || !loss[0].is_number()) return std::nullopt;
  return loss[0].get<double>();
}

// {n, mean, lo, hi, values} of per-seed values, the interval null with one seed
json over_seeds(const std::vector<double>& values) {
  const analysis::SeedSummary sum = analysis::summarize(values);
  return {{"n", sum.n}, {"mean", sum.mean}, {"lo", sum.n > 1 ? json(sum.lo) : json(nullptr)},
          {"hi", sum.n > 1 ? json(sum.hi) : json(nullptr)}, {"values", values}};
}

// " [lo, hi]" of over_seeds' record in `spec`'s format, or " (one seed: no interval)"
std::string interval_text(const json& s, const char* spec) {
  if (s["lo"].is_null()) return " (one seed: no interval)";
  return fmt::format(" [{}, {}]", fmt::format(fmt::runtime(spec), s["lo"].get<double>()),
                     fmt::format(fmt::runtime(spec), s["hi"].get<double>()));
}

// Whether a run learned more than the corpus' unigram frequencies: a final validation loss more than
// view::kStuckMargin below the unigram entropy. A diverged run did not; nullopt when the run carries no
// unigram entropy to tell.
std::optional<bool> learned(const json& run) {
  if (!number(run, "unigram_entropy")) return std::nullopt;
  if (run.value("status", std::string()) != "finished") return false;
  const auto v = val_loss(run);
  return v && std::isfinite(*v) && !learned_only_unigram(run);
}

// "; learned beyond the unigram frequencies at 3 and 4 of the 6 rates" when a seed did not learn at every
// rate (nothing when every seed learned everywhere or it cannot be told)
std::string learned_text(const json& e) {
  if (!e.contains("learned_rates_by_seed")) return "";
  std::vector<std::string> counts;
  bool everywhere = true;
  for (const json& n : e["learned_rates_by_seed"]) {
    if (!n.is_number()) return "";
    everywhere = everywhere && n.get<size_t>() == e["rates"].size();
    counts.push_back(std::to_string(n.get<int>()));
  }
  if (everywhere || counts.empty()) return "";
  return fmt::format("; learned beyond the unigram frequencies at {} of the {} rates{}", fmt::join(counts, ", "),
                     e["rates"].size(), counts.size() > 1 ? " (by seed)" : "");
}

// "; by lr, the largest attention logit 3.1, ..., 41.7 and the largest |mean log Z| 0.2, ..., 6.3" (the
// means over the seeds; "-" where no run logged it; nothing when none did)
std::string signals_text(const json& e) {
  if (!e.contains("signals")) return "";
  std::vector<std::string> parts;
  for (const auto& [key, words] : {std::pair{"max_attn_logit", "the largest attention logit"},
                                   std::pair{"abs_log_z", "the largest |mean log Z| of the output logits"}}) {
    std::vector<std::string> values;
    bool any = false;
    for (const json& v : e["signals"][key]) {
      values.push_back(v.is_number() ? fmt::format("{:.3g}", v.get<double>()) : "-");
      any |= v.is_number();
    }
    if (any) parts.push_back(fmt::format("{} {}", words, fmt::join(values, ", ")));
  }
  return parts.empty() ? "" : fmt::format("; by lr, {} (Wortsman et al.'s two instabilities; over the logged steps, mean over the seeds)",
                                          fmt::join(parts, " and "));
}

}  // namespace

std::vector<SweptSetting> swept_settings(const json& results) {
  std::vector<SweptSetting> settings;
  const std::vector<std::string> varying = results.at("study").value("varying", std::vector<std::string>{});
  if (std::find(varying.begin(), varying.end(), "train.lr") == varying.end()) return settings;
  std::vector<std::string> others;
  for (const auto& k : varying)
    if (k != "train.lr" && !is_seed_key(k)) others.push_back(k);
  for (const json& r : results["runs"]) {
    const std::string status = r.value("status", std::string());
    if (status != "finished" && status != "diverged") continue;
    const std::string name = signature(r, others, "");
    auto s = std::find_if(settings.begin(), settings.end(), [&](const SweptSetting& x) { return x.name == name; });
    if (s == settings.end()) {
      json keys = json::object();
      for (const auto& k : others) keys[k] = grid_value(r, k);
      s = settings.insert(settings.end(), SweptSetting{name, keys, {}, {}, {}});
    }
    const std::string seed = seed_of(r);
    if (!s->by_seed.count(seed)) s->seed_order.push_back(seed);
    s->by_seed[seed][r["config"]["train"]["lr"].get<double>()] = &r;
  }
  for (SweptSetting& s : settings) {
    for (const auto& [seed, runs] : s.by_seed)
      for (const auto& [lr, r] : runs) s.rates.push_back(lr);
    std::sort(s.rates.begin(), s.rates.end());
    s.rates.erase(std::unique(s.rates.begin(), s.rates.end()), s.rates.end());
  }
  return settings;
}

json lr_sensitivity(const json& results) {
  json out = json::array();
  for (const SweptSetting& s : swept_settings(results)) {
    const std::vector<double>& rates = s.rates;
    if (rates.size() < 2) continue;
    std::vector<double> sensitivity, curve(rates.size(), 0.0), best_by_seed;
    // the two instabilities' signals at each rate, summed over the counted seeds that logged them
    std::vector<double> logit_sum(rates.size(), 0.0), log_z_sum(rates.size(), 0.0);
    std::vector<int> logit_n(rates.size(), 0), log_z_n(rates.size(), 0);
    json seeds = json::array(), left_out = json::array(), learned_by_seed = json::array();
    for (const std::string& seed : s.seed_order) {
      const auto& runs = s.by_seed.at(seed);
      if (runs.size() < rates.size()) {
        left_out.push_back(fmt::format("seed {}: {} of the {} rates ran", seed, runs.size(), rates.size()));
        continue;
      }
      std::vector<double> clipped;
      std::string missing;
      json learned_rates = 0;  // how many of the rates learned more than the unigram frequencies (null: cannot tell)
      for (double lr : rates) {
        const json& r = *runs.at(lr);
        const auto l = learned(r);
        learned_rates = l && !learned_rates.is_null() ? json(learned_rates.get<int>() + (*l ? 1 : 0)) : json(nullptr);
        const auto l0 = start_loss(r);
        if (!l0) {
          missing = fmt::format("lr {}: no loss logged at step 1", lr);
          break;
        }
        const auto v = val_loss(r);
        clipped.push_back(v && std::isfinite(*v) ? std::min(*v, *l0) : *l0);
      }
      if (!missing.empty()) {
        left_out.push_back(fmt::format("seed {}: {}", seed, missing));
        continue;
      }
      const auto best = std::min_element(clipped.begin(), clipped.end());
      double excess = 0;
      for (double c : clipped) excess += (c - *best) / double(clipped.size());
      sensitivity.push_back(excess);
      learned_by_seed.push_back(learned_rates);
      for (size_t k = 0; k < rates.size(); k++) {
        const json& r = *runs.at(rates[k]);
        if (const auto v = largest_logged(r, "attn_max_logit", true)) logit_sum[k] += *v, logit_n[k]++;
        if (const auto v = largest_log_z(r)) log_z_sum[k] += *v, log_z_n[k]++;
      }
      best_by_seed.push_back(rates[size_t(best - clipped.begin())]);
      for (size_t k = 0; k < rates.size(); k++) curve[k] += clipped[k];
      seeds.push_back(seed);
    }
    json entry = {{"setting", s.name.empty() ? std::string("all runs") : s.name}, {"keys", s.keys}, {"rates", rates},
                  {"seeds", seeds}, {"left_out", left_out}};
    if (sensitivity.empty()) {
      entry["curve"] = json::array();
      entry["best_lr"] = nullptr;
      entry["best_lr_by_seed"] = json::array();
      entry["sensitivity"] = nullptr;
      out.push_back(entry);
      continue;
    }
    json points = json::array();
    size_t lowest = 0;
    for (size_t k = 0; k < rates.size(); k++) {
      curve[k] /= double(sensitivity.size());
      if (curve[k] < curve[lowest]) lowest = k;
      points.push_back({{"lr", rates[k]}, {"loss", curve[k]}});
    }
    entry["curve"] = points;
    json logits = json::array(), log_z = json::array();
    for (size_t k = 0; k < rates.size(); k++) {
      logits.push_back(logit_n[k] ? json(logit_sum[k] / logit_n[k]) : json(nullptr));
      log_z.push_back(log_z_n[k] ? json(log_z_sum[k] / log_z_n[k]) : json(nullptr));
    }
    entry["signals"] = {{"max_attn_logit", logits}, {"abs_log_z", log_z}};
    entry["best_lr"] = rates[lowest];
    entry["best_lr_by_seed"] = best_by_seed;
    entry["learned_rates_by_seed"] = learned_by_seed;
    // every seed learned at no rate: the curve is flat at the unigram loss and its sensitivity (about 0)
    // measures nothing
    entry["learned_nowhere"] = std::all_of(learned_by_seed.begin(), learned_by_seed.end(),
                                           [](const json& n) { return n.is_number() && n.get<int>() == 0; });
    entry["sensitivity"] = over_seeds(sensitivity);
    out.push_back(entry);
  }
  return out;
}

std::vector<std::string> lr_sensitivity_text(const json& sensitivity) {
  std::vector<std::string> out;
  if (!sensitivity.is_array() || sensitivity.empty()) return out;
  out.push_back("LR sensitivity (Wortsman et al. 2023), per setting: the mean over the swept rates of the final "
                "validation loss, each clipped at the loss the run started from (a diverged run: that loss), minus "
                "the seed's lowest, with its 95% interval over the seeds (seed: model.seed/train.seed).");
  for (const json& e : sensitivity) {
    std::vector<std::string> rates;
    for (const json& r : e["rates"]) rates.push_back(fmt::format("{:g}", r.get<double>()));
    const std::string left = e["left_out"].empty() ? "" : fmt::format(" (left out: {})", fmt::join(e["left_out"], "; "));
    if (e["sensitivity"].is_null()) {
      out.push_back(fmt::format("LR sensitivity at {}: no seed ran every rate ({}){}.", e["setting"].get<std::string>(),
                                fmt::join(rates, ", "), left));
      continue;
    }
    const json& s = e["sensitivity"];
    const std::string interval = interval_text(s, "{:.3f}");
    std::vector<std::string> curve, best;
    for (const json& p : e["curve"]) curve.push_back(fmt::format("{:.3f}", p["loss"].get<double>()));
    for (const json& b : e["best_lr_by_seed"]) best.push_back(fmt::format("{:g}", b.get<double>()));
    if (e.value("learned_nowhere", false)) {
      out.push_back(fmt::format(
          "LR sensitivity at {}: none to read: over {} seed{} no run learned more than the unigram frequencies at any of "
          "the rates {} (each final loss within {} nats of the unigram entropy, or diverged; mean clipped loss {}), so "
          "its curve is flat because nothing was learned and its sensitivity, {:.3f}, is not robustness{}.",
          e["setting"].get<std::string>(), s["n"].get<int>(), s["n"].get<int>() == 1 ? "" : "s", fmt::join(rates, ", "),
          kStuckMargin, fmt::join(curve, ", "), s["mean"].get<double>(), left));
      continue;
    }
    out.push_back(fmt::format(
        "LR sensitivity at {}: {:.3f}{} nats over {} seed{}; mean clipped loss at lr {}: {}, lowest at lr {:g}; each "
        "seed's best lr {}{}{}.",
        e["setting"].get<std::string>(), s["mean"].get<double>(), interval, s["n"].get<int>(), s["n"].get<int>() == 1 ? "" : "s",
        fmt::join(rates, ", "), fmt::join(curve, ", "), e["best_lr"].get<double>(), fmt::join(best, ", "),
        learned_text(e) + signals_text(e), left));
  }
  return out;
}

json best_lr_shift(const json& sensitivity) {
  json out = json::array();
  if (!sensitivity.is_array()) return out;
  for (const char* size_key : {"model.n_layers", "model.d_model"}) {
    // the settings that differ only in this key, in groups; each group's sizes in increasing order
    std::map<std::string, std::vector<const json*>> groups;
    for (const json& e : sensitivity) {
      if (!e.contains("keys") || !e["keys"].contains(size_key) || e["sensitivity"].is_null()) continue;
      json rest = e["keys"];
      rest.erase(size_key);
      groups[rest.dump()].push_back(&e);
    }
    for (auto& [rest, entries] : groups) {
      const auto size_of = [&](const json* e) { return std::stod((*e)["keys"][size_key].get<std::string>()); };
      std::sort(entries.begin(), entries.end(), [&](const json* a, const json* b) { return size_of(a) < size_of(b); });
      if (entries.size() < 2 || size_of(entries.front()) == size_of(entries.back())) continue;
      const json& small = *entries.front();
      const json& large = *entries.back();
      // a seed that learned at no rate of a size has a flat curve there, whose lowest point is noise
      const auto learned_nowhere = [](const json& e, size_t k) {
        return e.contains("learned_rates_by_seed") && e["learned_rates_by_seed"][k].is_number() &&
               e["learned_rates_by_seed"][k].get<int>() == 0;
      };
      std::map<std::string, double> small_best;
      json left_out = json::array();
      for (size_t k = 0; k < small["seeds"].size(); k++) {
        const std::string seed = small["seeds"][k].get<std::string>();
        if (learned_nowhere(small, k))
          left_out.push_back(fmt::format("seed {}: learned at no rate at {}", seed, size_of(&small)));
        else
          small_best[seed] = small["best_lr_by_seed"][k].get<double>();
      }
      std::vector<double> shifts;
      json seeds = json::array();
      for (size_t k = 0; k < large["seeds"].size(); k++) {
        const std::string seed = large["seeds"][k].get<std::string>();
        if (learned_nowhere(large, k)) {
          left_out.push_back(fmt::format("seed {}: learned at no rate at {}", seed, size_of(&large)));
          continue;
        }
        if (!small_best.count(seed)) continue;
        shifts.push_back(std::log2(large["best_lr_by_seed"][k].get<double>() / small_best[seed]));
        seeds.push_back(seed);
      }
      json sizes = json::array();
      for (const json* e : entries)
        sizes.push_back({{"size", size_of(e)}, {"best_lr", (*e)["best_lr"]}, {"best_lr_by_seed", (*e)["best_lr_by_seed"]},
                         {"seeds", (*e)["seeds"]}});
      json setting = json::parse(rest);
      std::string text;
      for (const auto& [k, v] : setting.items()) text += (text.empty() ? "" : " ") + short_key(k) + "=" + v.get<std::string>();
      json entry = {{"size_key", size_key}, {"setting", text.empty() ? std::string("all runs") : text}, {"sizes", sizes},
                    {"seeds", seeds}, {"left_out", left_out}};
      entry["shift"] = shifts.empty() ? json(nullptr) : over_seeds(shifts);
      out.push_back(entry);
    }
  }
  return out;
}

std::vector<std::string> best_lr_shift_text(const json& shifts) {
  std::vector<std::string> out;
  if (!shifts.is_array() || shifts.empty()) return out;
  out.push_back("How far the best learning rate moves with the model's size, per setting: log2 of the best rate at "
                "the largest size over the best at the smallest, seed by seed (0: it stays; +1: it doubles), with "
                "its 95% interval over the seeds.");
  for (const json& e : shifts) {
    std::vector<std::string> bests;
    for (const json& z : e["sizes"])
      bests.push_back(fmt::format("{:g} at {}", z["best_lr"].get<double>(), z["size"].get<double>()));
    const std::string key = short_key(e["size_key"].get<std::string>());
    const std::string left = e.value("left_out", json::array()).empty()
                                 ? ""
                                 : fmt::format(" (left out: {})", fmt::join(e["left_out"], "; "));
    if (e["shift"].is_null()) {
      out.push_back(fmt::format("Best lr by {} at {}: {}; no seed ran every rate and learned at both the smallest and the "
                                "largest size{}.", key, e["setting"].get<std::string>(), fmt::join(bests, ", "), left));
      continue;
    }
    const json& s = e["shift"];
    const std::string interval = interval_text(s, "{:+.2f}");
    out.push_back(fmt::format("Best lr by {} at {}: {} (mean clipped curves); log2 shift from the smallest to the largest "
                              "{:+.2f}{} over {} seed{}{}.",
                              key, e["setting"].get<std::string>(), fmt::join(bests, ", "), s["mean"].get<double>(),
                              interval, s["n"].get<int>(), s["n"].get<int>() == 1 ? "" : "s", left));
  }
  return out;
}

}  // namespace normlab::study
