// families.h: the Llama-family models normlab reads and writes, one row per family (as
// model/methods.cpp holds one row per method): Hugging Face's model_type and class, llama.cpp's GGUF
// architecture, and how the family's block differs from Llama's (pre-RMSNorm, RoPE, SwiGLU, grouped-query
// attention). The Hugging Face import and export (io/hf_llama.cpp) and the GGUF import
// (io/gguf_model.cpp) read the row; a family that differs from Llama only in these values is one row.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace normlab {

// Where a family's linear layers have biases.
enum class FamilyBias {
  FromConfig,  // config.json's attention_bias and mlp_bias (both or neither: model.bias all or none)
  Qkv,         // q, k and v only (Qwen2)
  None,        // none (a config.json's attention_bias is refused)
};

// A sliding window: normlab's attention is full, so seq_len is capped at the window (where it masks
// nothing) on the layers that have one.
enum class FamilyWindow {
  None,        // full attention everywhere (a use_sliding_window = true is refused)
  EveryLayer,  // every layer (Mistral, Phi-3)
  EveryOther,  // every other layer (Gemma 2)
  LayerTypes,  // two kinds of layer, each with its RoPE: sliding ones and a full one every N (Gemma 3, OLMo 3)
};

struct LlamaFamily {
  const char* model_type;    // config.json's model_type
  const char* architecture;  // the transformers class
  const char* gguf;          // llama.cpp's general.architecture for it, or nullptr (normlab reads no GGUF of it)
  Placement placement = Placement::Pre;  // every layer's: Pre, Sandwich (a norm on each branch output too),
                                         // Reordered (OLMo 2's: norms on the branch outputs only)
  Activation activation = Activation::SwiGlu;
  QkNorm qk_norm = QkNorm::None;         // q and k RMS-normalized per head or over the whole projection
  FamilyBias bias = FamilyBias::FromConfig;
  FamilyWindow window = FamilyWindow::None;
  bool gemma = false;        // Gemma's: the embedding times sqrt(d) and every norm gain stored as w for 1 + w
  bool nope_layers = false;  // SmolLM3's: no RoPE on every N-th layer (no_rope_layers)
  bool fused = false;        // Phi-3's: q, k, v in one qkv_proj and gate, up in one gate_up_proj
  bool tied = false;         // tie_word_embeddings when config.json omits it
  double rope_theta = 10000.0;  // when config.json omits it
  int head_dim = 0;          // head_dim when config.json omits it (0: hidden_size / heads)
  int local_every = 0;       // LayerTypes: a full layer every N when config.json omits layer_types
  double query_pre_attn_scalar = 0;  // Gemma 2 and 3: scores times its ^(-1/2), when omitted (0: no such key)
  double attn_softcap = 0, logit_softcap = 0;  // Gemma 2: the soft caps when omitted
  bool exported = true;      // `normlab export` writes models as this family
  bool gguf_interleaved = false;  // GGUF: the converter permuted q and k rows to interleaved RoPE pairs
  int gguf_layers_27b = 0;   // GGUF: the layer count at which llama.cpp takes the 27B model's score scale
};

const std::vector<LlamaFamily>& llama_families();
// The row of a config.json's model_type, or of a GGUF file's architecture; nullptr if none.
const LlamaFamily* family_of_model_type(const std::string& model_type);
const LlamaFamily* family_of_gguf(const std::string& architecture);
// The family a normlab config is written as: the exported row whose block it has (its placement,
// activation, QK-norm, biases, NoPE layers and kinds of layer), else Llama's. llama_export_refusal
// says whether the config is exactly that family's.
const LlamaFamily& export_family(const ModelConfig& c);
// "\"llama\", \"qwen2\", ..." for messages.
std::string model_type_list();

}  // namespace normlab
