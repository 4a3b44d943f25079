// fake_depth.cpp: the per-layer readings of source 004's fake depth (fake_depth.h).
#include "analysis/fake_depth.h"
#include "analysis/stats.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "model/params.h"
#include "ops/common.h"

namespace normlab::analysis {

namespace {

// the next-token loss over B windows of T tokens each
template <class S>
double window_loss(Model<S>& m, const std::vector<int32_t>& ids, int B, int T) {
  std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);
  for (int b = 0; b < B; b++)
    for (int t = 0; t + 1 < T; t++) labels[size_t(b) * T + t] = ids[size_t(b) * T + t + 1];
  return m.forward(ids.data(), labels.data(), B, T);
}

}  // namespace

template <class S>
FakeDepth measure_fake_depth(Model<S>& m, const std::vector<int32_t>& ids, bool removal, int B) {
  const ModelConfig& c = m.config();
  const int L = c.n_layers, T = int(ids.size()) / B, C = c.d_model;
  FakeDepth f;
  f.with_loss = removal && c.causal() && c.has_logits();
  std::vector<int32_t> none(ids.size(), ops::kIgnoreLabel);
  f.loss = f.with_loss ? window_loss(m, ids, B, T) : m.forward(ids.data(), none.data(), B, T);
  // angular distance between the streams entering layer l and l + 1, mean over tokens
  for (int l = 0; l < L; l++) {
    const S* a = m.stream(2 * l);
    const S* b = m.stream(2 * l + 2);
    double mean = 0;
    for (int t = 0; t < B * T; t++) {
      double ab = 0, aa = 0, bb = 0;
      for (int k = 0; k < C; k++) {
        const double x = double(a[size_t(t) * C + k]), y = double(b[size_t(t) * C + k]);
        ab += x * y, aa += x * x, bb += y * y;
      }
      mean += std::acos(std::clamp(ab / std::sqrt(std::max(aa * bb, 1e-300)), -1.0, 1.0)) / std::numbers::pi / (B * T);
    }
    f.angular.push_back(mean);
  }
  if (!f.with_loss) return f;
  // layer l's branches off: each sub-layer's output projection (and bias) zeroed, and the forward rerun
  // from layer l (Model::forward_from: the streams entering it are unchanged; a whole forward where it
  // cannot), top down so that the streams below each removed layer are still the full model's
  f.ablation.assign(size_t(L), 0.0);
  for (int l = L - 1; l >= 0; l--) {
    std::vector<std::pair<S*, std::vector<S>>> saved;
    for (int s : {2 * l, 2 * l + 1}) {
      if (!c.slot(s).present) continue;
      for (const char* name : {".proj.weight", ".proj.bias"}) {
        const ParamSpec* p = m.table().find(slot_prefix(c, s) + name);
        if (!p) continue;  // bias = none
        S* w = m.params().data() + p->offset;
        saved.emplace_back(w, std::vector<S>(w, w + p->numel));
        std::fill(w, w + p->numel, S(0));
      }
    }
    f.ablation[size_t(l)] = (m.can_forward_from() ? m.forward_from(2 * l) : window_loss(m, ids, B, T)) - f.loss;
    for (auto& [w, v] : saved) std::copy(v.begin(), v.end(), w);
  }
  return f;
}

double interior_trend(const std::vector<double>& by_layer) {
  if (by_layer.size() < 5) return std::nan("");
  std::vector<double> layer, value;
  for (size_t l = 1; l + 1 < by_layer.size(); l++) layer.push_back(double(l)), value.push_back(by_layer[l]);
  return spearman(layer, value);
}

template FakeDepth measure_fake_depth(Model<float>&, const std::vector<int32_t>&, bool, int);
template FakeDepth measure_fake_depth(Model<double>&, const std::vector<int32_t>&, bool, int);

}  // namespace normlab::analysis
