// optimizer.h: AdamW with decoupled weight decay (PyTorch's update, term for term), the learning-
// rate schedules, and global gradient-norm clipping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"

namespace normlab {

enum class Schedule { Constant, Warmup, InvSqrt, Cosine };
const char* to_string(Schedule);

struct ScheduleConfig {
  Schedule kind = Schedule::Cosine;
  double lr = 1e-3;
  int warmup_steps = 0;
  double min_lr = 0.0;  // cosine floor
  int total_steps = 1;
};

// Learning rate at 1-based step t:
//   constant: lr;  warmup: lr * min(1, t/w);  invsqrt: lr * min(t/w, sqrt(w/t));
//   cosine: lr * t/w while t <= w, then min_lr + (lr - min_lr)/2 (1 + cos(pi (t-w)/(total-w))).
double learning_rate(const ScheduleConfig& s, long t);

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  // scaling: the parametrization's (model/params.h adam_scaling): a factor on each spec's step (muP's
  // 1 / m on hidden matrices; empty: 1 for every spec) and on cfg.eps (CompleteP's). Weight decay keeps
  // lr x weight_decay (MuAdamW's default, which divides the rate and multiplies the decay by m).
  AdamW(const ParamTable& table, AdamWConfig cfg, AdamScaling scaling = {});
  // One update at 1-based step t with learning rate lr, on the gradients times grad_scale (how
  // clipping is applied: folded into this one pass over memory instead of a pass of its own).
  // Decay only on tensors whose spec decays() (embeddings and linear weights; not biases or gains).
  // rounded, when given (bf16 training: Model::bf16_weights_buffer), receives every updated
  // parameter rounded to bf16 (ops::round_to_bf16) in the same pass.
  void step(float* params, const float* grads, double lr, long t, double grad_scale = 1.0,
            uint16_t* rounded = nullptr);
  // The same update of the one tensor table.specs[spec] (params, grads and rounded: the whole model's
  // buffers, as step's): step is this over every spec, so a caller can read each tensor before and after
  // its own update without holding a copy of the model (analysis/updates.cpp).
  void step_tensor(size_t spec, float* params, const float* grads, double lr, long t, double grad_scale = 1.0,
                   uint16_t* rounded = nullptr);
  // The bytes of the two moments for `table` (what the constructor allocates, and checks is available).
  static double state_bytes(const ParamTable& table) { return 2.0 * double(table.total) * sizeof(float); }
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }

 private:
  const ParamTable& table_;
  AdamWConfig cfg_;
  std::vector<double> mult_;  // by spec
  std::vector<float> m_, v_;
};

// Global L2 norm of the gradients, summed in double in a fixed order (deterministic).
double grad_norm(const std::vector<float>& grads);
// The factor clipping multiplies the gradients by: max_norm / (norm + 1e-6) if norm > max_norm
// (PyTorch's rule), else 1; max_norm 0 means no clipping. AdamW::step applies it.
double clip_scale(double norm, double max_norm);

}  // namespace normlab
