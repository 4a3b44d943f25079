// compare.h: `normlab compare`: runs a study (built-in by name, or a study TOML) into an output
// directory and writes its report; `normlab` with no arguments runs the default study.
// `normlab report DIR` redoes the written summary, summary.txt and report.html from DIR/results.json.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace normlab::cli {

struct CompareCommand {
  CLI::App* compare = nullptr;
  std::string study = "default", config, out;
  std::string resume;  // --resume DIR: finish the stopped study in DIR
  std::vector<std::string> sets;
  bool force = false, list = false;
  int jobs = 0;    // --jobs N: runs side by side (0: one per core)
  int worker = 0;  // --worker K (hidden): job K of a study started with --jobs, with --resume DIR
  CLI::App* report = nullptr;
  std::string report_dir;
  bool report_csv = false;  // report --csv: the results as tables (study/tables.h)
};

void add_compare_command(CLI::App& app, CompareCommand& cmd);
int run_compare(const CompareCommand& cmd);
int run_report(const CompareCommand& cmd);

}  // namespace normlab::cli
