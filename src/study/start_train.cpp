// start_train.cpp: training a study's missing starts again (start.h), one after another or side by side
// in the study's jobs, apart from start.cpp so that the study readers (and the fuzz harnesses that build
// them) need no trainer.
#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <omp.h>
#include <optional>

#include "study/jobs.h"
#include "study/start.h"
#include "train/resume.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/clock.h"
#include "util/error.h"

namespace normlab::study {

namespace {

using json = nlohmann::json;

std::string loss_text(const json& summary, const char* key) {
  return summary.is_object() && summary.contains(key) && summary[key].is_number()
             ? fmt::format("{:.4f}", summary[key].get<double>())
             : std::string("none");
}

// Trains missing[k] again; false when stopped.
bool train_start(const std::vector<MissingStart>& missing, size_t k, const std::atomic<bool>* stop) {
  const MissingStart& start = missing[k];
  RunConfig cfg = run_config_from_json(start.record.at("config"), fmt::format("the record of '{}'", start.dir));
  cfg.train.out_dir = start.dir;
  TrainOptions topts;
  topts.resume = newest_checkpoint(start.dir).has_value();  // a stop part-way: continued
  topts.overwrite = !topts.resume;                          // (a directory without a checkpoint holds nothing)
  topts.quiet = true;
  topts.stop = stop;
  const std::string tag = fmt::format("[start {}/{}]", k + 1, missing.size());
  const long every = std::max(1L, cfg.train.steps / 10);
  topts.on_step = [&](const StepInfo& i) {
    if (i.step % every == 0 || i.step == i.steps) {
      fmt::print("        {} step {}/{}, training loss {:.4f}, {}\n", tag, i.step, i.steps, i.loss,
                 format_duration(i.elapsed_s));
      std::fflush(stdout);
    }
  };
  fmt::print("{} {}: its directory holds no finished training (run directories stay on the machine that ran them); "
             "{} from the config its study recorded ({} steps)\n",
             tag, start.dir, topts.resume ? "continuing its training" : "training it again", cfg.train.steps);
  std::fflush(stdout);
  const TrainResult r = train(cfg, topts);
  if (r.interrupted) {
    fmt::print("        {} stopped at step {}: the next --resume continues it from there\n", tag, r.steps_done);
    return false;
  }
  if (r.diverged)
    throw Error(fmt::format("start '{}' diverged when trained again at step {} ({}), though its study recorded it "
                            "as finished; the runs that start from it cannot run",
                            start.dir, r.diverged_step, r.diverged_tensor));
  const json now = last_run_summary(start.dir);
  const json was = start.record.value("summary", json::object());
  fmt::print("        {} trained: validation loss {} (its study recorded {}), test loss {} (recorded {})\n", tag,
             loss_text(now, "val_loss"), loss_text(was, "val_loss"), loss_text(now, "test_loss"),
             loss_text(was, "test_loss"));
  if (loss_text(now, "val_loss") != loss_text(was, "val_loss"))
    fmt::print("        not the recorded model to 4 digits (another CPU's kernels or thread count); the runs "
               "start from the model trained here\n");
  std::fflush(stdout);
  return true;
}

std::filesystem::path start_queue(const std::filesystem::path& dir) { return dir / ".starts"; }

// Starts from the queue in `queue_dir` until it is empty or stopped; false when stopped.
bool take_starts(const std::vector<MissingStart>& missing, const std::filesystem::path& queue_dir, int job,
                 const std::atomic<bool>* stop) {
  RunQueue queue(queue_dir);
  while (!(stop && stop->load())) {
    const std::optional<size_t> k = queue.take(job);
    if (!k) return true;
    if (*k >= missing.size()) throw Error(fmt::format("the queue of starts names start {} of {}", *k, missing.size()));
    if (!train_start(missing, *k, stop)) return false;
    queue.done(*k);
  }
  return false;
}

}  // namespace

bool train_missing_starts(const std::vector<MissingStart>& starts, const std::atomic<bool>* stop) {
  for (size_t k = 0; k < starts.size(); k++)
    if (!train_start(starts, k, stop)) return false;
  return true;
}

bool start_queue_in(const std::filesystem::path& dir) { return RunQueue::exists(start_queue(dir)); }

bool train_starts_side_by_side(const std::vector<MissingStart>& missing, const std::vector<size_t>& needed,
                               const std::filesystem::path& dir, int jobs, int threads, const std::string& exe,
                               const std::atomic<bool>* stop) {
  const std::filesystem::path queue_dir = start_queue(dir);
  std::filesystem::create_directories(queue_dir);
  RunQueue::create(queue_dir, needed);
  bool finished = false;
  std::vector<std::string> ends;
  {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    Workers workers(exe, dir, jobs - 1, threads);
    try {
      finished = take_starts(missing, queue_dir, 0, stop);
    } catch (...) {
      RunQueue(queue_dir).stop();
      omp_set_num_threads(before);
      throw;  // (the workers are ended by their destructor)
    }
    if (!finished) RunQueue(queue_dir).stop();  // the other jobs too (a kill -INT reaches job 0 alone)
    ends = workers.wait();
    omp_set_num_threads(before);
  }
  RunQueue queue(queue_dir);
  const std::vector<size_t> done = queue.done_runs();
  RunQueue::remove(queue_dir);
  std::error_code ec;
  std::filesystem::remove(queue_dir, ec);
  for (size_t job = 0; job < ends.size(); job++)
    if (!ends[job].empty())
      throw Error(fmt::format("job {} of the study could not train a start ({}; its message above)", job + 1, ends[job]));
  for (size_t k : needed)
    if (std::find(done.begin(), done.end(), k) == done.end()) return false;  // stopped part-way
  return true;
}

int train_queued_starts(const std::vector<MissingStart>& missing, const std::filesystem::path& dir, int job,
                        const std::atomic<bool>* interrupt) {
  const WorkerStop stop(start_queue(dir), interrupt);
  return take_starts(missing, start_queue(dir), job, stop.flag()) ? 0 : 130;
}

}  // namespace normlab::study
