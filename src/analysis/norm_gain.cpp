// norm_gain.cpp: the largest singular value of a norm site's Jacobian (analysis/norm_gain.h).
#include "analysis/norm_gain.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "analysis/linalg.h"

namespace normlab::analysis {

namespace {

// The largest eigenvalue of diag(lam) - k w w^T (k >= 0), exactly to rounding (see the header).
double largest_eigenvalue_of_downdate(const std::vector<double>& lam, const std::vector<double>& w, double k) {
  const size_t n = lam.size();
  size_t top = 0;
  for (size_t i = 1; i < n; i++)
    if (lam[i] > lam[top]) top = i;
  const double m = lam[top];
  size_t ties = 0;
  for (size_t i = 0; i < n; i++) ties += lam[i] == m;
  // an eigenvector of m in span(e_i : lam_i = m) orthogonal to w exists: m is the largest (the
  // downdate lowers no eigenvalue above the diagonal's largest)
  if (ties > 1 || w[top] == 0.0 || k == 0.0) return m;
  // the root in (max(the next pole, m - k |w|^2), m): f increases from -inf (or below 0) to +inf
  double next_pole = -std::numeric_limits<double>::infinity(), deflated = -std::numeric_limits<double>::infinity(),
         ww = 0;
  for (size_t i = 0; i < n; i++) {
    ww += w[i] * w[i];
    if (i == top) continue;
    if (w[i] != 0.0) next_pole = std::max(next_pole, lam[i]);
    else deflated = std::max(deflated, lam[i]);  // an eigenvalue itself (e_i, w_i = 0)
  }
  const auto f = [&](double x) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
      if (w[i] != 0.0) s += w[i] * w[i] / (lam[i] - x);
    return k * s - 1.0;
  };
  double lo = std::max(next_pole, m - k * ww), hi = m;
  for (int it = 0; it < 200 && hi - lo > 4 * std::numeric_limits<double>::epsilon() * std::abs(m); it++) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    (f(mid) > 0 ? hi : lo) = mid;
  }
  return std::max(0.5 * (lo + hi), deflated);
}

}  // namespace

double norm_jacobian_gain(NormKind kind, const double* z, const NormParams<double>& p, int d, double eps) {
  const double scale = std::abs(p.scale);
  switch (kind) {
    case NormKind::RMSNorm:
    case NormKind::SSNorm: {
      const std::vector<double> g = effective_gain(kind, p, d);
      double zz = 0;
      for (int i = 0; i < d; i++) zz += z[i] * z[i];
      const double r2 = zz / d + eps, b = zz / d / r2;
      const double k = zz > 0 ? (2.0 - b) * b / zz : 0.0;
      std::vector<double> lam(static_cast<size_t>(d)), w(static_cast<size_t>(d));
      for (int i = 0; i < d; i++) lam[size_t(i)] = g[size_t(i)] * g[size_t(i)], w[size_t(i)] = g[size_t(i)] * z[i];
      return scale / std::sqrt(r2) * std::sqrt(std::max(0.0, largest_eigenvalue_of_downdate(lam, w, k)));
    }
    case NormKind::DyT:
    case NormKind::Derf: {
      double top = 0;
      for (double v : norm_jacobian_diagonal(kind, z, p, d)) top = std::max(top, std::abs(v));
      return top;
    }
    case NormKind::LayerNorm:
    case NormKind::L2:
      break;
  }
  return singular_values(norm_jacobian_closed_form(kind, z, p, d, eps), d, d).front();
}

}  // namespace normlab::analysis
