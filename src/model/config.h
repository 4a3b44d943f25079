// config.h: the one typed model config. Every field has its default and reason beside it; derived
// sizes are methods; validate() reports every violation in one message. The exact model it
// describes is in docs/MODEL.md.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

enum class Arch { Gpt, Encoder, EncDec };
// The norm kinds (model/norm_of.h: one case each): LayerNorm, RMSNorm, the point-wise DyT
// (gamma * tanh(alpha x) + beta) and Derf (gamma * erf(alpha x + s) + beta) that replace them, and
// L2, the projection onto the unit sphere x / |x| with no parameters (nGPT's), and SSNorm, RMSNorm
// with one learned scalar gain instead of a gain per channel (Outlier-Safe Pre-Training).
enum class NormKind { LayerNorm, RMSNorm, DyT, Derf, L2, SSNorm };
// The feed-forward activation: element-wise (gelu, gelu_exact, relu) or gated (swiglu, geglu: the fc
// projection holds gate and up rows, model/activation_of.h).
enum class Activation { Gelu, GeluExact, Relu, SwiGlu, GeGlu };
// How a token's position enters: a learned table wpe added to the embedding (GPT-2, BERT), rotary
// embeddings of the self-attention's queries and keys (RoPE: Llama and its family; ops/rope.h), or
// nothing (a causal model can still infer positions).
enum class Positions { Learned, Rope, None };
// Which linear projections of the blocks have a bias: all (GPT-2, BERT), only the query, key and
// value maps (Qwen2), or none (Llama, OLMo). The MLM head's dense layer always has one.
enum class LinearBias { All, Qkv, None };
// QK-norm (model/qk_norm.h): the self-attention's queries and keys (and, with v_norm, values) each go
// through a norm of kind model.norm before RoPE: per head (a gain of head_size shared by the heads:
// Qwen3, OLMo-core, HybridNorm) or over the whole projection (a gain of the projection's width:
// OLMo 2), or not at all.
enum class QkNorm { None, Heads, Whole };
// Gated attention (Qiu et al. 2025, arXiv 2505.06708; their code's headwise_attn_output_gate and
// elementwise_attn_output_gate, Qwen3-Next's output gate): each self-attention's output, before the
// output projection, multiplied by sigmoid(h W_g^T (+ b_g)), h the sub-layer's input (what the q, k, v
// maps read): one gate per head (headwise) or per channel of the heads (elementwise), or none.
enum class AttnGate { None, Headwise, Elementwise };
// Hyper-connections (model/hyper.h): the residual stream widened to n streams that each sub-layer
// reads a mix of and writes back into. hc: Zhu et al.'s dynamic form (2409.19606; lucidrains/
// hyper-connections), hc_static: its static form, mhc: DeepSeek's manifold-constrained form
// (2512.24880; MaxText's layers/mhc.py), the residual mix projected onto the doubly stochastic matrices;
// mhc_lite: mHC-lite (2601.05732; MaxText's enable_mhc_lite), the mix a convex combination of the n!
// permutation matrices, doubly stochastic exactly. attn_res: Attention Residuals (Kimi, 2603.15031; Kimi
// K3's attn_res_aggregate), each sub-layer's input a softmax over depth of the embedding and the
// earlier blocks' outputs, one stream per block.
enum class HyperMix { None, Hc, HcStatic, Mhc, MhcLite, AttnRes };
// What turns the last stream into logits: the tied output embedding (GPT-2), BERT's masked-LM head
// (dense + activation + norm, then the tied embedding and an output bias), nothing (a headless
// encoder such as BertModel: no logits and no loss), or an output matrix of its own, lm_head
// (untied, as most Llama-family models).
enum class Head { Tied, Mlm, None, Untied };
// The normalization method of a layer (docs/MODEL.md "Methods"; one entry each in model/methods.cpp).
enum class Placement { Post, Pre, Sandwich, PrePost, DeepNorm, None, Admin, ReZero, SkipInit, LayerScale, TFixup, ResiDual,
                       Peri, Reordered, Lns, HybridNorm, HybridNormPre, NGpt };
