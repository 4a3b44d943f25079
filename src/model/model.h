// model.h: the Transformer (GPT, encoder, or the original encoder-decoder; GPT-2 and BERT exactly) with
// a per-layer normalization method, templated on the scalar type (float to train, double for
// finite-difference checks). Parameters, gradients and
// activations are planned once from (config, B, T); forward and backward allocate nothing.
// The math is docs/MODEL.md; the block reads like its table (see sublayer_forward).
#pragma once

#include "ops/gemm_backend.h"

#include <algorithm>
#include <cstdint>
#include <fmt/format.h>
#include <functional>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/qk_norm.h"
#include "model/stage.h"
#include "ops/attention.h"
#include "util/error.h"

namespace normlab {

// Activations of one sub-layer for the planned (B, T). Pointers alias where a site is absent
// (e.g. h == x_in without an input norm), so forward and backward read one uniform shape.
template <class S>
struct SublayerActs {
  S* x_in = nullptr;     // (B, T, C) stream entering the sub-layer
  S* h = nullptr;        // (B, T, C) ln_in(x_in), or x_in
  S* in_mean = nullptr;  // (B, T) LayerNorm statistics of ln_in (mean unused for RMSNorm)
  S* in_rstd = nullptr;
  S* hid = nullptr;      // (B, T, 3C) qkv | (B, T, C) cross query | (B, T, F) fc pre-activation
  S* qk_raw = nullptr;   // attn with QK-norm: the normalized parts' inputs, part-major (model/qk_norm.h)
  S* qk_mean = nullptr, * qk_rstd = nullptr;  // and their statistics
  S* kv = nullptr;       // (B, S, 2C) cross only: keys and values of the memory
  S* att = nullptr;      // (B, NH, T, T) attention | (B, NH, T, S) cross-attention probabilities
  S* mix = nullptr;      // (B, T, A) attention output before proj (gated: what proj reads) | (B, T, F) activation
  S* ungated = nullptr;  // attn with attn_gate: (B, T, A) the attention output before the gate ...
  S* gate = nullptr;     // ... and (B, T, G) the gate, sigmoid(h W_g^T + b_g)
  S* f = nullptr;        // (B, T, C) branch output F(h) (after dropout)
  S* g = nullptr;        // (B, T, C) ln_branch(f), or f
  S* br_mean = nullptr, * br_rstd = nullptr;
  S* r = nullptr;        // (B, T, C) omega * x_in + lambda * g
  S* out_mean = nullptr, * out_rstd = nullptr;
  S* x_out = nullptr;    // (B, T, C) ln_out(r), or r
  // nGPT (ops/sphere.h): 1 / |x_in| of the update's projection (B, T); attn: q | k after RoPE before
  // their projection (B, T, 2C) and 1 / |q_h|, 1 / |k_h| (B, T, 2 NH); mlp: fc's output before s_uv (B, T, FW)
  S* sc_rstd = nullptr;
  S* pre = nullptr, * pre_r = nullptr;
  // Hyper-connections (model.hyper, model/hyper.h): the streams entering (B, T, n, C) (the stage walk's x_in
  // is the branch input u read from them), their norm (B, T, n C) and its 1 / RMS, the mixing weights
  // (B, T, hyper_mix_width(n)) and their pre-activations (B, T, hyper_pre_width)
  S* hs_in = nullptr, * hn = nullptr, * hrstd = nullptr, * hmix = nullptr, * hpre = nullptr;
};

// The source side of an encoder-decoder batch: ids (B, S), mask (B, S) or null (0 = padding).
struct Source {
  const int32_t* ids = nullptr;
  int S = 0;
  const uint8_t* mask = nullptr;
};

template <class S>
class Model {
 public:
  // Validates the config (throws Error) and initializes the parameters with its scheme and seed.
  explicit Model(ModelConfig cfg);
  // The same with every parameter zero: for loaders that write every parameter next (a random
  // initialization of a 135M-parameter model costs seconds).
  struct Unset {};
  Model(ModelConfig cfg, Unset);
  // Unset and without parameter gradients, for forward passes only (an instrument's ablated copy of a
  // 135M-parameter model in double: 1 GB less, and as many page faults fewer): grads() is empty and
  // backward and the vjp_* refuse with an Error.
  struct ForwardOnly {};
  Model(ModelConfig cfg, Unset, ForwardOnly);
  bool forward_only() const { return forward_only_; }
  // A forward-only model given its parameter gradients (zero) after all: an instrument that reads a big
  // model opens it without them and adds them only when a reading needs a backward pass. No-op otherwise.
  void enable_gradients();
  // The norms' epsilon from now on (an instrument measuring a claim at the eps its source states, on
  // the model's own weights); the config says it. Error unless finite and >= 0.
  void set_eps(double eps);

