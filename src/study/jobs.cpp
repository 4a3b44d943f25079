// jobs.cpp: the run queue shared by a study's processes, the worker processes, and their records
// (see jobs.h).
#include "study/jobs.h"

#include <cerrno>
#include <chrono>
#include <memory>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

extern char** environ;

namespace normlab::study {

namespace fs = std::filesystem;

namespace {

const char* kQueueFile = ".jobs-queue.json";

fs::path part_path(const fs::path& dir, int job) { return dir / fmt::format(".jobs-{}.json", job); }

}  // namespace

void RunQueue::create(const fs::path& dir, const std::vector<size_t>& order) {
  // records left by the jobs of a study that was killed before it could read them
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".jobs-") && name != kQueueFile) fs::remove(entry.path(), ec);
  }
  write_file_atomic((dir / kQueueFile).string(),
                    nlohmann::json{{"order", order}, {"next", 0}, {"taken", nlohmann::json::array()},
                                   {"done", nlohmann::json::array()}}
                        .dump());
}

RunQueue::RunQueue(const fs::path& dir) : path_((dir / kQueueFile).string()) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0)
    throw Error(fmt::format("'{}': no job queue ({}): --worker is started by `normlab compare --jobs N`, not by hand",
                            path_, std::strerror(errno)));
}

RunQueue::~RunQueue() {
  if (fd_ >= 0) ::close(fd_);
}

void RunQueue::remove(const fs::path& dir) {
  std::error_code ec;
  fs::remove(dir / kQueueFile, ec);
}

bool RunQueue::exists(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kQueueFile, ec);
}

// f(state) under the file's exclusive lock; the state is written back when f returns true.
template <class F>
auto RunQueue::locked(F&& f) {
  while (::flock(fd_, LOCK_EX) != 0)
    if (errno != EINTR) throw Error(fmt::format("'{}': cannot lock the job queue ({})", path_, std::strerror(errno)));
  struct Unlock {
    int fd;
    ~Unlock() { ::flock(fd, LOCK_UN); }
  } unlock{fd_};
  nlohmann::json state = read_locked();
  return f(state);
}

nlohmann::json RunQueue::read_locked() {
  std::string text;
  char buffer[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd_, buffer, sizeof buffer, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("'{}': cannot read the job queue ({})", path_, std::strerror(errno)));
    if (n == 0) break;
    text.append(buffer, size_t(n));
    at += n;
  }
  const nlohmann::json state = parse_json_or_discarded(text);
  if (!state.is_object() || !state.contains("order") || !state.contains("next"))
    throw Error(fmt::format("'{}': the job queue is corrupt", path_));
  return state;
}

void RunQueue::write_locked(const nlohmann::json& state) {
  const std::string text = state.dump();
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::pwrite(fd_, text.data() + written, text.size() - written, off_t(written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("'{}': cannot write the job queue ({})", path_, std::strerror(errno)));
    written += size_t(n);
  }
  if (::ftruncate(fd_, off_t(text.size())) != 0)
    throw Error(fmt::format("'{}': cannot write the job queue ({})", path_, std::strerror(errno)));
}

std::optional<size_t> RunQueue::take(int job) {
  return locked([&](nlohmann::json& state) -> std::optional<size_t> {
    const size_t next = state["next"].get<size_t>();
    if (next >= state["order"].size() || state.value("stop", false)) return std::nullopt;
    const size_t index = state["order"][next].get<size_t>();
    state["next"] = next + 1;
    state["taken"].push_back({index, job});
    write_locked(state);
    return index;
  });
}

void RunQueue::done(size_t index) {
  locked([&](nlohmann::json& state) {
    state["done"].push_back(index);
    write_locked(state);
    return 0;
  });
}

std::vector<size_t> RunQueue::done_runs() {
  return locked([](nlohmann::json& state) { return state["done"].get<std::vector<size_t>>(); });
}

std::vector<std::pair<size_t, int>> RunQueue::taken() {
  return locked([](nlohmann::json& state) {
    std::vector<std::pair<size_t, int>> out;
    for (const auto& t : state["taken"]) out.emplace_back(t[0].get<size_t>(), t[1].get<int>());
    return out;
  });
}

