// model_source.cpp: opening a model with its tokenizer and its run's data (train/model_source.h).
#include "train/model_source.h"

#include <fmt/format.h>

#include "train/checkpoint.h"
#include "train/own_tokenizer.h"
#include "util/error.h"

namespace normlab {

ModelSource::ModelSource(std::unique_ptr<Model<float>> m, std::string p) : path(std::move(p)), model(std::move(m)) {}

std::string ModelSource::tokenizer_path(const std::string& given, std::string* where) const {
  return own_tokenizer_path(path, given, where);
}

const std::optional<Tokenizer>& ModelSource::tokenizer(const std::string& given) const {
  std::lock_guard<std::mutex> hold(tokenizers_->lock);
  auto it = tokenizers_->by_given.find(given);
  if (it == tokenizers_->by_given.end()) it = tokenizers_->by_given.emplace(given, own_tokenizer(path, given)).first;
  return it->second;
}

ModelSource open_model(const std::string& given, const OpenOptions& options) {
  const std::string path = model_file_of(given);  // a directory holding one GGUF file is that file
  ModelSource source(options.load ? load_model(path, options.forward_only, options.quiet) : nullptr, path);
  source.run_data = run_data_of(path);
  return source;
}

}  // namespace normlab
