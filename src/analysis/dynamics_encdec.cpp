// dynamics_encdec.cpp: the depth-dynamics instrument on an encoder-decoder model: per stack, layer and
// sub-layer the stream norms, branch-to-stream ratios and gradient norms (dynamics.h).
#include <cmath>
#include <fmt/format.h>

#include "analysis/dynamics.h"
#include "analysis/linalg.h"
#include "analysis/stats.h"
#include "model/params.h"
#include "util/error.h"

namespace normlab::analysis {

namespace {

// Mean of RMS(x_n) = ||x_n|| / sqrt(C) over the rows n of (B * len, C) whose mask is 1 (all rows without a mask).
double mean_real_rms(const double* x, const std::vector<uint8_t>& mask, size_t rows, int C) {
  double sum = 0;
  size_t count = 0;
  for (size_t n = 0; n < rows; n++)
    if (mask.empty() || mask[n]) {
      sum += row_norm(x + n * C, C);
      count++;
    }
  return count ? sum / (std::sqrt(double(C)) * double(count)) : 0.0;
}

bool has_prefix(const std::string& name, const std::string& prefix) { return name.rfind(prefix + ".", 0) == 0; }

}  // namespace

EncDecDynamicsReport analyze_dynamics_encdec(Model<double>& model, const std::vector<Batch>& given) {
  const ModelConfig& cfg = model.config();
  if (!cfg.encdec())
    throw Error(fmt::format("analyze_dynamics_encdec needs an encoder-decoder model (model.arch = \"encdec\"); this one is {}",
                            to_string(cfg.arch)));
  if (given.empty()) throw Error("analyze dynamics: no batches");
  const int batches = int(given.size()), B = given[0].B, T = given[0].T, S = given[0].S;
  for (const Batch& b : given) {
    if (b.src.empty()) throw Error("analyze dynamics: an encoder-decoder model needs a source in every batch");
    if (b.B != B || b.T != T || b.S != S) throw Error("analyze dynamics: every batch must have the same shape");
  }
  const int N = cfg.n_layers, M = cfg.decoder_layers(), C = cfg.d_model, dec0 = cfg.first_decoder_slot();
  EncDecDynamicsReport rep;
  rep.batches = batches;
  rep.B = B;
  rep.T = T;
  rep.S = S;
  // the layout: layers and their sub-layers, and which parameter tensors belong to each
  const std::vector<ParamSpec>& specs = model.table().specs;
  for (const ParamSpec& p : specs) rep.params.push_back({p.name, 0.0});
  std::vector<std::vector<size_t>> layer_specs(size_t(N + M)), slot_specs(size_t(cfg.n_slots()));
  for (int g = 0; g < N + M; g++) {
    StackDynamics& st = g < N ? rep.encoder : rep.decoder;
    LayerDynamicsEncDec d;
    d.layer = g < N ? g : g - N;
    d.global_layer = g;
    d.placement = to_string(cfg.placement_of(g));
    st.layers.push_back(d);
    for (size_t s = 0; s < specs.size(); s++)
      if (has_prefix(specs[s].name, layer_prefix(cfg, g))) layer_specs[size_t(g)].push_back(s);
  }
  for (int i = 0; i < cfg.n_slots(); i++) {
    const Slot sl = cfg.slot(i);
    StackDynamics& st = sl.encoder ? rep.encoder : rep.decoder;
    SublayerDynamicsEncDec sd;
    sd.slot = i;
    sd.kind = to_string(sl.kind);
    sd.prefix = slot_prefix(cfg, i);
    sd.present = sl.present;
    if (!sl.present) sd.branch_ratio = sd.grad_norm = std::nan("");
    st.layers[size_t(sl.encoder ? sl.layer : sl.layer - N)].sublayers.push_back(sd);
    for (size_t s = 0; s < specs.size(); s++)
      if (has_prefix(specs[s].name, sd.prefix)) slot_specs[size_t(i)].push_back(s);
  }
  int last_enc = dec0 - 1;  // the encoder's last present sub-layer: its x_out is the encoder's output
  while (last_enc > 0 && !cfg.has_sublayer(last_enc)) last_enc--;
  std::vector<double> sq(specs.size());  // squared gradient norm of each tensor, this batch
  for (const Batch& batch : given) {
    model.zero_grad();
    rep.loss += model.forward(batch.ids.data(), batch.labels.data(), B, T, nullptr, batch.mask_or_null(),
                              batch.source()) / batches;
    model.backward();
    for (size_t s = 0; s < specs.size(); s++) {
      const double* g = model.grads().data() + specs[s].offset;
      sq[s] = 0;
      for (size_t i = 0; i < specs[s].numel; i++) sq[s] += g[i] * g[i];
      rep.params[s].grad_norm += std::sqrt(sq[s]) / batches;
    }
    const auto group_norm = [&](const std::vector<size_t>& group) {
      double g2 = 0;
      for (size_t s : group) g2 += sq[s];
      return std::sqrt(g2);
    };
    for (int i = 0; i < cfg.n_slots(); i++) {
      const Slot sl = cfg.slot(i);
      const std::vector<uint8_t>& mask = sl.encoder ? batch.src_mask : batch.mask;
      const size_t rows = size_t(B) * (sl.encoder ? S : T);
      LayerDynamicsEncDec& d = (sl.encoder ? rep.encoder : rep.decoder).layers[size_t(sl.encoder ? sl.layer : sl.layer - N)];
      const int first_slot_of_layer = sl.encoder ? 2 * sl.layer : dec0 + 3 * (sl.layer - N);
      if (i == first_slot_of_layer) {
        d.stream_rms += mean_real_rms(model.stream(i), mask, rows, C) / batches;
        d.grad_norm += group_norm(layer_specs[size_t(sl.layer)]) / batches;
      }
      if (!sl.present) continue;
      SublayerDynamicsEncDec& sd = d.sublayers[size_t(i - first_slot_of_layer)];
      const SublayerActs<double>& a = model.acts(i);
      double ratio = 0;
      size_t count = 0;
      for (size_t n = 0; n < rows; n++)
        if (mask.empty() || mask[n]) {
          ratio += row_norm(a.g + n * C, C) / std::max(1e-300, row_norm(a.x_in + n * C, C));
          count++;
        }
      sd.branch_ratio += ratio / double(count) / batches;
      sd.grad_norm += group_norm(slot_specs[size_t(i)]) / batches;
    }
    rep.encoder.out_stream_rms += mean_real_rms(model.acts(last_enc).x_out, batch.src_mask, size_t(B) * S, C) / batches;
    rep.memory_rms += mean_real_rms(model.memory(), batch.src_mask, size_t(B) * S, C) / batches;
    rep.decoder.out_stream_rms += mean_real_rms(model.stream(cfg.n_slots()), batch.mask, size_t(B) * T, C) / batches;
  }
  for (StackDynamics* st : {&rep.encoder, &rep.decoder})
    st->grad_growth = norm_ratio(st->layers.back().grad_norm, st->layers.front().grad_norm);
  return rep;
}

nlohmann::json to_json(const EncDecDynamicsReport& r) {
  const auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  const auto stack = [&](const StackDynamics& st) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& d : st.layers) {
      nlohmann::json subs = nlohmann::json::array();
      for (const auto& s : d.sublayers)
        subs.push_back({{"slot", s.slot}, {"kind", s.kind}, {"prefix", s.prefix}, {"present", s.present},
                        {"branch_ratio", num(s.branch_ratio)}, {"grad_norm", num(s.grad_norm)}});
      layers.push_back({{"layer", d.layer}, {"global_layer", d.global_layer}, {"placement", d.placement},
                        {"stream_rms", d.stream_rms}, {"grad_norm", d.grad_norm}, {"sublayers", subs}});
    }
    return nlohmann::json{{"layers", layers}, {"out_stream_rms", st.out_stream_rms},
                          {"grad_norm_last_over_first", st.grad_growth}};
  };
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : r.params) params.push_back({{"name", p.name}, {"grad_norm", p.grad_norm}});
  return {{"arch", "encdec"}, {"batches", r.batches}, {"B", r.B}, {"T", r.T}, {"S", r.S}, {"loss", r.loss},
          {"encoder", stack(r.encoder)}, {"decoder", stack(r.decoder)}, {"memory_rms", r.memory_rms},
          {"param_grad_norms", params}};
}

