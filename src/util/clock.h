// clock.h: the wall-clock helpers every timed loop uses (trainer, studies, progress): elapsed seconds
// and how a duration is printed.
#pragma once

#include <chrono>
#include <fmt/format.h>
#include <string>

namespace normlab {

using Clock = std::chrono::steady_clock;

// Seconds elapsed since t0.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "m:ss", or "h:mm:ss" from an hour on.
inline std::string format_duration(double s) {
  const long total = long(s + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

}  // namespace normlab
