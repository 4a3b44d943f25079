// stats.cpp: seed summaries, confidence intervals, law fits and rank correlation (stats.h).
#include "analysis/stats.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <fmt/format.h>

namespace normlab::analysis {

namespace {

// two-sided 95% quantile of Student's t with df degrees of freedom (df = 1 .. 30; the normal beyond)
double t975(int df) {
  static const double q[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                             2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                             2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  return df >= 1 && df <= 30 ? q[df - 1] : 1.960;
}

// average ranks (1-based), ties sharing the mean of their ranks
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t i, size_t j) { return v[i] < v[j]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) j++;
    for (size_t k = i; k <= j; k++) r[order[k]] = 0.5 * double(i + j) + 1;  // the average rank of a tie
    i = j + 1;
  }
  return r;
}

}  // namespace

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 3) return std::nan("");
  const std::vector<double> rx = ranks(x), ry = ranks(y);
  const double n = double(x.size()), mean = (n + 1) / 2;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < rx.size(); i++)
    sxy += (rx[i] - mean) * (ry[i] - mean), sxx += (rx[i] - mean) * (rx[i] - mean), syy += (ry[i] - mean) * (ry[i] - mean);
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

SeedSummary summarize(const std::vector<double>& values) {
  SeedSummary s;
  s.values = values;
  s.n = int(values.size());
  if (s.n == 0) {
    s.mean = s.lo = s.hi = s.sd = std::nan("");
    return s;
  }
  for (double v : values) s.mean += v / s.n;
  for (double v : values) s.sd += s.n > 1 ? (v - s.mean) * (v - s.mean) / (s.n - 1) : 0;
  s.sd = std::sqrt(s.sd);
  const double half = s.n > 1 ? t975(s.n - 1) * s.sd / std::sqrt(double(s.n)) : 0;
  s.lo = s.mean - half;
  s.hi = s.mean + half;
  return s;
}

Difference welch_difference(const SeedSummary& a, const SeedSummary& b) {
  Difference d;
  d.mean = b.mean - a.mean;
  if (a.n < 2 || b.n < 2) {
    d.lo = d.hi = d.df = std::nan("");
    return d;
  }
  const double va = a.sd * a.sd / a.n, vb = b.sd * b.sd / b.n;  // squared standard errors
  const double se = std::sqrt(va + vb);
  d.df = se > 0 ? (va + vb) * (va + vb) / (va * va / (a.n - 1) + vb * vb / (b.n - 1)) : double(a.n + b.n - 2);
  const double half = t975(std::max(1, int(std::floor(d.df)))) * se;
  d.lo = d.mean - half;
  d.hi = d.mean + half;
  return d;
}

SeedDifference seed_difference(const std::multimap<std::string, double>& a, const std::multimap<std::string, double>& b) {
  SeedDifference d;
  d.n_a = int(a.size()), d.n_b = int(b.size());
  // the same seeds on both sides, each once (the keys are sorted)
  bool same = a.size() == b.size() && a.size() >= 2;
  for (auto ia = a.begin(), ib = b.begin(); same && ia != a.end(); ++ia, ++ib)
    same = ia->first == ib->first && (std::next(ia) == a.end() || std::next(ia)->first != ia->first);
  std::vector<double> va, vb;
  for (const auto& [k, v] : a) va.push_back(v);
  for (const auto& [k, v] : b) vb.push_back(v);
  if (same) {
    std::vector<double> diff;
    for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) diff.push_back(ib->second - ia->second);
    const SeedSummary s = summarize(diff);
    d.kind = "paired", d.n = s.n, d.mean = s.mean, d.lo = s.lo, d.hi = s.hi;
  } else if (a.size() >= 2 && b.size() >= 2) {
    const Difference w = welch_difference(summarize(va), summarize(vb));
    d.kind = "welch", d.n = int(std::min(a.size(), b.size())), d.mean = w.mean, d.lo = w.lo, d.hi = w.hi;
  } else {
    d.kind = "single", d.n = int(std::min(a.size(), b.size()));
    d.mean = (vb.empty() || va.empty()) ? std::nan("") : summarize(vb).mean - summarize(va).mean;
    d.lo = d.hi = std::nan("");
  }
  return d;
}

std::string SeedDifference::how() const {
  if (kind == "paired") return fmt::format("paired by seed, {} seeds", n);
  if (kind == "welch") return fmt::format("Welch, {} and {} seeds", n_a, n_b);
  return "one seed on a side: no interval";
}

double fit_rss(const std::vector<double>& x, const std::vector<double>& y, const std::function<double(double)>& f,
               double* a_out, double* b_out) {
  const double n = double(x.size());
  double sf = 0, sy = 0, sff = 0, sfy = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double fi = f(x[i]);
    sf += fi, sy += y[i], sff += fi * fi, sfy += fi * y[i];
  }
  const double det = n * sff - sf * sf;
  const double a = det != 0 ? (n * sfy - sf * sy) / det : 0, b = (sy - a * sf) / n;
  double rss = 0;
  for (size_t i = 0; i < x.size(); i++) rss += (y[i] - a * f(x[i]) - b) * (y[i] - a * f(x[i]) - b);
  if (a_out) *a_out = a;
  if (b_out) *b_out = b;
  return rss;
}

double log_rss_ratio(const std::vector<double>& x, const std::vector<double>& y,
                     const std::function<double(double)>& f, const std::function<double(double)>& g) {
  const double tiny = 1e-300;
  return std::log(std::max(fit_rss(x, y, g), tiny)) - std::log(std::max(fit_rss(x, y, f), tiny));
}

nlohmann::json to_json(const SeedSummary& s) {
  return {{"n", s.n}, {"mean", s.mean}, {"sd", s.sd}, {"ci95", {s.lo, s.hi}}, {"values", s.values}};
}

double norm_ratio(double num, double den) {
  if (!std::isfinite(num) || !std::isfinite(den) || den == 0) return std::numeric_limits<double>::quiet_NaN();
  return num / den;
}

std::string ratio_text(double ratio, int digits, const std::string& undefined) {
  return std::isnan(ratio) ? undefined : fmt::format("{:.{}g}", ratio, digits);
}

}  // namespace normlab::analysis
