// hf_llama.cpp: Hugging Face Llama-family directories (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM,
// Olmo2ForCausalLM, Olmo3ForCausalLM, SmolLM3ForCausalLM, Phi3ForCausalLM) to normlab models, and
// Llama / Qwen2 / Qwen3 / OLMo 2 / OLMo 3 / Gemma / Gemma 2 / Gemma 3 / SmolLM3 back (hf_llama.h). Mistral is Llama without biases and with a sliding
// window on every layer (seq_len capped at it, as Gemma 2's). SmolLM3 is Llama with no RoPE on every
// N-th layer (no_rope_layers: model.nope_every). Phi-3 is Mistral's with q, k, v in one matrix and gate
// and up in another (qkv_proj, gate_up_proj: normlab's own fused layout). Qwen3 is Llama with q and k normalized per head
// (qk_norm heads, one gain of head_dim each, before RoPE) and no biases. OLMo 2 is the block in OLMo
// 2's order (placement reordered: x + N(F(x)), its post_attention_layernorm and post_feedforward_layernorm on the branch outputs) with q and k
// normalized over their whole projections (qk_norm whole, before RoPE). OLMo 3 is OLMo 2's block with
// Gemma 3's two kinds of layer: three sliding-window layers, then a full one (layer_types), each kind
// with its own RoPE, the scaling (YaRN in the released models) on the full layers only
// (model.rope_local_base = the sliding layers' base, rope_global_every). The block is normlab's
// pre-RMSNorm gpt with RoPE (rotate-half, as transformers' Llama), a gated MLP and grouped-query
// attention; Llama has no biases (or q, k, v, o and MLP biases with attention_bias and mlp_bias),
// Qwen2 has q, k, v biases. Gemma (the first) is the same block with three differences: the MLP is
// GeGLU (tanh GELU), the token embedding is multiplied by sqrt(hidden_size) (model.embed_scale), and
// each RMSNorm's gain is 1 + w with the stored w: normlab's gain is that sum, computed once on import
// in float32 exactly as Gemma computes it at every forward (gains are not weight-decayed, so AdamW
// moves 1 + w as Gemma's training moves w). Gemma 2 adds a norm on each branch's output (the sandwich:
// post_attention_layernorm, pre_ and post_feedforward_layernorm), its own score scale
// (query_pre_attn_scalar^(-1/2): model.attn_scale), soft caps on the attention scores and the final
// logits (model.attn_softcap, logit_softcap), and a sliding window on every other layer, which
// changes nothing for sequences no longer than the window: seq_len is capped at it. Gemma 3
// (Gemma3ForCausalLM) is Gemma 2's block without the soft caps (null by default) and with q and k
// normalized per head (qk_norm heads, gains 1 + w too, before RoPE), a sliding window on five layers of
// six (seq_len capped at it as in Gemma 2), and RoPE with a base per layer: the sliding ("local")
// layers rotate with rope_local_base_freq (1e4), every sixth ("global") with rope_theta (1e6) and,
// in the larger models, linear scaling (model.rope_local_base, rope_global_every, rope_scale). Every
// family's RoPE scaling is read the same way (read_rope_entry): linear (model.rope_scale), Llama 3.1's
// llama3, YaRN's blend or LongRoPE's short factors, a divisor per frequency (model.rope_freq_factors),
// with YaRN's and LongRoPE's factor on cos and sin (model.rope_mscale), and a partial_rotary_factor
// (Phi-4-mini's 0.75: model.rope_fraction); export writes linear scaling only.
#include "io/hf_llama.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <vector>

#include "io/families.h"
#include "io/hf_common.h"
#include "io/safetensors.h"
#include "ops/rope.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::hf {

using namespace detail;

