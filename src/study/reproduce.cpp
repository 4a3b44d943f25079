// reproduce.cpp: a study's reproductions of published results, checked when the study is read and
// measured from its results (reproduce.h says what an entry is and how the verdict is decided).
#include "study/reproduce.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>

#include "analysis/stats.h"
#include "theory/rules.h"
#include "study/lr_sensitivity.h"
#include "study/results_view.h"
#include "util/error.h"
#include "util/hints.h"

namespace normlab::study {

namespace {

using json = nlohmann::json;
using analysis::SeedSummary;

const std::vector<std::string> kEntryKeys = {"claim",  "source", "paper",   "a",      "b",
                                             "expect", "metric", "best_lr", "best_of", "select"};
const std::vector<std::string> kMetrics = {"val_loss",       "lowest_val_loss", "bleu",     "test_loss",
                                           "lr_sensitivity", "max_attn_logit",  "abs_log_z"};

// The metric a side's best setting is chosen by: `select`, else the reported metric itself, except
// test_loss, whose best is chosen by the final validation loss (a split that chooses is no test split)
std::string select_metric(const json& e) {
  const std::string metric = e.value("metric", std::string("val_loss"));
  return e.value("select", metric == "test_loss" ? std::string("val_loss") : metric);
}

// The grid keys a side picks its best runs over: best_of, or ["train.lr"] with best_lr = true, or none.
std::vector<std::string> best_keys(const json& e) {
  if (e.contains("best_of")) return e["best_of"].get<std::vector<std::string>>();
  if (e.value("best_lr", false)) return {"train.lr"};
  return {};
}

struct Term {
  std::string key, value;  // "model.placement", "post"
};

// "model.placement=post train.lr=1e-3" -> terms; an Error (naming `where`) on bad syntax
std::vector<Term> parse_filter(const std::string& filter, const std::string& where) {
  std::vector<Term> terms;
  size_t i = 0;
  while (i < filter.size()) {
    while (i < filter.size() && filter[i] == ' ') i++;
    size_t j = i;
    while (j < filter.size() && filter[j] != ' ') j++;
    if (j > i) {
      const std::string word = filter.substr(i, j - i);
      const auto eq = word.find('='), dot = word.find('.');
      if (eq == std::string::npos || eq == 0 || eq + 1 == word.size() || dot == std::string::npos || dot > eq)
        throw Error(fmt::format("{}: '{}' is not section.key=value (e.g. model.placement=post)", where, word));
      terms.push_back({word.substr(0, eq), word.substr(eq + 1)});
    }
    i = j;
  }
  if (terms.empty()) throw Error(fmt::format("{}: empty; give section.key=value terms, e.g. \"model.placement=post\"", where));
  return terms;
}

std::optional<double> as_number(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

bool term_matches(const json& run, const Term& t) {
  const std::string have = view::grid_value(run, t.key);
  if (have == t.value) return true;
  const auto x = as_number(have), y = as_number(t.value);
  return x && y && std::abs(*x - *y) <= 1e-9 * std::max(std::abs(*x), std::abs(*y));
}

// "placement=post lr=0.001": a filter as the report names the side
std::string side_label(const std::string& filter) {
  std::string out;
  for (const Term& t : parse_filter(filter, "reproduce")) {
    if (!out.empty()) out += ' ';
    out += fmt::format("{}={}", view::short_key(t.key), t.value);
  }
  return out;
}

std::optional<double> metric_of(const json& run, const std::string& metric) {
  if (metric == "lowest_val_loss" || metric == "test_loss")  // lowest: its lowest evaluation, not its last
    return run.contains("summary") ? view::number(run["summary"], metric.c_str()) : std::nullopt;
  if (metric == "max_attn_logit") return view::largest_logged(run, "attn_max_logit", true);
  if (metric == "abs_log_z") return view::largest_log_z(run);
  return metric == "bleu" ? view::run_bleu(run) : view::val_loss(run);
}

// The metrics a higher value of which is better (the others: lower is better)
bool higher_is_better(const std::string& metric) { return metric == "bleu"; }

// One side of an entry: its runs (at its best learning rate when asked), per-seed values.
struct Side {
  std::string filter;
  std::string lr;        // the chosen setting (best_lr: the learning rate; best_of: "key=value ..."), else ""
  bool lr_edge = false;  // a key of the chosen setting is at the smallest or largest value the side ran
  std::vector<std::string> left_out;  // settings not in the choice: fewer seeds done ("lr 0.008, 1 of 3 seeds")
  int runs = 0, finished = 0, diverged = 0;
  int pending = 0;  // runs of the side not run yet, stopped part-way or running: the study is part-way
  std::multimap<std::string, double> by_seed;  // seed key -> metric value (finished runs)
  std::vector<const json*> finished_runs;       // the runs behind by_seed (their curves: gap_by_step)
  SeedSummary stats;
  std::string unreadable;  // non-empty: the side's value cannot be compared, and why (lr_sensitivity)
  std::vector<double> rates;  // lr_sensitivity: the rates its sensitivity is over
};

// A side for metric = "lr_sensitivity": the one setting its filter names, over all its rates; each
// seed's value is that seed's LR sensitivity (lr_sensitivity.h), so `finished` counts seeds.
Side sensitivity_side(const json& results, const std::string& filter) {
  Side side;
  side.filter = filter;
  json sub = {{"study", results["study"]}, {"runs", json::array()}};
  for (const auto& r : results["runs"]) {
    if (!matches_filter(r, filter)) continue;
    const std::string status = r.value("status", std::string());
    side.runs++;
    if (status == "diverged") side.diverged++;
    if (status == "not run" || status == "interrupted" || status == "running") side.pending++;
    sub["runs"].push_back(r);
  }
  std::vector<double> values;
  for (const json& e : lr_sensitivity(sub)) {
    if (e["sensitivity"].is_null()) continue;
    for (size_t k = 0; k < e["seeds"].size(); k++) {
      const double v = e["sensitivity"]["values"][k].get<double>();
      side.by_seed.emplace(e["seeds"][k].get<std::string>(), v);
      values.push_back(v);
    }
    side.rates = e["rates"].get<std::vector<double>>();
    if (e.value("learned_nowhere", false))
      side.unreadable = fmt::format("{} learned at no rate (a flat curve at the unigram loss: its sensitivity is not "
                                    "robustness)", side_label(filter));
  }
  side.finished = int(values.size());
  side.stats = analysis::summarize(values);
  return side;
}

// The best setting is the one with the best mean of `select` (higher for BLEU); its runs give `metric`.
Side measure_side(const json& results, const std::string& filter, const std::string& metric,
                  const std::string& select, const std::vector<std::string>& best_of) {
  if (metric == "lr_sensitivity") return sensitivity_side(results, filter);
  const bool higher_better = higher_is_better(select);
  const bool best_lr = !best_of.empty();
  const auto terms = parse_filter(filter, "reproduce");
  std::map<std::string, std::vector<const json*>> groups;  // by the best_of setting ("" without one)
  std::map<std::string, std::vector<std::string>> values_of;  // a group's value of each best_of key
  std::vector<std::string> order;
  Side side;
  side.filter = filter;
  for (const auto& r : results["runs"]) {
    const std::string status = r.value("status", std::string());
    const bool matches = std::all_of(terms.begin(), terms.end(), [&](const Term& t) { return term_matches(r, t); });
    if (matches && (status == "not run" || status == "interrupted" || status == "running")) side.pending++;
    if (status != "finished" && status != "diverged") continue;
    if (!matches) continue;
    std::vector<std::string> vals, named;
    for (const std::string& k : best_of) {
      vals.push_back(view::grid_value(r, k));
      named.push_back(k + "=" + vals.back());
    }
    // one key: its value alone (best_lr's "lr 0.001"); several: "key=value ..."
    const std::string key = best_of.size() == 1 ? vals[0] : fmt::format("{}", fmt::join(named, " "));
    values_of[key] = vals;
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&r);
  }
  if (order.empty()) return side;
  // the group whose finished runs have the best mean (a group where every run diverged never wins),
  // among the groups that ran the most seeds (view::seeds_done)
  size_t most_seeds = 0;
  for (const auto& key : order) most_seeds = std::max(most_seeds, view::seeds_done(groups[key]));
  std::vector<std::string> eligible;
  for (const auto& key : order) {
    if (const size_t n = view::seeds_done(groups[key]); n == most_seeds) eligible.push_back(key);
    else if (best_lr)  // named as side_text names the chosen one: "lr 0.008", or "key=value ..."
      side.left_out.push_back(fmt::format("{}{} ({} of {} seeds)", best_of.size() == 1 ? "lr " : "", key, n, most_seeds));
  }
  std::string chosen;
  double best = NAN;
  for (const auto& key : eligible) {
    std::vector<double> v;
    for (const json* r : groups[key])
      if (const auto x = metric_of(*r, select); x && (*r)["status"] == "finished") v.push_back(*x);
    if (v.empty()) continue;
    const double mean = analysis::summarize(v).mean;
    if (std::isnan(best) || (higher_better ? mean > best : mean < best)) best = mean, chosen = key;
  }
  const bool none_finished = std::isnan(best);
  std::vector<const json*> picked;
  if (none_finished)  // every run of the compared settings diverged: all of them, to count
    for (const auto& key : eligible) picked.insert(picked.end(), groups[key].begin(), groups[key].end());
  else
    picked = groups[chosen];
  if (best_lr && !none_finished) {
    side.lr = chosen;
    for (size_t k = 0; k < best_of.size(); k++) {  // at an edge: some key at the least or most value compared
      std::set<double> ran;
      for (const auto& key : eligible)
        if (const auto x = as_number(values_of[key][k])) ran.insert(*x);
      const auto c = as_number(values_of[chosen][k]);
      side.lr_edge |= ran.size() >= 2 && c && (*c == *ran.begin() || *c == *ran.rbegin());
    }
  }
  std::vector<double> values;
  for (const json* r : picked) {
    side.runs++;
    if ((*r)["status"] == "diverged") {
      side.diverged++;
      continue;
    }
    if (const auto x = metric_of(*r, metric)) {
      side.finished++;
      side.by_seed.emplace(view::seed_of(*r), *x);
      side.finished_runs.push_back(r);
      values.push_back(*x);
    }
  }
  side.stats = analysis::summarize(values);
  return side;
}

// One run's validation curve as (step, value so far): lowest_val_loss its lowest evaluation up to the
// step, val_loss its latest.
using Curve = std::vector<std::pair<long, double>>;
Curve curve_of(const json& run, bool lowest) {
  Curve c;
  if (!run.contains("val") || !run["val"].is_object()) return c;
  const json& v = run["val"];
  if (!v.contains("step") || !v.contains("loss") || !v["step"].is_array() || !v["loss"].is_array()) return c;
  double so_far = INFINITY;
  for (size_t i = 0; i < v["step"].size() && i < v["loss"].size(); i++) {
    if (!v["step"][i].is_number() || !v["loss"][i].is_number()) continue;
    const double step = v["step"][i].get<double>(), x = v["loss"][i].get<double>();
    if (!(step >= 0 && step <= 1e12)) continue;  // a damaged results.json: no step count is that large
    so_far = lowest ? std::min(so_far, x) : x;
    c.emplace_back(long(step), so_far);
  }
  return c;
}

// The gap a - b against training steps for the loss metrics: at every evaluation step of either side,
// each finished run of a side's chosen setting gives its value there (curve_of), a run stopped
// earlier (at its plateau) its last one, and the seeds are paired as for the final gap. [] for BLEU.
json gap_by_step(const Side& a, const Side& b, const std::string& metric) {
  json out = json::array();
  if (metric != "val_loss" && metric != "lowest_val_loss") return out;  // a curve only of the validation loss
  const bool lowest = metric == "lowest_val_loss";
  struct SeedCurve {
    std::string seed;
    Curve curve;
  };
  const auto curves = [&](const Side& side) {
    std::vector<SeedCurve> cs;
    for (const json* r : side.finished_runs)
      if (Curve c = curve_of(*r, lowest); !c.empty()) cs.push_back({view::seed_of(*r), std::move(c)});
    return cs;
  };
  const std::vector<SeedCurve> ca = curves(a), cb = curves(b);
  std::set<long> steps;
  for (const auto* cs : {&ca, &cb})
    for (const SeedCurve& c : *cs)
      for (const auto& [step, value] : c.curve) steps.insert(step);
  const auto values_at = [](const std::vector<SeedCurve>& cs, long step) {
    std::multimap<std::string, double> by_seed;
    for (const SeedCurve& c : cs) {
      const auto after = std::upper_bound(c.curve.begin(), c.curve.end(), step,
                                          [](long s, const std::pair<long, double>& p) { return s < p.first; });
      if (after != c.curve.begin()) by_seed.emplace(c.seed, std::prev(after)->second);  // its last point <= step
    }
    return by_seed;
  };
  for (long step : steps) {
    const auto va = values_at(ca, step), vb = values_at(cb, step);
    if (va.empty() || vb.empty()) continue;
    const analysis::SeedDifference d = analysis::seed_difference(vb, va);  // a - b
    out.push_back({{"step", step}, {"kind", d.kind}, {"n", d.n}, {"mean", d.mean},
                   {"lo", std::isfinite(d.lo) ? json(d.lo) : json()}, {"hi", std::isfinite(d.hi) ? json(d.hi) : json()}});
  }
  return out;
}

// "1000: -0.050 [-0.080, -0.020]; 2000: ...; 9750 (the last): ...": at 1000 x 2^k steps and the last
std::string gap_by_step_text(const json& gaps) {
  std::vector<std::string> parts;
  long milestone = 1000;
  for (size_t i = 0; i < gaps.size(); i++) {
    const long step = gaps[i]["step"].get<long>();
    const bool last = i + 1 == gaps.size();
    if (!last && step < milestone) continue;  // the first evaluation at or past each milestone
    std::string text = fmt::format("{}{}: {:.3f}", step, last ? " (the last)" : "", gaps[i]["mean"].get<double>());
    if (gaps[i]["lo"].is_number())
      text += fmt::format(" [{:.3f}, {:.3f}]", gaps[i]["lo"].get<double>(), gaps[i]["hi"].get<double>());
    parts.push_back(text);
    while (milestone <= step) milestone *= 2;
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

json side_json(const Side& s) {
  json values = json::array();
  for (const auto& [seed, v] : s.by_seed) values.push_back({{"seed", seed}, {"value", v}});
  return {{"filter", s.filter}, {"label", side_label(s.filter)}, {"lr", s.lr.empty() ? json() : json(s.lr)},
          {"lr_edge", s.lr_edge}, {"left_out", s.left_out}, {"runs", s.runs}, {"finished", s.finished}, {"diverged", s.diverged},
          {"pending", s.pending},
          {"values", values}, {"mean", s.stats.n ? json(s.stats.mean) : json()},
          {"sd", s.stats.n > 1 ? json(s.stats.sd) : json()}};
}

// How a selecting metric is named in the sentence of a reproduction
std::string select_words(const std::string& select) {
  return select == "lowest_val_loss" ? "lowest validation loss" : select == "bleu" ? "BLEU" : "final validation loss";
}

// "placement=post 2.470 +- 0.012 (lr 0.001, 3 seeds; 1 diverged)"
std::string side_text(const Side& s, const std::string& metric) {
  const int digits = metric == "bleu" ? 2 : 3;
  std::string text = side_label(s.filter) + " ";
  if (metric == "lr_sensitivity" && s.finished == 0)
    text += "no seed ran every rate";
  else if (s.finished == 0) text += s.diverged ? fmt::format("diverged ({} of {} runs)", s.diverged, s.runs) : "no finished run";
  else if (s.finished == 1) text += fmt::format("{:.{}f}", s.stats.mean, digits);
  else text += fmt::format("{:.{}f} +- {:.{}f}", s.stats.mean, digits, s.stats.sd, digits);
  std::vector<std::string> notes;
  if (!s.lr.empty())
    notes.push_back(fmt::format("best {}{}", s.lr.find('=') == std::string::npos ? "lr " + s.lr : s.lr,
                                s.lr_edge ? ", at the edge of the sweep" : ""));
  if (!s.left_out.empty())
    notes.push_back(fmt::format("left out of the choice until their seeds finish: {}", fmt::join(s.left_out, ", ")));
  if (s.finished > 1) notes.push_back(fmt::format("{} seeds", s.finished));
  if (metric == "lr_sensitivity" && s.diverged)
    notes.push_back(fmt::format("{} of its {} runs diverged, counted at the initial loss", s.diverged, s.runs));
  else if (s.finished > 0 && s.diverged) notes.push_back(fmt::format("{} more diverged", s.diverged));
  return notes.empty() ? text : fmt::format("{} ({})", text, fmt::join(notes, "; "));
}

}  // namespace

bool matches_filter(const json& run, const std::string& filter) {
  const auto terms = parse_filter(filter, "reproduce");
  return std::all_of(terms.begin(), terms.end(), [&](const Term& t) { return term_matches(run, t); });
}

void check_reproductions(const json& document, const std::vector<json>& runs, const std::string& where) {
  if (!document.contains("reproduce")) return;
  const json& list = document["reproduce"];
  if (!list.is_array()) throw Error(fmt::format("{}: reproduce must be [[reproduce]] tables", where));
  for (size_t i = 0; i < list.size(); i++) {
    const std::string at = fmt::format("{}: reproduce {}", where, i + 1);
    const json& e = list[i];
    if (!e.is_object()) throw Error(fmt::format("{} is not a table", at));
    for (const auto& [key, value] : e.items())
      if (std::find(kEntryKeys.begin(), kEntryKeys.end(), key) == kEntryKeys.end())
        throw Error(fmt::format("{}: unknown key '{}' (known: {}){}", at, key, fmt::join(kEntryKeys, ", "),
                                did_you_mean(key, kEntryKeys)));
    for (const char* key : {"claim", "source", "paper", "a", "b", "expect"})
      if (!e.contains(key) || !e[key].is_string() || e[key].get<std::string>().empty())
        throw Error(fmt::format("{}: '{}' must be a non-empty string", at, key));
    const std::string expect = e["expect"];
    if (expect != "a < b" && expect != "a > b")
      throw Error(fmt::format("{}: expect = \"{}\" must be \"a < b\" or \"a > b\"", at, expect));
    const auto known_metric = [&](const char* key, const std::vector<std::string>& known) {
      if (e.contains(key) && !(e[key].is_string() && std::find(known.begin(), known.end(), e[key]) != known.end()))
        throw Error(fmt::format("{}: {} = {} must be one of: {}", at, key, e[key].dump(), fmt::join(known, ", ")));
    };
    known_metric("metric", kMetrics);
    known_metric("select", {"val_loss", "lowest_val_loss", "bleu"});  // never test_loss: it chooses
    if (e.contains("select") && !e.contains("best_of") && !e.value("best_lr", false))
      throw Error(fmt::format("{}: select chooses a side's best setting: it needs best_of or best_lr", at));
    if (e.contains("select") && (e["select"] == "bleu") != (e.value("metric", std::string()) == "bleu"))
      throw Error(fmt::format("{}: select = {} and metric = {}: a best chosen by BLEU is reported in BLEU, one "
                              "chosen by a loss in a loss",
                              at, e["select"].dump(), e.value("metric", json("val_loss")).dump()));
    if (e.contains("best_lr") && !e["best_lr"].is_boolean())
      throw Error(fmt::format("{}: best_lr must be true or false", at));
    if (e.contains("best_of")) {
      const json& keys = e["best_of"];
      if (!keys.is_array() || keys.empty() ||
          !std::all_of(keys.begin(), keys.end(), [](const json& k) {
            return k.is_string() && k.get<std::string>().find('.') != std::string::npos;
          }))
        throw Error(fmt::format("{}: best_of must be a non-empty list of \"section.key\" names", at));
      if (e.contains("best_lr"))
        throw Error(fmt::format("{}: best_lr and best_of exclude each other (best_of = [\"train.lr\"] is best_lr)", at));
    }
    const bool sensitivity = e.value("metric", std::string()) == "lr_sensitivity";
    if (sensitivity && (e.contains("best_lr") || e.contains("best_of") || e.contains("select")))
      throw Error(fmt::format("{}: metric = \"lr_sensitivity\" reads a setting over all its rates; best_lr, best_of "
                              "and select do not apply", at));
    for (const char* side : {"a", "b"}) {
      const std::string filter = e[side];
      parse_filter(filter, fmt::format("{}: {} = \"{}\"", at, side, filter));
      if (std::none_of(runs.begin(), runs.end(), [&](const json& r) { return matches_filter(r, filter); }))
        throw Error(fmt::format("{}: {} = \"{}\" matches no run of the study", at, side, filter));
      if (!sensitivity) continue;
      // the side's runs must differ only in the rate and the seeds: one setting, one curve
      std::set<std::string> settings;
      std::set<double> rates;
      for (const json& r : runs) {
        if (!matches_filter(r, filter)) continue;
        json grid = r.value("grid", json::object());
        for (const char* k : {"train.lr", "train.seed", "model.seed"}) grid.erase(k);
        settings.insert(grid.dump());
        if (r.contains("config") && r["config"].contains("train") && r["config"]["train"].contains("lr"))
          rates.insert(r["config"]["train"]["lr"].get<double>());
      }
      if (settings.size() != 1)
        throw Error(fmt::format("{}: {} = \"{}\" matches {} settings; for metric = \"lr_sensitivity\" a side names one "
                                "setting (every varied key but train.lr and the seeds)", at, side, filter, settings.size()));
      if (rates.size() < 2)
        throw Error(fmt::format("{}: {} = \"{}\" runs {} learning rate; lr_sensitivity needs a sweep of train.lr", at, side,
                                filter, rates.size()));
    }
  }
}

json reproductions(const json& results) {
  json out = json::array();
  const json& doc = results["study"].value("document", json::object());
  if (!doc.is_object() || !doc.contains("reproduce") || !doc["reproduce"].is_array()) return out;
  for (const auto& e : doc["reproduce"]) {
    const std::string metric = e.value("metric", std::string("val_loss")), expect = e["expect"];
    const std::string select = select_metric(e);
    const std::vector<std::string> best_of = best_keys(e);
    const bool best_lr = !best_of.empty();
    const Side a = measure_side(results, e["a"], metric, select, best_of),
               b = measure_side(results, e["b"], metric, select, best_of);
    // which side the claim calls worse: a higher loss (or sensitivity, logit), or a lower BLEU
    const bool a_claimed_worse = higher_is_better(metric) == (expect == "a < b");
    const int direction = expect == "a < b" ? -1 : 1;  // the claimed sign of a - b
    json diff = {{"kind", "none"}, {"n", 0}, {"mean", nullptr}, {"lo", nullptr}, {"hi", nullptr}};
    std::string verdict = theory::to_string(theory::Verdict::NotDistinguishable), how;
    if (!a.unreadable.empty() || !b.unreadable.empty()) {
      how = "no comparison: " + (a.unreadable.empty() ? b.unreadable : a.unreadable);
    } else if (a.rates != b.rates) {  // a sensitivity is a mean over the rates: only over the same ones
      how = fmt::format("no comparison: the sides' sensitivities are over different rates ({} and {})",
                        fmt::join(a.rates, ", "), fmt::join(b.rates, ", "));
    } else if (a.finished == 0 || b.finished == 0) {
      const bool a_dead = a.finished == 0 && a.diverged > 0, b_dead = b.finished == 0 && b.diverged > 0;
      if (a_dead != b_dead && (a_dead ? b.finished : a.finished) > 0) {
        diff["kind"] = "diverged";
        verdict = theory::to_string(a_dead == a_claimed_worse ? theory::Verdict::Holds : theory::Verdict::Violated);
        how = fmt::format("every {} run diverged", side_label(a_dead ? a.filter : b.filter));
      } else {
        how = "no comparison: a side has no finished run";
      }
    } else {
      const analysis::SeedDifference sd = analysis::seed_difference(b.by_seed, a.by_seed);  // a - b
      SeedSummary d;
      d.n = sd.n, d.mean = sd.mean, d.lo = sd.lo, d.hi = sd.hi;
      diff["kind"] = sd.kind;
      how = sd.how();
      diff["n"] = d.n;
      diff["mean"] = d.mean;
      diff["lo"] = std::isfinite(d.lo) ? json(d.lo) : json();
      diff["hi"] = std::isfinite(d.hi) ? json(d.hi) : json();
      verdict = theory::to_string(theory::direction_of(d.lo, d.hi, direction));
    }
    // a study part-way is not read: its bests can still move (a setting's missing seeds, an extension)
    if (const int pending = a.pending + b.pending; pending > 0) {
      verdict = "not yet";
      how += fmt::format("; the study is part-way: {} of the two sides' runs have not finished, and the verdict "
                         "waits for them (the numbers are those so far)",
                         pending);
    }
    const std::string unit =
        metric == "bleu"              ? "BLEU"
        : metric == "lowest_val_loss" ? "lowest validation loss"
        : metric == "test_loss"       ? "test loss (final parameters, the whole test split)"
        : metric == "lr_sensitivity"  ? "LR sensitivity (nats; Wortsman et al.: each seed's mean excess over its best rate)"
        : metric == "max_attn_logit"  ? "largest attention logit (over the layers and the logged steps)"
        : metric == "abs_log_z"       ? "largest |mean log Z| of the output logits (over the logged steps)"
                                      : "final validation loss";
    std::string measured = fmt::format("{}: {} vs {}", unit, side_text(a, metric), side_text(b, metric));
    if (diff["mean"].is_number()) {
      measured += fmt::format("; a - b = {:.3f}", diff["mean"].get<double>());
      if (diff["lo"].is_number()) measured += fmt::format(" [{:.3f}, {:.3f}]", diff["lo"].get<double>(), diff["hi"].get<double>());
    }
    measured += " (" + how + ")";
    const json gaps = gap_by_step(a, b, metric);
    const std::string gap_text =
        gaps.size() < 2 ? ""
                        : fmt::format("a - b by training step ({}, a run stopped earlier keeping its last; 95% interval "
                                      "over seeds where both sides have two or more): {}",
                                      metric == "lowest_val_loss" ? "each run's lowest validation loss so far"
                                                                     : "each run's validation loss",
                                      gap_by_step_text(gaps));
    if (best_lr && select != metric) measured += fmt::format("; each side's best chosen by its mean {}", select_words(select));
    out.push_back({{"claim", e["claim"]}, {"source", e["source"]}, {"paper", e["paper"]}, {"metric", metric}, {"select", select},
                   {"expect", expect}, {"best_lr", best_lr}, {"best_of", best_of}, {"a", side_json(a)}, {"b", side_json(b)},
                   {"difference", diff}, {"gap_by_step", gaps}, {"gap_by_step_text", gap_text}, {"verdict", verdict},
                   {"measured", measured}});
  }
  return out;
}

std::string reproductions_text(const json& results) {
  if (!results.contains("reproductions") || !results["reproductions"].is_array() || results["reproductions"].empty())
    return "";
  std::string text = "Reproductions (the source's numbers, then normlab's; a = the first side, b = the second):\n";
  for (const auto& r : results["reproductions"]) {
    text += fmt::format("- {} ({}): {}.\n  source: {}\n  normlab: {}\n", r["claim"].get<std::string>(),
                        r["source"].get<std::string>(), r["verdict"].get<std::string>(), r["paper"].get<std::string>(),
                        r["measured"].get<std::string>());
    if (const std::string gap = r.value("gap_by_step_text", std::string()); !gap.empty()) text += "  " + gap + "\n";
  }
  return text;
}

}  // namespace normlab::study