  const ModelConfig& config() const { return cfg_; }
  // The token embedding's scale: the parameter embed_scale (model.embed_scale_learned) or model.embed_scale.
  double embedding_scale() const { return escale_ ? double(*escale_) : cfg_.embed_scale; }
  // The output head of a tied or untied model (not the MLM head), the one the forward and the decoder
  // share: logits (rows, V) = xf (rows, C) times the output matrix, then nGPT's s_z (raw, if given,
  // keeps the logits before it) and the logit soft cap. prec: the forward's precision (the decoder's fp32).
  void output_logits(S* logits, const S* xf, long rows, S* raw = nullptr,
                     ops::Precision prec = ops::Precision::Fp32) const;
  // nGPT: the matrices back onto the unit sphere (model/init.h), after an optimizer step; discards a
  // bf16 handoff as any write of the parameters does. Nothing for other methods.
  void project_to_sphere();
  // How the self-attention's q.k become scores (model.attn_scale, attn_softcap: ops/attention.h).
  ops::ScoreMap score_map() const { return {cfg_.attention_scale(), cfg_.attn_softcap}; }
  // The key mask self-attention slot i read in the last forward (B, T; 0 = padding), or null: an
  // encdec's encoder reads the source mask, every other self-attention the batch's own.
  const uint8_t* self_attention_mask(int i) const {
    if (cfg_.encdec() && slots_[size_t(i)].encoder) return has_src_mask_ ? src_mask_.data() : nullptr;
    return has_key_mask_ ? key_mask_.data() : nullptr;
  }
  const ParamTable& table() const { return table_; }
  // The non-const params() is how parameters are written: it also discards a bf16 handoff (below).
  std::vector<S>& params() {
    params16_current_ = false;
    return params_;
  }
  const std::vector<S>& params() const { return params_; }
  std::vector<S>& grads() { return grads_; }
  const std::vector<S>& grads() const { return grads_; }

  // Dropout is active only in training mode; seed changes per step so masks differ. first_row: the
  // batch is rows [first_row, first_row + B) of a larger batch (an MPI rank's shard): the masks are
  // those of these rows in the whole batch, so they do not depend on the number of ranks.
  void set_training(bool training, uint64_t dropout_seed = 0, long first_row = 0);
  // Label smoothing eps in [0, 1) of the training loss (train.label_smoothing; ops/softmax_xent.h):
  // forward() in training mode returns, and backward() differentiates, the smoothed loss; in
  // evaluation mode the loss is plain cross-entropy whatever eps is.
  void set_label_smoothing(double eps) { label_smoothing_ = eps; }
  // z-loss coefficient >= 0 of the training loss (train.z_loss; ops/softmax_xent.h): in training mode
  // each labelled row's loss gains z_loss (log Z)^2; in evaluation mode the loss is plain.
  void set_z_loss(double z_loss) { z_loss_ = z_loss; }
  // QK-Clip (Kimi K2, arXiv 2507.20534; branch_attn.cpp): threshold tau > 0 (0: off) and the balance
  // alpha in [0, 1]. Throws Error naming the key when the model's attention cannot take it (QK-norm
  // undoes a rescaled W_q, W_k; nGPT's heads are unit vectors; a soft cap already bounds the logits).
  // While on, each training-mode forward keeps every self-attention head's largest score since the last
  // clip_qk() in attention_logit_max() ((self-attention slot, head) in slot order; -inf: none seen).
  void set_qk_clip(double tau, double alpha);
  std::vector<double>& attention_logit_max() { return logit_max_; }
  // After an optimizer step: for each key-value group of each self-attention whose largest score S
  // (over its query heads) exceeds tau, eta = tau / S; its query rows (weights and bias) times
  // eta^alpha and its key rows times eta^(1 - alpha), so that every logit the group computed is scaled
  // by eta (Megatron-LM's grouped form; per head when n_kv_heads = n_heads). Resets the maxima.
  // Returns the number of groups clipped; discards a bf16 handoff when it wrote anything.
  int clip_qk();
  // The precision of the training GEMMs (train.precision; ops/gemm_backend.h): forward() and
  // backward() of the linear layers, self-attention and the output projection. Parameters,
  // gradients and everything else stay S; the JVP, decoding and cross-attention stay S.
  void set_precision(ops::Precision p) { prec_ = p; }
  ops::Precision precision() const { return prec_; }

  // Bf16 training rounds every weight to bf16 at the start of each forward. An optimizer that
  // writes every parameter can write their rounding in the same pass instead (AdamW::step's
  // `rounded`: one pass over the weights fewer per step): it fills bf16_weights_buffer() (null
  // unless this is a float model with precision Bf16; the parameters' layout) after params(), then
  // calls bf16_weights_written(), and the next forward uses that buffer. Until that forward the
  // parameters must not be written except after a new call of params(), which discards the handoff.
  uint16_t* bf16_weights_buffer();
  void bf16_weights_written() { params16_current_ = !params16_.empty(); }

