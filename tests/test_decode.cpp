// test_decode.cpp: the incremental decoder (KV cache) against the full forward pass: the same
// next-token logits at every position for every method (teacher forcing), and greedy decoding equal
// to the naive loop that reruns the whole model on each prefix (a ResiDual decoder too, whose second
// stream is token-local and carried per position); beam search bookkeeping.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "check.h"
#include "model/decode.h"
#include "model/methods.h"
#include "ops/common.h"
#include "util/error.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::test;

namespace {

ModelConfig small(Placement method) {
  ModelConfig c;
  c.arch = Arch::EncDec;
  c.d_model = 12;
  c.n_heads = 3;
  c.n_layers = 2;
  c.dec_layers = 2;
  c.d_ff = 20;
  c.seq_len = 9;
  c.placement = {method};
  c.init_std = 0.3;
  return c;
}

}  // namespace

TEST(IncrementalDecoder, EqualsTheFullForwardAtEveryPosition) {
  for (Placement method : {Placement::Post, Placement::Pre, Placement::Sandwich, Placement::Admin,
                           Placement::ReZero, Placement::LayerScale, Placement::DeepNorm, Placement::ResiDual}) {
    for (Positions positions : {Positions::Learned, Positions::Rope}) {
    ModelConfig cfg = small(method);
    cfg.positions = positions;  // RoPE: the cached keys carry their own position's rotation
    if (method == Placement::Pre && positions == Positions::Rope) cfg.value_residual = 0.5;  // (both stacks mix)
    SCOPED_TRACE(fmt::format("{} {} value_residual {}", method_of(method).name, to_string(positions),
                             cfg.value_residual));
    Model<double> model(cfg);
    Rng rng(3);
    for (const ParamSpec& p : model.table().specs)  // gates away from 0 so every branch counts
      if (p.role == ParamRole::Gate)
        for (size_t i = 0; i < p.numel; i++) model.params()[p.offset + i] = 0.5 + 0.5 * rng.uniform();
    const int B = 2, S = 5, T = 7, V = model.config().vocab_size();
    std::vector<int32_t> src(size_t(B) * S), tgt(size_t(B) * T), labels(size_t(B) * T, ops::kIgnoreLabel);
    std::vector<uint8_t> mask(size_t(B) * S, 1);
    mask[size_t(S) + S - 1] = 0;  // row 1's last source token is padding
    for (auto& v : src) v = int32_t(rng.below(256));
    for (auto& v : tgt) v = int32_t(rng.below(256));
    for (int b = 0; b < B; b++) tgt[size_t(b) * T] = kBosToken;
    model.forward(tgt.data(), labels.data(), B, T, nullptr, nullptr, Source{src.data(), S, mask.data()});
    const std::vector<double> full(model.logits(), model.logits() + size_t(B) * T * V);
    IncrementalDecoder<double> dec(model, src.data(), mask.data(), B, S, T);
    for (int t = 0; t < T; t++) {
      std::vector<int32_t> tok(static_cast<size_t>(B));
      for (int b = 0; b < B; b++) tok[size_t(b)] = tgt[size_t(b) * T + t];
      const std::vector<double>& step = dec.step(tok.data());
      for (int b = 0; b < B; b++) {
        std::vector<double> want(full.begin() + long((size_t(b) * T + t) * V), full.begin() + long((size_t(b) * T + t + 1) * V));
        std::vector<double> got(step.begin() + long(b) * V, step.begin() + long(b + 1) * V);
        expect_close("position " + std::to_string(t), got, want, 1e-11, 1e-12);
      }
    }
    EXPECT_THROW(dec.step(tgt.data()), Error);  // past max_len
    }
  }
}

