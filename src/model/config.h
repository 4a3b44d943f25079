// config.h: the one typed model config. Every field has its default and reason beside it; derived
// sizes are methods; validate() reports every violation in one message. The exact model it
// describes is in docs/MODEL.md.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace normlab {

enum class Arch { Gpt, Encoder };
enum class NormKind { LayerNorm, RMSNorm };
enum class Activation { Gelu, GeluExact, Relu };
// What turns the last stream into logits: the tied output embedding (GPT-2), BERT's masked-LM head
// (dense + activation + norm, then the tied embedding and an output bias), or nothing (a headless
// encoder such as BertModel: no logits and no loss).
enum class Head { Tied, Mlm, None };
enum class Placement { Post, Pre, Sandwich, PrePost, DeepNorm, None };
enum class InitScheme { Auto, Normal, Gpt2, Xavier, DeepNet };

// Byte-level tokens are 0..255; the encoder's mask token follows them.
inline constexpr int kByteVocab = 256;
inline constexpr int kMaskToken = 256;

struct ModelConfig {
  Arch arch = Arch::Gpt;             // gpt: causal next-token loss; encoder: BERT masked tokens
  int d_model = 128;                 // small enough to train in minutes on 2 cores
  int n_heads = 4;                   // head size 32
  int n_layers = 4;
  std::optional<int> d_ff;           // unset: 4 * d_model, as GPT-2 and the original Transformer
  std::optional<int> vocab;          // unset: 256 bytes (gpt), 257 with the mask token (encoder)
  int seq_len = 128;                 // rows of the learned position table (maximum T)
  NormKind norm = NormKind::LayerNorm;
  double eps = 1e-5;                 // PyTorch's LayerNorm default; 0 allowed for analysis
  Activation activation = Activation::Gelu;  // gelu: tanh form, as GPT-2; gelu_exact: erf form, as BERT
  int type_vocab = 0;                // rows of a token-type (segment) embedding added to the input, as
                                     // BERT's 2; 0: none
  bool embed_norm = false;           // a norm of the embedding sum before the first block (BERT)
  Head head = Head::Tied;            // tied: GPT-2's; mlm: BERT's masked-LM head; none: headless
  std::vector<Placement> placement = {Placement::Pre};  // one entry for all layers, or one per layer
  bool residual = true;              // false: no skip path at all (alpha = 0)
  bool mlp = true;                   // false: attention-only blocks (the pure-attention ablation)
  InitScheme init = InitScheme::Auto;  // auto: deepnet if any layer is deepnorm, else gpt2
  double init_std = 0.02;            // GPT-2's
  double dropout = 0.0;              // on embeddings and branch outputs; 0 for exact comparisons
  long seed = 1337;                  // initialization seed

  int head_size() const { return d_model / n_heads; }
  int ff() const { return d_ff.value_or(4 * d_model); }
  int vocab_size() const { return vocab.value_or(arch == Arch::Encoder ? kByteVocab + 1 : kByteVocab); }
  Placement placement_of(int layer) const;
  // Scale of the skip path: 1, (2L)^(1/4) for deepnorm, 0 without residual.
  double residual_alpha(int layer) const;
  // DeepNet's initial gain for value, output and FFN weights: (8L)^(-1/4).
  double deepnet_beta() const;
  bool has_final_norm() const;
  bool has_logits() const { return head != Head::None; }
  InitScheme resolved_init() const;
  bool causal() const { return arch == Arch::Gpt; }
  // Sub-layer i (i = 2l attention, 2l + 1 MLP) exists: every attention one, the MLP ones if mlp.
  bool has_sublayer(int i) const { return i % 2 == 0 || mlp; }

  std::vector<std::string> violations() const;
  void validate() const;  // throws Error listing every violation
};

// Reads [model] keys strictly (unknown keys and ill-typed values are errors, all reported at once).
ModelConfig model_config_from_json(const nlohmann::json& obj, const std::string& where);
// Every key explicit: placement as a list, d_ff and vocab as numbers, init resolved.
nlohmann::json model_config_to_json(const ModelConfig& cfg);

const char* to_string(Arch);
const char* to_string(NormKind);
const char* to_string(Activation);
const char* to_string(Placement);
const char* to_string(InitScheme);
const char* to_string(Head);
std::optional<Placement> placement_from_string(const std::string&);

}  // namespace normlab
