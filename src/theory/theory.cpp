// theory.cpp: `normlab theory` (theory.h): the seeds, the tasks that run the checks, and the verdicts.
// The models of the checks: models.cpp; the checks themselves: lemmas.cpp,
// depth.cpp, encdec.cpp, fake_depth.cpp, sinks.cpp, streams.cpp (the list: kChecks, checks.h).
#include "theory/theory.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <fmt/format.h>

#include "theory/checks.h"
#include "analysis/dynamics.h"
#include "io/parallel.h"
#include "io/tokenizer.h"
#include "model/decode.h"
#include "ops/common.h"
#include "train/optimizer.h"
#include "train/model_source.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/rng.h"
#include "util/interrupt.h"
#include "util/progress.h"

namespace normlab::theory {

namespace detail {

ModelConfig gpt_config(const TheoryOptions& o, Placement p, double eps, int layers) {
  ModelConfig c;
  c.d_model = o.d_model;
  c.n_heads = o.n_heads;
  c.n_layers = layers;
  c.seq_len = o.seq_len;
  c.placement = {p};
  c.eps = eps;
  c.seed = o.seed;
  return c;
}

std::vector<std::vector<int32_t>> window_units(const std::vector<int32_t>& corpus, int units, int B, int T,
                                               uint64_t seed, uint64_t stream, int first) {
  std::vector<std::vector<int32_t>> out;
  if (corpus.size() <= size_t(T)) return out;
  Rng rng(seed, stream);
  for (int u = 0; u < units; u++) {
    std::vector<int32_t> ids;
    for (int w = 0; w < B; w++) {
      const std::vector<int32_t> window =
          window_ids(corpus, size_t(rng.uniform() * double(corpus.size() - size_t(T))), T, first);
      ids.insert(ids.end(), window.begin(), window.end());
    }
    out.push_back(std::move(ids));
  }
  return out;
}

template <class S>
DynamicsReport dynamics_on(const Bench& b, Model<S>& m) {
  const TheoryOptions& o = b.opt;
  return analyze_dynamics(m, b.corpus, 2, 4, o.seq_len, uint64_t(o.seed), o.bos);
}
template DynamicsReport dynamics_on(const Bench&, Model<double>&);
template DynamicsReport dynamics_on(const Bench&, Model<float>&);

std::string weights(const Bench& b, const std::string& init) { return b.given ? "the checkpoint's weights" : init; }

std::string attention_kind(const Bench& b) {
  return b.given && !b.opt.model->config.causal() ? "bidirectional attention (an encoder)" : "causal attention";
}

void attempt(const Bench& b, std::vector<Measurement>& out, const std::vector<std::string>& claims,
             const std::function<void()>& block) {
  const size_t first = out.size();
  throw_if_interrupted();
  if (b.models) b.models->take_unlearned(), b.models->take_trained();
  try {
    block();
    // the block's claims rest on the models it made: one that did not learn voids them all; each
    // says how its models' training ended
    const std::vector<std::string> unlearned = b.models ? b.models->take_unlearned() : std::vector<std::string>{};
    const std::vector<std::string> trained = b.models ? b.models->take_trained() : std::vector<std::string>{};
    for (size_t i = first; i < out.size(); i++) {
      if (!unlearned.empty()) out[i].void_reason = fmt::format("{}", fmt::join(unlearned, "; "));
      if (!trained.empty()) out[i].detail += fmt::format("; trained: {}", fmt::join(trained, "; "));
    }
  } catch (const NotApplicable& e) {
    if (!b.given) throw Error(fmt::format("theory: {}", e.what()));  // only a given model can miss a claim
    for (const auto& name : claims) {
      Measurement m;
      m.head.source = name;
      m.skipped = e.what();
      out.push_back(std::move(m));
    }
  }
}

Measurement identity(Said h, double error, std::string detail, nlohmann::json numbers, double tolerance) {
  Measurement m;
  m.head = std::move(h), m.kind = Kind::Identity, m.value = error;
  m.identity.tolerance = tolerance;
  m.detail = std::move(detail), m.numbers = std::move(numbers);
  return m;
}

Measurement bound(Said h, double value, double bound, std::string detail, nlohmann::json numbers, bool upper) {
  Measurement m;
  m.head = std::move(h), m.kind = Kind::Bound, m.value = value, m.bound = bound;
  m.bound_rule.upper = upper;
  m.detail = std::move(detail), m.numbers = std::move(numbers);
  return m;
}

Measurement law(Said h, LawRule rule, Series points, std::string detail, nlohmann::json numbers) {
  Measurement m;
  m.head = std::move(h), m.kind = Kind::Law;
  m.series = std::move(points), m.law = std::move(rule);
  m.detail = std::move(detail), m.numbers = std::move(numbers);
  return m;
}

Measurement effect(Said h, std::vector<double> values, EffectRule rule, std::string detail, nlohmann::json numbers) {
  Measurement m;
  m.head = std::move(h), m.kind = Kind::Effect;
  m.effects = std::move(values), m.effect = std::move(rule);
  m.detail = std::move(detail), m.numbers = std::move(numbers);
  return m;
}

Measurement comparison(Said h, std::vector<double> a, std::vector<double> b, EffectRule rule, std::string detail,
                       nlohmann::json numbers) {
  Measurement m;
  m.head = std::move(h), m.kind = Kind::Comparison;
  for (size_t i = 0; i < a.size() && i < b.size(); i++) m.effects.push_back(b[i] - a[i]);
  m.arm_a = std::move(a), m.arm_b = std::move(b), m.effect = std::move(rule);
  m.detail = std::move(detail), m.numbers = std::move(numbers);
  return m;
}

Law power_law(std::string name) { return {Law::Shape, std::move(name), [](double x) { return std::log(x); }}; }
Law fixed_power(double p, std::string name) {
  return {Law::Fixed, std::move(name), [p](double x) { return p * std::log(x); }};
}
Law exponential_law(std::string name) { return {Law::Shape, std::move(name), [](double x) { return x; }}; }

std::unique_ptr<Model<double>> forward_on(const Bench& b, const ModelConfig& c, ClaimModels::Norm norm) {
  auto m = b.models->make(c, false, norm, /*gradients=*/false);
  std::vector<int32_t> labels(b.ids.size(), ops::kIgnoreLabel);
  m->forward(b.ids.data(), labels.data(), 1, int(b.ids.size()));
  return m;
}

}  // namespace detail

namespace {

using detail::Measurement;

// The translation pairs of the enc-dec claims: the validation split of a built pair (or directory);
// without one, consecutive byte chunks of the built-in corpus, said so in the setting.
std::vector<TokenPair> theory_pairs(const TheoryOptions& o, const Corpus& corpus, std::string& name) {
  try {
    TranslationData d = load_translation(o.pairs, 128);
    name = fmt::format("'{}' (validation split)", o.pairs);
    return d.valid;
  } catch (const Error&) {
    std::vector<TokenPair> pairs;
    for (size_t i = 0; i + 120 <= corpus.val.size() && pairs.size() < 64; i += 120) {
      TokenPair p;
      for (size_t k = 0; k < 60; k++) p.src.push_back(corpus.val[i + k]), p.tgt.push_back(corpus.val[i + 60 + k]);
      p.src.push_back(kEosToken);
      pairs.push_back(std::move(p));
    }
    name = fmt::format("byte chunks of the built-in corpus (no translation pair '{}' is built: `normlab corpus bible`)",
                       o.pairs);
    return pairs;
  }
}

// One seed's measurements of the checks [first, last) of kChecks.
std::vector<Measurement> measure_seed(const TheoryOptions& o, const Corpus& corpus, const std::vector<TokenPair>& pairs,
                                      const std::string& pairs_name, size_t first, size_t last) {
  detail::ClaimModels models(o, corpus.train, corpus.val);
  detail::Bench b{o, corpus.val, {}, &models, o.train_steps == 0, o.model != nullptr, &pairs, pairs_name};
  Rng rng(uint64_t(o.seed), 9);
  Batch window = sample_batch(b.corpus, Arch::Gpt, 1, o.seq_len, rng);
  b.ids = (o.bos >= 0 ? with_first_token(std::move(window), o.bos) : window).ids;  // (a given model's run's first token)
  const bool encoder = o.model && !o.model->config.causal();
  if (!corpus.bytes() || encoder)
    b.lm = fmt::format("{} over {}", encoder ? "an encoder" : "LM",
                       corpus.bytes()                      ? std::string("bytes")
                       : o.tokenizer.empty()               ? std::string("the token stream's tokens")
                                                           : std::string("its tokenizer's tokens"));
  std::vector<Measurement> out;
  for (size_t i = first; i < last; i++) detail::kChecks[i](b, out);
  return out;
}

}  // namespace

namespace {

// Claim i of the seeds' measurements, decided by its kind's rule over the seeds (a given model's
// windows).
Claim claim_of(const std::vector<std::vector<Measurement>>& by_seed, size_t i, bool given, const std::string& state,
               const std::string& input) {
  const Measurement& m = by_seed[0][i];
  Claim c;
  c.source = m.head.source;
  c.model = state;
  c.input = input;
  c.replicates = given ? "windows" : "seeds";
  if (!m.skipped.empty()) {
    c.verdict = Verdict::Skipped;
    c.measured = m.skipped;
    return c;
  }
  nlohmann::json seeds = nlohmann::json::array();
  std::vector<double> values, bounds, effects, arm_a, arm_b;
  std::vector<bool> vacuous;
  std::vector<Series> series;
  std::string void_reason;
  for (const auto& s : by_seed) {
    if (s.size() != by_seed[0].size() || s[i].head.quantity != m.head.quantity || s[i].kind != m.kind)
      throw Error("theory: the seeds measured different claims");  // a bug, not an input
    values.push_back(s[i].value), bounds.push_back(s[i].bound), vacuous.push_back(s[i].vacuous);
    series.push_back(s[i].series);
    effects.insert(effects.end(), s[i].effects.begin(), s[i].effects.end());
    arm_a.insert(arm_a.end(), s[i].arm_a.begin(), s[i].arm_a.end());
    arm_b.insert(arm_b.end(), s[i].arm_b.begin(), s[i].arm_b.end());
    if (void_reason.empty()) void_reason = s[i].void_reason;
    seeds.push_back(s[i].numbers);
  }
  c.statement = m.head.statement;
  c.setting = m.head.setting;
  c.quantity = m.head.quantity;
  c.kind = m.kind;
  c.reported = m.reported;
  // the repetitions: seeds of fresh or trained models; on one given model, its input windows (an
  // effect measured on units of several windows per seed pools the units)
  const std::string unit = given ? "window" : "seed";
  const std::string effect_unit = effects.size() > by_seed.size() ? "window unit" : unit;
  Judgement j;
  switch (m.kind) {
    case Kind::Identity: j = judge_identity(m.identity, values, vacuous, unit); break;
    case Kind::Bound: j = judge_bound(m.bound_rule, values, bounds, vacuous, unit); break;
    case Kind::Law: j = judge_law(m.law, series, unit); break;
    case Kind::Effect: j = judge_effect(m.effect, effects, {}, {}, effect_unit); break;
    case Kind::Comparison: j = judge_effect(m.effect, effects, arm_a, arm_b, effect_unit); break;
  }
  if (m.kind == Kind::Identity || m.kind == Kind::Bound) c.summary = analysis::summarize(values);
  if (m.kind == Kind::Effect || m.kind == Kind::Comparison) c.summary = analysis::summarize(effects);
  c.verdict = j.verdict;
  c.size = j.size;
  c.rule = j.text;
  c.measured = fmt::format("{}: {}", given ? "first window" : "first seed", m.detail);
  if (!void_reason.empty()) {  // a verdict on an untrained model in a trained one's place says nothing
    c.verdict = Verdict::Void;
    c.measured = fmt::format("{}; it did not learn (its validation loss is not {:.0f}% below the unigram entropy, or "
                             "not {:.0f}% of the way from it to the same-size Pre-LN's): {}",
                             c.measured, 100 * (1 - kLearnedFraction), 100 * kLearnedShareOfPre, void_reason);
  }
  c.numbers = {{"rule", j.numbers}, {"seeds", seeds}};
  return c;
}

}  // namespace

Corpus theory_corpus(const TheoryOptions& o) {
  if (o.corpus.ends_with(".bin") || o.corpus.ends_with(".safetensors"))
    return load_token_stream(o.corpus, o.val_fraction, o.seq_len, o.test_fraction);
  return load_corpus(o.corpus.empty() ? builtin_corpus_path() : o.corpus, o.val_fraction, o.seq_len, o.tokenizer,
                     size_t(o.corpus_max_bytes), o.test_fraction);
}

namespace {

std::string claim_input(const TheoryOptions& o, const Corpus& corpus, const std::string& recipe) {
  return fmt::format("windows of {} {}s of {}, validation split ({}){}", o.seq_len, corpus.unit(), corpus.description(),
                     o.model ? "one per repetition: the repetitions of a given model are its input windows"
                             : "one per seed",
                     o.train_steps > 0 ? fmt::format("; trained on its training split: {}", recipe) : "");
}

}  // namespace

std::vector<Claim> run_theory(const TheoryOptions& o) {
  if (o.seq_len < 2 || o.seq_len > 4096)  // (0 reached the windows' sampling and crashed the Python module)
    throw Error(fmt::format("theory: seq_len = {} must be in [2, 4096] (tokens per input window)", o.seq_len));
  const Corpus corpus = theory_corpus(o);
  std::string pairs_name;
  const std::vector<TokenPair> pairs = theory_pairs(o, corpus, pairs_name);
  const bool fresh = o.train_steps == 0;
  const int n_seeds = fresh ? o.seeds : o.trained_seeds;
  if (n_seeds < 1 || n_seeds > 100) throw Error(fmt::format("theory: seeds = {} must be in [1, 100]", n_seeds));
  // Independent tasks, one per thread (the models are small, so this beats threading inside each
  // one); nested regions and BLAS run single-threaded inside, and each number is the same as in a
  // serial run (tests/test_theory.cpp checks). On fresh or given models a task is one group of claims
  // (kChecks) on one seed: the groups share nothing, and the most expensive start first (here, per
  // seed: the update sizes ~12 s, Xiong's Fig. 3 ~7 s, the lemmas ~6 s, the rest ~3 s), which balances
  // two cores far better than whole seeds. Trained models are cached per seed: there a task is a seed.
  constexpr size_t kGroups = std::size(detail::kChecks);
  constexpr size_t kByCost[kGroups] = {4, 2, 0, 1, 3, 5, 6, 7};  // kChecks' indices, the most expensive first
  const size_t per_seed = fresh || o.model ? kGroups : 1;
  const int n_tasks = n_seeds * int(per_seed);
  std::vector<std::vector<std::vector<Measurement>>> by_group(
      static_cast<size_t>(n_seeds), std::vector<std::vector<Measurement>>(per_seed));
  std::vector<std::string> errors(static_cast<size_t>(n_tasks));
  std::atomic<bool> interrupted{false};
  std::atomic<long> finished{0};
  const std::string progress = o.model ? "theory on the checkpoint" : fresh ? "theory on fresh models" : "theory on trained models";
  report_progress(progress, 0, n_tasks, "");
#pragma omp parallel for schedule(dynamic, 1) if (o.parallel_seeds && !o.float32)  // (float32: one model, shared)
  for (int k = 0; k < n_tasks; k++) {
    const size_t seed = size_t(k) % size_t(n_seeds), slot = size_t(k) / size_t(n_seeds);
    try {
      TheoryOptions ok = o;
      ok.seed = o.seed + long(seed);
      const size_t group = per_seed == 1 ? 0 : kByCost[slot];
      by_group[seed][per_seed == 1 ? 0 : group] =
          per_seed == 1 ? measure_seed(ok, corpus, pairs, pairs_name, 0, kGroups)
                        : measure_seed(ok, corpus, pairs, pairs_name, group, group + 1);
    } catch (const Interrupted&) {
      interrupted = true;
    } catch (const std::exception& e) {
      errors[size_t(k)] = e.what();
    }
    report_progress(progress, ++finished, n_tasks, per_seed == 1 ? "seeds" : "groups of claims");
  }
  if (interrupted) throw Interrupted();
  for (const auto& e : errors)
    if (!e.empty()) throw Error(e);
  std::vector<std::vector<Measurement>> by_seed(static_cast<size_t>(n_seeds));  // each seed's claims in kChecks' order
  for (size_t s = 0; s < by_seed.size(); s++)
    for (auto& group : by_group[s])
      for (auto& m : group) by_seed[s].push_back(std::move(m));
  std::vector<Claim> claims;
  const std::string state = o.model ? fmt::format("checkpoint '{}'", o.model->name)
                            : fresh  ? "fresh"
                                     : fmt::format("trained (to a plateau, at most {} steps)", o.train_steps);
  const std::string input = claim_input(o, corpus, detail::ClaimModels(o, corpus.train, corpus.val).recipe());
  for (size_t i = 0; i < by_seed[0].size(); i++) claims.push_back(claim_of(by_seed, i, o.model != nullptr, state, input));
  return claims;
}

Tally tally_of(Kind k) {
  return k == Kind::Identity ? Tally::Check : k == Kind::Bound ? Tally::Bound : Tally::Empirical;
}

std::vector<Claim> run_theory_fresh_and_trained(TheoryOptions o, long trained_steps) {
  o.train_steps = 0;
  std::vector<Claim> claims = run_theory(o);
  if (trained_steps > 0 && !o.model) {
    o.train_steps = trained_steps;
    for (auto& c : run_theory(o)) claims.push_back(std::move(c));
  }
  return claims;
}

nlohmann::json to_json(const std::vector<Claim>& claims) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& c : claims) {
    if (c.verdict == Verdict::Skipped) {  // no numbers: the reason
      j.push_back({{"source", c.source}, {"model", c.model}, {"verdict", to_string(c.verdict)}, {"measured", c.measured},
                   {"input", c.input}});
      continue;
    }
    nlohmann::json e = {{"source", c.source}, {"model", c.model}, {"kind", to_string(c.kind)},
                        {"statement", c.statement}, {"setting", c.setting}, {"quantity", c.quantity},
                        {"rule", c.rule}, {"measured", c.measured}, {"verdict", to_string(c.verdict)},
                        {"reported", c.reported}, {"input", c.input}, {"replicates", c.replicates},
                        {"numbers", c.numbers}};
    if (c.kind == Kind::Effect || c.kind == Kind::Comparison) e["size"] = to_string(c.size);
    if (c.kind == Kind::Effect || c.kind == Kind::Comparison)  // the interval the rule read
      e.update({{"mean", c.summary.mean}, {"ci95", {c.summary.lo, c.summary.hi}}, {"sd", c.summary.sd}, {"n", c.summary.n}});
    else if (c.kind != Kind::Law)  // an identity's errors, a bound's values: each seed's, no interval
      e.update({{"values", c.summary.values}, {"mean", c.summary.mean}, {"n", c.summary.n}});
    j.push_back(std::move(e));
  }
  return j;
}

