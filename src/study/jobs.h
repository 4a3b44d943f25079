// jobs.h: a study's runs spread over several processes on this machine (`normlab compare --jobs N`).
// The command starts N - 1 workers (itself again: `normlab compare --resume DIR --worker K`), each
// with its share of the cores, and works as job 0 itself. Every job takes its next run from one queue
// file in the study directory (DIR/.jobs-queue.json, the runs longest first, read and changed under
// an exclusive lock), so a job that finishes early takes more runs; each worker writes the records of
// its finished runs to DIR/.jobs-<K>.json after every run, which job 0 reads once the workers ended.
// Several small models train faster side by side, one thread each, than one after another on all
// cores (a model of width 64 keeps two threads three quarters busy).
#pragma once

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace normlab::study {

class RunQueue {
 public:
  // Creates the queue in `dir` holding `order` (run indices in the order to take them), removing
  // any job's records left there.
  static void create(const std::filesystem::path& dir, const std::vector<size_t>& order);
  // Opens the queue of `dir`; Error when it has none (a --worker without a study that started it).
  explicit RunQueue(const std::filesystem::path& dir);
  RunQueue(const RunQueue&) = delete;
  RunQueue& operator=(const RunQueue&) = delete;
  ~RunQueue();

  // The next run for `job` (marked as its own), or nullopt when every run was taken.
  std::optional<size_t> take(int job);
  // Marks run `index` done (for the others' progress).
  void done(size_t index);
  // The runs done so far, by any job.
  std::vector<size_t> done_runs();
  // The job that took each run taken so far (run index -> job).
  std::vector<std::pair<size_t, int>> taken();
  // Tells every job to stop (job 0 was interrupted): take() gives nothing more, stopping() is true.
  void stop();
  bool stopping();
  // Removes the queue file.
  static void remove(const std::filesystem::path& dir);
  // Whether `dir` holds a queue.
  static bool exists(const std::filesystem::path& dir);

 private:
  nlohmann::json read_locked();
  void write_locked(const nlohmann::json& state);
  template <class F> auto locked(F&& f);
  std::string path_;
  int fd_ = -1;
};

// The worker processes of one study; ended (SIGTERM) and reaped on destruction unless waited for.
class Workers {
 public:
  // Starts jobs 1..count of `exe` (the normlab command) on the study in `dir`, each with
  // `threads` OpenMP threads (OMP_NUM_THREADS).
  Workers(const std::string& exe, const std::filesystem::path& dir, int count, int threads);
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  ~Workers();
  // Waits for every worker; per job 1..count, "" when it exited cleanly (0, or 130 after Ctrl-C),
  // else what ended it ("exit code 1", "signal 9").
  std::vector<std::string> wait();

 private:
  void end_all();  // SIGTERM to every job started, then reaped
  std::vector<pid_t> pids_;
  bool waited_ = false;
};

// A worker's stop flag: set within a fraction of a second once its own Ctrl-C flag (`interrupt`) is
// set, the queue says stop (job 0 was interrupted alone, e.g. by `kill -INT`), or job 0 is gone.
class WorkerStop {
 public:
  WorkerStop(const std::filesystem::path& dir, const std::atomic<bool>* interrupt);
  WorkerStop(const WorkerStop&) = delete;
  WorkerStop& operator=(const WorkerStop&) = delete;
  ~WorkerStop();
  const std::atomic<bool>* flag() const { return &stop_; }

 private:
  std::atomic<bool> stop_{false}, done_{false};
  std::thread watcher_;
};

// A worker's records ({"runs": {index: run}, "interrupted": bool}), written after every run.
void write_job_part(const std::filesystem::path& dir, int job, const nlohmann::json& part);
// Job `job`'s records (an empty object when it wrote none), then its file removed. A file that
// does not parse (damaged from outside: parts are written atomically) is not lost: it is kept in
// `dir` under a name of its own (jobs-<job>-corrupt.json, never overwriting one) and `problem` says
// so; the caller records the runs that job took as failed and keeps every other record.
struct JobPart {
  nlohmann::json records = nlohmann::json::object();
  std::string problem;  // empty: read (or none written)
};
JobPart take_job_part(const std::filesystem::path& dir, int job);
// Job `job`'s records so far, read and left in place (an empty object when it wrote none or its file
// does not parse): what a snapshot of the running study shows.
nlohmann::json peek_job_part(const std::filesystem::path& dir, int job);

}  // namespace normlab::study
