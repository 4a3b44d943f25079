// study.h: a study is a set of training runs that differ in chosen config keys: a base run config
// ([base.model], [base.train], [base.data]) and one or more grids ([[grid]] tables, each a
// Cartesian product over its keys; the study is the union of the grids), plus [study] settings.
// Built-in studies live in studies/<name>.toml. Everything is read strictly: an unknown key, an
// empty grid or an invalid run config is an Error naming the study and the run.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/run_config.h"

namespace normlab::study {

struct StudyRun {
  std::string name;     // directory name, e.g. "03-placement=post_warmup_steps=0"
  std::string label;    // the keys that vary across the study, e.g. "placement=post warmup_steps=0"
  nlohmann::json grid;  // this run's grid values, by dotted key
  RunConfig config;     // fully resolved (train.out_dir is set by the runner)
};

struct Study {
  std::string name, title, description;
  double loss_target = 0;      // steps-to-target threshold (nats); NaN: unigram entropy - 0.5
  bool instruments = true;     // instruments at initialization and after training, per run
  bool theory = true;          // the `normlab theory` claims, once per study
  int theory_seeds = 5;        // ... over this many fresh models per claim (normlab theory --seeds)
  int theory_trained_seeds = 3;  // and this many trained ones (--trained-seeds)
  long theory_steps = 3000;    // trained to a plateau, at most this many steps (analysis::kTheoryTrainedSteps; 0: fresh only)
  int probe_seq_len = 16;      // T of the instruments' input sequences
  std::vector<std::string> varying;  // dotted keys whose values differ between runs
  // Runs that start from another study's finished runs (start.h): its directory, and the named
  // filters over its runs that train.init_from = "start:<name>" picks one by
  std::string start_from;
  std::map<std::string, std::string> starts;
  std::vector<StudyRun> runs;
  nlohmann::json document;     // the study as read (with --set overrides), saved with the results
};

// `doc` is the study as JSON (from TOML); `sets` are `section.key=value` overrides applied to every
// run (an override of a grid key is an Error); `where` names the study in messages.
Study study_from_json(const nlohmann::json& doc, const std::vector<std::string>& sets, const std::string& where);
Study read_study_file(const std::string& path, const std::vector<std::string>& sets);
Study builtin_study(const std::string& name, const std::vector<std::string>& sets);
std::vector<std::string> builtin_study_names();
std::string builtin_study_path(const std::string& name);

}  // namespace normlab::study