namespace {

// fused: Phi-3's names, q, k and v in one qkv_proj and gate and up in one gate_up_proj (normlab's own
// row order), no biases.
std::vector<TensorMap> llama_table(const ModelConfig& c, bool fused = false) {
  const int64_t A = c.attn_width(), KV = int64_t(c.kv_heads()) * c.head_size(), F = c.ff();
  const bool qkv_bias = c.bias != LinearBias::None, all_bias = c.bias == LinearBias::All;
  std::vector<TensorMap> t = {{"embed_tokens.weight", "wte.weight"}};
  for (int l = 0; l < c.n_layers; l++) {
    const std::string h = fmt::format("layers.{}.", l), a = fmt::format("h.{}.attn.", l), m = fmt::format("h.{}.mlp.", l);
    const bool sandwich = c.placement_of(l) == Placement::Sandwich;  // Gemma 2: a norm on each branch's output
    if (c.placement_of(l) == Placement::Reordered) {  // OLMo 2: norms on the branch outputs only, QK-norm
      t.push_back({h + "post_attention_layernorm.weight", a + "ln_branch.weight"});
      t.push_back({h + "post_feedforward_layernorm.weight", m + "ln_branch.weight"});
    } else {
      t.push_back({h + "input_layernorm.weight", a + "ln_in.weight"});
    }
    if (c.qk_norm != QkNorm::None) {  // over the whole q and k projections (OLMo 2), or per head (Qwen3)
      t.push_back({h + "self_attn.q_norm.weight", a + "q_norm.weight"});
      t.push_back({h + "self_attn.k_norm.weight", a + "k_norm.weight"});
    }
    if (sandwich) {
      t.push_back({h + "post_attention_layernorm.weight", a + "ln_branch.weight"});
      t.push_back({h + "pre_feedforward_layernorm.weight", m + "ln_in.weight"});
      t.push_back({h + "post_feedforward_layernorm.weight", m + "ln_branch.weight"});
    }
    const char* names[] = {"q_proj", "k_proj", "v_proj"};
    const int64_t row0[] = {0, A, A + KV}, rows[] = {A, KV, KV};  // q is n_heads head_dim rows
    if (fused) t.push_back({h + "self_attn.qkv_proj.weight", a + "qkv.weight"});
    for (int p = 0; p < 3 && !fused; p++) {
      t.push_back({h + "self_attn." + names[p] + ".weight", a + "qkv.weight", Layout::Rows, row0[p], rows[p]});
      if (qkv_bias) t.push_back({h + "self_attn." + names[p] + ".bias", a + "qkv.bias", Layout::Rows, row0[p], rows[p]});
    }
    t.push_back({h + "self_attn.o_proj.weight", a + "proj.weight"});
    if (all_bias) t.push_back({h + "self_attn.o_proj.bias", a + "proj.bias"});
    if (!sandwich && c.placement_of(l) != Placement::Reordered)
      t.push_back({h + "post_attention_layernorm.weight", m + "ln_in.weight"});
    if (fused) {
      t.push_back({h + "mlp.gate_up_proj.weight", m + "fc.weight"});
    } else {
      t.push_back({h + "mlp.gate_proj.weight", m + "fc.weight", Layout::Rows, 0, F});
      t.push_back({h + "mlp.up_proj.weight", m + "fc.weight", Layout::Rows, F, F});
    }
    if (all_bias) {
      t.push_back({h + "mlp.gate_proj.bias", m + "fc.bias", Layout::Rows, 0, F});
      t.push_back({h + "mlp.up_proj.bias", m + "fc.bias", Layout::Rows, F, F});
    }
    t.push_back({h + "mlp.down_proj.weight", m + "proj.weight"});
    if (all_bias) t.push_back({h + "mlp.down_proj.bias", m + "proj.bias"});
  }
  t.push_back({"norm.weight", "ln_f.weight"});
  return t;
}

// RoPE scaling as a config states it (transformers 4: a rope_scaling object beside rope_theta; 5:
// rope_parameters holding both, or one entry per layer type for Gemma 3): none (rope_type default),
// linear (positions divided by factor: model.rope_scale), llama3 (Llama 3.1's divisor per frequency:
// model.rope_freq_factors, made by apply_rope_scaling once the head size is known), longrope (up to
// its original length) or yarn (divisors blended per frequency and a factor on cos and sin:
// apply_rope_scaling). Dynamic scaling changes the angles with the sequence length: refused.
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0, context = 8192;
  std::vector<double> short_factor;  // longrope: the divisors up to `context` positions
  double attention_factor = 0;       // longrope, yarn: the factor on cos and sin (0: from the lengths)
  double beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0;  // yarn (transformers' defaults)
  bool truncate = true;                                                   // yarn
  const char* key = "rope_scaling";  // the config.json key it came from (rope_parameters in transformers 5)
};

// One RoPE entry (the object at `key`): its base (the fallback when absent) and scaling; `scaled`
// false for an entry that may not scale (Gemma 3's local layers).
RopeScaling read_rope_entry(const ConfigReader& r, const char* key, double& base, bool scaled = true) {
  const ConfigReader e{r.j[key], r.path + " " + key};
  r.require(key, r.j[key].is_object(), "an object (rope_type, factor, ...)");
  RopeScaling s;
  if (!r.j[key].is_object()) return s;
  s.type = e.string("rope_type", e.string("type", "default"));
  if (s.type == "su") s.type = "longrope";  // (Phi-3's first name for it)
  r.require(key,
            s.type == "default" ||
                (scaled && (s.type == "linear" || s.type == "llama3" || s.type == "longrope" || s.type == "yarn")),
            scaled ? "normlab's RoPE scaling is linear, llama3, yarn or longrope up to its original length (rope_type "
                     "default, linear, llama3, yarn or longrope; not dynamic)"
                   : "the local layers' RoPE has no scaling (rope_type default)");
  base = e.number("rope_theta", base);
  if (s.type == "default") return s;
  if (s.type == "longrope") {  // short_factor: a divisor per frequency; long_factor applies past `context` only
    const json& f = r.j[key].contains("short_factor") ? r.j[key]["short_factor"] : json();
    for (size_t i = 0; f.is_array() && i < f.size() && i < 65536; i++) {
      r.require(key, f[i].is_number() && f[i].get<double>() >= 1e-6 && f[i].get<double>() <= 1e6,
                "longrope's short_factor: numbers in [1e-6, 1e6]");
      s.short_factor.push_back(f[i].get<double>());
    }
    r.require(key, !s.short_factor.empty(), "longrope with a short_factor list");
    s.attention_factor = e.number("attention_factor", 0.0);
    s.factor = e.number("factor", 0.0);  // (transformers 5: the length ratio m is computed from, if given)
    s.context = e.number("original_max_position_embeddings", 0.0);  // (transformers 5: here; 4: beside)
    return s;
  }
  if (s.type == "yarn") {  // factor: unset in transformers 5 when max / original gives it
    s.factor = e.null("factor") ? 0.0 : e.number("factor", 0.0);
    r.require(key, s.factor == 0.0 || (s.factor >= 1.0 && s.factor <= 1e6), "yarn's factor in [1, 1e6]");
    s.attention_factor = e.null("attention_factor") ? 0.0 : e.number("attention_factor", 0.0);
    s.beta_fast = e.null("beta_fast") ? 0.0 : e.number("beta_fast", 0.0);  // (0 or absent: the default, as
    s.beta_slow = e.null("beta_slow") ? 0.0 : e.number("beta_slow", 0.0);  // transformers' `or 32`, `or 1`)
    if (s.beta_fast == 0) s.beta_fast = 32;
    if (s.beta_slow == 0) s.beta_slow = 1;
    s.mscale = e.null("mscale") ? 0.0 : e.number("mscale", 0.0);
    s.mscale_all_dim = e.null("mscale_all_dim") ? 0.0 : e.number("mscale_all_dim", 0.0);
    s.truncate = e.boolean("truncate", true);
    s.context = e.number("original_max_position_embeddings", 0.0);
    r.require(key, s.attention_factor >= 0 && s.attention_factor <= 1e3, "yarn's attention_factor in (0, 1e3]");
    r.require(key, s.beta_fast > 0 && s.beta_slow > 0 && s.beta_fast < 1e6 && s.beta_slow < 1e6,
              "yarn's beta_fast and beta_slow > 0");
    r.require(key, s.mscale >= 0 && s.mscale < 1e3 && s.mscale_all_dim >= 0 && s.mscale_all_dim < 1e3,
              "yarn's mscale and mscale_all_dim in [0, 1e3)");
    return s;
  }
  s.factor = e.number("factor", 0.0);
  r.require(key, s.factor >= 1.0 && s.factor <= 1e6, "factor in [1, 1e6] (the positions are divided by it)");
  if (s.type == "llama3") {
    s.low_freq_factor = e.number("low_freq_factor", 0.0);
    s.high_freq_factor = e.number("high_freq_factor", 0.0);
    s.context = e.number("original_max_position_embeddings", 0.0);
    r.require(key, s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor && s.high_freq_factor < 1e6,
              "llama3 scaling with 0 < low_freq_factor < high_freq_factor");
    r.require(key, s.context >= 1 && s.context <= 1e9, "llama3 scaling with original_max_position_embeddings >= 1");
  }
  return s;
}

