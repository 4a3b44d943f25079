// dynamics.cpp: the depth-dynamics instrument.
#include "analysis/dynamics.h"

#include <cmath>
#include <fmt/format.h>

#include "util/rng.h"

namespace normlab::analysis {

namespace {

double row_norm(const double* x, int C) {
  double s = 0;
  for (int c = 0; c < C; c++) s += x[c] * x[c];
  return std::sqrt(s);
}

// res(X) = ||X - 1 mean(X)^T||_F / ||X||_F for one sequence X (T x C)
double residual_rank(const double* X, int T, int C) {
  std::vector<double> mean(size_t(C), 0.0);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) mean[size_t(c)] += X[size_t(t) * C + c] / T;
  double num = 0, den = 0;
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) {
      const double x = X[size_t(t) * C + c];
      num += (x - mean[size_t(c)]) * (x - mean[size_t(c)]);
      den += x * x;
    }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

}  // namespace

DynamicsReport analyze_dynamics(Model<double>& model, const std::vector<uint8_t>& bytes, int batches,
                                int B, int T, uint64_t seed) {
  const ModelConfig& cfg = model.config();
  const int L = cfg.n_layers, C = cfg.d_model, N = B * T;
  DynamicsReport rep;
  rep.layers.resize(size_t(L));
  rep.batches = batches;
  rep.B = B;
  rep.T = T;
  Rng rng(seed, 3);
  // parameters of each layer: every spec named h.<l>.*
  std::vector<std::vector<const ParamSpec*>> layer_specs(static_cast<size_t>(L));
  for (const ParamSpec& p : model.table().specs)
    if (p.name.rfind("h.", 0) == 0) layer_specs[size_t(std::stoi(p.name.substr(2)))].push_back(&p);
  for (int k = 0; k < batches; k++) {
    const Batch batch = sample_batch(bytes, cfg.arch, B, T, rng);
    model.zero_grad();
    rep.loss += model.forward(batch.ids.data(), batch.labels.data(), B, T) / batches;
    model.backward();
    for (int l = 0; l < L; l++) {
      LayerDynamics& d = rep.layers[size_t(l)];
      const double* x = model.stream(2 * l);
      for (int n = 0; n < N; n++) d.stream_norm += row_norm(x + size_t(n) * C, C) / (double(N) * batches);
      for (int s = 0; s < 2; s++) {
        const SublayerActs<double>& a = model.acts(2 * l + s);
        double ratio = 0;
        for (int n = 0; n < N; n++)
          ratio += row_norm(a.g + size_t(n) * C, C) / std::max(1e-300, row_norm(a.x_in + size_t(n) * C, C));
        (s == 0 ? d.attn_branch_ratio : d.mlp_branch_ratio) += ratio / (double(N) * batches);
      }
      for (int b = 0; b < B; b++) d.residual_rank += residual_rank(x + size_t(b) * T * C, T, C) / (double(B) * batches);
      double g2 = 0;
      for (const ParamSpec* p : layer_specs[size_t(l)])
        for (size_t i = 0; i < p->numel; i++) g2 += model.grads()[p->offset + i] * model.grads()[p->offset + i];
      d.grad_norm += std::sqrt(g2) / batches;
    }
    const double* xl = model.stream(2 * L);
    for (int n = 0; n < N; n++) rep.final_stream_norm += row_norm(xl + size_t(n) * C, C) / (double(N) * batches);
    for (int b = 0; b < B; b++) rep.final_residual_rank += residual_rank(xl + size_t(b) * T * C, T, C) / (double(B) * batches);
  }
  for (int l = 0; l < L; l++) rep.layers[size_t(l)].placement = to_string(cfg.placement_of(l)), rep.layers[size_t(l)].layer = l;
  rep.grad_growth = rep.layers.back().grad_norm / std::max(1e-300, rep.layers.front().grad_norm);
  return rep;
}

nlohmann::json to_json(const DynamicsReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& d : r.layers)
    layers.push_back({{"layer", d.layer}, {"placement", d.placement}, {"stream_norm", d.stream_norm},
                      {"attn_branch_ratio", d.attn_branch_ratio}, {"mlp_branch_ratio", d.mlp_branch_ratio},
                      {"grad_norm", d.grad_norm}, {"residual_rank", d.residual_rank}});
  return {{"batches", r.batches}, {"B", r.B}, {"T", r.T}, {"loss", r.loss}, {"layers", layers},
          {"final_stream_norm", r.final_stream_norm}, {"final_residual_rank", r.final_residual_rank},
          {"grad_norm_last_over_first", r.grad_growth}};
}

void print_report(const DynamicsReport& r) {
  fmt::print("Depth dynamics over {} batches of {} x {} (mean loss {:.4f})\n", r.batches, r.B, r.T, r.loss);
  fmt::print("{:>5} {:<9} {:>12} {:>12} {:>12} {:>12} {:>10}\n", "layer", "placement", "||x_l||",
             "|F|/|x| attn", "|F|/|x| mlp", "grad norm", "res(X_l)");
  for (const auto& d : r.layers)
    fmt::print("{:>5} {:<9} {:>12.4f} {:>12.4f} {:>12.4f} {:>12.4e} {:>10.4f}\n", d.layer, d.placement,
               d.stream_norm, d.attn_branch_ratio, d.mlp_branch_ratio, d.grad_norm, d.residual_rank);
  fmt::print("{:>5} {:<9} {:>12.4f} {:>12} {:>12} {:>12} {:>10.4f}\n", "out", "", r.final_stream_norm, "", "", "",
             r.final_residual_rank);
  fmt::print("gradient norm, last layer / first layer: {:.3f} (Xiong et al.: > 1 for post, ~1 for pre)\n",
             r.grad_growth);
}

}  // namespace normlab::analysis
