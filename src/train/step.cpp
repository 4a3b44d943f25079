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

UpdateNotes apply_update(Model<float>& model, AdamW& optimizer, double lr, long t, double grad_scale,
                         const TensorChange& changed) {
  const std::vector<ParamSpec>& specs = model.table().specs;
  float* params = model.params().data();
  std::vector<float> old;
  if (model.config().on_sphere() || !model.attention_logit_max().empty()) {  // weights change after AdamW's step
    old.assign(model.params().begin(), model.params().end());
    const UpdateNotes notes = apply_update(model, optimizer, lr, t, grad_scale);
    for (size_t i = 0; i < specs.size(); i++) changed(i, old.data() + specs[i].offset, params + specs[i].offset);
    return notes;
  }
  uint16_t* rounded = model.bf16_weights_buffer();  // (as apply_update: AdamW's step is all it does here)
  for (size_t i = 0; i < specs.size(); i++) {
    old.assign(params + specs[i].offset, params + specs[i].offset + specs[i].numel);
    optimizer.step_tensor(i, params, model.grads().data(), lr, t, grad_scale, rounded);
    changed(i, old.data(), params + specs[i].offset);
  }
  if (rounded) model.bf16_weights_written();
  return {};
}

}  // namespace normlab
