// model_jvp.cpp: the model's forward-mode tangents (Jacobian-vector products through sub-layers, one
// block's token-local Jacobian, both stacks of an encoder-decoder) and the reverse-mode products the
// analysis uses (vector-Jacobian products at the point of the last forward). Training never calls
// these; the instruments in analysis/ do.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/activation_of.h"
#include "model/methods.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/common.h"
#include "model/norm_of.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/sphere.h"
#include "util/error.h"

namespace normlab {

using namespace ops;

template <class S>
void Model<S>::norm_jvp(S* tout, const S* tin, const S* inp, const NormParams<S>& p, const S* mean,
                        const S* rstd, int K, int rows) const {
  normlab::norm_jvp(cfg_.norm, tout, tin, inp, p, mean, rstd, K, rows, cfg_.d_model);
}

template <class S>
void Model<S>::refuse_ablated(const char* what) const {
  if (ablated()) throw Error(fmt::format("{}: the model runs ablated (set_ablation), which is for forward passes only", what));
}

// The one-stream products map the stream entering `first` to the stream leaving `last`; in a
// two-stream stack that stream is half of the state, so their numbers would be wrong: refuse.
template <class S>
void Model<S>::refuse_dual(int slot, const char* what) const {
  if (slot < 0 || slot >= int(slots_.size())) return;  // the range checks below report it
  const Method& m = method_of(cfg_.placement_of(slots_[size_t(slot)].layer));
  if (cfg_.dual_stack(slots_[size_t(slot)].layer))
    throw Error(fmt::format("{} maps one residual stream, but slot {} is in a \"{}\" ({}) stack, which carries "
                            "two (x and x_d); use jvp_stacks / vjp_stacks",
                            what, slot, m.name, m.source));
}

template <class S>
void Model<S>::jvp_sublayers(S* tout, const S* tin, int K, int first, int last) const {
  refuse_dual(first, "jvp_sublayers");
  jvp_sublayers_impl(tout, tin, nullptr, K, first, last);
}

template <class S>
void Model<S>::jvp_sublayers_unit(S* tout, const int64_t* positions, int K, int first, int last) const {
  refuse_dual(first, "jvp_sublayers_unit");
  jvp_sublayers_impl(tout, nullptr, positions, K, first, last);
}

template <class S>
void Model<S>::jvp_sublayers_impl(S* tout, const S* tin, const int64_t* unit, int K, int first, int last,
                                  const S* tmem, S* td) const {
  refuse_ablated("jvp_sublayers");
  if (first >= last) throw Error("jvp_sublayers: empty range of sub-layers");
  const int dec0 = cfg_.first_decoder_slot();
  if (cfg_.encdec() && first < dec0 && last > dec0)
    throw Error("jvp_sublayers: a range of an encoder-decoder lies within one stack (use jvp_encdec)");
  const int B = B_, N = rows(first), T = len(first), C = cfg_.d_model, F = cfg_.ff();
  const size_t KNC = size_t(K) * N * C;
  // scratch carved from one buffer kept across calls (the analysis calls this repeatedly with the
  // same K; fresh gigabytes per call would cost a page fault per 4 KiB)
  const size_t NHT = size_t(B) * cfg_.n_heads * T;
  const int FW = cfg_.fc_width();  // fc's output columns: F, or 2F gated
  const int QW = cfg_.qkv_width(), A = cfg_.attn_width();  // (head_dim: wider or narrower than 3C, C)
  const size_t nhid = size_t(K) * N * std::max({3 * C, FW, QW}), natt = NHT * std::max(T, S_);
  const size_t nkv = tmem ? size_t(K) * B * S_ * 2 * C : 0;
  // tmix also holds the MLP fold below, (F, C) + (C, C): more than K N max(C, F) when N is tiny (T = 1)
  const size_t nmix = std::max(size_t(K) * N * std::max({C, F, A}), size_t(F) * C + size_t(C) * C);
  // value residual: the source's value tangents, when the range holds the source (else it is held)
  bool source = false;
  for (int i = first; i < last; i++) source = source || cfg_.is_value_source(i);
  const size_t nval = source ? size_t(K) * N * (QW - A) / 2 : 0;
  const size_t nhyp = hyper_tangent_size(K, N);  // hyper-connections: the streams' tangents
  if (jvp_scratch_.size() < 3 * KNC + nhid + natt + nmix + nkv + nval + nhyp)
    jvp_scratch_.resize(3 * KNC + nhid + natt + nmix + nkv + nval + nhyp);
  JvpFlow<S> f;
  f.tx = jvp_scratch_.data();
  f.pool[0] = f.tx + KNC;
  f.pool[1] = f.pool[0] + KNC;
  S* thid = f.pool[1] + KNC;
  S* tatt = thid + nhid;
  S* tmix = tatt + natt;
  S* tkv = tmix + nmix;
  f.K = K;
  f.rows = JvpRows{false, 0, N, 0, 0};
  f.sc = JvpScratch{thid, tatt, tmix, tkv, source ? tkv + nkv : nullptr};
  f.tmem = tmem;
  f.td = td;
  // the state's tangent: the stream's, or the n streams' (K, N, n, C) with hyper-connections
  HyperTangents h;
  if (cfg_.hyper_connected()) carve_hyper_tangents(tkv + nkv + nval, K, N, h);
  S* state = cfg_.hyper_connected() ? h.tH : f.tx;
  const size_t NW = size_t(N) * state_width();
  if (tin) {
    std::copy(tin, tin + K * NW, state);
  } else {  // unit tangents: tangent k is 1 at flat position unit[k] of (B, T, state width)
#pragma omp parallel for schedule(static) if (long(K) * long(NW) > ops::kParallelMinWork)
    for (int k = 0; k < K; k++) {
      std::fill(state + size_t(k) * NW, state + size_t(k + 1) * NW, S(0));
      state[size_t(k) * NW + size_t(unit[k])] = S(1);
    }
  }
  for (int i = first; i < last; i++) {
    if (!slots_[size_t(i)].present) continue;
    if (cfg_.hyper_connected())
      hyper_sublayer_jvp(i, f, h);
    else
      sublayer_jvp(i, f);
  }
  std::copy_n(cfg_.hyper_connected() ? h.tH : f.tx, K * NW, tout);
}

// The stages in order on the value's tangent (model/stage.h), from the stream's tangent f.tx; the
// output's tangent ends in f.tx. A part starts (AfterBranch) from f.v as its caller set it.
template <class S>
void Model<S>::sublayer_jvp(int i, JvpFlow<S>& f, StagePart part) const {
  const std::vector<const StageFns<S>*>& list = stages_[size_t(i)];
  size_t k = 0, end = list.size();
  if (part != StagePart::All) {
    size_t b = 0;
    while (b < list.size() && !list[b]->branch) b++;
    if (part == StagePart::BeforeBranch) end = b;
    else k = b + 1;
  }
  if (part != StagePart::AfterBranch) f.v = f.tx;
  for (; k < end; k++) list[k]->jvp(*this, i, f);
  if (part != StagePart::BeforeBranch) f.finish();
}

template <class S>
void Model<S>::jvp_encdec(S* tout, const S* tsrc, const S* ttgt, int K) const {
  if (!cfg_.encdec()) throw Error("jvp_encdec needs an encoder-decoder model");
  require_one_stream(cfg_, "jvp_encdec (use jvp_stacks)");
  const int dec0 = cfg_.first_decoder_slot(), Ns = B_ * S_, C = cfg_.d_model;
  // the encoder's stream -> its last stream -> memory (through enc.ln_f)
  std::vector<S> tenc(size_t(K) * Ns * C), tmem(size_t(K) * Ns * C);
  jvp_sublayers_impl(tenc.data(), tsrc, nullptr, K, 0, dec0);
  if (cfg_.has_enc_final_norm())
    norm_jvp(tmem.data(), tenc.data(), enc_out_, enc_lnf_, enc_lnf_mean_, enc_lnf_rstd_, K, Ns);
  else
    tmem = tenc;
  jvp_sublayers_impl(tout, ttgt, nullptr, K, dec0, int(slots_.size()), tmem.data());
}

template <class S>
void Model<S>::vjp_encdec(S* dsrc, S* dtgt, const S* dout) {
  require_grads("Model::vjp_encdec");
  if (!cfg_.encdec()) throw Error("vjp_encdec needs an encoder-decoder model");
  require_one_stream(cfg_, "vjp_encdec (use vjp_stacks)");
  const size_t NC = size_t(B_) * T_ * cfg_.d_model, NsC = size_t(B_) * S_ * cfg_.d_model;
  std::fill(dmem_, dmem_ + NsC, S(0));
  S* dx = dstream_[0];
  std::copy(dout, dout + NC, dx);
  run_backward(cfg_.first_decoder_slot(), int(slots_.size()), dx);
  std::copy(dx, dx + NC, dtgt);
  dx = dstream_[0];
  if (cfg_.has_enc_final_norm()) {
    std::fill(dx, dx + NsC, S(0));
    norm_backward(dx, denc_lnf_, dmem_, enc_out_, enc_lnf_, enc_lnf_mean_, enc_lnf_rstd_, B_ * S_);
  } else {
    std::copy(dmem_, dmem_ + NsC, dx);
  }
  run_backward(0, cfg_.first_decoder_slot(), dx);
  std::copy(dx, dx + NsC, dsrc);
}

// The block's token-local Jacobian J_ii = dy_i / dx_i (tangent in at token i of batch row b, out at
// the same token), exactly, from the row-i quantities of the last forward. Every norm, residual and
// the MLP are token-local, so they are the full-sequence JVP restricted to one row (rows = 1 on
// pointers offset to the token); attention, the only mixer, is attn_jvp_token (branch_attn.cpp).
// Cost O(K (C^2 + C F + T C)) per block instead of O(K T (C^2 + C F)).
template <class S>
void Model<S>::jvp_block_token_local(S* tout, const S* tin, int K, int layer, int token, int row) const {
  if (cfg_.encdec()) throw Error("token-local block Jacobians are not implemented for encoder-decoder models");
  refuse_ablated("jvp_block_token_local");
  refuse_dual(2 * layer, "jvp_block_token_local");
  const int T = T_, C = cfg_.d_model, F = cfg_.ff();
  const size_t n = size_t(row) * T + token;  // the token's row in (B * T)
  const size_t KC = size_t(K) * C;
  const int FW = cfg_.fc_width();
  const int QW = cfg_.qkv_width(), A = cfg_.attn_width();
  const size_t hid = size_t(K) * std::max({3 * C, FW, QW}), mix = size_t(K) * std::max({C, F, A});
  const bool source = cfg_.is_value_source(2 * layer);  // (value residual: else the source's values are held)
  const size_t nval = source ? size_t(K) * (QW - A) / 2 : 0;
  const size_t need = 3 * KC + hid + mix + size_t(K) * T + nval + hyper_tangent_size(K, 1);
  if (jvp_scratch_.size() < need) jvp_scratch_.resize(need);
  JvpFlow<S> f;
  f.tx = jvp_scratch_.data();
  f.pool[0] = f.tx + KC;
  f.pool[1] = f.pool[0] + KC;
  S* thid = f.pool[1] + KC;                          // (K, 3C) | (K, FW)
  S* tmix = thid + hid;                             // (K, A) | (K, F)
  S* ts = tmix + mix;                               // (K, T) one head's score tangents
  f.K = K;
  f.rows = JvpRows{true, n, 1, token, row};
  f.sc = JvpScratch{thid, ts, tmix, nullptr, source ? ts + size_t(K) * T : nullptr};
  HyperTangents h;  // hyper-connections: the token's n streams (K, n, C)
  if (cfg_.hyper_connected()) carve_hyper_tangents(ts + size_t(K) * T + nval, K, 1, h);
  const size_t KW = size_t(K) * state_width();
  std::copy(tin, tin + KW, cfg_.hyper_connected() ? h.tH : f.tx);
  for (int i = 2 * layer; i < 2 * layer + 2; i++) {  // (a block's two slots)
    if (!slots_[size_t(i)].present) continue;
    if (cfg_.hyper_connected())
      hyper_sublayer_jvp(i, f, h);
    else
      sublayer_jvp(i, f);
  }
  std::copy_n(cfg_.hyper_connected() ? h.tH : f.tx, KW, tout);
}

template <class S>
void Model<S>::vjp_sublayers(S* din, const S* dout, int first, int last) {
  require_grads("Model::vjp_sublayers");
  refuse_ablated("vjp_sublayers");
  refuse_dual(first, "vjp_sublayers");
  const int dec0 = cfg_.first_decoder_slot();
  if (cfg_.encdec() && first < dec0 && last > dec0)
    throw Error("vjp_sublayers: a range of an encoder-decoder lies within one stack (use vjp_encdec)");
  const size_t NC = size_t(rows(first)) * state_width();
  if (cfg_.encdec()) std::fill(dmem_, dmem_ + size_t(B_) * S_ * cfg_.d_model, S(0));
  std::vector<S> dx(dout, dout + NC), dx_in(NC);
  clear_value_gradients();
  for (int i = last - 1; i >= first; i--) {
    if (!slots_[size_t(i)].present) continue;
    if (cfg_.hyper_connected())  // d(the n streams), (rows, n, C)
      hyper_sublayer_backward(i, dx.data(), dx_in.data());
    else
      sublayer_backward(i, dx.data(), dx_in.data());
    dx.swap(dx_in);
  }
  std::copy(dx.begin(), dx.end(), din);
}

// One stack forward mode: ty (K, rows, C) = tangent of its output y for the tangent tx0 of its input
// (both streams start there). tmem: the memory's tangent for a decoder's cross-attention.
template <class S>
void Model<S>::stack_jvp(S* ty, const S* tx0, int K, const StackEnd& e, const S* tmem) const {
  const size_t n = size_t(K) * e.rows * cfg_.d_model;
  std::vector<S> tx(n), td;
  // x_d = x_0 + sum g
  if (e.xd) td.assign(tx0, tx0 + n);
  if (cfg_.hyper_connected()) {  // the streams from x0; x = sum_t H_t at the end, or attn_res's final read
    const size_t nS = size_t(cfg_.hyper_streams), C = size_t(cfg_.d_model), rows = n / C;
    std::vector<S> tH(n * nS);
    hyper_stack_start(tx0, long(rows), tH.data());
    jvp_sublayers_impl(tH.data(), tH.data(), nullptr, K, e.first, e.last, tmem);
    if (attn_res_end(e.last - 1)) {
      const long R = e.rows;
      std::vector<S> tR(n * nS), tmix(size_t(K) * R * hyper_mix_width(int(nS))), scratch(hyper_jvp_scratch(cfg_, K, R));
      hyper_read_jvp(cfg_, out_hc_, hstate_[size_t(e.last)], out_hrstd_, out_hmix_, out_hpre_, R, 0, R, K, tH.data(),
                     tx.data(), tR.data(), tmix.data(), scratch.data());
    } else {
      for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < C; c++) {
          S sum = 0;
          for (size_t t = 0; t < nS; t++) sum += tH[(r * nS + t) * C + c];
          tx[r * C + c] = sum;
        }
    }
  } else {
    jvp_sublayers_impl(tx.data(), tx0, nullptr, K, e.first, e.last, tmem, e.xd ? td.data() : nullptr);
  }
  if (!e.norm) {
    std::copy(tx.begin(), tx.end(), ty);  // y = x
    return;
  }
  // y = ln_f(x);  or y = x + ln_f(x_d)
  norm_jvp(ty, e.xd ? td.data() : tx.data(), e.xd ? e.xd : e.x, e.p, e.mean, e.rstd, K, e.rows);
  if (e.xd)
    for (size_t k = 0; k < n; k++) ty[k] += tx[k];
}

