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

#include "io/safetensors.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"
#include "util/hints.h"

namespace normlab::hf {

namespace fs = std::filesystem;
namespace st = safetensors;
using nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// config.json

json read_json(const fs::path& path) {
  return parse_json(read_file(path.string(), "file"), path.string());
}

// Typed access to config.json with errors that name the file and the key.
struct ConfigReader {
  const json& j;
  std::string path;
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  int integer(const char* key, std::optional<int> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw Error(fmt::format("{}: no \"{}\"", path, key));
    }
    if (!j[key].is_number_integer() || j[key].get<long long>() < 0 || j[key].get<long long>() > (1 << 30))
      throw Error(fmt::format("{}: \"{}\" = {} is not an integer in [0, 2^30]", path, key, j[key].dump()));
    return j[key].get<int>();
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) throw Error(fmt::format("{}: \"{}\" = {} is not a number", path, key, j[key].dump()));
    return j[key].get<double>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_string()) throw Error(fmt::format("{}: \"{}\" = {} is not a string", path, key, j[key].dump()));
    return j[key].get<std::string>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) throw Error(fmt::format("{}: \"{}\" = {} is not true/false", path, key, j[key].dump()));
    return j[key].get<bool>();
  }
  // An option normlab represents only at one value: anything else is refused by name.
  void require(const char* key, bool ok, const std::string& why) const {
    if (!ok)
      throw Error(fmt::format("{}: \"{}\" = {} is not supported: {}", path, key, has(key) ? j[key].dump() : "(unset)", why));
  }
};

Activation activation_from_hf(const ConfigReader& r, const char* key, const std::string& fallback) {
  const std::string act = r.string(key, fallback);
  // gelu_new and gelu_pytorch_tanh are both the tanh form; "gelu" is the exact erf form
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return Activation::Gelu;
  if (act == "gelu") return Activation::GeluExact;
  if (act == "relu") return Activation::Relu;
  throw Error(fmt::format("{}: \"{}\" = \"{}\" is not supported (normlab has gelu_new / "
                          "gelu_pytorch_tanh, gelu (erf) and relu)",
                          r.path, key, act));
}

std::string architecture_of(const ConfigReader& r, const std::vector<std::string>& known) {
  if (!r.has("architectures")) return known.front();
  const json& a = r.j["architectures"];
  if (!a.is_array() || a.size() != 1 || !a[0].is_string())
    throw Error(fmt::format("{}: \"architectures\" = {} must list one architecture", r.path, a.dump()));
  const std::string arch = a[0].get<std::string>();
  for (const auto& k : known)
    if (arch == k) return arch;
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  throw Error(fmt::format("{}: architecture \"{}\" is not supported (normlab represents {} exactly)", r.path, arch, list));
}

// ---------------------------------------------------------------------------------------------
// Name tables: Hugging Face tensor -> normlab parameter

enum class Layout { Same, Transposed, QkvPart };

struct TensorMap {
  std::string hf;       // name in the checkpoint, without the model prefix
  std::string normlab;  // parameter name
  Layout layout = Layout::Same;
  int part = 0;         // QkvPart: 0 query, 1 key, 2 value
};

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
      t.push_back({h + "attention.self." + qkv[part] + ".weight", n + "attn.qkv.weight", Layout::QkvPart, part});
      t.push_back({h + "attention.self." + qkv[part] + ".bias", n + "attn.qkv.bias", Layout::QkvPart, part});
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

// ---------------------------------------------------------------------------------------------
// Reading the weights

struct WeightFiles {
  std::map<std::string, st::Tensor> tensors;  // every tensor of every shard
  std::map<std::string, std::string> file_of;  // tensor -> the file it came from (for messages)
};

WeightFiles read_weights(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    const json j = read_json(index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(fmt::format("{}: no \"weight_map\" object", index.string()));
    std::set<std::string> names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string())
        throw Error(fmt::format("{}: weight_map[\"{}\"] is not a file name", index.string(), tensor));
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
        throw Error(fmt::format("{}: weight_map[\"{}\"] = \"{}\" is not a file name in this directory",
                                index.string(), tensor, f));
      names.insert(f);
    }
    files.assign(names.begin(), names.end());
  } else if (fs::exists(single)) {
    files.push_back("model.safetensors");
  } else {
    for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
      if (fs::exists(dir / pickle))
        throw Error(fmt::format(
            "{}: only {} holds the weights, and normlab does not read pickle files: unpickling runs "
            "arbitrary code from the file. Convert it once in Python, in an environment you trust: "
            "AutoModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True), which "
            "writes model.safetensors",
            dir.string(), pickle));
    for (const char* other : {"tf_model.h5", "flax_model.msgpack", "model.ckpt.index"})
      if (fs::exists(dir / other))
        throw Error(fmt::format("{}: only {} holds the weights; normlab reads model.safetensors (convert "
                                "with transformers' save_pretrained(dir, safe_serialization=True))",
                                dir.string(), other));
    throw Error(fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir.string()));
  }
  WeightFiles w;
  for (const std::string& f : files) {
    st::File file = st::read((dir / f).string());
    for (auto& [name, tensor] : file.tensors) {
      if (w.tensors.count(name))
        throw Error(fmt::format("{}: tensor '{}' is also in {}", (dir / f).string(), name, w.file_of[name]));
      w.file_of[name] = (dir / f).string();
      w.tensors.emplace(name, std::move(tensor));
    }
  }
  return w;
}

