// rules.cpp: the rule of each kind of claim (rules.h), the F distribution's tail and Spearman's rank
// correlation.
#include "theory/rules.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <fmt/format.h>

namespace normlab::theory {

std::string to_string(Kind k) {
  switch (k) {
    case Kind::Identity: return "identity";
    case Kind::Bound: return "bound";
    case Kind::Law: return "law";
    case Kind::Effect: return "effect";
    case Kind::Comparison: return "comparison";
  }
  return "";
}

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::Exact: return "exact";
    case Verdict::Fails: return "fails";
    case Verdict::Satisfied: return "satisfied";
    case Verdict::Counterexample: return "counterexample";
    case Verdict::Holds: return "holds";
    case Verdict::Violated: return "violated";
    case Verdict::NotDistinguishable: return "not distinguishable at this scale";
    case Verdict::NoLawFits: return "no law fits";
    case Verdict::Vacuous: return "vacuous";
    case Verdict::Void: return "void (model did not learn)";
    case Verdict::Skipped: return "skipped";
  }
  return "";
}

std::string to_string(Size s) {
  switch (s) {
    case Size::NotClaimed: return "size not claimed";
    case Size::AsStated: return "size as stated";
    case Size::Smaller: return "smaller than stated";
    case Size::NotDistinguishable: return "size not distinguishable from the stated one";
  }
  return "";
}

namespace {

std::string num(double v) { return fmt::format("{:.4g}", v); }

// the continued fraction of the regularized incomplete beta function (modified Lentz)
double beta_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300, eps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::abs(d) < tiny ? tiny : d);
  double h = d;
  for (int m = 1; m <= 500; m++) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d, c = 1 + aa / c;
    d = 1 / (std::abs(d) < tiny ? tiny : d), c = std::abs(c) < tiny ? tiny : c;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d, c = 1 + aa / c;
    d = 1 / (std::abs(d) < tiny ? tiny : d), c = std::abs(c) < tiny ? tiny : c;
    const double step = d * c;
    h *= step;
    if (std::abs(step - 1) < eps) break;
  }
  return h;
}

// I_x(a, b)
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  return x < (a + 1) / (a + b + 2) ? front * beta_fraction(a, b, x) / a : 1 - front * beta_fraction(b, a, 1 - x) / b;
}

}  // namespace

double f_upper_tail(double f, double d1, double d2) {
  if (!(f > 0)) return 1;
  if (!std::isfinite(f)) return 0;
  return incomplete_beta(d2 / 2, d1 / 2, d2 / (d2 + d1 * f));
}

Judgement judge_identity(const IdentityRule& r, const std::vector<double>& errors, const std::vector<bool>& vacuous,
                         const std::string& unit) {
  Judgement j;
  double worst = 0;
  int checked = 0;
  for (size_t i = 0; i < errors.size(); i++) {
    if (i < vacuous.size() && vacuous[i]) continue;
    checked++;
    worst = std::max(worst, std::isfinite(errors[i]) ? errors[i] : INFINITY);
  }
  if (checked == 0) {
    j.verdict = Verdict::Vacuous;
    j.text = fmt::format("the premise fails on every {} ({}): nothing to check", unit, errors.size());
  } else {
    j.verdict = worst <= r.tolerance ? Verdict::Exact : Verdict::Fails;
    j.text = fmt::format("largest error {} over {} {}{} (exact: at most {:g}, the rounding of the computation)",
                         num(worst), checked, unit, checked == 1 ? "" : "s", r.tolerance);
  }
  j.numbers = {{"largest_error", worst}, {"tolerance", r.tolerance}, {"seeds_checked", checked}};
  return j;
}

