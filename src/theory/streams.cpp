// streams.cpp: the claims about residual designs with more than one stream (model.hyper; model/hyper.h),
// measured on fresh models:
//   Zhu et al. 2024 (Hyper-Connections, arXiv 2409.19606): the static weights start so that the network
//     is a Pre-Norm one at initialization. With every stream starting as the embedding output and each
//     sub-layer reading one stream and adding its branch to all (alpha = [e_(i mod n) | I], beta = 1),
//     every stream carries Pre-LN's x, so the stack ends with n x; the final LayerNorm (eps 0, the
//     claim's exact setting) gives Pre-LN's output. An identity: the logits of an n-stream HC and of the
//     Pre-LN with the same block weights, static and dynamic (whose input-dependent part starts at 0).
// and on trained models:
//   Xie et al. 2025 (mHC, DeepSeek, arXiv 2512.24880): in training, the composite of unconstrained HC's
//     residual mixes through the layers grows (their "Amax Gain Magnitude", the largest absolute row or
//     column sum of H^res_L ... H^res_1, reaches about 3,000 in their 27B model), while mHC's doubly
//     stochastic mixes keep it near 1 (about 1.6). An effect: log10 of HC's composite forward gain
//     through the whole stack over mHC's, the two trained alike from the same seed, per unit of
//     validation windows; its size at 27B is not this scale's, so only the direction is judged.
//   Kimi 2026 (Attention Residuals, arXiv 2603.15031): with PreNorm's running sum the hidden state grows
//     with depth and each layer must write ever larger outputs to count; AttnRes, each sub-layer's input a
//     softmax over depth, "mitigates PreNorm dilution: output magnitudes remain bounded across depth". An
//     effect: the growth of the branch outputs over depth (the least-squares slope of log10 RMS(g) against
//     the sub-layer's index, the first and the last layer left out) of a Pre-LN minus that of an AttnRes
//     model with one layer per block, the two trained alike from the same seed, per unit of windows.
// A given model is one model, not two trained alike: no row.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/hyper.h"
#include "theory/checks.h"

