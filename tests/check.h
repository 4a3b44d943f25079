// check.h: shared test helpers: seeded random tensors, named tolerance comparison that reports the
// tensor name and the worst index, and central finite differences of a scalar function.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "util/rng.h"

namespace normlab::test {

inline std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// Expects |a - b| <= atol + rtol * |b| elementwise; on failure names the tensor and worst index.
inline void expect_close(const std::string& name, const std::vector<double>& a,
                         const std::vector<double>& b, double rtol, double atol) {
  ASSERT_EQ(a.size(), b.size()) << name;
  double worst = 0;  // largest excess over the tolerance; NaN counts as infinite
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); i++) {
    double excess = std::abs(a[i] - b[i]) - (atol + rtol * std::abs(b[i]));
    if (std::isnan(excess)) excess = INFINITY;
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  EXPECT_TRUE(worst <= 0) << name << ": worst index " << worst_i << " got " << a[worst_i]
                          << " expected " << b[worst_i] << " (rtol " << rtol << ", atol " << atol
                          << ")";
}

// Central differences of f at x, for every coordinate: (f(x + h e_i) - f(x - h e_i)) / 2h.
inline std::vector<double> finite_diff(std::vector<double>& x, const std::function<double()>& f,
                                       double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double saved = x[i];
    x[i] = saved + h;
    const double fp = f();
    x[i] = saved - h;
    const double fm = f();
    x[i] = saved;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// Tolerance of a central difference with step h in double: truncation O(h^2 f''') plus rounding
// O(eps |f| / h); with h = 1e-6 both are ~1e-9 relative for O(1) functions.
inline constexpr double kFdRtol = 1e-6;
inline constexpr double kFdAtol = 1e-7;

}  // namespace normlab::test
