// interrupt.h: Ctrl-C for the long-running calls (`normlab train`, `normlab compare`, and the Python
// module's train and compare): the first SIGINT sets a flag that the training loop reads before each
// step (TrainOptions::stop), so the run stops after the current step and writes its checkpoint,
// metrics and summary; it also puts back the handler that was there before (the default one in the
// command, so a second Ctrl-C kills at once; Python's in the module). Exit code 130 (128 + SIGINT)
// marks an interrupted run of the command. The instruments and the theory stop only inside an
// InterruptibleCall (throw_if_interrupted).
#pragma once

#include <atomic>
#include <csignal>
#include <stdexcept>

namespace normlab {

inline constexpr int kInterruptedExitCode = 130;

// What a long instrument or theory call throws when Ctrl-C came during it and the caller asked for
// that (InterruptibleCall below): the Python module's calls, which turn it into KeyboardInterrupt.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted by Ctrl-C") {}
};

// Called in the instruments' and the theory's long loops (a Lanczos product, a batch, a layer, a group
// of claims): throws Interrupted if an InterruptibleCall is alive and Ctrl-C came; otherwise nothing
// (the command's analyze and theory keep the default handler: Ctrl-C ends them at once).
void throw_if_interrupted();

// Gives the calling thread and OpenMP's threads an alternate stack for signal handlers (each once).
// A handler installed with SA_ONSTACK (StopOnInterrupt's; CPython's since 3.10) then never writes its
// frame where the interrupted code's stack pointer is: oneDNN's JIT GEMM kernels (Debian's 2.6) point
// it into a heap workspace while they run, and a Ctrl-C there corrupted the heap
// (uxlfoundation/oneDNN#4845, fixed upstream in 2026; tests/test_interrupt.cpp). StopOnInterrupt
// calls it; so does the Python module when it is imported.
void use_signal_stacks();

// Installs the handler for its lifetime (the previous handler is restored on destruction). Nested
// objects share the outermost one's handler and flag. The commands' train and compare take SIGTERM as
// well (Signals::InterruptAndTerminate: what `timeout`, a batch scheduler or a shutdown sends), so a
// run stopped that way keeps its last step and a study its report; the Python module takes SIGINT only
// (a SIGTERM ends the interpreter as Python's default does).
enum class Signals { Interrupt, InterruptAndTerminate };
class StopOnInterrupt {
 public:
  explicit StopOnInterrupt(Signals signals = Signals::Interrupt);
  ~StopOnInterrupt();
  StopOnInterrupt(const StopOnInterrupt&) = delete;
  StopOnInterrupt& operator=(const StopOnInterrupt&) = delete;
  // The flag for TrainOptions::stop / CompareOptions::stop.
  const std::atomic<bool>* flag() const;
  bool interrupted() const { return flag()->load(); }
};

// For its lifetime Ctrl-C makes throw_if_interrupted throw: the Python module wraps an instrument or
// theory call in one (the call releases the interpreter, so Python's own handler cannot stop it).
class InterruptibleCall {
 public:
  InterruptibleCall();
  ~InterruptibleCall();
  InterruptibleCall(const InterruptibleCall&) = delete;
  InterruptibleCall& operator=(const InterruptibleCall&) = delete;

 private:
  StopOnInterrupt handler_;
};

}  // namespace normlab
