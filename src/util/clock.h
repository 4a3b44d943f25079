// clock.h: the one wall-clock helper every timed loop uses (trainer, studies).
#pragma once

#include <chrono>

namespace normlab {

using Clock = std::chrono::steady_clock;

// Seconds elapsed since t0.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace normlab