  // ids, labels: (B, T), labels kIgnoreLabel where there is no loss. Returns the mean loss over
  // labelled positions (NaN if there are none, or without a head). Ids and labels must already be
  // range-checked (see check_batch); T <= seq_len. types (B, T): token types (null: all 0; needs
  // config.type_vocab > 0 to matter); key_mask (B, T): 0 marks padding that no query attends to
  // (null: none). An encdec model needs src (its ids and mask); then ids are the decoder's input.
  double forward(const int32_t* ids, const int32_t* labels, int B, int T,
                 const int32_t* types = nullptr, const uint8_t* key_mask = nullptr, const Source& src = {});
  // The last forward again from sub-layer `first` on, on its batch and labels: the streams entering
  // `first` are the last forward's, so when no parameter below `first` (embeddings included) has changed
  // since, this is forward() bit for bit at the cost of the sub-layers from `first` up (fake depth's
  // layer removal, analysis/fake_depth.h, runs the layers top down: removing layer l leaves the streams
  // entering layers below l as they were). Refused (Error) for an encoder-decoder, two streams,
  // hyper-connections (state beside the stream) and dropout in training mode: can_forward_from() says.
  double forward_from(int first);
  bool can_forward_from() const {
    return !cfg_.encdec() && !dual_ && !cfg_.hyper_connected() && !(training_ && cfg_.dropout > 0);
  }
  // Admin's profiled initialization (docs/MODEL.md "Methods"): a forward pass on this batch, in
  // evaluation mode, that sets each admin sub-layer's omega to the running ratio before running it,
  // then ratio <- sqrt(Var(omega x) + Var(f)); one chain per stack. Returns the omegas, slot by slot.
  std::vector<double> profile_admin(const int32_t* ids, int B, int T, const uint8_t* key_mask = nullptr,
                                    const Source& src = {});
  // An ablation for forward passes (the rank-collapse readings of analysis/dynamics.h): the model as if
  // built with model.residual = false (skips: every shortcut scale 0, Admin's omega and DeepNet's alpha
  // included, the branch gains kept) and/or model.mlp = false (mlp: each MLP sub-layer the identity),
  // on the same parameters, without a copy of them. Bit for bit the forward of a model built with that
  // config holding these parameters. Throws Error when that config is not valid for this model (nGPT has
  // no skip-free form) or the model carries two streams; backward and the products refuse while on.
  // A hyper-connected model (model.hyper) has no skip path to scale: there the skip-free form drops the
  // residual mix (H'_t = b_t g: no stream carries over, every stream holds only what the sub-layer writes)
  // and an MLP-free form passes the streams through its MLP sub-layers unchanged (H' = H), both on every
  // form (hc_static, hc, mhc, mhc_lite, attn_res) although no config builds them.
  // Ablation{} (both true) turns it off.
  struct Ablation {
    bool skips = true, mlp = true;
  };
  void set_ablation(Ablation a);
  bool ablated() const { return !ablation_.skips || !ablation_.mlp; }
  bool ablated_skips() const { return !ablation_.skips; }
  void refuse_ablated(const char* what) const;  // throws Error naming `what` while ablated
  // The values per token of the state the sub-layers pass on: C, or n C for n hyper-connected streams
  // (model.hyper). The sub-layer products below (jvp_sublayers, jvp_sublayers_unit,
  // jvp_block_token_local, vjp_sublayers) map this state: with hyper-connections their tangents are
  // (K, B, T, n, C), the n streams of each token side by side.
  int state_width() const { return cfg_.n_streams() * cfg_.d_model; }
  // grads += loss_scale * d(loss)/d(params), for the last forward. Invalidates logits().
  void backward(double loss_scale = 1.0);
  // What backward passes through the residual stream, for an instrument to read (the gradient sinks of
  // analysis/sinks.h): while set, backward (and vjp_stacks) calls it with (i, dx), dx (B, T, C) = loss_scale d(loss) /
  // d(stream(i)), for i = n_slots (the last block's output) and then every slot i below it, down to the
  // decoder's (or the only stack's) first. A two-stream stack (ResiDual) gives its x stream's gradient;
  // hyper-connections (model.hyper) the gradient of a shift added to every stream, sum_t dH_t.
  // An empty function (the default) turns it off.
  using StreamGradientReader = std::function<void(int slot, const S* dx)>;
  void read_stream_gradients(StreamGradientReader reader) { stream_gradient_reader_ = std::move(reader); }
  // The same for what reaches each branch's input when that input is not the stream itself (a sub-layer
  // with an input norm: dh (B, T, C) = loss_scale d(loss)/d(h), h = ln_in(x), the gradient before the
  // norm's Jacobian); called with (i, dh) for every such slot i, top down.
  void read_branch_input_gradients(StreamGradientReader reader) { branch_gradient_reader_ = std::move(reader); }
  void zero_grad();

