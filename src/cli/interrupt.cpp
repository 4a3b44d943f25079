// interrupt.cpp: the SIGINT flag behind StopOnInterrupt (interrupt.h).
#include "cli/interrupt.h"

#include <csignal>

namespace normlab::cli {

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) {
  g_interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);
}

}  // namespace

StopOnInterrupt::StopOnInterrupt() {
  g_interrupted.store(false);
  std::signal(SIGINT, on_interrupt);
}

StopOnInterrupt::~StopOnInterrupt() { std::signal(SIGINT, SIG_DFL); }

const std::atomic<bool>* StopOnInterrupt::flag() const { return &g_interrupted; }

}  // namespace normlab::cli