// Old BERT checkpoints name LayerNorm parameters gamma / beta (transformers renames them on load).
std::string modern_name(std::string name) {
  auto replace_suffix = [&](const std::string& from, const std::string& to) {
    if (name.size() >= from.size() && name.compare(name.size() - from.size(), from.size(), from) == 0 &&
        name.find("LayerNorm") != std::string::npos)
      name = name.substr(0, name.size() - from.size()) + to;
  };
  replace_suffix(".gamma", ".weight");
  replace_suffix(".beta", ".bias");
  return name;
}

bool is_float(st::DType d) {
  return d == st::DType::F32 || d == st::DType::F16 || d == st::DType::BF16 || d == st::DType::F64;
}

// Fills imported.params from the weight files through `table`; `prefix` is the model prefix the
// checkpoint uses ("transformer." / "bert." / ""), `ignored` the tensors read but not used.
void map_tensors(Imported& im, const WeightFiles& w, const std::vector<TensorMap>& table, const std::string& prefix,
                 const std::set<std::string>& ignored, const fs::path& dir) {
  const ParamTable ptable = make_param_table(im.config);
  std::map<std::string, std::string> by_hf;  // modern unprefixed name -> name in the file
  for (const auto& [name, tensor] : w.tensors) {
    std::string n = name;
    if (!prefix.empty() && n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
    by_hf[modern_name(n)] = name;
  }
  std::set<std::string> used;
  for (const ParamSpec& p : ptable.specs) im.params[p.name].assign(p.numel, 0.0f);
  std::map<std::string, int> filled;  // normlab name -> how many parts (qkv: 3)
  for (const TensorMap& m : table) {
    auto it = by_hf.find(m.hf);
    if (it == by_hf.end())
      throw Error(fmt::format("{}: missing tensor '{}{}' (normlab parameter {})", dir.string(), prefix, m.hf, m.normlab));
    const st::Tensor& t = w.tensors.at(it->second);
    const std::string& file = w.file_of.at(it->second);
    used.insert(m.hf);
    const ParamSpec* spec = ptable.find(m.normlab);
    if (!spec) throw Error(fmt::format("internal: no normlab parameter {}", m.normlab));
    if (!is_float(t.dtype))
      throw Error(fmt::format("{}: tensor '{}' is {}, not a floating-point type", file, it->second, st::dtype_name(t.dtype)));
    std::vector<int64_t> want = spec->shape;
    if (m.layout == Layout::Transposed) want = {spec->shape[1], spec->shape[0]};
    if (m.layout == Layout::QkvPart) {
      want = spec->shape;
      want[0] /= 3;
    }
    if (t.shape != want)
      throw Error(fmt::format("{}: tensor '{}' has shape {}, expected {} (from config.json)", file, it->second,
                              st::shape_text(t.shape), st::shape_text(want)));
    const std::vector<float> v = t.to_f32();
    std::vector<float>& dst = im.params[m.normlab];
    if (m.layout == Layout::Same) {
      dst = v;
    } else if (m.layout == Layout::Transposed) {  // Conv1D (in, out) -> Linear (out, in)
      const int64_t rows = want[0], cols = want[1];
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[size_t(c) * rows + r] = v[size_t(r) * cols + c];
    } else {  // rows part*C .. (part+1)*C of the fused qkv
      std::copy(v.begin(), v.end(), dst.begin() + size_t(m.part) * v.size());
    }
    filled[m.normlab]++;
  }
  for (const ParamSpec& p : ptable.specs)
    if (!filled.count(p.name)) throw Error(fmt::format("internal: normlab parameter {} has no source tensor", p.name));
  // everything else in the files must be known: a tied copy of the embedding, or listed as ignored
  for (const auto& [hf_name, file_name] : by_hf) {
    if (used.count(hf_name)) continue;
    if (ignored.count(hf_name)) continue;
    throw Error(fmt::format("{}: unexpected tensor '{}' (not part of a {} that normlab represents)",
                            w.file_of.at(file_name), file_name, im.architecture));
  }
}

// A tied output matrix stored anyway must equal the word embedding (else the model is untied).
void check_tied(const WeightFiles& w, const std::string& name, const std::vector<float>& wte, const fs::path& dir) {
  auto it = w.tensors.find(name);
  if (it == w.tensors.end()) return;
  const std::vector<float> v = it->second.to_f32();
  if (v != wte)
    throw Error(fmt::format("{}: '{}' differs from the word embedding: an untied output layer, which normlab "
                            "does not represent (its output embedding is tied)",
                            dir.string(), name));
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

static Imported read_dir(const std::string& dir, bool with_weights) {
  const fs::path d(dir), cfg_path = d / "config.json";
  if (!fs::is_directory(d)) throw Error(fmt::format("{}: not a directory", dir));
  if (!fs::exists(cfg_path))
    throw Error(fmt::format("{}: no config.json (a Hugging Face model directory holds config.json and "
                            "model.safetensors; {})",
                            dir, directory_hint(dir)));
  const json j = read_json(cfg_path);
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", cfg_path.string()));
  ConfigReader r{j, cfg_path.string()};
  const std::string type = r.string("model_type", "");
  if (type.empty()) throw Error(fmt::format("{}: no \"model_type\"", cfg_path.string()));
  if (type != "gpt2" && type != "bert")
    throw Error(fmt::format("{}: model_type \"{}\" is not supported (normlab reads \"gpt2\" and \"bert\")",
                            cfg_path.string(), type));
  WeightFiles w;
  if (with_weights) w = read_weights(d);
  const WeightFiles* weights = with_weights ? &w : nullptr;
  return type == "gpt2" ? import_gpt2(r, weights, d) : import_bert(r, weights, d);
}

Imported read_model_dir(const std::string& dir) {
  return naming_json_errors(dir, [&] { return read_dir(dir, true); });
}

ModelConfig read_model_dir_config(const std::string& dir) {
  return naming_json_errors(dir, [&] { return read_dir(dir, false).config; });
}

std::unique_ptr<Model<float>> load_model_dir(const std::string& dir, bool quiet) {
  Imported im = read_model_dir(dir);
  for (const auto& [name, v] : im.params)  // a NaN or Inf weight is named, not trained on or measured
    for (size_t i = 0; i < v.size(); i++)
      if (!std::isfinite(v[i]))
        throw Error(fmt::format("{}: tensor '{}' holds a non-finite value ({}) at flat index {}", dir, name, v[i], i));
  auto model = std::make_unique<Model<float>>(im.config, Model<float>::Unset{});
  for (const ParamSpec& p : model->table().specs) {
    const std::vector<float>& v = im.params.at(p.name);
    std::copy(v.begin(), v.end(), model->params().begin() + long(p.offset));
  }
  if (!quiet)
    for (const auto& note : im.notes) fmt::print(stderr, "normlab: {}: {}\n", dir, note);
  return model;
}

// ---------------------------------------------------------------------------------------------
// Export

std::optional<std::string> export_refusal(const ModelConfig& c) {
  std::vector<std::string> why;
  const bool all = [&] {
    for (int l = 1; l < c.n_layers; l++)
      if (c.placement_of(l) != c.placement_of(0)) return false;
    return true;
  }();
  if (c.norm != NormKind::LayerNorm) why.push_back(fmt::format("norm is {} (GPT-2 and BERT use LayerNorm)", to_string(c.norm)));
  if (!c.residual) why.push_back("residual = false");
  if (!c.mlp) why.push_back("mlp = false (attention-only blocks)");
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

std::string write_model_dir(const std::string& dir, const Model<float>& model, bool overwrite) {
  const ModelConfig& c = model.config();
  if (auto why = export_refusal(c)) throw Error(fmt::format("cannot export to Hugging Face: {}", *why));
  const fs::path d(dir);
  std::error_code ec;
  if (fs::exists(d) && !fs::is_directory(d)) throw Error(fmt::format("{}: exists and is not a directory", dir));
  for (const char* f : {"config.json", "model.safetensors", "model.safetensors.index.json"})
    if (!overwrite && fs::exists(d / f))
      throw Error(fmt::format("{}: already holds {}; pass --force to replace it", dir, f));
  fs::create_directories(d, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the directory ({})", dir, ec.message()));

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
      if (m.layout == Layout::QkvPart) {
        auto [ptr, spec] = param(m.normlab);
        const size_t part = spec->numel / 3;
        std::vector<int64_t> shape = spec->shape;
        shape[0] /= 3;
        views.push_back({name, st::DType::F32, shape, ptr + part * size_t(m.part)});
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
  st::write((d / "model.safetensors").string(), views, {{"format", "pt"}}, overwrite);
  write_file_atomic((d / "config.json").string(), dump_json(config, 2) + "\n");
  return arch;
}

}  // namespace normlab::hf