std::string tally_line(const std::vector<Claim>& claims) {
  std::map<Tally, std::map<Verdict, int>> count;
  int void_ = 0, skipped = 0;
  for (const auto& c : claims) {
    if (c.verdict == Verdict::Void) void_++;
    else if (c.verdict == Verdict::Skipped) skipped++;
    else count[tally_of(c.kind)][c.verdict]++;
  }
  auto part = [&](Tally t, const char* what) {
    std::vector<std::string> v;
    for (const auto& [verdict, n] : count[t]) v.push_back(fmt::format("{} {}", n, to_string(verdict)));
    return v.empty() ? std::string() : fmt::format("{}: {}. ", what, fmt::join(v, ", "));
  };
  std::string line = part(Tally::Empirical, "Empirical claims (laws, effects, comparisons)") +
                     part(Tally::Bound, "Bounds") + part(Tally::Check, "Checks of algebra (identities, not evidence)");
  if (void_) line += fmt::format("Void (a trained model did not learn): {}. ", void_);
  if (skipped) line += fmt::format("Skipped (a premise fails): {}. ", skipped);
  if (!line.empty()) line.pop_back();
  return line;
}

void print_claims(const std::vector<Claim>& claims) {
  std::string input;
  for (const auto& c : claims) {
    if (c.input != input) fmt::print("input ({} models): {}\n\n", c.model, c.input);
    input = c.input;
    if (c.verdict == Verdict::Skipped) {
      fmt::print("[{}, {}] SKIPPED: {}\n\n", c.source, c.model, c.measured);
      continue;
    }
    std::string head = to_string(c.verdict);
    for (char& ch : head) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if ((c.kind == Kind::Effect || c.kind == Kind::Comparison) && c.verdict != Verdict::Void)
      head += fmt::format(" (direction); {}", to_string(c.size));
    fmt::print("[{}, {} models] {} {}\n  claim:    {}\n  setting:  {}\n{}  rule:     {}\n  measured: {}\n\n", c.source,
               c.model, to_string(c.kind), head, c.statement, c.setting,
               c.reported.empty() ? "" : "  reported: " + c.reported + "\n", c.rule, c.measured);
  }
  std::vector<std::string> models;
  for (const auto& c : claims)
    if (std::find(models.begin(), models.end(), c.model) == models.end()) models.push_back(c.model);
  for (const auto& model : models) {
    std::vector<Claim> of;
    for (const auto& c : claims)
      if (c.model == model) of.push_back(c);
    fmt::print("Tally on {} models: {}\n", model, tally_line(of));
  }
  fmt::print("Each claim is decided by the rule of its kind: an identity is exact or fails (to rounding); a bound is "
             "satisfied, has a counterexample or is vacuous; a law holds when the stated law fits (lack-of-fit F test "
             "against the spread between repetitions) and carries 95% of the Akaike weight among the laws that fit; an "
             "effect's direction holds when its 95% interval excludes 0 on the claimed side, and its size is judged only "
             "against a size the source states. The claims, the rules and why: docs/THEORY.md.\n");
}

