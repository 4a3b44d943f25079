// hyper_params.cpp: hyper-connections' config rules, parameters and initialization (model/hyper.h; the
// arithmetic is model/hyper.cpp). Apart from the kernels so that the config and the parameter table
// (and the parsers' fuzz harnesses that build them) need none of the arithmetic.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/hyper.h"
#include "model/methods.h"
#include "util/rng.h"

namespace normlab {

namespace {

constexpr int kMaxAttnResStreams = 129;  // attn_res: Full AttnRes of 64 layers (the streams' memory grows as L^2)
constexpr int kMaxSinkhornIters = 100;
constexpr double kDynamicScaleInit = 0.01;  // lucidrains' dynamic_alpha_scale, dynamic_beta_scale; MaxText's scalars

}  // namespace

void hyper_violations(const ModelConfig& cfg, std::vector<std::string>& v) {
  if (cfg.hyper == HyperMix::AttnRes) {
    if (cfg.attn_res_block < 1 || cfg.attn_res_block > 2 * cfg.n_layers)
      v.push_back(fmt::format("model.attn_res_block = {} must be in [1, 2 n_layers = {}] (sub-layers per block; 1: "
                              "Full AttnRes)",
                              cfg.attn_res_block, 2 * cfg.n_layers));
    else if (cfg.hyper_streams != cfg.attn_res_streams())
      v.push_back(fmt::format("model.hyper_streams = {}: attn_res has one stream for the embedding and one per block "
                              "of {} sub-layers, {} here (leave hyper_streams unset)",
                              cfg.hyper_streams, cfg.attn_res_block, cfg.attn_res_streams()));
    else if (cfg.hyper_streams > kMaxAttnResStreams)
      v.push_back(fmt::format("model.hyper = \"attn_res\" with {} streams (the embedding's and one per block): at most {} "
                              "(every sub-layer holds them all); raise model.attn_res_block",
                              cfg.hyper_streams, kMaxAttnResStreams));
    if (!cfg.mlp) v.push_back("model.hyper = \"attn_res\" counts its blocks in sub-layers: it needs model.mlp = true");
  } else {
    if (cfg.attn_res_block != 1)
      v.push_back(fmt::format("model.attn_res_block = {} is for model.hyper = \"attn_res\"", cfg.attn_res_block));
    if (cfg.hyper_streams < 1 || cfg.hyper_streams > kMaxHyperStreams)
      v.push_back(fmt::format("model.hyper_streams = {} must be in [1, {}] (the number of residual streams)",
                              cfg.hyper_streams, kMaxHyperStreams));
  }
  if (cfg.sinkhorn_iters < 1 || cfg.sinkhorn_iters > kMaxSinkhornIters)
    v.push_back(fmt::format("model.sinkhorn_iters = {} must be in [1, {}]", cfg.sinkhorn_iters, kMaxSinkhornIters));
  if (!cfg.hyper_connected()) return;
  if (cfg.hyper == HyperMix::MhcLite && cfg.hyper_streams > kMaxLiteStreams)
    v.push_back(fmt::format("model.hyper = \"mhc_lite\" mixes the n! permutations of the streams: model.hyper_streams = "
                            "{} must be at most {}",
                            cfg.hyper_streams, kMaxLiteStreams));
  const std::string key = fmt::format("model.hyper = \"{}\"", to_string(cfg.hyper));
  if (cfg.encdec()) v.push_back(key + " is for one stack (arch = \"gpt\" or \"encoder\")");
  if (!cfg.residual) v.push_back(key + " replaces the skip path: it needs model.residual = true");
  if (cfg.completep_base_depth > 0) v.push_back(key + " does not combine with model.completep_base_depth");
  for (int l = 0; l < cfg.total_layers(); l++) {
    const Method& m = method_of(cfg.placement_of(l));
    if (!residual_form(m.id) || m.gain != BranchGain::One || m.sphere) {
      v.push_back(fmt::format("{} takes the place of the shortcut x + g of a method without a norm after the sum "
                              "or a scale on either path (pre, peri, llama-family orders, LayerNorm Scaling); "
                              "placement \"{}\" has {}",
                              key, m.name,
                              norm_sites(m.id, Sublayer::Attn).out || norm_sites(m.id, Sublayer::Mlp).out
                                  ? "a norm after the sum"
                                  : "its own shortcut or branch scale"));
      return;
    }
  }
}

int hyper_res_width(const ModelConfig& cfg) {
  const int n = cfg.hyper_streams;
  if (cfg.hyper != HyperMix::MhcLite) return n * n;
  int f = 1;
  for (int k = 2; k <= std::min(n, kMaxLiteStreams); k++) f *= k;
  return f;
}

int hyper_pre_width(const ModelConfig& cfg) {
  return std::max(hyper_mix_width(cfg.hyper_streams), 2 * cfg.hyper_streams + hyper_res_width(cfg));
}

std::vector<HyperParamSpec> hyper_param_specs(const ModelConfig& cfg) {
  const int64_t n = cfg.hyper_streams, C = cfg.d_model;
  switch (cfg.hyper) {
    case HyperMix::None:
      return {};
    case HyperMix::HcStatic:
      return {{".hc.alpha", {n, n + 1}, ParamRole::Gate}, {".hc.beta", {n}, ParamRole::Gate}};
    case HyperMix::Hc:
      return {{".hc.norm.weight", {C}, ParamRole::NormGain},   {".hc.alpha", {n, n + 1}, ParamRole::Gate},
              {".hc.beta", {n}, ParamRole::Gate},              {".hc.alpha_fn", {n + 1, C}, ParamRole::Gate},
              {".hc.alpha_scale", {1}, ParamRole::Gate},       {".hc.beta_fn", {C}, ParamRole::Gate},
              {".hc.beta_scale", {1}, ParamRole::Gate}};
    case HyperMix::AttnRes:  // the keys' RMSNorm gain and the pseudo-query w (Kimi K3's *_res_norm, *_res_proj)
      return {{".hc.norm.weight", {C}, ParamRole::NormGain}, {".hc.query", {C}, ParamRole::Gate}};
    case HyperMix::Mhc:
    case HyperMix::MhcLite: {
      const int64_t W = 2 * n + hyper_res_width(cfg);
      return {{".hc.norm.weight", {n * C}, ParamRole::NormGain},
              {".hc.phi", {W, n * C}, ParamRole::Gate},
              {".hc.scale", {3}, ParamRole::Gate},
              {".hc.bias", {W}, ParamRole::Gate}};
    }
  }
  return {};
}

template <class S>
HyperParams<S> hyper_params(const ParamTable& table, S* base, const std::string& prefix) {
  auto ptr = [&](const char* suffix) -> S* {
    const ParamSpec* s = table.find(prefix + suffix);
    return s ? base + s->offset : nullptr;
  };
  HyperParams<S> h;
  h.norm.weight = ptr(".hc.norm.weight");
  h.alpha = ptr(".hc.alpha");
  h.beta = ptr(".hc.beta");
  h.alpha_fn = ptr(".hc.alpha_fn");
  h.alpha_scale = ptr(".hc.alpha_scale");
  h.beta_fn = ptr(".hc.beta_fn");
  h.beta_scale = ptr(".hc.beta_scale");
  h.phi = ptr(".hc.phi");
  h.scale = ptr(".hc.scale");
  h.bias = ptr(".hc.bias");
  h.query = ptr(".hc.query");
  return h;
}

template <class S>
bool init_hyper_param(const ModelConfig& cfg, const ParamSpec& p, int layer, S* w, Rng& rng) {
  const size_t at = p.name.find(".hc.");
  if (at == std::string::npos) return false;
  const std::string what = p.name.substr(at + 4);
  const int n = cfg.hyper_streams;
  // the sub-layer's index in its stack: lucidrains' layer_index, which picks the stream it reads first
  const int slot = 2 * layer + (p.name.find(".mlp.hc.") != std::string::npos ? 1 : 0);
  std::fill(w, w + p.numel, S(0));
  if (what == "alpha") {  // [e_(slot mod n) | I]
    w[size_t(slot % n) * (n + 1)] = S(1);
    for (int s = 0; s < n; s++) w[size_t(s) * (n + 1) + 1 + s] = S(1);
  } else if (what == "beta") {
    std::fill(w, w + p.numel, S(1));
  } else if (what == "alpha_scale" || what == "beta_scale" || what == "scale") {
    std::fill(w, w + p.numel, S(kDynamicScaleInit));
  } else if (what == "phi") {  // MaxText: variance scaling 1 over fan-in (n C), normal
    const double std = 1.0 / std::sqrt(double(p.shape[1]));
    for (size_t j = 0; j < p.numel; j++) w[j] = S(std * rng.normal());
  }  // alpha_fn, beta_fn (lucidrains), the biases (MaxText) and attn_res's query (the paper's uniform start) at 0
  return true;
}

#define NL_HYPER_PARAMS(S)                                                           \
  template HyperParams<S> hyper_params(const ParamTable&, S*, const std::string&); \
  template bool init_hyper_param(const ModelConfig&, const ParamSpec&, int, S*, Rng&);
NL_HYPER_PARAMS(float)
NL_HYPER_PARAMS(double)
#undef NL_HYPER_PARAMS

}  // namespace normlab
