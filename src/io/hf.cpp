// hf.cpp: Hugging Face GPT-2 / BERT directories to normlab models and back. One table per family
// maps each Hugging Face tensor to a normlab parameter (with a transpose for GPT-2's Conv1D
// weights and BERT's query/key/value rows fused into qkv); reading checks the config's options,
// then every tensor against the table: unknown, missing, misshapen or non-float tensors are errors.
#include "io/hf.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "io/families.h"
#include "io/hf_common.h"
#include "io/hf_llama.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"
#include "util/hints.h"

namespace normlab::hf {

using namespace detail;

namespace {

// ---------------------------------------------------------------------------------------------
// Name tables: Hugging Face tensor -> normlab parameter

std::vector<TensorMap> gpt2_table(const ModelConfig& cfg) {
  std::vector<TensorMap> t = {{"wte.weight", "wte.weight"}, {"wpe.weight", "wpe.weight"}};
  for (int l = 0; l < cfg.n_layers; l++) {
    const std::string h = fmt::format("h.{}.", l), n = fmt::format("h.{}.", l);
    for (const char* p : {"weight", "bias"}) {
      t.push_back({h + "ln_1." + p, n + "attn.ln_in." + p});
      t.push_back({h + "ln_2." + p, n + "mlp.ln_in." + p});
    }
    t.push_back({h + "attn.c_attn.weight", n + "attn.qkv.weight", Layout::Transposed});
    t.push_back({h + "attn.c_attn.bias", n + "attn.qkv.bias"});
    t.push_back({h + "attn.c_proj.weight", n + "attn.proj.weight", Layout::Transposed});
    t.push_back({h + "attn.c_proj.bias", n + "attn.proj.bias"});
    t.push_back({h + "mlp.c_fc.weight", n + "mlp.fc.weight", Layout::Transposed});
    t.push_back({h + "mlp.c_fc.bias", n + "mlp.fc.bias"});
    t.push_back({h + "mlp.c_proj.weight", n + "mlp.proj.weight", Layout::Transposed});
    t.push_back({h + "mlp.c_proj.bias", n + "mlp.proj.bias"});
  }
  t.push_back({"ln_f.weight", "ln_f.weight"});
  t.push_back({"ln_f.bias", "ln_f.bias"});
  return t;
}

std::vector<TensorMap> bert_table(const ModelConfig& cfg) {
  std::vector<TensorMap> t = {{"embeddings.word_embeddings.weight", "wte.weight"},
                              {"embeddings.position_embeddings.weight", "wpe.weight"},
                              {"embeddings.token_type_embeddings.weight", "wtt.weight"},
                              {"embeddings.LayerNorm.weight", "ln_emb.weight"},
                              {"embeddings.LayerNorm.bias", "ln_emb.bias"}};
  for (int l = 0; l < cfg.n_layers; l++) {
    const std::string h = fmt::format("encoder.layer.{}.", l), n = fmt::format("h.{}.", l);
    const char* qkv[] = {"query", "key", "value"};
    for (int part = 0; part < 3; part++) {
      const int64_t C = cfg.d_model;
      t.push_back({h + "attention.self." + qkv[part] + ".weight", n + "attn.qkv.weight", Layout::Rows, part * C, C});
      t.push_back({h + "attention.self." + qkv[part] + ".bias", n + "attn.qkv.bias", Layout::Rows, part * C, C});
    }
    for (const char* p : {"weight", "bias"}) {
      t.push_back({h + "attention.output.dense." + p, n + "attn.proj." + p});
      t.push_back({h + "attention.output.LayerNorm." + p, n + "attn.ln_out." + p});
      t.push_back({h + "intermediate.dense." + p, n + "mlp.fc." + p});
      t.push_back({h + "output.dense." + p, n + "mlp.proj." + p});
      t.push_back({h + "output.LayerNorm." + p, n + "mlp.ln_out." + p});
    }
  }
  if (cfg.head == Head::Mlm) {
    // (prefix "cls." is kept: these names are looked up without the "bert." prefix)
    t.push_back({"cls.predictions.transform.dense.weight", "head.dense.weight"});
    t.push_back({"cls.predictions.transform.dense.bias", "head.dense.bias"});
    t.push_back({"cls.predictions.transform.LayerNorm.weight", "head.ln.weight"});
    t.push_back({"cls.predictions.transform.LayerNorm.bias", "head.ln.bias"});
    t.push_back({"cls.predictions.bias", "head.bias"});
  }
  return t;
}


// w null: the config only (the tensors are neither read nor checked).
Imported import_gpt2(const ConfigReader& r, const WeightFiles* weights, const fs::path& dir) {
  Imported im;
  im.architecture = architecture_of(r, {"GPT2LMHeadModel", "GPT2Model"});
  ModelConfig& c = im.config;
  c.arch = Arch::Gpt;
  c.d_model = r.integer("n_embd");
  c.n_layers = r.integer("n_layer");
  c.n_heads = r.integer("n_head");
  c.vocab = r.integer("vocab_size");
  c.seq_len = r.integer("n_positions");
  if (r.has("n_inner")) c.d_ff = r.integer("n_inner");
  c.eps = r.number("layer_norm_epsilon", 1e-5);
  c.activation = activation_from_hf(r, "activation_function", "gelu_new");
  c.placement = {Placement::Pre};
  c.norm = NormKind::LayerNorm;
  c.head = Head::Tied;
  c.init = InitScheme::Gpt2;
  c.init_std = r.number("initializer_range", 0.02);
  r.require("scale_attn_weights", r.boolean("scale_attn_weights", true), "normlab scales scores by 1/sqrt(head size)");
  r.require("scale_attn_by_inverse_layer_idx", !r.boolean("scale_attn_by_inverse_layer_idx", false),
            "normlab does not scale attention by 1/(layer + 1)");
  r.require("add_cross_attention", !r.boolean("add_cross_attention", false), "no cross-attention in a GPT");
  r.require("tie_word_embeddings", r.boolean("tie_word_embeddings", true), "normlab's output embedding is tied");
  c.validate();
  if (r.number("resid_pdrop", 0) > 0 || r.number("attn_pdrop", 0) > 0 || r.number("embd_pdrop", 0) > 0)
    im.notes.push_back("dropout rates of config.json are not imported (model.dropout = 0; set it to train with dropout)");
  if (!weights) return im;
  const WeightFiles& w = *weights;
  std::set<std::string> ignored;
  for (int l = 0; l < c.n_layers; l++) {  // the causal-mask buffers of older checkpoints
    ignored.insert(fmt::format("h.{}.attn.bias", l));
    ignored.insert(fmt::format("h.{}.attn.masked_bias", l));
  }
  ignored.insert("lm_head.weight");
  bool prefixed = false;
  for (const auto& [name, t] : w.tensors) prefixed |= name.rfind("transformer.", 0) == 0;
  // lm_head.weight sits outside the "transformer." prefix
  map_tensors(im, w, gpt2_table(c), prefixed ? "transformer." : "", ignored, dir);
  check_tied(w, "lm_head.weight", im.params["wte.weight"], dir);
  for (const auto& [name, t] : w.tensors)
    if (name.find(".attn.bias") != std::string::npos || name.find(".attn.masked_bias") != std::string::npos) {
      im.notes.push_back("the causal-mask buffers (h.*.attn.bias) are constants; normlab applies the causal mask itself");
      break;
    }
  return im;
}

Imported import_bert(const ConfigReader& r, const WeightFiles* weights, const fs::path& dir) {
  Imported im;
  im.architecture = architecture_of(r, {"BertModel", "BertForMaskedLM", "BertForPreTraining"});
  ModelConfig& c = im.config;
  c.arch = Arch::Encoder;
  c.d_model = r.integer("hidden_size");
  c.n_layers = r.integer("num_hidden_layers");
  c.n_heads = r.integer("num_attention_heads");
  c.d_ff = r.integer("intermediate_size");
  c.vocab = r.integer("vocab_size");
  c.seq_len = r.integer("max_position_embeddings");
  c.type_vocab = r.integer("type_vocab_size", 2);
  c.eps = r.number("layer_norm_eps", 1e-12);
  c.activation = activation_from_hf(r, "hidden_act", "gelu");
  c.placement = {Placement::Post};
  c.norm = NormKind::LayerNorm;
  c.embed_norm = true;
  c.head = im.architecture == "BertModel" ? Head::None : Head::Mlm;
  c.init = InitScheme::Normal;
  c.init_std = r.number("initializer_range", 0.02);
  r.require("position_embedding_type", r.string("position_embedding_type", "absolute") == "absolute",
            "normlab has absolute learned positions only");
  r.require("is_decoder", !r.boolean("is_decoder", false), "a BERT decoder (causal, cross-attention) is not represented");
  r.require("add_cross_attention", !r.boolean("add_cross_attention", false), "no cross-attention in an encoder");
  r.require("tie_word_embeddings", r.boolean("tie_word_embeddings", true), "normlab's output embedding is tied");
  c.validate();
  if (c.type_vocab < 1) throw Error(fmt::format("{}: \"type_vocab_size\" must be at least 1", r.path));
  if (c.head == Head::None)
    im.notes.push_back("BertModel has no head: no logits and no loss; instruments that need a loss say so");
  if (r.number("hidden_dropout_prob", 0) > 0 || r.number("attention_probs_dropout_prob", 0) > 0)
    im.notes.push_back("dropout rates of config.json are not imported (model.dropout = 0; set it to train with dropout)");
  if (!weights) return im;
  const WeightFiles& w = *weights;
  std::set<std::string> ignored = {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias",
                                   "cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
                                   "cls.seq_relationship.weight", "cls.seq_relationship.bias"};
  bool prefixed = false;
  for (const auto& [name, t] : w.tensors) prefixed |= name.rfind("bert.", 0) == 0;
  // the MLM head's names start with "cls.", outside the "bert." prefix: they are matched unprefixed
  map_tensors(im, w, bert_table(c), prefixed ? "bert." : "", ignored, dir);
  check_tied(w, "cls.predictions.decoder.weight", im.params["wte.weight"], dir);
  if (w.tensors.count("cls.predictions.decoder.bias") &&
      w.tensors.at("cls.predictions.decoder.bias").to_f32() != im.params["head.bias"])
    throw Error(fmt::format("{}: 'cls.predictions.decoder.bias' differs from 'cls.predictions.bias'", dir.string()));
  for (const char* name : {"pooler.dense.weight", "bert.pooler.dense.weight"})
    if (w.tensors.count(name)) {
      im.notes.push_back("the pooler (dense + tanh of the first token, for sentence classification) is not "
                         "used: normlab analyzes the token outputs");
      break;
    }
  if (w.tensors.count("cls.seq_relationship.weight"))
    im.notes.push_back("the next-sentence head (cls.seq_relationship) is not used");
  return im;
}

}  // namespace

bool is_model_dir(const std::string& path) {
  std::error_code ec;
  const fs::path d(path);
  // a normlab run directory is not one (its config.json is the run's, beside its metrics and checkpoint);
  // any other directory is read as one, so that what it lacks is named ("no config.json")
  return fs::is_directory(d, ec) && !fs::exists(d / "metrics.jsonl", ec) && !fs::exists(d / "checkpoint.safetensors", ec);
}

// config.json's content (read from `cfg_path`, or given) and the weights (null: config only) as a model.
static Imported import_config(const json& j, const WeightFiles* weights, const fs::path& cfg_path) {
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", cfg_path.string()));
  ConfigReader r{j, cfg_path.string()};
  const std::string type = r.string("model_type", "");
  if (type.empty()) throw Error(fmt::format("{}: no \"model_type\"", cfg_path.string()));
  const bool llama_family = family_of_model_type(type) != nullptr;  // (io/families.cpp: one row per family)
  if (type == "gemma3")  // Gemma3ForConditionalGeneration: a vision tower beside the text model
    throw Error(fmt::format("{}: model_type \"gemma3\" is Gemma 3's image-and-text model; normlab reads its text model "
                            "alone (model_type \"gemma3_text\", Gemma3ForCausalLM: the 270M and 1B checkpoints)",
                            cfg_path.string()));
  if (type != "gpt2" && type != "bert" && !llama_family)
    throw Error(fmt::format("{}: model_type \"{}\" is not supported (normlab reads \"gpt2\", \"bert\", {})",
                            cfg_path.string(), type, model_type_list()));
  const fs::path d = cfg_path.parent_path();
  if (llama_family) return import_llama(r, weights, d);
  return type == "gpt2" ? import_gpt2(r, weights, d) : import_bert(r, weights, d);
}

static Imported read_dir(const std::string& dir, bool with_weights) {
  const fs::path d(dir), cfg_path = d / "config.json";
  if (!fs::is_directory(d)) throw Error(fmt::format("{}: not a directory", dir));
  if (!fs::exists(cfg_path))
    throw Error(fmt::format("{}: no config.json (a Hugging Face model directory holds config.json and "
                            "model.safetensors; {})",
                            dir, directory_hint(dir)));
  const json j = read_json(cfg_path);
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", cfg_path.string()));
  WeightFiles w;
  if (with_weights) w = read_weights(d);
  return import_config(j, with_weights ? &w : nullptr, cfg_path);
}

Imported read_model_dir(const std::string& dir) {
  return naming_json_errors(dir, [&] { return read_dir(dir, true); });
}

ModelConfig read_model_dir_config(const std::string& dir) {
  return naming_json_errors(dir, [&] { return read_dir(dir, false).config; });
}

// The model of an import, every weight checked finite (a NaN or Inf weight is named, not trained on or
// measured); its notes printed to stderr unless quiet.
static std::unique_ptr<Model<float>> model_of(const Imported& im, const std::string& what, bool quiet,
                                              bool forward_only = false) {
  for (const auto& [name, v] : im.params)
    for (size_t i = 0; i < v.size(); i++)
      if (!std::isfinite(v[i]))
        throw Error(fmt::format("{}: tensor '{}' holds a non-finite value ({}) at flat index {}", what, name, v[i], i));
  auto model = unset_model<float>(im.config, forward_only);
  for (const ParamSpec& p : model->table().specs) {
    const std::vector<float>& v = im.params.at(p.name);
    std::copy(v.begin(), v.end(), model->params().begin() + long(p.offset));
  }
  if (!quiet)
    for (const auto& note : im.notes) fmt::print(stderr, "normlab: {}: {}\n", what, note);
  return model;
}

std::unique_ptr<Model<float>> load_model_dir(const std::string& dir, bool quiet, bool forward_only) {
  return model_of(read_model_dir(dir), dir, quiet, forward_only);
}

std::unique_ptr<Model<float>> load_model_state(const nlohmann::json& config,
                                               std::map<std::string, safetensors::Tensor> tensors,
                                               const std::string& what, bool quiet) {
  WeightFiles w;
  for (auto& [name, t] : tensors) {
    w.file_of[name] = what;
    w.tensors.emplace(name, std::move(t));
  }
  // messages name "<what>/config.json": the reader's form, with `what` standing for the directory
  const Imported im = naming_json_errors(what, [&] { return import_config(config, &w, fs::path(what) / "config.json"); });
  return model_of(im, what, quiet);
}

// ---------------------------------------------------------------------------------------------
// Export

// A gpt with RMSNorm is exported as a Llama-family model; any other as GPT-2 or BERT.
static bool llama_target(const ModelConfig& c) { return c.arch == Arch::Gpt && c.norm == NormKind::RMSNorm; }

std::optional<std::string> export_refusal(const ModelConfig& c) {
  if (llama_target(c)) return llama_export_refusal(c);
  std::vector<std::string> why;
  const bool all = [&] {
    for (int l = 1; l < c.n_layers; l++)
      if (c.placement_of(l) != c.placement_of(0)) return false;
    return true;
  }();
  if (c.norm != NormKind::LayerNorm) why.push_back(fmt::format("norm is {} (GPT-2 and BERT use LayerNorm)", to_string(c.norm)));
  if (!c.norm_bias) why.push_back("norm_bias = false (GPT-2's and BERT's LayerNorms have a bias)");
  if (!c.plain_scores() || c.logit_softcap > 0)
    why.push_back("attn_scale, attn_softcap or logit_softcap is set (GPT-2 and BERT scale scores by 1/sqrt(head size), uncapped)");
  if (c.mup_base_width > 0) why.push_back("mup_base_width is set (muP divides the logits by the width multiplier; no Hugging Face config says so)");
  if (!c.residual) why.push_back("residual = false");
  if (c.attn_gate != AttnGate::None) why.push_back("attn_gate is set (GPT-2 and BERT do not gate their attention output)");
  if (c.attn_sink) why.push_back("attn_sink = true (GPT-2 and BERT have no sink logits)");
  if (c.completep_base_depth > 0) why.push_back("completep_base_depth is set (CompleteP multiplies every branch by L_base / L; no Hugging Face config says so)");
  if (c.value_residual > 0) why.push_back("value_residual is set (no Hugging Face family mixes the first layer's values into later ones)");
  if (c.hyper_connected()) why.push_back(fmt::format("hyper = \"{}\" (no Hugging Face family has hyper-connections)", to_string(c.hyper)));
  if (!c.mlp) why.push_back("mlp = false (attention-only blocks)");
  if (c.qk_norm != QkNorm::None) why.push_back(fmt::format("qk_norm is {} (GPT-2 and BERT have no QK-norm)", to_string(c.qk_norm)));
  if (c.embed_scale != 1.0) why.push_back(fmt::format("embed_scale is {} (GPT-2 and BERT scale no embedding)", c.embed_scale));
  if (c.kv_heads() != c.n_heads)
    why.push_back(fmt::format("{} key-value heads for {} query heads (GPT-2 and BERT: one each)", c.kv_heads(), c.n_heads));
  if (c.positions != Positions::Learned)
    why.push_back(fmt::format("positions are {} (GPT-2 and BERT learn a position table)", to_string(c.positions)));
  if (c.bias != LinearBias::All) why.push_back(fmt::format("bias is {} (GPT-2 and BERT have every linear bias)", to_string(c.bias)));
  if (c.activation == Activation::SwiGlu || c.activation == Activation::GeGlu)
    why.push_back(fmt::format("activation is {}, a gated MLP (GPT-2 and BERT use one fc projection)", to_string(c.activation)));
  if (!all) why.push_back("placement differs between layers");
  if (c.arch == Arch::Gpt) {
    if (c.placement_of(0) != Placement::Pre) why.push_back(fmt::format("a GPT-2 is pre-LN; this model is {}", to_string(c.placement_of(0))));
    if (c.embed_norm) why.push_back("embed_norm = true (GPT-2 has no embedding norm)");
    if (c.type_vocab > 0) why.push_back("type_vocab > 0 (GPT-2 has no token types)");
    if (c.head != Head::Tied) why.push_back(fmt::format("head = {} (GPT-2's head is the tied embedding)", to_string(c.head)));
  } else {
    if (c.placement_of(0) != Placement::Post) why.push_back(fmt::format("a BERT is post-LN; this model is {}", to_string(c.placement_of(0))));
    if (!c.embed_norm) why.push_back("embed_norm = false (BERT normalizes the embeddings)");
    if (c.head == Head::Tied) why.push_back("head = tied (BERT's head is mlm or none)");
  }
  if (why.empty()) return std::nullopt;
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : "; ") + w;
  return fmt::format("this {} model is not exactly a {}: {}", to_string(c.arch),
                     c.arch == Arch::Gpt ? "GPT-2" : "BERT", out);
}