enum class InitScheme { Auto, Normal, Gpt2, Xavier, DeepNet, TFixup };
// How Admin's omega starts: closed forms O(log n), O(1) (sqrt S), plain Post-LN (1), or profiled on
// the first training batch.
enum class AdminInit { Log, Sqrt, One, Profile };
enum class Shortcut;  // model/methods.h
// The kinds of sub-layer: self-attention, cross-attention (decoder of an encdec), feed-forward.
enum class Sublayer { Attn, Cross, Mlp };
// One sub-layer slot of the model: slot i of a gpt or encoder is layer i / 2, attention then MLP
// (present = false for the MLP of an attention-only model); an encdec has its encoder's 2N slots,
// then 3 per decoder layer (self, cross, MLP). layer is the global layer (decoder layers follow the
// encoder's).
struct Slot {
  int layer = 0;
  Sublayer kind = Sublayer::Attn;
  bool present = true;
  bool encoder = false;  // in the encoder stack (an encoder-only model's every slot)
};

// Byte-level tokens are 0..255; the encoder's mask token follows them.
inline constexpr int kByteVocab = 256;
inline constexpr int kMaskToken = 256;

// The largest model normlab builds (parameters: 2.1 G, the size of the 0.5-2 B models people open on
// a laptop; weights and gradients are 8 bytes each, with AdamW's moments 16: 34 GB, refused by the
// memory check when a machine has less) and the largest activation footprint of one sequence. Checked
// by violations(), so no config (a file, a checkpoint's metadata, --set) can make normlab allocate
// beyond them.
inline constexpr size_t kMaxParams = size_t(1) << 31;
inline constexpr double kMaxSequenceActivationBytes = 64e9;
// The most layers a stack may have (model.n_layers, model.dec_layers).
inline constexpr int kMaxLayers = 4096;
// The largest vocabulary (model.vocab, model.src_vocab): every token id normlab accepts is below it.
inline constexpr int kMaxVocab = 1 << 24;
// seq_len of a RoPE model imported from a longer context (GGUF context_length, Hugging Face
// max_position_embeddings): RoPE has no table, and the cap keeps the activation limit above.
inline constexpr int kMaxImportedSeqLen = 4096;

