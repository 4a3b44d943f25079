// checks.h (internal to normlab theory): one seed's measurements of the claims. Each check
// builds its models in the setting its source states, measures, and returns one Measurement per
// claim: its kind and rule (rules.h), this seed's numbers for the rule (an error, a value and its
// bound, the points of a law, an effect), and the seed's numbers in words. theory.cpp runs the checks
// over seeds and applies the rule. The claims in words, with their sources: docs/THEORY.md.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "analysis/stats.h"
#include "theory/rules.h"
#include "theory/theory.h"
#include "model/model.h"
#include "train/data.h"
#include "train/translation.h"

namespace normlab::analysis {
struct SinksReport;
struct DynamicsReport;
}

namespace normlab::theory::detail {

using namespace normlab::analysis;

// What every claim states: who, what, where, and the number its rule reads.
struct Said {
  std::string source;     // "000 Thm 2.2", "Xiong et al. 2020", ...
  std::string statement;  // the claim, as its source states it
  std::string setting;    // where it is measured (architecture, width, depth, init, activation, eps)
  std::string quantity;   // the number (or the points) the rule reads
};

struct Measurement {
  Said head;
  Kind kind = Kind::Effect;
  double value = 0;       // identity: the error; bound: the measured value
  double bound = 0;       // bound: the bound on this seed
  std::vector<double> effects;  // effect, comparison (b - a): this seed's replicates (one, or one per unit of windows)
  std::vector<double> arm_a, arm_b;  // comparison: the two arms, replicate by replicate
  Series series;          // law: this seed's points
  IdentityRule identity;
  BoundRule bound_rule;
  LawRule law;
  EffectRule effect;
  std::string detail;     // this seed's numbers in words
  nlohmann::json numbers;
  std::string reported = "";  // what the paper itself reports in its setting (papers only)
  std::string skipped = "";   // non-empty: the given model cannot answer the claim, and why
  bool vacuous = false;       // this seed's bound or identity says nothing (its premise fails)
  std::string void_reason = "";  // non-empty: a trained model it was measured on did not learn (attempt())
};

// The kinds, one constructor each.
Measurement identity(Said h, double error, std::string detail, nlohmann::json numbers, double tolerance = 1e-9);
Measurement bound(Said h, double value, double bound, std::string detail, nlohmann::json numbers, bool upper = true);
Measurement law(Said h, LawRule rule, Series points, std::string detail, nlohmann::json numbers);
Measurement effect(Said h, std::vector<double> values, EffectRule rule, std::string detail, nlohmann::json numbers);
Measurement comparison(Said h, std::vector<double> a, std::vector<double> b, EffectRule rule, std::string detail,
                       nlohmann::json numbers);

// Laws of growth with x, fitted to log y: each y ~ f(x) up to a scale (log y = a log f(x) + c).
Law power_law(std::string name = "power law y ~ x^p");                    // log y linear in log x
Law fixed_power(double p, std::string name);                               // log y = p log x + c
Law exponential_law(std::string name = "exponential y ~ e^(a x)");        // log y linear in x

// Thrown by ClaimModels::make when the given model (theory --checkpoint) is not the model a claim
// needs; attempt() turns it into skipped Measurements.
struct NotApplicable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The reason a claim about one residual stream is not measured on a given hyper-connected model g.
std::string hyper_not_applicable(const ModelConfig& g);

// The models of the checks (models.cpp): fresh from their config, or (train_steps > 0) trained
// first with AdamW on the corpus' training split to a validation plateau (at most train_steps steps)
// and kept in the normlab cache; trained parameters are kept per config (eps aside: a model differing
// only in eps gets the parameters trained at eps = 1e-5). With a given model (options.model), make
// returns its weights at the requested eps if it is the model the config asks for (architecture,
// norm, placement, depth, a head when needs_loss), else throws NotApplicable.
class ClaimModels {
 public:
  ClaimModels(const TheoryOptions& o, const std::vector<int32_t>& train_ids, const std::vector<int32_t>& val_ids)
      : o_(o), ids_(train_ids), val_(val_ids) {}
  // norm: the claims about LayerNorm itself (000's lemmas) need a LayerNorm model (LayerNormOnly); the
  // claims about depth hold for any norm kind of the same placement (Any: RMSNorm's SmolLM2 too).
  enum class Norm { LayerNormOnly, Any };
  // gradients false: the claim only runs the model forward (and its Jacobians' forward-mode products),
  // so a given model is made without parameter gradients (8 bytes a parameter, not 16)
  // A given model read in float32 (TheoryOptions::float32) has no float64 copy: NotApplicable, saying so.
  std::unique_ptr<Model<double>> make(const ModelConfig& c, bool needs_loss = false, Norm norm = Norm::LayerNormOnly,
                                      bool gradients = true);
  // The model a claim that can read float32 measures: make()'s float64 model (with gradients), or a given
  // model read in float32 itself (at the claim's eps; shared by the claims: a claim restores what it
  // ablates). Measured with on() (below).
  using Measured = std::variant<std::unique_ptr<Model<double>>, Model<float>*>;
  Measured measured(const ModelConfig& c, bool needs_loss = false, Norm norm = Norm::LayerNormOnly);
  // The trained models made (or reused: used()) since the last call that did not learn
  // (kLearnedFraction), in words.
  std::vector<std::string> take_unlearned();
  // The trained models made or reused since the last call, each with how its training ended, in words.
  std::vector<std::string> take_trained();
  // A check that keeps a model it made for several blocks of claims says so on each reuse, so that a
  // block measured on a model that did not learn is void too.
  void used(const ModelConfig& c);
  // The given model (theory --checkpoint) as it is, whatever its norm and placement; nullptr without one.
  std::unique_ptr<Model<double>> given() const;
  Measured given_measured();  // the same as measured() gives it, set back to its own eps
  // How the trained models are trained, in words (the criterion the table prints).
  std::string recipe() const;

