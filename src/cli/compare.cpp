// compare.cpp: `normlab compare`: study selection, the output directory, and Ctrl-C (interrupt.h).
#include "cli/compare.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <map>

#include "util/interrupt.h"
#include "dist/dist.h"
#include "study/summary.h"
#include "study/tables.h"
#include "study/pretrained.h"
#include "study/runner.h"
#include "study/study.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::cli {

namespace {

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return stamp;
}

// What a study document says without changing any run: its [[reproduce]] tables and its title and
// description. On --resume these may differ from study.json; the given ones are used.
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
std::vector<std::string> extension_breaks(const study::Study& saved, const study::Study& given) {
  std::map<std::string, const study::StudyRun*> by_name;
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

// compare --resume DIR: the study of DIR (study.json with the overrides of overrides.json), or the
// one given by --study / --config / --set, which must then be the same.
int resume_compare(const CompareCommand& cmd) {
  namespace fs = std::filesystem;
  const fs::path dir(cmd.resume);
  if (cmd.force) throw Error("--resume continues a study and --force replaces it: give one of them");
  if (!cmd.out.empty() && fs::path(cmd.out) != dir) throw Error("--resume DIR is the output directory: leave out --out");
  std::error_code ec;
  if (!fs::exists(dir / "study.json", ec))
    throw Error(fmt::format("--resume '{}': no study.json (not a directory from normlab compare)", cmd.resume));
  const nlohmann::json saved = parse_json_or_discarded(read_file((dir / "study.json").string(), "study.json"));
  if (saved.is_discarded() || !saved.is_object())
    throw Error(fmt::format("--resume '{}': study.json is not JSON (corrupt?)", cmd.resume));
  if (saved.contains("study") && saved["study"].is_object() && saved["study"].value("kind", "") == "pretrained")
    throw Error("--resume: the pretrained study trains nothing; run it again");
  std::vector<std::string> saved_sets;
  if (fs::exists(dir / "overrides.json", ec)) {
    const auto j = parse_json_or_discarded(read_file((dir / "overrides.json").string(), "overrides.json"));
    if (j.is_discarded() || !j.contains("set") || !j["set"].is_array())
      throw Error(fmt::format("--resume '{}': overrides.json is malformed", cmd.resume));
    for (const auto& x : j["set"]) saved_sets.push_back(x.get<std::string>());
  }
  // a study given as well (--study, --config, --set) must be the one DIR holds
  const bool doc_given = !cmd.config.empty() || cmd.compare->count("--study") > 0;
  if (!cmd.config.empty() && cmd.compare->count("--study")) throw Error("give either --study or --config, not both");
  const std::string where = fmt::format("'{}'", (dir / "study.json").string());
  std::vector<std::string> diffs;
  nlohmann::json given;
  bool extends = false;  // the given study adds runs to the saved one (extension_breaks)
  if (doc_given) {
    given = (cmd.config.empty() ? study::builtin_study(cmd.study, cmd.sets) : study::read_study_file(cmd.config, cmd.sets))
                .document;
    diffs = study_differences(saved, given, /*grids=*/false);
    if (diffs.empty() && cmd.sets == saved_sets && study_differences(saved, given).size() > 0) {
      diffs = extension_breaks(study::study_from_json(saved, saved_sets, where),
                               study::study_from_json(given, cmd.sets, "the study given"));
      extends = diffs.empty();
    } else if (diffs.empty()) {
      diffs = study_differences(saved, given);
    }
  }
  if ((doc_given || !cmd.sets.empty()) && cmd.sets != saved_sets)
    diffs.push_back(fmt::format("--set: study.json's run [{}], now [{}]", fmt::join(saved_sets, " "),
                                fmt::join(cmd.sets, " ")));
  if (!diffs.empty())
    throw Error(fmt::format("--resume '{}': the study differs from the one it holds: {}", cmd.resume,
                            fmt::join(diffs, "; ")));
  nlohmann::json document = saved;
  if (extends) document = given;                      // the runs of study.json and new ones
  else if (doc_given) copy_presentation(given, document);  // its reproductions, title and description
  const study::Study s = study::study_from_json(document, saved_sets, where);
  if (extends && dist::world().root() && cmd.worker == 0)
    fmt::print("normlab compare: the study given extends the one in '{}': {} runs, {} of them new\n",
               cmd.resume, s.runs.size(), s.runs.size() - study::study_from_json(saved, saved_sets, where).runs.size());
  study::CompareOptions options;
  options.out_dir = cmd.resume;
  options.resume = true;
  options.sets = saved_sets;
  options.jobs = cmd.jobs;
  options.worker_exe = "/proc/self/exe";  // this normlab, even if its file was replaced meanwhile
  options.worker = cmd.worker;
  const StopOnInterrupt interrupt;
  options.stop = interrupt.flag();
  return study::run_study(s, options);
}

}  // namespace

