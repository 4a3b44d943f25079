// sinks.h: the sinks instrument (`normlab analyze sinks`, docs/INSTRUMENTS.md): massive activations
// and attention sinks of a GPT or encoder at its current parameters, over windows of input.
//
// Massive activations (Sun et al. 2024, arXiv 2402.17762; their code reads, per layer, the three
// largest |activation| of a sequence's hidden states and the median |activation|): per stream point
// (the stream entering each layer, and after the last), the three largest |x| with their window,
// position and dimension, the median |x|, their ratio, the kurtosis of the entries, and which
// dimensions hold an entry above both thresholds (kMassiveMin, kMassiveRatio x the median). Per
// position, the norm of each token's vector: the largest against the median, and how often the first
// position holds the largest (a mean over tokens hides one token that carries most of the norm).
//
// Attention sinks (Gu et al. 2024, arXiv 2410.10781; their eval_sink_open_source.py): the importance
// of key k in a head is the mean attention it receives from the queries that can see it,
// sum_q A[q, k] / (number of such queries: T - k when causal, T otherwise); a head of a window has a
// sink on the first token when the first token's importance exceeds epsilon (0.3 in their code), and
// the sink rate is the share of (window, layer, head) with one, in percent.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/data.h"

namespace normlab::analysis {

inline constexpr double kMassiveMin = 100;      // |x| above this ...
inline constexpr double kMassiveRatio = 1000;   // ... and this many times the layer's median |x|
inline constexpr double kSinkEpsilon = 0.3;     // Gu et al.'s threshold on the first token's importance

struct StreamEntry {
  double value = 0;  // the signed entry
  int window = 0, token = 0, dim = 0;
};

struct MassiveDim {
  int dim = 0;
  int entries = 0;          // entries of this dimension above both thresholds (over windows and positions)
  int first_position = 0;   // of those, at position 0
  double largest = 0;       // the largest |x| of the dimension
};

struct StreamSinks {
  int layer = 0;                 // the stream entering this layer (layer == n_layers: after the last block)
  std::vector<StreamEntry> top;   // the three largest |x|, largest first
  double median_abs = 0;         // median |x| over every entry of every window
  double ratio = 0;              // |top[0]| / median_abs (NaN when the median is 0)
  double kurtosis = 0;           // E[(x - mean)^4] / Var(x)^2 over every entry (3 for a Gaussian)
  std::vector<MassiveDim> massive;  // dimensions with an entry above both thresholds
  double token_norm_max = 0;     // the largest ||x_t|| of any position of any window
  int token_norm_max_window = 0, token_norm_max_token = 0;
  double token_norm_median = 0;  // median ||x_t|| over every position of every window
  double first_position_largest = 0;  // share of windows whose largest ||x_t|| is at position 0
  double largest_norm_share = 0;      // mean over windows of max_t ||x_t||^2 / sum_t ||x_t||^2
};

struct HeadSinks {
  int layer = 0, head = 0;
  double first_importance = 0;  // the first token's importance, mean over windows
  double sink_share = 0;        // share of windows where it exceeds epsilon
  int top_key = 0;              // the key of the largest mean importance over windows ...
  double top_importance = 0;    // ... and that importance
};

struct SinksReport {
  int windows = 0, T = 0, d_model = 0, n_heads = 0;
  bool causal = true;
  double epsilon = kSinkEpsilon, massive_min = kMassiveMin, massive_ratio = kMassiveRatio;
  std::vector<StreamSinks> streams;  // n_layers + 1
  std::vector<HeadSinks> heads;      // n_layers x n_heads, layer-major
  std::vector<double> layer_sink_rate;  // percent of (window, head) of each layer
  double sink_rate = 0;              // percent of (window, layer, head)
  int first_massive_layer = -1;      // the first stream point with a massive dimension, or -1
};

// The windows are the rows of the batches (each row a sequence; padding is refused). Forward passes
// only.
SinksReport analyze_sinks(Model<double>& model, const std::vector<Batch>& batches);
nlohmann::json to_json(const SinksReport& r);
void print_report(const SinksReport& r);

}  // namespace normlab::analysis