struct ModelConfig {
  Arch arch = Arch::Gpt;             // gpt: causal next-token loss; encoder: BERT masked tokens;
                                     // encdec: the original Transformer (source -> target)
  int d_model = 128;                 // small enough to train in minutes on 2 cores
  int n_heads = 4;                   // head size 32
  std::optional<int> head_dim;       // HS, each attention head's width; unset: d_model / n_heads
                                     // (Gemma 2, Qwen3: n_heads HS != d_model)
  std::optional<int> n_kv_heads;     // key-value heads (grouped-query attention: each shared by
                                     // n_heads / n_kv_heads query heads; 1: multi-query); unset: n_heads
  int n_layers = 4;                  // encdec: the encoder's layers N
  std::optional<int> dec_layers;     // encdec: the decoder's layers M; unset: N
  bool shared_embeddings = true;     // encdec: one wte for source, target and output (Vaswani et al.)
  std::optional<int> src_vocab;      // encdec without shared embeddings: rows of enc.wte; unset: vocab
  AdminInit admin_init = AdminInit::Log;  // Admin's omega at construction (train profiles with "profile")
  std::optional<int> d_ff;           // unset: 4 * d_model, as GPT-2 and the original Transformer
  std::optional<int> vocab;          // unset: 256 bytes (gpt), 257 with the mask token (encoder),
                                     // 258 with BOS and EOS (encdec)
  int seq_len = 128;                 // rows of the learned position table (maximum T)
  NormKind norm = NormKind::LayerNorm;
  double eps = 1e-5;                 // PyTorch's LayerNorm default; 0 allowed for analysis
  double norm_alpha = 0.5;           // dyt, derf: every site's initial alpha (DyT's default for
                                     // non-LLM models; its LLaMA runs used 0.2-0.8 by width and site)
  std::optional<double> norm_alpha_attn;  // dyt, derf: the initial alpha of each self-attention's input
                                          // norm (DyT's LLaMA recipe: 0.8 there, 0.2 elsewhere at d =
                                          // 4096); unset: norm_alpha
  bool norm_bias = true;             // LayerNorm, DyT and Derf sites hold a bias beta; false: none (DyT's
                                     // LLaMA runs: gamma tanh(alpha x); bias-free LayerNorm)
  Activation activation = Activation::Gelu;  // gelu: tanh form, as GPT-2; gelu_exact: erf form, as BERT;
                                             // swiglu (Llama), geglu (Gemma): gated, fc has 2 d_ff rows
  LinearBias bias = LinearBias::All;  // all | qkv | none: the blocks' linear biases (above)
  Positions positions = Positions::Learned;  // learned | rope | none (above)
  QkNorm qk_norm = QkNorm::None;     // none | heads | whole (above); a method that asks for QKV-norm
                                     // (hybridnorm) gets "heads" when this is none
  bool v_norm = false;               // the values too, in qk_norm's layout (HybridNorm's QKV-norm)
  AttnGate attn_gate = AttnGate::None;  // none | headwise | elementwise (above); self-attention only
  bool attn_sink = false;            // a learned sink logit per query head in every self-attention's softmax
                                     // (gpt-oss; ops/attention.h): parameters <layer>.attn.sinks (n_heads)
  HyperMix hyper = HyperMix::None;   // none | hc | hc_static | mhc | mhc_lite | attn_res: hyper-connections (above;
                                     // model/hyper.h)
  int hyper_streams = 4;             // n, the number of residual streams (the expansion rate), with hyper; attn_res:
                                     // attn_res_streams(), set by the config reader
  int attn_res_block = 1;            // attn_res: sub-layers per block (1: Full AttnRes, every sub-layer's output
                                     // a source; 2k: Kimi K3's attn_res_block_size = k layers)
  int sinkhorn_iters = 20;           // mhc: the Sinkhorn-Knopp iterations of the residual mix (MaxText's 20)
  double value_residual = 0.0;       // > 0: value residual learning (ResFormer, Zhou et al. 2410.17897): every
                                     // later self-attention of a stack uses v' = (1 - lambda) v + lambda v_1,
                                     // v_1 the values of the stack's first self-attention; 0: none
  bool qk_norm_affine = true;        // QK-norm sites hold a gain (and a bias where the kind has one);
                                     // false: weightless (PyTorch's elementwise_affine = False)
  double rope_base = 10000.0;        // RoPE: theta_i = rope_base^(-2i/R) (Llama 2's; Llama 3 5e5)
  double rope_fraction = 1.0;        // RoPE: the share of each head's dimensions rotated (partial
                                     // rotary, GPT-NeoX 0.25); R = 2 floor(rope_fraction HS / 2)
  double rope_scale = 1.0;           // RoPE: linear position scaling of the rope_base layers, angle
                                     // p theta_i / rope_scale (Gemma 3 4B and larger: 8 on its global layers)
  std::vector<double> rope_freq_factors;  // RoPE: a divisor f_i per frequency of the rope_base layers,
                                          // angle p theta_i / (rope_scale f_i), R/2 entries; empty: all 1
                                          // (Llama 3.1's "llama3" scaling, LongRoPE's and YaRN's frequencies,
                                          // a GGUF file's rope_freqs)
  double rope_mscale = 1.0;          // RoPE: cos and sin of the rope_base layers times m, so the R rotated
                                     // dimensions of q and k are scaled by m (their share of q.k by m^2) and
                                     // the others not (LongRoPE's and YaRN's attention factor); 1: none
  double rope_local_base = 0.0;      // > 0: the "local" layers (rope_local) rotate with this base instead
                                     // (Gemma 3: 1e4 on its sliding-window layers, rope_base 1e6 on the rest);
                                     // 0: one base for every layer
  int rope_global_every = 6;         // with rope_local_base: layer l is global when (l + 1) % this == 0
  int nope_every = 0;                // > 0: layer l rotates nothing (NoPE) when (l + 1) % this == 0 (SmolLM3:
                                     // every fourth layer; RoPE and NoPE layers interleaved); 0: none
  int type_vocab = 0;                // rows of a token-type (segment) embedding added to the input, as
                                     // BERT's 2; 0: none
  bool embed_norm = false;           // a norm of the embedding sum before the first block (BERT)
  double embed_scale = 1.0;          // the token embedding times this constant (Gemma: sqrt(d_model)); only
                                     // without learned positions and token types, so it scales the whole
                                     // embedding (the tied output matrix stays wte itself)
  bool embed_scale_learned = false;  // the scale is a parameter `embed_scale` (1) starting at embed_scale
                                     // (DyT's LLaMA recipe: a learned scalar after the embedding, sqrt(d))
  std::optional<double> attn_scale;  // the self-attention's factor on q.k; unset: 1 / sqrt(head_size)
                                     // (Gemma 2: query_pre_attn_scalar^(-1/2); muP: below)
  int mup_base_width = 0;            // > 0: the maximal update parametrization (muP, Yang et al.; microsoft/
                                     // mup) with this d_model as the base, m = d_model / base: hidden
                                     // matrices start at 1/sqrt(m) of their init's scale and take m times
                                     // smaller Adam steps, the logits are divided by m, the scores scale as
                                     // 1/head_size (the head count fixed); 0: the standard parametrization
  int completep_base_depth = 0;      // > 0: CompleteP (Dey et al. 2025, 2505.01618; EleutherAI/nanoGPT-mup's
                                     // completep branch, alpha = 1) with this n_layers as the base depth,
                                     // m_L = n_layers / base: every branch is multiplied by 1 / m_L and
                                     // AdamW's epsilon by 1 / m_L (1 / (m_L m) with muP); the init has no
                                     // depth term (auto resolves to normal); 0: off
  double attn_softcap = 0.0;         // > 0: scores <- c tanh(scores / c) after the scale, before the mask
                                     // (Gemma 2's attention soft-capping, c = 50); 0: none
  double logit_softcap = 0.0;        // > 0: logits <- c tanh(logits / c) before the softmax (Gemma 2's
                                     // final soft-capping, c = 30); 0: none
  Head head = Head::Tied;            // tied: GPT-2's; mlm: BERT's masked-LM head; none: headless;
                                     // untied: logits = x lm_head^T (Llama's)
  std::vector<Placement> placement = {Placement::Pre};  // one entry for all layers, or one per layer
  bool residual = true;              // false: no skip path at all (alpha = 0)
  bool mlp = true;                   // false: attention-only blocks (the pure-attention ablation)
  InitScheme init = InitScheme::Auto;  // auto: deepnet if any layer is deepnorm, else gpt2
  double init_std = 0.02;            // GPT-2's
  double dropout = 0.0;              // on embeddings and branch outputs; 0 for exact comparisons
  long seed = 1337;                  // initialization seed

