// tables.h: a study's results and a run's metrics as CSV tables (`normlab report DIR --csv`), for the
// tools that read tables (pandas, R, a spreadsheet) without JSON: RFC 4180 fields, numbers as the
// shortest text that reads back as the same double (the values of results.json and metrics.jsonl,
// not rounded), empty for none.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab::study {

// A study (results.json): runs.csv, one row per run (name, label, status, each grid key, the final
// numbers), and curves.csv, one row per logged point (run, split train | val, step, loss, lr,
// grad_norm). Written atomically into dir; returns the paths.
std::vector<std::string> write_study_tables(const nlohmann::json& results, const std::string& dir);
// A training run (metrics.jsonl): metrics.csv, one row per train or val record (type, step and every
// number those records carry). Returns its path.
std::string write_run_table(const std::string& run_dir);

}  // namespace normlab::study
