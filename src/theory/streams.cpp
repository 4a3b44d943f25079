// streams.cpp: the claims about residual designs with more than one stream (model.hyper; model/hyper.h),
// measured on fresh models:
//   Zhu et al. 2024 (Hyper-Connections, arXiv 2409.19606): the static weights start so that the network
//     is a Pre-Norm one at initialization. With every stream starting as the embedding output and each
//     sub-layer reading one stream and adding its branch to all (alpha = [e_(i mod n) | I], beta = 1),
//     every stream carries Pre-LN's x, so the stack ends with n x; the final LayerNorm (eps 0, the
//     claim's exact setting) gives Pre-LN's output. An identity: the logits of an n-stream HC and of the
//     Pre-LN with the same block weights, static and dynamic (whose input-dependent part starts at 0).
// A trained or given model is past its initialization: no row.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "theory/checks.h"

namespace normlab::theory::detail {

void stream_checks(const Bench& b, std::vector<Measurement>& out) {
  if (!b.fresh || b.given) return;
  const TheoryOptions& o = b.opt;
  constexpr int kStreams = 4;
  const int T = int(b.ids.size());
  std::vector<int32_t> labels(b.ids.size(), ops::kIgnoreLabel);
  // the Pre-LN model, then each form's with the same block weights (its hyper-connection's own at init)
  const ModelConfig pre_cfg = gpt_config(o, Placement::Pre, 0.0, o.n_layers);
  Model<double> pre(pre_cfg);
  pre.forward(b.ids.data(), labels.data(), 1, T);
  const size_t V = size_t(pre_cfg.vocab_size());
  double scale = 0;
  for (size_t k = 0; k < size_t(T) * V; k++) scale = std::max(scale, std::abs(pre.logits()[k]));
  double worst = 0;
  nlohmann::json numbers = nlohmann::json::object();
  for (HyperMix form : {HyperMix::HcStatic, HyperMix::Hc}) {
    ModelConfig c = pre_cfg;
    c.hyper = form;
    c.hyper_streams = kStreams;
    Model<double> hc(c);
    for (const ParamSpec& p : hc.table().specs)
      if (const ParamSpec* q = pre.table().find(p.name))
        std::copy(pre.params().begin() + q->offset, pre.params().begin() + q->offset + q->numel,
                  hc.params().begin() + p.offset);
    hc.forward(b.ids.data(), labels.data(), 1, T);
    double err = 0;
    for (size_t k = 0; k < size_t(T) * V; k++) err = std::max(err, std::abs(hc.logits()[k] - pre.logits()[k]));
    numbers[to_string(form)] = err / scale;
    worst = std::max(worst, err / scale);
  }
  out.push_back(identity({"HC init is Pre-LN", "the hyper-connection weights start so that the network is Pre-Norm",
                          fmt::format("Pre-LN and {} streams (hc_static and hc), d = {}, {} heads, {} layers, T = {}, "
                                      "GPT-2 init, the final LayerNorm's eps 0, {}",
                                      kStreams, o.d_model, o.n_heads, o.n_layers, T, b.lm),
                          "max |logits(HC) - logits(Pre-LN)| / max |logits|, same block weights"},
                         worst,
                         fmt::format("hc_static {:.1e}, hc {:.1e} of the largest logit", double(numbers["hc_static"]),
                                     double(numbers["hc"])),
                         numbers));
  out.back().reported = "Zhu et al. 2024 (Hyper-Connections): static alpha = [e_(k mod n) | I], beta = 1 at init";
}

}  // namespace normlab::theory::detail
