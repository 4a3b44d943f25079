// dynamics.h: the depth-dynamics instrument (README "Instruments"), at the model's current
// parameters, averaged over batches of a corpus: per layer the residual-stream norm ||x_l|| (per
// token), the branch-to-stream ratio ||F_l|| / ||x_l|| of each sub-layer, the gradient norm of each
// layer's parameters (Xiong et al.: grows toward the output for Post-LN, flat for Pre-LN), and rank
// collapse res(X_l) = ||X - 1 mean(X)^T||_F / ||X||_F of each sequence (Dong et al.), for the model
// and for its ablations with and without skips and MLPs (same weights, sub-layers removed).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/data.h"

namespace normlab::analysis {

struct LayerDynamics {
  int layer = 0;
  std::string placement;
  double stream_norm = 0;         // mean over tokens of ||x_l|| entering the layer
  double attn_branch_ratio = 0;   // mean over tokens of ||g|| / ||x|| for the attention sub-layer
  double mlp_branch_ratio = 0;
  double grad_norm = 0;           // ||dL/d theta_l|| over the layer's parameters, mean over batches
  double ffn_out_grad_norm = 0;   // ||dL/d W2_l|| of the MLP's output projection (Xiong et al.'s W^{2,l}); NaN without MLP
  double residual_rank = 0;       // res(X_l) of the stream entering the layer, mean over sequences
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
  std::vector<ParamGradNorm> params;  // every parameter tensor, in the canonical order
  std::vector<RankCollapseVariant> rank_collapse;  // (skips, mlp) = (1,1), (1,0), (0,1), (0,0)
  double final_stream_norm = 0, final_residual_rank = 0;
  double loss = 0;                // mean loss over the batches (NaN without a head)
  bool has_loss = true;           // false for a headless model: every gradient norm is NaN
  int batches = 0, B = 0, T = 0;
  double grad_growth = 0;         // grad_norm(last layer) / grad_norm(first layer)
  double ffn_out_grad_growth = 0; // the same for ffn_out_grad_norm (NaN without MLP)
};

// Runs forward and backward on `batches` batches sampled from bytes (gradients are accumulated in
// the model's grads, which are zeroed first and left holding the last batch's gradients).
DynamicsReport analyze_dynamics(Model<double>& model, const std::vector<int32_t>& bytes, int batches,
                                int B, int T, uint64_t seed);
// The same on given batches (e.g. a token file's), each with its labels.
DynamicsReport analyze_dynamics(Model<double>& model, const std::vector<Batch>& batches);

nlohmann::json to_json(const DynamicsReport& report);
void print_report(const DynamicsReport& report);

}  // namespace normlab::analysis
