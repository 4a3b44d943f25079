// decode.h: generating token by token with an incremental decoder that keeps each self-attention's
// keys and values (a KV cache) so a step costs one token's work: the target of an encoder-decoder
// (greedy and beam search on top of it), and a causal model's continuation (model/generate.h).
// The incremental step computes exactly what Model::forward computes for the same prefix
// (tests/test_decode.cpp checks it).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace normlab {

// Byte-level translation tokens of an encdec (vocab 258): bytes 0..255, then BOS and EOS.
inline constexpr int32_t kBosToken = 256;
inline constexpr int32_t kEosToken = 257;

template <class S>
class IncrementalDecoder {
 public:
  // Runs the encoder on the source (B rows of S ids, mask (B, S) or null) and prepares caches for up
  // to max_len target positions (<= the model's seq_len).
  IncrementalDecoder(Model<S>& model, const int32_t* src, const uint8_t* src_mask, int B, int Ssrc, int max_len);
  // A causal (gpt) model: no encoder; caches for up to max_len positions (<= seq_len). The prompt is
  // fed through step() one token at a time.
  IncrementalDecoder(Model<S>& model, int B, int max_len);
  // Feeds one token per row at the next position; returns the next-token logits (B, V).
  const std::vector<S>& step(const int32_t* tokens);
  // Beam search: row r continues from row parent[r] (its cache is copied).
  void reorder(const std::vector<int>& parent);
  int position() const { return t_; }

 private:
  void norm(S* out, const S* inp, const NormParams<S>& p);
  void allocate();
  // f_ = F(h) of slot i at this position: its branch's step, in the branch's file
  // (model/branch_attn.cpp, branch_cross.cpp, branch_mlp.cpp)
  void attn_step(int i, const S* h, const SublayerParams<S>& p);
  void cross_step(int i, const S* h, const SublayerParams<S>& p);
  void mlp_step(const S* h, const SublayerParams<S>& p);
  Model<S>& m_;
  int B_, max_len_, t_ = 0, S_;
  std::vector<int32_t> src_;
  std::vector<uint8_t> src_mask_;
  // per slot: self-attention (B, max_len, 2 KVH HS) [k | v]; cross: its (B, S, 2C)
  std::vector<std::vector<S>> cache_;
  std::vector<S> x_, xd_, h_, hid_, mix_, f_, g_, r_, mean_, rstd_, att_, logits_;
  std::vector<S> values_;  // value residual: the first self-attention's values of the step (B, v width)
  std::vector<S> qk_raw_, qk_stats_;  // QK-norm's inputs and statistics of the step (read by nothing after)
  std::vector<S> sph_, sph_r_, pre_;   // nGPT: the q | k heads' projection (as above), fc's output before s_uv
  // hyper-connections (model/hyper.h): the n streams of the step entering and leaving a slot (B, n, C),
  // and the read's normalized streams, statistics, weights and their pre-activations
  std::vector<S> hs_, hs_next_, hn_, hrstd_, hmix_, hpre_;

  // The stage files (model/stage_*.cpp) run their decoding step on these buffers.
  template <class Kind>
  friend struct StageOps;
};

struct DecodeOptions {
  int max_len = 0;       // target positions (BOS included); 0: the model's seq_len
  int beam = 1;          // 1: greedy
  double length_penalty = 1.0;  // beam score = log p / length^penalty (fairseq's lenpen)
};

// The best target (ids without BOS and EOS) for each of B sources.
std::vector<std::vector<int32_t>> translate(Model<float>& model, const std::vector<std::vector<int32_t>>& sources,
                                            const DecodeOptions& options);

}  // namespace normlab
