// checkpoint.cpp: checkpoint save and strict load.
#include "train/checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fmt/format.h>

#include "io/gguf_model.h"
#include "io/hf.h"
#include "model/params.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/json_reader.h"

namespace normlab {

namespace st = safetensors;

static const char* kOptimizerPrefix = "optimizer.";

void save_checkpoint(const std::string& path, const Model<float>& model, AdamW* optimizer, long step,
                     bool overwrite, const std::map<std::string, std::string>& extra_metadata) {
  std::vector<st::TensorView> views;
  for (const ParamSpec& p : model.table().specs)
    views.push_back({p.name, st::DType::F32, p.shape, model.params().data() + p.offset});
  if (optimizer) {
    for (const ParamSpec& p : model.table().specs)
      views.push_back({kOptimizerPrefix + std::string("m.") + p.name, st::DType::F32, p.shape,
                       optimizer->m().data() + p.offset});
    for (const ParamSpec& p : model.table().specs)
      views.push_back({kOptimizerPrefix + std::string("v.") + p.name, st::DType::F32, p.shape,
                       optimizer->v().data() + p.offset});
  }
  std::map<std::string, std::string> meta = {
      {"config", model_config_to_json(model.config()).dump()},
      {"format", "normlab-checkpoint-1"},
      {"step", std::to_string(step)}};
  for (const auto& [key, value] : extra_metadata) meta[key] = value;
  st::write(path, views, meta, overwrite);
}

static ModelConfig config_of(const st::Index& f) {
  auto it = f.metadata.find("config");
  if (it == f.metadata.end())
    throw Error(fmt::format("{}: no model config in the metadata (key \"config\"); not a normlab "
                            "checkpoint?",
                            f.path));
  return model_config_from_text(it->second, f.path + ": metadata \"config\"");
}

std::string model_file_of(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "config.json", ec)) return path;
  std::string gguf_file;
  int ggufs = 0;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().extension() == ".gguf" && entry.is_regular_file(ec)) ggufs++, gguf_file = entry.path().string();
  return ggufs == 1 ? gguf_file : path;
}

// A normlab run directory (what `normlab train` writes) stands for the checkpoint inside it.
static std::string resolve(const std::string& given) {
  const std::string path = model_file_of(given);
  std::error_code ec;
  const std::filesystem::path inside = std::filesystem::path(path) / "checkpoint.safetensors";
  if (std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(inside, ec))
    return inside.string();
  if (std::filesystem::exists(std::filesystem::path(path) / "metrics.jsonl", ec))
    throw Error(fmt::format("'{}' is a run directory without a checkpoint yet (the run stopped before its first "
                            "step, or is still before it)", path));
  return path;
}

ModelConfig checkpoint_config(const std::string& given) {
  const std::string path = resolve(given);
  if (hf::is_model_dir(path)) return hf::read_model_dir_config(path);
  if (gguf::is_gguf(path)) return gguf::model_config(gguf::read(path));
  return config_of(st::read_index(path));
}

// Every parameter of the table is in the file with its shape, and nothing else is: checked from the
// header before the model is allocated, so a checkpoint's size bounds what its config makes normlab
// allocate (the file holds every weight).
static void check_params(const st::Index& f, const ParamTable& table) {
  for (const auto& [name, tensor] : f.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0) continue;
    if (!table.find(name))
      throw Error(fmt::format("{}: unexpected tensor '{}' (not a parameter of this model config)",
                              f.path, name));
  }
  for (const ParamSpec& p : table.specs) (void)f.expect(p.name, st::DType::F32, p.shape);
}

// Tensor `name` of the file read straight into dst (no copy of the file in memory: a big model's load
// holds the model only), every value finite: a NaN or Inf weight (or moment; a negative second moment)
// is named instead of giving NaN losses and tables.
static void read_finite(const st::Index& f, const std::string& name, float* dst, size_t numel, const char* what,
                        const char* consequence, bool nonnegative = false) {
  st::read_tensor(f, name, dst);
  for (size_t i = 0; i < numel; i++)
    if (!std::isfinite(dst[i]) || (nonnegative && dst[i] < 0))
      throw Error(fmt::format("{}: {} '{}' holds {} ({}) at flat index {}; {}", f.path, what, name,
                              std::isfinite(dst[i]) ? "a negative second moment" : "a non-finite value", dst[i], i,
                              consequence));
}

