// interrupt.cpp: the SIGINT flag behind StopOnInterrupt (interrupt.h).
#include "util/interrupt.h"

namespace normlab {

namespace {

std::atomic<bool> g_interrupted{false};
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

}  // namespace normlab