// A causal model's decoder (no encoder; the prompt fed token by token): the Llama block (RMSNorm,
// RoPE, SwiGLU, grouped-query and multi-query attention, no biases) and GPT-2's, several methods,
// QK-norm (OLMo 2's whole-projection form, per head) and HybridNorm's QKV-norm.
TEST(IncrementalDecoder, CausalModelEqualsTheFullForwardAtEveryPosition) {
  struct Case {
    Placement method;
    bool llama;
    int kv_heads;
    QkNorm qk_norm = QkNorm::None;
    double embed_scale = 1.0;
    bool dyt_recipe = false;  // DyT's LLaMA recipe: no beta, per-site alpha, a learned embedding scale
    bool softcap = false;     // Gemma 2's scale and soft caps on the scores and the logits
    bool ngpt = false;        // nGPT: the stream on the sphere, its scales (norm l2, no biases)
    int head_dim = 0;         // > 0: model.head_dim (heads wider or narrower than d / heads)
    bool rope_per_layer = false;  // Gemma 3: local layers at another RoPE base, linear scaling on the global one
    AttnGate gate = AttnGate::None;  // gated attention
    bool sink = false;               // learned sink logits
    double value_residual = 0.0;     // value residual learning (the first layer's values cached per step)
    int completep_base_depth = 0;    // CompleteP's branch multiplier base / 3
    HyperMix hyper = HyperMix::None; // hyper-connections (their mixes perturbed off the Pre-LN start)
  };
  for (const Case& k : {Case{Placement::Pre, true, 1}, Case{Placement::Pre, true, 2}, Case{Placement::Peri, true, 4},
                        Case{Placement::Post, false, 4}, Case{Placement::Sandwich, false, 4},
                        Case{Placement::Reordered, true, 2}, Case{Placement::Lns, true, 2},
                        Case{Placement::Reordered, true, 2, QkNorm::Whole}, Case{Placement::HybridNorm, true, 1},
                        Case{Placement::Pre, false, 4, QkNorm::Heads}, Case{Placement::Pre, true, 1, QkNorm::None, 4.0},
                        Case{Placement::Pre, true, 2, QkNorm::None, 4.0, true},
                        Case{Placement::Sandwich, true, 2, QkNorm::None, 4.0, false, true},
                        Case{Placement::NGpt, true, 4, QkNorm::None, 1.0, false, false, true},
                        Case{Placement::Pre, true, 2, QkNorm::Heads, 1.0, false, false, false, 6},
                        Case{Placement::Pre, true, 1, QkNorm::Whole, 1.0, false, false, false, 3},
                        Case{Placement::Sandwich, true, 1, QkNorm::Heads, 4.0, false, false, false, 6, true},
                        Case{Placement::Pre, true, 2, QkNorm::Heads, 1.0, false, false, false, 0, false, AttnGate::Headwise},
                        Case{Placement::Post, false, 4, QkNorm::None, 1.0, false, false, false, 0, false,
                             AttnGate::Elementwise},
                        Case{Placement::Pre, true, 2, QkNorm::Heads, 1.0, false, false, false, 0, false, AttnGate::None,
                             true},
                        Case{Placement::Sandwich, true, 1, QkNorm::Heads, 4.0, false, false, false, 6, true,
                             AttnGate::Headwise, true},
                        Case{Placement::Pre, true, 2, QkNorm::None, 1.0, false, false, false, 0, false, AttnGate::None,
                             false, 0.5},
                        Case{Placement::Post, false, 4, QkNorm::Heads, 1.0, false, false, false, 0, false,
                             AttnGate::None, false, 0.3},
                        Case{Placement::Sandwich, true, 2, QkNorm::None, 1.0, false, false, false, 0, false,
                             AttnGate::None, false, 0.0, 1},
                        Case{Placement::Pre, true, 2, QkNorm::Heads, 1.0, false, false, false, 0, false, AttnGate::None,
                             false, 0.0, 0, HyperMix::Hc},
                        Case{Placement::Peri, false, 4, QkNorm::None, 1.0, false, false, false, 0, false,
                             AttnGate::None, false, 0.0, 0, HyperMix::HcStatic},
                        Case{Placement::Pre, true, 2, QkNorm::None, 1.0, false, false, false, 0, false, AttnGate::None,
                             false, 0.5, 0, HyperMix::Mhc},
                        Case{Placement::Reordered, true, 1, QkNorm::None, 1.0, false, false, false, 0, false,
                             AttnGate::None, false, 0.0, 0, HyperMix::MhcLite},
                        Case{Placement::Pre, true, 2, QkNorm::Heads, 1.0, false, false, false, 0, false, AttnGate::None,
                             false, 0.0, 0, HyperMix::AttnRes},
                        Case{Placement::Peri, false, 4, QkNorm::None, 1.0, false, false, false, 0, false,
                             AttnGate::None, false, 0.0, 0, HyperMix::AttnRes}}) {
    SCOPED_TRACE(fmt::format("{} llama {} kv_heads {} qk_norm {} hyper {}", method_of(k.method).name, k.llama,
                             k.kv_heads, to_string(k.qk_norm), to_string(k.hyper)));
    ModelConfig cfg;
    cfg.arch = Arch::Gpt;
    cfg.vocab = 37;
    cfg.d_model = 16;
    cfg.n_heads = 4;
    cfg.n_kv_heads = k.kv_heads;
    cfg.n_layers = 3;
    cfg.d_ff = 22;
    cfg.seq_len = 9;
    cfg.placement = {k.method};
    cfg.qk_norm = k.qk_norm;
    cfg.attn_gate = k.gate;
    cfg.attn_sink = k.sink;
    cfg.value_residual = k.value_residual;
    cfg.completep_base_depth = k.completep_base_depth;
    cfg.hyper = k.hyper;
    cfg.hyper_streams = k.hyper == HyperMix::MhcLite ? 3 : 4;
    if (k.hyper == HyperMix::AttnRes)  // Full AttnRes with Llama's block; blocks of 4 sub-layers with Peri-LN's
      cfg.attn_res_block = k.llama ? 1 : 4, cfg.hyper_streams = cfg.attn_res_streams();
    cfg.embed_scale = k.embed_scale;  // (Gemma's sqrt(d) for d = 16)
    if (k.head_dim) cfg.head_dim = k.head_dim;
    cfg.init_std = 0.3;
    if (k.llama) {
      cfg.norm = NormKind::RMSNorm;
      cfg.positions = Positions::Rope;
      cfg.activation = Activation::SwiGlu;
      cfg.bias = LinearBias::None;
    }
    if (k.dyt_recipe) {
      cfg.norm = NormKind::DyT;
      cfg.norm_bias = false;
      cfg.norm_alpha_attn = 0.8;
      cfg.embed_scale_learned = true;
    }
    if (k.ngpt) {
      cfg.norm = NormKind::L2;
      cfg.head = Head::Untied;
    }
    if (k.softcap) {
      cfg.attn_scale = 0.4;
      cfg.attn_softcap = 0.6;
      cfg.logit_softcap = 0.8;
    }
    if (k.rope_per_layer) {  // layer 0 local (base 10), layer 1 global (1e4, positions / 3, cos and sin x 1.2),
      cfg.rope_local_base = 10;  // layer 2 NoPE
      cfg.rope_global_every = 2;
      cfg.rope_scale = 3;
      cfg.rope_mscale = 1.2;
      cfg.nope_every = 3;
    }
    Model<double> model(cfg);
    if (k.dyt_recipe) model.params()[model.table().find("embed_scale")->offset] = 3.0;  // the parameter, not the config
    Rng rng(5);
    for (const ParamSpec& p : model.table().specs)  // (hyper-connections' input-dependent parts start at 0)
      if (p.name.find(".hc.") != std::string::npos)
        for (size_t j = 0; j < p.numel; j++) model.params()[p.offset + j] += 0.3 * rng.normal();
    const int B = 2, T = 8, V = cfg.vocab_size();
    std::vector<int32_t> ids(size_t(B) * T), labels(size_t(B) * T, ops::kIgnoreLabel);
    for (auto& v : ids) v = int32_t(rng.below(uint64_t(V)));
    model.forward(ids.data(), labels.data(), B, T);
    const std::vector<double> full(model.logits(), model.logits() + size_t(B) * T * V);
    IncrementalDecoder<double> dec(model, B, T);
    for (int t = 0; t < T; t++) {
      std::vector<int32_t> tok(static_cast<size_t>(B));
      for (int b = 0; b < B; b++) tok[size_t(b)] = ids[size_t(b) * T + t];
      const std::vector<double>& step = dec.step(tok.data());
      for (int b = 0; b < B; b++) {
        std::vector<double> want(full.begin() + long((size_t(b) * T + t) * V), full.begin() + long((size_t(b) * T + t + 1) * V));
        std::vector<double> got(step.begin() + long(b) * V, step.begin() + long(b + 1) * V);
        expect_close("position " + std::to_string(t), got, want, 1e-11, 1e-12);
      }
    }
    EXPECT_THROW(dec.step(ids.data()), Error);  // past max_len
  }
}