// The GPT-2 / BERT config name of an element-wise activation (a gated one is refused by export_refusal).
static const char* hf_activation(Activation a) {
  switch (a) {
    case Activation::Gelu: return "gelu_new";
    case Activation::GeluExact: return "gelu";
    case Activation::Relu: return "relu";
    case Activation::SwiGlu:
    case Activation::GeGlu: return "?";
  }
  return "?";
}

static std::string write_gpt2_or_bert(const StagedFiles& out, const Model<float>& model);

std::string write_model_dir(const std::string& dir, const Model<float>& model, bool overwrite) {
  const ModelConfig& c = model.config();
  if (auto why = export_refusal(c)) throw Error(fmt::format("cannot export to Hugging Face: {}", *why));
  const fs::path d(dir);
  std::error_code ec;
  if (fs::exists(d) && !fs::is_directory(d)) throw Error(fmt::format("{}: exists and is not a directory", dir));
  for (const char* f : {"config.json", "model.safetensors"})
    if (!overwrite && fs::exists(d / f))
      throw Error(fmt::format("{}: already holds {}; pass --force to replace it", dir, f));
  // weights this export would not replace outlive it, and transformers would load them (or their
  // index) instead of the new model: refused, even with --force
  if (fs::is_directory(d))
    for (const auto& entry : fs::directory_iterator(d, ec)) {
      const std::string name = entry.path().filename().string();
      const bool shard = name.rfind("model-", 0) == 0 && name.ends_with(".safetensors");
      const bool other = name == "model.safetensors.index.json" || name.rfind("pytorch_model", 0) == 0 ||
                         name == "tf_model.h5" || name == "flax_model.msgpack";
      if (shard || other)
        throw Error(fmt::format("{}: holds {}, weights this export would not replace (transformers would load "
                                "them instead of the new model); remove them or export to a new directory",
                                dir, name));
    }
  // the weights and the config replace the old ones together or not at all
  StagedFiles out(dir, {"model.safetensors", "config.json"});
  std::string written;
  if (llama_target(c)) {
    written = write_llama(out, model);
  } else {
    written = write_gpt2_or_bert(out, model);
  }
  out.commit();
  return written;
}

