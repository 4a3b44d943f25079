// hf.h: Hugging Face model directories in and out. A directory holding `config.json` and
// `model.safetensors` (or a sharded `model.safetensors.index.json`) of a GPT-2 (`GPT2LMHeadModel`,
// `GPT2Model`), BERT (`BertModel`, `BertForMaskedLM`, `BertForPreTraining`), Llama
// (`LlamaForCausalLM`) or Qwen2 (`Qwen2ForCausalLM`) becomes a normlab model whose forward pass is
// the same function; a normlab model that is exactly one of them is written back as such a
// directory (hf.cpp: GPT-2 and BERT; hf_llama.cpp: the Llama family; hf_common: what they share). Nothing is approximated: an architecture, option or tensor
// that normlab does not represent exactly is refused with an Error naming it. The name mapping is
// documented in docs/MODEL.md ("Hugging Face checkpoints").
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/model.h"

namespace normlab::hf {

// A directory to read as a Hugging Face model directory: any directory but a normlab run directory
// (whose config.json sits beside metrics.jsonl and checkpoint.safetensors, and which stands for the
// checkpoint inside it). What every command that takes a checkpoint checks first.
bool is_model_dir(const std::string& path);

struct Imported {
  ModelConfig config;
  std::string architecture;                     // e.g. "BertModel"
  std::map<std::string, std::vector<float>> params;  // normlab parameter name -> values
  std::vector<std::string> notes;               // what was read but deliberately not used, and why
};

// Reads and checks config.json and every weight file; Error naming the file and the problem.
Imported read_model_dir(const std::string& dir);

// The config only (config.json is read and checked; the weights are not read: loading them checks
// every tensor).
ModelConfig read_model_dir_config(const std::string& dir);

// A model built from the directory (notes printed to stderr unless quiet).
std::unique_ptr<Model<float>> load_model_dir(const std::string& dir, bool quiet = false, bool forward_only = false);

// The same from memory: config.json's content and the tensors of a state dict (Hugging Face names,
// any float dtype), read with the same checks; `what` names the source in every message (the Python
// module's from_torch: "the transformers model GPT2LMHeadModel").
std::unique_ptr<Model<float>> load_model_state(const nlohmann::json& config,
                                               std::map<std::string, safetensors::Tensor> tensors,
                                               const std::string& what, bool quiet = false);

// Why a normlab config cannot be written as a Hugging Face model (nullopt: it can).
std::optional<std::string> export_refusal(const ModelConfig& cfg);

// Writes config.json and model.safetensors of `model` into `dir` (created if absent). Refuses
// (Error, nothing written) if export_refusal says so, or if dir holds a config.json or
// model.safetensors and overwrite is false. Returns the architecture written.
std::string write_model_dir(const std::string& dir, const Model<float>& model, bool overwrite);

}  // namespace normlab::hf
