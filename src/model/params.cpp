// params.cpp: builds the parameter table from the config.
#include "model/params.h"

#include <fmt/format.h>

#include "util/error.h"

namespace normlab {

NormSites norm_sites(Placement p) {
  switch (p) {
    case Placement::Post: return {false, false, true};
    case Placement::Pre: return {true, false, false};
    case Placement::Sandwich: return {true, true, false};
    case Placement::PrePost: return {true, false, true};
    case Placement::DeepNorm: return {false, false, true};
    case Placement::None: return {false, false, false};
  }
  return {};
}

const char* to_string(Sublayer s) { return s == Sublayer::Attn ? "attn" : "mlp"; }

const ParamSpec* ParamTable::find(const std::string& name) const {
  for (const auto& s : specs)
    if (s.name == name) return &s;
  return nullptr;
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
  auto add_norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {C}, ParamRole::NormGain);
    if (cfg.norm == NormKind::LayerNorm) add(prefix + ".bias", {C}, ParamRole::NormBias);
  };
  add("wte.weight", {V, C}, ParamRole::Embedding);
  add("wpe.weight", {cfg.seq_len, C}, ParamRole::Embedding);
  if (cfg.type_vocab > 0) add("wtt.weight", {cfg.type_vocab, C}, ParamRole::Embedding);
  if (cfg.embed_norm) add_norm("ln_emb");
  for (int l = 0; l < cfg.n_layers; l++) {
    const NormSites sites = norm_sites(cfg.placement_of(l));
    for (Sublayer sub : {Sublayer::Attn, Sublayer::Mlp}) {
      if (sub == Sublayer::Mlp && !cfg.mlp) continue;
      const std::string p = fmt::format("h.{}.{}", l, to_string(sub));
      const bool attn = sub == Sublayer::Attn;
      if (sites.in) add_norm(p + ".ln_in");
      const std::string first = attn ? ".qkv" : ".fc";
      const int64_t hidden = attn ? 3 * C : F;
      add(p + first + ".weight", {hidden, C}, ParamRole::LinearWeight);
      add(p + first + ".bias", {hidden}, ParamRole::LinearBias);
      add(p + ".proj.weight", {C, attn ? C : F}, ParamRole::LinearWeight);
      add(p + ".proj.bias", {C}, ParamRole::LinearBias);
      if (sites.branch) add_norm(p + ".ln_branch");
      if (sites.out) add_norm(p + ".ln_out");
    }
  }
  if (cfg.has_final_norm()) add_norm("ln_f");
  if (cfg.head == Head::Mlm) {
    add("head.dense.weight", {C, C}, ParamRole::LinearWeight);
    add("head.dense.bias", {C}, ParamRole::LinearBias);
    add_norm("head.ln");
    add("head.bias", {V}, ParamRole::LinearBias);
  }
  return t;
}

template <class S>
SublayerParams<S> sublayer_params(const ParamTable& table, S* base, int layer, Sublayer which) {
  const std::string p = fmt::format("h.{}.{}", layer, to_string(which));
  auto ptr = [&](const std::string& name) -> S* {
    const ParamSpec* s = table.find(p + name);
    return s ? base + s->offset : nullptr;
  };
  const bool attn = which == Sublayer::Attn;
  SublayerParams<S> v;
  v.ln_in = {ptr(".ln_in.weight"), ptr(".ln_in.bias")};
  v.ln_branch = {ptr(".ln_branch.weight"), ptr(".ln_branch.bias")};
  v.ln_out = {ptr(".ln_out.weight"), ptr(".ln_out.bias")};
  v.w1 = ptr(attn ? ".qkv.weight" : ".fc.weight");
  v.b1 = ptr(attn ? ".qkv.bias" : ".fc.bias");
  v.w2 = ptr(".proj.weight");
  v.b2 = ptr(".proj.bias");
  return v;
}

template SublayerParams<float> sublayer_params(const ParamTable&, float*, int, Sublayer);
template SublayerParams<double> sublayer_params(const ParamTable&, double*, int, Sublayer);

}  // namespace normlab