  bool hyper_connected() const { return hyper != HyperMix::None; }
  int n_streams() const { return hyper_connected() ? hyper_streams : 1; }  // residual streams between sub-layers
  // attn_res: the embedding's stream and one per block of attn_res_block sub-layers (of 2 n_layers)
  int attn_res_streams() const { return attn_res_block >= 1 ? (2 * n_layers - 1) / attn_res_block + 2 : 0; }
  int head_size() const { return head_dim.value_or(d_model / n_heads); }
  // A, the width of the self-attention's queries and of its output (n_heads HS): d_model unless
  // head_dim says otherwise. The output projection maps A back to d_model.
  int attn_width() const { return n_heads * head_size(); }
  bool wide_heads() const { return attn_width() != d_model; }
  // The factor on q.k (attn_scale, or 1 / sqrt(head_size)), and whether the scores are the usual
  // q.k / sqrt(head_size) with no soft cap (what the closed-form Jacobians and the bounds assume).
  // (nGPT: sqrt(head_size), its unit-length q and k scaled by s_qk)
  double attention_scale() const {
    if (attn_scale) return *attn_scale;
    if (on_sphere()) return std::sqrt(double(head_size()));
    // muP: sqrt(HS_base) / HS, HS_base = HS / m (the base has the same heads): 1 / sqrt(HS) at the base
    return 1.0 / std::sqrt(double(head_size())) / std::sqrt(mup_width_mult());
  }
  // CompleteP's constant branch multiplier 1 / m_L = completep_base_depth / n_layers (1 without it)
  double branch_multiplier() const { return completep_base_depth > 0 ? double(completep_base_depth) / n_layers : 1.0; }
  // muP's width multiplier m = d_model / mup_base_width (1 without muP)
  double mup_width_mult() const { return mup_base_width > 0 ? double(d_model) / mup_base_width : 1.0; }
  // nGPT (placement ngpt, methods.h Method::sphere): the stream, the embeddings and every matrix
  // on the unit sphere; every layer has it or none.
  bool on_sphere() const;
  bool plain_scores() const {
    return attn_softcap == 0.0 && attention_scale() == 1.0 / std::sqrt(double(head_size()));
  }
  int kv_heads() const { return n_kv_heads.value_or(n_heads); }
  // Columns of the self-attention's fused projection: q (A), k and v (kv_heads head_size each).
  int qkv_width() const { return attn_width() + 2 * kv_heads() * head_size(); }
  // The self-attention's gate width G: n_heads (headwise), attn_width (elementwise), or 0 (no gate)
  int attn_gate_width() const {
    return attn_gate == AttnGate::Headwise ? n_heads : attn_gate == AttnGate::Elementwise ? attn_width() : 0;
  }
  // RoPE's rotated dimensions per head, R (even); 0 unless positions = rope.
  int rope_dims() const;
  // Sets rope_fraction so that rope_dims() is R (an even R in [2, head size]: a file's rotated count).
  void set_rope_dims(int R);
  // Whether layer l rotates with rope_local_base (unscaled) rather than rope_base and rope_scale.
  bool rope_local(int l) const { return rope_local_base > 0 && (l + 1) % rope_global_every != 0; }
  // Whether layer l rotates q and k at all (positions = rope and not one of nope_every's layers).
  bool rope_at(int l) const { return nope_every == 0 || (l + 1) % nope_every != 0; }
  int ff() const { return d_ff.value_or(4 * d_model); }
  // Columns of the fc projection's output: d_ff, or 2 d_ff (gate and up) for a gated activation.
  int fc_width() const;
  int vocab_size() const;
  int src_vocab_size() const { return shared_embeddings ? vocab_size() : src_vocab.value_or(vocab_size()); }
  bool encdec() const { return arch == Arch::EncDec; }
  int decoder_layers() const { return encdec() ? dec_layers.value_or(n_layers) : 0; }
  int total_layers() const { return n_layers + decoder_layers(); }
  // The method of global layer `layer` (encdec: encoder layers 0..N-1, then the decoder's).
  Placement placement_of(int layer) const;
  bool encoder_layer(int layer) const { return arch == Arch::Encoder || (encdec() && layer < n_layers); }
  // Layers and residual sub-layers of the stack that holds `layer` (2 per encoder or gpt layer, 3 per
  // encdec decoder layer).
  int stack_depth(int layer) const;
  int stack_sublayers(int layer) const;
  // The skip path of `layer`'s sub-layers: its method's, or Shortcut::Zero when residual = false (the
  // one place that rule lives: no method keeps a shortcut, or a shortcut parameter, without residual).
  Shortcut shortcut_of(int layer) const;
  // Constant scale of the skip path: 1, DeepNet's alpha for deepnorm (docs/MODEL.md), 0 without residual.
  double residual_alpha(int layer) const;
  // DeepNet's initial gain beta for the value, output and FFN weights of `layer`'s stack.
  double deepnet_beta(int layer) const;
  // A stack of a two-stream method (ResiDual) carries x_d beside x and ends y = x + ln_f(x_d).
  bool dual_stack(int layer) const;
  // A final norm ends the decoder (or the only) stack; enc_final_norm ends an encdec's encoder.
  bool has_final_norm() const;
  bool has_enc_final_norm() const;
  // A norm ln_emb of the embedding sum before the first block: embed_norm (BERT), or the first layer's
  // method asks for one (Peri-LN).
  bool has_embed_norm() const;
  bool has_logits() const { return head != Head::None; }
  InitScheme resolved_init() const;
  // The decoder (or gpt) self-attention is causal; an encoder's is bidirectional.
  bool causal() const { return arch == Arch::Gpt; }
  // The QK-norm of layer `layer`'s self-attention (qk_norm, or "heads" where its method normalizes q,
  // k and v) and whether it covers the values.
  QkNorm qk_norm_of(int layer) const;
  bool v_norm_of(int layer) const;
  int n_slots() const { return 2 * n_layers + 3 * decoder_layers(); }
  Slot slot(int i) const;
  // Value residual learning (value_residual > 0): the slot whose values slot i's self-attention mixes
  // into its own (its stack's first present self-attention), or -1 (no mixing: off, not a
  // self-attention, or the first one itself); and whether slot i is such a source.
  int value_source(int i) const;
  bool is_value_source(int i) const;
  // The first slot of the decoder (encdec: 2N; gpt: 0; encoder: n_slots()).
  int first_decoder_slot() const { return encdec() ? 2 * n_layers : arch == Arch::Gpt ? 0 : n_slots(); }
  bool has_sublayer(int i) const { return slot(i).present; }