Judgement judge_bound(const BoundRule& r, const std::vector<double>& values, const std::vector<double>& bounds,
                      const std::vector<bool>& vacuous, const std::string& unit) {
  Judgement j;
  int said = 0, beyond = 0;
  double lo = INFINITY, hi = -INFINITY;  // value / bound over the seeds where the bound says something
  for (size_t i = 0; i < values.size(); i++) {
    if (i < vacuous.size() && vacuous[i]) continue;
    said++;
    // beyond the bound by more than the rounding of the two numbers: a counterexample
    const double slack = 1e-9 * std::max(std::abs(bounds[i]), std::abs(values[i]));
    if (r.upper ? values[i] > bounds[i] + slack : values[i] < bounds[i] - slack) beyond++;
    const double ratio = values[i] / bounds[i];
    lo = std::min(lo, ratio), hi = std::max(hi, ratio);
  }
  if (said == 0) {
    j.verdict = Verdict::Vacuous;
    j.text = fmt::format("the bound says nothing on every {} ({})", unit, values.size());
  } else {
    j.verdict = beyond > 0 ? Verdict::Counterexample : Verdict::Satisfied;
    j.text = fmt::format("{} of {} {}{} beyond the bound; value / bound from {:.7g} to {:.7g}{}", beyond, said, unit,
                         said == 1 ? "" : "s", lo, hi,
                         said < int(values.size()) ? fmt::format(" (vacuous on {})", int(values.size()) - said) : "");
  }
  j.numbers = {{"seeds_beyond", beyond}, {"seeds_where_it_says_something", said},
               {"ratio_to_bound", said ? nlohmann::json{lo, hi} : nlohmann::json(nullptr)}, {"upper", r.upper}};
  return j;
}