  // (B, T, V) after forward, before backward (which turns them into their gradient); null for a
  // headless model (head = none)
  const S* logits() const { return logits_; }
  // (B, T): log Z = logsumexp of each position's logits from the last forward, kept through backward
  // (the quantity z-loss penalizes); null for a headless model
  const S* log_partitions() const { return cfg_.has_logits() ? lse_ : nullptr; }
  int64_t label_count() const { return label_count_; }
  // The bytes of the activations (forward and backward buffers) a forward of B sequences of T tokens
  // (and Ssrc source tokens, encoder-decoders) allocates: the same table plan() carves, summed. Changes
  // nothing (the planned activations stay). Linear in B: an instrument picks its rows per pass from it.
  double activation_bytes(int B, int T, int Ssrc = 0);
  double planned_activation_bytes() const { return double(acts_.size()) * sizeof(S); }  // what plan() holds
  int planned_B() const { return B_; }
  int planned_T() const { return T_; }
  int planned_S() const { return S_; }
  // Residual stream entering slot i (config.slot(i); gpt/encoder: i = 2l attn, 2l+1 mlp); i = n_slots
  // is the last block's output. For an encdec, slot 2N's input is the decoder's embedding. In a
  // two-stream stack (ResiDual) this is the normalized stream x; the second stream x_d is not kept
  // per slot (dual_stream() is its value at the end of the stack). With hyper-connections (model.hyper)
  // it is the sum of the n streams (what the final norm reads at the end), but stream(0) is the
  // embedding output every stream starts as.
  const S* stream(int i) const { return streams_[i]; }
  // The second stream x_d at the end of the stack (B, T, C) (encoder: true for an encdec's encoder
  // stack, (B, S, C)); null for a one-stream stack.
  const S* dual_stream(bool encoder = false) const { return encoder ? enc_dual_ : dual_; }
  // encdec: the encoder's output after its final norm (ResiDual: x + ln_f(x_d)), what cross-attention
  // reads (B, S, C)
  const S* memory() const { return memory_; }
  size_t activation_floats() const { return acts_.size(); }

  // Read-only views for the instruments (analysis/), valid after forward: activations and
  // parameters of sub-layer i (i = 2l attn, 2l+1 mlp), and the final norm (weight null if absent).
  const SublayerActs<S>& acts(int i) const { return a_[i]; }
  const SublayerParams<S>& sublayer_params_of(int i) const { return p_[i]; }
  // model.hyper = attn_res: the final read's parameters (out.hc.*; model/hyper.h)
  const HyperParams<S>& attn_res_out_params() const { return out_hc_; }
  // and the last forward's weights of that read (rows, hyper_mix_width(n)): P_s at [r n (n + 1) + s (n + 1)]
  const S* attn_res_out_mix() const { return out_hmix_; }
  // Slot i's stages in the order its forward runs them (model/stage.h, model/stages.cpp).
  const std::vector<const StageFns<S>*>& stages_of(int i) const { return stages_[size_t(i)]; }
  const NormParams<S>& final_norm() const { return lnf_; }
  const NormParams<S>& embed_norm() const { return lnemb_; }
  // The stack's output: the last block's output after the final norm, if any (ResiDual:
  // x + ln_f(x_d)); what the head reads (B, T, C).
  const S* final_hidden() const { return xf_; }

