// comm.cpp: the MPI implementation of comm.h and its serial fallback (the only #ifdef NORMLAB_WITH_MPI
// of the code base), the launcher environment and the threads per rank.
#include "distributed/comm.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <thread>

#include "util/error.h"

#ifdef NORMLAB_WITH_MPI
#include <mpi.h>
#endif

namespace normlab::dist {

namespace {

int g_rank = 0, g_size = 1;
std::optional<int> g_threads;

// a positive integer from the environment, or nullopt
std::optional<long> env_count(const char* text) {
  if (!text || !*text) return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 1) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::string> launch_without_mpi(const char* ompi_world_size, const char* pmi_size) {
  const long n = std::max(env_count(ompi_world_size).value_or(1), env_count(pmi_size).value_or(1));
  if (n <= 1) return std::nullopt;
  return fmt::format("launched as one of {} MPI ranks (mpirun -np {}), but this normlab was built without MPI: "
                     "each rank would train alone into the same directory. Install libopenmpi-dev and openmpi-bin "
                     "(scripts/setup.sh does) and rebuild, or run normlab without mpirun",
                     n, n);
}

std::optional<int> threads_per_rank() { return g_threads; }

bool under_launcher() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

Comm self() { return Comm(0, 1, false); }
Comm world() { return Comm(g_rank, g_size, true); }

#ifdef NORMLAB_WITH_MPI

namespace {

MPI_Comm g_error_comm = MPI_COMM_NULL;  // a duplicate of the world, only for exit_after_error
bool g_mpi_started = false;

// Threads for this rank: the cores it may run on, shared with the other ranks on this node unless
// the launcher already bound it to its own cores.
void choose_threads() {
  if (std::getenv("OMP_NUM_THREADS")) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  const long allowed = CPU_COUNT(&set), online = sysconf(_SC_NPROCESSORS_ONLN);
  const long local = env_count(std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")).value_or(1);
  const long share = allowed < online ? allowed : allowed / local;  // bound by the launcher: its cores
  g_threads = int(std::max(1L, share));
  omp_set_num_threads(*g_threads);  // OpenBLAS's OpenMP build follows omp_get_max_threads()
}


MPI_Comm handle(bool whole) { return whole ? MPI_COMM_WORLD : MPI_COMM_SELF; }

// contiguous chunk k of n elements split P ways
size_t chunk_begin(size_t n, int P, int k) { return n * size_t(k) / size_t(P); }

}  // namespace

bool built_with_mpi() { return true; }

void init(int* argc, char*** argv) {
  if (!under_launcher()) return;  // no launcher: serial
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);  // OpenMP threads never call MPI
  g_mpi_started = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_error_comm);
  if (g_size > 1) choose_threads();
}

void finalize() {
  if (!g_mpi_started) return;
  MPI_Comm_free(&g_error_comm);
  MPI_Finalize();
  g_mpi_started = false;
}

int exit_after_error(const std::string& message) {
  if (!g_mpi_started || g_size == 1) {
    std::fprintf(stderr, "normlab: error: %s\n", message.c_str());
    finalize();
    return 1;
  }
  MPI_Request request;
  MPI_Ibarrier(g_error_comm, &request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int done = 0;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (done) {  // every rank failed: the same input, the same message
    if (g_rank == 0) std::fprintf(stderr, "normlab: error: %s\n", message.c_str());
    finalize();
    return 1;
  }
  std::fprintf(stderr, "normlab: error: (rank %d of %d; ending the other ranks) %s\n", g_rank, g_size,
               message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

void Comm::sum_in_rank_order(float* data, size_t n) const {
  const int P = size_;
  if (P == 1) return;
  std::vector<int> send_counts(P), send_offsets(P), recv_counts(P), recv_offsets(P);
  const size_t mine = chunk_begin(n, P, rank_ + 1) - chunk_begin(n, P, rank_);
  for (int k = 0; k < P; k++) {
    send_offsets[k] = int(chunk_begin(n, P, k));
    send_counts[k] = int(chunk_begin(n, P, k + 1)) - send_offsets[k];
    recv_counts[k] = int(mine);
    recv_offsets[k] = int(mine * size_t(k));
  }
  // reduce-scatter: rank k receives every rank's chunk k, and sums them in rank order
  std::vector<float> pieces(mine * size_t(P));
  MPI_Alltoallv(data, send_counts.data(), send_offsets.data(), MPI_FLOAT, pieces.data(), recv_counts.data(),
                recv_offsets.data(), MPI_FLOAT, handle(whole_));
  std::vector<float> summed(mine);
#pragma omp parallel for schedule(static) if (mine > 65536)
  for (size_t i = 0; i < mine; i++) {
    double s = pieces[i];
    for (int k = 1; k < P; k++) s += double(pieces[size_t(k) * mine + i]);
    summed[i] = float(s);
  }
  MPI_Allgatherv(summed.data(), int(mine), MPI_FLOAT, data, send_counts.data(), send_offsets.data(), MPI_FLOAT,
                 handle(whole_));
}

std::vector<double> Comm::all_gather(double x) const {
  std::vector<double> all(size_t(size_), x);
  if (size_ > 1) MPI_Allgather(&x, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, handle(whole_));
  return all;
}

void Comm::max_in_place(double* data, size_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_DOUBLE, MPI_MAX, handle(whole_));
}

bool Comm::any(bool flag) const {
  if (size_ == 1) return flag;
  int mine = flag ? 1 : 0, result = 0;
  MPI_Allreduce(&mine, &result, 1, MPI_INT, MPI_LOR, handle(whole_));  // exact in any order
  return result != 0;
}

void Comm::broadcast(float* data, size_t n) const {
  if (size_ > 1) MPI_Bcast(data, int(n), MPI_FLOAT, 0, handle(whole_));
}

long Comm::broadcast(long x) const {
  if (size_ > 1) MPI_Bcast(&x, 1, MPI_LONG, 0, handle(whole_));
  return x;
}

std::vector<std::string> Comm::gather_text(const std::string& text) const {
  if (size_ == 1) return {text};
  int length = int(text.size());
  std::vector<int> lengths(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, handle(whole_));
  std::vector<char> all;
  if (rank_ == 0) {
    for (int k = 1; k < size_; k++) offsets[size_t(k)] = offsets[size_t(k) - 1] + lengths[size_t(k) - 1];
    all.resize(size_t(offsets.back() + lengths.back()));
  }
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
              handle(whole_));
  std::vector<std::string> texts;
  if (rank_ == 0)
    for (int k = 0; k < size_; k++) texts.emplace_back(all.data() + offsets[size_t(k)], size_t(lengths[size_t(k)]));
  return texts;
}

void Comm::barrier() const {
  if (size_ > 1) MPI_Barrier(handle(whole_));
}

#else  // serial fallback: one process, every operation trivial

bool built_with_mpi() { return false; }

void init(int*, char***) {
  if (const auto refused = launch_without_mpi(std::getenv("OMPI_COMM_WORLD_SIZE"), std::getenv("PMI_SIZE")))
    throw Error(*refused);
}

void finalize() {}

int exit_after_error(const std::string& message) {
  std::fprintf(stderr, "normlab: error: %s\n", message.c_str());
  return 1;
}

void Comm::sum_in_rank_order(float*, size_t) const {}
std::vector<double> Comm::all_gather(double x) const { return {x}; }
void Comm::max_in_place(double*, size_t) const {}
bool Comm::any(bool flag) const { return flag; }
void Comm::broadcast(float*, size_t) const {}
long Comm::broadcast(long x) const { return x; }
std::vector<std::string> Comm::gather_text(const std::string& text) const { return {text}; }
void Comm::barrier() const {}

#endif

}  // namespace normlab::dist