namespace normlab::theory::detail {

namespace {

constexpr int kStreams = 4;
constexpr int kGainUnits = 4;         // units of windows per seed (one reading per unit)
constexpr int kGainUnitTokens = 256;  // tokens per unit

// The composite forward gain through every sub-layer of a hyper-connected model on one unit of
// windows (B of T tokens): the largest absolute row sum of H^res_L ... H^res_1, maximum over the tokens.
// Two models' readings on the same units of validation windows (kGainUnits units of B windows of T
// tokens, drawn with `salt`): read(model, ids, B, T) of each on each unit, in unit order.
struct PairedReadings {
  std::vector<double> a, b;
  int B = 0, T = 0;
};
template <class Read>
PairedReadings read_paired(const Bench& b, uint64_t salt, Model<double>& ma, Model<double>& mb, Read read) {
  const TheoryOptions& o = b.opt;
  PairedReadings p;
  p.T = o.seq_len, p.B = std::max(1, kGainUnitTokens / p.T);
  const std::vector<std::vector<int32_t>> units = window_units(b.corpus, kGainUnits, p.B, p.T, uint64_t(o.seed), salt, o.bos);
  if (units.empty()) throw Error("theory: the corpus is shorter than one window");
  for (const std::vector<int32_t>& ids : units) {
    p.a.push_back(read(ma, ids, p.B, p.T));
    p.b.push_back(read(mb, ids, p.B, p.T));
  }
  return p;
}

double composite_gain(Model<double>& m, const std::vector<int32_t>& ids, int B, int T) {
  std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);
  m.forward(ids.data(), labels.data(), B, T);
  const ModelConfig& c = m.config();
  std::vector<const double*> mixes;
  for (int i = 0; i < c.n_slots(); i++)
    if (c.has_sublayer(i)) mixes.push_back(m.acts(i).hmix);
  return hyper_gains(c.hyper_streams, mixes, long(B) * T).composite.back().forward;
}

void gain_growth_check(const Bench& b, std::vector<Measurement>& out) {
  const TheoryOptions& o = b.opt;
  const std::string name = "mHC bounds the composite gain";
  attempt(b, out, {name}, [&] {
    ModelConfig hc = gpt_config(o, Placement::Pre, 1e-5, o.n_layers);
    hc.hyper = HyperMix::Hc;
    hc.hyper_streams = kStreams;
    ModelConfig mhc = hc;
    mhc.hyper = HyperMix::Mhc;
    const std::unique_ptr<Model<double>> m_hc = b.models->make(hc, true), m_mhc = b.models->make(mhc, true);
    const PairedReadings r = read_paired(b, 73, *m_hc, *m_mhc, composite_gain);
    const std::vector<double>&g_hc = r.a, &g_mhc = r.b;
    const int B = r.B, T = r.T;
    std::vector<double> excess;
    for (size_t k = 0; k < g_hc.size(); k++) excess.push_back(std::log10(g_hc[k]) - std::log10(g_mhc[k]));
    out.push_back(effect(
        {name,
         "unconstrained hyper-connections' composite residual mapping grows in training, mHC's stays bounded near 1",
         fmt::format("hc and mhc, {} streams, d = {}, {} heads, {} layers, GPT-2 init, trained alike ({}); {} units of {} "
                     "validation windows of {} tokens per seed",
                     kStreams, o.d_model, o.n_heads, o.n_layers, b.lm, kGainUnits, B, T),
         "log10 of HC's composite forward gain through the stack (the largest absolute row sum of H^res_L ... H^res_1, "
         "maximum over the tokens) minus mHC's, per unit of windows"},
        excess, EffectRule::towards(1),
        fmt::format("composite forward gain: hc {:.4g}, mhc {:.4g} (first unit)", g_hc.front(), g_mhc.front()),
        {{"log10_hc_over_mhc", excess}, {"hc_gain", g_hc}, {"mhc_gain", g_mhc}}));
    out.back().reported = "Xie et al. 2025 (mHC): the Amax Gain Magnitude of HC's composite mapping reaches about 3,000 "
                          "in their 27B model, mHC's about 1.6 (their stability analysis); the size at that scale is not this one's";
  });
}

// The growth of the branch outputs over depth on one unit of windows: the least-squares slope of
// log10 RMS(g) (mean over the tokens of ||g_t|| / sqrt(d)) against the sub-layer's index, over the
// sub-layers of the interior layers (the first and the last are left out: the embedding's layer and the
// one the head reads are their own cases), or of every layer below 4 layers.
double output_growth(Model<double>& m, const std::vector<int32_t>& ids, int B, int T) {
  std::vector<int32_t> labels(ids.size(), ops::kIgnoreLabel);
  m.forward(ids.data(), labels.data(), B, T);
  const ModelConfig& c = m.config();
  const long N = long(B) * T;
  const int C = c.d_model;
  std::vector<double> x, y;
  const bool interior = c.n_layers >= 4;
  for (int i = interior ? 2 : 0; i < 2 * (interior ? c.n_layers - 1 : c.n_layers); i++) {
    if (!c.has_sublayer(i)) continue;
    const double* g = m.acts(i).g;
    double rms = 0;
    for (long r = 0; r < N; r++) {
      double sq = 0;
      for (int k = 0; k < C; k++) sq += g[r * C + k] * g[r * C + k];
      rms += std::sqrt(sq / C) / double(N);
    }
    x.push_back(i);
    y.push_back(std::log10(rms));
  }
  double mx = 0, my = 0;
  for (size_t k = 0; k < x.size(); k++) mx += x[k] / double(x.size()), my += y[k] / double(x.size());
  double sxy = 0, sxx = 0;
  for (size_t k = 0; k < x.size(); k++) sxy += (x[k] - mx) * (y[k] - my), sxx += (x[k] - mx) * (x[k] - mx);
  return sxy / sxx;
}

void output_growth_check(const Bench& b, std::vector<Measurement>& out) {
  const TheoryOptions& o = b.opt;
  const std::string name = "AttnRes bounds the output growth";
  attempt(b, out, {name}, [&] {
    const ModelConfig pre = gpt_config(o, Placement::Pre, 1e-5, o.n_layers);
    ModelConfig attn = pre;
    attn.hyper = HyperMix::AttnRes;
    attn.attn_res_block = 2;  // one layer per block
    attn.hyper_streams = attn.attn_res_streams();
    const std::unique_ptr<Model<double>> m_pre = b.models->make(pre, true), m_attn = b.models->make(attn, true);
    const PairedReadings r = read_paired(b, 79, *m_pre, *m_attn, output_growth);
    const std::vector<double>&s_pre = r.a, &s_attn = r.b;
    const int B = r.B, T = r.T;
    std::vector<double> excess;
    for (size_t k = 0; k < s_pre.size(); k++) excess.push_back(s_pre[k] - s_attn[k]);
    out.push_back(effect(
        {name, "with AttnRes the sub-layers' output magnitudes stay bounded over depth, where PreNorm's grow",
         fmt::format("Pre-LN and Pre-LN with Attention Residuals (one layer per block: {} streams), d = {}, {} heads, {} "
                     "layers, GPT-2 init, trained alike ({}); {} units of {} validation windows of {} tokens per seed",
                     attn.hyper_streams, o.d_model, o.n_heads, o.n_layers, b.lm, kGainUnits, B, T),
         fmt::format("the slope of log10 RMS of the branch outputs g against the sub-layer's index (decades per "
                     "sub-layer; {}), Pre-LN's minus AttnRes's, per unit of windows",
                     o.n_layers >= 4 ? "the first and last layers left out" : "every layer: fewer than 4")},
        excess, EffectRule::towards(1),
        fmt::format("slope: Pre-LN {:.3g}, AttnRes {:.3g} decades per sub-layer (first unit)", s_pre.front(),
                    s_attn.front()),
        {{"pre_minus_attn_res", excess}, {"pre_slope", s_pre}, {"attn_res_slope", s_attn}}));
    out.back().reported = "Kimi 2026 (Attention Residuals): \"AttnRes mitigates PreNorm dilution: output magnitudes "
                          "remain bounded across depth\" (the 48B Kimi Linear's training dynamics); no size at this scale";
  });
}

}  // namespace

void stream_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.given) return;
  if (!b.fresh) {
    gain_growth_check(b, out);
    output_growth_check(b, out);
    return;
  }
  const TheoryOptions& o = b.opt;
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
