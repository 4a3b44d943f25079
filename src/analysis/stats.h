// stats.h: how `normlab theory` turns per-seed numbers into a verdict. One rule for every claim:
// the per-seed values of the claim's quantity give a mean and a 95% Student-t confidence interval;
// the claim "holds" when the interval lies inside the claimed region, is "violated" when it lies
// inside the complement, and is "not distinguishable at this scale" when it straddles the border.
// Growth claims compare two fitted laws (a N + b against a log N + b; power law against exponential)
// by the log ratio of their residual sums of squares, per seed, under the same rule.
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

// The region where a claim's quantity must lie for the claim to hold.
struct Region {
  enum Kind { Above, Below, Between } kind = Above;
  double a = 0, b = 0;  // Above a; Below a; Between a and b
  static Region above(double a) { return {Above, a, 0}; }
  static Region below(double a) { return {Below, a, 0}; }
  static Region between(double a, double b) { return {Between, a, b}; }
  std::string text() const;  // e.g. "> 0", "in [0.75, 1.25]"
};

inline constexpr const char* kHolds = "holds";
inline constexpr const char* kViolated = "violated";
inline constexpr const char* kUndecided = "not distinguishable at this scale";

// holds / violated / not distinguishable at this scale, from the confidence interval (for n = 1 the
// interval is the value itself: one seed decides nothing about spread, and the table says n).
std::string decide(const SeedSummary& s, const Region& claimed);

// Least-squares fit y = a f(x) + b; returns the residual sum of squares (and a, b if asked).
double fit_rss(const std::vector<double>& x, const std::vector<double>& y, const std::function<double(double)>& f,
               double* a = nullptr, double* b = nullptr);
// log(RSS of law g / RSS of law f): > 0 when f fits better (both laws have two parameters).
double log_rss_ratio(const std::vector<double>& x, const std::vector<double>& y,
                     const std::function<double(double)>& f, const std::function<double(double)>& g);

nlohmann::json to_json(const SeedSummary& s);

}  // namespace normlab::analysis
