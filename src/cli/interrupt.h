// interrupt.h: Ctrl-C for the long-running commands (`train`, `compare`): the first SIGINT sets a
// flag that the training loop reads before each step (TrainOptions::stop), so the run stops after
// the current step and writes its checkpoint, metrics and summary; it also restores the default
// handler, so a second Ctrl-C kills at once. Exit code 130 (128 + SIGINT) marks an interrupted run.
#pragma once

#include <atomic>

namespace normlab::cli {

inline constexpr int kInterruptedExitCode = 130;

// Installs the handler for its lifetime (the default handler is restored on destruction).
class StopOnInterrupt {
 public:
  StopOnInterrupt();
  ~StopOnInterrupt();
  StopOnInterrupt(const StopOnInterrupt&) = delete;
  StopOnInterrupt& operator=(const StopOnInterrupt&) = delete;
  // The flag for TrainOptions::stop / CompareOptions::stop.
  const std::atomic<bool>* flag() const;
};

}  // namespace normlab::cli
