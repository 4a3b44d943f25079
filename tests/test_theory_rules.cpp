// test_theory_rules.cpp: the verdict rules of `normlab theory` (theory/rules.h), one per kind of claim,
// on constructed inputs (an identity, a bound with and without a counterexample, laws that fit, both fit
// or none does, effects of the right direction and too small a size, degenerate inputs), and the
// statistics behind them (analysis/stats.h: intervals, Spearman, the F distribution's tail).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "analysis/stats.h"
#include "theory/checks.h"  // (detail::power_law)
#include "theory/rules.h"

using namespace normlab;
using namespace normlab::analysis;
using namespace normlab::theory;

TEST(Stats, IntervalsAndVerdicts) {
  // mean 2, sample sd 1, n = 4: the 95% t-interval is 2 -+ 3.182 / 2
  const SeedSummary s = summarize({1, 2, 2, 3});
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_NEAR(s.sd, std::sqrt(2.0 / 3.0), 1e-15);
  EXPECT_NEAR(s.hi - s.mean, 3.182 * std::sqrt(2.0 / 3.0) / 2, 1e-12);
  const SeedSummary one = summarize({0.3});
  EXPECT_EQ(one.lo, 0.3);
  // law fits: y = 3 N + 1 exactly is linear (RSS 0), not logarithmic
  const std::vector<double> n = {1, 2, 4, 8, 16};
  std::vector<double> lin, lg;
  for (double v : n) lin.push_back(3 * v + 1), lg.push_back(3 * std::log(v) + 1);
  double a = 0, b = 0;
  EXPECT_NEAR(fit_rss(n, lin, [](double v) { return v; }, &a, &b), 0.0, 1e-20);
  EXPECT_NEAR(a, 3.0, 1e-12);
  EXPECT_NEAR(b, 1.0, 1e-12);
  const auto id = [](double v) { return v; };
  const auto log = [](double v) { return std::log(v); };
  EXPECT_GT(log_rss_ratio(n, lin, id, log), 10);
  EXPECT_LT(log_rss_ratio(n, lg, id, log), -10);
  // Welch, worked by hand: a = {1, 2, 3, 4} (mean 2.5, var 5/3), b = {2, 4, 6, 8} (mean 5, var 20/3);
  // squared standard errors 5/12 and 20/12 sum to 25/12; df = (25/12)^2 / ((5/12)^2/3 + (20/12)^2/3)
  // = 4.41 -> 4 (t = 2.776); half width 2.776 sqrt(25/12)
  const Difference d = welch_difference(summarize({1, 2, 3, 4}), summarize({2, 4, 6, 8}));
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_NEAR(d.df, (625.0 / 144) / ((25.0 / 144 + 400.0 / 144) / 3), 1e-12);
  EXPECT_NEAR(d.hi - d.mean, 2.776 * std::sqrt(25.0 / 12), 1e-12);
  EXPECT_LT(d.lo, 0.0);  // 2.5 - 4.007: not resolved with these spreads
  EXPECT_TRUE(std::isnan(welch_difference(summarize({1}), summarize({2, 3})).lo));
  // seed_difference: the same groups paired by seed (b - a = {1, 2, 3, 4}: mean 2.5, sd sqrt(5/3),
  // t(3) = 3.182): far narrower than Welch's, because each seed's shared part cancels
  using Seeds = std::multimap<std::string, double>;
  const Seeds sa{{"1", 1}, {"2", 2}, {"3", 3}, {"4", 4}}, sb{{"1", 2}, {"2", 4}, {"3", 6}, {"4", 8}};
  const SeedDifference p = seed_difference(sa, sb);
  EXPECT_EQ(p.kind, "paired");
  EXPECT_EQ(p.how(), "paired by seed, 4 seeds");
  EXPECT_DOUBLE_EQ(p.mean, 2.5);
  EXPECT_NEAR(p.hi - p.mean, 3.182 * std::sqrt(5.0 / 3 / 4), 1e-12);
  EXPECT_GT(p.lo, 0.0);  // resolved when paired
  // other seeds on one side, or a seed twice (runs that differ in something else): Welch, as above
  const SeedDifference w = seed_difference(sa, Seeds{{"1", 2}, {"2", 4}, {"3", 6}, {"5", 8}});
  EXPECT_EQ(w.kind, "welch");
  EXPECT_EQ(w.how(), "Welch, 4 and 4 seeds");
  EXPECT_DOUBLE_EQ(w.lo, d.lo);
  EXPECT_EQ(seed_difference(sa, Seeds{{"1", 2}, {"1", 4}, {"3", 6}, {"4", 8}}).kind, "welch");
  const SeedDifference single = seed_difference(sa, Seeds{{"1", 2}});
  EXPECT_EQ(single.kind, "single");
  EXPECT_DOUBLE_EQ(single.mean, 2 - 2.5);
  EXPECT_TRUE(std::isnan(single.lo));
}

