// bench_allreduce.cpp: the time of normlab's fixed-order gradient sum (dist::Comm::sum_in_rank_order,
// a reduce-scatter and an allgather over P chunks, summed in rank order) per gradient size, under
// `mpirun -np P`. Prints one JSON line per size from rank 0: floats, median and min ms of 20 calls
// after 3 warm-up calls. Usage: mpirun -np P bench_allreduce [floats...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "distributed/comm.h"

using namespace normlab;

int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  const dist::Comm comm = dist::world();
  std::vector<size_t> sizes = {1000, 10000, 100000, 1000000, 4800000, 9600000, 30000000};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; i++) sizes.push_back(size_t(std::atof(argv[i])));
  }
  for (size_t n : sizes) {
    std::vector<float> grads(n, 1.0f + float(comm.rank()));
    std::vector<double> ms;
    for (int k = 0; k < 23; k++) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      comm.sum_in_rank_order(grads.data(), n);
      const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (k >= 3) ms.push_back(dt);
      std::fill(grads.begin(), grads.end(), 1.0f + float(comm.rank()));
    }
    std::sort(ms.begin(), ms.end());
    if (comm.root())
      std::printf("{\"ranks\": %d, \"floats\": %zu, \"median_ms\": %.4f, \"min_ms\": %.4f}\n", comm.size(), n,
                  ms[ms.size() / 2], ms.front());
  }
  dist::finalize();
  return 0;
}
