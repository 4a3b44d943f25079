// decode.cpp: incremental decoding with a KV cache, greedy and beam search (decode.h).
#include "model/decode.h"
#include "model/methods.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "model/activation_of.h"
#include "model/hyper.h"
#include "ops/attention.h"
#include "ops/common.h"
#include "ops/embedding.h"
#include "ops/softmax_xent.h"
#include "ops/sphere.h"
#include "model/norm_of.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "util/error.h"

namespace normlab {

using namespace ops;

template <class S>
IncrementalDecoder<S>::IncrementalDecoder(Model<S>& model, const int32_t* src, const uint8_t* src_mask, int B,
                                          int Ssrc, int max_len)
    : m_(model), B_(B), max_len_(max_len), S_(Ssrc), src_(src, src + size_t(B) * Ssrc) {
  const ModelConfig& cfg = m_.config();
  if (!cfg.encdec()) throw Error("decoding needs an encoder-decoder model (model.arch = \"encdec\")");
  m_.refuse_ablated("IncrementalDecoder");
  if (max_len < 1 || max_len > cfg.seq_len)
    throw Error(fmt::format("decoding: max_len {} must be in [1, {}] (the model's seq_len)", max_len, cfg.seq_len));
  if (Ssrc < 1 || Ssrc > cfg.seq_len)
    throw Error(fmt::format("decoding: a source of {} tokens does not fit the model's seq_len {}", Ssrc, cfg.seq_len));
  if (src_mask) src_mask_.assign(src_mask, src_mask + size_t(B) * Ssrc);
  // one forward with a BOS-only target runs the encoder and every cross-attention's key-value map
  std::vector<int32_t> bos(size_t(B), kBosToken), none(size_t(B), kIgnoreLabel);
  m_.forward(bos.data(), none.data(), B, 1, nullptr, nullptr, Source{src, Ssrc, src_mask});
  allocate();
  for (int i = cfg.first_decoder_slot(); i < cfg.n_slots(); i++)
    if (cfg.slot(i).present && cfg.slot(i).kind == Sublayer::Cross)
      cache_[size_t(i)].assign(m_.acts(i).kv, m_.acts(i).kv + size_t(B) * Ssrc * 2 * cfg.d_model);
}

template <class S>
IncrementalDecoder<S>::IncrementalDecoder(Model<S>& model, int B, int max_len)
    : m_(model), B_(B), max_len_(max_len), S_(0) {
  const ModelConfig& cfg = m_.config();
  if (cfg.arch != Arch::Gpt) throw Error("incremental decoding without a source needs a causal (gpt) model");
  m_.refuse_ablated("IncrementalDecoder");
  if (cfg.type_vocab > 0) throw Error("incremental decoding: a model with token-type embeddings is not causal");
  if (max_len < 1 || max_len > cfg.seq_len)
    throw Error(fmt::format("decoding: max_len {} must be in [1, {}] (the model's seq_len)", max_len, cfg.seq_len));
  allocate();
}

// The self-attention caches and every per-step buffer.
template <class S>
void IncrementalDecoder<S>::allocate() {
  const ModelConfig& cfg = m_.config();
  const int B = B_, C = cfg.d_model, n = cfg.n_slots(), kv = 2 * cfg.kv_heads() * cfg.head_size();
  cache_.assign(size_t(n), {});
  for (int i = cfg.first_decoder_slot(); i < n; i++)
    if (cfg.slot(i).present && cfg.slot(i).kind == Sublayer::Attn) cache_[size_t(i)].assign(size_t(B) * max_len_ * kv, S(0));
  const size_t BC = size_t(B) * C, wide = size_t(B) * std::max({3 * C, cfg.qkv_width(), cfg.fc_width()});
  for (auto* v : {&x_, &h_, &f_, &g_, &r_}) v->assign(BC, S(0));
  hid_.assign(wide, S(0));
  mix_.assign(wide, S(0));
  mean_.assign(size_t(B), S(0));
  rstd_.assign(size_t(B), S(0));
  att_.assign(size_t(cfg.n_heads) * std::max(max_len_, S_), S(0));
  logits_.assign(size_t(B) * cfg.vocab_size(), S(0));
  if (cfg.hyper_connected()) {
    const size_t n = size_t(cfg.hyper_streams);
    for (auto* v : {&hs_, &hs_next_}) v->assign(BC * n, S(0));
    if (hyper_keeps_normalized_streams(cfg)) hn_.assign(BC * n, S(0));
    hrstd_.assign(size_t(B) * n, S(0));
    hmix_.assign(size_t(B) * hyper_mix_width(cfg.hyper_streams), S(0));
    hpre_.assign(size_t(B) * hyper_pre_width(cfg), S(0));
  }
}

template <class S>
void IncrementalDecoder<S>::norm(S* out, const S* inp, const NormParams<S>& p) {
  const ModelConfig& cfg = m_.config();
  normlab::norm_forward(cfg.norm, out, mean_.data(), rstd_.data(), inp, p, B_, cfg.d_model, cfg.eps);
}

// One position through the decoder: the sub-layers of docs/MODEL.md on one row per sequence, with
// self-attention over the cached keys and values of positions 0..t.
template <class S>
const std::vector<S>& IncrementalDecoder<S>::step(const int32_t* tokens) {
  const ModelConfig& cfg = m_.config();
  if (t_ >= max_len_) throw Error(fmt::format("decoding: more than max_len = {} positions", max_len_));
  const int B = B_, C = cfg.d_model, t = t_;
  const ParamTable& table = m_.table();
  const S* wte = m_.params().data() + table.find("wte.weight")->offset;
  const ParamSpec* pe = table.find("wpe.weight");  // absent without learned positions
  const S* wpe = pe ? m_.params().data() + pe->offset : nullptr;
  // x = s wte[token] + wpe[t] (s: the embedding scale, 1 with learned positions)
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++)
      x_[size_t(b) * C + c] = S(m_.embedding_scale()) * wte[size_t(tokens[b]) * C + c] + (wpe ? wpe[size_t(t) * C + c] : S(0));
  // x = ln_emb(x) (Peri-LN's embedding norm, or embed_norm)
  if (cfg.has_embed_norm()) {
    norm(h_.data(), x_.data(), m_.embed_norm());
    x_.swap(h_);
  }
  // x_d = x (a two-stream decoder; every op on it is token-local, so this position's x_d is all it needs)
  const bool dual = cfg.dual_stack(cfg.total_layers() - 1);
  if (dual) xd_ = x_;
  // the sub-layers: each slot's stages on this position (model/stage.h)
  DecodeFlow<S> f;
  f.x = &x_;
  f.xd = dual ? &xd_ : nullptr;
  f.pool[0] = &h_;
  f.pool[1] = &g_;
  f.pool[2] = &r_;
  f.branch_out = &f_;
  const bool hyper = cfg.hyper_connected();
  if (hyper)  // the streams start as the embedding output (model/hyper.h)
    for (int b = 0; b < B; b++)
      for (int s = 0; s < cfg.hyper_streams; s++) {
        S* h = hs_.data() + (size_t(b) * cfg.hyper_streams + size_t(s)) * C;
        if (hyper_stream_starts_at_x0(cfg, s)) std::copy_n(x_.data() + size_t(b) * C, C, h);
        else std::fill(h, h + C, S(0));
      }
  for (int i = cfg.first_decoder_slot(); i < cfg.n_slots(); i++) {
    if (!cfg.slot(i).present) continue;
    // hyper-connected: the stages run on the branch input u read from the streams, and end at the
    // branch's contribution g, which the write adds to the mixed streams (model/hyper.h)
    if (hyper)
      hyper_read_forward(cfg, m_.sublayer_params_of(i).hc, hs_.data(), long(B), x_.data(), hs_next_.data(),
                         hn_.data(), hrstd_.data(), hmix_.data(), hpre_.data());
    f.v = x_.data();
    for (const StageFns<S>* stage : m_.stages_of(i)) stage->decode(*this, i, f);
    f.finish();
    if (hyper) {  // x = the sum of the streams after the write
      hyper_write_forward(cfg.hyper_streams, hmix_.data(), x_.data(), long(B), C, hs_next_.data(), h_.data());
      hs_.swap(hs_next_);
      x_.swap(h_);
    }
  }
  if (cfg.hyper == HyperMix::AttnRes)  // the final read over every stream, not their sum
    hyper_read_forward(cfg, m_.attn_res_out_params(), hs_.data(), long(B), x_.data(), static_cast<S*>(nullptr),
                       hn_.data(), hrstd_.data(), hmix_.data(), hpre_.data());
  // xf = ln_f(x), or x + ln_f(x_d);  logits = xf wte^T
  const S* xf = x_.data();
  if (cfg.has_final_norm()) norm(h_.data(), dual ? xd_.data() : x_.data(), m_.final_norm()), xf = h_.data();
  if (dual)
    for (size_t k = 0; k < h_.size(); k++) h_[k] += x_[k];
  m_.output_logits(logits_.data(), xf, B);  // the model's own head (tied or untied, nGPT's s_z, the soft cap)
  t_++;
  return logits_;
}