// Spearman's rank correlation by hand: 1 - 6 sum d^2 / (n (n^2 - 1)) without ties; with ties the
// Pearson correlation of the average ranks.
TEST(Stats, SpearmanRankCorrelation) {
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}), 1 - 6.0 * 4 / (5 * 24), 1e-15);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {10, 5, 1, -3}), -1.0, 1e-15);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 100, 1000, 1e6}), 1.0, 1e-15);  // ranks, not values
  // ties: y ranks {1.5, 1.5, 3, 4} against {1, 2, 3, 4}: Pearson of the ranks
  const double r = spearman({1, 2, 3, 4}, {7, 7, 8, 9});
  const std::vector<double> rx = {1, 2, 3, 4}, ry = {1.5, 1.5, 3, 4};
  double sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < 4; i++) sxy += (rx[i] - 2.5) * (ry[i] - 2.5), sxx += (rx[i] - 2.5) * (rx[i] - 2.5), syy += (ry[i] - 2.5) * (ry[i] - 2.5);
  EXPECT_NEAR(r, sxy / std::sqrt(sxx * syy), 1e-15);
  EXPECT_TRUE(std::isnan(spearman({1, 2}, {1, 2})));
}

// The F distribution's upper tail against closed forms: with d1 = 2, P(F > x) = (1 + 2x/d2)^(-d2/2);
// with d1 = 1, F = t^2, so at the 97.5% quantile of Student's t the tail is 5% (the table's 3 decimals).
TEST(Rules, FUpperTailAgainstClosedForms) {
  for (double d2 : {1.0, 3.0, 7.0, 30.0})
    for (double x : {0.1, 1.0, 2.5, 10.0})
      EXPECT_NEAR(f_upper_tail(x, 2, d2), std::pow(1 + 2 * x / d2, -d2 / 2), 1e-12) << "d2 " << d2 << " x " << x;
  const std::pair<int, double> t975[] = {{1, 12.706}, {4, 2.776}, {10, 2.228}, {30, 2.042}};
  for (const auto& [df, t] : t975) EXPECT_NEAR(f_upper_tail(t * t, 1, df), 0.05, 2e-4) << "df " << df;
  EXPECT_EQ(f_upper_tail(0, 3, 4), 1.0);
}

// Each kind's rule on constructed inputs; each case notes what the one old rule (an interval against
// a region, with bands and cuts) said where it was wrong.
TEST(Rules, IdentityIsExactOrFails) {
  EXPECT_EQ(judge_identity({1e-9}, {1e-15, 3e-14}).verdict, Verdict::Exact);
  EXPECT_EQ(judge_identity({1e-9}, {1e-15, 0.4}).verdict, Verdict::Fails);  // one seed is enough
  EXPECT_EQ(judge_identity({0}, {0, 0, 0}).verdict, Verdict::Exact);
  EXPECT_EQ(judge_identity({0}, {1, 5}, {true, true}).verdict, Verdict::Vacuous);
  EXPECT_EQ(judge_identity({0}, {0, 5}, {false, true}).verdict, Verdict::Exact);  // the vacuous seed is not checked
}

TEST(Rules, BoundIsSatisfiedHasACounterexampleOrIsVacuous) {
  // satisfied, however loose: the old rule judged a bound as a law and could call a loose one "violated"
  const Judgement loose = judge_bound({}, {0.01, 0.02, 0.015}, {5, 5, 5});
  EXPECT_EQ(loose.verdict, Verdict::Satisfied);
  EXPECT_NEAR(loose.numbers["ratio_to_bound"][1].get<double>(), 0.02 / 5, 1e-15);
  // one seed beyond the bound is a counterexample, whatever the mean (0.9 +- spread was "holds" by
  // an interval against "< 1")
  EXPECT_EQ(judge_bound({}, {0.5, 0.6, 1.3}, {1, 1, 1}).verdict, Verdict::Counterexample);
  EXPECT_EQ(judge_bound({}, {1.0, 0.5}, {1, 1}).verdict, Verdict::Satisfied);  // on the bound: within
  EXPECT_EQ(judge_bound({false}, {2, 0.5}, {1, 1}).verdict, Verdict::Counterexample);  // a lower bound
  EXPECT_EQ(judge_bound({}, {3, 4}, {1, 1}, {true, true}).verdict, Verdict::Vacuous);
  EXPECT_EQ(judge_bound({}, {3, 0.5}, {1, 1}, {true, false}).verdict, Verdict::Satisfied);
}