// The scaling onto the config; after the head size and the rotated share (and so R) are known.
// LongRoPE (Phi-3.5, Phi-3's 128k models, Phi-4-mini) up to original_max_position_embeddings:
// short_factor as divisors and cos, sin times m = attention_factor (else sqrt(1 + ln(s) / ln(original)),
// s = factor or max / original): model.rope_mscale; seq_len capped there (past it the long factors
// would apply). YaRN: yarn_rope_factors and its attention factor, the same at every length.
void apply_rope_scaling(const ConfigReader& r, ModelConfig& c, RopeScaling s, Imported& im) {
  if (s.type == "linear") c.rope_scale = s.factor;
  if (s.type == "yarn" && c.n_heads > 0) {  // transformers 5's _compute_yarn_parameters
    if (s.context == 0) s.context = r.number("original_max_position_embeddings", 0.0);
    const double max_len = r.number("max_position_embeddings", 2048);
    if (s.context == 0) s.context = max_len;
    if (s.factor == 0) s.factor = max_len / s.context;
    r.require(s.key, s.context >= 2 && s.context <= 1e9 && s.factor >= 1 && s.factor <= 1e6,
              "yarn with an original length >= 2 and a factor (or max / original) in [1, 1e6]");
    auto mscale = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
    c.rope_mscale = s.attention_factor > 0                       ? s.attention_factor
                    : s.mscale > 0 && s.mscale_all_dim > 0 ? mscale(s.mscale) / mscale(s.mscale_all_dim)
                                                                 : mscale(1.0);
    c.rope_freq_factors =
        ops::yarn_rope_factors(c.rope_dims(), c.rope_base, s.factor, s.beta_fast, s.beta_slow, s.context, s.truncate);
  }
  if (s.type == "longrope" && c.n_heads > 0) {
    if (s.context == 0) s.context = r.number("original_max_position_embeddings", 0.0);
    r.require("original_max_position_embeddings", s.context >= 2 && s.context <= 1e9,
              "LongRoPE needs original_max_position_embeddings >= 2");
    r.require(s.key, int(s.short_factor.size()) == c.rope_dims() / 2,
              fmt::format("longrope's short_factor holds one divisor per rotated pair ({})", c.rope_dims() / 2));
    const double scale = s.factor > 0 ? s.factor : r.integer("max_position_embeddings", 2048) / s.context;
    c.rope_freq_factors = s.short_factor;
    c.rope_mscale = s.attention_factor > 0 ? s.attention_factor : ops::longrope_mscale(scale, s.context);
    if (s.context < c.seq_len) {
      c.seq_len = int(s.context);
      im.notes.push_back(fmt::format("LongRoPE: its short factors apply up to original_max_position_embeddings {0}, "
                                     "so normlab takes sequences of up to {0} tokens",
                                     int(s.context)));
    }
  }
  if (s.type == "llama3" && c.n_heads > 0)
    c.rope_freq_factors = ops::llama3_rope_factors(c.rope_dims(), c.rope_base, s.factor, s.low_freq_factor,
                                                   s.high_freq_factor, s.context);
}

