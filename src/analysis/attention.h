// attention.h: the attention-spectrum instrument (README "Instruments"; source 002 in docs/SOURCES.md): per
// layer and head, the spectral norm ||A||_2 of the attention probabilities, the largest column sum
// c_max, the chain 1 <= ||A||_2 <= sqrt(c_max) <= sqrt(n), source 002's bound
// sqrt(n / (1 + (n-1) exp(-2M))), and the row entropies.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace normlab::analysis {

struct AttentionMatrixStats {
  double norm2 = 0;        // ||A||_2
  double c_max = 0;        // largest column sum
  double entropy_mean = 0, entropy_min = 0, entropy_max = 0;  // row entropies (nats)
  bool chain_holds = false;  // 1 <= ||A||_2 <= sqrt(c_max) <= sqrt(n), within rounding
};

// Statistics of one row-stochastic n x n matrix (row-major).
AttentionMatrixStats attention_matrix_stats(const double* A, int n);

struct HeadReport {
  int layer = 0, head = 0;
  AttentionMatrixStats stats;
  std::optional<double> gamma_max;    // Gamma = max |gamma| of the norm feeding the attention
  double sigma_q = 0, sigma_k = 0;    // spectral norms of this head's query and key projections
  std::optional<double> seed_bound;   // sqrt(n / (1 + (n-1) exp(-2M)))
  std::string bound_verdict;
};

struct AttentionReport {
  int T = 0, d = 0, heads = 0;
  std::vector<HeadReport> heads_by_layer;
};

// The model must have run forward on one sequence (B = 1).
AttentionReport analyze_attention(const Model<double>& model);
nlohmann::json to_json(const AttentionReport& report);
void print_report(const AttentionReport& report);

}  // namespace normlab::analysis