void RunQueue::stop() {
  locked([&](nlohmann::json& state) {
    state["stop"] = true;
    write_locked(state);
    return 0;
  });
}

bool RunQueue::stopping() {
  return locked([](nlohmann::json& state) { return state.value("stop", false); });
}

WorkerStop::WorkerStop(const fs::path& dir, const std::atomic<bool>* interrupt) {
  const pid_t parent = ::getppid();
  auto queue = std::make_shared<RunQueue>(dir);  // its own open file: its own lock
  watcher_ = std::thread([this, queue, parent, interrupt] {
    while (!done_.load()) {
      bool stop = (interrupt && interrupt->load()) || ::getppid() != parent;
      try {
        stop = stop || queue->stopping();
      } catch (const Error&) {
        stop = true;  // the queue is gone or unreadable: job 0 ended
      }
      if (stop) {
        stop_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
}

WorkerStop::~WorkerStop() {
  done_ = true;
  if (watcher_.joinable()) watcher_.join();
}

Workers::Workers(const std::string& exe, const fs::path& dir, int count, int threads) {
  // the environment with OMP_NUM_THREADS replaced
  std::vector<std::string> env;
  for (char** e = environ; *e; e++)
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env.emplace_back(*e);
  env.push_back(fmt::format("OMP_NUM_THREADS={}", threads));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::fflush(stdout);  // nothing buffered here is printed twice
  std::fflush(stderr);
  for (int job = 1; job <= count; job++) {
    std::vector<std::string> args = {"normlab", "compare", "--resume", dir.string(), "--worker", std::to_string(job)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int err = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (err != 0) {
      end_all();  // the jobs already started: no destructor runs for a constructor that throws
      throw Error(fmt::format("cannot start job {} of the study ('{}': {})", job, exe, std::strerror(err)));
    }
    pids_.push_back(pid);
  }
}

Workers::~Workers() {
  if (!waited_) end_all();
}

void Workers::end_all() {
  for (pid_t pid : pids_) ::kill(pid, SIGTERM);
  for (pid_t pid : pids_) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

std::vector<std::string> Workers::wait() {
  std::vector<std::string> ends;
  for (pid_t pid : pids_) {
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (r < 0) ends.push_back(fmt::format("lost ({})", std::strerror(errno)));
    else if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 130)) ends.emplace_back();
    else if (WIFEXITED(status)) ends.push_back(fmt::format("exit code {}", WEXITSTATUS(status)));
    else if (WIFSIGNALED(status)) ends.push_back(fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status))));
    else ends.push_back("ended");
  }
  waited_ = true;
  return ends;
}

void write_job_part(const fs::path& dir, int job, const nlohmann::json& part) {
  write_file_atomic(part_path(dir, job).string(), part.dump());
}

nlohmann::json peek_job_part(const fs::path& dir, int job) {
  const fs::path path = part_path(dir, job);
  std::error_code ec;
  if (!fs::exists(path, ec)) return nlohmann::json::object();
  try {
    const nlohmann::json part = parse_json_or_discarded(read_file(path.string(), "a job's results"));
    return part.is_object() ? part : nlohmann::json::object();
  } catch (const std::exception&) {  // (replaced or removed while read: the next snapshot reads it)
    return nlohmann::json::object();
  }
}

JobPart take_job_part(const fs::path& dir, int job) {
  const fs::path path = part_path(dir, job);
  std::error_code ec;
  JobPart got;
  if (!fs::exists(path, ec)) return got;
  const nlohmann::json part = parse_json_or_discarded(read_file(path.string(), "a job's results"));
  if (part.is_object()) {
    fs::remove(path, ec);
    got.records = part;
    return got;
  }
  fs::path keep = dir / fmt::format("jobs-{}-corrupt.json", job);  // out of RunQueue::create's sweep
  for (int n = 2; fs::exists(keep, ec); n++) keep = dir / fmt::format("jobs-{}-corrupt-{}.json", job, n);
  fs::rename(path, keep, ec);
  got.problem = ec ? fmt::format("its results file '{}' is corrupt (and could not be renamed: {})", path.string(),
                                 ec.message())
                   : fmt::format("its results file was corrupt, kept as '{}'", keep.string());
  return got;
}

}  // namespace normlab::study