// partial_rotary_factor f (Phi-4-mini's 0.75; transformers 4: beside rope_theta, 5: in rope_parameters):
// the first f HS dimensions of each head rotate (model.rope_fraction), as transformers' int(HS f), which
// must be even (its cos and sin tables then cover exactly those dimensions).
void read_partial_rotary(const ConfigReader& r, ModelConfig& c) {
  double f = r.null("partial_rotary_factor") ? 1.0 : r.number("partial_rotary_factor", 1.0);  // (null: whole heads)
  if (r.has("rope_parameters") && r.j["rope_parameters"].is_object()) {
    const ConfigReader rp{r.j["rope_parameters"], r.path + " rope_parameters"};
    if (!rp.null("partial_rotary_factor")) f = rp.number("partial_rotary_factor", f);
  }
  if (f == 1.0 || c.n_heads <= 0) return;
  const int hs = c.head_size(), dims = int(hs * f);
  r.require("partial_rotary_factor", f > 0 && f < 1 && dims >= 2 && dims % 2 == 0,
            fmt::format("a share in (0, 1] of the head's {} dimensions that rotates an even number of them", hs));
  if (f > 0 && f < 1 && dims >= 2 && dims % 2 == 0) c.set_rope_dims(dims);
}

// A per-layer list marked on every N-th layer ((l + 1) % N == 0) and on no other: N; 0 when no layer is
// marked; nullopt when the marks follow no such N (Gemma 3's layer_types, SmolLM3's no_rope_layers).
std::optional<int> every_nth(const std::vector<bool>& marked) {
  int n = 0;
  for (size_t l = 0; l < marked.size() && n == 0; l++)
    if (marked[l]) n = int(l) + 1;
  for (size_t l = 0; l < marked.size(); l++)
    if (marked[l] != (n > 0 && (int(l) + 1) % n == 0)) return std::nullopt;
  return n;
}

// Two kinds of layer, each with its RoPE (Gemma 3, OLMo 3): which layers are full ("global") and which
// slide ("local": layer_types, or Gemma 3's older sliding_window_pattern; absent, a full layer every
// `every` layers), the full layers' base and scaling (rope_theta and rope_scaling, which apply to them
// only, or transformers 5's rope_parameters.full_attention) and the sliding layers' unscaled base
// (rope_parameters.sliding_attention, else Gemma 3's rope_local_base_freq, else OLMo 3's one rope_theta),
// onto rope_base / rope_scale / rope_freq_factors (global), rope_local_base and rope_global_every.
RopeScaling read_layer_types_rope(const ConfigReader& r, ModelConfig& c, const LlamaFamily& family) {
  const bool gemma3 = family.gemma;  // (Gemma 3's own keys: rope_local_base_freq, sliding_window_pattern)
  RopeScaling scaling;
  c.rope_local_base = gemma3 ? r.number("rope_local_base_freq", 10000.0) : c.rope_base;
  // (0 would read as model.rope_local_base's "one base": the local layers silently at the global base)
  r.require("rope_local_base_freq", !gemma3 || (c.rope_local_base > 1 && std::isfinite(c.rope_local_base)),
            "a finite base > 1");
  if (r.has("rope_scaling")) scaling = read_rope_entry(r, "rope_scaling", c.rope_base);
  if (r.has("rope_parameters")) {
    const json& rp = r.j["rope_parameters"];
    const ConfigReader rope{rp, r.path + " rope_parameters"};
    r.require("rope_parameters", rp.is_object(), "an object with full_attention and sliding_attention entries");
    if (rp.is_object()) {
      if (rope.has("full_attention")) scaling = read_rope_entry(rope, "full_attention", c.rope_base);
      scaling.key = "rope_parameters";
      if (rope.has("sliding_attention")) read_rope_entry(rope, "sliding_attention", c.rope_local_base, false);
    }
  }
  int every = gemma3 ? r.integer("sliding_window_pattern", family.local_every) : family.local_every;
  if (r.has("layer_types")) {  // "full_attention" where (l + 1) % every == 0, "sliding_attention" elsewhere
    const json& types = r.j["layer_types"];
    bool ok = types.is_array() && int(types.size()) == c.n_layers;
    std::vector<bool> full;
    for (size_t l = 0; ok && l < types.size(); l++) {
      ok = types[l].is_string() && (types[l] == "full_attention" || types[l] == "sliding_attention");
      full.push_back(ok && types[l] == "full_attention");
    }
    const std::optional<int> n = ok ? every_nth(full) : std::nullopt;
    ok = n.has_value();
    if (ok) every = *n > 0 ? *n : c.n_layers + 1;  // 0: no global layer at all
    r.require("layer_types", ok,
              "normlab's layer kinds are a global (full_attention) layer every N layers and sliding_attention "
              "layers between them, one entry per layer");
  }
  if (gemma3) r.require("sliding_window_pattern", every >= 1, "a global layer every N >= 1 layers");
  c.rope_global_every = std::max(every, 1);
  return scaling;
}

// A sliding window (Gemma 2 and 3 on some layers, Mistral on all; null: none; absent: transformers'
// default 4096): normlab's attention is full, so seq_len is capped at the window, where it masks nothing.
void cap_at_window(const ConfigReader& r, ModelConfig& c, Imported& im, const char* layers) {
  const bool windowed = !r.null("sliding_window");
  const int window = windowed ? r.integer("sliding_window", 4096) : 0;
  r.require("sliding_window", !windowed || window >= 1, "the sliding window is a positive number of positions");
  if (windowed && window < c.seq_len) {
    c.seq_len = window;
    im.notes.push_back(fmt::format("sliding_window {}: {} attend to the last {} positions only; normlab's attention "
                                   "is full, so it takes sequences of up to {} tokens, where the window changes nothing",
                                   window, layers, window, window));
  }
}

