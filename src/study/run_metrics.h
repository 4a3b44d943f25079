// run_metrics.h: a study run's record read from its metrics.jsonl (the training and validation
// curves, the summary record, the BLEU record, and the per-layer log as the report draws it), for the
// study runner (runner.cpp).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

namespace normlab::study {

// Adds to `run` what `path` (a run's metrics.jsonl) holds: train {step, loss, lr, grad_norm}, val
// {step, loss}, summary, bleu, and layer_log (at most kMaxLayerLogs records, evenly spaced, first and
// last kept; values to 4 significant digits; and "signals": the largest |attention logit| over the
// sub-layers and the mean log Z at every logged step, for study/onsets.h).
void read_metrics(const std::filesystem::path& path, nlohmann::json& run);

}  // namespace normlab::study
