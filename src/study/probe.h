// probe.h: the instruments a study runs on every model, at initialization and after training: the
// depth dynamics (stream norm, branch ratios, gradient norm and rank collapse by layer, averaged over
// validation batches), the norm-site, block and end-to-end token-local Jacobians with their
// singular values and theory checks, and the attention spectra by layer and head. All in double.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace normlab::study {

// Why the instruments cannot read a model of this config, or nullopt when they can. The one place
// that decides which runs of a study are probed: encoder-decoders are refused until src/analysis
// takes them (the runner records the reason in results.json and the report shows it).
std::optional<std::string> probe_unsupported(const ModelConfig& cfg);

// A double-precision copy of a float model (the instruments run in double).
std::unique_ptr<Model<double>> widen(const Model<float>& model);

// {"dynamics": ..., "jacobian": ..., "attention": ...} in the formats of `normlab analyze --json`.
// T is clamped to the model's seq_len. Overwrites the model's gradients and activations.
nlohmann::json probe_model(Model<double>& model, const std::vector<int32_t>& bytes, int T, uint64_t seed);

}  // namespace normlab::study