// SmolLM3's NoPE layers (no_rope_layers: 1 where a layer rotates, 0 where it does not; absent: every
// no_rope_layer_interval-th layer, 4 by default) onto model.nope_every, which must describe them.
void read_nope_layers(const ConfigReader& r, ModelConfig& c) {
  int every = r.integer("no_rope_layer_interval", 4);
  if (r.has("no_rope_layers")) {
    const json& v = r.j["no_rope_layers"];
    bool ok = v.is_array() && int(v.size()) == c.n_layers;
    std::vector<bool> nope;
    for (size_t l = 0; ok && l < v.size(); l++) {
      ok = v[l].is_number_integer() && (v[l] == 0 || v[l] == 1);
      nope.push_back(ok && v[l] == 0);
    }
    const std::optional<int> n = ok ? every_nth(nope) : std::nullopt;
    ok = n.has_value();
    every = n.value_or(0);  // 0: no NoPE layer
    r.require("no_rope_layers", ok,
              "one entry (0 or 1) per layer, 0 exactly on every N-th layer (normlab's model.nope_every = N)");
  } else {
    r.require("no_rope_layer_interval", every >= 1, "a NoPE layer every N >= 1 layers");
  }
  c.nope_every = every;
}

// Gemma 3's and OLMo 3's layer_types: "sliding_attention" on the local layers (model.rope_local), else
// "full_attention".
std::vector<std::string> layer_types(const ModelConfig& c) {
  std::vector<std::string> types;
  for (int l = 0; l < c.n_layers; l++) types.push_back(c.rope_local(l) ? "sliding_attention" : "full_attention");
  return types;
}

}  // namespace

Imported import_llama(const ConfigReader& r, const WeightFiles* weights, const fs::path& dir) {
  Imported im;
  const LlamaFamily& fam = *family_of_model_type(r.string("model_type", ""));  // (hf.cpp checked it is one)
  const bool gemma = fam.gemma;
  im.architecture = architecture_of(r, {fam.architecture});
  ModelConfig& c = im.config;
  c.arch = Arch::Gpt;
  c.d_model = r.integer("hidden_size");
  c.n_layers = r.integer("num_hidden_layers");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer("num_key_value_heads", c.n_heads);
  c.d_ff = r.integer("intermediate_size");
  c.vocab = r.integer("vocab_size");
  c.seq_len = std::min(r.integer("max_position_embeddings", 2048), kMaxImportedSeqLen);
  c.eps = r.number("rms_norm_eps", 1e-6);
  c.rope_base = r.number("rope_theta", fam.rope_theta);
  RopeScaling rope_scaling;
  if (fam.window == FamilyWindow::LayerTypes) rope_scaling = read_layer_types_rope(r, c, fam);
  else if (r.has("rope_parameters")) {  // transformers 5
    rope_scaling = read_rope_entry(r, "rope_parameters", c.rope_base);
    rope_scaling.key = "rope_parameters";
  }
  else if (r.has("rope_scaling")) rope_scaling = read_rope_entry(r, "rope_scaling", c.rope_base);
  c.norm = NormKind::RMSNorm;
  c.placement = {fam.placement};
  c.positions = Positions::Rope;
  c.activation = fam.activation;
  c.qk_norm = fam.qk_norm;  // (q and k normalized per head, or over their whole projections, before RoPE)
  c.init_std = r.number("initializer_range", 0.02);
  if (gemma) {  // transformers' Gemma reads hidden_activation (unset: gelu_pytorch_tanh), not hidden_act
    r.require("hidden_activation", r.string("hidden_activation", "gelu_pytorch_tanh") == "gelu_pytorch_tanh",
              "normlab's GeGLU gates with GELU's tanh form (gelu_pytorch_tanh)");
    c.embed_scale = std::sqrt(double(c.d_model));
  } else {
    r.require("hidden_act", r.string("hidden_act", "silu") == "silu", "the gated MLP is SwiGLU (silu)");
  }
  if (fam.query_pre_attn_scalar > 0) {  // Gemma 2 and 3 (Gemma2Config's defaults where a key is absent)
    const double scalar = r.number("query_pre_attn_scalar", fam.query_pre_attn_scalar);
    r.require("query_pre_attn_scalar", scalar > 0, "the scores are scaled by query_pre_attn_scalar^(-1/2)");
    c.attn_scale = 1.0 / std::sqrt(scalar);
    // a null cap is no cap (Gemma 3 has none unless its config sets one)
    c.attn_softcap = r.null("attn_logit_softcapping") ? 0.0 : r.number("attn_logit_softcapping", fam.attn_softcap);
    c.logit_softcap = r.null("final_logit_softcapping") ? 0.0 : r.number("final_logit_softcapping", fam.logit_softcap);
  }
  if (gemma && fam.window == FamilyWindow::LayerTypes)
    r.require("use_bidirectional_attention", !r.boolean("use_bidirectional_attention", false),
              "normlab's Gemma 3 is the causal language model");
  if ((r.has("head_dim") || fam.head_dim > 0) && c.n_heads > 0) {  // Gemma's config defaults head_dim to 256, Qwen3's to 128
    const long hd = r.integer("head_dim", fam.head_dim);
    r.require("head_dim", hd >= 1 && hd <= 65536, "a head size in [1, 65536]");
    if (hd >= 1 && hd * c.n_heads != c.d_model) c.head_dim = int(hd);  // (Gemma 2, Qwen3: heads wider or narrower)
  }
  read_partial_rotary(r, c);
  apply_rope_scaling(r, c, rope_scaling, im);
  switch (fam.bias) {
    case FamilyBias::Qkv: c.bias = LinearBias::Qkv; break;  // Qwen2: q, k, v biases, none elsewhere
    case FamilyBias::None:
      r.require("attention_bias", !r.boolean("attention_bias", false),
                fmt::format("{}'s attention_bias puts biases on q, k, v and o but not on the MLP, which normlab's "
                            "model.bias does not represent",
                            fam.architecture));
      c.bias = LinearBias::None;
      break;
    case FamilyBias::FromConfig: {
      const bool attn_bias = r.boolean("attention_bias", false), mlp_bias = r.boolean("mlp_bias", false);
      r.require("mlp_bias", attn_bias == mlp_bias,
                "normlab has biases on every projection (attention_bias and mlp_bias both true) or on none");
      c.bias = attn_bias ? LinearBias::All : LinearBias::None;
      break;
    }
  }
  switch (fam.window) {  // normlab's attention is full: seq_len capped at a window where there is one
    case FamilyWindow::None:
      r.require("use_sliding_window", !r.boolean("use_sliding_window", false), "normlab's attention is full causal");
      break;
    case FamilyWindow::EveryLayer: cap_at_window(r, c, im, "all layers"); break;
    case FamilyWindow::EveryOther: cap_at_window(r, c, im, "every other layer"); break;
    case FamilyWindow::LayerTypes: cap_at_window(r, c, im, "the sliding layers"); break;
  }
  if (fam.nope_layers) read_nope_layers(r, c);  // SmolLM3: no RoPE on every N-th layer
  // (Gemma's and SmolLM3's configs tie by default; OLMo 2's and Llama's not)
  const bool tied = r.boolean("tie_word_embeddings", fam.tied);
  c.head = tied ? Head::Tied : Head::Untied;
  c.seq_len = std::min(c.seq_len, c.longest_sequence_within_limit());  // (a note below says so)
  c.validate();
  if (r.number("attention_dropout", 0) > 0)
    im.notes.push_back("attention_dropout of config.json is not imported (normlab has no attention dropout)");
  if (r.integer("max_position_embeddings", 2048) > c.seq_len)
    im.notes.push_back(fmt::format("max_position_embeddings {} read; normlab takes sequences of up to {} tokens "
                                   "(model.seq_len)",
                                   r.integer("max_position_embeddings", 2048), c.seq_len));
  if (!weights) return im;
  std::vector<TensorMap> table = llama_table(c, fam.fused);
  std::set<std::string> ignored;
  // lm_head.weight sits outside the "model." prefix
  if (tied) ignored.insert("lm_head.weight");
  else table.push_back({"lm_head.weight", "lm_head.weight"});
  map_tensors(im, *weights, table, "model.", ignored, dir);
  if (tied) check_tied(*weights, "lm_head.weight", im.params["wte.weight"], dir);
  if (gemma)  // Gemma's RMSNorm gain is 1 + w, in float32 (Gemma 3's QK-norm too)
    for (auto& [name, values] : im.params)
      if (name.ends_with("ln_in.weight") || name.ends_with("ln_branch.weight") || name == "ln_f.weight" ||
          name.ends_with("q_norm.weight") || name.ends_with("k_norm.weight"))
        for (float& w : values) w = 1.0f + w;
  return im;
}

