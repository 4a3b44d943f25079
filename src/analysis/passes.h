// passes.h: how many sequences of a batch an instrument runs through the model at once. A batch whose
// activations (Model::activation_bytes: every layer's, kept for the backward pass) would exceed
// kPassActivationBytes runs in passes of fewer sequences, so that the memory an instrument holds grows
// with a sequence, not with the batch: 8 x 128 tokens of a 1.7B Llama hold about 4.7 GB of activations,
// one sequence about 0.6 GB. Readings per sequence are the same either way; a gradient summed over the
// passes differs from the whole batch's only by the order of its float additions.
#pragma once

#include <algorithm>

#include "model/model.h"

namespace normlab::analysis {

inline constexpr double kPassActivationBytes = 1024.0 * 1024.0 * 1024.0;  // 1 GiB

// The sequences per pass: all B when their activations fit `budget`, else as many as do, at least one.
// Hyper-connected models (whose stream readings read the whole batch at once) take all B.
template <typename S>
int rows_per_pass(Model<S>& model, int B, int T, double budget = kPassActivationBytes) {
  if (model.config().hyper_connected() || B <= 1) return std::max(B, 1);
  const double per_row = model.activation_bytes(1, T);
  return per_row * B <= budget ? B : std::clamp(int(budget / per_row), 1, B);
}

}  // namespace normlab::analysis
