// jacobian_fixture.h: the perturbed test model of the Jacobian tests (test_block_jacobian,
// test_local_jacobian): a case (placement, norm, architecture, MLP, residual, activation, padding),
// its name for SCOPED_TRACE, and the model built from it, its parameters moved away from init and
// one forward pass already run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fmt/format.h>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/common.h"
#include "util/rng.h"

namespace normlab::test {

struct JacobianCase {
  Placement placement;
  NormKind norm;
  Arch arch;
  bool mlp = true;
  bool residual = true;
  Activation activation = Activation::Gelu;
  bool padded = false;  // the last row's last two keys are padding
  Positions positions = Positions::Learned;
  int kv_heads = 0;  // grouped-query: key-value heads (0: one per query head)
  QkNorm qk_norm = QkNorm::None;
  bool v_norm = false;
  bool qk_norm_affine = true;  // false: weightless QK-norm
  bool norm_bias = true;       // false: no norm site holds a bias
  double attn_softcap = 0.0;   // > 0: Gemma 2's soft cap on the scores (with attn_scale 0.4)
  int head_dim = 0;            // > 0: model.head_dim (heads wider or narrower than d / heads)
  bool rope_kinds = false;     // RoPE with two kinds of layer (Gemma 3, OLMo 3): layer 0 local at base 500,
                               // layer 1 global with a factor 1.3 on cos and sin and a divisor per frequency
  AttnGate attn_gate = AttnGate::None;  // gated attention (headwise or elementwise output gate)
  bool attn_sink = false;                // a learned sink logit per query head
  double value_residual = 0.0;           // > 0: value residual learning (layer 1 mixes layer 0's values)
  int completep_base_depth = 0;          // > 0: CompleteP's branch multiplier base / 2
};

inline std::string jacobian_case_name(const JacobianCase& c) {
  return fmt::format("{} {} {} mlp={} residual={} {} padded={} positions={}", to_string(c.placement),
                     to_string(c.norm), to_string(c.arch), c.mlp, c.residual, to_string(c.activation), c.padded,
                     to_string(c.positions)) + fmt::format(" kv_heads={} qk_norm={} v_norm={} qk_norm_affine={} norm_bias={}", c.kv_heads, to_string(c.qk_norm),
                                                    c.v_norm, c.qk_norm_affine, c.norm_bias) +
         fmt::format(" attn_softcap={} head_dim={} rope_kinds={} attn_gate={} attn_sink={} value_residual={}",
                     c.attn_softcap, c.head_dim, c.rope_kinds, to_string(c.attn_gate), c.attn_sink, c.value_residual) +
         fmt::format(" completep_base_depth={}", c.completep_base_depth);
}

// A 2-layer double model of case c: width d with `heads` heads, F = ff (defaults: HS = 4, F not a
// multiple of d), seq_len max(T, 8), eps 1e-5, init_std 0.3. Away from init: every parameter (norm
// gains and biases included) moved by 0.2 N(0, 1) from Rng(seed + 13 placement + 5 norm + arch).
// Then one forward pass on B rows of T byte ids (i * 37 + 11) % 256, i counting over all rows, no
// labels; c.padded (and T > 2): the last row's last two keys are padding, the other rows unpadded.
inline std::unique_ptr<Model<double>> jacobian_model(const JacobianCase& c, uint64_t seed, int B, int T, int d = 12,
                                                     int heads = 3, int ff = 20) {
  ModelConfig cfg;
  cfg.arch = c.arch;
  cfg.d_model = d;
  cfg.n_heads = heads;
  cfg.n_layers = 2;
  cfg.d_ff = ff;
  cfg.seq_len = std::max(T, 8);
  cfg.placement = {c.placement};
  cfg.norm = c.norm;
  cfg.eps = 1e-5;
  cfg.mlp = c.mlp;
  cfg.residual = c.residual;
  cfg.activation = c.activation;
  cfg.positions = c.positions;
  if (c.kv_heads) cfg.n_kv_heads = c.kv_heads;
  if (c.head_dim) cfg.head_dim = c.head_dim;
  cfg.qk_norm = c.qk_norm;
  cfg.v_norm = c.v_norm;
  cfg.qk_norm_affine = c.qk_norm_affine;
  cfg.attn_gate = c.attn_gate;
  cfg.attn_sink = c.attn_sink;
  cfg.value_residual = c.value_residual;
  cfg.completep_base_depth = c.completep_base_depth;
  if (method_of(c.placement).sphere) cfg.bias = LinearBias::None;  // (nGPT has no biases)
  cfg.norm_bias = c.norm_bias;
  if (c.attn_softcap > 0) {
    cfg.attn_softcap = c.attn_softcap;
    cfg.attn_scale = 0.4;
  }
  if (c.rope_kinds) {
    cfg.rope_local_base = 500.0;
    cfg.rope_global_every = 2;
    cfg.rope_mscale = 1.3;
    for (int i = 0; i < cfg.rope_dims() / 2; i++) cfg.rope_freq_factors.push_back(1.0 + 1.5 * i);
  }
  cfg.init_std = 0.3;
  auto m = std::make_unique<Model<double>>(cfg);
  Rng rng(seed + uint64_t(int(c.placement) * 13 + int(c.norm) * 5 + int(c.arch)));
  for (double& p : m->params()) p += 0.2 * rng.normal();
  std::vector<int32_t> ids(size_t(B) * size_t(T)), labels(ids.size(), ops::kIgnoreLabel);
  for (size_t i = 0; i < ids.size(); i++) ids[i] = int32_t((i * 37 + 11) % 256);
  std::vector<uint8_t> mask(ids.size(), 1);
  if (c.padded && T > 2) mask[ids.size() - 1] = mask[ids.size() - 2] = 0;
  m->forward(ids.data(), labels.data(), B, T, nullptr, c.padded ? mask.data() : nullptr);
  return m;
}

}  // namespace normlab::test
