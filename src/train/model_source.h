// model_source.h: opening a model, with what belongs to it. Every command, study and the Python module
// open a model here: a normlab checkpoint (a .safetensors file or its run directory), a Hugging Face
// directory or a GGUF file gives its model, the tokenizer its text is read with (the directory's or
// the file's own, or data.tokenizer of the run that trained it; loaded once and kept) and, for a
// normlab run, the data it trained on (its config.json's [data]: the default input of the commands
// that read a model).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "io/tokenizer.h"
#include "model/model.h"
#include "train/run_config.h"

namespace normlab {

class ModelSource {
 public:
  ModelSource() = default;
  // A model made elsewhere (the Python module's from a state dict): `path` names it.
  ModelSource(std::unique_ptr<Model<float>> model, std::string path);

  std::string path;                        // as given
  std::unique_ptr<Model<float>> model;
  std::optional<DataConfig> run_data;      // a normlab run's [data]; none for other models

  // The tokenizer that reads this model's text: `given` ("bytes", "gpt2" or a path; refused when it is
  // not the tokenizer its run trained with) if set, else the model's own; the path ("" = bytes) for
  // load_tokenizer and load_corpus, and where it came from in words.
  std::string tokenizer_path(const std::string& given = "", std::string* where = nullptr) const;
  // That tokenizer, loaded on first use and kept for the source's life (nullopt: bytes).
  const std::optional<Tokenizer>& tokenizer(const std::string& given = "") const;

 private:
  struct Tokenizers {
    std::mutex lock;
    std::map<std::string, std::optional<Tokenizer>> by_given;
  };
  std::shared_ptr<Tokenizers> tokenizers_ = std::make_shared<Tokenizers>();
};

struct OpenOptions {
  bool forward_only = false;  // no parameter gradients (Model::ForwardOnly): for forward passes only
  bool quiet = false;         // no note of what a Hugging Face or GGUF import read
  // false: the source without its float32 model (`model` null: the caller reads the parameters another
  // way, e.g. straight into float64 with load_model_double); its tokenizer and run data as ever
  bool load = true;
};

// Opens `path` (train/checkpoint.h says which paths are models); Error naming the problem otherwise.
ModelSource open_model(const std::string& path, const OpenOptions& options = {});

}  // namespace normlab
