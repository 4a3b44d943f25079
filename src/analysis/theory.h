// theory.h: `normlab theory`: each claim of the source documents (000, 002, 003, 004: docs/SOURCES.md) and of
// Xiong et al. 2020, measured with the instruments on fresh models and on the same models trained
// on the built-in corpus, with a verdict (holds / violated / holds only under a stated condition /
// not observed) and the numbers behind it. The statements about initialization only (Xiong et
// al., Liu et al.'s first update) and the DeepNet constant (a fact of the formula) are measured on
// fresh models only.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace normlab::analysis {

struct Claim {
  std::string source;     // e.g. "000 Thm 2.2"
  std::string statement;  // what the document claims
  std::string measured;   // what was measured, with the numbers
  std::string verdict;    // holds | violated | holds only ... | not observed ...
  nlohmann::json numbers;
  std::string model = "fresh";  // or "trained (N steps)"
};

inline constexpr long kTheoryTrainedSteps = 300;  // the default of `normlab theory` and of studies

struct TheoryOptions {
  int d_model = 64, n_heads = 4, n_layers = 6, seq_len = 16;
  int deep_layers = 24;  // for the growth-with-depth claims
  long seed = 1337;
  long train_steps = 0;   // 0: fresh models; else every model is trained this many AdamW steps first
  double train_lr = 1e-3; // (cosine, 20% warm-up, batch 8 x seq_len, clip 1) on the corpus' training split
};

std::vector<Claim> run_theory(const TheoryOptions& options);
// The claims on fresh models, then (trained_steps > 0) on trained ones.
std::vector<Claim> run_theory_fresh_and_trained(TheoryOptions options, long trained_steps);
nlohmann::json to_json(const std::vector<Claim>& claims);
void print_claims(const std::vector<Claim>& claims);

}  // namespace normlab::analysis
