// gmres.h: GMRES for a nonsymmetric linear system given only as a product (the shift-invert
// solver's J^{-1} products on non-causal models, lanczos.cpp).
#pragma once

#include <Eigen/Dense>
#include <functional>

namespace normlab::analysis {

// GMRES (no restart) for A z = b with at most max_it iterations: Arnoldi with modified Gram-Schmidt
// done twice, Givens rotations for the least-squares problem. True when ||b - A z|| <= tol ||b||;
// z is the best iterate either way (0 for b = 0).
bool gmres(const std::function<void(const Eigen::VectorXd&, Eigen::VectorXd&)>& A, const Eigen::VectorXd& b,
           Eigen::VectorXd& z, int max_it, double tol);

}  // namespace normlab::analysis
