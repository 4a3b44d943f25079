// own_tokenizer.cpp: a model's own tokenizer (own_tokenizer.h).
#include "train/own_tokenizer.h"

#include <filesystem>
#include <fmt/format.h>

#include "io/gguf.h"
#include "io/hf.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "util/error.h"

namespace normlab {

namespace {

// The tokenizer files a directory may hold (load_tokenizer's order).
bool holds_tokenizer(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "vocab.json", "encoder.json", "vocab.txt"})
    if (std::filesystem::is_regular_file(dir / name, ec)) return true;
  return false;
}

}  // namespace

std::string own_tokenizer_path(const std::string& model_path, const std::string& given, std::string* where) {
  const std::string checkpoint = model_file_of(model_path);  // a directory holding one GGUF file: that file
  std::string path = given, said = "--tokenizer";
  refuse_other_tokenizer(given, checkpoint);
  if (path == "bytes") return "";
  if (path.empty() && hf::is_model_dir(checkpoint) && holds_tokenizer(checkpoint)) {
    path = checkpoint;
    said = "the Hugging Face directory's tokenizer";
  }
  if (path.empty() && gguf::is_gguf(checkpoint)) {
    path = checkpoint;
    said = "the GGUF file's tokenizer";
  }
  if (const std::optional<DataConfig> data = run_data_of(checkpoint); path.empty() && data) {
    path = data->tokenizer;
    said = fmt::format("data.tokenizer '{}' of the run", path);
  }
  if (where) *where = said;
  return path == "gpt2" ? builtin_gpt2_tokenizer_dir() : path;
}

std::optional<Tokenizer> own_tokenizer(const std::string& checkpoint, const std::string& given, std::string* where) {
  std::string said;
  const std::string path = own_tokenizer_path(checkpoint, given, &said);
  if (where) *where = said;
  if (path.empty()) return std::nullopt;
  try {
    return load_tokenizer(path);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {} (give the model's tokenizer with --tokenizer)", said, e.what()));
  }
}

}  // namespace normlab