template <class S>
void IncrementalDecoder<S>::reorder(const std::vector<int>& parent) {
  const ModelConfig& cfg = m_.config();
  const size_t row = size_t(max_len_) * 2 * cfg.kv_heads() * cfg.head_size();
  for (int i = cfg.first_decoder_slot(); i < cfg.n_slots(); i++) {
    if (cfg.slot(i).kind != Sublayer::Attn || cache_[size_t(i)].empty()) continue;
    std::vector<S> next(cache_[size_t(i)].size());
    for (int r = 0; r < B_; r++)
      std::copy_n(cache_[size_t(i)].begin() + long(size_t(parent[size_t(r)]) * row), row, next.begin() + long(size_t(r) * row));
    cache_[size_t(i)].swap(next);
  }
}

template class IncrementalDecoder<float>;
template class IncrementalDecoder<double>;

namespace {

// log-softmax of one row of logits, in double
std::vector<double> log_probs(const float* logits, int V) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int v = 0; v < V; v++) mx = std::max(mx, double(logits[v]));
  double sum = 0;
  for (int v = 0; v < V; v++) sum += std::exp(double(logits[v]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(V));
  for (int v = 0; v < V; v++) out[size_t(v)] = double(logits[v]) - lse;
  return out;
}

// One source, beam search with `beam` hypotheses (beam = 1: greedy). A hypothesis ends at EOS or at
// max_len; the best finished one by log p / length^penalty wins (length counts EOS).
std::vector<int32_t> search(Model<float>& model, const std::vector<int32_t>& source, const DecodeOptions& o,
                            int max_len) {
  const int K = o.beam, V = model.config().vocab_size(), Ssrc = int(source.size());
  std::vector<int32_t> src;
  for (int k = 0; k < K; k++) src.insert(src.end(), source.begin(), source.end());
  IncrementalDecoder<float> dec(model, src.data(), nullptr, K, Ssrc, max_len);
  struct Hyp {
    std::vector<int32_t> ids;
    double logp = 0;
  };
  std::vector<Hyp> live(static_cast<size_t>(K));
  std::vector<int32_t> tokens(size_t(K), kBosToken);
  Hyp best;
  double best_score = -std::numeric_limits<double>::infinity();
  auto score = [&](const Hyp& h, int length) { return h.logp / std::pow(double(length), o.length_penalty); };
  for (int t = 0; t < max_len && !live.empty(); t++) {
    const std::vector<float>& logits = dec.step(tokens.data());
    struct Cand {
      double logp;
      int parent;
      int32_t token;
    };
    std::vector<Cand> cands;
    // at the first step every row holds the same BOS: expand row 0 only
    const int rows = t == 0 ? 1 : int(live.size());
    for (int r = 0; r < rows; r++) {
      const std::vector<double> lp = log_probs(logits.data() + size_t(r) * V, V);
      for (int v = 0; v < V; v++)
        if (v != kBosToken) cands.push_back({live[size_t(r)].logp + lp[size_t(v)], r, int32_t(v)});
    }
    const size_t keep = std::min(cands.size(), size_t(2 * K));
    std::partial_sort(cands.begin(), cands.begin() + long(keep), cands.end(),
                      [](const Cand& a, const Cand& b) { return a.logp > b.logp; });
    std::vector<Hyp> next;
    std::vector<int> parent;
    for (size_t c = 0; c < keep && int(next.size()) < K; c++) {
      Hyp h{live[size_t(cands[c].parent)].ids, cands[c].logp};
      const bool end = cands[c].token == kEosToken || t + 1 == max_len;
      if (cands[c].token != kEosToken) h.ids.push_back(cands[c].token);
      if (end) {
        const double s = score(h, t + 1);
        if (s > best_score) best_score = s, best = h;
        continue;
      }
      next.push_back(std::move(h));
      parent.push_back(cands[c].parent);
    }
    // stop when no live hypothesis can beat the best finished one (log p only falls)
    if (next.empty() || (std::isfinite(best_score) && o.length_penalty == 0 && next[0].logp < best_score)) break;
    while (int(next.size()) < K) next.push_back(next.back()), parent.push_back(parent.back());
    live.swap(next);
    dec.reorder(parent);
    for (int k = 0; k < K; k++) tokens[size_t(k)] = live[size_t(k)].ids.back();
  }
  return best.ids;
}

}  // namespace

