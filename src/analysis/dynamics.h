// dynamics.h: the depth-dynamics instrument (DESIGN.md section 4), at the model's current
// parameters, averaged over batches of a corpus: per layer the residual-stream norm ||x_l|| (per
// token), the branch-to-stream ratio ||F_l|| / ||x_l|| of each sub-layer, the gradient norm of each
// layer's parameters (Xiong et al.: grows toward the output for Post-LN, flat for Pre-LN), and rank
// collapse res(X_l) = ||X - 1 mean(X)^T||_F / ||X||_F of each sequence (Dong et al.).
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
  double residual_rank = 0;       // res(X_l) of the stream entering the layer, mean over sequences
};

struct DynamicsReport {
  std::vector<LayerDynamics> layers;
  double final_stream_norm = 0, final_residual_rank = 0;
  double loss = 0;                // mean loss over the batches
  int batches = 0, B = 0, T = 0;
  double grad_growth = 0;         // grad_norm(last layer) / grad_norm(first layer)
};

// Runs forward and backward on `batches` batches sampled from bytes (gradients are accumulated in
// the model's grads, which are zeroed first and left holding the last batch's gradients).
DynamicsReport analyze_dynamics(Model<double>& model, const std::vector<uint8_t>& bytes, int batches,
                                int B, int T, uint64_t seed);

nlohmann::json to_json(const DynamicsReport& report);
void print_report(const DynamicsReport& report);

}  // namespace normlab::analysis
