// params.h: the parameter table, the single source of every parameter's name, shape, role and
// offset in the flat parameter buffer (and so in the gradient and optimizer buffers and in
// checkpoints). Names and canonical order are documented in docs/MODEL.md.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "model/methods.h"

namespace normlab {

// Gate: a method's scale (Admin's omega, ReZero's / SkipInit's / LayerScale's gain): no weight decay.
// NormScalar: a norm kind's learned scalar (DyT's and Derf's alpha, Derf's shift; model/norm_of.h):
// no weight decay, initialized by the kind.
enum class ParamRole { Embedding, LinearWeight, LinearBias, NormGain, NormBias, NormScalar, Gate };

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
  // nullptr if absent (by name through `index` when it covers every spec, else a scan: a model
  // constructor looks up a few names per sub-layer, and a scan made that quadratic in depth)
  const ParamSpec* find(const std::string& name) const;
  std::unordered_map<std::string, size_t> index;  // name -> position in specs (make_param_table)
};

ParamTable make_param_table(const ModelConfig& cfg);

// muP (model.mup_base_width): whether a parameter is a hidden matrix, both of its dimensions growing
// with the width (every linear weight of a block but a head-wise attention gate's, whose rows are the
// heads), whose init and Adam step muP scales; the embeddings, the output matrix, biases, gains and
// scalars keep theirs (microsoft/mup: matrix-like against vector-like parameters).
bool mup_hidden(const ParamSpec& p, const ModelConfig& cfg);
// Each parameter's factor on its Adam step, by spec: 1 / m for muP's hidden matrices, else 1.
std::vector<double> adam_step_multipliers(const ParamTable& table, const ModelConfig& cfg);
// What the parametrization does to AdamW (train/optimizer.h): the step factors above, and a factor on
// epsilon: CompleteP's 1 / m_L, times 1 / m with muP (EleutherAI/nanoGPT-mup's completep branch); else 1.
struct AdamScaling {
  std::vector<double> step;  // by spec; empty: 1 for every spec
  double eps = 1.0;
};
AdamScaling adam_scaling(const ParamTable& table, const ModelConfig& cfg);


// Views of one sub-layer's parameters in a flat buffer (norm pointers null where the site or the
// bias does not exist). For attention w1/b1 is qkv and w2/b2 the output projection; for
// cross-attention w1/b1 is the query map q and wkv/bkv the key-value map of the memory; for the MLP
// w1/b1 is fc and w2/b2 proj. omega and gain are the method's scales (methods.h), null if absent.
// One norm site's parameters (which a kind has: model/norm_of.h, norm_param_specs).
template <class S>
struct NormParams {
  S* weight = nullptr;  // (C) gain
  S* bias = nullptr;    // (C) LayerNorm, DyT, Derf
  S* alpha = nullptr;   // (1) DyT, Derf: the input scale
  S* shift = nullptr;   // (1) Derf: the input shift
  double scale = 1.0;   // a constant factor on the site's output, not a parameter (LayerNorm Scaling's
                        // 1 / sqrt(l) on ln_in: methods.h depth_scaled_input); 1 everywhere else
};
// One sub-layer's hyper-connection (model/hyper.h), null where its form has none: norm (hc: C, mhc:
// n C); hc and hc_static: alpha (n, n+1) and beta (n); hc: alpha_fn (n+1, C), alpha_scale (1),
// beta_fn (C), beta_scale (1); mhc: phi (2n + n^2, n C), scale (3: pre, post, res), bias (2n + n^2).
template <class S>
struct HyperParams {
  NormParams<S> norm;
  S* alpha = nullptr, * beta = nullptr;
  S* alpha_fn = nullptr, * alpha_scale = nullptr, * beta_fn = nullptr, * beta_scale = nullptr;
  S* phi = nullptr, * scale = nullptr, * bias = nullptr;
  S* query = nullptr;  // attn_res: the pseudo-query w (C)
  int sources = 0;     // attn_res: the read's softmax runs over streams 0 .. sources - 1 (model/hyper.h)
  int target = 0;      // attn_res: the stream the sub-layer's output is added to
};
template <class S>
struct SublayerParams {
  NormParams<S> ln_in, ln_branch, ln_out;
  NormParams<S> qkv_norm[3];  // attn: QK-norm's q_norm, k_norm, v_norm (model/qk_norm.h), absent ones null
  S* w1 = nullptr;  // (3C, C) attn | (C, C) cross | (F, C) mlp
  S* b1 = nullptr;  // (3C) | (C) | (F)
  S* wkv = nullptr, * bkv = nullptr;  // (2C, C), (2C): cross only
  S* wg = nullptr, * bg = nullptr;    // (G, C), (G): a gated self-attention's gate map (config.h AttnGate)
  S* sinks = nullptr;                 // (n_heads): a self-attention's sink logits (model.attn_sink)
  S* w2 = nullptr;  // (C, C) | (C, C) | (C, F)
  S* b2 = nullptr;  // (C)
  S* omega = nullptr;  // (C) Admin's shortcut scale
  S* gain = nullptr;   // (gain_c) ReZero's (the layer's), SkipInit's or LayerScale's branch scale
  int gain_c = 0;      // 1 or C
  // nGPT (methods.h Method::sphere; ops/sphere.h): the update's eigen learning rate (C), the attention's
  // s_qk (C), the MLP's s_uv (fc width); null elsewhere
  S* eigen_lr = nullptr, * sqk = nullptr, * suv = nullptr;
  HyperParams<S> hc;  // model.hyper (model/hyper.h)
};

// Parameter name prefixes: "h.3.attn", "enc.h.0.mlp", "h.1.cross" (slot), "h.3" / "enc.h.0" (layer).
std::string slot_prefix(const ModelConfig& cfg, int slot);
std::string layer_prefix(const ModelConfig& cfg, int layer);

// The view of the norm site named `prefix` ("h.0.attn.ln_in", "ln_f") in a flat buffer: every
// pointer null when the site does not exist.
template <class S>
NormParams<S> norm_params(const ParamTable& table, S* base, const std::string& prefix);

template <class S>
SublayerParams<S> sublayer_params(const ParamTable& table, const ModelConfig& cfg, S* base, int slot);

}  // namespace normlab
