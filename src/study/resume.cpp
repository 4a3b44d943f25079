// resume.cpp: reading a stopped study directory back and checking a study given again (resume.h).
#include "study/resume.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>

#include "train/run_config.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::study {

namespace {

// What a study document says without changing any run: its [[reproduce]] tables and its title and
// description. On resume these may differ from study.json; the given ones are used.
void erase_presentation(nlohmann::json& doc) {
  doc.erase("reproduce");
  if (doc.contains("study") && doc["study"].is_object()) {
    doc["study"].erase("title");
    doc["study"].erase("description");
  }
}
void copy_presentation(const nlohmann::json& from, nlohmann::json& to) {
  erase_presentation(to);
  if (from.contains("reproduce")) to["reproduce"] = from["reproduce"];
  for (const char* key : {"title", "description"})
    if (from.contains("study") && from["study"].is_object() && from["study"].contains(key)) to["study"][key] = from["study"][key];
}

// "key: study.json <old>, now <new>" for every difference between two study documents that changes
// a run (not its presentation: erase_presentation); without their grids when `grids` is false.
std::vector<std::string> study_differences(nlohmann::json saved, nlohmann::json given, bool grids = true) {
  erase_presentation(saved);
  erase_presentation(given);
  if (!grids) {
    saved.erase("grid");
    given.erase("grid");
  }
  std::vector<std::string> diffs;
  for (const auto& op : nlohmann::json::diff(saved, given)) {
    const nlohmann::json::json_pointer at(op["path"].get<std::string>());
    std::string key = op["path"].get<std::string>().substr(1);
    std::replace(key.begin(), key.end(), '/', '.');
    diffs.push_back(fmt::format("{}: study.json {}, now {}", key, saved.contains(at) ? saved[at].dump() : "absent",
                                given.contains(at) ? given[at].dump() : "absent"));
  }
  return diffs;
}

// A study that extends the saved one: its grid gained runs (a value, a [[grid]] table) and every run
// the saved study holds is still in it under the same name with the same config, so that nothing
// that ran runs again. Returns what breaks that, one line per run; empty when it extends.
std::vector<std::string> extension_breaks(const Study& saved, const Study& given) {
  std::map<std::string, const StudyRun*> by_name;
  for (const auto& r : given.runs) by_name[r.name] = &r;
  std::vector<std::string> breaks;
  for (const auto& r : saved.runs) {
    const auto it = by_name.find(r.name);
    if (it == by_name.end())
      breaks.push_back(fmt::format("run '{}' of study.json is not in the study given (a grid value removed or "
                                   "a key that now varies renames the runs)", r.name));
    else if (run_config_to_json(it->second->config) != run_config_to_json(r.config))
      breaks.push_back(fmt::format("run '{}' has another config in the study given", r.name));
  }
  return breaks;
}

}  // namespace

nlohmann::json read_results(const std::string& path, const std::string& what) {
  const std::string where = fmt::format("{} '{}'", what, path);
  const std::string text = read_file(path, what);
  auto a = [](const nlohmann::json& j) {  // "a number", "an object", "null"
    const std::string type = j.type_name();
    return type == "null" ? type : (type == "object" || type == "array" ? "an " : "a ") + type;
  };
  auto bad = [&](const std::string& why) {
    return Error(fmt::format("{} '{}' is not a normlab results file (corrupt, truncated or edited?): {}", what, path,
                             why));
  };
  nlohmann::json results;
  try {
    results = parse_json(text, where);
  } catch (const Error& e) {  // "<where>: not valid JSON: ...", said once
    const std::string message = e.what();
    throw bad(message.rfind(where + ": ", 0) == 0 ? message.substr(where.size() + 2) : message);
  }
  if (!results.is_object()) throw bad(fmt::format("it holds {}, not an object", a(results)));
  if (!results.contains("runs") || !results["runs"].is_array()) throw bad("it has no \"runs\" array");
  static const char* const kStatuses[] = {"finished", "diverged", "interrupted", "failed", "not run"};
  for (size_t i = 0; i < results["runs"].size(); i++) {
    const nlohmann::json& run = results["runs"][i];
    if (!run.is_object()) throw bad(fmt::format("runs[{}] is {}, not an object", i, a(run)));
    for (const char* key : {"name", "status"})
      if (!run.contains(key) || !run[key].is_string())
        throw bad(fmt::format("runs[{}].{} is {}, not a string", i, key,
                              run.contains(key) ? a(run[key]) : std::string("missing")));
    const std::string status = run["status"];
    if (std::find(std::begin(kStatuses), std::end(kStatuses), status) == std::end(kStatuses))
      throw bad(fmt::format("runs[{}].status is \"{}\", not one of finished, diverged, interrupted, failed, not run",
                            i, status));
  }
  return results;
}