 private:
  struct Trained {
    std::vector<float> params;
    double val_loss = 0, unigram = 0;  // nats per token: validation loss after training, unigram entropy
    long steps = 0;                    // steps trained
    bool plateau = false;              // stopped at a validation plateau (else at train_steps)
    bool cached = false;               // read from the cache
    std::string name;                  // "24-layer post" for the void verdict's reason
    double reference = -1;             // the same-size Pre-LN's validation loss (not Pre-LN itself; < 0: none)
  };
  Trained train(ModelConfig c);
  // the given model's config at the claim's eps if it is the model `c` asks for, else NotApplicable
  ModelConfig given_as(const ModelConfig& c, bool needs_loss, Norm norm) const;
  Trained& trained(const ModelConfig& c);  // trained (or read) once per config
  static std::string key_of(const ModelConfig& c);
  // the cache file of a trained model ("" without a cache directory), and its reader and writer: a file
  // that does not hold exactly this key and parameter count, or holds a non-finite value, is not read
  std::string cache_path(const std::string& key) const;
  bool read_cached(const std::string& path, const std::string& key, const std::vector<float>& shape, Trained& t) const;
  void write_cached(const std::string& path, const std::string& key, const Trained& t) const;
  void note_if_unlearned(const Trained& t);
  const TheoryOptions& o_;
  const std::vector<int32_t>& ids_;
  const std::vector<int32_t>& val_;
  std::map<std::string, Trained> trained_;
  std::vector<std::string> unlearned_, trained_used_;
};

// f(model) on the model m holds, whichever precision it is read in (f: a generic lambda).
template <class F>
decltype(auto) on(ClaimModels::Measured& m, F&& f) {
  return std::visit([&](auto& held) -> decltype(auto) { return f(*held); }, m);
}

// Why a claim that needs float64 is not measured on a given model read in float32.
std::string float64_only();

// One seed's inputs.
struct Bench {
  TheoryOptions opt;                 // opt.seed is this seed's
  std::vector<int32_t> corpus;       // the validation split: every measurement on a byte LM
  std::vector<int32_t> ids;          // one sequence of seq_len tokens from it
  ClaimModels* models = nullptr;
  bool fresh = true;
  bool given = false;                // a given model (theory --checkpoint): o.model
  const std::vector<TokenPair>* pairs = nullptr;  // translation pairs (enc-dec claims)
  std::string pairs_name;                         // what they are, for the setting
  std::string lm = "byte LM";                     // what the one-stack models read, for the setting
};

ModelConfig gpt_config(const TheoryOptions& o, Placement p, double eps, int layers);
// "the checkpoint's weights" for a given model, else the init the claim's setting states
std::string weights(const Bench& b, const std::string& init);
// "causal attention", or the given model's "bidirectional attention (an encoder)"
std::string attention_kind(const Bench& b);
// Runs one check block; if its model is not applicable, one skipped Measurement per claim it makes.
void attempt(const Bench& b, std::vector<Measurement>& out, const std::vector<std::string>& claims,
             const std::function<void()>& block);
// `units` units of B windows of T tokens each from corpus, at starts drawn by Rng(seed, stream); none
// when the corpus is not longer than one window. The given- and trained-model checks' inputs. first >= 0
// (TheoryOptions::bos): each window is that id, then T - 1 tokens from its start.
std::vector<std::vector<int32_t>> window_units(const std::vector<int32_t>& corpus, int units, int B, int T,
                                               uint64_t seed, uint64_t stream, int first = -1);
// analyze_dynamics on the corpus (2 batches of 4 windows of seq_len, seed o.seed), each window starting
// with o.bos when there is one.
template <class S>
DynamicsReport dynamics_on(const Bench& b, Model<S>& m);
std::unique_ptr<Model<double>> forward_on(const Bench& b, const ModelConfig& c,
                                          ClaimModels::Norm norm = ClaimModels::Norm::LayerNormOnly);

// 000's LayerNorm and block Jacobian statements, 002's attention bounds (lemmas.cpp)
void lemma_checks(const Bench& b, std::vector<Measurement>& out);
// growth with depth on the byte LM: 002 rank collapse and ||A||_2 with depth, 003, 004 (depth.cpp)
void depth_checks(const Bench& b, std::vector<Measurement>& out);
// 004 effective depth's quantity (depth.cpp), here so a test can check it against a
// recomputation by hand: for each sub-layer s + 1 < n_slots of a one-stream Pre-LN stack (a B = 1
// forward on ids), ||F_{s+1}(N(x_{s+1})) - F_{s+1}(N(x_s))|| / ||F_{s+1}(N(x_{s+1}))||. Runs the
// model forward (its activations are those of the last, ablated pass); the weights are restored.
template <class S>
std::vector<double> next_branch_shift(Model<S>& m, const std::vector<int32_t>& ids);
// 004 Thm 2's quantity (depth.cpp): ||d x_l / d x_0||_2 at the last token of one sequence (B = 1
// forward on ids) for every prefix of l = 1 .. L layers of a causal one-stream stack. At the last token
// the token-local block Jacobians chain (no later token feeds back), so the prefixes are their products.
std::vector<double> prefix_lipschitz(Model<double>& m, const std::vector<int32_t>& ids);
// on trained and given models: no rows for fresh ones
void fake_depth_checks(const Bench& b, std::vector<Measurement>& out);
// massive activations and attention sinks (sinks.cpp), on trained and given models: no rows for fresh ones
void sink_checks(const Bench& b, std::vector<Measurement>& out);
// hyper-connections at initialization (streams.cpp)
void stream_checks(const Bench& b, std::vector<Measurement>& out);

// The gradient-sink contrast of sink_checks: over the layers whose self-attention reads its input h
// through a norm, r_l = log10 of ||d(loss)/d(h_0)|| over the median ||d(loss)/d(h_t)||, w_l = the
// layer's sink rate / 100; the mean of r weighted by w (sinks), by 1 - w (others), their difference
// (gap); NaN, with the reason in `none`, where a side has no weight or nothing was read.
struct GradientSinkContrast {
  double sinks = std::nan(""), others = std::nan(""), gap = std::nan("");
  std::string none;
};
GradientSinkContrast gradient_sink_contrast(const analysis::SinksReport& r);

// the encoder-decoder claims at initialization (encdec.cpp): Xiong et al.'s Fig. 3, their Thm 1's
// depth scaling, and the size of one update against depth (Liu et al., DeepNet Thm 4.2)
void xiong_fig3_checks(const Bench& b, std::vector<Measurement>& out);
void xiong_thm1_checks(const Bench& b, std::vector<Measurement>& out);
void update_size_checks(const Bench& b, std::vector<Measurement>& out);
// fairseq's inputs, the setting of Xiong et al. (and what their Theorem 1 assumes: unit variance per
// channel entering the first layer), written into a fresh encoder-decoder with an untied head, one
// shared table and position tables: token embeddings drawn N(0, 1/d) and multiplied by sqrt(d),
// sinusoidal positions (fairseq's table, positions counted from 2), and the output projection the
// unscaled table. fairseq ties the output to the unscaled table; normlab's tied head would read the
// scaled one, so the unscaled copy sits in the untied head: at initialization the forward pass and
// every other weight's gradient are those of fairseq's tied model.
void use_fairseq_inputs(Model<double>& m, uint64_t seed);

// Every check of the table, in its order: one entry per group of claims. On fresh or given models the
// groups share nothing, and run_theory runs (seed, group) pairs in parallel; trained models are cached
// per seed, so there a seed's groups run together.
using Check = void (*)(const Bench&, std::vector<Measurement>&);
inline constexpr Check kChecks[] = {lemma_checks,      depth_checks,       xiong_fig3_checks,
                                    xiong_thm1_checks, update_size_checks, fake_depth_checks, sink_checks,
                                    stream_checks};

}  // namespace normlab::theory::detail
