// rules.h: how `normlab theory` decides a claim. Every claim declares its kind, and each kind has one
// rule, written here once (docs/THEORY.md, "How a claim is decided", says why each rule is the one):
//   identity    an equality or inequality that holds by algebra in the stated setting (Lemma 2.1, a
//               rank at eps = 0, Weyl's bound): a check of the formula and the code, not evidence about
//               networks. exact when every seed's error is within the computation's rounding, else fails.
//   bound       a stated upper (or lower) bound on a measured value: satisfied when no seed's value is
//               beyond it, a counterexample when one is (one is enough), vacuous when it says nothing
//               on every seed. How close the values come to it is printed, never judged.
//   law         a rate: a stated law against the alternatives its source names, fitted to the seeds'
//               points pooled with an offset per seed (the law is the shape of the change with x, not
//               the level). A law fits when a lack-of-fit F test against the spread between seeds at
//               each x does not reject it (5% level), and (a law with a free slope) its slope differs
//               from 0 (else it is "no change" again); among the laws that fit, Akaike weights pick
//               one: holds when the claimed law fits and carries 95% of the weight, violated when it
//               does not fit or another fitting law carries 95%, no law fits, else not distinguishable.
//   effect      a direction and a size: the 95% Student-t interval of the per-seed effect; the
//               direction holds / is violated when the interval excludes 0 on the claimed / other
//               side; the size is judged only against a size the source states (quoted), else "size
//               not claimed".
//               A claim of no effect is violated by an interval that excludes 0 and otherwise not
//               distinguishable: an interval cannot show an absence without a margin, and the
//               sources state none.
//   comparison  an effect that is the paired difference of two arms measured on the same seeds.
// No rule uses a tolerance band, a decade cut or a sign test that the source does not state.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/stats.h"

namespace normlab::theory {

enum class Kind { Identity, Bound, Law, Effect, Comparison };
std::string to_string(Kind k);

enum class Verdict {
  Exact, Fails,                          // identity
  Satisfied, Counterexample,             // bound
  Holds, Violated, NotDistinguishable,   // law, effect (its direction), comparison
  NoLawFits,                             // law: no candidate law fits the data
  Vacuous,                               // identity or bound: its premise fails on every seed
  Void,                                  // measured on a trained model that did not learn
  Skipped,                               // the model cannot answer the claim
};
std::string to_string(Verdict v);

// An effect's size against the size its source states.
enum class Size { NotClaimed, AsStated, Smaller, NotDistinguishable };
std::string to_string(Size s);

// A law y = a f(x) + b: Flat (y = b), Shape (a and b free) or Fixed (y = f(x) + b: the stated shape
// and scale, e.g. log y = log l + c for y ~ l). Each law has k = 1 or 2 parameters.
struct Law {
  enum Form { Flat, Shape, Fixed } form = Shape;
  std::string name;  // "y ~ l (additive)", "exponential in l", "flat"
  std::function<double(double)> f;
  int params() const { return form == Shape ? 2 : 1; }
  static Law flat(std::string name = "flat (no change)") { return {Flat, std::move(name), [](double) { return 0.0; }}; }
};

struct IdentityRule {
  double tolerance = 1e-9;  // the computation's rounding in double precision (~1e-15 per operation)
};
struct BoundRule {
  bool upper = true;  // value <= bound (else value >= bound)
};
struct LawRule {
  std::string x, y;        // what the points are, e.g. "l (layer)", "log ||x_l||^2"
  std::vector<Law> laws;   // the claimed law and its alternatives
  int claimed = 0;         // index into laws
  int sign = 0;            // the claimed law's scale a must have this sign (+1, -1; 0: either)
};
struct EffectRule {
  int direction = 1;               // the claimed sign of the effect; 0: the claim is that there is none (it
                                   // can be refuted, an interval that excludes 0, but not shown)
  std::optional<double> size;      // the magnitude the source states, in the effect's units
  std::string size_quote;          // the source's words and where it says them
  std::string arm_a, arm_b;        // a comparison's arms (the effect is b - a)
  static EffectRule towards(int direction) {
    EffectRule r;
    r.direction = direction;
    return r;
  }
  EffectRule& stated(double magnitude, std::string quote) {
    size = magnitude, size_quote = std::move(quote);
    return *this;
  }
  EffectRule& between(std::string a, std::string b) {
    arm_a = std::move(a), arm_b = std::move(b);
    return *this;
  }
};

// One seed's points of a law.
struct Series {
  std::vector<double> x, y;
};

struct Judgement {
  Verdict verdict = Verdict::NotDistinguishable;
  Size size = Size::NotClaimed;  // effects only
  std::string text;              // the rule's numbers in words
  nlohmann::json numbers;        // the numbers the rule used
};

inline constexpr double kLevel = 0.05;   // the significance level of every test (95% intervals)

// per seed: the error; vacuous[i]: the premise fails on seed i (empty: never)
// unit: what a repetition is, in the text ("seed", or "window" on one given model)
Judgement judge_identity(const IdentityRule& r, const std::vector<double>& errors, const std::vector<bool>& vacuous = {},
                         const std::string& unit = "seed");
// per seed: the value and the bound; vacuous[i]: the bound says nothing on seed i
Judgement judge_bound(const BoundRule& r, const std::vector<double>& values, const std::vector<double>& bounds,
                      const std::vector<bool>& vacuous = {}, const std::string& unit = "seed");
Judgement judge_law(const LawRule& r, const std::vector<Series>& seeds, const std::string& unit = "seed");
// per seed: the effect (a comparison: b - a, with the arms for the text)
Judgement judge_effect(const EffectRule& r, const std::vector<double>& values, const std::vector<double>& a = {},
                       const std::vector<double>& b = {}, const std::string& unit = "seed");

// The effect rule's direction on an interval computed elsewhere (a study's paired or Welch difference):
// holds / violated when [lo, hi] excludes 0 on the claimed / other side; not distinguishable otherwise
// (or when the interval is not finite).
Verdict direction_of(double lo, double hi, int direction);

// The upper tail P(F > f) of Fisher's F distribution with (d1, d2) degrees of freedom.
double f_upper_tail(double f, double d1, double d2);

}  // namespace normlab::theory
