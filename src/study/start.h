// start.h: runs of a study that start from another study's finished runs (pretrain, then fine-tune).
// A study names the directory of a finished study and filters over its runs:
//
//   [study]
//   start_from = "runs/practical"   # a study directory of `normlab compare`, relative to where it runs
//   [study.starts]
//   post = "model.placement=post train.lr=0.004 train.warmup_steps=1000 model.seed={model.seed}"
//
// and a run with train.init_from = "start:post" starts from the parameters of the one finished run of
// start_from that the filter matches (section.key=value terms, all must match, numbers as numbers:
// reproduce.h's filters), each {section.key} first replaced by this run's own value of that key, so
// that a fine-tuning run of seed 2 starts from the pretraining run of seed 2. Its directory's
// checkpoint.safetensors is the start (the pretraining run's last step), its config the model's; a
// [base.model] given must agree with it (train.init_from's rule). Other runs of the study, e.g. the
// same fine-tuning from a fresh model, leave train.init_from empty.
//
// The starts are checked when the study is read (each "start:" names a start, each filter parses
// once filled in for each run) and found when it runs (run_study): a filter that matches no finished
// run or more than one is an Error before any run starts. A matched run whose directory holds no
// finished training (run directories are not committed: a study resumed on another machine has none)
// is trained again from the config start_from's results.json records for it, before the runs that
// start from it (train_missing_starts): a stop part-way leaves it to be continued the next time.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "study/study.h"

namespace normlab::study {

inline constexpr const char* kStartPrefix = "start:";

// Reads and erases [study] starts (a table of name = "filter" strings); Error naming `where`.
std::map<std::string, std::string> read_starts(nlohmann::json& settings, const std::string& where);

// Every run's "start:<name>" names a start of the study and start_from is set, every start is used,
// and every filter parses once filled in for each run that uses it.
void check_starts(const Study& study, const std::string& where);

// A start whose run directory holds no finished training (no checkpoint.safetensors, or no summary of
// an uninterrupted run in its metrics.jsonl).
struct MissingStart {
  std::string dir;        // start_from/runs/<name>
  nlohmann::json record;  // its record in start_from's results.json (config, summary)
};

struct ResolvedStarts {
  Study study;                       // each "start:<name>" train.init_from replaced by its run directory
  std::vector<MissingStart> missing; // the starts to train again (each directory once)
  int threads = 0;                   // the threads each run of start_from had (its "jobs"), 0: not recorded
};

// The study with each "start:<name>" train.init_from replaced by the run directory it picks in
// study.start_from, and the picked runs whose directories hold no finished training; Error as above.
ResolvedStarts resolve_starts(const Study& study);

// The last summary record of a run directory's metrics.jsonl (null if none: a run killed before its
// end, or a directory without training).
nlohmann::json last_run_summary(const std::string& dir);

// (study/start_train.cpp) Trains each start again in its directory from its recorded config (continuing one a stop left
// part-way), one after the other, saying how its losses compare with the recorded ones. Returns false
// when `stop` stopped it (what was trained is kept for the next time).
bool train_missing_starts(const std::vector<MissingStart>& starts, const std::atomic<bool>* stop);

// The starts `needed` (indices into `missing`, resolve_starts's) trained again side by side: this process
// and jobs - 1 workers (`normlab compare --resume DIR --worker K`, jobs.h, each with `threads` OpenMP
// threads) take them from a queue in DIR/.starts. False when stopped (each continues from its checkpoint
// on the next --resume); Error when one could not be trained (its message printed by the job that ran it).
bool train_starts_side_by_side(const std::vector<MissingStart>& missing, const std::vector<size_t>& needed,
                               const std::filesystem::path& dir, int jobs, int threads, const std::string& exe,
                               const std::atomic<bool>* stop);
// A worker (`compare --worker K`) started by it: DIR/.starts holds the queue.
bool start_queue_in(const std::filesystem::path& dir);
// The worker's part: starts from the queue until it is empty or stopped; the exit code (0, or 130
// stopped; a start that fails throws).
int train_queued_starts(const std::vector<MissingStart>& missing, const std::filesystem::path& dir, int job,
                        const std::atomic<bool>* stop);

}  // namespace normlab::study
