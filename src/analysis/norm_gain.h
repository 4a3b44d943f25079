// norm_gain.h: the gain of a norm site, the largest singular value of its Jacobian at one input row,
// without the SVD of the dense d x d matrix where the kind's structure gives it exactly: O(d) for the
// RMS kinds and the point-wise ones, where an SVD of a 2048-wide model's Jacobian takes seconds.
#pragma once

#include "model/norm_of.h"

namespace normlab::analysis {

// ||J||_2 of the site's closed-form Jacobian (norm_jacobian_closed_form) at input row z (d values):
// - RMSNorm, SSNorm: J = (s / r) diag(g) (I - z z^T / (d r^2)), r^2 = mean(z^2) + eps, so J J^T =
//   (s / r)^2 (G^2 - k w w^T) with w = g * z and k = (2 - b) b / |z|^2, b = mean(z^2) / r^2: a diagonal
//   minus a rank-one matrix, whose largest eigenvalue is the largest root of the secular equation
//   k sum_i w_i^2 / (g_i^2 - x) = 1 (found by bisection to rounding), or the largest g_i^2 itself when
//   it repeats or its w_i is 0;
// - DyT, Derf: J is diagonal: the largest |J_ii|;
// - LayerNorm, L2: the dense closed form's largest singular value (LAPACK).
double norm_jacobian_gain(NormKind kind, const double* z, const NormParams<double>& p, int d, double eps);

}  // namespace normlab::analysis