static void copy_params(const st::Index& f, Model<float>& model) {
  check_params(f, model.table());
  for (const ParamSpec& p : model.table().specs)
    read_finite(f, p.name, model.params().data() + p.offset, p.numel, "tensor",
                "a model with NaN or Inf weights gives no meaningful loss or measurement");
}

std::map<std::string, std::string> load_training_checkpoint(const std::string& path, Model<float>& model,
                                                            AdamW& optimizer) {
  const st::Index f = st::read_index(path);
  for (const ParamSpec& p : model.table().specs) {  // (every tensor there before any is read)
    const std::string m = kOptimizerPrefix + std::string("m.") + p.name, v = kOptimizerPrefix + std::string("v.") + p.name;
    if (!f.tensors.count(m) || !f.tensors.count(v))
      throw Error(fmt::format("{}: no optimizer state for '{}' (not a training checkpoint)", path, p.name));
    (void)f.expect(m, st::DType::F32, p.shape), (void)f.expect(v, st::DType::F32, p.shape);
  }
  copy_params(f, model);
  // a NaN or Inf moment would make the first step's update non-finite: named here, not found later as
  // a diverged run (a second moment is also never negative)
  for (const ParamSpec& p : model.table().specs) {
    read_finite(f, kOptimizerPrefix + std::string("m.") + p.name, optimizer.m().data() + p.offset, p.numel,
                "optimizer tensor", "the run cannot continue from this checkpoint");
    read_finite(f, kOptimizerPrefix + std::string("v.") + p.name, optimizer.v().data() + p.offset, p.numel,
                "optimizer tensor", "the run cannot continue from this checkpoint", /*nonnegative=*/true);
  }
  return f.metadata;
}

std::unique_ptr<Model<float>> load_model(const std::string& given, bool forward_only, bool quiet) {
  const std::string path = resolve(given);
  if (hf::is_model_dir(path)) return hf::load_model_dir(path, quiet, forward_only);
  if (gguf::is_gguf(path)) return gguf::load_model(path, quiet, forward_only);
  const st::Index f = st::read_index(path);
  const ModelConfig cfg = config_of(f);  // validated, sizes capped (ModelConfig::size_violations)
  check_params(f, make_param_table(cfg));  // before allocating: the file must hold every weight
  auto model = unset_model<float>(cfg, forward_only);  // every parameter is copied next
  copy_params(f, *model);
  return model;
}

std::unique_ptr<Model<double>> load_model_double(const std::string& given, bool forward_only, bool quiet) {
  const std::string path = resolve(given);
  if (hf::is_model_dir(path) || gguf::is_gguf(path)) {
    const std::unique_ptr<Model<float>> narrow = load_model(path, true, quiet);
    return model_with_params<double>(narrow->config(), narrow->params(), forward_only);
  }
  const st::Index f = st::read_index(path);
  const ModelConfig cfg = config_of(f);
  check_params(f, make_param_table(cfg));
  auto model = unset_model<double>(cfg, forward_only);
  std::vector<float> tensor;
  for (const ParamSpec& p : model->table().specs) {
    tensor.resize(p.numel);
    read_finite(f, p.name, tensor.data(), p.numel, "tensor",
                "a model with NaN or Inf weights gives no meaningful loss or measurement");
    std::copy(tensor.begin(), tensor.end(), model->params().begin() + long(p.offset));
  }
  return model;
}

void load_params(const std::string& given, Model<float>& model) {
  const std::string path = resolve(given);
  if (!hf::is_model_dir(path) && !gguf::is_gguf(path)) return copy_params(st::read_index(path), model);
  const std::map<std::string, std::vector<float>> params =
      gguf::is_gguf(path) ? gguf::import_model(gguf::read(path)).params : hf::read_model_dir(path).params;
  const ParamTable& table = model.table();
  for (const ParamSpec& p : table.specs) {
    auto it = params.find(p.name);
    if (it == params.end() || it->second.size() != p.numel)
      throw Error(fmt::format("{}: parameter '{}' does not match the model config", path, p.name));
    std::copy(it->second.begin(), it->second.end(), model.params().begin() + long(p.offset));
  }
  if (params.size() != table.specs.size())
    throw Error(fmt::format("{}: holds parameters the model config does not have", path));
}

}  // namespace normlab