namespace {

// three seeds of y = f(x) plus fixed noise of size `noise` (and a per-seed offset), x = 1 .. 8
std::vector<Series> seeds_of(const std::function<double(double)>& f, double noise, double offset = 0) {
  const double e[3][8] = {{0.3, -0.9, 0.5, 0.1, -0.4, 0.8, -0.2, 0.6},
                          {-0.7, 0.4, -0.1, 0.9, 0.2, -0.5, 0.7, -0.3},
                          {0.5, 0.2, -0.6, -0.3, 0.8, 0.1, -0.8, 0.4}};
  std::vector<Series> out(3);
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 8; i++) {
      const double x = i + 1;
      out[size_t(k)].x.push_back(x);
      out[size_t(k)].y.push_back(f(x) + noise * e[k][i] + offset * (k - 1));
    }
  return out;
}

const Law kLinear{Law::Shape, "linear", [](double x) { return x; }};
const Law kLog{Law::Shape, "logarithmic", [](double x) { return std::log(x); }};

}  // namespace

TEST(Rules, ALawThatFitsHolds) {
  // y = 2x + 1 with noise 0.1: the linear law fits, the logarithmic one and no growth do not
  const LawRule rule{"x", "y", {kLinear, kLog, Law::flat()}};
  const Judgement j = judge_law(rule, seeds_of([](double x) { return 2 * x + 1; }, 0.1));
  EXPECT_EQ(j.verdict, Verdict::Holds) << j.text;
  EXPECT_TRUE(j.numbers["laws"][0]["fits"].get<bool>());
  EXPECT_FALSE(j.numbers["laws"][1]["fits"].get<bool>());
  EXPECT_NEAR(j.numbers["laws"][0]["a"].get<double>(), 2.0, 0.05);
  // the same data against a claimed logarithmic law: violated (it does not fit, another does)
  const Judgement other = judge_law({"x", "y", {kLog, kLinear, Law::flat()}}, seeds_of([](double x) { return 2 * x + 1; }, 0.1));
  EXPECT_EQ(other.verdict, Verdict::Violated) << other.text;
  // a claimed law with a stated sign: the same fit with a falling scale is violated
  const LawRule rising{"x", "y", {kLinear, Law::flat()}, 0, 1};
  EXPECT_EQ(judge_law(rising, seeds_of([](double x) { return -2 * x; }, 0.1)).verdict, Verdict::Violated);
}

TEST(Rules, TwoLawsThatBothFitAreNotDistinguishable) {
  // over x = 1 .. 8 a gentle log and a line differ by less than the seeds' spread (noise 1): both fit,
  // and neither carries 95% of the Akaike weight
  const Judgement j = judge_law({"x", "y", {kLog, kLinear, Law::flat()}},
                                seeds_of([](double x) { return 0.5 * std::log(x); }, 1.0));
  EXPECT_EQ(j.verdict, Verdict::NotDistinguishable) << j.text;
  EXPECT_TRUE(j.numbers["laws"][0]["fits"].get<bool>());
  EXPECT_TRUE(j.numbers["laws"][1]["fits"].get<bool>());
}

TEST(Rules, NoLawFitsWhenNoneDoes) {
  // a zigzag far beyond the seeds' spread: neither a line, a log nor a constant
  const Judgement j = judge_law({"x", "y", {kLinear, kLog, Law::flat()}},
                                seeds_of([](double x) { return int(x) % 2 ? 5.0 : -5.0; }, 0.1));
  EXPECT_EQ(j.verdict, Verdict::NoLawFits) << j.text;
  // a series that does not grow at all is "no growth", not an undecided exponential (the old rule
  // compared only the two growth laws' residuals and printed "not distinguishable")
  const LawRule growth{"x", "log y", {{Law::Shape, "exponential", [](double x) { return x; }}, kLog, Law::flat("no growth")},
                       0, 1};
  const Judgement flat = judge_law(growth, seeds_of([](double) { return 2.0; }, 0.1, 0.5));
  EXPECT_EQ(flat.verdict, Verdict::Violated) << flat.text;
  EXPECT_EQ(flat.numbers["best"], "no growth");
}

TEST(Rules, DeepNetLikeSlowGrowthIsNotFlat) {
  // log ||dF|| = 0.18 log N + c with a small spread: the old rule held "q in [-0.25, 0.25]" as "does not
  // grow"; the interval of q excludes 0, and the free power law beats the flat one
  const LawRule rule{"N", "log ||dF||", {Law::flat("independent of N"), detail::power_law()}};
  const Judgement j = judge_law(rule, seeds_of([](double x) { return 0.18 * std::log(x); }, 0.01, 0.3));
  EXPECT_EQ(j.verdict, Verdict::Violated) << j.text;
  EXPECT_EQ(j.numbers["best"], detail::power_law().name);
}

