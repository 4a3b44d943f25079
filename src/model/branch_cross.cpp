// branch_cross.cpp: the cross-attention branch of an encoder-decoder's decoder, F(h) = softmax(q k^T /
// sqrt(HS) + the source mask) v W_o^T with q = h W_q^T from the decoder and [k | v] = memory W_kv^T
// from the encoder's output: forward, backward (the memory's gradient gathers over every cross slot),
// forward mode (q moves with the decoder's tangent, k and v with the memory's) and the incremental
// decoder's step over the cached key-value map. docs/MODEL.md ("Encoder-decoder") has the math.
#include "model/branch.h"
#include "model/decode.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/matmul.h"

namespace normlab {

using namespace ops;
using branch::zero;

template <class S>
void Model<S>::cross_forward(int i) {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int B = B_, T = len(i), N = rows(i), C = cfg_.d_model;
  matmul_forward(a.hid, a.h, p.w1, p.b1, N, C, C, prec_, bf16_of(p.w1));
  matmul_forward(a.kv, memory_, p.wkv, p.bkv, B * S_, C, 2 * C, prec_, bf16_of(p.wkv));
  cross_attention_forward(a.mix, a.att, a.hid, a.kv, B, T, S_, C, cfg_.n_heads, has_src_mask_ ? src_mask_.data() : nullptr);
  matmul_forward(a.f, a.mix, p.w2, p.b2, N, C, C, prec_, bf16_of(p.w2));
}

template <class S>
void Model<S>::cross_backward(int i, const S* df, S* dh) {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const SublayerParams<S>& dp = dp_[i];
  const int B = B_, T = len(i), N = rows(i), C = cfg_.d_model;
  const size_t NC = size_t(N) * C;
  zero(dmix_, NC);
  matmul_backward(dmix_, dp.w2, dp.b2, df, a.mix, p.w2, N, C, C, prec_, bf16_of(p.w2));
  zero(dhid_, NC);
  zero(dkv_, size_t(B) * S_ * 2 * C);
  cross_attention_backward(dhid_, dkv_, datt_, dmix_, a.hid, a.kv, a.att, B, T, S_, C, cfg_.n_heads);
  matmul_backward(dh, dp.w1, dp.b1, dhid_, a.h, p.w1, N, C, C, prec_, bf16_of(p.w1));
  // kv = memory Wkv^T + bkv: the memory's gradient gathers over every cross slot
  matmul_backward(dmem_, dp.wkv, dp.bkv, dkv_, memory_, p.wkv, B * S_, C, 2 * C, prec_, bf16_of(p.wkv));
}

// tmem: the memory's tangent (K, B, S, C), or null (the memory held fixed)
template <class S>
void Model<S>::cross_jvp(int i, S* tf, const S* th, int K, const S* tmem, const JvpScratch& sc) const {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int B = B_, T = len(i), N = rows(i), C = cfg_.d_model;
  matmul_jvp(sc.hid, th, p.w1, K, N, C, C);
  if (tmem) matmul_jvp(sc.kv, tmem, p.wkv, K, B * S_, C, 2 * C);
  cross_attention_jvp(sc.mix, sc.att, sc.hid, tmem ? sc.kv : nullptr, a.hid, a.kv, a.att, K, B, T, S_, C, cfg_.n_heads);
  matmul_jvp(tf, sc.mix, p.w2, K, N, C, C);
}

// The new token's query over the source's keys and values (cached once: they do not change).
template <class S>
void IncrementalDecoder<S>::cross_step(int i, const S* h, const SublayerParams<S>& p) {
  const ModelConfig& cfg = m_.config();
  const int B = B_, C = cfg.d_model;
  const std::vector<S>& cache = cache_[size_t(i)];
  matmul_forward(hid_.data(), h, p.w1, p.b1, B, C, C);
  for (int b = 0; b < B; b++)
    cross_attention_forward(mix_.data() + size_t(b) * C, att_.data(), hid_.data() + size_t(b) * C,
                            cache.data() + size_t(b) * S_ * 2 * C, 1, 1, S_, C, cfg.n_heads,
                            src_mask_.empty() ? nullptr : src_mask_.data() + size_t(b) * S_);
  matmul_forward(f_.data(), mix_.data(), p.w2, p.b2, B, C, C);
}

#define NL_INSTANTIATE(S)                                                                             \
  template void Model<S>::cross_forward(int);                                                        \
  template void Model<S>::cross_backward(int, const S*, S*);                                         \
  template void Model<S>::cross_jvp(int, S*, const S*, int, const S*, const JvpScratch&) const;      \
  template void IncrementalDecoder<S>::cross_step(int, const S*, const SublayerParams<S>&);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab
