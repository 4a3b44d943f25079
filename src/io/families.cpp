// families.cpp: the Llama-family rows (io/families.h), and the family a config is written as.
#include "io/families.h"

namespace normlab {

namespace {

using P = Placement;
using A = Activation;
using Q = QkNorm;
using B = FamilyBias;
using W = FamilyWindow;

// One row per family; what the rows do not say is Llama's (families.h's defaults).
const std::vector<LlamaFamily> kFamilies = {
    {.model_type = "llama", .architecture = "LlamaForCausalLM", .gguf = "llama", .gguf_interleaved = true},
    {.model_type = "mistral", .architecture = "MistralForCausalLM", .gguf = nullptr, .bias = B::None,
     .window = W::EveryLayer, .exported = false},
    {.model_type = "qwen2", .architecture = "Qwen2ForCausalLM", .gguf = "qwen2", .bias = B::Qkv},
    {.model_type = "qwen3", .architecture = "Qwen3ForCausalLM", .gguf = "qwen3", .qk_norm = Q::Heads,
     .bias = B::None, .rope_theta = 1e6, .head_dim = 128},
    {.model_type = "gemma", .architecture = "GemmaForCausalLM", .gguf = "gemma", .activation = A::GeGlu,
     .gemma = true, .tied = true, .head_dim = 256},
    {.model_type = "gemma2", .architecture = "Gemma2ForCausalLM", .gguf = "gemma2", .placement = P::Sandwich,
     .activation = A::GeGlu, .window = W::EveryOther, .gemma = true, .tied = true, .head_dim = 256,
     .query_pre_attn_scalar = 224, .attn_softcap = 50, .logit_softcap = 30, .gguf_layers_27b = 46},
    {.model_type = "gemma3_text", .architecture = "Gemma3ForCausalLM", .gguf = "gemma3", .placement = P::Sandwich,
     .activation = A::GeGlu, .qk_norm = Q::Heads, .bias = B::None, .window = W::LayerTypes, .gemma = true,
     .tied = true, .rope_theta = 1e6, .head_dim = 256, .local_every = 6, .query_pre_attn_scalar = 256,
     .gguf_layers_27b = 62},
    {.model_type = "olmo2", .architecture = "Olmo2ForCausalLM", .gguf = "olmo2", .placement = P::Reordered,
     .qk_norm = Q::Whole, .bias = B::None},
    {.model_type = "olmo3", .architecture = "Olmo3ForCausalLM", .gguf = nullptr, .placement = P::Reordered,
     .qk_norm = Q::Whole, .bias = B::None, .window = W::LayerTypes, .rope_theta = 5e5, .local_every = 4},
    {.model_type = "smollm3", .architecture = "SmolLM3ForCausalLM", .gguf = nullptr, .nope_layers = true,
     .tied = true},
    {.model_type = "phi3", .architecture = "Phi3ForCausalLM", .gguf = "phi3", .bias = B::None,
     .window = W::EveryLayer, .fused = true, .exported = false},
};

}  // namespace

const std::vector<LlamaFamily>& llama_families() { return kFamilies; }

const LlamaFamily* family_of_model_type(const std::string& model_type) {
  for (const LlamaFamily& f : kFamilies)
    if (model_type == f.model_type) return &f;
  return nullptr;
}

const LlamaFamily* family_of_gguf(const std::string& architecture) {
  for (const LlamaFamily& f : kFamilies)
    if (f.gguf && architecture == f.gguf) return &f;
  return nullptr;
}

// The exported row sharing the most of the block's features, weighed in this order: the placement,
// the activation, the QK-norm, two kinds of layer, NoPE layers, q, k, v biases alone.
const LlamaFamily& export_family(const ModelConfig& c) {
  const LlamaFamily* best = &kFamilies.front();
  int best_score = -1;
  for (const LlamaFamily& f : kFamilies) {
    if (!f.exported) continue;
    const int score = 32 * (f.placement == c.placement_of(0)) + 16 * (f.activation == c.activation) +
                      8 * (f.qk_norm == c.qk_norm) +
                      4 * ((f.window == FamilyWindow::LayerTypes) == (c.rope_local_base > 0)) +
                      2 * (f.nope_layers == (c.nope_every != 0)) +
                      1 * ((f.bias == FamilyBias::Qkv) == (c.bias == LinearBias::Qkv));
    if (score > best_score) best = &f, best_score = score;
  }
  return *best;
}

std::string model_type_list() {
  std::string out;
  for (const LlamaFamily& f : kFamilies) out += (out.empty() ? "\"" : ", \"") + std::string(f.model_type) + "\"";
  return out;
}

}  // namespace normlab
