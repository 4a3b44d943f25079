// comm.h: the one place that knows about MPI (`mpirun -np P normlab train|compare`). A Comm is a
// group of processes working together: the whole job (world()) or this process alone (self()).
// Built without MPI (no libopenmpi-dev when CMake ran), or run without a launcher, the world is one
// process and every operation is the trivial serial one; an MPI launch of such a build is refused.
// MPI is started only under a launcher (OMPI_COMM_WORLD_SIZE or PMI_SIZE in the environment), so a
// plain `normlab` never pays for it. Every reduction here has a fixed order: its result does not
// depend on message timing, so two runs with the same P are bit-identical.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace normlab::dist {

class Comm {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }

  // Every rank's data (n floats), summed element by element in rank order 0, 1, ..., P-1 in double
  // and rounded once to float, lands on every rank. A reduce-scatter then an allgather over P
  // contiguous chunks (what a ring allreduce sends: 2 (P-1)/P n floats per rank), with the sum done
  // here rather than inside MPI, whose reduction order is not specified.
  void sum_in_rank_order(float* data, size_t n) const;
  // Each rank's x, in rank order, on every rank.
  std::vector<double> all_gather(double x) const;
  // data[k] = the largest data[k] over the ranks, on every rank (exact in any order).
  void max_in_place(double* data, size_t n) const;
  // Whether any rank passed true (every rank gets the same answer).
  bool any(bool flag) const;
  // Rank 0's values on every rank.
  void broadcast(float* data, size_t n) const;
  long broadcast(long x) const;
  // Every rank's text, in rank order, on rank 0 (an empty vector on the other ranks).
  std::vector<std::string> gather_text(const std::string& text) const;
  void barrier() const;

 private:
  friend Comm world();
  friend Comm self();
  Comm(int rank, int size, bool whole) : rank_(rank), size_(size), whole_(whole) {}
  int rank_ = 0, size_ = 1;
  bool whole_ = false;  // MPI_COMM_WORLD (else this process alone)
};

// The whole job, and this process alone.
Comm world();
Comm self();

// Whether this normlab was built with MPI.
bool built_with_mpi();

// Whether an MPI launcher started this process (OMPI_COMM_WORLD_SIZE or PMI_SIZE in the environment).
bool under_launcher();

// Call first in main. Under a launcher: starts MPI (or, built without it, throws the one message
// saying so) and, unless OMP_NUM_THREADS is set, gives each rank its share of the cores it may run
// on (sched_getaffinity): all of them when the launcher bound the rank to a subset, else an equal
// share among the ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE), at least 1.
void init(int* argc, char*** argv);
// Call last in main on the way out without an error.
void finalize();

// The message for an MPI launch of a normlab built without MPI, given the launcher's environment
// (OMPI_COMM_WORLD_SIZE, PMI_SIZE); nullopt when it is not such a launch (no variable, or one rank).
std::optional<std::string> launch_without_mpi(const char* ompi_world_size, const char* pmi_size);

// The OpenMP threads init() chose for this rank (nullopt: left to OpenMP, e.g. OMP_NUM_THREADS set).
std::optional<int> threads_per_rank();

// The way out of main after an Error: prints "normlab: error: <message>" once and returns the exit
// code 1. With several ranks, when every rank fails alike (a bad config: they read the same input)
// rank 0 alone prints and all leave MPI cleanly; when the ranks do not all fail within a few
// seconds (one rank's disk is full) the failing rank prints with its rank and ends the whole job
// (MPI_Abort), so no rank waits forever in a collective.
int exit_after_error(const std::string& message);

}  // namespace normlab::dist
