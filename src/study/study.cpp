// study.cpp: reading a study (TOML -> JSON -> runs) and the built-in studies.
#include "study/study.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <limits>
#include <type_traits>

#include "study/reproduce.h"
#include "study/results_view.h"
#include "study/start.h"
#include "train/data.h"
#include "util/error.h"
#include "util/files.h"
#include "util/hints.h"
#include "util/json_reader.h"
#include "util/resources.h"

namespace normlab::study {

namespace {

constexpr size_t kMaxRuns = 256;

// A grid key's path must be section.key with a known section.
void check_grid_key(const std::string& path, const std::string& where) {
  if (std::count(path.begin(), path.end(), '.') != 1)
    throw Error(fmt::format("{}: grid key '{}' must be section.key, e.g. model.placement", where, path));
  const std::string section = path.substr(0, path.find('.'));
  if (section != "model" && section != "train" && section != "data")
    throw Error(fmt::format("{}: grid key '{}': the section must be model, train or data{}", where, path,
                            did_you_mean(section, {"model", "train", "data"})));
}

// One entry of a list of settings that vary together ({model.seed = 1, train.seed = 1}) as
// {"model.seed": 1, "train.seed": 1}: section.key paths with single values.
void flatten_setting(const nlohmann::json& table, const std::string& prefix, nlohmann::json& out,
                     const std::string& where) {
  for (const auto& [key, value] : table.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      flatten_setting(value, path, out, where);
      continue;
    }
    check_grid_key(path, where);
    if (value.is_array() || value.is_null())
      throw Error(fmt::format("{}: '{}' in a list of settings that vary together takes one value, not {}", where,
                              path, dump_json(value)));
    out[path] = value;
  }
}

// {"model": {"placement": [...]}} and {"model.placement": [...]} both become "model.placement". A key
// whose values are tables is a list of settings that vary together (the runs take its entries in
// turn, not their product): seeds = [{model.seed = 1, train.seed = 1}, {model.seed = 2, train.seed = 2}]
// pairs the two seeds; it becomes the key's name with its entries flattened, every entry setting the
// same keys.
void flatten_grid(const nlohmann::json& table, const std::string& prefix, nlohmann::json& out,
                  const std::string& where) {
  for (const auto& [key, value] : table.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      flatten_grid(value, path, out, where);
      continue;
    }
    const bool together = value.is_array() && !value.empty() &&
                          std::all_of(value.begin(), value.end(), [](const nlohmann::json& v) { return v.is_object(); });
    if (together) {
      nlohmann::json entries = nlohmann::json::array();
      for (const nlohmann::json& entry : value) {
        nlohmann::json flat = nlohmann::json::object();
        flatten_setting(entry, "", flat, fmt::format("{} '{}'", where, path));
        if (flat.empty()) throw Error(fmt::format("{}: '{}' has an empty entry ({{}}): give each entry its settings", where, path));
        std::vector<std::string> keys, first;
        for (const auto& [k, v] : flat.items()) keys.push_back(k);
        if (!entries.empty())
          for (const auto& [k, v] : entries[0].items()) first.push_back(k);
        if (!entries.empty() && keys != first)
          throw Error(fmt::format("{}: every entry of '{}' must set the same keys ({} against {})", where, path,
                                  fmt::join(keys, ", "), fmt::join(first, ", ")));
        entries.push_back(std::move(flat));
      }
      out[path] = std::move(entries);
      continue;
    }
    check_grid_key(path, where);
    if (!value.is_array() || value.empty())
      throw Error(fmt::format("{}: grid key '{}' needs a non-empty array of values, e.g. [\"post\", \"pre\"]",
                              where, path));
    out[path] = value;
  }
}

// The section.key settings one flattened grid entry makes: itself, or a together-list's entry's keys.
std::vector<std::string> keys_of(const std::string& key, const nlohmann::json& values) {
  if (!values[0].is_object()) return {key};
  std::vector<std::string> keys;
  for (const auto& [k, v] : values[0].items()) keys.push_back(k);
  return keys;
}