  // Forward mode through sub-layers [first, last) at the point of the last forward (evaluation
  // mode, parameters fixed): tout (K, B, T, C) = J tin (K, B, T, C). Allocates its own scratch.
  // This and the other one-stream products below (jvp_sublayers_unit, jvp_block_token_local,
  // vjp_sublayers, jvp_encdec, vjp_encdec) map one stream to one stream: they refuse a two-stream
  // stack (ResiDual), whose sub-layers map the pair (x, x_d); jvp_stacks and vjp_stacks take it.
  void jvp_sublayers(S* tout, const S* tin, int K, int first, int last) const;
  // The same for unit tangents: tangent k is 1 at flat position positions[k] of (B, T, C) and 0
  // elsewhere -- columns of the Jacobian, without materializing the identity.
  void jvp_sublayers_unit(S* tout, const int64_t* positions, int K, int first, int last) const;
  // Token-local forward mode through block `layer` (sub-layers 2 layer, 2 layer + 1): tout (K, C) =
  // J_ii tin (K, C), J_ii = d x'_i / d x_i at token `token` of batch row `row`, exactly, from that
  // token's saved activations (cost independent of T but for one attention row). tout may alias tin.
  void jvp_block_token_local(S* tout, const S* tin, int K, int layer, int token, int row = 0) const;
  // The full-sequence Jacobian of block `layer` (sub-layers 2 layer, 2 layer + 1) on the one
  // sequence of the last forward: J (T C, T C) row-major, J[i C + c][j C + k] = d x'_{i,c} / d x_{j,k},
  // built from C x C blocks with GEMMs (model_jacobian.cpp has the math); the same matrix as
  // jvp_sublayers_unit with the T C unit tangents, to rounding. Causal: the blocks above the diagonal
  // are exact zeros, at no cost. block_jacobian_covers(first, last) says whether sub-layers
  // [first, last) are such a block: one whole block of a one-stream gpt or encoder, planned B = 1
  // (not an encdec, a two-stream stack or part of a block); elsewhere use the tangents.
  bool block_jacobian_covers(int first, int last) const;
  void block_jacobian(S* J, int layer) const;
  // Reverse mode through sub-layers [first, last) at the point of the last forward: din (B, T, C)
  // = J^T dout. As a side effect it adds into the parameter gradients (zero them if they matter).
  // A range lies within one stack of an encdec; in the decoder the memory is held fixed.
  void vjp_sublayers(S* din, const S* dout, int first, int last);
  // encdec, through both stacks from the embeddings' outputs (src stream (B, S, C), tgt stream
  // (B, T, C)) to the decoder's last stream (B, T, C): forward mode for K tangents, and reverse mode
  // (adds into the parameter gradients).
  void jvp_encdec(S* tout, const S* tsrc, const S* ttgt, int K) const;
  void vjp_encdec(S* dsrc, S* dtgt, const S* dout);
  // Through every stack, from the embeddings' outputs (tin (K, B, T, C) for the decoder or the only
  // stack; tsrc (K, B, S, C) for an encdec's encoder, null otherwise) to what the head reads
  // (final_hidden(), tout (K, B, T, C)): any method, ResiDual's two streams included (x_d starts as
  // the stack's input, so the input tangent moves both). vjp_stacks is its transpose (dsrc null
  // unless encdec) and adds into the parameter gradients.
  void jvp_stacks(S* tout, const S* tsrc, const S* tin, int K) const;
  void vjp_stacks(S* dsrc, S* din, const S* dout);
  // RoPE (positions = rope; a no-op otherwise): rotates the q and k columns of a (rows, 3C) qkv buffer
  // in place, row n at position pos0 + n % T; sign -1 is the transpose (a gradient's rotation).
  void apply_rope(int layer, S* qkv, int rows, int T, int pos0, int sign) const;
  // What happens to the q and k (and v) columns of slot i's (rows, qkv_width) projection before the
  // attention, in place: QK-norm (model/qk_norm.h), then RoPE at positions pos0 + n % T. The forward
  // saves QK-norm's inputs and statistics in raw, mean and rstd (sized by qk_layout(i)); the backward
  // (d(after) -> d(before)) and the JVP read those of the last forward, the JVP at its rows [row0,
  // row0 + rows) (K tangents of `rows` rows each; rows = 1 and pos0 = the token for one token).
  const QkNormLayout& qk_layout(int i) const { return qk_[size_t(i)]; }
  void attn_qk_forward(int i, S* qkv, int rows, int T, int pos0, S* raw, S* mean, S* rstd, S* sph_raw = nullptr,
                       S* sph_r = nullptr) const;
  void attn_qk_backward(int i, S* dqkv, int rows, int T);
  void attn_qk_jvp(int i, S* tqkv, int K, int rows, int T, int pos0, size_t row0) const;
  // Value residual learning (model.value_residual, branch_attn.cpp): after the above, the v columns of
  // slot i's (rows, qkv_width) projection become (1 - lambda) v + lambda u, u the stack's first
  // self-attention's values (stride ldu; null: held fixed, as a tangent of a range without it). Nothing
  // for a slot that does not mix (config.value_source(i) < 0).
  void value_mix(int i, S* qkv, long rows, const S* u, long ldu) const;
  // One norm site's tangent: tout (K, rows, C) = J tin, J the Jacobian of the norm at `inp`.
  void norm_jvp(S* tout, const S* tin, const S* inp, const NormParams<S>& p, const S* mean,
                const S* rstd, int K, int rows) const;

