// progress.cpp: report_progress and the display (progress.h).
#include "util/progress.h"

#include <unistd.h>

#include <cstdio>
#include <fmt/format.h>
#include <memory>
#include <mutex>
#include <string>

#include "util/clock.h"

namespace normlab {

namespace {

struct Display {
  bool tty = false;
  bool shown = false;        // a line is on the terminal (to clear)
  std::string what;          // the computation the clock belongs to
  Clock::time_point start, last;
};

std::mutex mutex;
std::unique_ptr<Display> active;  // the live ProgressDisplay's state, or null

}  // namespace

void report_progress(std::string_view what, long done, long total, std::string_view unit) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!active) return;
  Display& d = *active;
  const Clock::time_point now = Clock::now();
  // the outermost computation owns the display until it finishes (theory's claims run instruments,
  // which report too)
  if (d.what.empty()) {
    d.what = std::string(what);
    d.start = d.last = now;
  } else if (d.what != what) {
    return;
  }
  if (done >= total) {  // finished: the terminal's line goes (before the command prints its results)
    if (d.shown) std::fprintf(stderr, "\r\033[K"), std::fflush(stderr);
    d.shown = false;
    d.what.clear();
    return;
  }
  if (done <= 0) return;
  const double elapsed = seconds_since(d.start), since = std::chrono::duration<double>(now - d.last).count();
  if (d.tty ? since < 0.1 : elapsed < 30 || since < 30) return;
  d.last = now;
  const std::string line = fmt::format("{}: {} of {} {} | {} elapsed | about {} left", what, done, total, unit,
                                       format_duration(elapsed), format_duration(elapsed / double(done) * double(total - done)));
  if (d.tty) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    d.shown = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

ProgressDisplay::ProgressDisplay() {
  std::lock_guard<std::mutex> lock(mutex);
  active = std::make_unique<Display>();
  active->tty = isatty(fileno(stderr)) != 0;
}

ProgressDisplay::~ProgressDisplay() {
  std::lock_guard<std::mutex> lock(mutex);
  if (active && active->shown) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  active.reset();
}

}  // namespace normlab
