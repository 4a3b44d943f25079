// interrupt.h: Ctrl-C for the long-running calls (`normlab train`, `normlab compare`, and the Python
// module's train and compare): the first SIGINT sets a flag that the training loop reads before each
// step (TrainOptions::stop), so the run stops after the current step and writes its checkpoint,
// metrics and summary; it also puts back the handler that was there before (the default one in the
// command, so a second Ctrl-C kills at once; Python's in the module). Exit code 130 (128 + SIGINT)
// marks an interrupted run of the command.
#pragma once

#include <atomic>
#include <csignal>

namespace normlab {

inline constexpr int kInterruptedExitCode = 130;

// Installs the handler for its lifetime (the previous handler is restored on destruction).
class StopOnInterrupt {
 public:
  StopOnInterrupt();
  ~StopOnInterrupt();
  StopOnInterrupt(const StopOnInterrupt&) = delete;
  StopOnInterrupt& operator=(const StopOnInterrupt&) = delete;
  // The flag for TrainOptions::stop / CompareOptions::stop.
  const std::atomic<bool>* flag() const;
  bool interrupted() const { return flag()->load(); }
};

}  // namespace normlab
