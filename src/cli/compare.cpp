// compare.cpp: `normlab compare`: study selection, the output directory, and Ctrl-C (interrupt.h).
#include "cli/compare.h"

#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>

#include "cli/interrupt.h"
#include "study/summary.h"
#include "study/pretrained.h"
#include "study/runner.h"
#include "study/study.h"
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

}  // namespace

void add_compare_command(CLI::App& app, CompareCommand& cmd) {
  cmd.compare = app.add_subcommand("compare", "run a study of normalization placement and write its HTML report");
  cmd.compare->add_option("--study", cmd.study,
                          fmt::format("a built-in study ({}, pretrained)", fmt::join(study::builtin_study_names(), ", ")));
  cmd.compare->add_option("--config,-c", cmd.config, "a study TOML ([study], [base.*], [[grid]]; see studies/)");
  cmd.compare->add_option("--set", cmd.sets, "override for every run, e.g. --set train.steps=100 (not with --study pretrained, which trains nothing)");
  cmd.compare->add_option("--out,-o", cmd.out, "output directory (default runs/compare-<study>-<date>-<time>)");
  cmd.compare->add_flag("--force", cmd.force, "replace a study already in --out");
  cmd.compare->add_flag("--list", cmd.list, "list the built-in studies and exit");
  cmd.report = app.add_subcommand("report", "redo DIR's summary and report.html from DIR/results.json");
  cmd.report->add_option("dir", cmd.report_dir, "a study directory from normlab compare")->required();
}

int run_report(const CompareCommand& cmd) {
  const std::filesystem::path dir(cmd.report_dir), path = dir / "results.json";
  std::error_code ec;
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
  const StopOnInterrupt interrupt;  // the first Ctrl-C stops after the current step
  options.stop = interrupt.flag();
  return study::run_study(s, options);
}

}  // namespace normlab::cli