std::optional<std::string> llama_export_refusal(const ModelConfig& c) {
  std::vector<std::string> why;
  if (c.arch != Arch::Gpt) why.push_back("arch is not gpt");
  if (c.attn_gate != AttnGate::None)
    why.push_back(fmt::format("attn_gate = \"{}\" (none of these families gates its attention output)", to_string(c.attn_gate)));
  if (c.attn_sink) why.push_back("attn_sink = true (none of these families has sink logits)");
  if (c.completep_base_depth > 0) why.push_back("completep_base_depth is set (CompleteP multiplies every branch by L_base / L; no Hugging Face config says so)");
  if (c.value_residual > 0) why.push_back("value_residual is set (no Hugging Face family mixes the first layer's values into later ones)");
  if (c.hyper_connected()) why.push_back(fmt::format("hyper = \"{}\" (no Hugging Face family has hyper-connections)", to_string(c.hyper)));
  // Llama and Qwen2: pre-norm in every layer, no QK-norm; Qwen3: pre-norm with QK-norm per head; OLMo 2:
  // reordered in every layer with QK-norm over the whole projections
  const LlamaFamily& family = export_family(c);
  const bool olmo2 = family.placement == Placement::Reordered, qwen3 = !family.gemma && family.qk_norm == QkNorm::Heads,
             gemma3 = family.gemma && family.qk_norm == QkNorm::Heads, gemma = family.gemma,
             gemma2 = gemma && family.placement == Placement::Sandwich, layer_types = family.window == FamilyWindow::LayerTypes;
  const Placement each = family.placement;
  for (int l = 0; l < c.n_layers; l++)
    if (c.placement_of(l) != each) {
      why.push_back(fmt::format("layer {} is {} (Llama, Qwen2 and Gemma are pre-norm in every layer, Gemma 2 "
                                "sandwich, OLMo 2 reordered)",
                                l, to_string(c.placement_of(l))));
      break;
    }
  if (gemma && !gemma3 && (c.bias != LinearBias::None || c.qk_norm != QkNorm::None || c.rope_scale != 1.0))
    why.push_back("a GeGLU model is Gemma's or Gemma 2's only without biases, QK-norm or RoPE scaling");
  if (gemma3 && (c.bias != LinearBias::None || c.v_norm || !c.qk_norm_affine))
    why.push_back("a sandwich GeGLU model with qk_norm = \"heads\" is Gemma 3's only with gains on q and k (no "
                  "v_norm) and no biases");
  if (gemma && c.embed_scale != std::sqrt(double(c.d_model)))
    why.push_back(fmt::format("embed_scale is {} (Gemma multiplies the embedding by sqrt(d_model) = {:g})",
                              c.embed_scale, std::sqrt(double(c.d_model))));
  if (olmo2 && (c.qk_norm != QkNorm::Whole || c.v_norm || !c.qk_norm_affine || c.bias != LinearBias::None))
    why.push_back("a reordered model is OLMo 2's or 3's only with qk_norm = \"whole\" (no v_norm, with gains) and no "
                  "biases");
  if (qwen3 && (c.v_norm || !c.qk_norm_affine || c.bias != LinearBias::None))
    why.push_back("a pre-norm model with qk_norm = \"heads\" is Qwen3's only with gains on q and k (no v_norm) and no "
                  "biases");
  if (c.norm != NormKind::RMSNorm) why.push_back(fmt::format("norm is {} (Llama uses RMSNorm)", to_string(c.norm)));
  if (c.positions != Positions::Rope || c.rope_fraction != 1.0) why.push_back("positions are not RoPE over the whole head");
  if (c.rope_mscale != 1.0)
    why.push_back("RoPE's cos and sin are scaled (model.rope_mscale: LongRoPE's or YaRN's attention factor), which a "
                  "config.json states only through their parameters");
  if (c.rope_local_base > 0 && !layer_types)
    why.push_back("RoPE has a base per layer (model.rope_local_base), which only Gemma 3's and OLMo 3's blocks have");
  if (c.nope_every != 0 && !family.nope_layers)
    why.push_back("some layers have no RoPE (model.nope_every), which only SmolLM3's block (Llama's with NoPE layers) "
                  "has");
  if (family.nope_layers && c.bias == LinearBias::Qkv)
    why.push_back("bias is qkv (SmolLM3 has biases on every projection or on none)");
  if (!c.rope_freq_factors.empty())
    why.push_back("RoPE has a divisor per frequency (model.rope_freq_factors: Llama 3.1's llama3 scaling or a GGUF "
                  "file's rope_freqs), which a config.json states only as llama3's four parameters; normlab keeps the "
                  "divisors, not those");
  if (c.activation != Activation::SwiGlu && !gemma)
    why.push_back(fmt::format("activation is {} (Llama's MLP is SwiGLU, Gemma's GeGLU)", to_string(c.activation)));
  if (!olmo2 && !qwen3 && !gemma3 && c.qk_norm != QkNorm::None)
    why.push_back(fmt::format("qk_norm is {} (Llama and Qwen2 have no QK-norm, Qwen3's is per head, OLMo 2's over the "
                              "whole projections with reordered norms)",
                              to_string(c.qk_norm)));
  if (c.embed_scale != 1.0 && !gemma)
    why.push_back(fmt::format("embed_scale is {} (only Gemma scales the embedding)", c.embed_scale));
  if (c.embed_scale_learned) why.push_back("embed_scale_learned (a learned embedding scale has no Hugging Face tensor)");
  if ((!c.plain_scores() || c.logit_softcap > 0) && !gemma2)
    why.push_back("attn_scale, attn_softcap or logit_softcap is set (only Gemma 2's block, the sandwich with GeGLU, has "
                  "them)");
  if (c.mup_base_width > 0) why.push_back("mup_base_width is set (muP divides the logits by the width multiplier; no Hugging Face config says so)");
  if (!c.residual || !c.mlp) why.push_back("residual = false or mlp = false");
  if (c.has_embed_norm() || c.type_vocab > 0) why.push_back("an embedding norm or token types");
  if (c.head != Head::Tied && c.head != Head::Untied) why.push_back(fmt::format("head = {}", to_string(c.head)));
  if (c.dropout > 0) why.push_back("dropout > 0");
  if (why.empty()) return std::nullopt;
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : "; ") + w;
  return "this model is not exactly a Llama-family model: " + out;
}