// (The law rule in one place: the saturated model, each law's fit, its lack-of-fit test and the
// Akaike weights read the same points and offsets; long for that reason.)
Judgement judge_law(const LawRule& r, const std::vector<Series>& seeds, const std::string& unit) {
  Judgement j;
  // the points, each with its seed: every seed has its own offset b_s (a law is about the shape of the
  // change with x, not the level a seed sits at)
  std::vector<double> x, y;
  std::vector<size_t> seed_of;
  std::map<double, size_t> group_of;
  for (size_t k = 0; k < seeds.size(); k++)
    for (size_t i = 0; i < seeds[k].x.size(); i++)
      if (std::isfinite(seeds[k].y[i]) && std::isfinite(seeds[k].x[i])) {
        x.push_back(seeds[k].x[i]), y.push_back(seeds[k].y[i]), seed_of.push_back(k);
        group_of.emplace(seeds[k].x[i], group_of.size());
      }
  // (a seed without points, e.g. a collapse at the rounding floor, has no offset to fit)
  const double n = double(x.size()), groups = double(group_of.size()),
               n_seeds = double(std::set<size_t>(seed_of.begin(), seed_of.end()).size());
  if (groups < 3) {
    j.verdict = Verdict::NotDistinguishable;
    j.text = fmt::format("{} distinct x: too few to fit a law", group_of.size());
    j.numbers = {{"points", x.size()}};
    return j;
  }
  // the saturated model the laws are tested against: a value per x plus an offset per seed (backfitted;
  // exact in a few sweeps when every seed has every x); its residual is the spread between seeds
  std::vector<double> level(group_of.size(), 0.0), offset(seeds.size(), 0.0);
  for (int sweep = 0; sweep < 200; sweep++) {
    std::vector<double> sum(level.size(), 0.0), count(level.size(), 0.0), osum(offset.size(), 0.0), ocount(offset.size(), 0.0);
    for (size_t i = 0; i < x.size(); i++) sum[group_of[x[i]]] += y[i] - offset[seed_of[i]], count[group_of[x[i]]]++;
    for (size_t g = 0; g < level.size(); g++) level[g] = sum[g] / count[g];
    for (size_t i = 0; i < x.size(); i++) osum[seed_of[i]] += y[i] - level[group_of[x[i]]], ocount[seed_of[i]]++;
    for (size_t k = 0; k < offset.size(); k++) offset[k] = ocount[k] > 0 ? osum[k] / ocount[k] : 0;
  }
  double ss_pure = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double e = y[i] - level[group_of[x[i]]] - offset[seed_of[i]];
    ss_pure += e * e;
  }
  const double df_pure = n - (groups + n_seeds - 1);
  const bool testable = df_pure > 0 && ss_pure > 1e-300 * n;
  struct Fit {
    double a = 0, rss = 0, p = 1, p_slope = 0, aic = 0, weight = 0;
    bool fits = true;
    std::vector<double> a_by_seed;
  };
  // a law's least-squares fit with an offset per seed: y - f(x) (Fixed), y (Flat) or y against f(x)
  // (Shape) centred within each seed
  auto fit_law = [&](const Law& law, const std::vector<size_t>& which, double& a_out) {
    std::map<size_t, double> ym, fm, cnt;
    for (size_t i : which) ym[seed_of[i]] += y[i], fm[seed_of[i]] += law.f(x[i]), cnt[seed_of[i]]++;
    for (auto& [k, v] : ym) v /= cnt[k], fm[k] /= cnt[k];
    double a = law.form == Law::Fixed ? 1 : 0;
    if (law.form == Law::Shape) {
      double sfy = 0, sff = 0;
      for (size_t i : which) {
        const double fc = law.f(x[i]) - fm[seed_of[i]];
        sfy += fc * (y[i] - ym[seed_of[i]]), sff += fc * fc;
      }
      a = sff > 0 ? sfy / sff : 0;
    }
    double rss = 0;
    for (size_t i : which) {
      const double e = (y[i] - ym[seed_of[i]]) - a * (law.f(x[i]) - fm[seed_of[i]]);
      rss += e * e;
    }
    a_out = a;
    return rss;
  };
  std::vector<size_t> all(x.size());
  std::iota(all.begin(), all.end(), 0);
  double unused = 0;
  const double rss_flat = fit_law(Law::flat(), all, unused);  // no change with x: the null of every slope
  std::vector<Fit> fits(r.laws.size());
  for (size_t k = 0; k < r.laws.size(); k++) {
    const Law& law = r.laws[k];
    Fit& f = fits[k];
    f.rss = fit_law(law, all, f.a);
    if (law.form == Law::Shape)  // the slope on each seed alone: the rate with its interval
      for (size_t s = 0; s < seeds.size(); s++) {
        std::vector<size_t> mine;
        for (size_t i : all)
          if (seed_of[i] == s) mine.push_back(i);
        double a = 0;
        if (mine.size() >= 3) fit_law(law, mine, a), f.a_by_seed.push_back(a);
      }
    const double slopes = law.form == Law::Shape ? 1 : 0;
    const double df_lof = groups - 1 - slopes;
    if (testable && df_lof > 0) {
      const double ss_lof = std::max(0.0, f.rss - ss_pure);
      f.p = f_upper_tail((ss_lof / df_lof) / (ss_pure / df_pure), df_lof, df_pure);
      f.fits = f.p >= kLevel;
    }
    // a law with a free slope contains "no change" (a = 0): it is a law of change only when its slope
    // is distinguishable from 0 (the extra sum of squares against the flat law, 5% level); else it is
    // the flat law again and does not count apart from it
    const double df_resid = n - n_seeds - 1;
    if (law.form == Law::Shape && df_resid > 0) {
      f.p_slope = f.rss > 0 ? f_upper_tail((rss_flat - f.rss) / (f.rss / df_resid), 1, df_resid) : 0;
      if (f.p_slope >= kLevel) f.fits = false;
    }
    f.aic = n * std::log(std::max(f.rss, 1e-300 * n) / n) + 2 * (slopes + n_seeds);
  }
  double best_aic = INFINITY;
  for (const Fit& f : fits)
    if (f.fits) best_aic = std::min(best_aic, f.aic);
  double total = 0;
  for (Fit& f : fits)
    if (f.fits) total += f.weight = std::exp(-(f.aic - best_aic) / 2);
  int best = -1;
  for (size_t k = 0; k < fits.size(); k++) {
    if (fits[k].fits) fits[k].weight /= total;
    if (fits[k].fits && (best < 0 || fits[k].weight > fits[size_t(best)].weight)) best = int(k);
  }
  const Fit& claimed = fits[size_t(r.claimed)];
  const bool wrong_sign = r.sign != 0 && claimed.a * r.sign <= 0;
  if (best < 0) j.verdict = Verdict::NoLawFits;
  else if (!claimed.fits) j.verdict = Verdict::Violated;
  else if (claimed.weight >= 1 - kLevel) j.verdict = wrong_sign ? Verdict::Violated : Verdict::Holds;
  else if (claimed.weight <= kLevel) j.verdict = Verdict::Violated;
  else j.verdict = Verdict::NotDistinguishable;
  std::vector<std::string> parts;
  nlohmann::json laws = nlohmann::json::array();
  for (size_t k = 0; k < fits.size(); k++) {
    const Fit& f = fits[k];
    std::string rate;
    if (!f.a_by_seed.empty()) {
      const analysis::SeedSummary s = analysis::summarize(f.a_by_seed);
      rate = s.n > 1 ? fmt::format(", slope a {} [{}, {}]", num(s.mean), num(s.lo), num(s.hi)) : fmt::format(", slope a {}", num(s.mean));
    }
    const bool flat_slope = r.laws[k].form == Law::Shape && f.p_slope >= kLevel;
    parts.push_back(fmt::format("{}{}: {}{}{}", r.laws[k].name, int(k) == r.claimed ? " (claimed)" : "",
                                testable ? fmt::format("lack-of-fit p {}", num(f.p)) : std::string("fit not testable"),
                                f.fits       ? fmt::format(", Akaike weight {:.3f}", f.weight)
                                : flat_slope ? fmt::format(", its slope is not distinguishable from 0 (p {}): no change",
                                                           num(f.p_slope))
                                             : std::string(", does not fit"),
                                rate));
    laws.push_back({{"law", r.laws[k].name}, {"claimed", int(k) == r.claimed}, {"a", f.a}, {"rss", f.rss},
                    {"lack_of_fit_p", testable ? nlohmann::json(f.p) : nlohmann::json(nullptr)},
                    {"slope_p", r.laws[k].form == Law::Shape ? nlohmann::json(f.p_slope) : nlohmann::json(nullptr)},
                    {"fits", f.fits},
                    {"aic", f.aic}, {"akaike_weight", f.fits ? nlohmann::json(f.weight) : nlohmann::json(nullptr)},
                    {"a_by_seed", f.a_by_seed}});
  }
  j.text = fmt::format("{} against {}, {} points of {} {}{} pooled ({}): {}{}{}", r.y, r.x, x.size(), seeds.size(),
                       unit, seeds.size() == 1 ? "" : "s",
                       testable ? fmt::format("an offset per {}; lack of fit tested against the spread between {}s "
                                              "at each x", unit, unit)
                                : fmt::format("no spread between {}s: fits judged by AIC alone", unit),
                       fmt::join(parts, "; "),
                       best >= 0 ? fmt::format("; best: {}", r.laws[size_t(best)].name) : std::string("; no law fits"),
                       wrong_sign && claimed.fits ? "; the claimed law's scale has the wrong sign" : "");
  j.numbers = {{"x", r.x}, {"y", r.y}, {"points", x.size()}, {"pure_error_df", df_pure}, {"testable", testable},
               {"laws", laws}, {"best", best >= 0 ? nlohmann::json(r.laws[size_t(best)].name) : nlohmann::json(nullptr)}};
  return j;
}

