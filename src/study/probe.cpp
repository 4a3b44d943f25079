// probe.cpp: the per-run instruments of a study.
#include "study/probe.h"

#include <algorithm>

#include "analysis/attention.h"
#include "analysis/dynamics.h"
#include "analysis/jacobian.h"
#include "ops/common.h"
#include "train/data.h"
#include "util/rng.h"

namespace normlab::study {

std::optional<std::string> probe_unsupported(const ModelConfig& cfg) {
  if (cfg.encdec())
    return "a study does not yet probe encoder-decoder runs (`normlab analyze` on the run's checkpoint does), so this "
           "run was not probed";
  return std::nullopt;
}

std::unique_ptr<Model<double>> widen(const Model<float>& model) {
  auto m = std::make_unique<Model<double>>(model.config());
  std::copy(model.params().begin(), model.params().end(), m->params().begin());
  return m;
}

nlohmann::json probe_model(Model<double>& model, const std::vector<int32_t>& bytes, int T, uint64_t seed) {
  T = std::min(T, model.config().seq_len);
  model.set_training(false);
  const auto dynamics = analysis::analyze_dynamics(model, bytes, /*batches=*/2, /*B=*/4, T, seed);

  // one sequence for the Jacobians and the attention spectra
  Rng rng(seed, 9);
  const Batch b = sample_batch(bytes, Arch::Gpt, 1, T, rng);
  const std::vector<int32_t> labels(b.ids.size(), ops::kIgnoreLabel);
  model.forward(b.ids.data(), labels.data(), 1, T);
  const auto attention = analysis::analyze_attention(model);
  analysis::JacobianOptions jopts;
  jopts.full = false;     // token-local spectra only: the study wants summaries, fast
  jopts.lanczos_k = 0;
  const auto jacobian = analysis::analyze_jacobian(model, jopts);
  return {{"T", T}, {"dynamics", analysis::to_json(dynamics)}, {"jacobian", analysis::to_json(jacobian)},
          {"attention", analysis::to_json(attention)}};
}

}  // namespace normlab::study
