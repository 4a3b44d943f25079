// headline.cpp: the answer of a study: first in plain words (which settings learned, which learned only
// the unigram frequencies or diverged, gradients that vanished), then in three sentences (what ends
// best, whether the seeds separate it from the runner-up, what was unstable) and the loss-spike classifier that tells a bump every run
// shares (a hard batch: the runs drew the same batches) from an instability of one run.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "analysis/stats.h"
#include "model/methods.h"
#include "study/results_view.h"
#include "study/summary.h"

namespace normlab::study {

namespace {

using json = nlohmann::json;
using analysis::SeedSummary;

// The runs that drew the same batches in the same order: same data-order seed, batch shape and data.
std::string data_order(const json& run) {
  if (!run.contains("config")) return "";
  const json& c = run["config"];
  const json& t = c.value("train", json::object());
  const int seq = t.value("seq_len", 0) > 0 ? t.value("seq_len", 0) : c.value("model", json::object()).value("seq_len", 0);
  return fmt::format("{} {} {} {} {}", t.value("seed", 0L), t.value("batch_size", 0), t.value("grad_accum", 1), seq,
                     c.value("data", json::object()).dump());
}

// loss[i] minus the mean of the kTargetWindow losses before it (NaN before the window fills or on
// a non-finite loss)
double jump_at(const json& loss, size_t i) {
  if (i < size_t(kTargetWindow) || i >= loss.size() || !loss[i].is_number()) return NAN;
  double mean = 0;
  for (size_t k = i - kTargetWindow; k < i; k++) mean += (loss[k].is_number() ? loss[k].get<double>() : NAN) / kTargetWindow;
  return loss[i].get<double>() - mean;
}

// Index of `step` in a run's logged steps, or -1.
long index_of_step(const json& train, const json& step) {
  const json& steps = train["step"];
  const auto it = std::lower_bound(steps.begin(), steps.end(), step,
                                   [](const json& a, const json& b) { return a.get<double>() < b.get<double>(); });
  return it != steps.end() && *it == step ? long(it - steps.begin()) : -1;
}

bool has_train(const json& run) {
  return run.contains("train") && run["train"].is_object() && run["train"].contains("loss") &&
         run["train"].contains("step");
}

// A method's title from the methods table; an arrangement (mixln, hybridnorm*) or a per-layer list as
// it is written.
std::string placement_title(const std::string& p) {
  const Method* m = find_method(p);
  return m ? m->title : p;
}

// A group of runs with one setting of the non-seed keys, and its final validation losses.
struct Setting {
  std::string name;
  std::vector<const json*> runs;
  SeedSummary loss;  // over the runs that finished
  std::multimap<std::string, double> by_seed;  // the same, by seed key (view::seed_of)
  std::string lr;
};

// "2.761 +- 0.151" (with the unit and "over 2 seeds" when `full`); one run: "2.761"
std::string stat_text(const Setting& s, bool seeds, const std::string& unit = "") {
  if (s.loss.n == 0) return "no finished run";
  const std::string u = unit.empty() ? "" : " nats per " + unit;
  if (!seeds) return fmt::format("{:.3f}{}", s.loss.mean, u);
  if (s.loss.n == 1) return fmt::format("{:.3f}{}{}", s.loss.mean, u, unit.empty() ? "" : ", one seed finished");
  return fmt::format("{:.3f} +- {:.3f}{}{}", s.loss.mean, s.loss.sd, u, unit.empty() ? "" : fmt::format(" over {} seeds", s.loss.n));
}

// "a, b and c"; beyond `keep` items "a, b and 3 more"
std::string list_text(const std::vector<std::string>& items, size_t keep) {
  if (items.empty()) return "";
  if (items.size() > keep)
    return fmt::format("{} and {} more", fmt::join(items.begin(), items.begin() + long(keep), ", "), items.size() - keep);
  if (items.size() == 1) return items[0];
  return fmt::format("{} and {}", fmt::join(items.begin(), items.end() - 1, ", "), items.back());
}

// ---- the study's question in plain words ----

// none: failed, interrupted or not run, or no unigram entropy to tell learning from frequencies
enum class Outcome { learned, unigram, diverged, none };

Outcome outcome_of(const json& run) {
  const std::string status = run.value("status", std::string());
  if (status == "diverged") return Outcome::diverged;
  if (status != "finished" || !view::val_loss(run) || !view::number(run, "unigram_entropy")) return Outcome::none;
  return view::learned_only_unigram(run) ? Outcome::unigram : Outcome::learned;
}

// How one setting of a varied key reads in a sentence: "without warm-up", "at 12 layers", ...
std::string setting_phrase(const std::string& key, const std::string& value) {
  if (key == "train.warmup_steps") return value == "0" ? "without warm-up" : fmt::format("with {} warm-up steps", value);
  if (key == "model.n_layers") return fmt::format("at {} layers", value);
  if (key == "train.lr") return fmt::format("at lr {}", value);
  if (key == "model.d_model") return fmt::format("at width {}", value);
  if (key == "model.placement") return "with " + placement_title(value);
  return fmt::format("with {} = {}", view::short_key(key), value);
}

// The runs of one family (e.g. a placement) in one context (a setting of the other varied keys):
// what each seed's run did.
struct Cell {
  std::string family;
  std::string tally;  // the family with the settings of the keys that split it ("Pre-LN with norm = dyt")
  std::vector<Outcome> outcomes;
  int count(Outcome o) const { return int(std::count(outcomes.begin(), outcomes.end(), o)); }
  bool all(Outcome o) const { return count(o) == int(outcomes.size()); }
};

struct Context {
  std::string phrase;  // "without warm-up at 4 layers" ("" when nothing else varies)
  std::vector<Cell> cells;
};

// "Post-LN and DeepNorm", "both", "all four"
std::string subject(const std::vector<std::string>& names, size_t cells) {
  static const char* numbers[] = {"", "", "both", "all three", "all four", "all five", "all six"};
  if (names.size() == cells && cells >= 2) return cells < 7 ? numbers[cells] : fmt::format("all {}", cells);
  return list_text(names, 6);
}

// One sentence per context: which families learned, which learned only the unigram frequencies,
// which diverged, which did some of each over the seeds. Beyond kMaxContexts, one per family.
constexpr size_t kMaxContexts = 6;

json plain_answer(const json& results, const std::vector<std::string>& others) {
  const json& runs = results["runs"];
  std::string family_key = others.empty() ? "" : others[0];
  if (std::count(others.begin(), others.end(), "model.placement")) family_key = "model.placement";
  else for (const auto& k : others)
      if (k != "train.lr") { family_key = k; break; }
  const auto family_name = [&](const json& run) {
    if (family_key.empty()) return std::string("every run");
    const std::string v = view::grid_value(run, family_key);
    return family_key == "model.placement" ? placement_title(v) : view::short_key(family_key) + " = " + v;
  };
  // A key that is not crossed with the family (its values differ between families, as the norm's do
  // when DyT is Pre-LN's order with tanh in place of the norms) splits a family that takes more than
  // one of its values: in a tally, "Pre-LN with norm = dyt" is not counted as Pre-LN.
  std::map<std::string, std::map<std::string, std::set<std::string>>> values;  // family -> key -> values
  for (const auto& r : runs)
    if (outcome_of(r) != Outcome::none)
      for (const auto& k : others)
        if (k != family_key) values[family_name(r)][k].insert(view::grid_value(r, k));
  const auto tally_name = [&](const json& run) {
    const std::string family = family_name(run);
    std::string name = family;
    for (const auto& k : others) {
      if (k == family_key) continue;
      const auto& own = values[family][k];
      const bool crossed = std::all_of(values.begin(), values.end(), [&](const auto& f) { return f.second.at(k) == own; });
      if (own.size() > 1 && !crossed) name += " " + setting_phrase(k, view::grid_value(run, k));
    }
    return name;
  };
  std::vector<Context> contexts;
  std::string unit = "byte";
  double entropy = NAN;
  for (const auto& r : runs) {
    const Outcome o = outcome_of(r);
    if (r.value("status", std::string()) == "finished" && !view::number(r, "unigram_entropy"))
      return json::array();  // what a run learned cannot be told without its corpus' unigram entropy
    if (o == Outcome::none) continue;
    if (std::isnan(entropy) && view::number(r, "unigram_entropy")) {
      entropy = r["unigram_entropy"].get<double>();
      unit = r.value("unigram_unit", unit);
    }
    std::string phrase;
    for (const auto& k : others)
      if (k != family_key) phrase += (phrase.empty() ? "" : " ") + setting_phrase(k, view::grid_value(r, k));
    auto c = std::find_if(contexts.begin(), contexts.end(), [&](const Context& x) { return x.phrase == phrase; });
    if (c == contexts.end()) c = contexts.insert(contexts.end(), Context{phrase, {}});
    const std::string name = family_name(r);
    auto cell = std::find_if(c->cells.begin(), c->cells.end(), [&](const Cell& x) { return x.family == name; });
    if (cell == c->cells.end()) cell = c->cells.insert(c->cells.end(), Cell{name, tally_name(r), {}});
    cell->outcomes.push_back(o);
  }
  json out = json::array();
  if (contexts.empty()) return out;
  const std::string unigram_what = fmt::format(
      "learned nothing beyond {} frequencies (a final validation loss at the {} unigram entropy, {:.3f} nats, or within "
      "{} of it)", unit, unit, entropy, view::kStuckMargin);
  bool explained = false;
  const auto unigram_text = [&]() {
    if (explained) return fmt::format("learned nothing beyond {} frequencies", unit);
    explained = true;
    return unigram_what;
  };
  const auto capital = [](std::string s) {
    if (!s.empty()) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
  };
  if (contexts.size() > kMaxContexts) {
    // per family: in how many of the settings of the other keys it learned (every seed)
    std::vector<std::pair<std::string, std::pair<int, int>>> tally;  // family -> (learned, settings)
    for (const auto& c : contexts)
      for (const auto& cell : c.cells) {
        auto t = std::find_if(tally.begin(), tally.end(), [&](const auto& x) { return x.first == cell.tally; });
        if (t == tally.end()) t = tally.insert(tally.end(), {cell.tally, {0, 0}});
        t->second.first += cell.all(Outcome::learned);
        t->second.second++;
      }
    std::vector<std::string> parts;
    for (const auto& [family, n] : tally)
      parts.push_back(fmt::format("{} in {} of {}", family, n.first, n.second));
    out.push_back(fmt::format("Learned (every seed below the {} unigram entropy by more than {} nats) in the settings of "
                              "the other varied keys: {}.", unit, view::kStuckMargin, list_text(parts, 12)));
    return out;
  }
  for (const auto& c : contexts) {
    std::vector<std::string> learned, unigram, diverged, mixed;
    for (const auto& cell : c.cells) {
      if (cell.all(Outcome::learned)) learned.push_back(cell.family);
      else if (cell.all(Outcome::unigram)) unigram.push_back(cell.family);
      else if (cell.all(Outcome::diverged)) diverged.push_back(cell.family);
      else {
        std::vector<std::string> rest;
        if (const int k = cell.count(Outcome::unigram)) rest.push_back(fmt::format("{} stayed at the unigram loss", k));
        if (const int k = cell.count(Outcome::diverged)) rest.push_back(fmt::format("{} diverged", k));
        mixed.push_back(fmt::format("{} learned in {} of {} seeds ({})", cell.family, cell.count(Outcome::learned),
                                    cell.outcomes.size(), fmt::join(rest, ", ")));
      }
    }
    std::vector<std::string> clauses;
    const size_t n = c.cells.size();
    if (!unigram.empty()) clauses.push_back(subject(unigram, n) + " " + unigram_text());
    if (!diverged.empty()) clauses.push_back(subject(diverged, n) + " diverged");
    for (const auto& m : mixed) clauses.push_back(m);
    std::string sentence = fmt::format("{}", fmt::join(clauses, "; "));
    if (!learned.empty())
      sentence += (clauses.empty() ? "" : ", while ") + subject(learned, n) + " learned";
    out.push_back(capital(c.phrase.empty() ? sentence : c.phrase + ", " + sentence) + ".");
  }
  return out;
}

// Runs whose lower layers' gradients vanished: the smallest layer gradient norm at most kVanished of
// the largest, at initialization (the instruments) or at the last logged step (the per-layer log).
constexpr double kVanished = 1e-6;

std::optional<std::string> vanished_text(const json& run) {
  struct Reading {
    double low = INFINITY, high = 0;
    long low_layer = -1, high_layer = -1;
    std::string when;
    void add(double g, long layer) {
      if (g < low) low = g, low_layer = layer;
      if (g > high) high = g, high_layer = layer;
    }
  };
  std::vector<Reading> readings;
  if (run.contains("instruments") && run["instruments"].contains("init") &&
      run["instruments"]["init"].contains("dynamics") && run["instruments"]["init"]["dynamics"].contains("layers")) {
    Reading r{.when = "at initialization"};
    for (const auto& l : run["instruments"]["init"]["dynamics"]["layers"])
      if (const auto g = view::number(l, "grad_norm")) r.add(*g, l.value("layer", 0L));
    readings.push_back(r);
  }
  if (run.contains("layer_log") && run["layer_log"].contains("values") &&
      run["layer_log"]["values"].contains("grad_norm_total") && !run["layer_log"]["values"]["grad_norm_total"].empty()) {
    const json& log = run["layer_log"];
    Reading r{.when = fmt::format("at step {}", log["step"].back().dump())};
    const json& row = log["values"]["grad_norm_total"].back();
    for (size_t k = 0; k < row.size() && k < log["rows"].size(); k++)
      if (row[k].is_number()) r.add(row[k].get<double>(), log["rows"][k].value("layer", 0L));
    readings.push_back(r);
  }
  for (const auto& r : readings)
    if (r.high > 0 && r.low_layer >= 0 && r.low <= kVanished * r.high)
      return fmt::format("{} (layer {}'s gradient norm {:.1e}, layer {}'s {:.2g}, {})", run.value("label", std::string()),
                         r.low_layer, r.low, r.high_layer, r.high, r.when);
  return std::nullopt;
}

}  // namespace

json classify_spikes(const json& results) {
  json out = json::array();
  const json& runs = results["runs"];
  for (const auto& r : runs) {
    json entry = {{"label", r.value("label", std::string())}, {"spikes", json::array()}};
    if (!has_train(r)) {
      out.push_back(entry);
      continue;
    }
    const std::string order = data_order(r);
    for (json spike : loss_spikes(r["train"])) {
      int others = 0, rising = 0;
      for (const auto& o : runs) {
        if (&o == &r || !has_train(o) || data_order(o) != order) continue;
        const long i = index_of_step(o["train"], spike["step"]);
        const double jump = i < 0 ? NAN : jump_at(o["train"]["loss"], size_t(i));
        if (!std::isfinite(jump)) continue;  // the other run had not logged that step, or had diverged
        others++;
        if (jump > kSharedSpikeNats) rising++;
      }
      spike["others"] = others;
      spike["rising"] = rising;
      spike["kind"] = others == 0 ? "unknown" : rising > 0 ? "shared" : "own";
      entry["spikes"].push_back(spike);
    }
    out.push_back(entry);
  }
  return out;
}

json headline(const json& results) {
  json out = json::array();
  const json& runs = results["runs"];
  const std::vector<std::string> varying = results["study"].value("varying", std::vector<std::string>{});
  std::vector<std::string> others;
  bool seeds = false;
  for (const auto& k : varying) {
    if (view::is_seed_key(k)) seeds = true;
    else others.push_back(k);
  }
  const bool has_lr = std::count(others.begin(), others.end(), "train.lr") > 0;
  std::vector<std::string> families_keys;  // the non-seed keys but the learning rate
  for (const auto& k : others)
    if (k != "train.lr") families_keys.push_back(k);

  std::vector<const json*> done;
  for (const auto& r : runs)
    if (r.contains("summary") && (r["status"] == "finished" || r["status"] == "diverged")) done.push_back(&r);
  if (done.empty()) return json::array({"No run finished, so this study has no answer yet."});
  // 0. what happened, in plain words: which settings learned, and gradients that vanished
  out = plain_answer(results, others);
  // a study part-way: its bests can still move, so the sentences below are the runs so far, not its answer
  if (const long pending = std::count_if(runs.begin(), runs.end(), [](const json& r) {
        const std::string status = r.value("status", std::string());
        return status == "not run" || status == "interrupted" || status == "running";
      });
      pending > 0)
    out.insert(out.begin(), fmt::format("The study is part-way ({} of its {} runs have not finished): what follows "
                                        "reads the runs so far and is not its answer.",
                                        pending, runs.size()));
  std::vector<std::string> vanished;
  for (const json* r : done)
    if (const auto v = vanished_text(*r)) vanished.push_back(*v);
  if (!vanished.empty())
    out.push_back(fmt::format("Gradients vanished in the lower layers (at most {} of the largest layer's) in {}.",
                              kVanished, list_text(vanished, 3)));
  const std::string unit = done[0]->value("unigram_unit", std::string("byte"));

  // settings of the non-seed keys, in run order
  std::vector<Setting> settings;
  for (const json* r : done) {
    const std::string name = view::signature(*r, others, "");
    auto s = std::find_if(settings.begin(), settings.end(), [&](const Setting& x) { return x.name == name; });
    if (s == settings.end()) s = settings.insert(settings.end(), Setting{name, {}, {}, {}, view::grid_value(*r, "train.lr")});
    s->runs.push_back(r);
  }
  for (auto& s : settings) {
    std::vector<double> v;
    for (const json* r : s.runs)
      if ((*r)["status"] == "finished")
        if (const auto l = view::val_loss(*r)) {
          v.push_back(*l);
          s.by_seed.emplace(view::seed_of(*r), *l);
        }
    s.loss = analysis::summarize(v);
  }

  // 1. the answer: each family (placement, ...) at its own best learning rate, or the settings ranked
  std::vector<Setting> ranked;  // best first: one per family (at its best lr), or every setting
  std::vector<std::string> never, left_out;
  if (has_lr && !families_keys.empty()) {
    std::map<std::string, Setting> best;
    std::vector<std::string> order;
    std::map<std::string, size_t> most_seeds;  // per family: a rate is chosen among those that ran the most
    for (const auto& s : settings) {
      size_t& m = most_seeds[view::signature(*s.runs[0], others, "train.lr")];
      m = std::max(m, view::seeds_done(s.runs));
    }
    for (const auto& s : settings) {
      const std::string family = view::signature(*s.runs[0], others, "train.lr");
      if (const size_t n = view::seeds_done(s.runs); n < most_seeds[family]) {
        left_out.push_back(fmt::format("{} ({} of {} seeds)", s.name, n, most_seeds[family]));
        continue;
      }
      if (!best.count(family)) order.push_back(family);
      Setting& b = best[family];
      if (b.runs.empty() || (s.loss.n > 0 && (b.loss.n == 0 || s.loss.mean < b.loss.mean))) b = s;
    }
    for (const auto& f : order) {
      Setting s = best[f];
      s.name = families_keys.size() == 1 && families_keys[0] == "model.placement"
                   ? placement_title(view::grid_value(*s.runs[0], "model.placement")) : f;
      if (s.loss.n > 0) ranked.push_back(s);
      else never.push_back(s.name);
    }
  } else {
    for (const auto& s : settings) {
      if (s.loss.n > 0) ranked.push_back(s);
      else never.push_back(s.name.empty() ? "every run" : s.name);
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Setting& a, const Setting& b) { return a.loss.mean < b.loss.mean; });
  const std::string never_text =
      never.empty() ? "" : fmt::format("; {} finished no run (every run diverged)", list_text(never, 3));
  if (ranked.empty()) {
    out.push_back(fmt::format("No setting finished a run{}.", never_text));
  } else if (has_lr && !families_keys.empty()) {
    std::vector<std::string> rest;
    for (size_t i = 1; i < ranked.size(); i++)
      rest.push_back(fmt::format("{} ({}, lr {})", ranked[i].name, stat_text(ranked[i], seeds), ranked[i].lr));
    out.push_back(fmt::format("At its own best learning rate, {} ends lowest (final validation loss {}, at lr {}){}{}.",
                              ranked[0].name, stat_text(ranked[0], seeds, unit), ranked[0].lr,
                              rest.empty() ? "" : ", then " + list_text(rest, 4), never_text));
    if (!left_out.empty())
      out.push_back(fmt::format("Left out of the best-rate choice until their seeds finish: {}.", list_text(left_out, 4)));
  } else if (ranked.size() == 1 && ranked[0].name.empty()) {
    out.push_back(fmt::format("Every run has the same setting: final validation loss {}{}.",
                              stat_text(ranked[0], seeds, unit), never_text));
  } else {
    std::vector<std::string> rest;
    for (size_t i = 1; i < ranked.size(); i++) rest.push_back(fmt::format("{} ({})", ranked[i].name, stat_text(ranked[i], seeds)));
    out.push_back(fmt::format("Lowest final validation loss: {} ({}){}{}.", ranked[0].name,
                              stat_text(ranked[0], seeds, unit), rest.empty() ? "" : ", then " + list_text(rest, 4),
                              never_text));
  }

  // 2. is the lead resolved: the interval of the gap to the runner-up over seeds (paired by seed where
  // both ran the same seeds: analysis::seed_difference, as the reproductions)
  if (ranked.size() < 2) {
    out.push_back("There is no runner-up to compare it with, so nothing is ranked.");
  } else {
    const Setting &a = ranked[0], &b = ranked[1];
    const double gap = b.loss.mean - a.loss.mean;
    if (a.loss.n >= 2 && b.loss.n >= 2) {
      const auto d = analysis::seed_difference(a.by_seed, b.by_seed);
      out.push_back(fmt::format("Its lead over {} ({:.3f} nats) is {} (95% interval of the gap {:.3f} to {:.3f}, {}).",
                                b.name, gap, d.lo > 0 ? "resolved at these seeds" : "not distinguishable from seed noise here",
                                d.lo, d.hi, d.how()));
    } else {
      out.push_back(fmt::format("Its lead over {} ({:.3f} nats) comes from {} and says nothing about seed noise{}.", b.name,
                                gap, seeds ? "a single finished seed on one side" : "one run per setting",
                                gap < 0.1 ? " (this summary calls gaps under 0.1 nats about the same)" : ""));
    }
  }

  // 3. stability: divergence, spikes of a run's own, bumps shared by the runs that drew the same batches
  std::vector<std::string> diverged, own;
  std::set<long> shared;  // the steps of the bumps shared by runs that drew the same batches
  int unknown = 0;
  for (const json* r : done)
    if ((*r)["status"] == "diverged") diverged.push_back((*r)["label"]);
  const json spikes = classify_spikes(results);
  for (const auto& e : spikes) {
    int mine = 0;
    for (const auto& s : e["spikes"]) {
      const std::string kind = s["kind"];
      if (kind == "own") mine++;
      else if (kind == "shared") shared.insert(s["step"].get<long>());
      else unknown++;
    }
    if (mine) own.push_back(e["label"]);
  }
  std::string stability = diverged.empty() ? "No run diverged"
                                            : fmt::format("{} of {} runs diverged ({})", diverged.size(), done.size(),
                                                          list_text(diverged, 3));
  stability += own.empty() ? ", and no run had a loss spike of its own"
                           : fmt::format("; {} had loss spikes of {} own (an instability: the runs that drew the same "
                                         "batches did not rise)", list_text(own, 3), own.size() == 1 ? "its" : "their");
  if (!shared.empty()) {
    std::vector<std::string> steps;
    for (long step : shared) steps.push_back(std::to_string(step));
    stability += fmt::format("; the loss bump{} at step{} {} {} shared by the runs that drew the same batches (the data, "
                             "not an instability)", shared.size() == 1 ? "" : "s", shared.size() == 1 ? "" : "s",
                             list_text(steps, 5), shared.size() == 1 ? "was" : "were");
  }
  if (unknown) stability += fmt::format("; {} spike{} cannot be attributed (no other run drew the same batches)", unknown,
                                        unknown == 1 ? "" : "s");
  out.push_back(stability + ".");
  return out;
}

std::string headline_text(const json& results) {
  if (!results.contains("headline") || !results["headline"].is_array() || results["headline"].empty()) return "";
  std::string text = "In short:", line;
  for (const auto& sentence : results["headline"]) {
    std::string word;
    for (const std::string s = " " + sentence.get<std::string>() + " "; char c : s) {
      if (c != ' ') { word += c; continue; }
      if (word.empty()) continue;
      if (line.size() + word.size() + 1 > 100) text += line + "\n", line.clear();
      line += (line.empty() && text.back() == '\n' ? "" : " ") + word;
      word.clear();
    }
  }
  return text + line + "\n";
}

}  // namespace normlab::study
