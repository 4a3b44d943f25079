// dynamics.h: the depth-dynamics instrument (docs/INSTRUMENTS.md), at the model's current
// parameters, averaged over batches of a corpus: per layer the residual-stream norm ||x_l|| (per
// token), the branch-to-stream ratio ||F_l|| / ||x_l|| of each sub-layer, the gradient norm of each
// layer's parameters (Xiong et al.: grows toward the output for Post-LN, flat for Pre-LN), and rank
// collapse res(X_l) = ||X - 1 mean(X)^T||_F / ||X||_F of each sequence (Dong et al.), for the model
// and for its ablations with and without skips and MLPs (same weights, sub-layers removed).
// For an encoder-decoder model, analyze_dynamics_encdec (below): the same per stack, layer and
// sub-layer (self-attention, cross-attention, FFN).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/passes.h"
#include "model/model.h"
#include "train/data.h"

namespace normlab::analysis {

// How a gradient ratio with no gradient at its first layer is printed (norm_ratio: NaN, JSON null)
inline constexpr const char* kNoGradientRatio = "undefined (the first layer's gradient is 0)";

struct LayerDynamics {
  int layer = 0;
  std::string placement;
  double stream_rms = 0;          // mean over tokens of RMS(x_l) = ||x_l|| / sqrt(d) entering the layer
                                  // (the unit of the stream everywhere: the training logs, the report)
  // mean over sequences of the largest token's share of the squared norm, max_t ||x_t||^2 / sum_t
  // ||x_t||^2 (1/T when the tokens are alike; near 1 when one token carries the stream_rms mean)
  double largest_token_share = 0;
  double attn_branch_ratio = 0;   // mean over tokens of ||g|| / ||x|| for the attention sub-layer
  double mlp_branch_ratio = 0;
  double grad_norm = 0;           // ||dL/d theta_l|| over the layer's parameters, mean over batches
  double ffn_out_grad_norm = 0;   // ||dL/d W2_l|| of the MLP's output projection (Xiong et al.'s W^{2,l}); NaN without MLP
  double residual_rank = 0;       // res(X_l) of the stream entering the layer, mean over sequences
  // Hyper-connections (model.hyper; otherwise empty): x_l is the sum of the n streams (what the final
  // norm reads; x_0 the embedding output they all start as) and the branch ratios are ||g|| / ||u||, u
  // the branch input read from them. Each stream's RMS entering the layer (mean over tokens), and the
  // gains of the composite residual mix through the layer's sub-layers (model/hyper.h HyperGain: the
  // largest row sum, column sum and singular value of H^res_l ... H^res_1, maximum over the tokens, mean
  // over the batches).
  std::vector<double> streams_rms;
  double composite_forward = 0, composite_backward = 0, composite_spectral = 0;
  // Attention Residuals (model.hyper = attn_res; otherwise empty): the depth weights P_s each sub-layer
  // of the layer reads its sources with (stream 0 the embedding, stream k the k-th block), mean over the
  // tokens and batches; 0 for the streams it does not read.
  std::vector<double> depth_weights_attn, depth_weights_mlp;
};

// The per-token readings of one stream point (the stream entering a layer, or after the last): at each
// position t of the windows, the mean over the windows of RMS(x_t) and of each sub-layer's ||g_t|| /
// ||x_t|| (NaN after the last layer and for an absent MLP). A single window (the Python module's one
// text) gives each token's own reading; the mean over t of stream_rms is the layer's stream_rms.
struct TokenDynamics {
  std::vector<double> stream_rms, attn_branch_ratio, mlp_branch_ratio;  // each of length T
};

// One ablation of the model for rank collapse: skip paths on or off, MLP sub-layers on or off,
// every remaining parameter the model's own.
struct RankCollapseVariant {
  bool skips = true, mlp = true;
  std::vector<double> residual_rank;  // res(X_l) entering each layer, then after the last
  double ratio = 0;                   // res(X_L) / res(X_0)
};

struct ParamGradNorm {
  std::string name;               // a parameter tensor, e.g. h.3.mlp.proj.weight
  double grad_norm = 0;           // ||dL/d theta||, mean over batches
};

struct DynamicsReport {
  std::vector<LayerDynamics> layers;
  std::vector<TokenDynamics> tokens;  // per layer, then after the last (L + 1 entries)
  std::vector<ParamGradNorm> params;  // every parameter tensor, in the canonical order
  std::vector<RankCollapseVariant> rank_collapse;  // (skips, mlp) = (1,1), (1,0), (0,1), (0,0)
  double final_stream_rms = 0, final_residual_rank = 0;
  // Attention Residuals: the depth weights of the final read (what the final norm reads), as a layer's
  // depth_weights_attn; empty otherwise
  std::vector<double> final_depth_weights;
  double loss = 0;                // mean loss over the batches (NaN without a head)
  bool has_loss = true;           // false for a headless model: every gradient norm is NaN
  int batches = 0, B = 0, T = 0;
  double grad_growth = 0;         // grad_norm(last layer) / grad_norm(first layer)
  double ffn_out_grad_growth = 0; // the same for ffn_out_grad_norm (NaN without MLP)
  // The model's precision, and the smallest res(X) it resolves: a float32 stream's rounding leaves rows
  // that should be equal about 1e-7 apart, so a rank collapse below res_floor is that, not the model's
  // (measured on SmolLM2's skip-free ablation: 3.5e-7 in float32 where float64 reads 6.4e-9; 1e-5 and
  // above agree to about 1%).
  std::string precision = "float64";
  double res_floor = 0;
};

// Runs forward and backward on `batches` batches sampled from bytes (each row starting with `first` when
// it is >= 0: with_first_token, a run's data.bos) (gradients are accumulated in
// the model's grads, which are zeroed first and left holding the last batch's gradients). S is the
// model's precision, double or float (a big model's own float32 parameters, no second copy); every
// reading is summed in double either way.
template <typename S>
DynamicsReport analyze_dynamics(Model<S>& model, const std::vector<int32_t>& bytes, int batches, int B, int T,
                                uint64_t seed, int32_t first = -1);
// The same on given batches (e.g. a token file's), each with its labels. A batch whose activations
// exceed pass_bytes runs in passes of fewer sequences (analysis/passes.h): the gradient is the whole
// batch's (each pass's backward weighted by its share of the labelled tokens), every reading per
// sequence as before; the model is then left planned for the last pass.
template <typename S>
DynamicsReport analyze_dynamics(Model<S>& model, const std::vector<Batch>& batches,
                                double pass_bytes = kPassActivationBytes);

nlohmann::json to_json(const DynamicsReport& report);
void print_report(const DynamicsReport& report);

// ---- Encoder-decoder models (dynamics_encdec.cpp) ----
//
// Liu et al. 2020 ("Understanding the Difficulty of Training Transformers") find that at
// initialization only the Post-LN *decoder* has vanishing gradients toward its input, while the
// encoder's are balanced; the per-stack gradient norms below are what that claim is checked on.
// Averages over tokens count real tokens only (mask 1: the source's mask in the encoder, the
// target's in the decoder; every token without a mask).

struct SublayerDynamicsEncDec {
  int slot = 0;                 // ModelConfig::slot index
  std::string kind;             // "attn" (self-attention), "cross" or "mlp"
  std::string prefix;           // its parameter-name prefix, e.g. "h.1.cross"
  bool present = true;          // false: the MLP of an attention-only model (numbers NaN)
  double branch_ratio = 0;      // mean over real tokens of ||g|| / ||x_in|| (g the branch after its norm)
  double grad_norm = 0;         // ||dL/d theta|| over the sub-layer's parameters, mean over batches
};

struct LayerDynamicsEncDec {
  int layer = 0;                // within its stack
  int global_layer = 0;         // the config's global layer (decoder layers follow the encoder's)
  std::string placement;
  double stream_rms = 0;        // mean over real tokens of RMS(x) = ||x|| / sqrt(d) entering the layer
  double grad_norm = 0;         // ||dL/d theta_l|| over every parameter of the layer, mean over batches
  std::vector<SublayerDynamicsEncDec> sublayers;  // encoder: attn, mlp; decoder: attn, cross, mlp
};

struct StackDynamics {
  std::vector<LayerDynamicsEncDec> layers;
  double out_stream_rms = 0;    // mean over real tokens of RMS(x) leaving the last layer (before any final norm)
  double grad_growth = 0;       // grad_norm(last layer) / grad_norm(first layer)
};

struct EncDecDynamicsReport {
  StackDynamics encoder, decoder;
  double memory_rms = 0;        // mean over real source tokens of RMS(memory) (what cross-attention reads)
  std::vector<ParamGradNorm> params;  // every parameter tensor, canonical order
  double loss = 0;              // mean loss over the batches
  int batches = 0, B = 0, T = 0, S = 0;
};

// Forward and backward of an encoder-decoder model (model.config().encdec()) on each batch (its
// source in src/src_mask, its target in ids/mask/labels, as load_token_file and translation_batch
// make them; every batch of one shape, each with at least one label); the model's grads are zeroed
// first and left holding the last batch's gradients. Throws Error for a model that is not an
// encdec or a batch without a source. The function a theory check calls: e.g.
// report.decoder.layers[l].grad_norm against l for placement post vs pre.
EncDecDynamicsReport analyze_dynamics_encdec(Model<double>& model, const std::vector<Batch>& batches);

nlohmann::json to_json(const EncDecDynamicsReport& report);
void print_report(const EncDecDynamicsReport& report);

}  // namespace normlab::analysis
