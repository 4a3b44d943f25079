// linalg.cpp: singular values through LAPACK dgesdd (column-major: a row-major matrix is passed as
// its transpose, which has the same singular values).
#include "analysis/linalg.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fmt/format.h>
#include <limits>

#include "util/error.h"

extern "C" void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda,
                        double* s, double* u, const int* ldu, double* vt, const int* ldvt,
                        double* work, const int* lwork, int* iwork, int* info, size_t jobz_len);

namespace normlab::analysis {

std::vector<double> singular_values(std::vector<double> a, int rows, int cols) {
  if (rows == 0 || cols == 0) return {};
  // column-major m x n = the transpose of our row-major rows x cols
  const int m = cols, n = rows, lda = cols, one = 1;
  for (size_t i = 0; i < a.size(); i++)  // LAPACK would answer "info -4" (an argument is bad)
    if (!std::isfinite(a[i]))
      throw Error(fmt::format("the {} x {} matrix whose singular values were asked for holds a non-finite value ({} at "
                              "row {}, column {}): the model's activations or derivatives overflowed",
                              rows, cols, a[i], i / size_t(cols), i % size_t(cols)));
  std::vector<double> s(std::min(m, n));
  std::vector<int> iwork(8 * size_t(std::min(m, n)));
  double query = 0;
  int lwork = -1, info = 0;
  double dummy = 0;
  dgesdd_("N", &m, &n, a.data(), &lda, s.data(), &dummy, &one, &dummy, &one, &query, &lwork,
          iwork.data(), &info, 1);
  lwork = int(query) + 1;
  std::vector<double> work(static_cast<size_t>(lwork));
  dgesdd_("N", &m, &n, a.data(), &lda, s.data(), &dummy, &one, &dummy, &one, work.data(), &lwork,
          iwork.data(), &info, 1);
  if (info != 0)
    throw Error(fmt::format("singular value decomposition of a {} x {} matrix failed (LAPACK info {})",
                            rows, cols, info));
  return s;  // dgesdd returns them in descending order
}

double rank_tolerance(const std::vector<double>& sv, int rows, int cols) {
  return sv.empty() ? 0.0 : double(std::max(rows, cols)) * std::numeric_limits<double>::epsilon() * sv[0];
}

int numerical_rank(const std::vector<double>& sv, double tol) {
  return int(std::count_if(sv.begin(), sv.end(), [&](double s) { return s > tol; }));
}

double row_norm(const double* x, int C) {
  double s = 0;
  for (int c = 0; c < C; c++) s += x[c] * x[c];
  return std::sqrt(s);
}

double row_norm(const float* x, int C) {
  double s = 0;
  for (int c = 0; c < C; c++) s += double(x[c]) * double(x[c]);
  return std::sqrt(s);
}

}  // namespace normlab::analysis
