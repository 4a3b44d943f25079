// updates.h: how training moves a model: over a short AdamW run from the model's current
// parameters, per step and layer the update ratio ||delta theta_l|| / ||theta_l||, and the output
// change ||F(x, W_t) - F(x, W_0)|| / ||F(x, W_0)|| of the logits on a fixed batch (Liu et al. 2020
// measure it against depth: O(N) for Post-LN, O(log N) for Pre-LN).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "model/model.h"

namespace normlab::analysis {

struct UpdateReport {
  int steps = 0;
  double lr = 0;
  std::vector<std::vector<double>> layer_ratio;  // [step][layer]
  std::vector<double> output_change;             // [step], relative, of the logits
  std::vector<double> stream_change;             // [step], relative, of the last block's output (hyper-connected: the streams' sum)
  std::vector<double> loss;                      // [step], before the update
};

// Trains a float copy of `model` (constant lr, AdamW defaults, no clipping); `model` is unchanged. Every
// window starts with `first` when it is >= 0 (with_first_token: the run's data.bos), as its training's did.
UpdateReport analyze_updates(const Model<double>& model, const std::vector<int32_t>& bytes, int steps,
                             int B, int T, double lr, uint64_t seed, int32_t first = -1);
// The same steps on `model` itself (a big model's readings without a copy): it is left trained.
UpdateReport analyze_updates_in_place(Model<float>& model, const std::vector<int32_t>& bytes, int steps, int B,
                                      int T, double lr, uint64_t seed, int32_t first = -1);

// The memory analyze_updates_in_place adds to a float32 model (table, cfg) that has run a forward of B x T: AdamW's two
// moments, the old values of the largest tensor (of the whole model for nGPT, whose projection follows
// the step), the fixed batch's logits and last stream. analyze dynamics checks it is available before
// any reading starts (a 1 B model's moments alone are 10 GB).
double update_steps_bytes(const ParamTable& table, const ModelConfig& cfg, int B, int T);

nlohmann::json to_json(const UpdateReport& report);
void print_report(const UpdateReport& report);

}  // namespace normlab::analysis