TEST(Translate, GreedyEqualsTheNaiveLoopAndBeamOneIsGreedy) {
  for (Placement method : {Placement::Pre, Placement::ResiDual}) {
    SCOPED_TRACE(method_of(method).name);
    ModelConfig c = small(method);
    c.seq_len = 12;
    Model<float> model(c);
    const std::vector<std::vector<int32_t>> sources = {{72, 101, 108, 108, 111, kEosToken}, {33, kEosToken}};
    DecodeOptions greedy;
    const auto got = translate(model, sources, greedy);
    for (size_t i = 0; i < sources.size(); i++) {
      // naive: rerun the full model on the prefix and take the argmax of the last position
      std::vector<int32_t> prefix = {kBosToken}, want;
      const int S = int(sources[i].size()), V = c.vocab_size();
      for (int t = 0; t < c.seq_len; t++) {
        std::vector<int32_t> labels(prefix.size(), ops::kIgnoreLabel);
        model.forward(prefix.data(), labels.data(), 1, int(prefix.size()), nullptr, nullptr,
                      Source{sources[i].data(), S, nullptr});
        const float* last = model.logits() + (prefix.size() - 1) * size_t(V);
        int32_t best = 0;
        for (int v = 1; v < V; v++)
          if (v != kBosToken && last[v] > last[best]) best = v;
        if (best == kEosToken) break;
        want.push_back(best);
        prefix.push_back(best);
      }
      EXPECT_EQ(got[i], want) << "source " << i;
    }
    DecodeOptions beam;
    beam.beam = 4;
    const auto wide = translate(model, sources, beam);
    EXPECT_EQ(wide.size(), sources.size());
    for (const auto& w : wide) EXPECT_LE(int(w.size()), c.seq_len);
    DecodeOptions bad;
    bad.beam = 0;
    EXPECT_THROW(translate(model, sources, bad), Error);
    EXPECT_THROW(translate(model, {std::vector<int32_t>(13, 65)}, greedy), Error);  // longer than seq_len
  }
}