TEST(Rules, EffectDirectionAndSizeAreJudgedApart) {
  // the right direction, smaller than the stated size: the old rule's "< -1 decade" made this
  // "violated" although the direction holds
  const EffectRule decade = EffectRule::towards(-1).stated(1.0, "one decade (the source)");
  const Judgement j = judge_effect(decade, {-0.43, -0.55, -0.32, -0.47});
  EXPECT_EQ(j.verdict, Verdict::Holds) << j.text;
  EXPECT_EQ(j.size, Size::Smaller);
  EXPECT_EQ(judge_effect(decade, {-1.6, -1.4, -1.5}).size, Size::AsStated);
  EXPECT_EQ(judge_effect(decade, {-0.5, -1.6, -1.0}).size, Size::NotDistinguishable);
  // no stated size: "size not claimed", whatever the magnitude
  EXPECT_EQ(judge_effect(EffectRule::towards(1), {0.2, 0.25, 0.18}).size, Size::NotClaimed);
  // the wrong direction; an interval across 0; one seed
  EXPECT_EQ(judge_effect(EffectRule::towards(1), {-0.2, -0.25, -0.18}).verdict, Verdict::Violated);
  EXPECT_EQ(judge_effect(EffectRule::towards(1), {-0.2, 0.25, 0.1}).verdict, Verdict::NotDistinguishable);
  EXPECT_EQ(judge_effect(EffectRule::towards(1), {5}).verdict, Verdict::NotDistinguishable);
  // a claim of no effect is refuted by an interval that excludes 0 and otherwise never shown
  EXPECT_EQ(judge_effect(EffectRule::towards(0), {0.3, 0.35, 0.32}).verdict, Verdict::Violated);
  EXPECT_EQ(judge_effect(EffectRule::towards(0), {0.3, -0.35, 0.02}).verdict, Verdict::NotDistinguishable);
  // a comparison: the paired difference, the arms in the text
  const Judgement c = judge_effect(EffectRule::towards(1).between("without", "with"), {1, 2, 1.5}, {0, 0, 0}, {1, 2, 1.5});
  EXPECT_EQ(c.verdict, Verdict::Holds);
  EXPECT_NE(c.text.find("without 0"), std::string::npos) << c.text;
}

// The rules on degenerate inputs: no points, too few x, non-finite values, one repetition.
TEST(Rules, DegenerateInputsAreNotDistinguishableNeverACrash) {
  const LawRule rule{"x", "y", {kLinear, Law::flat()}};
  EXPECT_EQ(judge_law(rule, {}).verdict, Verdict::NotDistinguishable);
  EXPECT_EQ(judge_law(rule, {Series{{1, 2}, {1, 2}}}).verdict, Verdict::NotDistinguishable);  // 2 distinct x
  // non-finite points are left out; a seed without points adds no offset
  std::vector<Series> s = seeds_of([](double x) { return 2 * x + 1; }, 0.1);
  s[0].y[3] = std::nan("");
  s[1].y[5] = INFINITY;
  s.push_back(Series{});
  const Judgement j = judge_law(rule, s);
  EXPECT_EQ(j.verdict, Verdict::Holds) << j.text;
  EXPECT_EQ(j.numbers["points"].get<int>(), 22);
  // one repetition: no spread to test a fit; AIC alone chooses, and the text says so
  const Judgement one = judge_law(rule, {seeds_of([](double x) { return 2 * x + 1; }, 0.1)[0]});
  EXPECT_EQ(one.verdict, Verdict::Holds) << one.text;
  EXPECT_FALSE(one.numbers["testable"].get<bool>());
  EXPECT_NE(one.text.find("AIC alone"), std::string::npos) << one.text;
  EXPECT_EQ(judge_effect(EffectRule::towards(1), {}).verdict, Verdict::NotDistinguishable);
  EXPECT_EQ(judge_effect(EffectRule::towards(1), {1.0, std::nan(""), 2.0}).verdict, Verdict::NotDistinguishable);
  EXPECT_EQ(judge_identity({1e-9}, {std::nan("")}).verdict, Verdict::Fails);  // a non-finite error is no match
  EXPECT_EQ(judge_bound({}, {}, {}).verdict, Verdict::Vacuous);
  EXPECT_EQ(direction_of(std::nan(""), 1, 1), Verdict::NotDistinguishable);
}
