// own_tokenizer.h: which tokenizer reads a model's text: the one given, else the model's own (a
// Hugging Face directory's tokenizer files, a GGUF file's vocabulary, or data.tokenizer of the normlab
// run that made the checkpoint), else bytes. What `sample`, `theory --checkpoint` and the Python
// module read text with. (Apart from run_config.h, which the fuzz harnesses link: this reads the
// Hugging Face and GGUF formats.)
#pragma once

#include <optional>
#include <string>

#include "io/tokenizer.h"

namespace normlab {

// The tokenizer of a model's text: `given` ("bytes", "gpt2" or a path) if set (refused when it is
// not the run's), else the checkpoint's own; nullopt means bytes. `where` says which it was ("the
// GGUF file's tokenizer", ...).
std::optional<Tokenizer> own_tokenizer(const std::string& checkpoint, const std::string& given, std::string* where = nullptr);
// The same choice as a path for load_tokenizer / load_corpus ("gpt2" resolved), "" for bytes.
std::string own_tokenizer_path(const std::string& checkpoint, const std::string& given, std::string* where = nullptr);

}  // namespace normlab
