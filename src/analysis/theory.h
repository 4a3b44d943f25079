// theory.h: `normlab theory`: every claim of the source documents (000-004, docs/SOURCES.md) and of
// the papers normlab reproduces (Xiong et al. 2020, Liu et al. 2020, DeepNet), measured in the
// setting its source states, over several seeds, on fresh models and (for the claims that are not
// about initialization) on the same models trained on the built-in corpus. Each claim has one
// quantity; its per-seed values give a mean, a spread and a 95% confidence interval, and the verdict
// follows one rule (stats.h): "holds" or "violated" only when the interval excludes the other
// answer, else "not distinguishable at this scale". The claims in words: docs/THEORY.md.
// On one given model (`normlab theory --checkpoint`): every claim that model's architecture,
// placement, norm and depth can answer, measured on its weights over several input windows; the
// others are "skipped" with the reason.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/stats.h"
#include "model/config.h"
#include "model/model.h"
#include "train/data.h"

namespace normlab::analysis {

struct Claim {
  std::string source;     // e.g. "000 Thm 2.2", "Xiong et al. 2020"
  std::string statement;  // what the source claims
  std::string setting;    // where it was measured
  std::string quantity;   // the number the verdict is decided on
  std::string claimed;    // the region the claim puts it in, e.g. "> 1"
  std::string measured;   // mean, CI, spread, and the first seed's numbers in words
  std::string verdict;    // holds | violated | not distinguishable at this scale | vacuous | void | skipped
  std::string reported;   // what the paper reports in its own setting (empty for the seed documents)
  SeedSummary summary;
  nlohmann::json numbers;  // the seeds' numbers
  std::string model = "fresh";  // or "trained (N steps)", or "checkpoint 'M'"
  std::string input;            // the inputs of the byte-LM claims, in words
};

inline constexpr const char* kSkipped = "skipped";  // the model cannot answer the claim; `measured` says why
// The bound the claim states says nothing on every seed (it is 0 or negative, or its condition never
// holds): it can be neither confirmed nor refuted there.
inline constexpr const char* kVacuous = "vacuous";
// A trained model the claim was measured on did not learn (kLearnedFraction): a verdict on it would be
// about an untrained network in a trained one's place.
inline constexpr const char* kVoid = "void (model did not learn)";
// A model trained for the theory table learned when its validation loss is at most this fraction of
// the unigram entropy of its training data (what a model of the byte frequencies alone reaches): 10%
// below means it learned more than which bytes are common.
inline constexpr double kLearnedFraction = 0.9;

// A given model for `normlab theory --checkpoint`: its config and parameters (widened to double).
struct TheoryModel {
  std::string name;  // for "checkpoint 'M'"
  ModelConfig config;
  std::vector<double> params;
};

inline constexpr long kTheoryTrainedSteps = 3000;  // the default cap of `normlab theory` and of studies

struct TheoryOptions {
  int d_model = 64, n_heads = 4, n_layers = 6, seq_len = 16;
  int deep_layers = 24;  // for the growth-with-depth claims
  long seed = 1337;      // the first seed; seed k is seed + k
  int seeds = 5;         // seeds of the fresh models
  int trained_seeds = 3; // seeds of the trained models
  long train_steps = 0;   // 0: fresh models; else every model is trained first, to a validation plateau
                          // or this many AdamW steps, whichever comes first (theory_models.cpp)
  double train_lr = 1e-3; // (linear warm-up, then constant; batch 8 x seq_len, clip 1) on the training split
  std::string cache_dir;  // trained models are kept in <cache_dir>/theory-models; "" = not kept
  bool parallel_seeds = true;   // one seed per thread
  int paper_d_model = 512;      // width of the Xiong et al. check (their Fig. 3; FFN 2 d, 4 heads)
  int family_d_model = 64;      // width of the encoder-decoder depth families (N = 1 .. 16: Liu et al.,
                                // Xiong et al.'s Thm 1, DeepNet); the tests make it small
  std::string pairs = "es-en";  // translation pairs of the enc-dec claims: a built Bible pair or a directory
  std::string corpus;           // inputs of the byte-LM claims: "" = the built-in corpus; a text file (its
                                // bytes), or a token stream (.safetensors input_ids, .bin uint16)
  std::string tokenizer;        // "" = the corpus as bytes; else read it through this tokenizer ("gpt2", a path)
  long corpus_max_bytes = 0;    // > 0: only the corpus's first bytes (whole lines), as its run read them
  double val_fraction = 0.1;    // the corpus's last fraction is the validation split (a run's data.val_fraction)
  std::shared_ptr<const TheoryModel> model;  // set: measure this model only (seeds pick the input windows)
};

// Source 004's fake depth by function (theory_fake_depth.cpp), on one window (B = 1) of a one-stack
// model: per layer, the mean angular distance between the streams entering it and the next,
// arccos(cos(x_l, x_(l+1)))/pi over the tokens, and (a causal model with logits: with_loss) the
// next-token loss increase when its branches are removed (each sub-layer's output projection and bias
// zeroed; the weights are restored; removal = false: not measured). The exponents of each against the layer index (log-log fits;
// the removal's over the layers where it is > 0, NaN for fewer than 3) decide the claims, in the
// region `fake_depth_region` gives the placement: Pre-LN's shrink (< 0), Post-LN's are flat.
struct FakeDepth {
  double loss = 0;
  bool with_loss = false;
  std::vector<double> angular, ablation;
  double angular_exponent() const;
  double removal_exponent() const;
  int removal_layers() const;  // layers whose removal costs anything (> 0)
};
// float (the pretrained study: SmolLM2's 31 forwards per window, 3x faster than in double; float32's
// error on a loss is ~1e-5 nats against removal costs of 1e-3 and more) or double.
template <class S>
FakeDepth measure_fake_depth(Model<S>& m, const std::vector<int32_t>& ids, bool removal = true);
Region fake_depth_region(Placement p);

// Dong et al.'s rate of rank collapse, from res(X_l), l = 0 .. L, of pure attention: y_l = log(res_0 /
// res_l) over the layers l >= 1 where it collapsed (y_l > 0) and is above the rounding floor (res_l >
// 1e-12 res_0). A doubly exponential collapse (res_l ~ c^(b^l)) makes log y linear in l; a geometric one
// (a constant factor per layer) makes y linear in l, so log y linear in log l with slope 1.
struct CollapseRate {
  double double_vs_single = 0;  // log(RSS of the power law / RSS of the exponential law) of log y: > 0,
                                // doubly exponential fits better
  double exponent = 0;          // p of y ~ l^p (1: geometric)
  double factor = 0;            // res shrinks by this factor per layer, on average over the fitted layers
  int layers = 0;               // layers fitted (fewer than 3: no rate; the other fields are 0)
};
CollapseRate collapse_rate(const std::vector<double>& res);

// The corpus of options.corpus (validation split: the inputs; training split: trained models' data).
Corpus theory_corpus(const TheoryOptions& options);

std::vector<Claim> run_theory(const TheoryOptions& options);
// The options of measuring one model (`normlab theory --checkpoint`, the Python module's
// Model.theory): its width, depth and seed; the tokenizer and corpus its run read, unless `options`
// names them (another tokenizer than the run's is refused); "bytes" / "gpt2" resolved. Checks that
// the corpus's ids fit the model's vocabulary (Error naming the checkpoint).
TheoryOptions theory_options_for(std::shared_ptr<const TheoryModel> model, const std::string& checkpoint,
                                 TheoryOptions options);
// The claims on fresh models, then (trained_steps > 0) on trained ones.
std::vector<Claim> run_theory_fresh_and_trained(TheoryOptions options, long trained_steps);
nlohmann::json to_json(const std::vector<Claim>& claims);
void print_claims(const std::vector<Claim>& claims);

}  // namespace normlab::analysis
