// fake_depth.h: what each layer of a one-stack model does to its input, the readings of source 004's
// "fake depth" claim (theory/fake_depth.cpp decides it; the pretrained study reads it too): on one
// batch of B windows (ids: B x T), per layer, the mean angular distance between the streams entering it and the next,
// arccos(cos(x_l, x_(l+1)))/pi over the tokens (Gromov et al. 2024's measure), and (a causal model
// with logits: with_loss) the next-token loss increase when its branches are removed (each
// sub-layer's output projection and bias zeroed; the weights are restored; removal = false: not
// measured).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace normlab::analysis {

struct FakeDepth {
  double loss = 0;
  bool with_loss = false;
  std::vector<double> angular, ablation;  // per layer
};
// The trend of a per-layer reading over the interior layers 1 .. L-2 (the first and last layers are
// reported apart: they differ in kind, the embedding's and the head's neighbours): Spearman's rank
// correlation with the layer index; NaN for fewer than 3 interior layers.
double interior_trend(const std::vector<double>& by_layer);
// float (the pretrained study: SmolLM2's 31 forwards per window, 3x faster than in double; float32's
// error on a loss is ~1e-5 nats against removal costs of 1e-3 and more) or double.
template <class S>
FakeDepth measure_fake_depth(Model<S>& m, const std::vector<int32_t>& ids, bool removal = true, int B = 1);

}  // namespace normlab::analysis