  std::vector<std::string> violations() const;
  void dual_violations(std::vector<std::string>& v) const;  // part of violations()
  void sphere_violations(std::vector<std::string>& v) const;  // part of violations(): nGPT's conditions
  void size_violations(std::vector<std::string>& v) const;  // part of violations(): the caps below
  // The activations one sequence of seq_len tokens implies (size_violations' estimate), and the
  // longest sequence within kMaxSequenceActivationBytes: an import caps seq_len there (a 1.7 B Llama
  // at 4,096 tokens would imply 129 GB).
  double sequence_activation_bytes(double T) const;
  int longest_sequence_within_limit() const;
  void validate() const;  // throws Error listing every violation
};

// Reads [model] keys strictly (unknown keys and ill-typed values are errors, all reported at once).
ModelConfig model_config_from_json(const nlohmann::json& obj, const std::string& where);
// The same, appending one line per problem to `errors` instead of throwing them (a run config
// reports them with its own; nothing is ever parsed back out of a message).
ModelConfig model_config_from_json(const nlohmann::json& obj, const std::string& where,
                                   std::vector<std::string>& errors);
// The config as JSON text (a checkpoint's metadata "config"): parse_json's depth guard, then the above;
// a library exception becomes an Error naming `where`.
ModelConfig model_config_from_text(std::string_view text, const std::string& where);
// Every key explicit: placement as a list, d_ff and vocab as numbers, init resolved.
nlohmann::json model_config_to_json(const ModelConfig& cfg);

