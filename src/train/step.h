// step.h: the one training step every caller takes (the trainer, the theory's trained models, the
// update instrument): the gradients of a batch and their global norm, then the update (clipping,
// AdamW, the next forward's bf16 weights in the same pass, nGPT's matrices back onto the sphere).
// A method whose step differs (as nGPT's projection) changes it here, once.
#pragma once

#include "model/model.h"
#include "train/data.h"
#include "train/optimizer.h"

namespace normlab {

struct BatchGradients {
  double loss = 0;       // the batch's mean loss
  double grad_norm = 0;  // the global L2 norm of the gradients (non-finite when they are)
};

// Zeroes the gradients, then the forward and backward of one batch.
BatchGradients batch_gradients(Model<float>& model, const Batch& batch);

// params <- AdamW(params, grad_scale * grads) at 1-based step t with learning rate lr; a bf16 model's
// rounded weights are written in the same pass; nGPT's matrices are projected back onto the sphere.
// grad_scale: clip_scale(norm, max_norm) for clipping, 1 for none.
void apply_update(Model<float>& model, AdamW& optimizer, double lr, long t, double grad_scale);

}  // namespace normlab