bool claims_in_float32(const std::string& precision, size_t n_params, std::string* line) {
  if (precision != "auto" && precision != "float64" && precision != "float32")
    throw Error(fmt::format("theory: precision '{}' must be auto, float64 or float32", precision));
  const double memory = physical_memory_bytes();
  const double copies = 2 * 16.0 * double(n_params);
  const bool float32 = precision == "float32" || (precision == "auto" && copies > memory / 2);
  if (line)
    *line = fmt::format("precision: {}{}", float32 ? "float32" : "float64",
                        precision != "auto" ? ""
                                            : fmt::format(" (auto: two float64 copies with gradients need {:.1f} GB, {} "
                                                          "half of this machine's {:.1f} GB)",
                                                          copies / 1e9, copies > memory / 2 ? "over" : "within",
                                                          memory / 1e9));
  return float32;
}

TheoryOptions theory_options_for(std::shared_ptr<const TheoryModel> model, const ModelSource& source,
                                 TheoryOptions opts) {
  const std::string& checkpoint = source.path;
  // the model's own tokenizer (a Hugging Face directory's or GGUF file's, or the one its run read its
  // data with) and the corpus its run read: the defaults; another tokenizer than its run's is refused
  opts.tokenizer = source.tokenizer_path(opts.tokenizer);
  // (its first bytes and its validation fraction too: the windows it validated on)
  if (const std::optional<DataConfig>& data = source.run_data; data && opts.corpus.empty()) {
    opts.corpus = !data->tokens.empty() ? data->tokens : data->corpus == "builtin" ? "" : data->corpus;
    opts.corpus_max_bytes = data->tokens.empty() ? data->max_bytes : 0;
    opts.val_fraction = data->val_fraction;
    opts.test_fraction = data->test_fraction;
  }
  if (source.run_data) opts.bos = source.run_data->bos;  // its run's first token starts every window
  const ModelConfig& c = model->config;
  opts.d_model = c.d_model;
  opts.n_heads = c.n_heads;
  opts.n_layers = opts.deep_layers = c.n_layers;
  opts.seq_len = std::min(opts.seq_len, c.seq_len);
  opts.seed = c.seed;  // seed k picks input window k (the same windows as fresh models of this seed)
  const Corpus corpus = theory_corpus(opts);
  if (corpus.bytes() ? c.vocab_size() < kByteVocab : corpus.vocab > c.vocab_size())
    throw Error(fmt::format("checkpoint '{}': its vocabulary ({}) does not hold the ids of {} (give a corpus with a "
                            "token stream of its own ids)",
                            checkpoint, c.vocab_size(), corpus.description()));
  opts.model = std::move(model);
  return opts;
}

}  // namespace normlab::theory