Verdict direction_of(double lo, double hi, int direction) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return Verdict::NotDistinguishable;
  if (direction == 0) return lo > 0 || hi < 0 ? Verdict::Violated : Verdict::NotDistinguishable;
  if (direction * lo > 0 && direction * hi > 0) return Verdict::Holds;
  if (direction * lo < 0 && direction * hi < 0) return Verdict::Violated;
  return Verdict::NotDistinguishable;
}

Judgement judge_effect(const EffectRule& r, const std::vector<double>& values, const std::vector<double>& a,
                       const std::vector<double>& b, const std::string& unit) {
  Judgement j;
  const analysis::SeedSummary s = analysis::summarize(values);
  j.verdict = s.n < 2 ? Verdict::NotDistinguishable : direction_of(s.lo, s.hi, r.direction);
  // the magnitude in the claimed direction, against the stated size
  const double m_lo = std::min(r.direction * s.lo, r.direction * s.hi), m_hi = std::max(r.direction * s.lo, r.direction * s.hi);
  if (r.size && s.n >= 2 && r.direction != 0) j.size = m_lo >= *r.size ? Size::AsStated : m_hi < *r.size ? Size::Smaller : Size::NotDistinguishable;
  const std::string arms =
      a.empty() ? ""
                : fmt::format(" ({} {}, {} {})", r.arm_a, num(analysis::summarize(a).mean), r.arm_b, num(analysis::summarize(b).mean));
  j.text = s.n >= 2 ? fmt::format("effect {} [{}, {}] (95% interval over {} {}s, sd {}){}; claimed direction {}; {}",
                                  num(s.mean), num(s.lo), num(s.hi), s.n, unit, num(s.sd), arms, r.direction > 0 ? "> 0" : r.direction < 0 ? "< 0" : "none (0)",
                                  r.size ? fmt::format("size {} against the stated {} ({})", to_string(j.size), num(*r.size),
                                                       r.size_quote)
                                         : std::string("size not claimed by the source"))
                    : fmt::format("effect {}{} on {} {}: no interval", num(s.mean), arms, s.n, unit);
  j.numbers = {{"effect", analysis::to_json(s)}, {"direction", r.direction},
               {"stated_size", r.size ? nlohmann::json(*r.size) : nlohmann::json(nullptr)}, {"size_verdict", to_string(j.size)}};
  if (!a.empty()) j.numbers["arms"] = {{r.arm_a, a}, {r.arm_b, b}};
  return j;
}

}  // namespace normlab::theory
