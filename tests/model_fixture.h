// model_fixture.h: the tiny models of the whole-model tests (test_model, test_rope): a config of width 8
// and 2 heads for any placement list, random tokens with every third label ignored, the whole-model
// gradient check against central finite differences in double precision, and the logits of one config
// run with the weights another is initialized with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "check.h"
#include "model/model.h"
#include "model/params.h"
#include "ops/common.h"
#include "util/rng.h"

namespace normlab::test {

inline ModelConfig tiny(Arch arch, std::vector<Placement> placement, NormKind norm) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = int(placement.size() == 1 ? 2 : placement.size());
  c.d_ff = 12;
  c.vocab = arch == Arch::Gpt ? 11 : 259;
  c.seq_len = 6;
  c.norm = norm;
  c.placement = placement;
  c.init = InitScheme::Normal;
  c.init_std = 0.3;  // large enough that every path carries signal
  return c;
}

struct Tokens {
  std::vector<int32_t> ids, labels;
};

inline Tokens tokens_for(const ModelConfig& c, int B, int T, uint64_t seed) {
  Rng rng(seed);
  Tokens t{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  for (int i = 0; i < B * T; i++) {
    t.ids[i] = int32_t(rng.below(c.vocab_size()));
    t.labels[i] = (i % 3 == 1) ? ops::kIgnoreLabel : int32_t(rng.below(c.vocab_size()));
  }
  return t;
}

// Analytic gradient of the mean loss vs central differences, for every parameter; with padding,
// right-padded rows (row b keeps T - 2b tokens) and random token types.
inline void check_model_gradients(const ModelConfig& cfg, bool padding = false) {
  Model<double> model(cfg);
  // perturb gains, biases, sink logits and hyper-connections (whose input-dependent parts start at 0)
  // away from their initial values so their gradients are generic
  Rng rng(5);
  for (const ParamSpec& p : model.table().specs)
    if (p.role == ParamRole::NormGain || p.role == ParamRole::NormBias || p.role == ParamRole::LinearBias ||
        p.role == ParamRole::NormScalar || p.name.ends_with(".attn.sinks") || p.name.find(".hc.") != std::string::npos)
      for (size_t i = 0; i < p.numel; i++) model.params()[p.offset + i] += 0.2 * rng.normal();
  const int B = 2, T = 5;
  const Tokens tok = tokens_for(cfg, B, T, 7);
  std::vector<uint8_t> mask(size_t(B) * T, 1);
  std::vector<int32_t> types(size_t(B) * T, 0);
  if (padding)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        mask[size_t(b) * T + t] = t < T - 2 * b;
        types[size_t(b) * T + t] = (b + t) % std::max(cfg.type_vocab, 1);
      }
  const uint8_t* m = padding ? mask.data() : nullptr;
  const int32_t* tt = padding ? types.data() : nullptr;
  model.forward(tok.ids.data(), tok.labels.data(), B, T, tt, m);
  model.zero_grad();
  model.backward();
  const std::vector<double> analytic = model.grads();
  std::vector<double>& params = model.params();
  auto loss = [&] { return model.forward(tok.ids.data(), tok.labels.data(), B, T, tt, m); };
  const std::vector<double> numeric = finite_diff(params, loss, 1e-6);
  for (const ParamSpec& p : model.table().specs) {
    std::vector<double> a(analytic.begin() + p.offset, analytic.begin() + p.offset + p.numel);
    std::vector<double> n(numeric.begin() + p.offset, numeric.begin() + p.offset + p.numel);
    // loss is O(1) and the model ~20 ops deep: FD error ~1e-9; 1e-6 relative leaves margin
    expect_close(p.name, a, n, 1e-5, 1e-7);
  }
}

// The logits of a model of config c holding the weights a model of `base` is initialized with (the
// two configs must have the same parameters), on 2 sequences of 8 tokens.
inline std::vector<double> logits_with_weights_of(const ModelConfig& base, const ModelConfig& c, const Tokens& tok) {
  Model<double> m(c);
  const Model<double> ref(base);
  std::copy(ref.params().begin(), ref.params().end(), m.params().begin());
  m.forward(tok.ids.data(), tok.labels.data(), 2, 8);
  return std::vector<double>(m.logits(), m.logits() + size_t(2) * 8 * c.vocab_size());
}

}  // namespace normlab::test