std::vector<std::vector<int32_t>> translate(Model<float>& model, const std::vector<std::vector<int32_t>>& sources,
                                            const DecodeOptions& options) {
  const ModelConfig& cfg = model.config();
  if (!cfg.encdec())
    throw Error(fmt::format("translate needs an encoder-decoder model (model.arch = \"encdec\"); this one is {}",
                            to_string(cfg.arch)));
  if (options.beam < 1 || options.beam > 64) throw Error(fmt::format("beam = {} must be in [1, 64]", options.beam));
  if (!(options.length_penalty >= 0 && options.length_penalty <= 10))
    throw Error(fmt::format("length_penalty = {} must be in [0, 10]", options.length_penalty));
  if (options.max_len < 0 || options.max_len > cfg.seq_len)
    throw Error(fmt::format("max_len = {} must be in [0, {}] (the model's seq_len; 0: all of it)", options.max_len,
                            cfg.seq_len));
  const int max_len = options.max_len > 0 ? options.max_len : cfg.seq_len;
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < sources.size(); i++) {
    if (sources[i].empty()) throw Error(fmt::format("source {} is empty", i + 1));
    if (int(sources[i].size()) > cfg.seq_len)
      throw Error(fmt::format("source {} has {} tokens; the model accepts at most {} (model.seq_len)", i + 1,
                              sources[i].size(), cfg.seq_len));
    out.push_back(search(model, sources[i], options, max_len));
  }
  return out;
}

}  // namespace normlab
