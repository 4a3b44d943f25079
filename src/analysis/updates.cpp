// updates.cpp: update ratios and output change over a short training run.
#include "analysis/updates.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "train/data.h"
#include "train/optimizer.h"
#include "train/step.h"
#include "util/rng.h"

namespace normlab::analysis {

UpdateReport analyze_updates(const Model<double>& model, const std::vector<int32_t>& bytes, int steps,
                             int B, int T, double lr, uint64_t seed, int32_t first) {
  refuse_second_stream(model.config(), "analyze updates");
  const std::unique_ptr<Model<float>> trained = model_with_params<float>(model.config(), model.params());  // no random init first
  return analyze_updates_in_place(*trained, bytes, steps, B, T, lr, seed, first);
}

UpdateReport analyze_updates_in_place(Model<float>& m, const std::vector<int32_t>& bytes, int steps, int B, int T,
                                      double lr, uint64_t seed, int32_t first) {
  // (a two-stream model, ResiDual, is refused by name; with hyper-connections the last block's output is the
  // sum of the streams, what the final norm reads)
  refuse_second_stream(m.config(), "analyze updates");
  const ModelConfig& cfg = m.config();
  AdamW opt(m.table(), AdamWConfig{}, adam_scaling(m.table(), m.config()));
  Rng rng(seed, 4), eval_rng(seed, 5);
  auto draw = [&](Rng& r) {
    Batch b = sample_batch(bytes, cfg.arch, B, T, r);
    return first >= 0 ? with_first_token(std::move(b), first) : b;
  };
  const Batch eval = draw(eval_rng);
  const size_t nlogits = size_t(B) * T * cfg.vocab_size();
  m.forward(eval.ids.data(), eval.labels.data(), B, T);
  const std::vector<float> logits0(m.logits(), m.logits() + nlogits);
  const size_t nstream = size_t(B) * T * cfg.d_model;
  const float* last = m.stream(2 * cfg.n_layers);
  const std::vector<float> stream0(last, last + nstream);
  double snorm0 = 0;
  for (float v : stream0) snorm0 += double(v) * v;
  snorm0 = std::sqrt(snorm0);
  double norm0 = 0;
  for (float v : logits0) norm0 += double(v) * v;
  norm0 = std::sqrt(norm0);
  const int L = cfg.n_layers;
  std::vector<int> layer_of;  // each spec's layer (h.<l>.*), -1 for the rest (embeddings, final norm, head)
  for (const ParamSpec& p : m.table().specs)
    layer_of.push_back(p.name.rfind("h.", 0) == 0 ? std::stoi(p.name.substr(2)) : -1);
  UpdateReport r;
  r.steps = steps;
  r.lr = lr;
  for (int s = 1; s <= steps; s++) {
    const Batch batch = draw(rng);
    r.loss.push_back(batch_gradients(m, batch).loss);
    std::vector<double> dn(size_t(L), 0.0), pn(size_t(L), 0.0);  // per layer ||theta_new - theta_old||^2, ||theta_old||^2
    const auto add = [&](size_t spec, const float* before, const float* now) {
      const int l = layer_of[spec];
      if (l < 0) return;  // (the ratios are the layers')
      for (size_t i = 0; i < m.table().specs[spec].numel; i++) {
        const double delta = double(now[i]) - before[i];
        dn[size_t(l)] += delta * delta;
        pn[size_t(l)] += double(before[i]) * before[i];
      }
    };
    apply_update(m, opt, lr, s, 1.0, add);  // (no clipping)
    std::vector<double> ratios;
    for (int l = 0; l < L; l++) ratios.push_back(std::sqrt(dn[size_t(l)] / pn[size_t(l)]));
    r.layer_ratio.push_back(ratios);
    m.forward(eval.ids.data(), eval.labels.data(), B, T);
    double diff = 0;
    for (size_t i = 0; i < nlogits; i++) diff += (double(m.logits()[i]) - logits0[i]) * (double(m.logits()[i]) - logits0[i]);
    r.output_change.push_back(std::sqrt(diff) / norm0);
    double sdiff = 0;
    const float* now = m.stream(2 * cfg.n_layers);
    for (size_t i = 0; i < nstream; i++) sdiff += (double(now[i]) - stream0[i]) * (double(now[i]) - stream0[i]);
    r.stream_change.push_back(std::sqrt(sdiff) / snorm0);
  }
  return r;
}

double update_steps_bytes(const ParamTable& table, const ModelConfig& cfg, int B, int T) {
  size_t largest = 0;
  for (const ParamSpec& p : table.specs) largest = std::max(largest, p.numel);
  const double old = cfg.on_sphere() ? double(table.total) : double(largest);
  const double fixed = double(B) * T * (cfg.vocab_size() + cfg.d_model);
  return AdamW::state_bytes(table) + (old + fixed) * sizeof(float);
}

nlohmann::json to_json(const UpdateReport& r) {
  return {{"steps", r.steps}, {"lr", r.lr}, {"update_ratio_by_step_and_layer", r.layer_ratio},
          {"output_change_by_step", r.output_change}, {"stream_change_by_step", r.stream_change},
          {"loss_by_step", r.loss}};
}

void print_report(const UpdateReport& r) {
  fmt::print("\nShort AdamW run ({} steps, lr {:g}): update ratio ||delta theta_l|| / ||theta_l|| per layer, "
             "and the relative change of the logits on a fixed batch\n", r.steps, r.lr);
  for (int s = 0; s < r.steps; s++) {
    fmt::print("step {:>3} loss {:.4f} | logits change {:.3e} | last-block output change {:.3e} | ratios", s + 1,
               r.loss[size_t(s)], r.output_change[size_t(s)], r.stream_change[size_t(s)]);
    for (double v : r.layer_ratio[size_t(s)]) fmt::print(" {:.2e}", v);
    fmt::print("\n");
  }
}

}  // namespace normlab::analysis