 private:
  Model(ModelConfig cfg, Unset, bool with_grads);
  // A stack's slots and its ending y = x (no final norm), ln_f(x), or y = x + ln_f(x_d) (two streams).
  struct StackEnd {
    int first = 0, last = 0;  // slots [first, last)
    int rows = 0;             // B * (S or T)
    const S* x = nullptr;     // (rows, C) the last stream
    S* xd = nullptr;          // (rows, C) the second stream at the end; null for one stream
    S* y = nullptr;           // (rows, C) the output (aliases x without a final norm)
    bool norm = false;        // the stack ends in ln_f
    NormParams<S> p, dp;      // ln_f's parameters (a parameterless kind, L2, has none)
    S* mean = nullptr, * rstd = nullptr;
  };
  StackEnd stack_end(bool encoder) const;  // encoder: an encdec's encoder stack
  void stack_end_forward(const StackEnd& e);
  // dy (rows, C): d(loss)/d(y); on return dx points at d(loss)/d(stack input) (in dstream_)
  void stack_backward(const StackEnd& e, const S* dy, S*& dx);
  void stack_jvp(S* ty, const S* tx0, int K, const StackEnd& e, const S* tmem) const;
  S* dual_of(int slot) const { return cfg_.encdec() && slots_[size_t(slot)].encoder ? enc_dual_ : dual_; }
  void refuse_dual(int slot, const char* what) const;
  // Hyper-connections (model/hyper.cpp): the read before slot i's stages (its streams into x_in and the
  // next slot's streams), the write after them; the reverse of slot i given dH_out (rows, n, C), dH_in
  // assigned; and the stack's: its streams from x0, and in reverse dx0 from the first slot's dH.
  void hyper_read(int i);
  void hyper_write(int i);
  void hyper_pass(int i);  // an ablated MLP sub-layer on the streams (set_ablation)
  void hyper_sublayer_backward(int i, const S* dH_out, S* dH_in);
  void hyper_stack_backward(int first, int last, const S* dx_last, S*& dx_first, bool read);
  // The streams a stack starts with (rows, n, C) from its input x0 (rows, C), and the tangents alike (K, rows).
  void hyper_stack_start(const S* x0, long rows, S* H) const;
  // attn_res: slot i ends the stack (its output is the final read over every stream, not their sum).
  bool attn_res_end(int i) const { return cfg_.hyper == HyperMix::AttnRes && i == int(slots_.size()) - 1; }
  // Forward mode: slot i's read, stages and write on the streams' tangent (model_hyper.cpp). f.tx is the
  // branch input's tangent; tH (K, rows, n, C) enters and (after a swap with tR) leaves as the output's.
  struct HyperTangents {
    S* tH = nullptr, * tR = nullptr, * tmix = nullptr, * scratch = nullptr;
  };
  void hyper_sublayer_jvp(int i, JvpFlow<S>& f, HyperTangents& h) const;
  // The hyper buffers of a forward-mode walk of K tangents of `rows` rows carved from `at` (returns the end).
  S* carve_hyper_tangents(S* at, int K, long rows, HyperTangents& h) const;
  size_t hyper_tangent_size(int K, long rows) const;
  void plan(int B, int T, int Ssrc);
  size_t plan_buffers(int B, int T, int Ssrc, bool carve);  // the table; carve: allocate and point (plan)
  // rows of slot i's activations: B * (S for an encdec's encoder slot, T otherwise)
  int rows(int i) const { return B_ * len(i); }
  int len(int i) const { return cfg_.encdec() && slots_[size_t(i)].encoder ? S_ : T_; }
  // td (K, rows, C), two-stream stacks only: the second stream's tangent, every g's tangent added in
  void jvp_sublayers_impl(S* tout, const S* tin, const int64_t* unit, int K, int first, int last,
                          const S* tmem = nullptr, S* td = nullptr) const;
  // The branch F of each kind of sub-layer, one file per kind with its modes side by side
  // (model/branch_attn.cpp, branch_cross.cpp, branch_mlp.cpp; the branch stage, stage_branch.cpp,
  // picks one by the slot's kind): forward (a.f = F(a.h) of slot i),
  // backward (dh += J_F^T df; F's parameter gradients +=), forward mode over the batch (tf (K, rows, C)
  // = J_F th) and at one token of batch row `row`, its row n = row T + token (tf, th (K, C)).
  using JvpScratch = normlab::JvpScratch<S>;
  void value_mix_backward(int i, S* dqkv, long rows);
  void clear_value_gradients();  // dvalues_ = 0, before a reverse walk
  void value_mix_jvp(int i, S* tqkv, long rows, S* tu) const;
  void attn_forward(int i);
  void attn_backward(int i, const S* df, S* dh);
  void attn_jvp(int i, S* tf, const S* th, int K, const JvpScratch& sc) const;
  void attn_jvp_token(int i, S* tf, const S* th, int K, int token, int row, const JvpScratch& sc) const;
  void cross_forward(int i);
  void cross_backward(int i, const S* df, S* dh);
  void cross_jvp(int i, S* tf, const S* th, int K, const S* tmem, const JvpScratch& sc) const;
  void mlp_forward(int i);
  void mlp_backward(int i, const S* df, S* dh);
  void mlp_jvp(int i, S* tf, const S* th, int K, const JvpScratch& sc) const;
  void mlp_jvp_token(int i, S* tf, const S* th, int K, size_t n, const JvpScratch& sc) const;
  using JvpRows = normlab::JvpRows;
  // Slot i in forward mode, the one walk of every JVP (model/stage.h): f.tx its input tangent in, its
  // output tangent out; part: every stage, or those before or after the branch (the closed-form block
  // Jacobian, which takes the attention's place itself)
  enum class StagePart { All, BeforeBranch, AfterBranch };
  void sublayer_jvp(int i, JvpFlow<S>& f, StagePart part = StagePart::All) const;
  void sublayer_forward(int i);
  // dd (rows, C): d(loss)/d(x_d) of a two-stream stack (the same at every slot: x_d only sums), or null
  void sublayer_backward(int i, const S* dx_out, S* dx_in, const S* dd = nullptr);
  // Error unless the model has parameter gradients (not ForwardOnly); `what` names the caller.
  void require_grads(const char* what) const;
  // slots [first, last) backward; dx in and out; read: give each slot's input gradient to the reader
  void run_backward(int first, int last, S*& dx, const S* dd = nullptr, bool read = false);
  void norm_forward(S* out, S* mean, S* rstd, const S* inp, const NormParams<S>& p, int rows);
  void norm_backward(S* dinp, const NormParams<S>& dp, const S* dout, const S* inp,
                     const NormParams<S>& p, const S* mean, const S* rstd, int rows);
  void head_forward();
  void round_weights_for_forward();  // bf16: the weights rounded for this forward's GEMMs (forward's first step)
  double finish_forward();           // the stack's end, the head and the loss (forward's last steps)
  void head_backward(S* dxf);
  void embedding_backward_all(const S* dx0);
  void source_backward(const S* dsrc0);
  uint64_t dropout_site_seed(int site) const;
  // the index, in the whole batch, of the first element of a site's (B_, rows, C) buffer of n elements
  size_t dropout_first(size_t n) const { return dropout_first_row_ * (n / size_t(B_)); }

