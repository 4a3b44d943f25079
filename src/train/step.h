// step.h: the one training step every caller takes (the trainer, the theory's trained models, the
// update instrument): the gradients of a batch and their global norm, then the update (clipping,
// AdamW, the next forward's bf16 weights in the same pass, nGPT's matrices back onto the sphere).
// A method whose step differs (as nGPT's projection) changes it here, once.
#pragma once

#include <functional>
#include <limits>

#include "distributed/comm.h"
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

// What the update did besides AdamW: QK-Clip's readings (Model::clip_qk), with train.qk_clip on.
struct UpdateNotes {
  double max_logit = std::numeric_limits<double>::quiet_NaN();  // the largest self-attention score of the step
  int qk_clipped = 0;                                           // key-value groups rescaled
};

// params <- AdamW(params, grad_scale * grads) at 1-based step t with learning rate lr; a bf16 model's
// rounded weights are written in the same pass; nGPT's matrices are projected back onto the sphere;
// with QK-Clip on (Model::set_qk_clip), the step's largest scores, the largest over comm's ranks when
// given, rescale W_q and W_k (the same on every rank). grad_scale: clip_scale(norm, max_norm), 1 for none.
UpdateNotes apply_update(Model<float>& model, AdamW& optimizer, double lr, long t, double grad_scale,
                         const dist::Comm* comm = nullptr);

// The same update (one process), with changed(spec, before, after) called for each parameter tensor with
// its values before and after the whole update. The old values are held one tensor at a time (the
// largest tensor's memory, not a copy of the model: a 1-2 B model's update instrument fits beside its
// moments), except where the update changes weights after AdamW's step (nGPT's projection, QK-Clip on),
// which holds the whole model's until the step is done.
using TensorChange = std::function<void(size_t spec, const float* before, const float* after)>;
UpdateNotes apply_update(Model<float>& model, AdamW& optimizer, double lr, long t, double grad_scale,
                         const TensorChange& changed);

}  // namespace normlab