// The GPT-2 (gpt, pre-LN) or BERT (encoder, post-LN) files of a model export_refusal accepted.
static std::string write_gpt2_or_bert(const StagedFiles& out, const Model<float>& model) {
  const ModelConfig& c = model.config();

  const ParamTable& table = model.table();
  auto param = [&](const std::string& name) {
    const ParamSpec* p = table.find(name);
    return std::pair{model.params().data() + p->offset, p};
  };
  std::vector<std::vector<float>> owned;  // transposed / split copies, alive until written
  std::vector<st::TensorView> views;
  auto same = [&](const std::string& hf, const std::string& nl) {
    auto [ptr, spec] = param(nl);
    views.push_back({hf, st::DType::F32, spec->shape, ptr});
  };
  auto transposed = [&](const std::string& hf, const std::string& nl) {
    auto [ptr, spec] = param(nl);
    const int64_t rows = spec->shape[0], cols = spec->shape[1];
    std::vector<float> t(size_t(rows * cols));
    for (int64_t r = 0; r < rows; r++)
      for (int64_t col = 0; col < cols; col++) t[size_t(col) * rows + r] = ptr[size_t(r) * cols + col];
    owned.push_back(std::move(t));
    views.push_back({hf, st::DType::F32, {cols, rows}, owned.back().data()});
  };
  owned.reserve(4 * size_t(c.n_layers) + 8);
  json config;
  std::string arch;
  if (c.arch == Arch::Gpt) {
    arch = "GPT2LMHeadModel";
    for (const TensorMap& m : gpt2_table(c)) {
      if (m.layout == Layout::Transposed) transposed("transformer." + m.hf, m.normlab);
      else same("transformer." + m.hf, m.normlab);
    }
    config = {{"architectures", {arch}}, {"model_type", "gpt2"}, {"vocab_size", c.vocab_size()},
              {"n_positions", c.seq_len}, {"n_embd", c.d_model}, {"n_layer", c.n_layers},
              {"n_head", c.n_heads}, {"n_inner", c.ff()}, {"activation_function", hf_activation(c.activation)},
              {"layer_norm_epsilon", c.eps}, {"initializer_range", c.init_std},
              {"resid_pdrop", c.dropout}, {"embd_pdrop", c.dropout}, {"attn_pdrop", 0.0},
              {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false},
              {"reorder_and_upcast_attn", false}, {"tie_word_embeddings", true}};
  } else {
    arch = c.head == Head::Mlm ? "BertForMaskedLM" : "BertModel";
    const std::string prefix = c.head == Head::Mlm ? "bert." : "";
    for (const TensorMap& m : bert_table(c)) {
      const bool head = m.hf.rfind("cls.", 0) == 0;
      const std::string name = head ? m.hf : prefix + m.hf;
      if (m.normlab == "wtt.weight" && c.type_vocab == 0) {  // BERT always has token types: one zero row
        owned.push_back(std::vector<float>(size_t(c.d_model), 0.0f));
        views.push_back({name, st::DType::F32, {1, c.d_model}, owned.back().data()});
        continue;
      }
      if (m.layout == Layout::Rows) {
        auto [ptr, spec] = param(m.normlab);
        std::vector<int64_t> shape = spec->shape;
        shape[0] = m.rows;
        const size_t row = spec->shape.size() > 1 ? size_t(spec->shape[1]) : 1;
        views.push_back({name, st::DType::F32, shape, ptr + size_t(m.row0) * row});
        continue;
      }
      same(name, m.normlab);
    }
    config = {{"architectures", {arch}}, {"model_type", "bert"}, {"vocab_size", c.vocab_size()},
              {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers},
              {"num_attention_heads", c.n_heads}, {"intermediate_size", c.ff()},
              {"hidden_act", hf_activation(c.activation)}, {"hidden_dropout_prob", c.dropout},
              {"attention_probs_dropout_prob", 0.0}, {"max_position_embeddings", c.seq_len},
              {"type_vocab_size", std::max(c.type_vocab, 1)}, {"initializer_range", c.init_std},
              {"layer_norm_eps", c.eps}, {"position_embedding_type", "absolute"},
              {"tie_word_embeddings", true}, {"pad_token_id", 0}};
  }
  config["normlab_config"] = model_config_to_json(c);
  st::write(out.path("model.safetensors"), views, {{"format", "pt"}}, false);
  write_file_atomic(out.path("config.json"), dump_json(config, 2) + "\n", false);
  return arch;
}

}  // namespace normlab::hf