  ModelConfig cfg_;
  ParamTable table_;
  std::vector<Slot> slots_;      // config.slot(i), cached
  std::vector<QkNormLayout> qk_;  // qk_norm_layout of slot i's layer (n = 0 but for attn slots with QK-norm)
  mutable std::vector<S> qk_scratch_;  // QK-norm's gathered parts, grown on demand
  std::vector<S> params_, grads_;
  bool forward_only_ = false;  // no grads_: every gradient pointer below is null
  void bind_gradients();      // the gradient views into grads_ (the constructor, enable_gradients)
  Ablation ablation_;          // set_ablation
  StreamGradientReader stream_gradient_reader_;  // read_stream_gradients
  StreamGradientReader branch_gradient_reader_;  // read_branch_input_gradients
  std::vector<SublayerParams<S>> p_, dp_;  // per slot
  NormParams<S> lnf_, dlnf_;
  HyperParams<S> out_hc_, dout_hc_;   // attn_res: the final read's parameters
  NormParams<S> enc_lnf_, denc_lnf_;  // encdec: the encoder's final norm
  NormParams<S> lnemb_, dlnemb_;  // embedding norm (embed_norm)
  NormParams<S> hln_, dhln_;      // MLM head norm
  S* wtt_ = nullptr, * dwtt_ = nullptr;  // (type_vocab, C)
  S* escale_ = nullptr, * descale_ = nullptr;  // (1) model.embed_scale_learned's scale
  S* hw_ = nullptr, * hb_ = nullptr, * hbias_ = nullptr;     // MLM head: dense (C, C), (C); output bias (V)
  S* dhw_ = nullptr, * dhb_ = nullptr, * dhbias_ = nullptr;
  S* wte_ = nullptr, * wpe_ = nullptr, * dwte_ = nullptr, * dwpe_ = nullptr;
  S* out_w_ = nullptr, * dout_w_ = nullptr;  // the output matrix: wte (tied, mlm) or lm_head (untied)
  S* src_wte_ = nullptr, * src_wpe_ = nullptr, * dsrc_wte_ = nullptr, * dsrc_wpe_ = nullptr;  // encdec