void add_compare_command(CLI::App& app, CompareCommand& cmd) {
  cmd.compare = app.add_subcommand("compare", "run a study of normalization placement and write its HTML report");
  cmd.compare->add_option("--study", cmd.study,
                          fmt::format("a built-in study ({}, pretrained)", fmt::join(study::builtin_study_names(), ", ")));
  cmd.compare->add_option("--config,-c", cmd.config, "a study TOML ([study], [base.*], [[grid]]; see studies/)");
  cmd.compare->add_option("--set", cmd.sets, "override for every run, e.g. --set train.steps=100 (not with --study pretrained, which trains nothing)");
  cmd.compare->add_option("--out,-o", cmd.out, "output directory (default runs/compare-<study>-<date>-<time>)");
  cmd.compare->add_flag("--force", cmd.force, "replace a study already in --out");
  cmd.compare->add_option("--resume", cmd.resume,
                          "finish the stopped study in DIR: finished runs kept, the interrupted one resumed, the rest run "
                          "(with --study/--config: the same study, or one whose grid adds runs)");
  cmd.compare->add_option("--jobs,-j", cmd.jobs,
                          "runs side by side: N processes sharing the cores (default: one per core, at most the runs "
                          "left; 1 under mpirun). A run's last digits depend on its thread count")
      ->check(CLI::Range(1, 256));
  cmd.compare->add_option("--worker", cmd.worker, "job K of a study started with --jobs (started by it, with --resume)")
      ->check(CLI::Range(1, 256))
      ->group("");  // hidden: not for users
  cmd.compare->add_flag("--list", cmd.list, "list the built-in studies and exit");
  cmd.report = app.add_subcommand("report", "redo DIR's summary and report.html from DIR/results.json");
  cmd.report->add_option("dir", cmd.report_dir, "a study directory from normlab compare")->required();
  cmd.report->add_flag("--csv", cmd.report_csv,
                       "also write the results as tables: runs.csv (a row per run) and curves.csv (a row per logged "
                       "point); given a training run's directory (metrics.jsonl), its metrics.csv");
}

int run_report(const CompareCommand& cmd) {
  const std::filesystem::path dir(cmd.report_dir), path = dir / "results.json";
  std::error_code ec;
  if (cmd.report_csv && !std::filesystem::exists(path, ec) && std::filesystem::exists(dir / "metrics.jsonl", ec)) {
    fmt::print("table: {}\n", study::write_run_table(cmd.report_dir));  // a training run's directory
    return 0;
  }
  if (!std::filesystem::exists(path, ec))
    throw Error(fmt::format("'{}': no results.json (is it a directory from normlab compare?)", cmd.report_dir));
  nlohmann::json results;
  try {
    results = parse_json(read_file(path.string(), "results file"), path.string());
  } catch (const Error& e) {
    throw Error(fmt::format("not a normlab results file (corrupt or truncated?): {}", e.what()));
  }
  if (!results.is_object() || !results.contains("study") || !results.contains("runs") || !results["runs"].is_array())
    throw Error(fmt::format("'{}': not a normlab results file (corrupt or truncated?)", path.string()));
  try {
    study::write_outputs(results, dir);  // writes nothing unless every output could be made
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a key missing or of another type (json_assert.h, nlohmann)
    throw Error(fmt::format("'{}': not a normlab results file, or from another version ({}); nothing was changed",
                            path.string(), e.what()));
  }
  fmt::print("{}\nreport: {}\n", study::summary_table(results), (dir / "report.html").string());
  if (cmd.report_csv)
    for (const std::string& table : study::write_study_tables(results, dir.string())) fmt::print("table: {}\n", table);
  return 0;
}

int run_compare(const CompareCommand& cmd) {
  if (cmd.list) {
    for (const auto& name : study::builtin_study_names()) {
      const auto s = study::builtin_study(name, {});
      fmt::print("{:<16} {} runs  {}\n", name, s.runs.size(), s.title);
    }
    fmt::print("{:<16} {} runs  {}\n", "pretrained", 2,
               "A real pretrained Post-LN network (all-MiniLM-L6-v2, fetched once) beside a fresh model of its config");
    return 0;
  }
  if (cmd.worker > 0 && cmd.resume.empty()) throw Error("--worker is started by `normlab compare --jobs N`, not by hand");
  if (!cmd.resume.empty()) return resume_compare(cmd);
  if (!cmd.config.empty() && cmd.compare->count("--study"))
    throw Error("give either --study or --config, not both");
  if (cmd.config.empty() && cmd.study == "pretrained") {  // no training grid: its own runner
    if (!cmd.sets.empty()) throw Error("--study pretrained takes no --set (it trains nothing)");
    study::CompareOptions options;
    options.out_dir = cmd.out.empty() ? fmt::format("runs/compare-pretrained-{}", timestamp()) : cmd.out;
    options.force = cmd.force;
    const StopOnInterrupt interrupt;  // the first Ctrl-C stops after the current step
    options.stop = interrupt.flag();
    return study::run_pretrained_study(options);
  }
  const study::Study s = cmd.config.empty() ? study::builtin_study(cmd.study, cmd.sets)
                                            : study::read_study_file(cmd.config, cmd.sets);
  study::CompareOptions options;
  options.out_dir = cmd.out.empty() ? fmt::format("runs/compare-{}-{}", s.name, timestamp()) : cmd.out;
  options.force = cmd.force;
  options.sets = cmd.sets;
  options.jobs = cmd.jobs;
  options.worker_exe = "/proc/self/exe";
  const StopOnInterrupt interrupt;  // the first Ctrl-C stops after the current step
  options.stop = interrupt.flag();
  return study::run_study(s, options);
}

}  // namespace normlab::cli
