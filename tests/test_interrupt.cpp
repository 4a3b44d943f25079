// test_interrupt.cpp: Ctrl-C while the engine multiplies. The handler of StopOnInterrupt
// (util/interrupt.h) must not run on the stack of a thread inside a GEMM: oneDNN's JIT GEMM kernels
// (Debian's 2.6) point the stack pointer into a heap workspace while they run, so a signal frame
// written there corrupts the heap or the product (seen as "corrupted size vs. prev_size" aborts of
// `normlab train` after about 1 Ctrl-C in 25). Here SIGINT is sent to the process hundreds of times
// while two threads multiply, as the backward pass does, and every product must stay exact.
#include <gtest/gtest.h>

#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "ops/gemm_backend.h"
#include "util/interrupt.h"

using namespace normlab;

TEST(Interrupt, CtrlCDuringGemmsCorruptsNeitherTheHeapNorTheProducts) {
  // matmul_backward's weight gradient, dW += dY^T X over 2048 rows, each thread taking half of dY's
  // 256 columns (a strided transposed operand): oneDNN runs it on `gemm:jit`, the kernel that moves
  // the stack pointer into the heap
  const int OC = 256, M = OC / 2, N = 128, K = 2048;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> A(size_t(K) * OC), B(size_t(K) * N);
  for (float& v : A) v = u(rng);
  for (float& v : B) v = u(rng);
  auto product = [&](int half) {  // made and run inside a parallel region, as the backward pass does
    std::vector<float> C(size_t(M) * N, 0.0f);
    ops::gemm_f32_linear(ops::Trans::Yes, ops::Trans::No, M, N, K, 1.0f, A.data() + half * M, OC, B.data(), N, 1.0f,
                         C.data(), N);
    return C;
  };
  std::vector<float> expect[2];
#pragma omp parallel num_threads(2)
  expect[omp_get_thread_num()] = product(omp_get_thread_num());
  std::mt19937 delays(11);
  long products = 0, wrong = 0;
  for (int round = 0; round < 300; round++) {
    const StopOnInterrupt stop;
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(delays));
    std::thread sender([delay] {
      std::this_thread::sleep_for(delay);
      ::kill(::getpid(), SIGINT);  // process-directed, as Ctrl-C in a terminal
    });
    while (!stop.interrupted()) {
#pragma omp parallel num_threads(2) reduction(+ : products, wrong)
      {
        const int half = omp_get_thread_num();
        products++;
        if (product(half) != expect[half]) wrong++;
      }
    }
    sender.join();
  }
  EXPECT_EQ(wrong, 0) << "of " << products << " products";
}

// StopOnInterrupt objects nest (a study's theory table is an InterruptibleCall inside the study's
// handler): the inner one keeps a Ctrl-C that came before it, and when both are gone the handler from
// before the outer one is back (were the inner one to put back the outer's, the outer would then put
// back normlab's own, and the Python module's compare would leave Python without its handler).
TEST(Interrupt, NestedHandlersKeepTheFlagAndRestoreTheFirstHandler) {
  struct sigaction before {};
  sigaction(SIGINT, nullptr, &before);
  {
    const StopOnInterrupt outer;
    struct sigaction during {};
    sigaction(SIGINT, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler);
    {
      const InterruptibleCall inner;
      EXPECT_NO_THROW(throw_if_interrupted());
    }
    raise(SIGINT);  // the outer's handler: the flag, and the handler before it back for a second Ctrl-C
    EXPECT_TRUE(outer.interrupted());
    {
      const InterruptibleCall inner;  // the Ctrl-C before it still counts
      EXPECT_THROW(throw_if_interrupted(), Interrupted);
    }
  }
  struct sigaction after {};
  sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  {
    const StopOnInterrupt again;  // a new outermost one starts without the old Ctrl-C
    EXPECT_FALSE(again.interrupted());
  }
}
