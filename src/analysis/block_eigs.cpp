// block_eigs.cpp: block Davidson with locking and thick restart (see block_eigs.h).
#include "analysis/block_eigs.h"

#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <vector>

#include "util/rng.h"

namespace normlab::analysis {

namespace {

// A leading residual that has not fallen by 1% in kStallSteps steps is at the noise floor of the
// products (e.g. solves through an ill-conditioned J); it is locked there if it is below
// kStallTol ||A||, and the caller's certificate judges the value.
constexpr int kStallSteps = 2;
constexpr double kStallTol = 1e-6;

Eigen::VectorXd random_vector(Eigen::Index n, Rng& rng) {
  Eigen::VectorXd v(n);
  for (Eigen::Index i = 0; i < n; i++) v(i) = rng.normal();
  return v;
}

// The columns of W made orthonormal and orthogonal to every (orthonormal) basis in `against`:
// classical Gram-Schmidt done twice, which keeps orthogonality at rounding level. A column that
// keeps less than 1e-10 of its norm lies (numerically) in the span already and is replaced by a
// random direction (three tries), then dropped.
Eigen::MatrixXd orthonormalize(const Eigen::MatrixXd& W,
                               const std::vector<const Eigen::MatrixXd*>& against, Rng& rng) {
  const Eigen::Index n = W.rows();
  Eigen::MatrixXd out(n, W.cols());
  Eigen::Index kept = 0;
  for (Eigen::Index j = 0; j < W.cols(); j++) {
    Eigen::VectorXd w = W.col(j);
    for (int attempt = 0; attempt < 4; attempt++) {
      const double before = w.norm();
      for (int pass = 0; pass < 2; pass++) {
        for (const Eigen::MatrixXd* B : against)
          if (B->cols() > 0) w -= *B * (B->transpose() * w);
        if (kept > 0) w -= out.leftCols(kept) * (out.leftCols(kept).transpose() * w);
      }
      const double after = w.norm();
      if (before > 0 && after > 1e-10 * before) {
        out.col(kept++) = w / after;
        break;
      }
      w = random_vector(n, rng);
    }
  }
  return out.leftCols(kept);
}

}  // namespace

// (One algorithm, the block Davidson iteration of block_eigs.h, whose expansion, Rayleigh-Ritz, locking
// and restart steps share the basis and workspace declared at its top: long for that reason.)
BlockEigsResult block_largest_eigenpairs(const BlockOperator& A, Eigen::Index n,
                                         const Eigen::MatrixXd& deflate,
                                         const BlockEigsOptions& o) {
  BlockEigsResult r;
  const Eigen::Index room = n - deflate.cols();
  const int wanted = int(std::min<Eigen::Index>(o.nev, room));
  int locking = int(std::min<Eigen::Index>(o.nev + 1, room));  // with the guard when there is room
  if (wanted < o.nev) {
    r.reason = fmt::format("{} eigenpairs asked in a space of dimension {}", o.nev, room);
    return r;
  }
  const int b = int(std::max<Eigen::Index>(1, std::min<Eigen::Index>(o.block, room)));
  const int max_basis = int(std::min<Eigen::Index>(
      room, o.max_basis > 0 ? o.max_basis : std::max(3 * (o.nev + 1), o.nev + 1 + 6 * b)));
  Rng rng(o.seed);
  Eigen::MatrixXd L(n, 0);  // locked vectors
  std::vector<double> lv, lres;
  bool guarded = false;  // the last locked pair is the guard
  double scale = o.scale;
  Eigen::Index confirm_from =
      -1;  // locked count when the last fresh search space for the guard began
  double best_leading = std::numeric_limits<double>::infinity();  // the leading residual's best
  int stalled_steps = 0;                                          // steps without progress
  Eigen::MatrixXd V, AV;
  auto expand = [&](const Eigen::MatrixXd& W) {
    Eigen::MatrixXd AW(n, W.cols());
    A(W, AW);
    r.products += W.cols();
    const Eigen::Index m = V.cols();
    V.conservativeResize(n, m + W.cols());
    AV.conservativeResize(n, m + W.cols());
    V.rightCols(W.cols()) = W;
    AV.rightCols(W.cols()) = AW;
  };
  {
    Eigen::MatrixXd W(n, b);
    for (int j = 0; j < b; j++) W.col(j) = random_vector(n, rng);
    W = orthonormalize(W, {&deflate}, rng);
    V.resize(n, 0);
    AV.resize(n, 0);
    if (!o.affordable(int(W.cols()))) {
      r.reason = "budget exhausted before the first block";
      return r;
    }
    expand(W);
  }
  while (true) {
    // Rayleigh-Ritz on the basis: Ritz pairs in descending order
    Eigen::MatrixXd H = V.transpose() * AV;
    H = 0.5 * (H + H.transpose()).eval();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(H);
    const Eigen::Index m = V.cols();
    const Eigen::MatrixXd Y = eig.eigenvectors().rowwise().reverse();
    const Eigen::VectorXd theta = eig.eigenvalues().reverse();
    Eigen::MatrixXd X = V * Y, AX = AV * Y;
    // lock the leading converged pairs: residual <= tol ||A|| (relative to a small theta alone it
    // could sit below the rounding of A's products), or, when the leading residual has stopped
    // falling (the noise floor of the products), <= kStallTol ||A||
    for (Eigen::Index i = 0; i < m; i++) scale = std::max(scale, std::abs(theta(i)));
    int newly = 0;
    while (int(L.cols()) + newly < locking && newly < m) {
      // the residual of the operator deflated by the locked vectors: their own small errors couple
      // to every later pair and would otherwise set its floor (the caller's Rayleigh-Ritz over all
      // locked vectors together accounts for that coupling)
      Eigen::VectorXd rv = AX.col(newly) - theta(newly) * X.col(newly);
      if (L.cols() > 0) rv -= L * (L.transpose() * rv);
      const double res = rv.norm();
      if (newly == 0) {
        if (res < 0.99 * best_leading) {
          best_leading = res;
          stalled_steps = 0;
        } else {
          stalled_steps++;
        }
      }
      const bool converged =
          res <= o.tol * (o.relative_to_value ? std::max(std::abs(theta(newly)), o.scale) : scale);
      const bool at_floor = o.lock_at_noise_floor && newly == 0 && stalled_steps >= kStallSteps &&
                            res <= kStallTol * scale;
      if (!converged && !at_floor) break;
      best_leading = std::numeric_limits<double>::infinity();
      stalled_steps = 0;
      lv.push_back(theta(newly));
      lres.push_back(res);
      newly++;
    }
    if (newly > 0) {
      const Eigen::Index l = L.cols();
      L.conservativeResize(n, l + newly);
      L.rightCols(newly) = X.leftCols(newly);
    }
    if (int(L.cols()) >= locking) {
      // a cluster is never cut: the guard must lie clearly below the last value kept, else it joins
      // them and the next pair becomes the guard
      bool separated = false;
      Eigen::Index guard_col = 0;
      if (locking > wanted) {
        for (Eigen::Index j = 1; j < L.cols(); j++)
          if (lv[size_t(j)] < lv[size_t(guard_col)]) guard_col = j;
        std::vector<double> sorted = lv;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        const double last = sorted[size_t(locking) - 2];
        separated =
            last - sorted[size_t(locking) - 1] > o.cluster_rtol * std::max(std::abs(last), o.scale);
      }
      // The guard counts only as the first pair to converge in a fresh random search space (the
      // locked ones deflated): Krylov methods converge to the top of the spectrum first, so a copy
      // of a wanted value that the search space had lost shows up there instead, and is kept.
      if (separated && confirm_from != L.cols() - 1) {
        const Eigen::Index l = L.cols() - 1;
        L.col(guard_col) = L.col(l);
        L.conservativeResize(n, l);
        lv[size_t(guard_col)] = lv.back();
        lres[size_t(guard_col)] = lres.back();
        lv.pop_back();
        lres.pop_back();
        confirm_from = L.cols();
        best_leading = std::numeric_limits<double>::infinity();
        stalled_steps = 0;
        Eigen::MatrixXd W(n, b);
        for (int j = 0; j < b; j++) W.col(j) = random_vector(n, rng);
        W = orthonormalize(W, {&deflate, &L}, rng);
        V.resize(n, 0);
        AV.resize(n, 0);
        if (W.cols() == 0 || !o.affordable(int(W.cols()))) {
          r.reason =
              fmt::format("budget exhausted while confirming the guard, {} pairs locked", L.cols());
          break;
        }
        expand(W);
        continue;
      }
      if (separated || locking == room) {
        guarded = separated;
        r.converged = true;
        break;
      }
      locking++;
    }
    // the unlocked Ritz vectors are the new basis; beyond max_basis keep the leading ones only
    Eigen::Index keep = m - newly;
    if (keep + b > max_basis) keep = std::max<Eigen::Index>(locking - L.cols() + b, max_basis / 2);
    keep = std::min(keep, m - newly);
    V = X.middleCols(newly, keep);
    AV = AX.middleCols(newly, keep);
    // new directions: the residuals of the leading unlocked pairs (the Lanczos directions), and a
    // random vector for each pair just locked
    const int nres = int(std::min<Eigen::Index>(b, keep));
    const int nrand = std::min(newly, b);
    Eigen::MatrixXd W(n, nres + nrand);
    for (int j = 0; j < nres; j++) W.col(j) = AV.col(j) - theta(newly + j) * V.col(j);
    for (int j = 0; j < nrand; j++) W.col(nres + j) = random_vector(n, rng);
    W = orthonormalize(W, {&deflate, &L, &V}, rng);
    if (W.cols() == 0) {
      r.reason = fmt::format("the search space is exhausted after locking {} of {} pairs", L.cols(),
                             locking);
      break;
    }
    if (!o.affordable(int(W.cols()))) {
      r.reason = fmt::format("budget exhausted after {} products with {} of {} pairs locked",
                             r.products, L.cols(), locking);
      break;
    }
    expand(W);
  }
  // descending over everything locked: a copy found late may rank above pairs locked before it
  std::vector<int> order(lv.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int c) { return lv[size_t(a)] > lv[size_t(c)]; });
  const int got = int(order.size()) - (guarded ? 1 : 0);
  r.values.resize(got);
  r.residuals.resize(got);
  r.vectors.resize(n, got);
  for (int i = 0; i < got; i++) {
    r.values(i) = lv[size_t(order[size_t(i)])];
    r.residuals(i) = lres[size_t(order[size_t(i)])];
    r.vectors.col(i) = L.col(order[size_t(i)]);
  }
  if (guarded) {
    r.guard = lv[size_t(order.back())];
    r.guard_residual = lres[size_t(order.back())];
  }
  if (!r.converged && r.reason.empty()) r.reason = "not converged";
  return r;
}

}  // namespace normlab::analysis
