// linalg.h: the dense linear algebra the instruments need, in double: singular values (LAPACK's
// divide-and-conquer dgesdd, from OpenBLAS), spectral norm, and numerical rank with numpy's
// default tolerance.
#pragma once

#include <vector>

namespace normlab::analysis {

// Singular values of the row-major rows x cols matrix a, in descending order.
std::vector<double> singular_values(std::vector<double> a, int rows, int cols);

// The tolerance below which a singular value counts as zero: max(rows, cols) * eps * sigma_max
// (numpy.linalg.matrix_rank's default), and the number of singular values above it.
double rank_tolerance(const std::vector<double>& sv, int rows, int cols);
int numerical_rank(const std::vector<double>& sv, double tol);
// ||x|| of one row of C values.
double row_norm(const double* x, int C);
double row_norm(const float* x, int C);  // (summed in double: a float32 model's readings)

}  // namespace normlab::analysis
