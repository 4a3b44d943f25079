// params.cpp: builds the parameter table from the config.
#include "model/params.h"

#include <cmath>
#include <fmt/format.h>

#include "model/hyper.h"
#include "model/norm_of.h"
#include "model/qk_norm.h"
#include "util/error.h"

namespace normlab {

const ParamSpec* ParamTable::find(const std::string& name) const {
  if (index.size() == specs.size()) {
    const auto it = index.find(name);
    return it == index.end() ? nullptr : &specs[it->second];
  }
  for (const auto& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

std::string layer_prefix(const ModelConfig& cfg, int layer) {
  if (cfg.encdec()) return layer < cfg.n_layers ? fmt::format("enc.h.{}", layer) : fmt::format("h.{}", layer - cfg.n_layers);
  return fmt::format("h.{}", layer);
}

std::string slot_prefix(const ModelConfig& cfg, int slot) {
  const Slot s = cfg.slot(slot);
  return layer_prefix(cfg, s.layer) + "." + to_string(s.kind);
}

ParamTable make_param_table(const ModelConfig& cfg) {
  ParamTable t;
  const int64_t C = cfg.d_model, F = cfg.ff(), V = cfg.vocab_size();
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamRole role) {
    ParamSpec s{std::move(name), std::move(shape), role};
    s.numel = 1;
    for (auto d : s.shape) s.numel *= size_t(d);
    s.offset = t.total;
    t.total += s.numel;
    t.specs.push_back(std::move(s));
  };
  auto add_norm = [&](const std::string& prefix, int64_t width) {
    for (const NormParamSpec& n : norm_param_specs(cfg, prefix))
      add(prefix + n.suffix, {n.per_channel ? width : 1}, n.role);
  };
  add("wte.weight", {V, C}, ParamRole::Embedding);
  if (cfg.embed_scale_learned) add("embed_scale", {1}, ParamRole::Gate);  // starts at model.embed_scale
  const bool learned = cfg.positions == Positions::Learned;  // wpe only for learned positions
  if (learned) add("wpe.weight", {cfg.seq_len, C}, ParamRole::Embedding);
  if (cfg.encdec()) {
    if (!cfg.shared_embeddings) add("enc.wte.weight", {cfg.src_vocab_size(), C}, ParamRole::Embedding);
    if (learned) add("enc.wpe.weight", {cfg.seq_len, C}, ParamRole::Embedding);
  }
  if (cfg.type_vocab > 0) add("wtt.weight", {cfg.type_vocab, C}, ParamRole::Embedding);
  if (cfg.has_embed_norm()) add_norm("ln_emb", C);
  for (int i = 0; i < cfg.n_slots(); i++) {
    const Slot slot = cfg.slot(i);
    // the encoder's final norm follows its last layer
    if (cfg.encdec() && i == 2 * cfg.n_layers && cfg.has_enc_final_norm()) add_norm("enc.ln_f", C);
    const Method& m = method_of(cfg.placement_of(slot.layer));
    // a layer's ReZero scalar comes before its first sub-layer
    if (m.gain == BranchGain::LayerScalar && (i == 0 || cfg.slot(i - 1).layer != slot.layer))
      add(layer_prefix(cfg, slot.layer) + ".rezero", {1}, ParamRole::Gate);
    if (!slot.present) continue;
    const std::string p = slot_prefix(cfg, i);
    const NormSites sites = norm_sites(m.id, slot.kind);
    if (sites.in) add_norm(p + ".ln_in", C);
    // model.bias: qkv biases (q, k, v maps: qkv, cross q and kv) unless none; the others only for all
    const bool qkv_bias = cfg.bias != LinearBias::None, other_bias = cfg.bias == LinearBias::All;
    switch (slot.kind) {
      case Sublayer::Attn:
        add(p + ".qkv.weight", {cfg.qkv_width(), C}, ParamRole::LinearWeight);  // [q (A) | k | v], GQA: k, v narrower
        if (qkv_bias) add(p + ".qkv.bias", {cfg.qkv_width()}, ParamRole::LinearBias);
        {  // QK-norm: q_norm, k_norm (and v_norm), one gain per part (model/qk_norm.h)
          const QkNormLayout qk = qk_norm_layout(cfg, slot.layer);
          for (int j = 0; j < qk.n; j++) add_norm(p + kQkNormSites[j], qk.part[j].norm_width);
        }
        if (const int G = cfg.attn_gate_width()) {  // gated attention: its own map of h, biased as the q map
          add(p + ".gate.weight", {G, C}, ParamRole::LinearWeight);
          if (qkv_bias) add(p + ".gate.bias", {G}, ParamRole::LinearBias);
        }
        if (cfg.attn_sink) add(p + ".sinks", {cfg.n_heads}, ParamRole::Gate);  // one sink logit per query head
        break;
      case Sublayer::Cross:
        add(p + ".q.weight", {C, C}, ParamRole::LinearWeight);
        if (qkv_bias) add(p + ".q.bias", {C}, ParamRole::LinearBias);
        add(p + ".kv.weight", {2 * C, C}, ParamRole::LinearWeight);
        if (qkv_bias) add(p + ".kv.bias", {2 * C}, ParamRole::LinearBias);
        break;
      case Sublayer::Mlp:
        add(p + ".fc.weight", {cfg.fc_width(), C}, ParamRole::LinearWeight);  // gated: gate rows, then up rows
        if (other_bias) add(p + ".fc.bias", {cfg.fc_width()}, ParamRole::LinearBias);
        break;
    }
    // (the self-attention's output is n_heads HS wide: d_model unless head_dim says otherwise)
    add(p + ".proj.weight", {C, slot.kind == Sublayer::Mlp ? F : slot.kind == Sublayer::Attn ? cfg.attn_width() : C},
        ParamRole::LinearWeight);
    if (other_bias) add(p + ".proj.bias", {C}, ParamRole::LinearBias);
    if (sites.branch) add_norm(p + ".ln_branch", C);
    if (sites.out) add_norm(p + ".ln_out", C);
    if (cfg.shortcut_of(slot.layer) == Shortcut::AdminOmega) add(p + ".omega", {C}, ParamRole::Gate);
    if (cfg.shortcut_of(slot.layer) == Shortcut::Sphere) add(p + ".eigen_lr", {C}, ParamRole::Gate);
    if (m.sphere) {  // nGPT's scales (methods.h sphere_scale)
      if (slot.kind == Sublayer::Attn) add(p + ".sqk", {C}, ParamRole::Gate);
      if (slot.kind == Sublayer::Mlp) add(p + ".suv", {cfg.fc_width()}, ParamRole::Gate);
    }
    if (m.gain == BranchGain::SublayerScalar) add(p + ".gain", {1}, ParamRole::Gate);
    if (m.gain == BranchGain::Channel) add(p + ".gain", {C}, ParamRole::Gate);
    for (const HyperParamSpec& h : hyper_param_specs(cfg)) add(p + h.suffix, h.shape, h.role);
  }
  if (cfg.hyper == HyperMix::AttnRes)  // the final read over every stream (model/hyper.h)
    for (const HyperParamSpec& h : hyper_param_specs(cfg)) add(kAttnResOutPrefix + std::string(h.suffix), h.shape, h.role);
  if (cfg.has_final_norm()) add_norm("ln_f", C);
  if (cfg.head == Head::Untied) add("lm_head.weight", {V, C}, ParamRole::LinearWeight);
  if (cfg.on_sphere() && cfg.has_logits()) add("sz", {V}, ParamRole::Gate);  // nGPT's logit scale
  if (cfg.head == Head::Mlm) {
    add("head.dense.weight", {C, C}, ParamRole::LinearWeight);
    add("head.dense.bias", {C}, ParamRole::LinearBias);
    add_norm("head.ln", C);
    add("head.bias", {V}, ParamRole::LinearBias);
  }
  for (size_t i = 0; i < t.specs.size(); i++) t.index.emplace(t.specs[i].name, i);
  return t;
}

template <class S>
SublayerParams<S> sublayer_params(const ParamTable& table, const ModelConfig& cfg, S* base, int slot) {
  const std::string p = slot_prefix(cfg, slot);
  auto ptr = [&](const std::string& name) -> S* {
    const ParamSpec* s = table.find(name);
    return s ? base + s->offset : nullptr;
  };
  const Sublayer kind = cfg.slot(slot).kind;
  SublayerParams<S> v;
  v.ln_in = norm_params(table, base, p + ".ln_in");
  const int layer = cfg.slot(slot).layer;
  if (method_of(cfg.placement_of(layer)).depth_scaled_input)  // 1 / sqrt(l), l = 1..L within the stack
    v.ln_in.scale = 1.0 / std::sqrt(double(layer - (cfg.encdec() && layer >= cfg.n_layers ? cfg.n_layers : 0) + 1));
  v.ln_branch = norm_params(table, base, p + ".ln_branch");
  v.ln_out = norm_params(table, base, p + ".ln_out");
  for (int j = 0; j < 3; j++) v.qkv_norm[j] = norm_params(table, base, p + kQkNormSites[j]);
  const char* first = kind == Sublayer::Attn ? ".qkv" : kind == Sublayer::Cross ? ".q" : ".fc";
  v.w1 = ptr(p + first + ".weight");
  v.b1 = ptr(p + first + ".bias");
  v.wkv = ptr(p + ".kv.weight");
  v.bkv = ptr(p + ".kv.bias");
  v.wg = ptr(p + ".gate.weight");
  v.bg = ptr(p + ".gate.bias");
  v.sinks = ptr(p + ".sinks");
  v.w2 = ptr(p + ".proj.weight");
  v.b2 = ptr(p + ".proj.bias");
  v.omega = ptr(p + ".omega");
  v.eigen_lr = ptr(p + ".eigen_lr");
  v.sqk = ptr(p + ".sqk");
  v.suv = ptr(p + ".suv");
  if (cfg.hyper_connected()) v.hc = hyper_params(table, base, p);
  if (cfg.hyper == HyperMix::AttnRes) v.hc.sources = attn_res_sources(cfg, slot), v.hc.target = attn_res_target(cfg, slot);
  if (const ParamSpec* g = table.find(p + ".gain")) {
    v.gain = base + g->offset;
    v.gain_c = int(g->numel);
  } else if (const ParamSpec* r = table.find(layer_prefix(cfg, cfg.slot(slot).layer) + ".rezero")) {
    v.gain = base + r->offset;
    v.gain_c = 1;
  }
  return v;
}

template <class S>
NormParams<S> norm_params(const ParamTable& table, S* base, const std::string& prefix) {
  auto ptr = [&](const char* suffix) -> S* {
    const ParamSpec* s = table.find(prefix + suffix);
    return s ? base + s->offset : nullptr;
  };
  return {ptr(".weight"), ptr(".bias"), ptr(".alpha"), ptr(".shift")};
}

template NormParams<float> norm_params(const ParamTable&, float*, const std::string&);
template NormParams<double> norm_params(const ParamTable&, double*, const std::string&);
template SublayerParams<float> sublayer_params(const ParamTable&, const ModelConfig&, float*, int);
template SublayerParams<double> sublayer_params(const ParamTable&, const ModelConfig&, double*, int);

bool mup_hidden(const ParamSpec& p, const ModelConfig& cfg) {
  if (p.role != ParamRole::LinearWeight || !p.name.starts_with("h.")) return false;
  return !(p.name.ends_with(".attn.gate.weight") && cfg.attn_gate == AttnGate::Headwise);  // (a head-wise gate's rows are the heads)
}

std::vector<double> adam_step_multipliers(const ParamTable& table, const ModelConfig& cfg) {
  std::vector<double> m(table.specs.size(), 1.0);
  if (cfg.mup_base_width > 0)
    for (size_t i = 0; i < table.specs.size(); i++)
      if (mup_hidden(table.specs[i], cfg)) m[i] = 1.0 / cfg.mup_width_mult();
  return m;
}

AdamScaling adam_scaling(const ParamTable& table, const ModelConfig& cfg) {
  return {adam_step_multipliers(table, cfg),
          cfg.completep_base_depth > 0 ? cfg.branch_multiplier() / cfg.mup_width_mult() : 1.0};
}

}  // namespace normlab
