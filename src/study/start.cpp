// start.cpp: the runs of a study that start from another study's finished runs (start.h).
#include "study/start.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>

#include "study/reproduce.h"
#include "study/results_view.h"
#include "study/resume.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/files.h"
#include "util/hints.h"
#include "util/json_reader.h"

namespace normlab::study {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The start a run names ("start:post" -> "post"), or "" when its init_from is not a start
std::string start_of(const StudyRun& run) {
  const std::string& from = run.config.train.init_from;
  return from.starts_with(kStartPrefix) ? from.substr(std::string(kStartPrefix).size()) : "";
}

// The filter with each {section.key} replaced by the run's value of that key
std::string fill_in(const std::string& filter, const StudyRun& run, const std::string& where) {
  const json view_of_run = {{"grid", run.grid}, {"config", run_config_to_json(run.config)}};
  std::string out;
  for (size_t i = 0; i < filter.size();) {
    if (filter[i] != '{') {
      out += filter[i++];
      continue;
    }
    const size_t close = filter.find('}', i);
    if (close == std::string::npos) throw Error(fmt::format("{}: '{{' without '}}' in \"{}\"", where, filter));
    const std::string key = filter.substr(i + 1, close - i - 1);
    const std::string value = key.find('.') == std::string::npos ? "?" : view::grid_value(view_of_run, key);
    if (value == "?")
      throw Error(fmt::format("{}: {{{}}} in \"{}\" is not a section.key of the run's config (e.g. {{model.seed}})",
                              where, key, filter));
    out += value;
    i = close + 1;
  }
  return out;
}

// A run directory holding a finished training: its checkpoint, and the summary of a run not interrupted
bool finished_training(const fs::path& dir) {
  const json summary = last_run_summary(dir.string());
  return fs::is_regular_file(dir / "checkpoint.safetensors") && summary.is_object() &&
         !summary.value("interrupted", true);
}

}  // namespace

json last_run_summary(const std::string& given) {
  const fs::path dir(given);
  const fs::path path = dir / "metrics.jsonl";
  if (!fs::is_regular_file(path)) return nullptr;
  std::ifstream in(path);
  std::string line;
  json summary;
  while (std::getline(in, line))
    if (line.find("\"summary\"") != std::string::npos)
      if (json j = parse_json_or_discarded(line); j.is_object() && j.value("type", std::string()) == "summary")
        summary = std::move(j);
  return summary;
}

std::map<std::string, std::string> read_starts(json& settings, const std::string& where) {
  std::map<std::string, std::string> starts;
  if (!settings.contains("starts")) return starts;
  const json table = settings["starts"];
  settings.erase("starts");
  if (!table.is_object() || table.empty())
    throw Error(fmt::format("{}: [study.starts] must be a table of name = \"section.key=value ...\" filters", where));
  for (const auto& [name, filter] : table.items()) {
    if (!filter.is_string() || filter.get<std::string>().empty())
      throw Error(fmt::format("{}: study.starts.{} must be a non-empty filter string (\"section.key=value ...\")",
                              where, name));
    starts[name] = filter.get<std::string>();
  }
  return starts;
}

void check_starts(const Study& study, const std::string& where) {
  std::set<std::string> used;
  std::vector<std::string> names;
  for (const auto& [name, filter] : study.starts) names.push_back(name);
  for (size_t i = 0; i < study.runs.size(); i++) {
    const StudyRun& run = study.runs[i];
    const std::string name = start_of(run);
    if (name.empty()) continue;
    const std::string at = fmt::format("{} run {}: train.init_from = \"{}\"", where, i + 1, run.config.train.init_from);
    if (!study.starts.count(name))
      throw Error(fmt::format("{} names no start of [study.starts] (known: {}){}", at,
                              names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")),
                              did_you_mean(name, names)));
    if (study.start_from.empty())
      throw Error(fmt::format("{}: study.start_from must name the study directory the start is read from", at));
    matches_filter(json::object(), fill_in(study.starts.at(name), run, at));  // parses it (an Error names the term)
    used.insert(name);
  }
  for (const auto& [name, filter] : study.starts)
    if (!used.count(name))
      throw Error(fmt::format("{}: study.starts.{} is used by no run (train.init_from = \"{}{}\")", where, name,
                              kStartPrefix, name));
  if (!study.start_from.empty() && used.empty())
    throw Error(fmt::format("{}: study.start_from is set but no run starts from it (train.init_from = \"{}<name>\")",
                            where, kStartPrefix));
}

ResolvedStarts resolve_starts(const Study& given) {
  ResolvedStarts resolved{given, {}, 0};
  Study& study = resolved.study;
  if (study.starts.empty()) return resolved;
  const fs::path dir(study.start_from);
  const fs::path results_path = dir / "results.json";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(results_path, ec)))
    throw Error(fmt::format("study.start_from '{}': no results.json (the directory of a study `normlab compare` ran)",
                            study.start_from));
  const json results = read_results(results_path.string(), "study.start_from's results");
  if (results.contains("jobs") && results["jobs"].is_object() && results["jobs"].value("threads_each", 0) > 0)
    resolved.threads = results["jobs"]["threads_each"].get<int>();
  std::set<std::string> listed;
  for (StudyRun& run : study.runs) {
    const std::string name = start_of(run);
    if (name.empty()) continue;
    const std::string at = fmt::format("run '{}': start '{}'", run.label, name);
    const std::string filter = fill_in(study.starts.at(name), run, at);
    std::vector<const json*> found;
    for (const json& r : results["runs"])
      if (r.is_object() && r.value("status", std::string()) == "finished" && r.contains("name") &&
          r["name"].is_string() && matches_filter(r, filter))
        found.push_back(&r);
    if (found.size() != 1) {
      std::vector<std::string> names;
      for (const json* r : found) names.push_back((*r)["name"].get<std::string>());
      throw Error(fmt::format("{} (\"{}\") matches {} finished runs of '{}'{}", at, filter,
                              found.empty() ? "no" : std::to_string(found.size()), study.start_from,
                              found.empty() ? "" : fmt::format(" ({}); make it match one", fmt::join(names, ", "))));
    }
    const std::string picked = (*found[0])["name"].get<std::string>();
    if (picked.empty() || picked.find('/') != std::string::npos || picked == "." || picked == "..")
      throw Error(fmt::format("{}: '{}' lists the run '{}', which is not the name of a directory in its runs/", at,
                              results_path.string(), picked));
    const fs::path run_dir = dir / "runs" / picked;
    if (!found[0]->contains("config"))
      throw Error(fmt::format("{}: '{}' keeps no config for the run '{}'", at, results_path.string(), picked));
    if (!finished_training(run_dir) && listed.insert(run_dir.string()).second)
      resolved.missing.push_back({run_dir.string(), *found[0]});
    run.config.train.init_from = run_dir.string();
  }
  return resolved;
}

}  // namespace normlab::study
