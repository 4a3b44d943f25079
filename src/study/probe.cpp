// probe.cpp: the per-run instruments of a study (probe.h).
#include "study/probe.h"

#include <algorithm>
#include <fmt/format.h>

#include "analysis/attention.h"
#include "analysis/dynamics.h"
#include "analysis/jacobian.h"
#include "model/decode.h"
#include "ops/common.h"
#include "train/data.h"
#include "util/error.h"
#include "util/rng.h"

namespace normlab::study {

namespace {

// T of an encoder-decoder's cut probe pair, at most, and the Jacobians' dense cap for it.
int encdec_probe_len(const ModelConfig& cfg, int probe_seq_len) { return std::min(probe_seq_len, cfg.seq_len); }
bool encdec_dense_fits(const ModelConfig& cfg, int probe_seq_len) {
  return long(encdec_probe_len(cfg, probe_seq_len)) * cfg.d_model <= kProbeDenseMaxDim;
}

}  // namespace

nlohmann::json probe_omissions(const ModelConfig& cfg, int probe_seq_len) {
  nlohmann::json out = nlohmann::json::object();
  if (cfg.encdec()) {
    out["rank_collapse"] = "the encoder-decoder dynamics instrument (as `normlab analyze dynamics` on an encdec) does "
                           "not measure rank collapse";
    out["token_local_jacobians"] = "the encoder-decoder Jacobian instrument measures the decoder's and the source's "
                                   "full-sequence Jacobians, not the norm-site and per-block token-local ones";
    if (!encdec_dense_fits(cfg, probe_seq_len))
      out["jacobians"] = fmt::format("study.probe_seq_len x d_model = {} x {} is above the study's dense cap {} (their "
                                     "matrix-free extremes take minutes per model); `normlab analyze jacobian` on the "
                                     "run's checkpoint computes them",
                                     encdec_probe_len(cfg, probe_seq_len), cfg.d_model, kProbeDenseMaxDim);
  }
  return out;
}

std::unique_ptr<Model<double>> widen(const Model<float>& model) {
  return model_with_params<double>(model.config(), model.params());
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

nlohmann::json probe_encdec(Model<double>& model, const std::vector<TokenPair>& valid, int probe_seq_len) {
  const ModelConfig& cfg = model.config();
  if (!cfg.encdec()) throw Error("probe_encdec needs an encoder-decoder model");
  if (valid.empty()) throw Error("the instruments of an encoder-decoder need at least one validation pair");
  model.set_training(false);
  // the recipe of `normlab analyze` on an encdec checkpoint (src/cli/analyze.cpp): the dynamics on a
  // batch of pairs, then the attention spectra and the Jacobians after a forward of one pair
  const int pairs = std::min<int>(kProbePairs, int(valid.size()));
  const Batch batch = translation_batch(valid, 0, pairs);
  const auto dynamics = analysis::analyze_dynamics_encdec(model, {batch});

  const int len = encdec_probe_len(cfg, probe_seq_len);
  TokenPair cut = valid[0];
  if (int(cut.src.size()) > len) {
    cut.src.resize(size_t(len - 1));
    cut.src.push_back(kEosToken);
  }
  if (int(cut.tgt.size()) + 1 > len) cut.tgt.resize(size_t(len - 1));
  Batch one = translation_batch({cut}, 0, 1);
  one.mask.clear();  // one row, nothing padded (as `analyze --source-text --text` reads a pair)
  one.src_mask.clear();
  const std::vector<int32_t> labels(one.ids.size(), ops::kIgnoreLabel);
  model.forward(one.ids.data(), labels.data(), 1, one.T, nullptr, nullptr, one.source());
  const auto attention = analysis::analyze_attention(model);
  analysis::JacobianOptions jopts;  // summaries, fast: dense on the short pair, or nothing
  jopts.full = encdec_dense_fits(cfg, probe_seq_len);
  jopts.full_max_dim = long(len) * cfg.d_model;
  jopts.lanczos_k = 0;
  const auto jacobian = analysis::analyze_jacobian_encdec(model, jopts);

  const nlohmann::json input = {
      {"what", fmt::format("the first {} validation pairs that fit model.seq_len (corpus order), whole, as one "
                           "right-padded batch for the dynamics; the first of them cut to {} tokens a side (source: "
                           "bytes + EOS; decoder input: BOS + bytes) for the attention spectra and the Jacobians",
                           pairs, len)},
      {"dynamics_pairs", pairs}, {"B", batch.B}, {"S", batch.S}, {"T", batch.T},
      {"pair", {{"index", 0}, {"cut_to", len}, {"S", one.S}, {"T", one.T}, {"source_ids", one.src}, {"input_ids", one.ids}}},
      {"jacobian_full_max_dim", jopts.full ? nlohmann::json(jopts.full_max_dim) : nlohmann::json(nullptr)}};
  return {{"arch", "encdec"}, {"input", input}, {"dynamics", analysis::to_json(dynamics)},
          {"jacobian", analysis::to_json(jacobian)}, {"attention", analysis::to_json(attention)}};
}

}  // namespace normlab::study
