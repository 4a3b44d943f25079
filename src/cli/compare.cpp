// compare.cpp: `normlab compare`: study selection, the output directory, and Ctrl-C (interrupt.h).
#include "cli/compare.h"

#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/interrupt.h"
#include "distributed/comm.h"
#include "study/summary.h"
#include "study/tables.h"
#include "study/pretrained.h"
#include "study/resume.h"
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

// compare --resume DIR: the study of DIR (study.json with the overrides of overrides.json), or the
// one given by --study / --config / --set, which must then be the same or extend it (study/resume.h).
int resume_compare(const CompareCommand& cmd) {
  if (cmd.force) throw Error("--resume continues a study and --force replaces it: give one of them");
  if (!cmd.out.empty() && std::filesystem::path(cmd.out) != std::filesystem::path(cmd.resume))
    throw Error("--resume DIR is the output directory: leave out --out");
  if (!cmd.config.empty() && cmd.compare->count("--study")) throw Error("give either --study or --config, not both");
  study::ResumeRequest request;
  request.dir = cmd.resume;
  const bool doc_given = !cmd.config.empty() || cmd.compare->count("--study") > 0;
  if (doc_given)
    request.given = (cmd.config.empty() ? study::builtin_study(cmd.study, cmd.sets)
                                        : study::read_study_file(cmd.config, cmd.sets)).document;
  if (doc_given || !cmd.sets.empty()) request.sets = cmd.sets;
  const study::Resumed resumed = study::resume_study(request);
  if (resumed.new_runs > 0 && dist::world().root() && cmd.worker == 0)
    fmt::print("normlab compare: the study given extends the one in '{}': {} runs, {} of them new\n", cmd.resume,
               resumed.study.runs.size(), resumed.new_runs);
  study::CompareOptions options;
  options.out_dir = cmd.resume;
  options.resume = true;
  options.sets = resumed.sets;
  options.jobs = cmd.jobs;
  options.worker_exe = "/proc/self/exe";  // this normlab, even if its file was replaced meanwhile
  options.worker = cmd.worker;
  const StopOnInterrupt interrupt(Signals::InterruptAndTerminate);
  options.stop = interrupt.flag();
  return study::run_study(resumed.study, options);
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
  nlohmann::json results = study::read_results(path.string(), "the study's results");
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
    const StopOnInterrupt interrupt(Signals::InterruptAndTerminate);  // the first Ctrl-C stops after the current step
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
  const StopOnInterrupt interrupt(Signals::InterruptAndTerminate);  // the first Ctrl-C stops after the current step
  options.stop = interrupt.flag();
  return study::run_study(s, options);
}

}  // namespace normlab::cli
