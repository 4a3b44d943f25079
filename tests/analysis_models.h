// analysis_models.h: the small models the instrument and theory tests measure (test_analysis.cpp,
// test_theory.cpp): a 2-layer d = 12 config of a method and norm, and a model of it run forward on a
// fixed sequence.
#pragma once

#include <memory>
#include <vector>

#include "model/model.h"
#include "ops/common.h"

namespace normlab::test {

inline ModelConfig small(Placement p, NormKind norm, double eps) {
  ModelConfig c;
  c.d_model = 12;
  c.n_heads = 3;
  c.n_layers = 2;
  c.seq_len = 6;
  c.placement = {p};
  c.norm = norm;
  c.eps = eps;
  c.init_std = 0.3;
  return c;
}

inline std::unique_ptr<Model<double>> run(const ModelConfig& c, int T) {
  auto m = std::make_unique<Model<double>>(c);
  std::vector<int32_t> ids(T), labels(T, ops::kIgnoreLabel);
  for (int t = 0; t < T; t++) ids[t] = (t * 37 + 11) % 256;
  m->forward(ids.data(), labels.data(), 1, T);
  return m;
}

}  // namespace normlab::test
