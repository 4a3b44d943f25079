// methods.cpp: the table of normalization methods (docs/MODEL.md, "Methods").
#include "model/methods.h"

#include <cmath>
#include <string>
#include <fmt/format.h>

#include "util/error.h"

namespace normlab {

namespace {

using S = Shortcut;
using G = BranchGain;
constexpr NormSites kIn{true, false, false}, kOut{false, false, true}, kNone{false, false, false};

constexpr Method kMethods[] = {
    {Placement::Post, "post", "Post-LN", kOut, S::One, G::One, false, Streams::One, InitScheme::Auto,
     "x <- LN(x + F(x)): the original Transformer", "Vaswani et al. 2017"},
    {Placement::Pre, "pre", "Pre-LN", kIn, S::One, G::One, true, Streams::One, InitScheme::Auto,
     "x <- x + F(LN(x)), a final LN at the end of the stack", "Xiong et al. 2020; GPT-2"},
    {Placement::Sandwich, "sandwich", "Sandwich-LN", {true, true, false}, S::One, G::One, true, Streams::One, InitScheme::Auto,
     "x <- x + LN(F(LN(x))) (CogView's Sandwich-LN)", "Ding et al. 2021 (CogView)"},
    {Placement::PrePost, "prepost", "Pre+Post-LN", {true, false, true}, S::One, G::One, false, Streams::One, InitScheme::Auto,
     "x <- LN(x + F(LN(x))) (source 001's \"Sandwich-LN\")", "source 001"},
    {Placement::DeepNorm, "deepnorm", "DeepNorm", kOut, S::DeepNormAlpha, G::One, false, Streams::One, InitScheme::DeepNet,
     "x <- LN(alpha x + F(x)), branch weights scaled by beta at init", "Wang et al. 2022 (DeepNet)"},
    {Placement::None, "none", "no norm", kNone, S::One, G::One, false, Streams::One, InitScheme::Auto,
     "x <- x + F(x): no normalization", "-"},
    {Placement::Admin, "admin", "Admin", kOut, S::AdminOmega, G::One, false, Streams::One, InitScheme::Auto,
     "x <- LN(omega * x + F(x)), omega a per-channel parameter set by profiling or a closed form",
     "Liu et al. 2020 (Admin)"},
    {Placement::ReZero, "rezero", "ReZero", kNone, S::One, G::LayerScalar, false, Streams::One, InitScheme::Auto,
     "x <- x + a_l F(x), one scalar a_l per layer, init 0, no norm", "Bachlechner et al. 2020 (ReZero)"},
    {Placement::SkipInit, "skipinit", "SkipInit", kNone, S::One, G::SublayerScalar, false, Streams::One, InitScheme::Auto,
     "x <- x + a F(x), one scalar per sub-layer, init 0, no norm", "De and Smith 2020 (SkipInit)"},
    {Placement::LayerScale, "layerscale", "LayerScale", kIn, S::One, G::Channel, true, Streams::One, InitScheme::Auto,
     "x <- x + diag(lambda) F(LN(x)), lambda per channel, init small by depth",
     "Touvron et al. 2021 (CaiT)"},
    {Placement::TFixup, "tfixup", "T-Fixup", kNone, S::One, G::One, false, Streams::One, InitScheme::TFixup,
     "x <- x + F(x) with T-Fixup's depth-scaled initialization, no norm", "Huang et al. 2020 (T-Fixup)"},
    {Placement::ResiDual, "residual", "ResiDual", kOut, S::One, G::One, true, Streams::Dual, InitScheme::Auto,
     "x <- LN(x + F(x)) and x_d <- x_d + F(x); the stack ends y = x + LN_f(x_d)",
     "Xie et al. 2023 (ResiDual)"},
    {Placement::Peri, "peri", "Peri-LN", {true, true, false}, S::One, G::One, true, Streams::One, InitScheme::Auto,
     "x <- x + LN(F(LN(x))), a norm on the embedding output and a final norm", "Kim et al. 2025 (Peri-LN)",
     /*embed_norm=*/true},
    {Placement::Reordered, "reordered", "OLMo 2's order", {false, true, false}, S::One, G::One, true, Streams::One, InitScheme::Auto,
     "x <- x + LN(F(x)): the norm on the branch output only, and a final norm (OLMo 2's order; OLMo 2 "
     "also normalizes q and k: model.qk_norm = \"whole\")",
     "OLMo et al. 2025 (OLMo 2)"},
    {Placement::Lns, "lns", "LayerNorm Scaling", kIn, S::One, G::One, true, Streams::One, InitScheme::Auto,
     "x <- x + F(LN(x) / sqrt(l)), l = 1..L the layer's depth: Pre-LN with LayerNorm Scaling",
     "Sun et al. 2025 (The Curse of Depth)", /*embed_norm=*/false, /*depth_scaled_input=*/true},
    // HybridNorm as the authors' code computes it (BryceZhuo/HybridNorm, dense_model/olmo/model.py, the
    // paper's config: attn_norm false, ffn_norm true, ffn_residual_after_norm true): h = x + Attn(x),
    // then y = N(h) and x' = y + FFN(y), the FFN's shortcut carrying the normalized stream. N(h) is
    // the attention sub-layer's out norm (stored as attn.ln_out) and the FFN sub-layer has no norm.
    {Placement::HybridNorm, "hybridnorm", "HybridNorm", kOut, S::One, G::One, true, Streams::One, InitScheme::Auto,
     "h <- x + Attn(x) with q, k, v each normalized; y <- LN(h); x <- y + FFN(y) (the FFN's residual carries "
     "the normalized stream), a final norm",
     "Zhuo et al. 2025 (HybridNorm)", /*embed_norm=*/false, /*depth_scaled_input=*/false, /*ffn_sites=*/kNone,
     /*qkv_norm=*/true},
    // HybridNorm*'s first layer (the authors' README: attn_norm true, ffn_residual false): Pre-Norm in
    // both halves, with QKV-norm.
    {Placement::HybridNormPre, "hybridnorm_pre", "HybridNorm* (first layer)", kIn, S::One, G::One, true, Streams::One, InitScheme::Auto,
     "h <- x + Attn(LN(x)) with q, k, v each normalized; x <- h + FFN(LN(h)): HybridNorm*'s first layer",
     "Zhuo et al. 2025 (HybridNorm*)", /*embed_norm=*/false, /*depth_scaled_input=*/false, /*ffn_sites=*/std::nullopt,
     /*qkv_norm=*/true},
    {Placement::NGpt, "ngpt", "nGPT", {false, true, true}, S::Sphere, G::One, false, Streams::One, InitScheme::Auto,
     "x <- N(N(x) + |a| (N(F(x)) - N(x))), N(x) = x / |x| (model.norm = l2): the stream on the unit sphere; "
     "unit-length q, k heads, scaled MLP and logits, every matrix renormalized after each step",
     "Loshchilov et al. 2025 (nGPT)", /*embed_norm=*/false, /*depth_scaled_input=*/false, /*ffn_sites=*/std::nullopt,
     /*qkv_norm=*/false, /*sphere=*/true},
};

}  // namespace

std::span<const Method> all_methods() { return kMethods; }

const Method* find_method(std::string_view name) {
  for (const Method& m : kMethods)
    if (name == m.name) return &m;
  return nullptr;
}

const Method& method_of(Placement p) {
  for (const Method& m : kMethods)
    if (m.id == p) return m;
  return kMethods[0];  // unreachable: every Placement has an entry (checked by test_model)
}

void require_one_stream(const ModelConfig& cfg, const char* what) {
  if (cfg.hyper_connected())
    throw Error(fmt::format("{} reads one residual stream; this model is hyper-connected (model.hyper = \"{}\", {} "
                            "streams), which this instrument does not read yet",
                            what, to_string(cfg.hyper), cfg.hyper_streams));
  refuse_second_stream(cfg, what);
}

void refuse_second_stream(const ModelConfig& cfg, const char* what) {
  for (int l = 0; l < cfg.total_layers(); l++)
    if (dual_stream(cfg.placement_of(l)))
      throw Error(fmt::format("{} reads one residual stream; layer {} is \"{}\" ({}), which carries two "
                              "(x and x_d), so it does not take this model",
                              what, l, method_of(cfg.placement_of(l)).name, method_of(cfg.placement_of(l)).source));
}

SphereScale sphere_scale(const char* which, int C) {
  const std::string w = which;
  const double base = 1.0 / std::sqrt(double(C));
  if (w == "eigen_lr") return {base, 0.05 / base};  // alpha_A, alpha_M: |p 0.05 sqrt(C)|, 0.05 at the start
  if (w == "sqk") return {base, 1.0 / base};         // s_qk: 1 at the start
  if (w == "suv") return {1.0, 1.0 / base};          // s_u, s_v: sqrt(C) at the start (times sqrt(C), as nGPT)
  if (w == "sz") return {base, 1.0 / base};          // s_z: 1 at the start
  throw Error(fmt::format("sphere_scale: no scale \"{}\" (a bug)", w));
}

double layerscale_init(int depth) { return depth <= 18 ? 0.1 : depth <= 24 ? 1e-5 : 1e-6; }

double admin_omega(AdminInit how, int sublayers) {
  const double S = sublayers;
  switch (how) {
    case AdminInit::Sqrt: return std::sqrt(S);
    case AdminInit::One: return 1.0;
    case AdminInit::Log:
    case AdminInit::Profile:  // a placeholder until the trainer profiles on data
      return std::sqrt((S + 1.0) / std::log(S + 1.0) - 1.0);
  }
  return 1.0;
}

}  // namespace normlab
