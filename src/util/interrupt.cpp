// interrupt.cpp: the SIGINT (and SIGTERM) flag behind StopOnInterrupt (interrupt.h).
#include "util/interrupt.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>

namespace normlab {

namespace {

// An alternate stack for signal handlers on the calling thread, once (kept for the thread's life: a
// handler may run on it until the thread ends). A thread that has one already (Python's faulthandler
// installs one) keeps it.
void ensure_own_signal_stack() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;
  stack_t mine{};
  mine.ss_size = size_t(std::max(64L * 1024, 4 * sysconf(_SC_SIGSTKSZ)));  // AVX-512 state is ~3 KB a frame
  mine.ss_sp = ::operator new(mine.ss_size);  // never freed: the thread may take a signal until it ends
  sigaltstack(&mine, nullptr);
}

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_interruptible_calls{0};  // InterruptibleCall objects alive
std::atomic<int> g_installed{0};            // StopOnInterrupt objects alive (they nest: a study's theory table)
std::atomic<bool> g_term{false};            // the outermost one took SIGTERM too
struct sigaction g_previous {};             // the handlers before the outermost one
struct sigaction g_previous_term {};

extern "C" void on_interrupt(int) {  // (runs on the thread's alternate stack: SA_ONSTACK)
  g_interrupted.store(true);
  // async-signal-safe; the next signal goes to the old handler (the default: it kills at once)
  sigaction(SIGINT, &g_previous, nullptr);
  if (g_term.load()) sigaction(SIGTERM, &g_previous_term, nullptr);
}

}  // namespace

void use_signal_stacks() {
  ensure_own_signal_stack();
#pragma omp parallel
  ensure_own_signal_stack();
}

// Only the outermost object installs the handler and puts back the one before it; one inside it (an
// InterruptibleCall within a study) shares the handler and the flag, so a Ctrl-C that came before it
// still counts and the handler before the outermost one is what comes back at the end.
StopOnInterrupt::StopOnInterrupt(Signals signals) {
  use_signal_stacks();
  if (g_installed.fetch_add(1) > 0) return;
  g_interrupted.store(false);
  struct sigaction mine {};
  mine.sa_handler = on_interrupt;
  mine.sa_flags = SA_ONSTACK;
  sigemptyset(&mine.sa_mask);
  g_term.store(signals == Signals::InterruptAndTerminate);
  if (g_term.load()) sigaction(SIGTERM, &mine, &g_previous_term);
  sigaction(SIGINT, &mine, &g_previous);
}

StopOnInterrupt::~StopOnInterrupt() {
  if (g_installed.fetch_sub(1) != 1) return;
  sigaction(SIGINT, &g_previous, nullptr);
  if (g_term.exchange(false)) sigaction(SIGTERM, &g_previous_term, nullptr);
}

const std::atomic<bool>* StopOnInterrupt::flag() const { return &g_interrupted; }

InterruptibleCall::InterruptibleCall() { g_interruptible_calls.fetch_add(1); }
InterruptibleCall::~InterruptibleCall() { g_interruptible_calls.fetch_sub(1); }

void throw_if_interrupted() {
  if (g_interruptible_calls.load(std::memory_order_relaxed) > 0 && g_interrupted.load(std::memory_order_relaxed))
    throw Interrupted();
}

}  // namespace normlab