// Every combination of one grid's values, the keys in the order of their names (JSON from TOML keeps
// no written order: "model.placement" varies slowest, "train.warmup_steps" fastest, a list of
// settings by its own name: "seeds" after "model.*" keys and before "start" or "train.*"); a
// list of settings that vary together contributes one entry (several keys) per combination.
std::vector<nlohmann::json> expand(const nlohmann::json& grid) {
  std::vector<nlohmann::json> combos = {nlohmann::json::object()};
  for (const auto& [key, values] : grid.items()) {
    std::vector<nlohmann::json> next;
    for (const auto& c : combos)
      for (const auto& v : values) {
        nlohmann::json n = c;
        if (v.is_object()) n.update(v);
        else n[key] = v;
        next.push_back(std::move(n));
      }
    combos = std::move(next);
  }
  return combos;
}


constexpr size_t kMaxRunNameBytes = 120;

std::string dir_safe(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '=') ? c : '_';
  return out;
}

nlohmann::json resolved_value(const RunConfig& cfg, const std::string& dotted) {
  const nlohmann::json all = run_config_to_json(cfg);
  const auto dot = dotted.find('.');
  return all.at(dotted.substr(0, dot)).value(dotted.substr(dot + 1), nlohmann::json());
}

template <class T>
void read_setting(nlohmann::json& table, const char* key, T& out, const std::string& where) {
  if (!table.contains(key)) return;
  const nlohmann::json& v = table[key];
  const auto wrong = [&] { return Error(fmt::format("{}: study.{} has the wrong type ({})", where, key, dump_json(v))); };
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw wrong();
    out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {  // checked: 2^32 + 16 is not 16, 1e300 is not UB
    if (!v.is_number()) throw wrong();
    const auto i = json_integer<T>(v);
    if (!i) throw Error(fmt::format("{}: study.{} = {} is not an integer in range", where, key, dump_json(v)));
    out = *i;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) throw wrong();
    out = v.get<T>();
  } else {
    if (!v.is_string()) throw wrong();
    out = v.get<std::string>();
  }
  table.erase(key);
}

// The number of runs the grids make, counted before any is built (a grid of 24 keys with 2 values
// each would be 16.7 million objects): stops counting past `limit`.
size_t count_runs(const std::vector<nlohmann::json>& flat_grids, size_t limit) {
  size_t total = 0;
  for (const nlohmann::json& flat : flat_grids) {
    size_t product = 1;
    for (const auto& [key, values] : flat.items()) {
      product *= values.size();  // each >= 1
      if (product > limit) return limit + 1;
    }
    total += product;
    if (total > limit) return limit + 1;
  }
  return total;
}

}  // namespace

