// optimizer.cpp: AdamW, schedules, gradient norm and clipping.
#include "train/optimizer.h"

#include "ops/common.h"
#include "ops/gemm_backend.h"
#include "util/error.h"
#include "util/flush_subnormals.h"
#include "util/memory.h"

#include <algorithm>
#include <fmt/format.h>
#include <cmath>
#include <utility>

namespace normlab {

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::Constant: return "constant";
    case Schedule::Warmup: return "warmup";
    case Schedule::InvSqrt: return "invsqrt";
    case Schedule::Cosine: return "cosine";
  }
  return "?";
}

double learning_rate(const ScheduleConfig& s, long t) {
  const double w = s.warmup_steps;
  switch (s.kind) {
    case Schedule::Constant: return s.lr;
    case Schedule::Warmup: return w > 0 ? s.lr * std::min(1.0, t / w) : s.lr;
    case Schedule::InvSqrt: {
      if (w <= 0) return s.lr / std::sqrt(double(t));
      return s.lr * std::min(t / w, std::sqrt(w / t));
    }
    case Schedule::Cosine: {
      if (w > 0 && t <= w) return s.lr * t / w;
      const double span = std::max(1.0, s.total_steps - w);
      const double progress = std::min(1.0, (t - w) / span);
      return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + std::cos(M_PI * progress));
    }
  }
  return s.lr;
}

AdamW::AdamW(const ParamTable& table, AdamWConfig cfg, AdamScaling scaling)
    : table_(table), cfg_(cfg), mult_(std::move(scaling.step)) {
  // (without this check a model too big for its optimizer is killed by the kernel, with no message,
  // while the moments are zeroed: Linux grants the allocation and fails the pages)
  require_memory(state_bytes(table), fmt::format("AdamW's two moments for {} parameters", table.total));
  m_.assign(table.total, 0.0f);
  v_.assign(table.total, 0.0f);
  cfg_.eps *= scaling.eps;
  if (mult_.empty()) mult_.assign(table.specs.size(), 1.0);
  if (mult_.size() != table.specs.size()) throw Error("AdamW: one step multiplier per parameter tensor");
}

// One tensor's update; Round: also its bf16 rounding, in the same pass over memory
template <bool Round>
static void adamw_update(float* p, const float* g, float* m, float* v, uint16_t* rounded, long n, float decay,
                         float b1, float b2, float step_size, float sqrt_bc2, float eps, float gs) {
  // PyTorch AdamW: p *= 1 - lr wd;  m, v moments;  p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
#pragma omp parallel if(n > ops::kParallelMinWork)
  {
    // per thread: a gradient below 1e-19 squares to a subnormal v, and every operation on one takes a
    // microcode assist (mhc at width 64: 4,096 of the first sub-layer's 6,144 phi entries had one after
    // 40 steps, and the update took 2-3 times its share of the step)
    FlushSubnormals flush;
#pragma omp for schedule(static)
    for (long i = 0; i < n; i++) {
      const float gi = g[i] * gs;
      p[i] *= decay;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
      if constexpr (Round) rounded[i] = ops::round_to_bf16(p[i]);
    }
  }
}

void AdamW::step(float* params, const float* grads, double lr, long t, double grad_scale, uint16_t* rounded) {
  for (size_t i = 0; i < table_.specs.size(); i++) step_tensor(i, params, grads, lr, t, grad_scale, rounded);
}

void AdamW::step_tensor(size_t i, float* params, const float* grads, double lr, long t, double grad_scale,
                        uint16_t* rounded) {
  const double bc1 = 1 - std::pow(cfg_.beta1, double(t));
  const double bc2 = 1 - std::pow(cfg_.beta2, double(t));
  const float b1 = float(cfg_.beta1), b2 = float(cfg_.beta2);
  const float sqrt_bc2 = float(std::sqrt(bc2));
  const float eps = float(cfg_.eps);
  const float gs = float(grad_scale);
  const ParamSpec& spec = table_.specs[i];
  const float step_size = float(lr * mult_[i] / bc1);
  const float decay = spec.decays() ? float(1 - lr * cfg_.weight_decay) : 1.0f;
  const size_t o = spec.offset;
  if (rounded)
    adamw_update<true>(params + o, grads + o, m_.data() + o, v_.data() + o, rounded + o, long(spec.numel), decay, b1,
                       b2, step_size, sqrt_bc2, eps, gs);
  else
    adamw_update<false>(params + o, grads + o, m_.data() + o, v_.data() + o, nullptr, long(spec.numel), decay, b1,
                        b2, step_size, sqrt_bc2, eps, gs);
}

double grad_norm(const std::vector<float>& grads) {
  // fixed chunks, summed in order: the same result for any thread count
  const long n = long(grads.size()), chunks = 256, per = (n + chunks - 1) / chunks;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static) if(n > ops::kParallelMinWork)
  for (long c = 0; c < chunks; c++) {
    double s = 0;
    for (long i = c * per; i < std::min(n, (c + 1) * per); i++) s += double(grads[i]) * grads[i];
    partial[c] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

double clip_scale(double norm, double max_norm) {
  return (max_norm > 0 && norm > max_norm) ? max_norm / (norm + 1e-6) : 1.0;
}

}  // namespace normlab