void print_report(const EncDecDynamicsReport& r) {
  fmt::print("Depth dynamics of an encoder-decoder over {} batches of {} source x {} target rows of {} (mean loss "
             "{:.4f}); norms are means over real (unpadded) tokens\n",
             r.batches, r.S, r.T, r.B, r.loss);
  fmt::print("{:<8} {:>5} {:<9} {:>10} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "stack", "layer", "placement",
             "rms(x_l)", "grad layer", "|F|/|x| sa", "grad sa", "|F|/|x| ca", "grad ca", "|F|/|x| ff", "grad ff");
  for (const StackDynamics* st : {&r.encoder, &r.decoder}) {
    const char* name = st == &r.encoder ? "encoder" : "decoder";
    for (const auto& d : st->layers) {
      fmt::print("{:<8} {:>5} {:<9} {:>10.4f} {:>11.4e}", name, d.layer, d.placement, d.stream_rms, d.grad_norm);
      const auto cell = [](double v, const char* f) { return std::isnan(v) ? std::string("-") : fmt::format(fmt::runtime(f), v); };
      for (const char* kind : {"attn", "cross", "mlp"}) {
        const SublayerDynamicsEncDec* s = nullptr;
        for (const auto& x : d.sublayers)
          if (x.kind == kind) s = &x;
        fmt::print(" {:>11} {:>11}", s ? cell(s->branch_ratio, "{:.4f}") : "", s ? cell(s->grad_norm, "{:.4e}") : "");
      }
      fmt::print("\n");
    }
    fmt::print("{:<8} {:>5} {:<9} {:>10.4f}\n", name, "out", "", st->out_stream_rms);
  }
  fmt::print("columns: stack, layer (out: after the last), placement; rms(x_l): the stream entering the layer, RMS over its "
             "d channels (||x_l|| / sqrt(d)), mean over real tokens; grad layer: ||dL/d theta|| of the layer; |F|/|x| and grad of each sub-layer: sa self-attention, ca "
             "cross-attention, ff the MLP (branch-to-stream ratio and its parameters' gradient norm)\n");
  fmt::print("memory (what cross-attention reads) rms(mem) = {:.4f}\n", r.memory_rms);
  fmt::print("layer gradient norm, last layer / first layer: encoder {}, decoder {} (Liu et al. 2020: at "
             "init a Post-LN decoder's shrink toward its input, the encoder's do not)\n",
             ratio_text(r.encoder.grad_growth, 4, kNoGradientRatio), ratio_text(r.decoder.grad_growth, 4, kNoGradientRatio));
}

}  // namespace normlab::analysis
