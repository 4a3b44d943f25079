// layer_log.h: the per-layer instruments read during training (train.log_every_layers): for every
// sub-layer the stream norm and its largest entry against the median (massive activations), the
// branch-to-stream ratio, every norm site's input norm, the attention entropy, largest logit and sink
// share, and per parameter group the gradient norm and the update ratio
// ||delta theta|| / ||theta||; per stack its output norm; the output logits' log Z; with
// hyper-connections each stream's RMS entering a sub-layer and the residual mixes' gains (model/hyper.h). Read from what a training step already has (the activations of its last
// forward, the gradients after backward, the parameters before and after the optimizer step): no
// extra forward pass. And the model update ||Delta F|| of DeepNet (train.log_model_update), which
// does cost forward passes on a fixed probe batch. The record format is in docs/USAGE.md ("Per-layer logs during training").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"

namespace normlab {

// One parameter group: the tensors of a sub-layer (or of the model outside the blocks) that share a
// name once the sub-layer prefix and ".weight" / ".bias" are taken off ("qkv", "proj", "ln_in", "fc",
// "omega", ...; outside the blocks "wte", "wpe", "ln_f", "enc.ln_f", ...). A layer's ReZero scalar
// ("rezero", shared by its sub-layers) is listed under the layer's first sub-layer.
struct ParamGroup {
  std::string name;
  int slot = -1;                    // the sub-layer (config.slot), or -1 outside the blocks
  std::vector<size_t> specs;        // indices into the parameter table
};

// The groups of a model, in canonical parameter order.
std::vector<ParamGroup> param_groups(const ParamTable& table, const ModelConfig& cfg);

// One logging step. begin() after backward and before the optimizer step reads the activations of
// the last forward and the gradients and keeps a copy of the parameters; finish() after the step
// adds the update ratios and returns the record {"type": "layers", "step": ..., ...}.
class LayerLogger {
 public:
  explicit LayerLogger(const Model<float>& model);
  void begin(const Model<float>& model);
  nlohmann::json finish(const Model<float>& model, long step);

 private:
  std::vector<ParamGroup> groups_;
  std::vector<float> before_;
  nlohmann::json record_;
};

// The readings of one sub-layer's activations (after a forward); public for the oracle test.
// Every norm is the RMS over channels of one token, ||v|| / sqrt(C), averaged over the rows.
double mean_token_rms(const float* v, long rows, int C);
// Mean over rows of ||f_row|| / ||x_row|| (rows where x is zero are skipped).
double mean_token_ratio(const float* f, const float* x, long rows, int C);
// Mean over rows of -sum p log p of attention probabilities p (rows, keys) (0 log 0 = 0).
double mean_row_entropy(const float* p, long rows, int keys);

// The largest attention logit of a self-attention (the reading whose growth precedes attention-logit
// divergence, Wortsman et al. 2023): the max over batch rows, heads and the (query i, key j) pairs the
// softmax saw (j <= i when causal; keys where key_mask is 0 left out) of scale q_i . k_j, before any
// soft cap. qkv (B, T, QW) as the forward keeps it (after QK-norm and RoPE): NH query heads of HS
// columns, then KVH key heads from column A; query head h reads key head h / (NH / KVH).
double max_attention_logit(const float* qkv, int B, int T, int QW, int A, int NH, int KVH, int HS, double scale,
                           bool causal, const uint8_t* key_mask);
// Massive activations in a stream (Sun et al. 2024, arXiv 2402.17762): the largest |x| of its n entries
// and that over the median |x| (NaN when the median is 0).
struct StreamPeak {
  double max_abs = 0, ratio = 0;
};
StreamPeak stream_peak(const float* x, size_t n);

// Gu et al.'s threshold on the first token's importance (arXiv 2410.10781, their code's 0.3)
inline constexpr double kSinkEpsilon = 0.3;
// Attention sinks in one attention's probabilities att (B, NH, T, T), [query][key]: the share of
// (batch row, head) whose first key's importance -- the mean attention it receives from the queries
// that see it, every query: sum_q att[q][0] / T -- exceeds epsilon (Gu et al.'s sink on the first token).
double first_key_sink_share(const float* att, int B, int NH, int T, double epsilon = kSinkEpsilon);

// log Z = log sum_v exp(logit_v) of each row of logits (rows, V), the quantity z-loss penalizes: its
// mean over the rows and its largest value.
struct LogPartition {
  double mean = 0, max = 0;
};
LogPartition log_partition(const float* logits, long rows, int V);

// DeepNet's model update on the probe batch: mean over positions of the L2 norm over the vocabulary
// of (after - before), both (positions, V) logits.
double model_update_norm(const std::vector<float>& before, const float* after, long positions, int V);

}  // namespace normlab
