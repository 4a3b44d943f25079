// model.cpp: planning, forward and backward of the Transformer (forward mode and the analysis's
// reverse-mode pieces are model_jvp.cpp). Each sub-layer is the five lines
// of docs/MODEL.md (six with a second stream); backward mirrors them in reverse with the same names
// prefixed d. Each stack ends as its last method says (stack_end: a final norm, a second stream).
#include "model/model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "model/activation_of.h"
#include "model/branch.h"
#include "model/hyper.h"
#include "model/init.h"
#include "model/methods.h"
#include "model/norm_of.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/common.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/rope.h"
#include "ops/softmax_xent.h"
#include "ops/sphere.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/rng.h"

namespace normlab {

using namespace ops;
using branch::scale_in_place;
using branch::zero;

namespace {

// The tensor `name` in a buffer laid out by `table` (the parameters or their gradients); null when the
// model has none.
template <class S>
S* tensor_at(const ParamTable& table, S* base, const char* name) {
  const ParamSpec* p = table.find(name);
  return p ? base + p->offset : nullptr;
}

}  // namespace

template <class S>
Model<S>::Model(ModelConfig cfg) : Model(std::move(cfg), Unset{}) {
  init_params(params_.data(), table_, cfg_);
}

template <class S>
Model<S>::Model(ModelConfig cfg, Unset, ForwardOnly) : Model(std::move(cfg), Unset{}, false) {}

template <class S>
Model<S>::Model(ModelConfig cfg, Unset) : Model(std::move(cfg), Unset{}, true) {}

template <class S>
Model<S>::Model(ModelConfig cfg, Unset, bool with_grads) : cfg_(std::move(cfg)), forward_only_(!with_grads) {
  cfg_.validate();
  table_ = make_param_table(cfg_);
  require_memory(double(table_.total) * sizeof(S) * (with_grads ? 2 : 1),
                 fmt::format("a model of {} parameters in {}{}", table_.total, sizeof(S) == 8 ? "double" : "float",
                             with_grads ? " with their gradients" : ""));
  params_.assign(table_.total, S(0));
  for (int i = 0; i < cfg_.n_slots(); i++) {
    slots_.push_back(cfg_.slot(i));
    qk_.push_back(slots_.back().kind == Sublayer::Attn ? qk_norm_layout(cfg_, slots_.back().layer) : QkNormLayout{});
    p_.push_back(sublayer_params(table_, cfg_, params_.data(), i));
    dp_.push_back(SublayerParams<S>{});  // (forward only: every gradient view stays null)
    stages_.emplace_back();
    for (const StageFns<S>& stage : stage_kinds<S>())
      if (stage.present(cfg_, slots_.back())) stages_.back().push_back(&stage);
  }
  auto norm_view = [&](const char* prefix) { return norm_params(table_, params_.data(), prefix); };
  if (cfg_.hyper == HyperMix::AttnRes) {  // the final read over all n streams, writing none
    out_hc_ = hyper_params(table_, params_.data(), kAttnResOutPrefix);
    out_hc_.sources = out_hc_.target = cfg_.hyper_streams;
  }
  lnf_ = norm_view("ln_f");
  enc_lnf_ = norm_view("enc.ln_f");
  lnemb_ = norm_view("ln_emb");
  hln_ = norm_view("head.ln");
  auto at = [&](const char* name) { return tensor_at(table_, params_.data(), name); };
  wtt_ = at("wtt.weight");
  escale_ = at("embed_scale");
  sz_ = at("sz");
  hw_ = at("head.dense.weight");
  hb_ = at("head.dense.bias");
  hbias_ = at("head.bias");
  if (const int R = cfg_.rope_dims()) {
    rope_cos_.assign(size_t(cfg_.seq_len) * (R / 2), S(0));
    rope_sin_.assign(rope_cos_.size(), S(0));
    rope_tables(rope_cos_.data(), rope_sin_.data(), cfg_.seq_len, R, cfg_.rope_base, cfg_.rope_scale,
                cfg_.rope_freq_factors.empty() ? nullptr : cfg_.rope_freq_factors.data(), cfg_.rope_mscale);
    if (cfg_.rope_local_base > 0) {  // the local layers' own table (Gemma 3)
      rope_local_cos_.assign(rope_cos_.size(), S(0));
      rope_local_sin_.assign(rope_cos_.size(), S(0));
      rope_tables(rope_local_cos_.data(), rope_local_sin_.data(), cfg_.seq_len, R, cfg_.rope_local_base);
    }
  }
  wte_ = at("wte.weight");
  wpe_ = at("wpe.weight");
  out_w_ = cfg_.head == Head::Untied ? at("lm_head.weight") : wte_;
  if (cfg_.encdec()) {
    src_wte_ = !cfg_.shared_embeddings ? at("enc.wte.weight") : wte_;
    src_wpe_ = at("enc.wpe.weight");
  }
  if (with_grads) {
    grads_.assign(table_.total, S(0));
    bind_gradients();
  }
}

template <class S>
void Model<S>::enable_gradients() {
  if (!forward_only_) return;
  require_memory(double(table_.total) * sizeof(S),
                 fmt::format("the gradients of a model of {} parameters in {}", table_.total,
                             sizeof(S) == 8 ? "double" : "float"));
  grads_.assign(table_.total, S(0));
  forward_only_ = false;
  bind_gradients();
}

template <class S>
void Model<S>::set_eps(double eps) {
  if (!(eps >= 0) || !std::isfinite(eps)) throw Error(fmt::format("model.eps = {} must be finite and >= 0", eps));
  cfg_.eps = eps;
}

template <class S>
void Model<S>::bind_gradients() {
  S* const g = grads_.data();
  for (int i = 0; i < cfg_.n_slots(); i++) dp_[size_t(i)] = sublayer_params(table_, cfg_, g, i);
  if (cfg_.hyper == HyperMix::AttnRes) dout_hc_ = hyper_params(table_, g, kAttnResOutPrefix);
  dlnf_ = norm_params(table_, g, "ln_f");
  denc_lnf_ = norm_params(table_, g, "enc.ln_f");
  dlnemb_ = norm_params(table_, g, "ln_emb");
  dhln_ = norm_params(table_, g, "head.ln");
  auto at = [&](const char* name) { return tensor_at(table_, g, name); };
  dwtt_ = at("wtt.weight");
  descale_ = at("embed_scale");
  dsz_ = at("sz");
  dhw_ = at("head.dense.weight");
  dhb_ = at("head.dense.bias");
  dhbias_ = at("head.bias");
  dwte_ = at("wte.weight");
  dwpe_ = at("wpe.weight");
  dout_w_ = cfg_.head == Head::Untied ? at("lm_head.weight") : dwte_;
  if (cfg_.encdec()) {
    dsrc_wte_ = !cfg_.shared_embeddings ? at("enc.wte.weight") : dwte_;
    dsrc_wpe_ = at("enc.wpe.weight");
  }
}

template <class S>
void Model<S>::set_training(bool training, uint64_t dropout_seed, long first_row) {
  training_ = training;
  dropout_seed_ = dropout_seed;
  dropout_first_row_ = size_t(first_row);
}

// One table of activation buffers: each entry names where its pointer goes and how many scalars
// it needs; plan() sums them, allocates once, and hands out the pointers. activation_bytes() sums the
// same table for another (B, T, S) and changes nothing (its entries point at scratch holders).
template <class S>
void Model<S>::plan(int B, int T, int Ssrc) {
  if (B == B_ && T == T_ && Ssrc == S_) return;
  // refused before anything changes: the model stays planned as it was
  require_memory(activation_bytes(B, T, Ssrc), fmt::format("the activations of {} sequences of {} tokens", B, T),
                 " (fewer sequences or shorter ones need less)");
  plan_buffers(B, T, Ssrc, true);
}

template <class S>
double Model<S>::activation_bytes(int B, int T, int Ssrc) {
  return double(plan_buffers(B, T, Ssrc, false)) * sizeof(S);
}

template <class S>
size_t Model<S>::plan_buffers(int B, int T, int Ssrc, bool carve) {
  const size_t N = size_t(B) * T, Ns = size_t(B) * Ssrc, C = cfg_.d_model, F = cfg_.ff(), V = cfg_.vocab_size();
  const size_t FW = cfg_.fc_width();  // fc's output columns: F, or 2F gated
  const size_t QW = cfg_.qkv_width();  // qkv's: 3C, or A + 2 KVH HS (grouped-query, head_dim)
  const size_t A = cfg_.attn_width();  // the attention output's width: C unless head_dim says otherwise
  const size_t NH = cfg_.n_heads, n_slots = slots_.size(), Nmax = std::max(N, Ns);
  const int dec0 = cfg_.first_decoder_slot();
  struct Entry {
    S** ptr;
    size_t count;
  };
  std::vector<Entry> plan;
  // sizing only: the per-slot entries point at these (never written)
  std::vector<SublayerActs<S>> acts_sized(carve ? 0 : n_slots);
  std::vector<S*> streams_sized(carve ? 0 : n_slots + 1), hstate_sized(carve ? 0 : n_slots + 1);
  if (carve) {
    B_ = B;
    T_ = T;
    S_ = Ssrc;
    a_.assign(n_slots, SublayerActs<S>{});
    streams_.assign(n_slots + 1, nullptr);
    hstate_.assign(n_slots + 1, nullptr);
  }
  std::vector<SublayerActs<S>>& acts_of = carve ? a_ : acts_sized;
  std::vector<S*>& streams_of = carve ? streams_ : streams_sized;
  std::vector<S*>& hstate_of = carve ? hstate_ : hstate_sized;
  const bool hyper = cfg_.hyper_connected();
  const size_t nS = size_t(cfg_.n_streams()), HW = size_t(hyper_mix_width(cfg_.n_streams()));
  const size_t PW = hyper ? size_t(hyper_pre_width(cfg_)) : 0;  // (mhc_lite's projection is wider than the mix)
  size_t att_max = 0;
  plan.push_back({&streams_of[0], size_t(B) * size_t(cfg_.encdec() && slots_[0].encoder ? Ssrc : T) * C});
  if (cfg_.encdec()) plan.push_back({&streams_of[dec0], N * C});  // the decoder's embedding output
  if (cfg_.has_embed_norm()) plan.insert(plan.end(), {{&emb_, N * C}, {&emb_mean_, N}, {&emb_rstd_, N}});
  if (hyper) plan.push_back({&hstate_of[0], N * nS * C});
  if (cfg_.hyper == HyperMix::AttnRes)
    plan.insert(plan.end(), {{&out_hn_, N * nS * C}, {&out_hrstd_, N * nS}, {&out_hmix_, N * HW}, {&out_hpre_, N * PW}});
  for (size_t i = 0; i < n_slots; i++) {
    if (!slots_[i].present) continue;  // absent: its output stream aliases its input below
    SublayerActs<S>& a = acts_of[i];
    const NormSites sites = norm_sites(cfg_.placement_of(slots_[i].layer), slots_[i].kind);
    const size_t t = size_t(cfg_.encdec() && slots_[i].encoder ? Ssrc : T), n = size_t(B) * t;
    const Sublayer kind = slots_[i].kind;
    const size_t att = kind == Sublayer::Cross ? size_t(B) * NH * T * Ssrc : size_t(B) * NH * t * t;
    att_max = std::max(att_max, att);
    if (hyper) {  // the branch input u (x_in), the next streams, the read's weights (model/hyper.h)
      plan.insert(plan.end(), {{&a.x_in, n * C}, {&hstate_of[i + 1], n * nS * C}, {&a.hmix, n * HW}, {&a.hpre, n * PW}});
      if (hyper_keeps_normalized_streams(cfg_)) plan.push_back({&a.hn, n * nS * C});
      if (cfg_.hyper != HyperMix::HcStatic) plan.push_back({&a.hrstd, n * nS});
    }
    if (sites.in) plan.insert(plan.end(), {{&a.h, n * C}, {&a.in_mean, n}, {&a.in_rstd, n}});
    if (cfg_.shortcut_of(slots_[i].layer) == Shortcut::Sphere) plan.push_back({&a.sc_rstd, n});
    if (p_[i].sqk) plan.insert(plan.end(), {{&a.pre, n * 2 * C}, {&a.pre_r, n * 2 * NH}});
    if (p_[i].suv) plan.push_back({&a.pre, n * FW});
    plan.push_back({&a.hid, n * (kind == Sublayer::Attn ? QW : kind == Sublayer::Cross ? C : FW)});
    if (qk_[i].n)
      plan.insert(plan.end(), {{&a.qk_raw, n * qk_[i].raw_width()}, {&a.qk_mean, n * qk_[i].stats_per_token()},
                               {&a.qk_rstd, n * qk_[i].stats_per_token()}});
    if (kind == Sublayer::Cross) plan.push_back({&a.kv, Ns * 2 * C});
    if (kind != Sublayer::Mlp) plan.push_back({&a.att, att});
    plan.push_back({&a.mix, n * (kind == Sublayer::Mlp ? F : kind == Sublayer::Attn ? A : C)});
    if (kind == Sublayer::Attn && cfg_.attn_gate_width())
      plan.insert(plan.end(), {{&a.ungated, n * A}, {&a.gate, n * size_t(cfg_.attn_gate_width())}});
    plan.push_back({&a.f, n * C});
    if (sites.branch) plan.insert(plan.end(), {{&a.g, n * C}, {&a.br_mean, n}, {&a.br_rstd, n}});
    if (sites.out) plan.insert(plan.end(), {{&a.r, n * C}, {&a.out_mean, n}, {&a.out_rstd, n}});
    plan.push_back({cfg_.encdec() && int(i) == dec0 - 1 ? &enc_out_ : &streams_of[i + 1], n * C});
  }
  if (cfg_.has_enc_final_norm())
    plan.insert(plan.end(), {{&memory_, Ns * C}, {&enc_lnf_mean_, Ns}, {&enc_lnf_rstd_, Ns}});
  if (cfg_.has_final_norm()) plan.insert(plan.end(), {{&xf_, N * C}, {&lnf_mean_, N}, {&lnf_rstd_, N}});
  const bool enc_dual = cfg_.encdec() && cfg_.dual_stack(0), dual = cfg_.dual_stack(cfg_.total_layers() - 1);
  if (enc_dual) plan.push_back({&enc_dual_, Ns * C});
  if (dual) plan.push_back({&dual_, N * C});
  if (enc_dual || dual) plan.push_back({&ddual_, Nmax * C});
  if (cfg_.head == Head::Mlm)
    plan.insert(plan.end(), {{&head_u_, N * C}, {&head_a_, N * C}, {&head_t_, N * C},
                             {&head_mean_, N}, {&head_rstd_, N}});
  if (cfg_.has_logits()) plan.insert(plan.end(), {{&logits_, N * V}, {&lse_, N}});
  if (sz_) plan.push_back({&logits_raw_, N * V});
  plan.insert(plan.end(), {{&dstream_[0], Nmax * C}, {&dstream_[1], Nmax * C}, {&dh_, Nmax * C},
                           {&df_, Nmax * C}, {&dg_, Nmax * C}, {&dr_, Nmax * C},
                           {&dmix_, Nmax * std::max({C, F, A})}, {&dhid_, Nmax * std::max({QW, C, FW})},
                           {&datt_, att_max}});
  if (cfg_.attn_gate_width()) plan.push_back({&dgate_, Nmax * size_t(cfg_.attn_gate_width())});
  if (cfg_.value_residual > 0) plan.push_back({&dvalues_, Nmax * (QW - A) / 2});
  if (hyper)
    plan.insert(plan.end(), {{&dhyper_[0], Nmax * nS * C}, {&dhyper_[1], Nmax * nS * C}, {&dhmix_, Nmax * HW},
                             {&dhpre_, 2 * Nmax * PW}, {&dhn_, Nmax * nS * C}});
  if (cfg_.encdec()) plan.insert(plan.end(), {{&dkv_, Ns * 2 * C}, {&dmem_, Ns * C}});
  bool scaled = false;
  for (int l = 0; l < cfg_.total_layers(); l++) scaled |= method_of(cfg_.placement_of(l)).depth_scaled_input;
  if (scaled) plan.push_back({&dscale_, Nmax * C});
  size_t total = 0;
  for (const auto& e : plan) total += e.count;
  if (!carve) return total;
  if (acts_.capacity() > total) std::vector<S>().swap(acts_);  // a smaller plan gives the memory back
  acts_.assign(total, S(0));
  size_t offset = 0;
  for (const auto& e : plan) {
    *e.ptr = acts_.data() + offset;
    offset += e.count;
  }
  // aliases for absent sites (and absent sub-layers: the identity, x' = x)
  for (size_t i = 0; i < n_slots; i++) {
    SublayerActs<S>& a = a_[i];
    const NormSites sites = norm_sites(cfg_.placement_of(slots_[i].layer), slots_[i].kind);
    S*& out = cfg_.encdec() && int(i) == dec0 - 1 ? enc_out_ : streams_[i + 1];
    if (!slots_[i].present) {
      out = streams_[i];
      a.x_in = a.x_out = streams_[i];
      hstate_[i + 1] = hstate_[i];
      continue;
    }
    a.hs_in = hstate_[i];
    if (!hyper) a.x_in = streams_[i];  // (hyper-connected: x_in is the branch input read from the streams)
    a.x_out = out;
    if (!sites.in) a.h = a.x_in;
    if (!sites.branch) a.g = a.f;
    if (!sites.out) a.r = a.x_out;
  }
  if (cfg_.encdec() && !cfg_.has_enc_final_norm()) memory_ = enc_out_;
  if (!cfg_.has_final_norm()) xf_ = streams_[n_slots];
  if (!cfg_.has_embed_norm()) emb_ = streams_[cfg_.encdec() ? size_t(dec0) : 0];
  if (!enc_dual) enc_dual_ = nullptr;  // planned buffers are fresh; these stay null when absent
  if (!dual) dual_ = nullptr;
  ids_.assign(N, 0);
  labels_.assign(N, kIgnoreLabel);
  types_.assign(N, 0);
  key_mask_.assign(N, 1);
  src_ids_.assign(Ns, 0);
  src_mask_.assign(Ns, 1);
  return total;
}

template <class S>
void Model<S>::norm_forward(S* out, S* mean, S* rstd, const S* inp, const NormParams<S>& p, int rows) {
  normlab::norm_forward(cfg_.norm, out, mean, rstd, inp, p, rows, cfg_.d_model, cfg_.eps);
}

template <class S>
void Model<S>::norm_backward(S* dinp, const NormParams<S>& dp, const S* dout, const S* inp,
                             const NormParams<S>& p, const S* mean, const S* rstd, int rows) {
  normlab::norm_backward(cfg_.norm, dinp, dp, dout, inp, p, mean, rstd, rows, cfg_.d_model, dscale_);
}

template <class S>
uint64_t Model<S>::dropout_site_seed(int site) const {
  uint64_t state = dropout_seed_ ^ (uint64_t(cfg_.seed) << 20) ^ uint64_t(site);
  return splitmix64(state);
}

// The sub-layer: its stages in order (model/stage.h; h = ln_in(x), f = F(h), g = ln_branch(f),
// r = omega x + lambda g, x' = ln_out(r), as each method's entry selects them), on the planned
// activations, where an absent site's output aliases its input.
template <class S>
void Model<S>::sublayer_forward(int i) {
  if (!ablation_.mlp && slots_[size_t(i)].kind == Sublayer::Mlp) {  // removed: x' = x
    if (cfg_.hyper_connected()) return hyper_pass(i);
    const size_t n = size_t(rows(i)) * cfg_.d_model;
    std::copy(a_[size_t(i)].x_in, a_[size_t(i)].x_in + n, a_[size_t(i)].x_out);
    return;
  }
  if (cfg_.hyper_connected()) hyper_read(i);
  for (const StageFns<S>* stage : stages_[size_t(i)]) stage->forward(*this, i);
  if (cfg_.hyper_connected()) hyper_write(i);
}

template <class S>
void Model<S>::set_ablation(Ablation a) {
  if (a.skips && a.mlp) {
    ablation_ = a;
    return;
  }
  if (cfg_.dual_stack(0) || cfg_.dual_stack(cfg_.total_layers() - 1))
    throw Error("an ablation of a two-stream (ResiDual) model is not defined here");
  if (!cfg_.hyper_connected()) {  // (hyper-connected: the mixes' own ablations, model.h)
    ModelConfig variant = cfg_;
    variant.residual = cfg_.residual && a.skips;
    variant.mlp = cfg_.mlp && a.mlp;
    const std::vector<std::string> why = variant.violations();
    if (!why.empty())
      throw Error(fmt::format("this model has no form with{} skips and{} MLPs: {}", a.skips ? "" : "out",
                              a.mlp ? "" : "out", why.front()));
  }
  ablation_ = a;
}

// The stages in reverse. dx_in is assigned by the shortcut and added into by the stage that reads
// the stream (the first that transforms the value: the input norm, or the branch without one).
template <class S>
void Model<S>::sublayer_backward(int i, const S* dx_out, S* dx_in, const S* dd) {
  BackwardFlow<S> f;
  f.d = dx_out;
  f.dx = dx_in;
  f.dd = dd;
  f.n = size_t(rows(i)) * cfg_.d_model;
  f.pool[0] = df_;
  f.pool[1] = dg_;
  const std::vector<const StageFns<S>*>& list = stages_[size_t(i)];
  size_t first = 0;  // the first stage that transforms the value reads the stream
  while (first < list.size() && !list[first]->transforms) first++;
  for (size_t k = list.size(); k-- > 0;) {
    f.reads_stream = k <= first;
    list[k]->backward(*this, i, f);
    if (list[k]->branch && !f.reads_stream && branch_gradient_reader_) branch_gradient_reader_(i, f.d);
  }
}

template <class S>
double Model<S>::forward(const int32_t* ids, const int32_t* labels, int B, int T, const int32_t* types,
                         const uint8_t* key_mask, const Source& src) {
  if (cfg_.encdec() != (src.ids != nullptr))
    throw Error(cfg_.encdec() ? "an encoder-decoder model needs source ids" : "only an encdec model takes source ids");
  plan(B, T, cfg_.encdec() ? src.S : 0);
  round_weights_for_forward();
  const int N = B * T, C = cfg_.d_model, n_slots = int(slots_.size());
  const int dec0 = cfg_.first_decoder_slot();
  std::copy(ids, ids + N, ids_.begin());
  std::copy(labels, labels + N, labels_.begin());
  if (types) std::copy(types, types + N, types_.begin());
  else std::fill(types_.begin(), types_.end(), 0);
  has_key_mask_ = key_mask != nullptr;
  if (key_mask) std::copy(key_mask, key_mask + N, key_mask_.begin());
  if (cfg_.encdec()) {
    const size_t Ns = size_t(B) * S_;
    std::copy(src.ids, src.ids + Ns, src_ids_.begin());
    has_src_mask_ = src.mask != nullptr;
    if (src.mask) std::copy(src.mask, src.mask + Ns, src_mask_.begin());
    // the encoder: e = wte_src[src] + enc.wpe;  its slots;  memory = enc.ln_f(e)
    embedding_forward(streams_[0], src_ids_.data(), src_wte_, src_wpe_, B, S_, C);
    if (training_ && cfg_.dropout > 0)
      dropout_forward(streams_[0], streams_[0], cfg_.dropout, dropout_site_seed(n_slots + 1), Ns * C, dropout_first(Ns * C));
    profile_ratio_ = 1.0;
    // x_d = e (a two-stream encoder)
    if (enc_dual_) std::copy(streams_[0], streams_[0] + Ns * C, enc_dual_);
    for (int i = 0; i < dec0; i++)
      if (slots_[size_t(i)].present) sublayer_forward(i);
    // memory = enc.ln_f(x), or x + enc.ln_f(x_d), or x
    stack_end_forward(stack_end(true));
  }
  // emb = wte[ids] + wpe (+ wtt[types]);  x0 = ln_emb(emb), or emb
  S* x0 = streams_[size_t(cfg_.encdec() ? dec0 : 0)];
  embedding_forward(emb_, ids_.data(), wte_, wpe_, B, T, C);
  if (wtt_) token_type_forward(emb_, types_.data(), wtt_, N, C);
  if (escale_ || cfg_.embed_scale != 1.0)  // (Gemma's sqrt(d); DyT's LLaMA recipe learns it)
    scale_in_place(emb_, size_t(N) * C, S(embedding_scale()));
  if (cfg_.has_embed_norm()) norm_forward(x0, emb_mean_, emb_rstd_, emb_, lnemb_, N);
  if (training_ && cfg_.dropout > 0)
    dropout_forward(x0, x0, cfg_.dropout, dropout_site_seed(0), size_t(N) * C, dropout_first(size_t(N) * C));
  profile_ratio_ = 1.0;  // each stack is its own chain (profile_admin)
  // x_d = x0 (a two-stream stack);  the streams H from x0 (hyper-connections)
  if (dual_) std::copy(x0, x0 + size_t(N) * C, dual_);
  if (cfg_.hyper_connected()) hyper_stack_start(x0, N, hstate_[0]);
  for (int i = cfg_.encdec() ? dec0 : 0; i < n_slots; i++)
    if (slots_[size_t(i)].present) sublayer_forward(i);
  return finish_forward();
}

template <class S>
void Model<S>::round_weights_for_forward() {
  if constexpr (std::is_same_v<S, float>) {  // bf16: the weights rounded once for this step's GEMMs
    if (prec_ == ops::Precision::Bf16) {
      if (!params16_current_) {
        params16_.resize(params_.size());
        ops::round_to_bf16(params16_.data(), params_.data(), params_.size());
      }
    } else {
      params16_ = {};
    }
    params16_current_ = false;  // a handoff serves one forward (and its backward)
  }
}

template <class S>
double Model<S>::forward_from(int first) {
  if (B_ == 0) throw Error("forward_from: no forward to rerun");
  if (first < 0 || first > int(slots_.size())) throw Error(fmt::format("forward_from: no sub-layer {}", first));
  if (!can_forward_from())
    throw Error("forward_from reruns one plain stream in evaluation: not an encoder-decoder, two streams, "
                "hyper-connections or dropout in training");
  round_weights_for_forward();
  for (int i = first; i < int(slots_.size()); i++)
    if (slots_[size_t(i)].present) sublayer_forward(i);
  return finish_forward();
}

// After the last sub-layer: the stack's end, the head and the loss of forward().
template <class S>
double Model<S>::finish_forward() {
  const int N = B_ * T_, V = cfg_.vocab_size();
  // xf = ln_f(x), or x + ln_f(x_d), or x
  stack_end_forward(stack_end(false));
  label_count_ = 0;
  if (!cfg_.has_logits()) return std::numeric_limits<double>::quiet_NaN();
  head_forward();
  smoothing_used_ = training_ ? label_smoothing_ : 0.0;
  z_loss_used_ = training_ ? z_loss_ : 0.0;
  const double sum =
      softmax_xent_forward(lse_, logits_, labels_.data(), N, V, &label_count_, smoothing_used_, z_loss_used_);
  return label_count_ > 0 ? sum / double(label_count_) : std::numeric_limits<double>::quiet_NaN();
}

// tied:  logits = xf @ wte^T;  untied: logits = xf @ lm_head^T  (output_logits; muP: divided by m)
// mlm:   u = xf @ Wd^T + bd;  a = act(u);  t = ln_head(a);  logits = t @ wte^T + b_out
// then nGPT's logits = s_z logits, column by column, and with logit_softcap c > 0 logits = c tanh(logits / c)
template <class S>
void Model<S>::head_forward() {
  const int N = B_ * T_, C = cfg_.d_model, V = cfg_.vocab_size();
  if (cfg_.head != Head::Mlm) return output_logits(logits_, xf_, N, sz_ ? logits_raw_ : nullptr, prec_);
  const S* wte = out_w_;
  matmul_forward<S>(head_u_, xf_, hw_, hb_, N, C, C, prec_, bf16_of(hw_));
  activation_forward(cfg_.activation, head_a_, head_u_, N, C);  // element-wise (a gated one is refused)
  norm_forward(head_t_, head_mean_, head_rstd_, head_a_, hln_, N);
  matmul_forward<S>(logits_, head_t_, wte, hbias_, N, C, V, prec_, bf16_of(wte));
  if (sz_) {
    std::copy(logits_, logits_ + size_t(N) * V, logits_raw_);
    scale_columns(logits_, logits_raw_, long(N), V, sz_, sphere_scale("sz", C).factor);
  }
  if (cfg_.logit_softcap > 0) softcap_in_place(logits_, size_t(N) * V, cfg_.logit_softcap);
}

template <class S>
void Model<S>::output_logits(S* logits, const S* xf, long rows, S* raw, ops::Precision prec) const {
  const int C = cfg_.d_model, V = cfg_.vocab_size();
  const size_t n = size_t(rows) * V;
  matmul_forward<S>(logits, xf, out_w_, nullptr, int(rows), C, V, prec,
                    prec == ops::Precision::Fp32 ? nullptr : bf16_of(out_w_));
  if (cfg_.mup_base_width > 0) branch::scale_in_place(logits, n, S(1.0 / cfg_.mup_width_mult()));  // muP's readout: x W^T / m
  if (sz_) {  // nGPT: logits = s_z logits, column by column
    if (raw) std::copy(logits, logits + n, raw);
    scale_columns(logits, raw ? raw : logits, rows, V, sz_, sphere_scale("sz", C).factor);
  }
  // logits = c tanh(logits / c) (Gemma 2's final soft-capping)
  if (cfg_.logit_softcap > 0) softcap_in_place(logits, n, cfg_.logit_softcap);
}

// dxf = d(loss)/d(xf) (assigned) and the head's parameter gradients (added), from dlogits in logits_.
template <class S>
void Model<S>::head_backward(S* dxf) {
  const int N = B_ * T_, C = cfg_.d_model, V = cfg_.vocab_size();
  const size_t NC = size_t(N) * C;
  const S* wte = out_w_;
  S* dwte = dout_w_;
  zero(dxf, NC);
  if (cfg_.head != Head::Mlm) {
    if (cfg_.mup_base_width > 0) branch::scale_in_place(logits_, size_t(N) * V, S(1.0 / cfg_.mup_width_mult()));  // logits = x W^T / m
    matmul_backward<S>(dxf, dwte, nullptr, logits_, xf_, wte, N, C, V, prec_, bf16_of(wte));
    return;
  }
  S* dt = df_;
  S* da = dg_;
  S* du = dr_;
  // logits = t @ wte^T + b_out
  zero(dt, NC);
  matmul_backward<S>(dt, dwte, dhbias_, logits_, head_t_, wte, N, C, V, prec_, bf16_of(wte));
  // t = ln_head(a)
  zero(da, NC);
  norm_backward(da, dhln_, dt, head_a_, hln_, head_mean_, head_rstd_, N);
  // a = act(u)
  zero(du, NC);
  activation_backward(cfg_.activation, du, head_u_, da, N, C);
  // u = xf @ Wd^T + bd
  matmul_backward<S>(dxf, dhw_, dhb_, du, xf_, hw_, N, C, C, prec_, bf16_of(hw_));
}

template <class S>
void Model<S>::require_grads(const char* what) const {
  if (forward_only_) throw Error(fmt::format("{}: this model was built for forward passes only (no gradients)", what));
}

template <class S>
void Model<S>::backward(double loss_scale) {
  require_grads("Model::backward");
  if (ablated()) throw Error("Model::backward: the model runs ablated (set_ablation), which is for forward passes only");
  const int N = B_ * T_, V = cfg_.vocab_size();
  if (label_count_ == 0) return;  // no labels (or no head): no loss and no gradient
  // loss = mean xent(logits) (label-smoothed in training with eps > 0):  logits become dlogits in place
  softmax_xent_backward(logits_, lse_, labels_.data(), loss_scale / double(label_count_), N, V, cfg_.logit_softcap,
                        smoothing_used_, z_loss_used_);
  // nGPT: logits = s_z raw:  ds_z += sum dlogits raw;  draw = s_z dlogits
  if (sz_) {
    const double factor = sphere_scale("sz", cfg_.d_model).factor;
    scale_columns_param_grad(dsz_, logits_, logits_raw_, long(N), V, factor);
    scale_columns(logits_, logits_, long(N), V, sz_, factor);
  }
  // logits = head(xf)
  head_backward(dh_);
  // xf = ln_f(x) (or x + ln_f(x_d), or x); the decoder's (or the only) slots
  if (cfg_.encdec()) zero(dmem_, size_t(B_) * S_ * cfg_.d_model);
  S* dx = nullptr;
  stack_backward(stack_end(false), dh_, dx);
  embedding_backward_all(dx);
  if (cfg_.encdec()) source_backward(dmem_);
}

// A stack's slots and how it ends (its final norm, its second stream), from the planned buffers.
template <class S>
typename Model<S>::StackEnd Model<S>::stack_end(bool encoder) const {
  StackEnd e;
  if (encoder) {
    e = {0, cfg_.first_decoder_slot(), B_ * S_, enc_out_, enc_dual_, memory_, cfg_.has_enc_final_norm(), enc_lnf_,
         denc_lnf_, enc_lnf_mean_, enc_lnf_rstd_};
  } else {
    const int n_slots = int(slots_.size());
    e = {cfg_.encdec() ? cfg_.first_decoder_slot() : 0, n_slots, B_ * T_, streams_[size_t(n_slots)], dual_, xf_,
         cfg_.has_final_norm(), lnf_, dlnf_, lnf_mean_, lnf_rstd_};
  }
  return e;
}

// y = ln_f(x);  or, with a second stream, y = x + ln_f(x_d);  or y = x (y aliases x)
template <class S>
void Model<S>::stack_end_forward(const StackEnd& e) {
  if (!e.norm) return;
  norm_forward(e.y, e.mean, e.rstd, e.xd ? e.xd : e.x, e.p, e.rows);
  if (!e.xd) return;
  const size_t n = size_t(e.rows) * cfg_.d_model;
#pragma omp parallel for schedule(static) if((long)n > ops::kParallelMinWork)
  for (long k = 0; k < (long)n; k++) e.y[k] += e.x[k];
}

// The stack in reverse: its ending, its slots, and (two streams) x_d = x_0 + sum g, so the stack
// input's gradient gathers both streams' and every g receives d(loss)/d(x_d).
template <class S>
void Model<S>::stack_backward(const StackEnd& e, const S* dy, S*& dx) {
  const size_t n = size_t(e.rows) * cfg_.d_model;
  dx = dstream_[0];
  const S* dd = nullptr;
  if (e.norm && !e.xd) {
    // y = ln_f(x)
    zero(dx, n);
    norm_backward(dx, e.dp, dy, e.x, e.p, e.mean, e.rstd, e.rows);
  } else {
    // y = x (+ ln_f(x_d)):  dx = dy;  dx_d = ln_f'(x_d)^T dy
    std::copy(dy, dy + n, dx);
    if (e.xd) {
      zero(ddual_, n);
      norm_backward(ddual_, e.dp, dy, e.xd, e.p, e.mean, e.rstd, e.rows);
      dd = ddual_;
    }
  }
  if (cfg_.hyper_connected()) {  // (reads dx before it re-uses dstream_)
    hyper_stack_backward(e.first, e.last, dx, dx, bool(stream_gradient_reader_));
    return;
  }
  const bool read = stream_gradient_reader_ && e.last == int(slots_.size());  // not an encdec's encoder
  if (read) stream_gradient_reader_(e.last, dx);
  run_backward(e.first, e.last, dx, dd, read);
  // x_d = x_0 + ...:  dx_0 += dx_d
  if (dd) {
#pragma omp parallel for schedule(static) if((long)n > ops::kParallelMinWork)
    for (long k = 0; k < (long)n; k++) dx[k] += dd[k];
  }
}

template <class S>
void Model<S>::clear_value_gradients() {
  if (dvalues_) zero(dvalues_, size_t(std::max(B_ * T_, B_ * S_)) * (cfg_.qkv_width() - cfg_.attn_width()) / 2);
}

// Slots [first, last) in reverse; dx holds d(loss)/d(stream last) on entry and d/d(stream first)
// on return (it points into the ping-pong buffers). dd: d(loss)/d(x_d) of a two-stream stack.
template <class S>
void Model<S>::run_backward(int first, int last, S*& dx, const S* dd, bool read) {
  clear_value_gradients();
  for (int i = last - 1; i >= first; i--) {
    if (slots_[size_t(i)].present) {
      S* dx_in = (dx == dstream_[0]) ? dstream_[1] : dstream_[0];
      sublayer_backward(i, dx, dx_in, dd);
      dx = dx_in;
    }
    if (read) stream_gradient_reader_(i, dx);
  }
}

// x0 = ln_emb(emb);  emb = wte[ids] + wpe (+ wtt[types])  (the decoder's, or the only, embedding)
template <class S>
void Model<S>::embedding_backward_all(const S* dx0) {
  const int B = B_, T = T_, N = B * T, C = cfg_.d_model;
  if (training_ && cfg_.dropout > 0) {
    S* tmp = (dx0 == dstream_[0]) ? dstream_[1] : dstream_[0];
    zero(tmp, size_t(N) * C);
    dropout_backward(tmp, dx0, cfg_.dropout, dropout_site_seed(0), size_t(N) * C, dropout_first(size_t(N) * C));
    dx0 = tmp;
  }
  const S* demb = dx0;
  if (cfg_.has_embed_norm()) {
    S* tmp = (dx0 == dstream_[0]) ? dstream_[1] : dstream_[0];
    zero(tmp, size_t(N) * C);
    norm_backward(tmp, dlnemb_, dx0, emb_, lnemb_, emb_mean_, emb_rstd_, N);
    demb = tmp;
  }
  if (descale_) {  // emb = s wte[ids]:  ds += sum_n <demb_n, wte[ids_n]> (in double, in row order)
    double ds = 0;
    for (size_t n = 0; n < size_t(N); n++) {
      const S* w = wte_ + size_t(ids_[n]) * C;
      for (int c = 0; c < C; c++) ds += double(demb[n * C + c]) * double(w[c]);
    }
    *descale_ += S(ds);
  }
  if (escale_ || cfg_.embed_scale != 1.0) {  // emb = s wte[ids]
    S* tmp = (demb == dstream_[0]) ? dstream_[1] : dstream_[0];
    const S s = S(embedding_scale());
    for (size_t k = 0; k < size_t(N) * C; k++) tmp[k] = s * demb[k];
    demb = tmp;
  }
  embedding_backward(dwte_, dwpe_, demb, ids_.data(), B, T, C);
  if (dwtt_) token_type_backward(dwtt_, demb, types_.data(), N, C);
}

// encdec: from d(loss)/d(memory) through the encoder's final norm, its slots and the source embedding.
template <class S>
void Model<S>::source_backward(const S* dmem) {
  const int Ns = B_ * S_, C = cfg_.d_model, n_slots = int(slots_.size());
  const size_t NC = size_t(Ns) * C;
  // memory = enc.ln_f(x) (or x + enc.ln_f(x_d), or x); the encoder's slots
  S* dx = nullptr;
  stack_backward(stack_end(true), dmem, dx);
  if (training_ && cfg_.dropout > 0) {
    S* tmp = (dx == dstream_[0]) ? dstream_[1] : dstream_[0];
    zero(tmp, NC);
    dropout_backward(tmp, dx, cfg_.dropout, dropout_site_seed(n_slots + 1), NC, dropout_first(NC));
    dx = tmp;
  }
  embedding_backward(dsrc_wte_, dsrc_wpe_, dx, src_ids_.data(), B_, S_, C);
}

template <class S>
std::vector<double> Model<S>::profile_admin(const int32_t* ids, int B, int T, const uint8_t* key_mask,
                                            const Source& src) {
  const bool was_training = training_;
  training_ = false;
  profiling_ = true;
  profiled_.clear();
  std::vector<int32_t> none(size_t(B) * T, kIgnoreLabel);
  try {
    forward(ids, none.data(), B, T, nullptr, key_mask, src);
  } catch (...) {
    profiling_ = false;
    training_ = was_training;
    throw;
  }
  profiling_ = false;
  training_ = was_training;
  return profiled_;
}

template <class S>
uint16_t* Model<S>::bf16_weights_buffer() {
  if constexpr (!std::is_same_v<S, float>) return nullptr;
  if (prec_ != ops::Precision::Bf16) return nullptr;
  params16_.resize(params_.size());
  return params16_.data();
}

template <class S>
void Model<S>::project_to_sphere() {
  if (!cfg_.on_sphere()) return;
  normlab::project_to_sphere(params_.data(), table_, cfg_);
  params16_current_ = false;
}

template <class S>
void Model<S>::zero_grad() {
  zero(grads_.data(), grads_.size());
}

template class Model<float>;
template class Model<double>;

}  // namespace normlab
