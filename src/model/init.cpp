// init.cpp: parameter initialization.
#include "model/init.h"

#include <cmath>

#include "util/rng.h"

namespace normlab {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

template <class S>
void init_params(S* params, const ParamTable& table, const ModelConfig& cfg) {
  const InitScheme scheme = cfg.resolved_init();
  const int C = cfg.d_model;
  for (size_t i = 0; i < table.specs.size(); i++) {
    const ParamSpec& p = table.specs[i];
    S* w = params + p.offset;
    Rng rng(uint64_t(cfg.seed), i + 1);
    switch (p.role) {
      case ParamRole::NormGain:
        for (size_t j = 0; j < p.numel; j++) w[j] = S(1);
        continue;
      case ParamRole::NormBias:
      case ParamRole::LinearBias:
        for (size_t j = 0; j < p.numel; j++) w[j] = S(0);
        continue;
      case ParamRole::Embedding:
        for (size_t j = 0; j < p.numel; j++) w[j] = S(cfg.init_std * rng.normal());
        continue;
      case ParamRole::LinearWeight:
        break;
    }
    const int64_t rows = p.shape[0], cols = p.shape[1];
    const bool qkv = ends_with(p.name, ".qkv.weight");
    const bool residual_out = ends_with(p.name, ".proj.weight");
    // fans of one projection: the fused qkv is three C x C projections
    const double fan_in = double(cols), fan_out = qkv ? double(C) : double(rows);
    for (int64_t r = 0; r < rows; r++) {
      for (int64_t c = 0; c < cols; c++) {
        double v = 0;
        switch (scheme) {
          case InitScheme::Auto:  // resolved above; unreachable
          case InitScheme::Normal:
            v = cfg.init_std * rng.normal();
            break;
          case InitScheme::Gpt2:
            v = (residual_out ? cfg.init_std / std::sqrt(2.0 * cfg.n_layers) : cfg.init_std) *
                rng.normal();
            break;
          case InitScheme::Xavier: {
            const double a = std::sqrt(6.0 / (fan_in + fan_out));
            v = a * (2.0 * rng.uniform() - 1.0);
            break;
          }
          case InitScheme::DeepNet: {
            // query and key rows keep gain 1; value rows, proj and the FFN get beta
            // (the MLM head is not a residual branch: gain 1)
            const bool query_or_key = qkv && r < 2 * C;
            const bool head = p.name.rfind("head.", 0) == 0;
            const double gain = query_or_key || head ? 1.0 : cfg.deepnet_beta();
            v = gain * std::sqrt(2.0 / (fan_in + fan_out)) * rng.normal();
            break;
          }
        }
        w[r * cols + c] = S(v);
      }
    }
  }
}

template void init_params<float>(float*, const ParamTable&, const ModelConfig&);
template void init_params<double>(double*, const ParamTable&, const ModelConfig&);

}  // namespace normlab
