// health.cpp: the warnings of a run that has stopped learning (health.h).
#include "train/health.h"

#include <cmath>
#include <fmt/format.h>

namespace normlab {

RunHealth::RunHealth(double unigram_entropy, std::string unit, long quiet_until)
    : entropy_(unigram_entropy), unit_(std::move(unit)), quiet_until_(quiet_until) {}

HealthWarning RunHealth::unigram(long step, double val, bool end) const {
  return {step, "unigram",
          fmt::format("{} the validation loss {:.4f} is at the {} unigram entropy {:.4f} (within {} nats, or above): "
                      "the model predicts no better than the frequencies of the {}s{}",
                      end ? fmt::format("at the end of the run (step {}):", step) : fmt::format("step {}:", step), val,
                      unit_, entropy_,
                      kStuckMargin, unit_,
                      end ? "; it learned nothing else (too high a learning rate or too short a warm-up are the "
                            "usual causes; see the per-layer log, train.log_every_layers)"
                          : " so far")};
}

HealthWarning RunHealth::vanished(long step, bool end) const {
  return {step, "blocks_vanished",
          fmt::format("{}the gradient of every block has been below {:g} of the whole gradient's norm for {} "
                      "steps in a row{}: the blocks have stopped learning (a saturated nonlinearity or a dead "
                      "normalization), only the embeddings and the head still move",
                      end ? fmt::format("at the end of the run (step {}): ", step) : fmt::format("step {}: ", step),
                      kVanishedShare,
                      end ? vanished_run_ : kVanishedSteps, end ? "" : " so far")};
}

std::optional<HealthWarning> RunHealth::on_eval(long step, double val) {
  if (warned_unigram_ || step <= quiet_until_ || !std::isfinite(val) || !std::isfinite(entropy_)) return std::nullopt;
  unigram_run_ = val >= entropy_ - kStuckMargin ? unigram_run_ + 1 : 0;
  if (unigram_run_ < 2) return std::nullopt;
  warned_unigram_ = true;
  return unigram(step, val, false);
}

std::optional<HealthWarning> RunHealth::on_gradient(long step, double block_norm, double total_norm) {
  const bool gone = std::isfinite(block_norm) && total_norm > 0 && block_norm <= kVanishedShare * total_norm;
  vanished_run_ = gone ? vanished_run_ + 1 : 0;
  if (warned_vanished_ || vanished_run_ < kVanishedSteps) return std::nullopt;
  warned_vanished_ = true;
  return vanished(step, false);
}

std::vector<HealthWarning> RunHealth::at_end(long step, double last_val) const {
  std::vector<HealthWarning> out;
  if (std::isfinite(last_val) && std::isfinite(entropy_) && last_val >= entropy_ - kStuckMargin)
    out.push_back(unigram(step, last_val, true));
  if (vanished_run_ >= kVanishedSteps) out.push_back(vanished(step, true));
  return out;
}

std::vector<std::pair<size_t, size_t>> block_ranges(const ParamTable& table, const ModelConfig& cfg) {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (int l = 0; l < cfg.total_layers(); l++) {
    const std::string prefix = layer_prefix(cfg, l) + ".";
    for (const ParamSpec& s : table.specs)
      if (s.name.starts_with(prefix)) ranges.emplace_back(s.offset, s.numel);
  }
  return ranges;
}

double ranges_norm(const std::vector<float>& grads, const std::vector<std::pair<size_t, size_t>>& ranges) {
  double sum = 0;
  for (const auto& [offset, n] : ranges) {
    const float* g = grads.data() + offset;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) sum += double(g[i]) * double(g[i]);
  }
  return std::sqrt(sum);
}

}  // namespace normlab