template <class S>
void Model<S>::jvp_stacks(S* tout, const S* tsrc, const S* tin, int K) const {
  if (cfg_.encdec() != (tsrc != nullptr))
    throw Error(cfg_.encdec() ? "jvp_stacks: an encoder-decoder needs the source tangent"
                              : "jvp_stacks: only an encoder-decoder takes a source tangent");
  std::vector<S> tmem;
  if (cfg_.encdec()) {
    tmem.resize(size_t(K) * B_ * S_ * cfg_.d_model);
    stack_jvp(tmem.data(), tsrc, K, stack_end(true), nullptr);
  }
  stack_jvp(tout, tin, K, stack_end(false), cfg_.encdec() ? tmem.data() : nullptr);
}

template <class S>
void Model<S>::vjp_stacks(S* dsrc, S* din, const S* dout) {
  require_grads("Model::vjp_stacks");
  if (cfg_.encdec() != (dsrc != nullptr))
    throw Error(cfg_.encdec() ? "vjp_stacks: an encoder-decoder needs dsrc" : "vjp_stacks: only an encoder-decoder has dsrc");
  const size_t NC = size_t(B_) * T_ * cfg_.d_model, NsC = size_t(B_) * S_ * cfg_.d_model;
  // dout may alias a buffer the reverse pass uses: take a copy
  std::vector<S> dy(dout, dout + NC);
  if (cfg_.encdec()) std::fill(dmem_, dmem_ + NsC, S(0));
  S* dx = nullptr;
  stack_backward(stack_end(false), dy.data(), dx);
  std::copy(dx, dx + NC, din);
  if (!cfg_.encdec()) return;
  stack_backward(stack_end(true), dmem_, dx);
  std::copy(dx, dx + NsC, dsrc);
}