Study study_from_json(const nlohmann::json& doc_in, const std::vector<std::string>& sets, const std::string& where) {
  if (!doc_in.is_object()) throw Error(fmt::format("{}: not a table", where));
  for (const auto& [key, value] : doc_in.items())
    if (key != "study" && key != "base" && key != "grid" && key != "reproduce")
      throw Error(fmt::format("{}: unknown table '{}' (expected [study], [base.*], [[grid]] and [[reproduce]]){}", where,
                              key, did_you_mean(key, {"study", "base", "grid", "reproduce"})));
  Study s;
  s.document = doc_in;
  s.loss_target = std::numeric_limits<double>::quiet_NaN();

  nlohmann::json settings = doc_in.value("study", nlohmann::json::object());
  if (!settings.is_object()) throw Error(fmt::format("{}: [study] must be a table", where));
  read_setting(settings, "name", s.name, where);
  read_setting(settings, "title", s.title, where);
  read_setting(settings, "description", s.description, where);
  read_setting(settings, "loss_target", s.loss_target, where);
  read_setting(settings, "instruments", s.instruments, where);
  read_setting(settings, "theory", s.theory, where);
  read_setting(settings, "probe_seq_len", s.probe_seq_len, where);
  read_setting(settings, "theory_seeds", s.theory_seeds, where);
  read_setting(settings, "theory_trained_seeds", s.theory_trained_seeds, where);
  read_setting(settings, "theory_steps", s.theory_steps, where);
  read_setting(settings, "start_from", s.start_from, where);
  s.start_from = expand_home(s.start_from);
  s.starts = read_starts(settings, where);
  if (!settings.empty()) {
    static const std::vector<std::string> known = {
        "name",         "title",        "description", "loss_target", "instruments", "theory", "theory_seeds",
        "theory_trained_seeds", "theory_steps", "probe_seq_len", "start_from", "starts"};
    throw Error(fmt::format("{}: unknown [study] key '{}' (known: {}){}", where, settings.begin().key(),
                            fmt::join(known, ", "), did_you_mean(settings.begin().key(), known)));
  }
  if (s.theory_seeds < 1 || s.theory_seeds > 100 || s.theory_trained_seeds < 1 || s.theory_trained_seeds > 100)
    throw Error(fmt::format("{}: study.theory_seeds = {} and study.theory_trained_seeds = {} must be in [1, 100]", where,
                            s.theory_seeds, s.theory_trained_seeds));
  if (s.theory_steps < 0 || s.theory_steps > 1000000)
    throw Error(fmt::format("{}: study.theory_steps = {} must be in [0, 1000000]", where, s.theory_steps));
  if (s.name.empty()) s.name = "study";
  if (s.title.empty()) s.title = s.name;
  if (!std::isnan(s.loss_target) && !(s.loss_target > 0 && std::isfinite(s.loss_target)))
    throw Error(fmt::format("{}: study.loss_target = {} must be a positive number", where, s.loss_target));
  if (s.probe_seq_len < 2 || s.probe_seq_len > 256)
    throw Error(fmt::format("{}: study.probe_seq_len = {} must be in [2, 256]", where, s.probe_seq_len));

  const nlohmann::json base = doc_in.value("base", nlohmann::json::object());
  if (!base.is_object()) throw Error(fmt::format("{}: [base] must be a table", where));

  // the grids
  std::vector<nlohmann::json> grids;
  if (doc_in.contains("grid")) {
    const nlohmann::json& g = doc_in["grid"];
    if (g.is_object()) grids.push_back(g);
    else if (g.is_array()) grids.assign(g.begin(), g.end());
    else throw Error(fmt::format("{}: grid must be [[grid]] tables", where));
  }
  if (doc_in.contains("grid") && grids.empty())
    throw Error(fmt::format("{}: grid is an empty list; give [[grid]] tables with keys, or no grid for a single run of "
                            "the base config", where));
  const bool single = grids.empty();
  if (single) grids.push_back(nlohmann::json::object());  // no grid at all: a single run of the base config
  std::vector<std::string> grid_keys;  // in the order first written
  std::vector<nlohmann::json> flat_grids;
  for (size_t i = 0; i < grids.size(); i++) {
    if (!grids[i].is_object()) throw Error(fmt::format("{}: grid {} is not a table", where, i + 1));
    nlohmann::json flat = nlohmann::json::object();
    flatten_grid(grids[i], "", flat, fmt::format("{} grid {}", where, i + 1));
    if (flat.empty() && !single)
      throw Error(fmt::format("{}: grid {} is empty ([[grid]] with no keys); give it keys with lists of values, e.g. "
                              "model.placement = [\"post\", \"pre\"], or remove it",
                              where, i + 1));
    std::vector<std::string> mine;  // a key set twice in one grid (alone and in a together-list) is ambiguous
    for (const auto& [k, v] : flat.items())
      for (const std::string& key : keys_of(k, v)) {
        if (std::find(mine.begin(), mine.end(), key) != mine.end())
          throw Error(fmt::format("{} grid {}: {} is set twice (by a key and a list of settings that vary together)",
                                  where, i + 1, key));
        mine.push_back(key);
        if (std::find(grid_keys.begin(), grid_keys.end(), key) == grid_keys.end()) grid_keys.push_back(key);
      }
    flat_grids.push_back(std::move(flat));
  }
  if (const size_t n = count_runs(flat_grids, kMaxRuns); n > kMaxRuns)
    throw Error(fmt::format("{}: the grids make more than {} runs; split the study", where, kMaxRuns));
  std::vector<nlohmann::json> combos;
  for (const nlohmann::json& flat : flat_grids)
    for (auto& c : expand(flat)) combos.push_back(std::move(c));
  for (const std::string& o : sets) {
    const std::string key = o.substr(0, o.find('='));
    if (std::find(grid_keys.begin(), grid_keys.end(), key) != grid_keys.end())
      throw Error(fmt::format("--set '{}': {} is a grid key of the study; edit the study instead", o, key));
  }

  // the runs
  for (size_t i = 0; i < combos.size(); i++) {
    nlohmann::json doc = base;
    for (const auto& [key, value] : combos[i].items()) {
      const auto dot = key.find('.');
      doc[key.substr(0, dot)][key.substr(dot + 1)] = value;
    }
    apply_overrides(doc, sets);
    StudyRun run;
    run.grid = combos[i];
    run.config = run_config_from_json(doc, fmt::format("{} run {} ({})", where, i + 1, combos[i].dump()));
    if (!run.config.data.tokens.empty()) {  // a token stream trains like a corpus; rows do not
      bool stream = false;
      try {
        stream = is_token_stream(run.config.data.tokens);
      } catch (const Error& e) {
        throw Error(fmt::format("{} run {}: data.tokens: {}", where, i + 1, e.what()));
      }
      if (!stream)
        throw Error(fmt::format("{} run {}: data.tokens '{}' is a token file of rows (it has labels); a study trains "
                                "on a corpus or a token stream (input_ids only, or a .bin of uint16 ids)",
                                where, i + 1, run.config.data.tokens));
    }
    s.runs.push_back(std::move(run));
  }
  check_starts(s, where);

  // labels from the keys whose resolved values differ between runs, the usual subjects first
  // (JSON from TOML keeps no key order)
  static const std::vector<std::string> kFirst = {"model.placement", "model.norm", "train.lr",
                                                  "train.warmup_steps", "model.n_layers"};
  auto rank = [&](const std::string& k) {
    return size_t(std::find(kFirst.begin(), kFirst.end(), k) - kFirst.begin());
  };
  std::stable_sort(grid_keys.begin(), grid_keys.end(), [&](const std::string& a, const std::string& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a < b;
  });
  for (const std::string& key : grid_keys) {
    const nlohmann::json first = resolved_value(s.runs[0].config, key);
    for (const auto& r : s.runs)
      if (resolved_value(r.config, key) != first) {
        s.varying.push_back(key);
        break;
      }
  }
  // a key is named by its short name unless another varying key has the same one (train.seed and
  // model.seed): then by the dotted name
  auto label_key = [&](const std::string& key) {
    const std::string name = key.substr(key.find('.') + 1);
    for (const std::string& other : s.varying)
      if (other != key && other.substr(other.find('.') + 1) == name) return key;
    return name;
  };
  for (size_t i = 0; i < s.runs.size(); i++) {
    StudyRun& r = s.runs[i];
    std::vector<std::string> parts;
    for (const std::string& key : s.varying) {
      const nlohmann::json v = r.grid.contains(key) ? r.grid[key] : resolved_value(r.config, key);
      parts.push_back(label_key(key) + "=" + view::text_of(v));
    }
    r.label = parts.empty() ? s.name : fmt::format("{}", fmt::join(parts, " "));
    r.name = fmt::format("{:02}-{}", i + 1, dir_safe(parts.empty() ? s.name : fmt::format("{}", fmt::join(parts, "_"))));
    // a run's directory name, well inside the file-name limit (255 bytes): the number in front keeps it
    // unique when the grid's values run longer (a per-layer placement list, say); the label keeps them all
    if (r.name.size() > kMaxRunNameBytes) r.name = r.name.substr(0, kMaxRunNameBytes);
  }
  std::vector<nlohmann::json> run_views;  // as the results hold them: grid and resolved config
  for (const auto& r : s.runs) run_views.push_back({{"grid", r.grid}, {"config", run_config_to_json(r.config)}});
  check_reproductions(doc_in, run_views, where);
  return s;
}

Study read_study_file(const std::string& path, const std::vector<std::string>& sets) {
  require_not_directory(path, "study");
  if (!std::filesystem::is_regular_file(path)) throw Error(fmt::format("study '{}': no such file", path));
  return naming_json_errors(fmt::format("study '{}'", path),
                            [&] { return study_from_json(read_toml(path), sets, fmt::format("study '{}'", path)); });
}

std::string builtin_study_path(const std::string& name) {
  return resource_path("studies/" + name + ".toml");
}

std::vector<std::string> builtin_study_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(resource_path("studies"), ec))
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Study builtin_study(const std::string& name, const std::vector<std::string>& sets) {
  const auto names = builtin_study_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw Error(fmt::format("no built-in study '{}' (built in: {}){}", name, fmt::join(names, ", "),
                            did_you_mean(name, names)));
  return study_from_json(read_toml(builtin_study_path(name)), sets, fmt::format("built-in study '{}'", name));
}

}  // namespace normlab::study
