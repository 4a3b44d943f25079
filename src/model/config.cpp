// config.cpp: model config validation, derived quantities, and strict JSON conversion.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/activation_of.h"
#include "model/hyper.h"
#include "model/methods.h"
#include "model/params.h"
#include "util/error.h"
#include "util/json_reader.h"

namespace normlab {

namespace {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

constexpr EnumName<Arch> kArchNames[] = {{Arch::Gpt, "gpt"}, {Arch::Encoder, "encoder"}, {Arch::EncDec, "encdec"}};
constexpr EnumName<NormKind> kNormNames[] = {
    {NormKind::LayerNorm, "layernorm"}, {NormKind::RMSNorm, "rmsnorm"}, {NormKind::DyT, "dyt"}, {NormKind::Derf, "derf"},
    {NormKind::L2, "l2"}, {NormKind::SSNorm, "ssnorm"}};
constexpr EnumName<Activation> kActivationNames[] = {
    {Activation::Gelu, "gelu"},       {Activation::GeluExact, "gelu_exact"}, {Activation::Relu, "relu"},
    {Activation::SwiGlu, "swiglu"}, {Activation::GeGlu, "geglu"}};
constexpr EnumName<Positions> kPositionNames[] = {
    {Positions::Learned, "learned"}, {Positions::Rope, "rope"}, {Positions::None, "none"}};
constexpr EnumName<QkNorm> kQkNormNames[] = {{QkNorm::None, "none"}, {QkNorm::Heads, "heads"}, {QkNorm::Whole, "whole"}};
constexpr EnumName<AttnGate> kAttnGateNames[] = {
    {AttnGate::None, "none"}, {AttnGate::Headwise, "headwise"}, {AttnGate::Elementwise, "elementwise"}};
constexpr EnumName<HyperMix> kHyperNames[] = {
    {HyperMix::None, "none"}, {HyperMix::Hc, "hc"}, {HyperMix::HcStatic, "hc_static"}, {HyperMix::Mhc, "mhc"},
    {HyperMix::MhcLite, "mhc_lite"}, {HyperMix::AttnRes, "attn_res"}};
constexpr EnumName<LinearBias> kBiasNames[] = {
    {LinearBias::All, "all"}, {LinearBias::Qkv, "qkv"}, {LinearBias::None, "none"}};
constexpr EnumName<Head> kHeadNames[] = {{Head::Tied, "tied"}, {Head::Mlm, "mlm"}, {Head::None, "none"}, {Head::Untied, "untied"}};
// The method names come from the methods table (model/methods.cpp), in its order.
constexpr EnumName<AdminInit> kAdminInitNames[] = {{AdminInit::Log, "log"},
                                                   {AdminInit::Sqrt, "sqrt"},
                                                   {AdminInit::One, "one"},
                                                   {AdminInit::Profile, "profile"}};
constexpr EnumName<InitScheme> kInitNames[] = {{InitScheme::Auto, "auto"},
                                               {InitScheme::Normal, "normal"},
                                               {InitScheme::Gpt2, "gpt2"},
                                               {InitScheme::Xavier, "xavier"},
                                               {InitScheme::DeepNet, "deepnet"},
                                               {InitScheme::TFixup, "tfixup"}};

template <class E, size_t K>
const char* name_of(const EnumName<E> (&table)[K], E v) {
  for (const auto& e : table)
    if (e.value == v) return e.name;
  return "?";
}

template <class E, size_t K>
std::optional<E> parse_enum(const EnumName<E> (&table)[K], const std::string& s) {
  for (const auto& e : table)
    if (s == e.name) return e.value;
  return std::nullopt;
}

template <class E, size_t K>
std::string choices(const EnumName<E> (&table)[K]) {
  std::string out;
  for (const auto& e : table) out += (out.empty() ? "" : " | ") + std::string(e.name);
  return out;
}

template <class E, size_t K>
void read_enum(JsonReader& r, const char* key, const EnumName<E> (&table)[K], E& out) {
  std::string s;
  if (!r.has(key)) return;
  r.get(key, s);
  if (!r.raw(key).is_string()) return;
  auto v = parse_enum(table, s);
  if (!v) {
    r.fail(fmt::format("{}: '{}' = \"{}\" is not one of {}", r.where(), key, s, choices(table)));
    return;
  }
  out = *v;
}

}  // namespace

const char* to_string(Arch v) { return name_of(kArchNames, v); }
const char* to_string(NormKind v) { return name_of(kNormNames, v); }
const char* to_string(Activation v) { return name_of(kActivationNames, v); }
const char* to_string(Placement v) { return method_of(v).name; }
const char* to_string(AdminInit v) { return name_of(kAdminInitNames, v); }
const char* to_string(Sublayer s) { return s == Sublayer::Attn ? "attn" : s == Sublayer::Cross ? "cross" : "mlp"; }
const char* to_string(InitScheme v) { return name_of(kInitNames, v); }
const char* to_string(Head v) { return name_of(kHeadNames, v); }
const char* to_string(LinearBias v) { return name_of(kBiasNames, v); }
const char* to_string(Positions v) { return name_of(kPositionNames, v); }
const char* to_string(QkNorm v) { return name_of(kQkNormNames, v); }
const char* to_string(AttnGate v) { return name_of(kAttnGateNames, v); }
const char* to_string(HyperMix v) { return name_of(kHyperNames, v); }

QkNorm ModelConfig::qk_norm_of(int layer) const {
  if (qk_norm != QkNorm::None) return qk_norm;
  return method_of(placement_of(layer)).qkv_norm ? QkNorm::Heads : QkNorm::None;
}
bool ModelConfig::v_norm_of(int layer) const {
  return qk_norm_of(layer) != QkNorm::None && (v_norm || method_of(placement_of(layer)).qkv_norm);
}

int ModelConfig::rope_dims() const {
  if (positions != Positions::Rope || n_heads <= 0) return 0;
  return 2 * int(std::floor(rope_fraction * head_size() / 2));
}

void ModelConfig::set_rope_dims(int R) {
  rope_fraction = double(R) / head_size();
  if (rope_dims() != R) rope_fraction = (R + 0.5) / head_size();  // (R / HS rounded below R by floor)
}
std::optional<Placement> placement_from_string(const std::string& s) {
  if (const Method* m = find_method(s)) return m->id;
  return std::nullopt;
}

static std::string placement_choices() {
  std::string out;
  for (const Method& m : all_methods()) out += (out.empty() ? "" : " | ") + std::string(m.name);
  for (const Arrangement& a : all_arrangements()) out += " | " + std::string(a.name);
  return out + " (the last " + std::to_string(all_arrangements().size()) + " alone: a whole stack)";
}

int ModelConfig::vocab_size() const {
  return vocab.value_or(arch == Arch::Encoder ? kByteVocab + 1 : arch == Arch::EncDec ? kByteVocab + 2 : kByteVocab);
}

Slot ModelConfig::slot(int i) const {
  Slot s;
  const int enc_slots = arch == Arch::Gpt ? 0 : 2 * n_layers;
  if (i < enc_slots || !encdec()) {
    s.layer = i / 2;
    s.kind = i % 2 == 0 ? Sublayer::Attn : Sublayer::Mlp;
    s.encoder = arch != Arch::Gpt;
  } else {
    const int j = i - enc_slots;
    s.layer = n_layers + j / 3;
    s.kind = j % 3 == 0 ? Sublayer::Attn : j % 3 == 1 ? Sublayer::Cross : Sublayer::Mlp;
  }
  s.present = s.kind != Sublayer::Mlp || mlp;
  return s;
}

// (every self-attention slot is present; a stack's first slot is its first self-attention)
int ModelConfig::value_source(int i) const {
  if (value_residual <= 0 || slot(i).kind != Sublayer::Attn) return -1;
  const int first = encdec() && i >= first_decoder_slot() ? first_decoder_slot() : 0;
  return i == first ? -1 : first;
}

bool ModelConfig::is_value_source(int i) const {
  return value_residual > 0 && (i == 0 || (encdec() && i == first_decoder_slot())) && stack_depth(slot(i).layer) > 1;
}

int ModelConfig::stack_depth(int layer) const {
  if (!encdec()) return n_layers;
  return layer < n_layers ? n_layers : decoder_layers();
}

int ModelConfig::stack_sublayers(int layer) const {
  if (encdec() && layer >= n_layers) return 3 * decoder_layers();
  return 2 * stack_depth(layer);
}

Placement ModelConfig::placement_of(int layer) const {
  return placement.size() == 1 ? placement[0] : placement.at(layer);
}

Shortcut ModelConfig::shortcut_of(int layer) const {
  return residual ? method_of(placement_of(layer)).shortcut : Shortcut::Zero;
}

double ModelConfig::residual_alpha(int layer) const {
  const Shortcut s = shortcut_of(layer);
  if (s == Shortcut::Zero) return 0.0;
  if (s != Shortcut::DeepNormAlpha) return 1.0;  // One; AdminOmega reads its parameter, not alpha
  if (!encdec()) return std::pow(2.0 * n_layers, 0.25);
  const double N = n_layers, M = decoder_layers();
  return encoder_layer(layer) ? 0.81 * std::pow(N * N * N * N * M, 1.0 / 16) : std::pow(3.0 * M, 0.25);
}

double ModelConfig::deepnet_beta(int layer) const {
  if (!encdec()) return std::pow(8.0 * n_layers, -0.25);
  const double N = n_layers, M = decoder_layers();
  return encoder_layer(layer) ? 0.87 * std::pow(N * N * N * N * M, -1.0 / 16) : std::pow(12.0 * M, -0.25);
}

bool ModelConfig::dual_stack(int layer) const {
  // the stack's last layer decides, as for the final norm; violations() makes every layer agree
  const int last = encdec() && layer < n_layers ? n_layers - 1 : total_layers() - 1;
  return method_of(placement_of(last)).streams == Streams::Dual;
}

bool ModelConfig::on_sphere() const {
  return std::any_of(placement.begin(), placement.end(), [](Placement p) { return method_of(p).sphere; });
}

bool ModelConfig::has_final_norm() const {
  if (arch == Arch::Encoder) return method_of(placement_of(n_layers - 1)).final_norm;
  return method_of(placement_of(total_layers() - 1)).final_norm;
}

int ModelConfig::fc_width() const { return activation_width(activation) * ff(); }

bool ModelConfig::has_embed_norm() const { return embed_norm || (!encdec() && method_of(placement_of(0)).embed_norm); }

bool ModelConfig::has_enc_final_norm() const {
  return encdec() && method_of(placement_of(n_layers - 1)).final_norm;
}

InitScheme ModelConfig::resolved_init() const {
  if (init != InitScheme::Auto) return init;
  for (int l = 0; l < total_layers(); l++) {
    const InitScheme want = method_of(placement_of(l)).init;
    if (want != InitScheme::Auto) return want;
  }
  return completep_base_depth > 0 ? InitScheme::Normal : InitScheme::Gpt2;  // (CompleteP's init has no depth term)
}

// (One check after another, each a line or two: long because the keys are many.)
std::vector<std::string> ModelConfig::violations() const {
  std::vector<std::string> v;
  auto positive = [&](const char* key, long value, long max) {
    if (value < 1 || value > max)
      v.push_back(fmt::format("model.{} = {} must be in [1, {}]", key, value, max));
  };
  positive("d_model", d_model, 65536);
  positive("n_heads", n_heads, 4096);
  positive("n_layers", n_layers, kMaxLayers);
  positive("seq_len", seq_len, 1 << 20);
  if (d_ff) positive("d_ff", *d_ff, 1 << 20);
  if (vocab) positive("vocab", *vocab, kMaxVocab);
  if (n_kv_heads && (*n_kv_heads < 1 || n_heads < 1 || n_heads % *n_kv_heads != 0))
    v.push_back(fmt::format("model.n_kv_heads = {} must be >= 1 and divide model.n_heads = {}", *n_kv_heads, n_heads));
  else if (n_kv_heads && *n_kv_heads != n_heads && encdec())
    v.push_back("model.n_kv_heads (grouped-query attention) is for arch = \"gpt\" and \"encoder\"; an encdec's "
                "attention has n_heads key-value heads");
  if (head_dim) {
    positive("head_dim", *head_dim, 65536);
    if (*head_dim >= 1 && long(*head_dim) * n_heads != d_model) {  // (equal: the default, nothing to refuse)
      if (encdec()) v.push_back("model.head_dim (heads of another width than d_model / n_heads) is for arch = \"gpt\" "
                                "and \"encoder\"; an encdec's attention has d_model / n_heads");
      if (long(*head_dim) * n_heads > 65536) v.push_back("model.head_dim x model.n_heads must be at most 65536");
    }
  } else if (n_heads >= 1 && d_model >= 1 && d_model % n_heads != 0) {
    v.push_back(fmt::format("model.d_model = {} is not divisible by model.n_heads = {} (or set model.head_dim)", d_model,
                            n_heads));
  }
  if (type_vocab < 0 || type_vocab > (1 << 20))
    v.push_back(fmt::format("model.type_vocab = {} must be in [0, {}]", type_vocab, 1 << 20));
  if (!(eps >= 0.0) || !std::isfinite(eps))
    v.push_back(fmt::format("model.eps = {} must be finite and >= 0", eps));
  if (!(norm_alpha > 0.0) || !std::isfinite(norm_alpha))
    v.push_back(fmt::format("model.norm_alpha = {} must be finite and > 0 (the initial alpha of dyt and derf)",
                            norm_alpha));
  if (norm_alpha_attn && (!(*norm_alpha_attn > 0.0) || !std::isfinite(*norm_alpha_attn)))
    v.push_back(fmt::format("model.norm_alpha_attn = {} must be finite and > 0", *norm_alpha_attn));
  if (embed_scale_learned && (positions == Positions::Learned || type_vocab > 0 || encdec()))
    v.push_back("model.embed_scale_learned scales the token embedding of a gpt or encoder without learned positions "
                "or token types: set positions = \"rope\" or \"none\" and type_vocab = 0");
  if (attn_scale && (!(*attn_scale > 0.0) || !std::isfinite(*attn_scale)))
    v.push_back(fmt::format("model.attn_scale = {} must be finite and > 0 (the factor on q.k)", *attn_scale));
  for (auto [key, c] : {std::pair{"attn_softcap", attn_softcap}, std::pair{"logit_softcap", logit_softcap}})
    if (!(c >= 0.0) || !std::isfinite(c) || (c > 0 && c < 1e-3))
      v.push_back(fmt::format("model.{} = {} must be 0 (none) or in [1e-3, inf): the cap c of c tanh(x / c)", key, c));
  if (encdec() && n_heads >= 1 && (!plain_scores() || logit_softcap > 0))
    v.push_back("model.attn_scale, attn_softcap and logit_softcap are for arch = \"gpt\" and \"encoder\"");
  if (!(init_std > 0.0) || !std::isfinite(init_std))
    v.push_back(fmt::format("model.init_std = {} must be > 0", init_std));
  if (!(value_residual >= 0.0 && value_residual < 1.0))
    v.push_back(fmt::format("model.value_residual = {} must be in [0, 1): the weight lambda of the first "
                            "self-attention's values (ResFormer: 0.5; 0: off)",
                            value_residual));
  hyper_violations(*this, v);
  if (mup_base_width < 0 || mup_base_width > 65536)
    v.push_back(fmt::format("model.mup_base_width = {} must be 0 (standard parametrization) or in [1, {}]",
                            mup_base_width, 65536));
  if (mup_base_width > 0) {
    if (arch != Arch::Gpt || head == Head::Mlm || head == Head::None)
      v.push_back("model.mup_base_width (muP) is for arch = \"gpt\" with a tied or untied output head");
    if (on_sphere()) v.push_back("model.mup_base_width (muP) does not combine with nGPT (its own parametrization)");
    const InitScheme s = resolved_init();
    if (s != InitScheme::Gpt2 && s != InitScheme::Normal && s != InitScheme::Xavier)
      v.push_back(fmt::format("model.mup_base_width (muP) scales the init schemes gpt2, normal and xavier; this "
                              "config's is {}",
                              to_string(s)));
  }
  if (completep_base_depth < 0 || completep_base_depth > kMaxLayers)
    v.push_back(fmt::format("model.completep_base_depth = {} must be 0 (off) or in [1, {}]", completep_base_depth,
                            kMaxLayers));
  if (completep_base_depth > 0) {
    if (arch == Arch::EncDec)
      v.push_back("model.completep_base_depth (CompleteP) is for one stack (arch = \"gpt\" or \"encoder\")");
    if (on_sphere()) v.push_back("model.completep_base_depth (CompleteP) does not combine with nGPT (its update has no branch multiplier)");
    const InitScheme s = resolved_init();
    if (s != InitScheme::Normal && s != InitScheme::Xavier)
      v.push_back(fmt::format("model.completep_base_depth (CompleteP) needs an init without a depth term (normal or "
                              "xavier); this config's is {}",
                              to_string(s)));
  }
  if (!(dropout >= 0.0 && dropout < 1.0))
    v.push_back(fmt::format("model.dropout = {} must be in [0, 1)", dropout));
  if (dec_layers) {
    if (!encdec()) v.push_back("model.dec_layers is for arch = \"encdec\" only");
    else positive("dec_layers", *dec_layers, kMaxLayers);
  }
  if (src_vocab) {
    if (!encdec() || shared_embeddings)
      v.push_back("model.src_vocab needs arch = \"encdec\" and shared_embeddings = false");
    else positive("src_vocab", *src_vocab, kMaxVocab);
  }
  if (!shared_embeddings && !encdec()) v.push_back("model.shared_embeddings = false is for arch = \"encdec\" only");
  if (encdec()) {
    if (type_vocab != 0) v.push_back("model.type_vocab must be 0 for arch = \"encdec\"");
    if (embed_norm) v.push_back("model.embed_norm is not supported for arch = \"encdec\"");
    if (head != Head::Tied && head != Head::Untied)
      v.push_back("model.head must be \"tied\" or \"untied\" for arch = \"encdec\"");
  }
  if (!(rope_base > 1.0) || !std::isfinite(rope_base))
    v.push_back(fmt::format("model.rope_base = {} must be finite and > 1", rope_base));
  if (!(rope_scale >= 1.0) || !std::isfinite(rope_scale) || rope_scale > 1e6)
    v.push_back(fmt::format("model.rope_scale = {} must be in [1, 1e6] (positions are divided by it)", rope_scale));
  if (!rope_freq_factors.empty()) {
    if (positions != Positions::Rope)
      v.push_back("model.rope_freq_factors needs positions = \"rope\"");
    else if (n_heads > 0 && int(rope_freq_factors.size()) != rope_dims() / 2)
      v.push_back(fmt::format("model.rope_freq_factors has {} entries; RoPE rotates {} pairs per head (R / 2)",
                              rope_freq_factors.size(), rope_dims() / 2));
    for (size_t i = 0; i < rope_freq_factors.size(); i++)
      if (!(rope_freq_factors[i] >= 1e-6 && rope_freq_factors[i] <= 1e6)) {
        v.push_back(fmt::format("model.rope_freq_factors[{}] = {} must be in [1e-6, 1e6] (it divides an angle)", i,
                                rope_freq_factors[i]));
        break;
      }
  }
  if (!(rope_mscale >= 1e-3 && rope_mscale <= 1e3))
    v.push_back(fmt::format("model.rope_mscale = {} must be in [1e-3, 1e3] (a factor on RoPE's cos and sin)",
                            rope_mscale));
  else if (rope_mscale != 1.0 && positions != Positions::Rope)
    v.push_back("model.rope_mscale needs positions = \"rope\"");
  if (rope_local_base != 0.0 && (!(rope_local_base > 1.0) || !std::isfinite(rope_local_base)))
    v.push_back(fmt::format("model.rope_local_base = {} must be 0 (one base) or finite and > 1", rope_local_base));
  if (rope_global_every < 1 || rope_global_every > 100000)
    v.push_back(fmt::format("model.rope_global_every = {} must be in [1, 100000]", rope_global_every));
  if (nope_every < 0 || nope_every > 100000)
    v.push_back(fmt::format("model.nope_every = {} must be in [0, 100000] (0: every layer rotates)", nope_every));
  if (nope_every != 0 && positions != Positions::Rope) v.push_back("model.nope_every needs positions = \"rope\"");
  if (nope_every != 0 && encdec())
    v.push_back("model.nope_every (NoPE layers) is for one stack (gpt or encoder), not arch = \"encdec\"");
  if (rope_local_base != 0.0 && encdec())
    v.push_back("model.rope_local_base (a base per layer) is for one stack (gpt or encoder), not arch = \"encdec\"");
  if (!(rope_fraction > 0.0 && rope_fraction <= 1.0))
    v.push_back(fmt::format("model.rope_fraction = {} must be in (0, 1]", rope_fraction));
  else if (positions == Positions::Rope && n_heads > 0 && d_model % n_heads == 0 && rope_dims() < 2)
    v.push_back(fmt::format("model.rope_fraction = {} rotates no pair of a head's {} dimensions (R = 2 floor(f HS / 2) "
                            "must be >= 2)",
                            rope_fraction, head_size()));
  if (!(embed_scale > 0.0) || !std::isfinite(embed_scale) || embed_scale > 1e6)
    v.push_back(fmt::format("model.embed_scale = {} must be in (0, 1e6]", embed_scale));
  else if (embed_scale != 1.0 && (positions == Positions::Learned || type_vocab > 0 || encdec()))
    v.push_back("model.embed_scale scales the token embedding of a gpt or encoder without learned positions or "
                "token types (Gemma's sqrt(d)): set positions = \"rope\" or \"none\" and type_vocab = 0");
  if (v_norm && qk_norm == QkNorm::None)
    v.push_back("model.v_norm = true normalizes the values in model.qk_norm's layout; set qk_norm = \"heads\" or \"whole\"");
  if (encdec() && qk_norm != QkNorm::None)
    v.push_back("model.qk_norm is for arch = \"gpt\" and \"encoder\" (an encdec's cross-attention has none)");
  if (head == Head::Mlm && activation_width(activation) != 1)
    v.push_back(fmt::format("model.head = \"mlm\" applies model.activation to one row of C; \"{}\" is gated "
                            "(it needs 2 d_ff columns), use gelu, gelu_exact or relu with that head",
                            to_string(activation)));
  // Everything below walks the layers (and sums them in int): only for layer counts in range, so a
  // config with n_layers = 2^31 - 1 gets the range error above instead of a loop of 2^31 layers.
  const auto in_range = [](long n) { return n >= 1 && n <= kMaxLayers; };
  if (!in_range(n_layers) || (dec_layers && !in_range(*dec_layers))) return v;
  const int layers = (dec_layers && !encdec()) ? n_layers : total_layers();
  if (placement.empty())
    v.push_back("model.placement is an empty list");
  else if (placement.size() != 1 && layers >= 1 && (int)placement.size() != layers)
    v.push_back(fmt::format("model.placement lists {} methods for {} layers (give one, or one per "
                            "layer{})",
                            placement.size(), layers, encdec() ? ", encoder layers first" : ""));
  if (!placement.empty() && (placement.size() == 1 || (int)placement.size() == layers)) {
    dual_violations(v);
    if (encdec())
      for (int l = 0; l < total_layers(); l++) {
        const Method& m = method_of(placement_of(l));
        if (!m.embed_norm && !m.qkv_norm) continue;
        v.push_back(fmt::format("model.placement \"{}\" ({}) {}, which arch = \"encdec\" does not support (gpt "
                                "and encoder do)",
                                m.name, m.source,
                                m.embed_norm ? "normalizes the embedding output" : "normalizes the attention's q, k and v"));
        break;
      }
    sphere_violations(v);
    bool any_qk = false;
    for (int l = 0; l < total_layers(); l++) any_qk = any_qk || qk_norm_of(l) != QkNorm::None;
    if (!qk_norm_affine && !any_qk)
      v.push_back("model.qk_norm_affine = false makes QK-norm weightless, and no layer has one: set qk_norm = "
                  "\"heads\" or \"whole\"");
  }
  if (v.empty()) size_violations(v);
  return v;
}

// Sizes a config implies, checked before anything is allocated: a few-kB checkpoint or config.json
// must not make normlab reserve terabytes. The caps are far beyond what this CPU engine trains.
void ModelConfig::size_violations(std::vector<std::string>& v) const {
  const double params = double(make_param_table(*this).total);
  if (params > double(kMaxParams))
    v.push_back(fmt::format("the model config implies {:.3g} parameters ({:.3g} GB of float32 weights), more than "
                            "normlab's limit of {:.3g} (d_model, n_layers, d_ff, vocab)",
                            params, params * 4 / 1e9, double(kMaxParams)));
  const double bytes = sequence_activation_bytes(seq_len);
  if (bytes > kMaxSequenceActivationBytes)
    v.push_back(fmt::format("the model config implies {:.3g} GB of activations for one sequence of seq_len = {} "
                            "(n_layers, n_heads, d_model), more than normlab's limit of {:.3g} GB",
                            bytes / 1e9, seq_len, kMaxSequenceActivationBytes / 1e9));
}

// one sequence's activations: the residual stream and its sub-layer buffers, and the attention
// matrices (heads x T^2), in every layer
double ModelConfig::sequence_activation_bytes(double T) const {
  return 4.0 * total_layers() * (T * (16.0 * d_model + 4.0 * ff()) + 2.0 * n_heads * T * T);
}

int ModelConfig::longest_sequence_within_limit() const {
  // a T^2 + b T <= limit, with a = 8 L heads and b = 4 L (16 d + 4 ff): the positive root, then down
  // to the first T the estimate keeps (the root's rounding)
  const double a = 8.0 * total_layers() * n_heads, b = 4.0 * total_layers() * (16.0 * d_model + 4.0 * ff());
  double T = a > 0 ? std::floor((-b + std::sqrt(b * b + 4 * a * kMaxSequenceActivationBytes)) / (2 * a))
                   : std::floor(kMaxSequenceActivationBytes / std::max(b, 1.0));
  while (T > 1 && sequence_activation_bytes(T) > kMaxSequenceActivationBytes) T -= 1;
  return int(std::clamp(T, 1.0, double(1 << 20)));
}

// nGPT keeps the stream on the unit sphere from the embedding to the logits (docs/MODEL.md, "nGPT"):
// every layer has it, every norm is the projection l2, and nothing adds to the stream off the sphere.
void ModelConfig::sphere_violations(std::vector<std::string>& v) const {
  if (!on_sphere()) return;
  const auto refuse = [&](const std::string& why) { v.push_back("model.placement = \"ngpt\" (nGPT) " + why); };
  if (!std::all_of(placement.begin(), placement.end(), [](Placement p) { return method_of(p).sphere; }))
    refuse("is a whole stack's: every layer must have it (the stream stays on the unit sphere)");
  if (norm != NormKind::L2) refuse(fmt::format("projects onto the unit sphere: set model.norm = \"l2\" (not \"{}\")", to_string(norm)));
  if (encdec()) refuse("is for arch = \"gpt\" and \"encoder\"");
  if (positions == Positions::Learned)
    refuse("adds nothing to its unit-length embeddings: set positions = \"rope\" or \"none\" (no learned table)");
  if (type_vocab > 0 || embed_norm || embed_scale != 1.0 || embed_scale_learned)
    refuse("reads the unit-length embedding rows as they are (no token types, embedding norm or embedding scale)");
  if (kv_heads() != n_heads) refuse("shares s_qk between queries and keys head by head: n_kv_heads must be n_heads");
  if (wide_heads()) refuse("keeps d_model / n_heads per head (head_dim must be unset)");
  if (qk_norm != QkNorm::None || v_norm) refuse("normalizes q and k itself (qk_norm must be \"none\")");
  if (head == Head::Mlm) refuse("scales the logits of a tied or untied head (not \"mlm\")");
  if (!residual) refuse("is a residual update on the sphere (residual = false has none)");
  if (bias != LinearBias::None) refuse("has no linear biases: set bias = \"none\"");
}

// A two-stream method keeps x_d through a whole stack and replaces the stack's ending, so a stack
// that has one in some layer must have it in every layer (docs/MODEL.md, "Methods"); and x_d is a
// skip path, which residual = false removes.
void ModelConfig::dual_violations(std::vector<std::string>& v) const {
  auto check_stack = [&](int first, int last, const char* stack) {
    int dual = 0;
    const Method* two = nullptr;  // the stack's (first) two-stream method
    for (int l = first; l < last; l++)
      if (method_of(placement_of(l)).streams == Streams::Dual) dual++, two = two ? two : &method_of(placement_of(l));
    if (dual > 0 && dual < last - first) {
      std::string list;
      for (int l = first; l < last; l++) list += (list.empty() ? "" : ", ") + std::string(to_string(placement_of(l)));
      v.push_back(fmt::format("model.placement: \"{}\" ({}) carries a second stream through the whole "
                              "stack, so it cannot be mixed with other methods in one stack; the {} has [{}] "
                              "(give every layer of that stack \"{}\", or none)",
                              two->name, two->source, stack, list, two->name));
    }
    if (dual > 0 && !residual)
      v.push_back(fmt::format("model.residual = false removes the skip paths, but the {} uses \"{}\" ({}), "
                              "whose second stream is a skip path", stack, two->name, two->source));
  };
  if (n_layers < 1) return;
  if (encdec()) {
    check_stack(0, n_layers, "encoder stack");
    if (decoder_layers() >= 1) check_stack(n_layers, total_layers(), "decoder stack");
  } else if (!dec_layers) {
    check_stack(0, n_layers, arch == Arch::Gpt ? "gpt stack" : "encoder stack");
  }
}

void ModelConfig::validate() const {
  auto v = violations();
  if (!v.empty()) throw Error(join_errors("invalid model config", v));
}

ModelConfig model_config_from_text(std::string_view text, const std::string& where) {
  const nlohmann::json j = parse_json(text, where);
  return naming_json_errors(where, [&] { return model_config_from_json(j, where); });
}

ModelConfig model_config_from_json(const nlohmann::json& obj, const std::string& where) {
  std::vector<std::string> errors;
  ModelConfig cfg = model_config_from_json(obj, where, errors);
  if (!errors.empty()) throw Error(join_errors(fmt::format("invalid model config ({})", where), errors));
  return cfg;
}

ModelConfig model_config_from_json(const nlohmann::json& obj, const std::string& where,
                                   std::vector<std::string>& errors) {
  ModelConfig cfg;
  const Arrangement* arrangement = nullptr;
  JsonReader r(obj, where);
  read_enum(r, "arch", kArchNames, cfg.arch);
  r.get("d_model", cfg.d_model);
  r.get("n_heads", cfg.n_heads);
  if (r.has("n_kv_heads")) {
    int v = 0;
    r.get("n_kv_heads", v);
    cfg.n_kv_heads = v;
  }
  if (r.has("head_dim")) {
    int v = 0;
    r.get("head_dim", v);
    cfg.head_dim = v;
  }
  r.get("n_layers", cfg.n_layers);
  if (r.has("dec_layers")) {
    int v = 0;
    r.get("dec_layers", v);
    cfg.dec_layers = v;
  }
  r.get("shared_embeddings", cfg.shared_embeddings);
  if (r.has("src_vocab")) {
    int v = 0;
    r.get("src_vocab", v);
    cfg.src_vocab = v;
  }
  read_enum(r, "admin_init", kAdminInitNames, cfg.admin_init);
  if (r.has("d_ff")) {
    int v = 0;
    r.get("d_ff", v);
    cfg.d_ff = v;
  }
  if (r.has("vocab")) {
    int v = 0;
    r.get("vocab", v);
    cfg.vocab = v;
  }
  r.get("seq_len", cfg.seq_len);
  read_enum(r, "norm", kNormNames, cfg.norm);
  r.get("eps", cfg.eps);
  r.get("norm_alpha", cfg.norm_alpha);
  if (r.has("norm_alpha_attn")) {
    double v = 0;
    r.get("norm_alpha_attn", v);
    cfg.norm_alpha_attn = v;
  }
  r.get("norm_bias", cfg.norm_bias);
  if (cfg.norm == NormKind::RMSNorm || cfg.norm == NormKind::L2 || cfg.norm == NormKind::SSNorm)
    cfg.norm_bias = false;  // (no bias to hold)
  read_enum(r, "activation", kActivationNames, cfg.activation);
  read_enum(r, "bias", kBiasNames, cfg.bias);
  read_enum(r, "positions", kPositionNames, cfg.positions);
  read_enum(r, "qk_norm", kQkNormNames, cfg.qk_norm);
  r.get("v_norm", cfg.v_norm);
  read_enum(r, "attn_gate", kAttnGateNames, cfg.attn_gate);
  r.get("attn_sink", cfg.attn_sink);
  read_enum(r, "hyper", kHyperNames, cfg.hyper);
  r.get("hyper_streams", cfg.hyper_streams);
  r.get("attn_res_block", cfg.attn_res_block);
  r.get("sinkhorn_iters", cfg.sinkhorn_iters);
  r.get("value_residual", cfg.value_residual);
  r.get("qk_norm_affine", cfg.qk_norm_affine);
  r.get("rope_base", cfg.rope_base);
  r.get("rope_fraction", cfg.rope_fraction);
  r.get("rope_scale", cfg.rope_scale);
  if (r.has("rope_freq_factors")) {
    const auto& f = r.raw("rope_freq_factors");
    cfg.rope_freq_factors.clear();
    if (!f.is_array() || f.size() > 65536)
      r.fail("model.rope_freq_factors must be a list of numbers (one per rotated pair)");
    else
      for (const auto& x : f) {
        if (!x.is_number()) {
          r.fail("model.rope_freq_factors must be a list of numbers (one per rotated pair)");
          break;
        }
        cfg.rope_freq_factors.push_back(x.get<double>());
      }
  }
  r.get("rope_mscale", cfg.rope_mscale);
  r.get("rope_local_base", cfg.rope_local_base);
  r.get("rope_global_every", cfg.rope_global_every);
  r.get("nope_every", cfg.nope_every);
  r.get("type_vocab", cfg.type_vocab);
  r.get("embed_norm", cfg.embed_norm);
  r.get("embed_scale", cfg.embed_scale);
  r.get("embed_scale_learned", cfg.embed_scale_learned);
  if (r.has("attn_scale")) {
    double v = 0;
    r.get("attn_scale", v);
    cfg.attn_scale = v;
  }
  r.get("mup_base_width", cfg.mup_base_width);
  r.get("completep_base_depth", cfg.completep_base_depth);
  r.get("attn_softcap", cfg.attn_softcap);
  r.get("logit_softcap", cfg.logit_softcap);
  read_enum(r, "head", kHeadNames, cfg.head);
  if (r.has("placement")) {
    const auto& p = r.raw("placement");
    std::vector<nlohmann::json> items;
    if (p.is_string()) items.push_back(p);
    else if (p.is_array()) items.assign(p.begin(), p.end());
    else r.fail(fmt::format("{}: 'placement' must be a string or a list of strings", where));
    cfg.placement.clear();
    // an arrangement alone names a whole stack (Mix-LN, HybridNorm*), expanded once n_layers is known below
    auto arrangement_of = [](const nlohmann::json& item) -> const Arrangement* {
      if (!item.is_string()) return nullptr;
      for (const Arrangement& a : all_arrangements())
        if (item.get<std::string>() == a.name) return &a;
      return nullptr;
    };
    if (items.size() == 1 && arrangement_of(items[0])) {
      arrangement = arrangement_of(items[0]);
      items.clear();
    }
    for (const auto& item : items) {
      if (const Arrangement* a = arrangement_of(item)) {
        r.fail(fmt::format("{}: placement \"{}\" names a whole stack ({}); give it alone, not in a list", where,
                           a->name, a->summary));
        continue;
      }
      auto v = item.is_string() ? placement_from_string(item.get<std::string>()) : std::nullopt;
      if (!v) {
        r.fail(fmt::format("{}: placement {} is not one of {}", where, item.dump(), placement_choices()));
        continue;
      }
      cfg.placement.push_back(*v);
    }
    if (cfg.placement.empty() && (!items.empty() || arrangement)) cfg.placement = {Placement::Pre};
  }
  r.get("residual", cfg.residual);
  r.get("mlp", cfg.mlp);
  read_enum(r, "init", kInitNames, cfg.init);
  r.get("init_std", cfg.init_std);
  r.get("dropout", cfg.dropout);
  r.get("seed", cfg.seed);
  if (arrangement) {
    if (cfg.encdec())
      r.fail(fmt::format("{}: placement \"{}\" arranges one stack; arch = \"encdec\" has two (list a "
                         "method per layer instead)",
                         where, arrangement->name));
    else if (cfg.n_layers >= 1 && cfg.n_layers <= kMaxLayers)
      cfg.placement = arrangement->expand(cfg.n_layers);
  }
  // attn_res: the embedding's stream and one per block, unless given (then it must be that number)
  if (cfg.hyper == HyperMix::AttnRes && !r.has("hyper_streams")) cfg.hyper_streams = cfg.attn_res_streams();
  for (auto& e : r.finish()) errors.push_back(e);
  for (auto& e : cfg.violations()) errors.push_back(e);
  return cfg;
}

static std::vector<Placement> mixln_placement(int layers) {
  const int post = int(std::floor(kMixLnPostFraction * layers));
  std::vector<Placement> p(size_t(layers), Placement::Pre);
  std::fill(p.begin(), p.begin() + post, Placement::Post);
  return p;
}

static std::vector<Placement> hybridnorm_star_placement(int layers) {
  std::vector<Placement> p(size_t(layers), Placement::HybridNorm);
  p[0] = Placement::HybridNormPre;
  return p;
}

static constexpr Arrangement kArrangements[] = {
    {"mixln", "Mix-LN: Post-LN for its first quarter, Pre-LN after", mixln_placement},
    {"hybridnorm*", "HybridNorm*: the first layer Pre-Norm in both halves (with QKV-norm), hybridnorm after", hybridnorm_star_placement},
};

std::span<const Arrangement> all_arrangements() { return kArrangements; }

// Every key of docs/MODEL.md's config table, defaults included (test_model_doc checks the two agree);
// the encoder-decoder's keys for encdec only, where the reader accepts them.
nlohmann::json model_config_to_json(const ModelConfig& cfg) {
  nlohmann::json places = nlohmann::json::array();
  for (int l = 0; l < cfg.total_layers(); l++) places.push_back(to_string(cfg.placement_of(l)));
  nlohmann::json j{{"arch", to_string(cfg.arch)},
                        {"d_model", cfg.d_model},
                        {"n_heads", cfg.n_heads},
                        {"head_dim", cfg.head_size()},
                        {"n_kv_heads", cfg.kv_heads()},
                        {"n_layers", cfg.n_layers},
                        {"d_ff", cfg.ff()},
                        {"vocab", cfg.vocab_size()},
                        {"seq_len", cfg.seq_len},
                        {"norm", to_string(cfg.norm)},
                        {"eps", cfg.eps},
                        {"norm_alpha", cfg.norm_alpha},
                        {"norm_alpha_attn", cfg.norm_alpha_attn.value_or(cfg.norm_alpha)},
                        // what the sites hold: RMSNorm and L2 have no bias whatever norm_bias says
                        {"norm_bias", cfg.norm_bias && cfg.norm != NormKind::RMSNorm && cfg.norm != NormKind::L2 &&
                                               cfg.norm != NormKind::SSNorm},
                        {"activation", to_string(cfg.activation)},
                        {"bias", to_string(cfg.bias)},
                        {"positions", to_string(cfg.positions)},
                        {"rope_base", cfg.rope_base},
                        {"rope_fraction", cfg.rope_fraction},
                        {"rope_scale", cfg.rope_scale},
                        {"rope_freq_factors", cfg.rope_freq_factors},
                        {"rope_mscale", cfg.rope_mscale},
                        {"rope_local_base", cfg.rope_local_base},
                        {"rope_global_every", cfg.rope_global_every},
                        {"nope_every", cfg.nope_every},
                        {"qk_norm", to_string(cfg.qk_norm)},
                        {"v_norm", cfg.v_norm},
                        {"attn_gate", to_string(cfg.attn_gate)},
                        {"attn_sink", cfg.attn_sink},
                        {"hyper", to_string(cfg.hyper)},
                        {"hyper_streams", cfg.hyper_streams},
                        {"attn_res_block", cfg.attn_res_block},
                        {"sinkhorn_iters", cfg.sinkhorn_iters},
                        {"value_residual", cfg.value_residual},
                        {"qk_norm_affine", cfg.qk_norm_affine},
                        {"type_vocab", cfg.type_vocab},
                        {"embed_norm", cfg.embed_norm},
                        {"embed_scale", cfg.embed_scale},
                        {"embed_scale_learned", cfg.embed_scale_learned},
                        {"attn_scale", cfg.attention_scale()},
                        {"mup_base_width", cfg.mup_base_width},
                        {"completep_base_depth", cfg.completep_base_depth},
                        {"attn_softcap", cfg.attn_softcap},
                        {"logit_softcap", cfg.logit_softcap},
                        {"head", to_string(cfg.head)},
                        {"placement", places},
                        {"admin_init", to_string(cfg.admin_init)},
                        {"residual", cfg.residual},
                        {"mlp", cfg.mlp},
                        {"init", to_string(cfg.resolved_init())},
                        {"init_std", cfg.init_std},
                        {"dropout", cfg.dropout},
                        {"seed", cfg.seed}};
  if (cfg.encdec()) {
    j["dec_layers"] = cfg.decoder_layers();
    j["shared_embeddings"] = cfg.shared_embeddings;
    if (!cfg.shared_embeddings) j["src_vocab"] = cfg.src_vocab_size();
  }
  return j;
}

}  // namespace normlab
