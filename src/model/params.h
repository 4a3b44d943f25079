// params.h: the parameter table, the single source of every parameter's name, shape, role and
// offset in the flat parameter buffer (and so in the gradient and optimizer buffers and in
// checkpoints). Names and canonical order are documented in docs/MODEL.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace normlab {

enum class ParamRole { Embedding, LinearWeight, LinearBias, NormGain, NormBias };

struct ParamSpec {
  std::string name;            // e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // PyTorch layout, e.g. (3C, C)
  ParamRole role;
  size_t offset = 0;           // into the flat buffer
  size_t numel = 0;
  bool decays() const { return role == ParamRole::Embedding || role == ParamRole::LinearWeight; }
};

struct ParamTable {
  std::vector<ParamSpec> specs;  // canonical order
  size_t total = 0;
  // nullptr if absent
  const ParamSpec* find(const std::string& name) const;
};

ParamTable make_param_table(const ModelConfig& cfg);

// Which norm sites a placement has (docs/MODEL.md).
struct NormSites {
  bool in = false, branch = false, out = false;
};
NormSites norm_sites(Placement p);

// Views of one sub-layer's parameters in a flat buffer (norm pointers null where the site or the
// bias does not exist). For attention w1/b1 is qkv and w2/b2 the output projection; for the MLP
// w1/b1 is fc and w2/b2 proj.
template <class S>
struct NormParams {
  S* weight = nullptr;  // (C)
  S* bias = nullptr;    // (C), LayerNorm only
};
template <class S>
struct SublayerParams {
  NormParams<S> ln_in, ln_branch, ln_out;
  S* w1 = nullptr;  // (3C, C) attn | (F, C) mlp
  S* b1 = nullptr;  // (3C) | (F)
  S* w2 = nullptr;  // (C, C) | (C, F)
  S* b2 = nullptr;  // (C)
};

enum class Sublayer { Attn, Mlp };
const char* to_string(Sublayer);

template <class S>
SublayerParams<S> sublayer_params(const ParamTable& table, S* base, int layer, Sublayer which);

}  // namespace normlab
