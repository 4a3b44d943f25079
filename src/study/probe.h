// probe.h: the instruments a study runs on every model, at initialization and after training: the
// depth dynamics (stream norm, branch ratios, gradient norm and rank collapse by layer, averaged over
// validation batches), the norm-site, block and end-to-end token-local Jacobians with their
// singular values and theory checks, and the attention spectra by layer and head. All in double.
// An encoder-decoder (a translation run) is probed as `normlab analyze` probes its checkpoint, on
// validation pairs: the same readings per stack (encoder, decoder, cross-attention), and the
// decoder's and the source's Jacobians.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/translation.h"

namespace normlab::study {

// What the instruments leave out for a model of this config, as {what: why} (empty when they read
// everything). The one place that decides it; the runner records it under "skipped" in results.json
// and the summary and the report say it.
nlohmann::json probe_omissions(const ModelConfig& cfg, int probe_seq_len);

// A double-precision copy of a float model (the instruments run in double).
std::unique_ptr<Model<double>> widen(const Model<float>& model);

// {"T", "dynamics", "jacobian", "attention"}, the last three in the formats of `normlab analyze
// --json`. T is clamped to the model's seq_len. Overwrites the model's gradients and activations.
nlohmann::json probe_model(Model<double>& model, const std::vector<int32_t>& bytes, int T, uint64_t seed);

// An encoder-decoder's probe reads the first kProbePairs validation pairs (those that fit seq_len, in
// corpus order), whole, as one right-padded batch for the dynamics, and the first pair cut to
// probe_seq_len tokens a side (source: its first probe_seq_len - 1 bytes and EOS; decoder input: BOS
// and the first probe_seq_len - 1 target bytes) for the attention spectra and the Jacobians, as the
// other models' probe reads a probe_seq_len window. The Jacobians are dense (every singular value,
// exact) when probe_seq_len * d_model <= kProbeDenseMaxDim (about 2 s each at 1024 here), else left
// out (probe_omissions says so): the matrix-free extremes of a whole verse take minutes.
inline constexpr int kProbePairs = 8;
inline constexpr long kProbeDenseMaxDim = 1024;

// {"arch": "encdec", "input": {what was read}, "dynamics", "jacobian", "attention"}, the last three
// exactly what `normlab analyze dynamics | attention | jacobian --json` writes on that input (the
// dynamics: `--tokens` with a token file of those pairs; attention and Jacobians: `--source-text`
// and `--text` with the cut pair, the Jacobians with `--full-max-dim` input.jacobian_full_max_dim
// and `--lanczos-k 0`). Overwrites the model's gradients and activations.
nlohmann::json probe_encdec(Model<double>& model, const std::vector<TokenPair>& valid, int probe_seq_len);

}  // namespace normlab::study
