// stats.h: the statistics of seeds: summaries with 95% Student-t intervals, differences between two
// groups (paired by seed or Welch), least-squares fits of a law y = a f(x) + b, and Spearman's rank
// correlation. The verdict rules that read them: theory/rules.h.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace normlab::analysis {

struct SeedSummary {
  int n = 0;
  double mean = 0, sd = 0;  // sd: sample standard deviation (0 for n = 1)
  double lo = 0, hi = 0;    // 95% Student-t confidence interval of the mean (= mean for n = 1)
  std::vector<double> values;
};
SeedSummary summarize(const std::vector<double>& values);

// The 95% Welch interval of mean(b) - mean(a) for two groups of seeds with unequal variances: the
// Welch-Satterthwaite degrees of freedom, rounded down (so the interval is slightly conservative).
// Needs n >= 2 in both groups (else lo and hi are NaN). A gap is resolved when 0 is outside [lo, hi].
struct Difference {
  double mean = 0, lo = 0, hi = 0;
  double df = 0;
};
Difference welch_difference(const SeedSummary& a, const SeedSummary& b);

// The one way a study compares two settings over seeds: the 95% interval of mean(b) - mean(a),
// paired by seed when both finished the same seeds (at least 2; what a seed fixes, the
// initialization and the batches, then cancels in each difference), else Welch over the two groups
// (n >= 2 on each side), else no interval (lo, hi NaN). `a`, `b`: seed key -> value; a key that
// occurs twice on a side (runs that differ in something else) rules out pairing.
struct SeedDifference {
  std::string kind;  // "paired", "welch" or "single"
  int n = 0;         // seeds paired, or the smaller group
  double mean = 0, lo = 0, hi = 0;
  std::string how() const;  // "paired by seed, 3 seeds", "Welch, 3 and 2 seeds", "one seed on a side: no interval"
  int n_a = 0, n_b = 0;
};
SeedDifference seed_difference(const std::multimap<std::string, double>& a, const std::multimap<std::string, double>& b);

// Least-squares fit y = a f(x) + b; returns the residual sum of squares (and a, b if asked).
double fit_rss(const std::vector<double>& x, const std::vector<double>& y, const std::function<double(double)>& f,
               double* a = nullptr, double* b = nullptr);
// log(RSS of law g / RSS of law f): > 0 when f fits better (both laws have two parameters).
double log_rss_ratio(const std::vector<double>& x, const std::vector<double>& y,
                     const std::function<double(double)>& f, const std::function<double(double)>& g);

nlohmann::json to_json(const SeedSummary& s);

// num / den for two norms (or other non-negative readings): NaN, no ratio, when den is 0 or either is
// not finite (a 0 / 0 is not a ratio of 0 or of 1e300). JSON writes it null; ratio_text prints it.
double norm_ratio(double num, double den);
// "%.{digits}g" of a ratio, or `undefined` for a NaN one (norm_ratio's 0 denominator)
std::string ratio_text(double ratio, int digits, const std::string& undefined = "undefined (0 / 0)");

// Spearman's rank correlation of y with x (average ranks for ties); NaN for fewer than 3 points.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace normlab::analysis
