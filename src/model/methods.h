// methods.h: the normalization methods (the values of model.placement), each one entry of one
// table: where its norms sit, how its shortcut and branch are scaled, which parameters that adds,
// whether a final norm follows, its initialization and its source. The model, the parameter table,
// the initialization, the analysis and the report read this table; a new method is one entry here
// (and, where it brings a new kind of scale or init, the one place that implements that kind).
// The exact forms are in docs/MODEL.md ("Methods").
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "model/config.h"

namespace normlab {

// Which norm sites a sub-layer has: ln_in before the branch, ln_branch on its output, ln_out after
// the residual sum.
struct NormSites {
  bool in = false, branch = false, out = false;
};

// The shortcut scale omega of r = omega * x + lambda * g.
enum class Shortcut {
  Zero,           // 0: no skip path (model.residual = false, for every method: ModelConfig::shortcut_of)
  One,            // 1
  DeepNormAlpha,  // DeepNet's constant alpha (config.residual_alpha)
  AdminOmega,     // a per-channel parameter `omega` (C), initialized by model.admin_init
  Sphere,         // nGPT's update: r = A + |a| (g - A), A = x / |x|, a per-channel `eigen_lr` (C) (ops/sphere.h)
};

// The branch scale lambda.
enum class BranchGain {
  One,             // 1
  LayerScalar,     // ReZero: one scalar per layer, shared by its sub-layers (`rezero`, init 0)
  SublayerScalar,  // SkipInit: one scalar per sub-layer (`gain` (1), init 0)
  Channel,         // LayerScale: per channel (`gain` (C), init by stack depth)
};

// The streams a stack carries. One: the residual stream x alone. Dual (ResiDual): a second stream
// x_d rides beside x; it starts as the stack's input (like x), every sub-layer adds its branch output
// g to it with no norm, and the stack's output is y = x + ln_f(x_d), ln_f applied once at the end
// (instead of ln_f(x) or x). Every layer of a dual stack must have a dual method (config.cpp).
enum class Streams { One, Dual };

struct Method {
  Placement id;
  const char* name;     // the config value
  const char* title;    // how summaries and reports name it ("Post-LN", "Peri-LN")
  NormSites sites;      // every sub-layer's (the feed-forward's too unless ffn_sites says otherwise)
  Shortcut shortcut;
  BranchGain gain;
  bool final_norm;      // a final norm follows a stack whose last layer has this method (Dual: on x_d)
  Streams streams;
  InitScheme init;      // the scheme `init = auto` resolves to (Auto: no preference)
  const char* summary;  // one line: what it is
  const char* source;   // paper
  bool embed_norm = false;  // a norm of the embedding output before the first block (Peri-LN), when the
                            // stack's first layer has this method (gpt and encoder stacks)
  bool depth_scaled_input = false;  // ln_in's output times 1 / sqrt(l), l = 1..L the layer's depth in its
                                    // stack (LayerNorm Scaling); a constant, not a parameter
  std::optional<NormSites> ffn_sites = std::nullopt;  // the feed-forward sub-layer's, when they differ
                                                      // from the attention's (HybridNorm)
  bool qkv_norm = false;  // its self-attention normalizes q, k and v (model/qk_norm.h; per head unless
                          // model.qk_norm says "whole")
  bool sphere = false;    // nGPT: unit-length q and k heads scaled by `sqk`, the MLP's fc output scaled by
                          // `suv`, the logits by `sz`, scores by sqrt(HS), and every matrix renormalized
                          // after each optimizer step (Model::project_to_sphere); needs model.norm = l2
};

// nGPT's scaled parameters (ops/sphere.h): the stored value p starts at `init` and acts as p * factor,
// C = d_model; the reference code's values (base_scale = 1/sqrt(C); eigen learning rates start at 0.05).
struct SphereScale {
  double init, factor;
};
SphereScale sphere_scale(const char* which, int C);  // "eigen_lr", "sqk", "suv" or "sz"

const Method& method_of(Placement p);
// The method whose config value is `name`, if any.
const Method* find_method(std::string_view name);
// Every method, in the table's order (the values of model.placement).
std::span<const Method> all_methods();
// The norm sites of a sub-layer of kind `kind` in a layer of method p.
inline NormSites norm_sites(Placement p, Sublayer kind) {
  const Method& m = method_of(p);
  return kind == Sublayer::Mlp && m.ffn_sites ? *m.ffn_sites : m.sites;
}
inline bool dual_stream(Placement p) { return method_of(p).streams == Streams::Dual; }
// The block is x + (a branch of x): one stream, no norm after either sum and a shortcut of exactly 1,
// so its Jacobian is I + A (the instruments' bounds on sigma_min(I + A) apply). Read from the entry.
inline bool residual_form(Placement p) {
  const Method& m = method_of(p);
  return !norm_sites(p, Sublayer::Attn).out && !norm_sites(p, Sublayer::Mlp).out && m.shortcut == Shortcut::One &&
         m.streams == Streams::One;
}
// Throws Error naming the method when the model carries a second stream: for code that reads one
// residual stream (the instruments in analysis/ and the one-stream Jacobian products), whose numbers
// would be wrong for a two-stream model. `what` names the caller.
void require_one_stream(const ModelConfig& cfg, const char* what);
// The same for a two-stream stack (ResiDual) only: for what reads the n streams of hyper-connections
// as one state (Model::state_width).
void refuse_second_stream(const ModelConfig& cfg, const char* what);

// LayerScale's initial gain for a stack of `depth` layers (CaiT): 0.1 up to 18, 1e-5 up to 24,
// 1e-6 beyond.
double layerscale_init(int depth);
// Admin's closed-form omega for a stack of S residual sub-layers (docs/MODEL.md).
double admin_omega(AdminInit how, int sublayers);

}  // namespace normlab
