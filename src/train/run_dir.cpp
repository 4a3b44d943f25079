// run_dir.cpp: a training run's directory and its metrics file (train/run_dir.h).
#include "train/run_dir.h"

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <limits>

#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab {

namespace fs = std::filesystem;

MetricsFile::MetricsFile(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc), append_(append) {
  if (!out_) {
    const int err = errno;
    discard();
    throw Error(fmt::format("cannot write metrics file '{}': {}", path, std::strerror(err)));
  }
}

void MetricsFile::write(const nlohmann::json& line) {
  errno = 0;
  out_ << dump_json(line) << '\n';
  out_.flush();
  if (!out_) {
    const int err = errno;
    if (lines_ == 0) discard();  // (a resumed run's file is kept)
    throw Error(fmt::format("write to '{}' failed: {}", path_, err ? std::strerror(err) : "disk full?"));
  }
  lines_++;
}

void MetricsFile::discard() {
  if (append_) return;
  out_.close();
  std::error_code ec;
  fs::remove(path_, ec);
  fs::remove(fs::path(path_).parent_path() / "config.json", ec);
}

RunDirectory::RunDirectory(const std::string& out_dir, bool resumed, bool overwrite) : dir_(out_dir) {
  const fs::path metrics_path = dir_ / "metrics.jsonl", ckpt_path = dir_ / "checkpoint.safetensors";
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw Error(fmt::format("train.out_dir '{}': cannot create directory ({})", out_dir,
                            ec ? ec.message() : "a file is in the way"));
  if (!resumed && !overwrite && (fs::exists(metrics_path) || fs::exists(ckpt_path)))
    throw Error(fmt::format("train.out_dir '{}' already holds a run; choose another out_dir or pass "
                            "--force to replace it (or --resume it)",
                            out_dir));
  if (!overwrite && !resumed && fs::exists(dir_ / "config.json"))  // someone's file, not a run of ours
    throw Error(fmt::format("train.out_dir '{}' holds a config.json but no run (no metrics.jsonl or checkpoint); "
                            "normlab would replace it: choose another out_dir or pass --force",
                            out_dir));
}

KeptMetrics RunDirectory::open(const nlohmann::json& run_config, std::optional<long> resumed_step,
                               std::function<void(const nlohmann::json&)> on_record) {
  on_record_ = std::move(on_record);
  const fs::path metrics_path = dir_ / "metrics.jsonl";
  KeptMetrics kept{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  remove_stale_temporaries(dir_);  // of runs killed here before
  if (resumed_step) {
    kept = truncate_metrics(metrics_path, *resumed_step);
  } else {  // a run replaced (--force): its checkpoints must not be mistaken for this run's
    remove_step_checkpoints(dir_);
    std::error_code ec;
    fs::remove(dir_ / "checkpoint.safetensors", ec);
  }
  // config.json first, atomically (a full disk leaves nothing), then metrics.jsonl
  write_file_atomic((dir_ / "config.json").string(), dump_json(run_config, 2) + "\n");
  metrics_.emplace(metrics_path.string(), resumed_step.has_value());
  return kept;
}

void RunDirectory::write(const nlohmann::json& record) {
  if (!metrics_) return;
  metrics_->write(record);
  if (on_record_) on_record_(record);
}

}  // namespace normlab