Resumed resume_study(const ResumeRequest& request) {
  namespace fs = std::filesystem;
  const fs::path dir(request.dir);
  std::error_code ec;
  if (!fs::exists(dir / "study.json", ec))
    throw Error(fmt::format("resume '{}': no study.json (not a directory from normlab compare)", request.dir));
  const nlohmann::json saved = parse_json_or_discarded(read_file((dir / "study.json").string(), "study.json"));
  if (saved.is_discarded() || !saved.is_object())
    throw Error(fmt::format("resume '{}': study.json is not JSON (corrupt?)", request.dir));
  if (saved.contains("study") && saved["study"].is_object() && saved["study"].value("kind", "") == "pretrained")
    throw Error("resume: the pretrained study trains nothing; run it again");
  Resumed out;
  if (fs::exists(dir / "overrides.json", ec)) {
    const auto j = parse_json_or_discarded(read_file((dir / "overrides.json").string(), "overrides.json"));
    if (j.is_discarded() || !j.contains("set") || !j["set"].is_array())
      throw Error(fmt::format("resume '{}': overrides.json is malformed", request.dir));
    for (const auto& x : j["set"]) {
      if (!x.is_string()) throw Error(fmt::format("resume '{}': overrides.json is malformed", request.dir));
      out.sets.push_back(x.get<std::string>());
    }
  }
  const std::string where = fmt::format("'{}'", (dir / "study.json").string());
  std::vector<std::string> diffs;
  bool extends = false;  // the given study adds runs to the saved one (extension_breaks)
  const std::vector<std::string> given_sets = request.sets.value_or(out.sets);
  if (request.given) {
    diffs = study_differences(saved, *request.given, /*grids=*/false);
    if (diffs.empty() && given_sets == out.sets && study_differences(saved, *request.given).size() > 0) {
      diffs = extension_breaks(study_from_json(saved, out.sets, where),
                               study_from_json(*request.given, given_sets, "the study given"));
      extends = diffs.empty();
    } else if (diffs.empty()) {
      diffs = study_differences(saved, *request.given);
    }
  }
  if (given_sets != out.sets)
    diffs.push_back(fmt::format("--set: study.json's run [{}], now [{}]", fmt::join(out.sets, " "),
                                fmt::join(given_sets, " ")));
  if (!diffs.empty())
    throw Error(fmt::format("resume '{}': the study differs from the one it holds: {}", request.dir,
                            fmt::join(diffs, "; ")));
  nlohmann::json document = saved;
  if (extends) document = *request.given;                      // the runs of study.json and new ones
  else if (request.given) copy_presentation(*request.given, document);  // its reproductions, title and description
  out.study = study_from_json(document, out.sets, where);
  if (extends) out.new_runs = out.study.runs.size() - study_from_json(saved, out.sets, where).runs.size();
  return out;
}

KeptRuns kept_runs(const Study& study, const std::string& dir) {
  namespace fs = std::filesystem;
  KeptRuns kept;
  const fs::path saved = fs::path(dir) / "results.json";
  std::error_code ec;
  nlohmann::json before;
  if (fs::exists(fs::symlink_status(saved, ec))) try {
      before = read_results(saved.string(), "the study's results");
    } catch (const Error& e) {
      throw Error(fmt::format("resume '{}': {}; nothing was changed (move it away to rebuild it: every finished run "
                              "then resumes from its last checkpoint)",
                              dir, e.what()));
    }
  if (before.is_object() && before.contains("elapsed_s") && before["elapsed_s"].is_number())
    kept.elapsed_s = std::max(0.0, before["elapsed_s"].get<double>());
  if (before.is_object() && before.contains("runs") && before["runs"].is_array())
    for (const auto& r : before["runs"])
      if (r.is_object() && r.contains("name") && r["name"].is_string() &&
          (r.value("status", "") == "finished" || r.value("status", "") == "diverged") &&
          (r.value("status", "") == "diverged" || (r.contains("summary") && r["summary"].is_object())))
        kept.runs[r["name"].get<std::string>()] = r;
  // a kept run must be the run the study now names: its recorded config, read as any config, is the one
  // the study gives it (a study.json replaced by another study's, with the same run names, is refused)
  for (const auto& r : study.runs) {
    const auto it = kept.runs.find(r.name);
    if (it == kept.runs.end() || !it->second.contains("config")) continue;
    std::string differs = "its recorded config cannot be read";
    try {
      nlohmann::json was = run_config_to_json(run_config_from_json(it->second["config"], "results.json"));
      nlohmann::json now = run_config_to_json(r.config);
      was["train"].erase("out_dir"), now["train"].erase("out_dir");  // where it ran, not what it ran
      const nlohmann::json patch = nlohmann::json::diff(was, now);
      differs = patch.empty() ? "" : patch[0].value("path", std::string("?")).substr(1);  // "/train/lr" -> "train.lr"
      std::replace(differs.begin(), differs.end(), '/', '.');
      if (!patch.empty()) differs += " differs";
    } catch (const Error&) {
    }
    if (!differs.empty())
      throw Error(fmt::format("resume '{}': results.json's run '{}' was made with another config than the study "
                              "gives it now ({}; its study.json or results.json is another study's); nothing was "
                              "changed",
                              dir, r.name, differs));
  }
  return kept;
}

}  // namespace normlab::study