  // planned for (B_, T_, S_): one allocation, carved by plan()
  int B_ = 0, T_ = 0, S_ = 0;
  std::vector<S> acts_;
  std::vector<SublayerActs<S>> a_;   // per slot
  std::vector<S*> streams_;          // n_slots + 1 entries
  std::vector<S*> hstate_;           // n_slots + 1: the n streams (B, T, n, C) entering each slot (hyper-connections)
  S* out_hn_ = nullptr, * out_hrstd_ = nullptr, * out_hmix_ = nullptr, * out_hpre_ = nullptr;  // attn_res's final read
  S* enc_out_ = nullptr;             // (B, S, C) encdec: the encoder's last stream
  S* memory_ = nullptr;              // (B, S, C) enc_ln_f(enc_out), or enc_out
  S* enc_lnf_mean_ = nullptr, * enc_lnf_rstd_ = nullptr;
  S* xf_ = nullptr;                  // (B, T, C) final norm output, or the last stream
  S* dual_ = nullptr;                // (B, T, C) two-stream stack: x_d, summed in place during forward
  S* enc_dual_ = nullptr;            // (B, S, C) the same for an encdec's encoder
  S* lnf_mean_ = nullptr, * lnf_rstd_ = nullptr;
  S* emb_ = nullptr;                 // (B, T, C) embedding sum before the embedding norm
  S* emb_mean_ = nullptr, * emb_rstd_ = nullptr;
  S* head_u_ = nullptr, * head_a_ = nullptr, * head_t_ = nullptr;  // (B, T, C) MLM head: dense, act, norm
  S* head_mean_ = nullptr, * head_rstd_ = nullptr;
  S* logits_ = nullptr;              // (B, T, V), becomes dlogits in backward
  S* logits_raw_ = nullptr;          // (B, T, V) nGPT: the logits before s_z
  S* sz_ = nullptr, * dsz_ = nullptr;  // (V) nGPT's logit scale
  S* lse_ = nullptr;                 // (B, T)
  // backward scratch, sized for the longer of the two sequences
  S* dstream_[2] = {nullptr, nullptr};  // (B, max(T, S), C) ping-pong
  // dh_: the head's output gradient; df_, dg_: the sub-layer walk's pool (BackwardFlow); dr_: the MLM head's
  S* dhyper_[2] = {nullptr, nullptr};  // (B, T, n, C) hyper-connections: d(loss)/d(the streams), ping-pong
  S* dhmix_ = nullptr, * dhpre_ = nullptr, * dhn_ = nullptr;  // and the read's scratch
  S* dvalues_ = nullptr;  // value residual: d(loss)/d(the source's values) (rows, v width), gathered top down
  S* dh_ = nullptr, * df_ = nullptr, * dg_ = nullptr, * dr_ = nullptr, * dmix_ = nullptr;
  S* dhid_ = nullptr;                // (B, max(T, S), max(3C, F))
  S* datt_ = nullptr;                // (B, NH, max(T, S), max(T, S))
  S* dgate_ = nullptr;               // (B, T, G) gated attention: d(loss)/d(the gate's pre-activation)
  S* dkv_ = nullptr;                 // (B, S, 2C) cross-attention
  S* dmem_ = nullptr;                // (B, S, C) d(loss)/d(memory), summed over the cross slots
  S* ddual_ = nullptr;               // (B, max(T, S), C) d(loss)/d(x_d) of the stack being run backward
  S* dscale_ = nullptr;              // (B, max(T, S), C) a scaled norm site's scaled dout (norm_backward);
                                     // planned only when a method scales one (LayerNorm Scaling)
  std::vector<int32_t> ids_, labels_, types_, src_ids_;
  std::vector<uint8_t> key_mask_, src_mask_;
  bool has_key_mask_ = false, has_src_mask_ = false;
  std::vector<S> rope_cos_, rope_sin_;  // (seq_len, R/2) RoPE's angle tables (ops/rope.h); empty without
  std::vector<S> rope_local_cos_, rope_local_sin_;  // the local layers' (rope_local_base; ModelConfig::rope_local)
  mutable std::vector<S> jvp_scratch_;  // forward-mode scratch, grown on demand (analysis only)
  mutable std::vector<S> block_jac_scratch_;  // block_jacobian's, kept across calls (no page faults)
  int64_t label_count_ = 0;
  bool training_ = false;
  ops::Precision prec_ = ops::Precision::Fp32;
  // Bf16 (float models): every parameter rounded to bf16, redone at each forward (unless an
  // optimizer handed it over: params16_current_), so that a weight is rounded once per step instead
  // of once per GEMM call (forward, input gradient, per thread)
  std::vector<uint16_t> params16_;
  bool params16_current_ = false;
  const uint16_t* bf16_of(const S* w) const {
    const bool inside = w >= params_.data() && w < params_.data() + params_.size();
    return params16_.empty() || !inside ? nullptr : params16_.data() + (w - params_.data());
  }
  uint64_t dropout_seed_ = 0;
  size_t dropout_first_row_ = 0;     // set_training's first_row
  double label_smoothing_ = 0.0;     // set_label_smoothing
  double smoothing_used_ = 0.0;      // the eps of the last forward's loss (0 in evaluation mode)
  double z_loss_ = 0.0;              // set_z_loss
  double z_loss_used_ = 0.0;         // the z-loss coefficient of the last forward's loss (0 in evaluation mode)
  double qk_clip_ = 0.0, qk_clip_alpha_ = 0.5;  // set_qk_clip
  std::vector<double> logit_max_;    // QK-Clip's maxima: (self-attention slot i, head h) at i * n_heads + h
  bool profiling_ = false;           // profile_admin is running: its stage sets omega (stage_admin_profile.cpp)
  double profile_ratio_ = 1.0;
  std::vector<double> profiled_;
  std::vector<std::vector<const StageFns<S>*>> stages_;  // per slot: its stages in forward order (stage.h)

  // The stage files (model/stage_*.cpp) work on the activations, parameters and scratch directly.
  template <class Kind>
  friend struct StageOps;
};

extern template class Model<float>;
extern template class Model<double>;

// A model of `cfg` for a loader to fill (every parameter zero), with parameter gradients or, forward_only,
// without (Model::ForwardOnly: for sampling, exporting and measuring, half the memory of a float model).
template <class S>
std::unique_ptr<Model<S>> unset_model(ModelConfig cfg, bool forward_only) {
  using M = Model<S>;
  return forward_only ? std::make_unique<M>(std::move(cfg), typename M::Unset{}, typename M::ForwardOnly{})
                      : std::make_unique<M>(std::move(cfg), typename M::Unset{});
}

// A model of `cfg` holding `params` (float or double: widened or narrowed), built without the random
// initialization the copy would overwrite (for a 135M-parameter model that costs seconds). Error if
// the count differs from the config's. forward_only: without parameter gradients (unset_model).
template <class S, class Params>
std::unique_ptr<Model<S>> model_with_params(ModelConfig cfg, const Params& params, bool forward_only = false) {
  auto m = unset_model<S>(std::move(cfg), forward_only);
  if (size_t(params.size()) != m->params().size())
    throw Error(fmt::format("{} parameters given for a config of {}", params.size(), m->params().size()));
  std::copy(params.begin(), params.end(), m->params().begin());
  return m;
}

}  // namespace normlab
