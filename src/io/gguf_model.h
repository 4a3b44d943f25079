// gguf_model.h: a GGUF file (llama.cpp's format) as a normlab model (its tokenizer: gguf_tokenizer.h). The
// llama architecture (Llama, SmolLM2, TinyLlama, Mistral, ...: pre-RMSNorm, RoPE, SwiGLU, grouped-query
// attention, no biases), qwen2 (the same with q, k, v biases), qwen3 (no biases, q and k normalized per
// head), gemma (GeGLU, the embedding times sqrt(d)), gemma2 (the sandwich, soft caps, a sliding window) and
// gemma3 (gemma2's block with QK-norm and local layers of their own RoPE base) map exactly onto a normlab
// config (sequences capped at a sliding window, where it masks nothing); its tensors are dequantized to
// float32 (the quantized weights are what the model is: nothing further is approximated). Anything the
// file says that normlab does not represent (another architecture, yarn RoPE scaling, experts, an unknown
// <arch>.* key or tensor) is refused with an Error naming it. The mapping is documented in docs/MODEL.md
// ("GGUF files").
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/model.h"

namespace normlab::gguf {

struct Imported {
  ModelConfig config;
  std::map<std::string, std::vector<float>> params;  // normlab parameter name -> values
  std::vector<std::string> notes;                    // what was read but deliberately not used
};

// The config the metadata describes (checked; tensors are not read).
ModelConfig model_config(const File& f);
// The sliding window of a gemma2 or gemma3 file's local layers (0: none, or another architecture); the
// model's seq_len is capped at it.
int64_t sliding_window(const File& f);
// Config and every tensor, dequantized, renamed and checked (shapes, finite values, nothing left over).
Imported import_model(const File& f);
// A model built from a .gguf file (notes printed to stderr unless quiet).
// forward_only: without parameter gradients (Model::ForwardOnly).
std::unique_ptr<Model<float>> load_model(const std::string& path, bool quiet = false, bool forward_only = false);

}  // namespace normlab::gguf
