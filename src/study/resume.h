// resume.h: the study a stopped `compare` directory holds (its study.json with the --set overrides of
// overrides.json), checked against a study given again, for `normlab compare --resume DIR` and the
// Python module's compare(resume=DIR) alike. A study given again must be the same one, or one whose grid
// only adds runs (every run the directory holds still in it under its name with its config); its
// reproductions, title and description may differ and are taken from it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "study/study.h"

namespace normlab::study {

struct ResumeRequest {
  std::string dir;                        // the directory a stopped compare wrote
  std::optional<nlohmann::json> given;    // the study document given again (a name's or a file's), if any
  std::optional<std::vector<std::string>> sets;  // the --set overrides given again, if any
};

struct Resumed {
  Study study;                     // what to run: the saved runs (and, extending, the new ones)
  std::vector<std::string> sets;   // overrides.json's --set, which every run keeps
  size_t new_runs = 0;             // > 0: the study given extends the saved one by that many runs
};

// A study's results.json, read and checked before anything trusts it: a regular file, valid JSON, an
// object with a "runs" array whose every run is an object with a string name and a status (finished,
// diverged, interrupted, failed or not run); a finished record without a summary object is left to the
// caller (resume runs it again). Throws Error naming the file and, for a bad
// run, where ("runs[3].status is a number, not a string"); `what` names the file's role in messages
// ("the study's results", "study.start_from's results").
nlohmann::json read_results(const std::string& path, const std::string& what);

// What a stopped study directory keeps: its runs that ended (finished with a summary, or diverged) by
// name, and the time it took. A results.json that cannot be read is refused, not replaced (moved away,
// every finished run resumes from its last checkpoint and finishes at once); a kept run whose recorded
// config is not the one `study` gives it now (another study's results.json) is refused, naming the key.
// No results.json: nothing kept.
struct KeptRuns {
  std::map<std::string, nlohmann::json> runs;
  double elapsed_s = 0;
};
KeptRuns kept_runs(const Study& study, const std::string& dir);

// Throws Error naming the problem: no or corrupt study.json or overrides.json, the pretrained study,
// a study given that differs from the saved one other than by added runs (each difference named).
Resumed resume_study(const ResumeRequest& request);

}  // namespace normlab::study
