// interrupt.cpp: the SIGINT flag behind StopOnInterrupt (interrupt.h).
#include "util/interrupt.h"

namespace normlab {

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_interruptible_calls{0};  // InterruptibleCall objects alive
struct sigaction g_previous {};

extern "C" void on_interrupt(int) {
  g_interrupted.store(true);
  sigaction(SIGINT, &g_previous, nullptr);  // async-signal-safe; the next Ctrl-C goes to the old handler
}

}  // namespace

StopOnInterrupt::StopOnInterrupt() {
  g_interrupted.store(false);
  struct sigaction mine {};
  mine.sa_handler = on_interrupt;
  sigemptyset(&mine.sa_mask);
  sigaction(SIGINT, &mine, &g_previous);
}

StopOnInterrupt::~StopOnInterrupt() { sigaction(SIGINT, &g_previous, nullptr); }

const std::atomic<bool>* StopOnInterrupt::flag() const { return &g_interrupted; }

InterruptibleCall::InterruptibleCall() { g_interruptible_calls.fetch_add(1); }
InterruptibleCall::~InterruptibleCall() { g_interruptible_calls.fetch_sub(1); }

void throw_if_interrupted() {
  if (g_interruptible_calls.load(std::memory_order_relaxed) > 0 && g_interrupted.load(std::memory_order_relaxed))
    throw Interrupted();
}

}  // namespace normlab
