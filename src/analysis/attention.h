// attention.h: the attention-spectrum instrument (docs/INSTRUMENTS.md; source 002 in docs/SOURCES.md): per
// layer and head, the spectral norm ||A||_2 of the attention probabilities, the largest column sum
// c_max, the chain of bounds below, source 002's softmax-margin bound, and the row entropies. For an
// encoder-decoder model: the encoder's self-attention (bidirectional), the decoder's (causal) and its
// cross-attention (T x S).
//
// Bounds of a row-stochastic matrix A (rows x cols = T x S, rows summing to 1, entries >= 0). Let c =
// A^T 1_T be the column sums (they add up to T) and k the number of columns with positive mass (the
// keys a row can attend to: padded keys get probability exactly 0):
//   sqrt(T / k) <= ||c||_2 / sqrt(T) <= ||A||_2 <= sqrt(c_max) <= sqrt(T).
// ||A||_2 <= sqrt(||A||_1 ||A||_inf) = sqrt(c_max * 1); c_max <= T as every entry is <= 1;
// ||A^T 1_T|| <= ||A|| ||1_T|| gives the second inequality, and Cauchy-Schwarz on the k nonzero
// column sums (||c||_2 >= ||c||_1 / sqrt(k) = T / sqrt(k)) the first. For a square matrix with every
// column reachable (k = n: bidirectional or causal self-attention, since row j sees key j) the outer
// ends are source 002's 1 <= ||A||_2 <= sqrt(c_max) <= sqrt(n). A rectangular one need not reach 1:
// one query over S uniform keys has ||A||_2 = 1/sqrt(S) = sqrt(T/S).
//
// Source 002's bound: if every score satisfies |s_ij| <= M, then p_ij <= e^M / (e^M + (k-1) e^-M) =
// 1 / (1 + (k-1) e^-2M) when a row has k keys, so c_max <= T / (1 + (k-1) e^-2M) and ||A||_2 <=
// sqrt(T / (1 + (k-1) e^-2M)): source 002's sqrt(n / (1 + (n-1) exp(-2M))) at T = k = n, and for
// cross-attention T queries over the k unpadded source keys. With queries from a norm of gain Gamma_q
// and keys from one of gain Gamma_k (beta = 0, no q/k bias), ||h|| <= Gamma sqrt(d), so a head's score
// is at most M = Gamma_q Gamma_k sigma_Q sigma_K d / sqrt(HS). A causal row i has only i + 1 keys, so
// its entries are not bounded by the k = T case (the verdict says so when that bites).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace normlab::analysis {

struct AttentionMatrixStats {
  int rows = 0, cols = 0;
  int keys = 0;            // columns with positive mass (k above)
  double norm2 = 0;        // ||A||_2
  double c_max = 0;        // largest column sum
  double col_sum_norm = 0; // ||c||_2
  double lower = 0;        // ||c||_2 / sqrt(rows), the best lower bound of the chain (>= sqrt(rows / keys))
  double row_sum_dev = 0;  // max |row sum - 1|: how row-stochastic the matrix is
  double entropy_mean = 0, entropy_min = 0, entropy_max = 0;  // row entropies (nats)
  bool chain_holds = false;  // the chain above, within rounding
};

// Statistics of one row-stochastic rows x cols matrix (row-major); the square n x n one. `unit`: the
// rounding unit of the matrix's entries (float64's 2^-53 by default; a float32 matrix's 2^-24), which
// sets the slack of chain_holds: each sum of up to max(rows, cols) terms of size <= 1.
// `keys` >= 0: the number of keys the softmax ran over, when it is known (else the columns with positive
// mass: padded keys get exactly 0; so do keys whose probability underflowed, which float32's exp does
// 100 nats below a row's largest score).
AttentionMatrixStats attention_matrix_stats(const double* A, int rows, int cols, double unit = 0x1p-53, int keys = -1);
inline AttentionMatrixStats attention_matrix_stats(const double* A, int n) { return attention_matrix_stats(A, n, n); }

// Source 002's bound sqrt(T / (1 + (k-1) exp(-2M))) for T queries over k keys.
double softmax_margin_bound(int T, int k, double M);

struct HeadReport {
  int layer = 0, head = 0;          // layer within its stack
  std::string stack = "";           // "encoder" or "decoder" for an encdec; "" otherwise
  std::string kind = "self";        // "self" or "cross"
  bool causal = false;
  AttentionMatrixStats stats;
  std::optional<double> gamma_max;    // Gamma = max |gamma| of the norm feeding the queries (and keys, for self)
  std::optional<double> gamma_k_max;  // cross only: of the norm feeding the keys (the memory's)
  double sigma_q = 0, sigma_k = 0;    // spectral norms of this head's query and key projections
  std::optional<double> seed_bound;   // sqrt(T / (1 + (k-1) exp(-2M)))
  // the bound's derivation holds for this head: rows of n entries (not causal), no q/k bias, no norm
  // bias (beta = 0); where it does not, ||A|| may exceed seed_bound without contradicting it
  bool bound_premises = false;
  std::string bound_verdict;
};

struct AttentionReport {
  int T = 0, d = 0, heads = 0;
  int S = 0;                        // encdec: the source length (0 otherwise)
  std::vector<HeadReport> heads_by_layer;  // encdec: the encoder's layers, then per decoder layer self and cross
  std::string precision = "float64";       // the model's numbers: "float64", or "float32" (its own parameters)
};

// The model must have run forward on one sequence (B = 1; an encdec one with its source). On a float32
// model (S = float: `analyze attention --precision float32`, a big model's own parameters) every
// statistic is computed in float64 from its float32 probabilities and weights, and the bounds' verdicts
// allow float32's rounding instead of float64's.
template <typename S>
AttentionReport analyze_attention(const Model<S>& model);
nlohmann::json to_json(const AttentionReport& report);
void print_report(const AttentionReport& report);

}  // namespace normlab::analysis
