// hf_common.h: what the Hugging Face readers and writers of every family share (internal to
// src/io/hf*.cpp): typed access to config.json, the tensor name tables' form, the weight files of a
// directory (single or sharded safetensors) and the mapping of their tensors onto normlab
// parameters with every check (missing, unexpected, misshapen, non-float tensors).
#pragma once

#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/hf.h"
#include "io/safetensors.h"
#include "util/error.h"

namespace normlab::hf::detail {

namespace fs = std::filesystem;
namespace st = safetensors;
using nlohmann::json;

json read_json(const fs::path& path);

// Typed access to config.json with errors that name the file and the key.
struct ConfigReader {
  const json& j;
  std::string path;
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  // The key is there with the value null (transformers' "off" for an optional feature).
  bool null(const char* key) const { return j.contains(key) && j[key].is_null(); }
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

// The activation named by config.json's `key` (GPT-2 / BERT names).
Activation activation_from_hf(const ConfigReader& r, const char* key, const std::string& fallback);
// The one architecture config.json lists, if it is one of `known` (the first when none is listed).
std::string architecture_of(const ConfigReader& r, const std::vector<std::string>& known);

// Name tables: Hugging Face tensor -> normlab parameter.
enum class Layout { Same, Transposed, Rows };

struct TensorMap {
  std::string hf;       // name in the checkpoint, without the model prefix
  std::string normlab;  // parameter name
  Layout layout = Layout::Same;
  int64_t row0 = 0, rows = 0;  // Rows: the tensor is rows row0 .. row0 + rows of the parameter
};

struct WeightFiles {
  std::map<std::string, st::Tensor> tensors;  // every tensor of every shard
  std::map<std::string, std::string> file_of;  // tensor -> the file it came from (for messages)
};

WeightFiles read_weights(const fs::path& dir);

// Fills imported.params from the weight files through `table`; `prefix` is the model prefix the
// checkpoint uses ("transformer." / "bert." / "model." / ""), `ignored` the tensors read but not used.
void map_tensors(Imported& im, const WeightFiles& w, const std::vector<TensorMap>& table, const std::string& prefix,
                 const std::set<std::string>& ignored, const fs::path& dir);

// A tied output matrix stored anyway must equal the word embedding (else the model is untied).
void check_tied(const WeightFiles& w, const std::string& name, const std::vector<float>& wte, const fs::path& dir);

}  // namespace normlab::hf::detail
