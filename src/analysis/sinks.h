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
//
// Gradient sinks (Chen et al. 2026, arXiv 2603.17771: under a causal mask the gradient concentrates
// on the sink token, and the RMSNorm Jacobian, whose gain falls as 1 / ||x||, lets a massive
// activation take that pressure): for a causal model with an output head, the loss of predicting
// each next token of every window (the last position has no label), and per stream point the norm of
// d(loss)/d(x_t) at every position: at the first position against the median; the same at each
// self-attention's normalized input (d(loss)/d(h_t), h = ln_in(x): the pressure before the norm's
// Jacobian, which the paper says the sink concentrates on the sink token). And the Jacobian of
// the norm that reads each stream point (a pre-norm sub-layer's input norm, the final norm), its
// largest singular value at the token of the largest ||x_t|| against the token of the median one,
// beside the ratio of those norms that a gain of 1 / ||x|| predicts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/layer_log.h"  // kSinkEpsilon, Gu et al.'s threshold (the training log reads sinks too)
#include "train/data.h"

namespace normlab::analysis {

inline constexpr double kMassiveMin = 100;      // |x| above this ...
inline constexpr double kMassiveRatio = 1000;   // ... and this many times the layer's median |x|

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
  double null_mass = 0;         // learned sink logits (model.attn_sink): the mass a query puts on no token,
                                // 1 - sum_k A[q, k], mean over queries and windows (0 without sink logits)
};

// d(loss)/d(x) at one stream point (the loss a mean over the windows' labelled positions)
struct StreamGradient {
  int layer = 0;                  // as StreamSinks::layer
  double first = 0;               // ||d(loss)/d(x_0)||, mean over windows
  double median = 0;              // median ||d(loss)/d(x_t)|| over every position of every window
  double ratio = 0;               // first / median
  int top_token = 0;              // the position of the largest mean over windows of ||d(loss)/d(x_t)|| ...
  double top = 0;                 // ... and that mean
};

// The Jacobian of the norm that reads a stream point, at two of its tokens
struct NormGain {
  int layer = 0;                  // as StreamSinks::layer
  std::string site;               // "h.3.attn.ln_in", "ln_f"
  int max_window = 0, max_token = 0;        // the token of the largest ||x_t|| ...
  int median_window = 0, median_token = 0;  // ... and of the median one (the lower middle of an even count)
  double norm_max = 0, norm_median = 0;     // their ||x_t||
  double gain_max = 0, gain_median = 0;     // the largest singular value of the norm's Jacobian there
  double gain_ratio = 0;          // gain_max / gain_median
  double predicted = 0;           // norm_median / norm_max: the ratio of a gain proportional to 1 / ||x||
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
  // gradient sinks: empty when there is no next-token loss (an encoder, a model without a head), with
  // the reason in no_gradients
  std::vector<StreamGradient> gradients;  // n_layers + 1
  // d(loss)/d(h) at each self-attention's normalized input h = ln_in(x) (layers whose attention has an
  // input norm; empty for a post-norm stack): the gradient before the norm's Jacobian
  std::vector<StreamGradient> attn_input_gradients;
  std::string no_gradients;
  std::vector<NormGain> norm_gains;       // the stream points a norm reads (a post-norm stack: ln_f only)
  // hyper-connections (model.hyper): the number of streams (1 without). With n > 1 a stream point is
  // their sum (what the final norm reads; the embedding output at layer 0), an input norm's gain is read
  // at its own input (the mix of the streams the sub-layer reads), and a gradient at a stream point is
  // that of a shift added to every stream (d(loss)/d(x0) at layer 0).
  int hyper_streams = 1;
  std::string precision = "float64";  // the model's: float32 for a big model's own parameters (readings in double)
};

// The windows are the rows of the batches (each row a sequence; padding is refused). A forward pass
// per window (the activations of one sequence at a time), and for the gradient sinks a backward pass
// of its batch's mean next-token loss (the batches' own labels are not read; the parameter gradients
// are left changed).
// with_gradients = false: no backward (the gradient-sink readings left out, no_gradients says so).
// S: the model's precision, double or float (a big model's own parameters); every reading is in double.
template <typename S>
SinksReport analyze_sinks(Model<S>& model, const std::vector<Batch>& batches, bool with_gradients = true);
nlohmann::json to_json(const SinksReport& r);
void print_report(const SinksReport& r);

}  // namespace normlab::analysis