const char* to_string(Arch);
const char* to_string(NormKind);
const char* to_string(Activation);
const char* to_string(Placement);
const char* to_string(InitScheme);
const char* to_string(Head);
const char* to_string(LinearBias);
const char* to_string(Positions);
const char* to_string(QkNorm);
const char* to_string(AttnGate);
const char* to_string(HyperMix);
const char* to_string(AdminInit);
const char* to_string(Sublayer);
std::optional<Placement> placement_from_string(const std::string&);

// A stack arrangement: a value of model.placement that names a whole stack's list of methods rather
// than a method of one layer. Given alone, it expands to that list when the config is read (once
// n_layers is known); checkpoints and results keep the list. Not for an encdec (two stacks: list a
// method per layer there).
//  - mixln (Mix-LN, Li et al. 2025): the first floor(L / 4) layers Post-LN, the rest Pre-LN (the
//    authors' alpha = 0.25: 3 of 12 layers, 6 of 24; a stack of fewer than 4 layers is all Pre-LN).
//  - hybridnorm* (HybridNorm*, Zhuo et al. 2025): the first layer hybridnorm_pre (Pre-Norm in both halves),
//    the rest hybridnorm.
struct Arrangement {
  const char* name;
  const char* summary;
  std::vector<Placement> (*expand)(int layers);
};
std::span<const Arrangement> all_arrangements();
inline constexpr double kMixLnPostFraction = 0.25;

}  // namespace normlab
