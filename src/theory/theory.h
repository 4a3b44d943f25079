// theory.h: `normlab theory`: every claim of the source documents (000-004, docs/SOURCES.md) and of
// the papers normlab reproduces (Xiong et al. 2020, Liu et al. 2020, DeepNet), measured in the
// setting its source states, over several seeds, on fresh models and (for the claims that are not
// about initialization) on the same models trained on the built-in corpus. Each claim declares its
// kind (identity, bound, law, effect, comparison) and is decided by that kind's rule (rules.h). The
// claims in words: docs/THEORY.md.
// On one given model (`normlab theory --checkpoint`): every claim whose premises that model meets,
// measured on its weights over several input windows (the windows take the seeds' place); the
// others are "skipped" with the premise that fails.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/stats.h"
#include "model/config.h"
#include "model/model.h"
#include "theory/rules.h"
#include "train/data.h"
#include "train/model_source.h"

namespace normlab::theory {

struct Claim {
  std::string source;     // e.g. "000 Thm 2.2", "Xiong et al. 2020"
  std::string statement;  // what the source claims
  std::string setting;    // where it was measured
  std::string quantity;   // the number (or points) the rule reads
  Kind kind = Kind::Effect;
  Verdict verdict = Verdict::NotDistinguishable;
  Size size = Size::NotClaimed;  // an effect's or comparison's size against the source's
  std::string rule;       // the rule's numbers in words (fit quality, intervals, bound ratios)
  std::string measured;   // the first seed's (window's) numbers in words; a skip's reason
  std::string reported;   // what the paper reports in its own setting (empty for the seed documents)
  analysis::SeedSummary summary;  // identity: errors; bound: values; effect: effects (empty for a law)
  nlohmann::json numbers;  // {"rule": the numbers the rule used, "seeds": each seed's numbers}
  std::string model = "fresh";  // or "trained (N steps)", or "checkpoint 'M'"
  std::string input;            // the inputs of the claims, in words
  std::string replicates = "seeds";  // what the repetitions are: "seeds" (fresh or trained models), "windows" (one model)
};

// Where a verdict is counted: checks (identities) apart from bounds and from the empirical claims.
enum class Tally { Check, Bound, Empirical };
Tally tally_of(Kind k);

// A Pre-LN model trained for the theory table learned when its validation loss is at most this
// fraction of the unigram entropy of its training data (what a model of the byte frequencies alone
// reaches): 10% below means it learned more than which bytes are common.
inline constexpr double kLearnedFraction = 0.9;
// A model of another placement learned when it gets at least this share of the way from the unigram
// entropy down to what the same-size Pre-LN reaches under the same recipe (and 10% below the unigram).
inline constexpr double kLearnedShareOfPre = 0.5;

// A given model for `normlab theory --checkpoint`: its config and the float32 model it was opened as,
// held once (no copy of the loaded model). Each claim widens its parameters into the float64 model it
// measures (4 bytes a parameter held), or, with TheoryOptions::float32, measures this model itself.
struct TheoryModel {
  std::string name;  // for "checkpoint 'M'"
  ModelConfig config;
  std::shared_ptr<Model<float>> model;  // (float32: with gradients; the claims restore any weight they ablate)
  const std::vector<float>& params() const { return model->params(); }
};

inline constexpr long kTheoryTrainedSteps = 3000;  // the default cap of `normlab theory` and of studies

struct TheoryOptions {
  int d_model = 64, n_heads = 4, n_layers = 6, seq_len = 16;
  int deep_layers = 24;  // for the growth-with-depth claims
  long seed = 1337;      // the first seed; seed k is seed + k
  int seeds = 5;         // seeds of the fresh models
  int trained_seeds = 3; // seeds of the trained models
  long train_steps = 0;   // 0: fresh models; else every model is trained first, to a validation plateau
                          // or this many AdamW steps, whichever comes first (models.cpp)
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
  double test_fraction = 0;     // ... before its test split (a run's data.test_fraction)
  int bos = -1;                 // >= 0: every window starts with this id (a given model's run's data.bos)
  std::shared_ptr<const TheoryModel> model;  // set: measure this model only (seeds pick the input windows)
  // With a given model: its claims read its own float32 parameters (the model opened with its gradients,
  // 8 bytes a parameter in all) instead of a float64 copy each (8 or 16 bytes a parameter, one per claim
  // group and two groups at a time), one group after another; the claims that need float64 (Jacobians
  // checked to rounding: 000's lemmas, 004 Thm 2's product of token-local Jacobians) are skipped, saying
  // so. For a model whose float64 copies do not fit (theory --checkpoint --precision).
  bool float32 = false;
};

// Dong et al.'s collapse rate as points of a law: y_l = log(res_0 / res_l) over the layers l >= 1 where
// it collapsed (y_l > 0) and is above the rounding floor (res_l > 1e-12 res_0, and > floor: a float32
// stream's, DynamicsReport::res_floor), as (l, log y_l). A doubly exponential collapse (res_l ~ c^(b^l))
// makes log y linear in l; a geometric one (a constant factor per layer) makes log y = log l + c.
Series collapse_series(const std::vector<double>& res, double floor = 0);
LawRule collapse_law();

// The corpus of options.corpus (validation split: the inputs; training split: trained models' data).
Corpus theory_corpus(const TheoryOptions& options);

std::vector<Claim> run_theory(const TheoryOptions& options);
// --precision (auto, float64 or float32; Error otherwise) of a given model's claims, as
// TheoryOptions::float32: auto chooses float32 when two float64 copies with gradients (16 bytes a
// parameter each: two claim groups run at a time) would pass half of this machine's physical memory.
// `line`, when given: the "precision: ..." line that says the choice (and auto's reason).
bool claims_in_float32(const std::string& precision, size_t n_params, std::string* line = nullptr);
// The options of measuring one model (`normlab theory --checkpoint`, the Python module's
// Model.theory): its width, depth and seed; the tokenizer and corpus its run read, unless `options`
// names them (another tokenizer than the run's is refused); "bytes" / "gpt2" resolved. Checks that
// the corpus's ids fit the model's vocabulary (Error naming the checkpoint).
TheoryOptions theory_options_for(std::shared_ptr<const TheoryModel> model, const ModelSource& source,
                                 TheoryOptions options);
// The claims on fresh models, then (trained_steps > 0) on trained ones.
std::vector<Claim> run_theory_fresh_and_trained(TheoryOptions options, long trained_steps);
nlohmann::json to_json(const std::vector<Claim>& claims);
void print_claims(const std::vector<Claim>& claims);
// "Checks: 7 exact, 2 fail. Bounds: ... Empirical claims: ..." over the claims of one kind of model
std::string tally_line(const std::vector<Claim>& claims);

}  // namespace normlab::theory
