// results_view.h: reading a study's results.json (as the runner writes it) for the summaries: a
// run's final numbers, the value of a varied key, and how settings are named in text. Every reader
// tolerates a missing key (a failed or unfinished run has no summary).
#pragma once

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace normlab::study::view {

using json = nlohmann::json;

inline std::optional<double> number(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

// A run that starts from a checkpoint (train.init_from) says so after what it trained on: its record's
// "input" is "<the data>" + kFromCheckpoint + "<path>'".
inline constexpr const char* kFromCheckpoint = "; parameters from the checkpoint '";

// The run's final validation loss, if it has one (a diverged run has none).
inline std::optional<double> val_loss(const json& run) {
  return run.contains("summary") ? number(run["summary"], "val_loss") : std::nullopt;
}

// A run learned only byte (token) frequencies: its final validation loss is within kStuckMargin nats
// of the unigram entropy of its corpus, or above it.
inline constexpr double kStuckMargin = 0.05;
inline bool learned_only_unigram(const json& run) {
  const auto v = val_loss(run);
  const auto h = number(run, "unigram_entropy");
  return v && h && *v >= *h - kStuckMargin;
}

// The largest |value| over the logged steps of a per-layer log series (layer_log.values[name]: steps x
// slots, null where a slot has no reading) or of a per-step one (layer_log[name]: one value a step).
inline std::optional<double> largest_logged(const json& run, const std::string& name, bool per_slot) {
  if (!run.contains("layer_log") || !run["layer_log"].is_object()) return std::nullopt;
  const json& log = run["layer_log"];
  const json* series = per_slot ? (log.contains("values") && log["values"].is_object() && log["values"].contains(name)
                                       ? &log["values"][name] : nullptr)
                                : (log.contains(name) ? &log[name] : nullptr);
  if (!series || !series->is_array()) return std::nullopt;
  std::optional<double> out;
  const auto take = [&](const json& v) {
    if (v.is_number() && std::isfinite(v.get<double>())) out = std::max(out.value_or(0.0), std::abs(v.get<double>()));
  };
  for (const json& step : *series) {
    if (step.is_array())
      for (const json& v : step) take(v);
    else
      take(step);
  }
  return out;
}

// The largest |mean log Z| of the output logits over the logged steps, from a layer log that read it
// from the forward (layer_log.log_z_of; earlier logs read the logits' gradient instead and are not used)
inline std::optional<double> largest_log_z(const json& run) {
  if (!run.contains("layer_log") || !run["layer_log"].is_object() ||
      run["layer_log"].value("log_z_of", std::string()) != "forward")
    return std::nullopt;
  return largest_logged(run, "log_z_mean", false);
}

// Validation BLEU of a translation run (greedy decoding, metrics summary), if it has one.
inline std::optional<double> run_bleu(const json& run) {
  return run.contains("summary") ? number(run["summary"], "bleu") : std::nullopt;
}

// A value as labels, tables and filters name it: a string as itself ("none" for "", e.g. a run with
// train.init_from = "" in a study where others start from a checkpoint), anything else as JSON
inline std::string text_of(const json& v) {
  if (!v.is_string()) return v.dump();
  return v.get<std::string>().empty() ? "none" : v.get<std::string>();
}

// The value of a dotted key ("train.lr") for this run: from its grid entry, else from its config.
inline std::string grid_value(const json& run, const std::string& dotted) {
  if (run.contains("grid") && run["grid"].contains(dotted)) return text_of(run["grid"][dotted]);
  const auto dot = dotted.find('.');
  const std::string section = dotted.substr(0, dot), key = dotted.substr(dot + 1);
  if (!run.contains("config") || !run["config"].contains(section) || !run["config"][section].contains(key)) return "?";
  return text_of(run["config"][section][key]);
}

// A run's seed key, "model.seed/train.seed" (values from its grid, "" when not varied): runs of two
// settings with the same key drew the same initialization and batches
inline std::string seed_of(const json& run) { return grid_value(run, "model.seed") + "/" + grid_value(run, "train.seed"); }

// How many seeds (seed_of) a group of runs ran to the end, finished or diverged. A best setting is
// chosen only among the groups that ran the most seeds: a setting part-way through its seeds (one
// done, the others not run yet) is not compared on that one seed with settings that have them all.
inline size_t seeds_done(const std::vector<const json*>& runs) {
  std::set<std::string> seeds;
  for (const json* r : runs)
    if (const std::string status = r->value("status", std::string()); status == "finished" || status == "diverged")
      seeds.insert(seed_of(*r));
  return seeds.size();
}

inline std::string short_key(const std::string& dotted) { return dotted.substr(dotted.find('.') + 1); }

// How a varying key is named in text: its short name, or the dotted one when another varying key has
// the same short name (train.seed and model.seed).
inline std::string key_text(const std::string& dotted, const std::vector<std::string>& varying) {
  const std::string name = short_key(dotted);
  for (const auto& k : varying)
    if (k != dotted && short_key(k) == name) return dotted;
  return name;
}

inline bool is_seed_key(const std::string& k) { return k == "train.seed" || k == "model.seed"; }

// "post" for a model whose layers are all post; "mixed" for a per-layer mix.
inline std::string placement_name(const json& run) {
  if (!run.contains("config") || !run["config"].contains("model") || !run["config"]["model"].contains("placement"))
    return "?";
  const json& p = run["config"]["model"]["placement"];
  if (p.is_string()) return p;
  for (const auto& x : p)
    if (x != p[0]) return "mixed";
  return p.empty() || !p[0].is_string() ? "?" : p[0].get<std::string>();
}

// The run's values of the varying keys but `except`, as "key=value key=value" (names by key_text).
inline std::string signature(const json& run, const std::vector<std::string>& varying, const std::string& except) {
  std::string s;
  for (const auto& k : varying)
    if (k != except) s += (s.empty() ? "" : " ") + key_text(k, varying) + "=" + grid_value(run, k);
  return s;
}

}  // namespace normlab::study::view