std::string write_llama(const StagedFiles& out, const Model<float>& model) {
  const ModelConfig& c = model.config();
  const LlamaFamily& family = export_family(c);  // (llama_export_refusal checked that it is exactly that)
  const bool olmo2 = family.placement == Placement::Reordered, gemma = family.gemma,
             gemma2 = gemma && family.placement == Placement::Sandwich, gemma3 = gemma2 && family.qk_norm == QkNorm::Heads,
             olmo3 = olmo2 && family.window == FamilyWindow::LayerTypes, qwen3 = !gemma && family.qk_norm == QkNorm::Heads,
             qwen2 = family.bias == FamilyBias::Qkv, smollm3 = family.nope_layers;
  const std::string arch = family.architecture, type = family.model_type;
  std::vector<TensorMap> table = llama_table(c);
  if (c.head == Head::Untied) table.push_back({"lm_head.weight", "lm_head.weight"});
  std::vector<st::TensorView> views;
  std::deque<std::vector<float>> shifted;  // Gemma's gains, stored as w for a gain of 1 + w
  for (const TensorMap& m : table) {
    const ParamSpec* p = model.table().find(m.normlab);
    std::vector<int64_t> shape = p->shape;
    size_t offset = 0;
    if (m.layout == Layout::Rows) {
      shape[0] = m.rows;
      offset = size_t(m.row0) * (p->shape.size() > 1 ? size_t(p->shape[1]) : 1);
    }
    const std::string name = m.hf == "lm_head.weight" ? m.hf : "model." + m.hf;
    const float* data = model.params().data() + p->offset + offset;
    if (gemma && p->role == ParamRole::NormGain) {  // exact for gains in [0.5, 2] (Sterbenz): read back bit for bit
      shifted.emplace_back(data, data + p->numel);
      for (float& w : shifted.back()) w -= 1.0f;
      data = shifted.back().data();
    }
    views.push_back({name, st::DType::F32, shape, data});
  }
  json config = {{"architectures", {arch}}, {"model_type", type},
                 {"vocab_size", c.vocab_size()}, {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers},
                 {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.kv_heads()}, {"head_dim", c.head_size()},
                 {"intermediate_size", c.ff()}, {"hidden_act", "silu"}, {"max_position_embeddings", c.seq_len},
                 {"rms_norm_eps", c.eps}, {"rope_theta", c.rope_base},
                 {"rope_scaling", c.rope_scale == 1.0 ? json(nullptr)
                                                      : json{{"rope_type", "linear"}, {"factor", c.rope_scale}}},
                 {"tie_word_embeddings", c.head == Head::Tied}, {"initializer_range", c.init_std},
                 {"attention_dropout", 0.0}, {"torch_dtype", "float32"}};
  if (gemma) {  // transformers' Gemma reads hidden_activation; head_dim is always stated
    config.erase("hidden_act");
    config["hidden_activation"] = "gelu_pytorch_tanh";
    config["attention_bias"] = false;
  }
  if (gemma2) {  // normlab's attention is full: a window of seq_len masks nothing in what it takes
    // the scores times query_pre_attn_scalar^(-1/2): the head size unless attn_scale says otherwise
    // (an integer, as the configs state it and transformers 5 requires, when 1 / scale^2 is one to rounding:
    // 8, not 8.000000000000002)
    if (c.attn_scale) {
      const double scalar = 1.0 / (*c.attn_scale * *c.attn_scale);
      config["query_pre_attn_scalar"] = std::abs(scalar - std::round(scalar)) <= 1e-9 * scalar
                                            ? json(static_cast<long long>(std::llround(scalar)))
                                            : json(scalar);
    } else {
      config["query_pre_attn_scalar"] = c.head_size();
    }
    config["attn_logit_softcapping"] = c.attn_softcap > 0 ? json(c.attn_softcap) : json(nullptr);
    config["final_logit_softcapping"] = c.logit_softcap > 0 ? json(c.logit_softcap) : json(nullptr);
    config["sliding_window"] = c.seq_len;
  }
  if (gemma3) {  // transformers 4's keys, which 5 reads too: a global layer every rope_global_every-th, the
    // others local at rope_local_base_freq (none: every layer global), linear scaling on the global ones
    const bool local = c.rope_local_base > 0;
    config["layer_types"] = layer_types(c);
    config["sliding_window_pattern"] = local ? c.rope_global_every : 1;
    config["rope_local_base_freq"] = local ? c.rope_local_base : c.rope_base;
    config["use_bidirectional_attention"] = false;
  }
  if (olmo3) {  // transformers 5's rope_parameters, one entry per kind of layer (transformers 4's one rope_theta
    // cannot state two bases); normlab's attention is full: a window of seq_len masks nothing it takes
    config["layer_types"] = layer_types(c);
    config["sliding_window"] = c.seq_len;
    config["rope_parameters"] = {
        {"full_attention", c.rope_scale == 1.0 ? json{{"rope_type", "default"}, {"rope_theta", c.rope_base}}
                                               : json{{"rope_type", "linear"}, {"factor", c.rope_scale},
                                                      {"rope_theta", c.rope_base}}},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_local_base}}}};
    config.erase("rope_theta");
    config.erase("rope_scaling");
  }
  if (olmo2) {  // Olmo2Config's and Olmo3Config's default ids (pad 1, eos 50279) are OLMo's own tokenizer's;
    // normlab keeps no special ids (the forward is the same without them)
    config["pad_token_id"] = nullptr;
    config["bos_token_id"] = nullptr;
    config["eos_token_id"] = nullptr;
  }
  if (olmo2 || gemma) {
    config["attention_bias"] = false;
  } else if (qwen3) {  // transformers' Qwen3 normalizes q and k per head with rms_norm_eps, as normlab does
    config["attention_bias"] = false;
    config["use_sliding_window"] = false;
    config["sliding_window"] = nullptr;
    config["max_window_layers"] = c.n_layers;
  } else if (!qwen2) {
    config["attention_bias"] = c.bias == LinearBias::All;
    config["mlp_bias"] = c.bias == LinearBias::All;
  } else {
    config["use_sliding_window"] = false;
  }
  if (smollm3) {  // no_rope_layers: 1 where a layer rotates, 0 on every nope_every-th (read_nope_layers)
    std::vector<int> rope_layers;
    for (int l = 0; l < c.n_layers; l++) rope_layers.push_back(c.rope_at(l) ? 1 : 0);
    config["no_rope_layers"] = rope_layers;
    config["no_rope_layer_interval"] = c.nope_every;
    config["use_sliding_window"] = false;
    config["sliding_window"] = nullptr;
    // SmolLM3Config's default pad id (128004) is an embedding row of the real vocabulary, outside any other;
    // normlab keeps no special ids (the forward is the same without them; its bos and eos defaults too)
    config["pad_token_id"] = nullptr;
    config["bos_token_id"] = nullptr;
    config["eos_token_id"] = nullptr;
  }
  config["normlab_config"] = model_config_to_json(c);
  st::write(out.path("model.safetensors"), views, {{"format", "pt"}}, false);
  write_file_atomic(out.path("config.json"), dump_json(config, 2) + "\n", false);
  return arch;
}

}  // namespace normlab::hf
