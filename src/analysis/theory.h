// theory.h: `normlab theory`: each claim of the source documents (seeds/000, 002, 003, 004) and of
// Xiong et al. 2020, measured with the instruments on fresh models, with a verdict (holds /
// violated / holds only under a stated condition / not observed) and the numbers behind it.
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
};

struct TheoryOptions {
  int d_model = 64, n_heads = 4, n_layers = 6, seq_len = 16;
  int deep_layers = 24;  // for the growth-with-depth claims
  long seed = 1337;
};

std::vector<Claim> run_theory(const TheoryOptions& options);
void print_claims(const std::vector<Claim>& claims);

}  // namespace normlab::analysis
