// gmres.cpp: GMRES without restart (gmres.h).
#include "analysis/gmres.h"

#include <algorithm>
#include <cmath>

namespace normlab::analysis {

bool gmres(const std::function<void(const Eigen::VectorXd&, Eigen::VectorXd&)>& A, const Eigen::VectorXd& b,
           Eigen::VectorXd& z, int max_it, double tol) {
  const Eigen::Index n = b.size();
  const double beta = b.norm();
  z = Eigen::VectorXd::Zero(n);
  if (beta == 0) return true;
  const int m = int(std::min<Eigen::Index>(max_it, n));
  Eigen::MatrixXd V(n, m + 1), H = Eigen::MatrixXd::Zero(m + 1, m);
  Eigen::VectorXd g = Eigen::VectorXd::Zero(m + 1), cs(m), sn(m), w(n);
  V.col(0) = b / beta;
  g(0) = beta;
  int k = 0;
  double resid = beta;
  for (int j = 0; j < m; j++) {
    A(V.col(j), w);
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i <= j; i++) {
        const double h = V.col(i).dot(w);
        H(i, j) += h;
        w -= h * V.col(i);
      }
    H(j + 1, j) = w.norm();
    if (H(j + 1, j) > 0) V.col(j + 1) = w / H(j + 1, j);
    for (int i = 0; i < j; i++) {  // the earlier rotations, then a new one that zeroes H(j+1, j)
      const double a = H(i, j), c = H(i + 1, j);
      H(i, j) = cs(i) * a + sn(i) * c;
      H(i + 1, j) = -sn(i) * a + cs(i) * c;
    }
    const double r = std::hypot(H(j, j), H(j + 1, j));
    cs(j) = r > 0 ? H(j, j) / r : 1.0;
    sn(j) = r > 0 ? H(j + 1, j) / r : 0.0;
    H(j, j) = r;
    H(j + 1, j) = 0;
    g(j + 1) = -sn(j) * g(j);
    g(j) = cs(j) * g(j);
    resid = std::abs(g(j + 1));
    k = j + 1;
    if (resid <= tol * beta || V.col(j + 1).hasNaN()) break;
  }
  const Eigen::VectorXd y = H.topLeftCorner(k, k).triangularView<Eigen::Upper>().solve(g.head(k));
  z = V.leftCols(k) * y;
  return resid <= tol * beta;
}

}  // namespace normlab::analysis