// model.cpp instantiates the class; the members defined here are instantiated here.
#define NL_INSTANTIATE(S)                                                                               \
  template void Model<S>::norm_jvp(S*, const S*, const S*, const NormParams<S>&, const S*, const S*, int,  \
                                   int) const;                                                          \
  template void Model<S>::jvp_sublayers(S*, const S*, int, int, int) const;                             \
  template void Model<S>::jvp_sublayers_unit(S*, const int64_t*, int, int, int) const;                   \
  template void Model<S>::jvp_sublayers_impl(S*, const S*, const int64_t*, int, int, int, const S*, S*) const; \
  template void Model<S>::refuse_dual(int, const char*) const;                                          \
  template void Model<S>::refuse_ablated(const char*) const;                                            \
  template void Model<S>::stack_jvp(S*, const S*, int, const StackEnd&, const S*) const;                \
  template void Model<S>::jvp_stacks(S*, const S*, const S*, int) const;                                \
  template void Model<S>::vjp_stacks(S*, S*, const S*);                                                 \
  template void Model<S>::jvp_encdec(S*, const S*, const S*, int) const;                                \
  template void Model<S>::vjp_encdec(S*, S*, const S*);                                                 \
  template void Model<S>::jvp_block_token_local(S*, const S*, int, int, int, int) const;                \
  template void Model<S>::sublayer_jvp(int, JvpFlow<S>&, StagePart) const;                              \
  template void Model<S>::vjp_sublayers(S*, const S*, int, int);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab
