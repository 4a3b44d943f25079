// block_eigs.h: the largest eigenpairs of a symmetric operator known only through products, by a
// block Davidson iteration without preconditioner (mathematically a thick-restarted block Lanczos)
// with locking. Single-vector Lanczos sees one vector of each eigenspace from its start vector, so
// it loses the multiplicity of a repeated (or numerically repeated) eigenvalue; here a block of b
// new directions per step holds up to b copies at once, and every locked pair is replaced by a
// fresh random direction, which carries components of the copies not found yet. One pair beyond
// the wanted ones (the guard) is locked too, and more while it belongs to the same cluster as the
// last wanted one: the values returned end at a gap, followed by a converged value below it.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

namespace normlab::analysis {

// AX = A X for the n x b block X
using BlockOperator = std::function<void(const Eigen::MatrixXd& X, Eigen::MatrixXd& AX)>;

struct BlockEigsOptions {
  int nev = 1;    // eigenpairs wanted, the largest
  int block = 4;  // new directions per step
  int max_basis =
      0;  // basis size that triggers a thick restart (0: max(3 (nev + 1), nev + 1 + 6 block))
  // ||A|| is estimated by max(scale, every |theta| seen). A Ritz pair is locked when
  // ||A x - theta x|| <= tol ||A|| (relative_to_value: tol max(|theta|, scale)), or, with
  // lock_at_noise_floor (products not exact to rounding, as solves through an ill-conditioned
  // matrix), when that residual has stalled below 1e-6 ||A|| (block_eigs.cpp; a caller that allows
  // it must judge the values itself). Values closer than cluster_rtol max(|theta|, scale) form one
  // cluster, which is never cut: pairs are locked until the next one (the guard) lies below the
  // last by more than that.
  double tol = 1e-12;
  double scale = 0;
  bool relative_to_value = false;
  bool lock_at_noise_floor = false;
  double cluster_rtol = 1e-8;
  // Called before each block of `columns` products; false stops the run (not converged: budget).
  std::function<bool(int columns)> affordable = [](int) { return true; };
  uint64_t seed = 1;
};

struct BlockEigsResult {
  // descending: the locked pairs (converged: the nev wanted, and the rest of a cluster the nev-th
  // belongs to, without the guard)
  Eigen::VectorXd values;
  Eigen::MatrixXd vectors;    // n x values.size(), orthonormal, orthogonal to `deflate`
  Eigen::VectorXd residuals;  // ||A x - theta x|| when locked
  // the pair after them (NaN when not converged or the space has no room for it)
  double guard = std::numeric_limits<double>::quiet_NaN(), guard_residual = 0;
  long products = 0;  // columns applied
  bool converged = false;
  std::string reason;  // why not converged
};

// Works in the orthogonal complement of the orthonormal columns of `deflate` (n x s, s may be 0).
BlockEigsResult block_largest_eigenpairs(const BlockOperator& A, Eigen::Index n,
                                         const Eigen::MatrixXd& deflate,
                                         const BlockEigsOptions& options);

}  // namespace normlab::analysis
