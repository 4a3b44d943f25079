// hf_common.cpp: the machinery every Hugging Face family shares (hf_common.h).
#include "io/hf_common.h"

#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::hf::detail {

json read_json(const fs::path& path) {
  return parse_json(read_file(path.string(), "file"), path.string());
}

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

void map_tensors(Imported& im, const WeightFiles& w, const std::vector<TensorMap>& table, const std::string& prefix,
                 const std::set<std::string>& ignored, const fs::path& dir) {
  const ParamTable ptable = make_param_table(im.config);
  std::map<std::string, std::string> by_hf;  // modern unprefixed name -> name in the file
  for (const auto& [name, tensor] : w.tensors) {
    std::string n = name;
    if (!prefix.empty() && n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
    by_hf[modern_name(n)] = name;
  }
  // every tensor the table reads is there, floating-point and of the shape config.json implies, before
  // any parameter is allocated: a config.json without its weights cannot make normlab allocate the
  // model it describes (the files bound what it allocates)
  std::set<std::string> used;
  std::vector<std::pair<const st::Tensor*, std::vector<int64_t>>> sources;  // per table entry: its tensor, shape
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
    if (m.layout == Layout::Rows) want[0] = m.rows;
    if (t.shape != want)
      throw Error(fmt::format("{}: tensor '{}' has shape {}, expected {} (from config.json)", file, it->second,
                              st::shape_text(t.shape), st::shape_text(want)));
    sources.emplace_back(&t, std::move(want));
  }
  for (const ParamSpec& p : ptable.specs) im.params[p.name].assign(p.numel, 0.0f);
  std::map<std::string, int> filled;  // normlab name -> how many parts (qkv: 3)
  for (size_t k = 0; k < table.size(); k++) {
    const TensorMap& m = table[k];
    const ParamSpec* spec = ptable.find(m.normlab);
    const std::vector<int64_t>& want = sources[k].second;
    std::vector<float> v = sources[k].first->to_f32();
    std::vector<float>& dst = im.params[m.normlab];
    if (m.layout == Layout::Same) {
      dst = std::move(v);
    } else if (m.layout == Layout::Transposed) {  // Conv1D (in, out) -> Linear (out, in)
      const int64_t rows = want[0], cols = want[1];
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[size_t(c) * rows + r] = v[size_t(r) * cols + c];
    } else {  // rows row0 .. row0 + rows of a fused parameter ([q; k; v], [gate; up])
      const size_t row = spec->shape.size() > 1 ? size_t(spec->shape[1]) : 1;
      std::copy(v.begin(), v.end(), dst.begin() + long(size_t(m.row0) * row));
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

void check_tied(const WeightFiles& w, const std::string& name, const std::vector<float>& wte, const fs::path& dir) {
  auto it = w.tensors.find(name);
  if (it == w.tensors.end()) return;
  const std::vector<float> v = it->second.to_f32();
  if (v != wte)
    throw Error(fmt::format("{}: '{}' differs from the word embedding: an untied output layer, which normlab "
                            "does not represent (its output embedding is tied)",
                            dir.string(), name));
}

}  // namespace normlab::hf::detail
