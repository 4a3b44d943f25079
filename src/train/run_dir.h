// run_dir.h: a training run's directory (train.out_dir): created, refused when it holds another run
// (unless --force or --resume), then, on rank 0, prepared and written: config.json (atomically, first),
// metrics.jsonl (a resumed run's cut back to its checkpoint's step and continued), the checkpoints.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/resume.h"

namespace normlab {

// metrics.jsonl, one JSON record a line, flushed as written. A new run's file that cannot be created,
// or whose first line cannot be written, is removed with the run's config.json, so a full disk leaves
// no half run that would refuse the next attempt; a resumed run's file is kept.
class MetricsFile {
 public:
  MetricsFile(const std::string& path, bool append);
  void write(const nlohmann::json& line);

 private:
  void discard();
  std::string path_;
  std::ofstream out_;
  bool append_;
  long lines_ = 0;
};

class RunDirectory {
 public:
  // Creates the directory and refuses one that holds a run (metrics.jsonl or checkpoint.safetensors)
  // or someone's config.json, unless overwrite or resumed. Every rank checks; nothing is written.
  RunDirectory(const std::string& out_dir, bool resumed, bool overwrite);
  // Rank 0, after every rank has checked: removes temporaries of runs killed here, cuts a resumed run's
  // metrics back to resumed_step (returning its last losses) or removes a replaced run's checkpoints,
  // writes config.json and opens metrics.jsonl. on_record sees every record written.
  KeptMetrics open(const nlohmann::json& run_config, std::optional<long> resumed_step,
                   std::function<void(const nlohmann::json&)> on_record);
  // A record into metrics.jsonl (nothing on a rank that did not open it).
  void write(const nlohmann::json& record);
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::optional<MetricsFile> metrics_;
  std::function<void(const nlohmann::json&)> on_record_;
};

}  // namespace normlab
