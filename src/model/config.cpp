// config.cpp: model config validation, derived quantities, and strict JSON conversion.
#include "model/config.h"

#include <cmath>
#include <fmt/format.h>

#include "util/error.h"
#include "util/json_reader.h"

namespace normlab {

namespace {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

constexpr EnumName<Arch> kArchNames[] = {{Arch::Gpt, "gpt"}, {Arch::Encoder, "encoder"}};
constexpr EnumName<NormKind> kNormNames[] = {{NormKind::LayerNorm, "layernorm"},
                                             {NormKind::RMSNorm, "rmsnorm"}};
constexpr EnumName<Activation> kActivationNames[] = {
    {Activation::Gelu, "gelu"}, {Activation::GeluExact, "gelu_exact"}, {Activation::Relu, "relu"}};
constexpr EnumName<Head> kHeadNames[] = {{Head::Tied, "tied"}, {Head::Mlm, "mlm"}, {Head::None, "none"}};
constexpr EnumName<Placement> kPlacementNames[] = {
    {Placement::Post, "post"},         {Placement::Pre, "pre"},
    {Placement::Sandwich, "sandwich"}, {Placement::PrePost, "prepost"},
    {Placement::DeepNorm, "deepnorm"}, {Placement::None, "none"}};
constexpr EnumName<InitScheme> kInitNames[] = {{InitScheme::Auto, "auto"},
                                               {InitScheme::Normal, "normal"},
                                               {InitScheme::Gpt2, "gpt2"},
                                               {InitScheme::Xavier, "xavier"},
                                               {InitScheme::DeepNet, "deepnet"}};

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
const char* to_string(Placement v) { return name_of(kPlacementNames, v); }
const char* to_string(InitScheme v) { return name_of(kInitNames, v); }
const char* to_string(Head v) { return name_of(kHeadNames, v); }
std::optional<Placement> placement_from_string(const std::string& s) {
  return parse_enum(kPlacementNames, s);
}

Placement ModelConfig::placement_of(int layer) const {
  return placement.size() == 1 ? placement[0] : placement.at(layer);
}

double ModelConfig::residual_alpha(int layer) const {
  if (!residual) return 0.0;
  if (placement_of(layer) == Placement::DeepNorm) return std::pow(2.0 * n_layers, 0.25);
  return 1.0;
}

double ModelConfig::deepnet_beta() const { return std::pow(8.0 * n_layers, -0.25); }

bool ModelConfig::has_final_norm() const {
  const Placement last = placement_of(n_layers - 1);
  return last == Placement::Pre || last == Placement::Sandwich;
}

InitScheme ModelConfig::resolved_init() const {
  if (init != InitScheme::Auto) return init;
  for (int l = 0; l < n_layers; l++)
    if (placement_of(l) == Placement::DeepNorm) return InitScheme::DeepNet;
  return InitScheme::Gpt2;
}

std::vector<std::string> ModelConfig::violations() const {
  std::vector<std::string> v;
  auto positive = [&](const char* key, long value, long max) {
    if (value < 1 || value > max)
      v.push_back(fmt::format("model.{} = {} must be in [1, {}]", key, value, max));
  };
  positive("d_model", d_model, 65536);
  positive("n_heads", n_heads, 4096);
  positive("n_layers", n_layers, 4096);
  positive("seq_len", seq_len, 1 << 20);
  if (d_ff) positive("d_ff", *d_ff, 1 << 20);
  if (vocab) positive("vocab", *vocab, 1 << 24);
  if (n_heads >= 1 && d_model >= 1 && d_model % n_heads != 0)
    v.push_back(fmt::format("model.d_model = {} is not divisible by model.n_heads = {}", d_model,
                            n_heads));
  if (type_vocab < 0 || type_vocab > (1 << 20))
    v.push_back(fmt::format("model.type_vocab = {} must be in [0, {}]", type_vocab, 1 << 20));
  if (!(eps >= 0.0) || !std::isfinite(eps))
    v.push_back(fmt::format("model.eps = {} must be finite and >= 0", eps));
  if (!(init_std > 0.0) || !std::isfinite(init_std))
    v.push_back(fmt::format("model.init_std = {} must be > 0", init_std));
  if (!(dropout >= 0.0 && dropout < 1.0))
    v.push_back(fmt::format("model.dropout = {} must be in [0, 1)", dropout));
  if (placement.empty())
    v.push_back("model.placement is an empty list");
  else if (placement.size() != 1 && n_layers >= 1 && (int)placement.size() != n_layers)
    v.push_back(fmt::format("model.placement lists {} placements for {} layers (give one, or one "
                            "per layer)",
                            placement.size(), n_layers));
  return v;
}

void ModelConfig::validate() const {
  auto v = violations();
  if (!v.empty()) throw Error(join_errors("invalid model config", v));
}

ModelConfig model_config_from_json(const nlohmann::json& obj, const std::string& where) {
  ModelConfig cfg;
  JsonReader r(obj, where);
  read_enum(r, "arch", kArchNames, cfg.arch);
  r.get("d_model", cfg.d_model);
  r.get("n_heads", cfg.n_heads);
  r.get("n_layers", cfg.n_layers);
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
  read_enum(r, "activation", kActivationNames, cfg.activation);
  r.get("type_vocab", cfg.type_vocab);
  r.get("embed_norm", cfg.embed_norm);
  read_enum(r, "head", kHeadNames, cfg.head);
  if (r.has("placement")) {
    const auto& p = r.raw("placement");
    std::vector<nlohmann::json> items;
    if (p.is_string()) items.push_back(p);
    else if (p.is_array()) items.assign(p.begin(), p.end());
    else r.fail(fmt::format("{}: 'placement' must be a string or a list of strings", where));
    cfg.placement.clear();
    for (const auto& item : items) {
      auto v = item.is_string() ? placement_from_string(item.get<std::string>()) : std::nullopt;
      if (!v) {
        r.fail(fmt::format("{}: placement {} is not one of {}", where, item.dump(),
                           choices(kPlacementNames)));
        continue;
      }
      cfg.placement.push_back(*v);
    }
    if (cfg.placement.empty() && !items.empty()) cfg.placement = {Placement::Pre};
  }
  r.get("residual", cfg.residual);
  r.get("mlp", cfg.mlp);
  read_enum(r, "init", kInitNames, cfg.init);
  r.get("init_std", cfg.init_std);
  r.get("dropout", cfg.dropout);
  r.get("seed", cfg.seed);
  auto errors = r.finish();
  for (auto& e : cfg.violations()) errors.push_back(e);
  if (!errors.empty()) throw Error(join_errors("invalid model config", errors));
  return cfg;
}

nlohmann::json model_config_to_json(const ModelConfig& cfg) {
  nlohmann::json places = nlohmann::json::array();
  for (int l = 0; l < cfg.n_layers; l++) places.push_back(to_string(cfg.placement_of(l)));
  return nlohmann::json{{"arch", to_string(cfg.arch)},
                        {"d_model", cfg.d_model},
                        {"n_heads", cfg.n_heads},
                        {"n_layers", cfg.n_layers},
                        {"d_ff", cfg.ff()},
                        {"vocab", cfg.vocab_size()},
                        {"seq_len", cfg.seq_len},
                        {"norm", to_string(cfg.norm)},
                        {"eps", cfg.eps},
                        {"activation", to_string(cfg.activation)},
                        {"type_vocab", cfg.type_vocab},
                        {"embed_norm", cfg.embed_norm},
                        {"head", to_string(cfg.head)},
                        {"placement", places},
                        {"residual", cfg.residual},
                        {"mlp", cfg.mlp},
                        {"init", to_string(cfg.resolved_init())},
                        {"init_std", cfg.init_std},
                        {"dropout", cfg.dropout},
                        {"seed", cfg.seed}};
}

}  // namespace normlab
