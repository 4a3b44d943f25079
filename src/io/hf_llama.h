// hf_llama.h: the Llama family of Hugging Face directories (internal to src/io/hf*.cpp; users call
// io/hf.h): the Llama family in (hf_llama.cpp lists it; config.json checked, every tensor mapped), and a
// normlab model that is exactly a Llama, Qwen2, Qwen3, OLMo 2, OLMo 3, Gemma, Gemma 2, Gemma 3 or SmolLM3 out. The mapping
// is in docs/MODEL.md.
#pragma once

#include "util/files.h"

#include <optional>
#include <string>

#include "io/hf_common.h"

namespace normlab::hf {

// weights null: the config only.
Imported import_llama(const detail::ConfigReader& r, const detail::WeightFiles* weights, const detail::fs::path& dir);
// Why a normlab config is not exactly a Llama-family model (nullopt: it is).
std::optional<std::string> llama_export_refusal(const ModelConfig& c);
// Writes config.json and model.safetensors into the stage `out` (hf.cpp commits it); returns the architecture
// (Olmo2ForCausalLM for the reordered block, Olmo3ForCausalLM for it with a RoPE base per kind of layer,
// Gemma3ForCausalLM for the sandwich with GeGLU and QK-norm, Gemma2ForCausalLM / GemmaForCausalLM for GeGLU with and
// without the sandwich, Qwen3ForCausalLM for per-head QK-norm, SmolLM3ForCausalLM for NoPE layers,
// Qwen2ForCausalLM for q, k, v biases only, else LlamaForCausalLM).
std::string write_llama(const StagedFiles& out, const Model<float>& model);

}  // namespace normlab::hf
