// step.cpp: the training step of step.h.
#include "train/step.h"

#include <algorithm>

namespace normlab {

BatchGradients batch_gradients(Model<float>& model, const Batch& batch) {
  model.zero_grad();
  BatchGradients g;
  g.loss = model.forward(batch.ids.data(), batch.labels.data(), batch.B, batch.T, batch.types_or_null(),
                         batch.mask_or_null(), batch.source());
  model.backward();
  g.grad_norm = grad_norm(model.grads());
  return g;
}

UpdateNotes apply_update(Model<float>& model, AdamW& optimizer, double lr, long t, double grad_scale,
                         const dist::Comm* comm) {
  uint16_t* rounded = model.bf16_weights_buffer();  // bf16: the next forward's weights, same pass
  optimizer.step(model.params().data(), model.grads().data(), lr, t, grad_scale, rounded);
  if (rounded) model.bf16_weights_written();
  model.project_to_sphere();  // nGPT: the matrices back onto the sphere (discards the handoff; else nothing)
  UpdateNotes notes;
  if (std::vector<double>& m = model.attention_logit_max(); !m.empty()) {  // QK-Clip (discards the handoff if it clips)
    if (comm) comm->max_in_place(m.data(), m.size());
    notes.max_logit = *std::max_element(m.begin(), m.end());
    notes.qk_clipped = model.clip_qk();
  }
  return notes;
}

}  // namespace normlab
