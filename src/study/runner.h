// runner.h: runs a study: every run in turn (instruments at initialization, training, instruments
// after training; a translation run, an encoder-decoder on a parallel corpus, ends with its BLEU,
// and what does not apply to it is recorded under "skipped" with the reason), then the theory
// claims; live progress with the estimated time left per run and for the whole study; Ctrl-C stops
// cleanly (the current run is kept as interrupted, later runs are
// skipped) and the results and report of what finished are still written. The output directory
// holds study.json (the study as read), overrides.json (its --set overrides), runs/<run>/ (metrics.jsonl, config.json, checkpoint,
// instruments.json), results.json (everything the report shows), summary.txt and report.html.
#pragma once

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "study/study.h"

namespace normlab::study {

struct CompareOptions {
  std::string out_dir;   // created; refused if it already holds a study unless force
  bool force = false;
  // Finish a stopped study in out_dir: runs that finished (or diverged) in its results.json are kept,
  // a run with a checkpoint resumes from it (train --resume), the others run from the start.
  bool resume = false;
  std::vector<std::string> sets;  // the --set overrides, saved in overrides.json for --resume
  const std::atomic<bool>* stop = nullptr;  // set by the caller's SIGINT handler
  // Runs side by side in processes of this machine (jobs.h): how many (0: one per core OpenMP may
  // use, at most the runs to run), the command that runs a job (empty: one process, as from Python),
  // and, in a job started so, its number (the study is then run_worker's, out_dir holding the queue).
  int jobs = 0;
  std::string worker_exe;
  int worker = 0;
};

// Returns the process exit code: 0 when every run finished (diverged runs included: divergence is a
// result), 130 when interrupted.
int run_study(const Study& study, const CompareOptions& options);

// Writes the written summary into `results`, then results.json, summary.txt and report.html into
// dir (also used by `normlab report` to redo them from a results.json).
void write_outputs(nlohmann::json& results, const std::filesystem::path& dir);

}  // namespace normlab::study
