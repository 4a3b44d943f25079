// test_model.cpp: whole-model gradients against central finite differences in double precision for
// every placement x norm kind (layernorm, rmsnorm, dyt, derf) x architecture (and residual off, ReLU, per-layer mixes, eps = 0),
// the DeepNorm residual form, init schemes, config validation, float/double agreement (the models made
// from others, forward-only ones among them: test_model_copies.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include <cmath>
#include <fmt/format.h>

#include "check.h"
#include "model_fixture.h"
#include "model/methods.h"
#include "model/model.h"
#include "model/norm_of.h"
#include "model/params.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;

namespace {

const Placement kAllPlacements[] = {Placement::Post,    Placement::Pre,      Placement::Sandwich,
                                    Placement::PrePost, Placement::DeepNorm, Placement::None,
                                    Placement::Peri,    Placement::Reordered, Placement::Lns,
                                    Placement::HybridNorm, Placement::HybridNormPre};

// The kinds the sweep below takes: all but SSNorm, which runs RMSNorm's kernels with its one gain
// repeated (model/norm_of.h) and has its own check (SingleScaleRmsNormInThreeBlocks): in the sweep it
// would add 22 finite-difference checks, about 7 CPU-minutes.
std::vector<NormKind> swept_kinds() {
  std::vector<NormKind> kinds;
  for (NormKind k : kNormKinds)
    if (k != NormKind::SSNorm) kinds.push_back(k);
  return kinds;
}

}  // namespace

class ModelGradients
    : public testing::TestWithParam<std::tuple<Arch, Placement, NormKind>> {};

TEST_P(ModelGradients, MatchFiniteDifferences) {
  auto [arch, placement, norm] = GetParam();
  check_model_gradients(tiny(arch, {placement}, norm));
}

INSTANTIATE_TEST_SUITE_P(
    AllVariants, ModelGradients,
    testing::Combine(testing::Values(Arch::Gpt, Arch::Encoder), testing::ValuesIn(kAllPlacements),
                     testing::ValuesIn(swept_kinds())),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_" +
             to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param));
    });

// SSNorm (single-scale RMSNorm): its scalar gains' gradients and everything else against finite
// differences in a Pre-LN GPT with per-head QK-norm (SSNorm sites on q and k too), a padded Post-LN
// encoder, and HybridNorm (QKV-norm plus Post-LN on the MLP).
TEST(ModelGradientsMore, SingleScaleRmsNormInThreeBlocks) {
  ModelConfig pre = tiny(Arch::Gpt, {Placement::Pre}, NormKind::SSNorm);
  pre.qk_norm = QkNorm::Heads;
  check_model_gradients(pre);
  check_model_gradients(tiny(Arch::Encoder, {Placement::Post}, NormKind::SSNorm), /*padding=*/true);
  check_model_gradients(tiny(Arch::Gpt, {Placement::HybridNorm}, NormKind::SSNorm));
  const ParamTable t = make_param_table(pre);
  const ParamSpec* a = t.find("h.0.attn.ln_in.alpha");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->numel, 1u);
  EXPECT_EQ(t.find("h.0.attn.ln_in.weight"), nullptr);  // one scalar, no gain per channel
  EXPECT_EQ(t.find("h.0.attn.ln_in.bias"), nullptr);
}

TEST(ModelGradientsMore, PerLayerMixReluNoResidualEpsZero) {
  ModelConfig mix = tiny(Arch::Gpt, {Placement::Pre, Placement::Post, Placement::Sandwich}, NormKind::LayerNorm);
  check_model_gradients(mix);
  ModelConfig relu = tiny(Arch::Encoder, {Placement::PrePost}, NormKind::LayerNorm);
  relu.activation = Activation::Relu;
  check_model_gradients(relu);
  ModelConfig nores = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  nores.residual = false;
  check_model_gradients(nores);
  ModelConfig eps0 = tiny(Arch::Gpt, {Placement::Post}, NormKind::LayerNorm);
  eps0.eps = 0.0;
  check_model_gradients(eps0);
}

// Gated MLPs (SwiGLU, GeGLU: fc holds gate and up rows) in both architectures, with a norm kind and a
// method of today's models; d_ff = 12 (odd against every tile).
TEST(ModelGradientsMore, GatedMlpsAndBiasChoices) {
  for (Activation act : {Activation::SwiGlu, Activation::GeGlu})
    for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
      SCOPED_TRACE(std::string(to_string(act)) + " " + to_string(arch));
      ModelConfig c = tiny(arch, {Placement::Pre, Placement::Peri}, NormKind::RMSNorm);
      c.activation = act;
      check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
    }
  // model.bias: none (Llama) and qkv only (Qwen2), the cross-attention's maps included
  for (LinearBias bias : {LinearBias::None, LinearBias::Qkv}) {
    SCOPED_TRACE(to_string(bias));
    ModelConfig c = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
    c.activation = Activation::SwiGlu;
    c.bias = bias;
    check_model_gradients(c);
    const ParamTable t = make_param_table(c);
    EXPECT_EQ(t.find("h.0.attn.qkv.bias") != nullptr, bias == LinearBias::Qkv);
    EXPECT_EQ(t.find("h.0.attn.proj.bias"), nullptr);
    EXPECT_EQ(t.find("h.1.mlp.fc.bias"), nullptr);
  }
  ModelConfig mlm = tiny(Arch::Encoder, {Placement::Post}, NormKind::LayerNorm);
  mlm.head = Head::Mlm;
  mlm.activation = Activation::GeluExact;
  EXPECT_NO_THROW(mlm.validate());
  mlm.activation = Activation::SwiGlu;  // the MLM head's activation is element-wise: refused by name
  EXPECT_THROW(mlm.validate(), Error);
}

// Heads of another width than d_model / n_heads (model.head_dim: Gemma 2, Qwen3): wider and narrower,
// with grouped-query attention, RoPE and QK-norm, both architectures; the shapes of the projections.
TEST(ModelGradientsMore, HeadsOfAnotherWidth) {
  for (int head_dim : {7, 3})
    for (Arch arch : {Arch::Gpt, Arch::Encoder})
      for (QkNorm qk : {QkNorm::None, QkNorm::Heads, QkNorm::Whole}) {
        SCOPED_TRACE(fmt::format("head_dim {} {} qk_norm {}", head_dim, to_string(arch), to_string(qk)));
        ModelConfig c = tiny(arch, {Placement::Pre}, NormKind::RMSNorm);
        c.head_dim = head_dim;
        c.n_kv_heads = 1;
        c.positions = Positions::Rope;
        c.qk_norm = qk;
        c.activation = Activation::SwiGlu;
        check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
        const ParamTable t = make_param_table(c);
        EXPECT_EQ(t.find("h.0.attn.qkv.weight")->shape, (std::vector<int64_t>{2 * head_dim + 2 * head_dim, 8}));
        EXPECT_EQ(t.find("h.0.attn.proj.weight")->shape, (std::vector<int64_t>{8, 2 * head_dim}));
      }
  ModelConfig c = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  c.head_dim = 3;
  c.arch = Arch::EncDec;  // refused by name where the heads are d_model / n_heads wide
  EXPECT_THROW(c.validate(), Error);
  c = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  c.d_model = 9;  // 2 heads do not divide 9: fine with head_dim, refused without
  c.head_dim = 4;
  EXPECT_NO_THROW(c.validate());
  c.head_dim.reset();
  EXPECT_THROW(c.validate(), Error);
}

// Rotary positions (full and partial, another base) and no positions at all, both architectures;
// the Llama-family block: RMSNorm, RoPE, SwiGLU, no biases.
TEST(ModelGradientsMore, RotaryAndNoPositions) {
  struct Rope {
    Positions positions;
    double fraction, base;
  };
  for (Rope r : {Rope{Positions::Rope, 1.0, 10000.0}, Rope{Positions::Rope, 0.5, 100.0}, Rope{Positions::None, 1.0, 1e4}})
    for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
      SCOPED_TRACE(fmt::format("{} fraction {} {}", to_string(r.positions), r.fraction, to_string(arch)));
      ModelConfig c = tiny(arch, {Placement::Pre}, NormKind::RMSNorm);
      c.positions = r.positions;
      c.rope_fraction = r.fraction;
      c.rope_base = r.base;
      c.activation = Activation::SwiGlu;
      c.bias = LinearBias::None;
      EXPECT_EQ(make_param_table(c).find("wpe.weight"), nullptr);
      check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
      c.n_kv_heads = 1;  // and multi-query attention (both heads share one key-value head)
      check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
    }
  // Gemma's block: GeGLU, the token embedding times sqrt(d), tied head; with and without padding
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    ModelConfig gemma = tiny(arch, {Placement::Pre}, NormKind::RMSNorm);
    gemma.positions = Positions::Rope;
    gemma.activation = Activation::GeGlu;
    gemma.embed_scale = std::sqrt(8.0);
    check_model_gradients(gemma, /*padding=*/arch == Arch::Encoder);
  }
  // DyT's LLaMA recipe: no beta, alpha 0.8 at the attention's input norm, 0.2 elsewhere, and the
  // embedding scale a parameter (starting at sqrt(d)), for both architectures
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    ModelConfig dyt = tiny(arch, {Placement::Pre}, NormKind::DyT);
    dyt.positions = Positions::Rope;
    dyt.activation = Activation::SwiGlu;
    dyt.norm_bias = false;
    dyt.norm_alpha = 0.2;
    dyt.norm_alpha_attn = 0.8;
    dyt.embed_scale = std::sqrt(8.0);
    dyt.embed_scale_learned = true;
    const ParamTable t = make_param_table(dyt);
    ASSERT_NE(t.find("embed_scale"), nullptr);
    EXPECT_EQ(t.find("h.0.attn.ln_in.bias"), nullptr);
    Model<double> m(dyt);
    EXPECT_EQ(m.params()[t.find("embed_scale")->offset], std::sqrt(8.0));
    EXPECT_EQ(m.params()[t.find("h.0.attn.ln_in.alpha")->offset], 0.8);
    EXPECT_EQ(m.params()[t.find("h.0.mlp.ln_in.alpha")->offset], 0.2);
    EXPECT_EQ(m.params()[t.find("ln_f.alpha")->offset], 0.2);
    check_model_gradients(dyt, /*padding=*/arch == Arch::Encoder);
  }
  // Gemma 3's RoPE: a base per layer (local layers 0 and 1 at base 10, global layer 2 at 1e4 with
  // linear position scaling 2), per-head QK-norm, the sandwich, GeGLU
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    ModelConfig g3 = tiny(arch, {Placement::Sandwich, Placement::Sandwich, Placement::Sandwich}, NormKind::RMSNorm);
    g3.positions = Positions::Rope;
    g3.activation = Activation::GeGlu;
    g3.qk_norm = QkNorm::Heads;
    g3.rope_local_base = 10;
    g3.rope_global_every = 3;
    g3.rope_scale = 2;
    check_model_gradients(g3, /*padding=*/arch == Arch::Encoder);
  }
  // Gemma 2's scores and logits: its own q.k scale, attention and final-logit soft-capping (small caps,
  // so tanh bends), with grouped queries; the sandwich; both architectures
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    ModelConfig g2 = tiny(arch, {Placement::Sandwich}, NormKind::RMSNorm);
    g2.positions = Positions::Rope;
    g2.activation = Activation::GeGlu;
    g2.attn_scale = 0.3;
    g2.attn_softcap = 0.5;
    g2.logit_softcap = 0.7;
    check_model_gradients(g2, /*padding=*/arch == Arch::Encoder);
  }
  ModelConfig capped = tiny(Arch::EncDec, {Placement::Pre}, NormKind::RMSNorm);
  capped.attn_softcap = 50;  // an encdec's attention takes no soft cap: refused by name
  EXPECT_THROW(capped.validate(), Error);
  capped = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  capped.logit_softcap = -1;
  EXPECT_THROW(capped.validate(), Error);
  ModelConfig scaled = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  scaled.embed_scale_learned = true;  // with learned positions it would scale them too: refused by name
  EXPECT_THROW(scaled.validate(), Error);
  scaled.embed_scale_learned = false;
  scaled.embed_scale = 2.0;  // with learned positions it would scale them too: refused by name
  EXPECT_THROW(scaled.validate(), Error);
  ModelConfig gqa = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  gqa.n_heads = 4;  // HS = 2, 2 key-value heads: the grouped case proper
  gqa.n_kv_heads = 2;
  gqa.positions = Positions::Rope;
  EXPECT_EQ(make_param_table(gqa).find("h.0.attn.qkv.weight")->shape[0], 8 + 2 * 2 * 2);
  check_model_gradients(gqa);
  gqa.head = Head::Untied;  // an output matrix of its own (lm_head), as Llama's
  EXPECT_EQ(make_param_table(gqa).find("lm_head.weight")->shape, (std::vector<int64_t>{gqa.vocab_size(), 8}));
  check_model_gradients(gqa);
  gqa.head = Head::Tied;
  gqa.n_kv_heads = 3;  // does not divide 4: refused by name
  EXPECT_THROW(gqa.validate(), Error);
  ModelConfig odd = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  odd.positions = Positions::Rope;
  odd.rope_fraction = 0.2;  // 2 floor(0.2 * 4 / 2) = 0: no pair rotated, refused by name
  EXPECT_THROW(odd.validate(), Error);
}

// nGPT (placement ngpt, norm l2): the update on the sphere with its eigen learning rates, unit-length
// q and k heads times s_qk after RoPE, s_uv on the MLP, s_z on the logits, scores by sqrt(HS); tied and
// untied heads, both architectures, gated and plain MLPs. Its parameters start as the reference's
// (effective 0.05, 1, sqrt(C), 1) and its matrices on the sphere; what it cannot take is refused by name.
TEST(ModelGradientsMore, NGptEveryPieceAndItsConditions) {
  for (Arch arch : {Arch::Gpt, Arch::Encoder})
    for (Head head : {Head::Tied, Head::Untied})
      for (Activation act : {Activation::SwiGlu, Activation::Gelu}) {
        SCOPED_TRACE(fmt::format("{} {} {}", to_string(arch), to_string(head), to_string(act)));
        ModelConfig c = tiny(arch, {Placement::NGpt}, NormKind::L2);
        c.positions = Positions::Rope;
        c.bias = LinearBias::None;
        c.activation = act;
        c.head = head;
        check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
      }
  ModelConfig c = tiny(Arch::Gpt, {Placement::NGpt}, NormKind::L2);
  c.positions = Positions::Rope;
  c.bias = LinearBias::None;
  c.activation = Activation::SwiGlu;
  c.head = Head::Untied;
  c.eps = 0;
  Model<double> m(c);
  const ParamTable& t = m.table();
  const double C = c.d_model;
  EXPECT_NEAR(m.params()[t.find("h.0.attn.eigen_lr")->offset] * sphere_scale("eigen_lr", c.d_model).factor, 0.05, 1e-15);
  EXPECT_NEAR(m.params()[t.find("h.1.attn.sqk")->offset] * sphere_scale("sqk", c.d_model).factor, 1.0, 1e-15);
  EXPECT_NEAR(m.params()[t.find("h.1.mlp.suv")->offset] * sphere_scale("suv", c.d_model).factor, std::sqrt(C), 1e-12);
  EXPECT_NEAR(m.params()[t.find("sz")->offset] * sphere_scale("sz", c.d_model).factor, 1.0, 1e-15);
  EXPECT_EQ(t.find("ln_f.weight"), nullptr);
  // every row of wte, lm_head, qkv, fc and every column of the proj matrices has length 1
  const auto length = [&](const ParamSpec* p, long i, bool column) {
    const long rows = long(p->shape[0]), cols = long(p->shape[1]);
    double ss = 0;
    for (long k = 0; k < (column ? rows : cols); k++) {
      const double w = m.params()[p->offset + size_t(column ? k * cols + i : i * cols + k)];
      ss += w * w;
    }
    return std::sqrt(ss);
  };
  for (const char* name : {"wte.weight", "lm_head.weight", "h.0.attn.qkv.weight", "h.1.mlp.fc.weight"})
    for (long r : {0L, 3L}) EXPECT_NEAR(length(t.find(name), r, false), 1.0, 1e-14) << name;
  for (const char* name : {"h.0.attn.proj.weight", "h.1.mlp.proj.weight"})
    for (long col : {0L, 5L}) EXPECT_NEAR(length(t.find(name), col, true), 1.0, 1e-14) << name;
  // the stream stays on the sphere: every sub-layer's output has length 1
  const Tokens tok = tokens_for(c, 2, 5, 3);
  m.forward(tok.ids.data(), tok.labels.data(), 2, 5);
  for (int i = 0; i < c.n_slots(); i++)
    for (int row : {0, 7}) {
      double ss = 0;
      for (int k = 0; k < c.d_model; k++) ss += m.stream(i + 1)[size_t(row) * c.d_model + k] * m.stream(i + 1)[size_t(row) * c.d_model + k];
      EXPECT_NEAR(ss, 1.0, 1e-13) << "slot " << i;
    }
  // a step off the sphere comes back: project_to_sphere
  for (double& w : m.params()) w *= 1.7;
  m.project_to_sphere();
  EXPECT_NEAR(length(t.find("h.0.attn.qkv.weight"), 2, false), 1.0, 1e-14);
  // what nGPT does not take, by name
  for (auto bad : std::vector<std::function<void(ModelConfig&)>>{
           [](ModelConfig& x) { x.norm = NormKind::RMSNorm; },
           [](ModelConfig& x) { x.positions = Positions::Learned; },
           [](ModelConfig& x) { x.n_kv_heads = 1; },
           [](ModelConfig& x) { x.bias = LinearBias::All; },
           [](ModelConfig& x) { x.placement = {Placement::NGpt, Placement::Pre}; },
           [](ModelConfig& x) { x.qk_norm = QkNorm::Heads; }}) {
    ModelConfig b = c;
    bad(b);
    EXPECT_THROW(b.validate(), Error);
  }
}

// Gated attention (Qiu et al. 2025): one gate per head and per channel, with grouped-query attention,
// RoPE and QK-norm, with and without the q, k, v biases (the gate map is biased as they are), both
// architectures (an encoder with padding): gradients against finite differences; the gate's parameters
// are where the authors' code puts them (a map of h of n_heads or n_heads HS rows).
TEST(ModelGradientsMore, GatedAttentionHeadwiseAndElementwise) {
  struct Case {
    AttnGate gate;
    Arch arch;
    LinearBias bias;
  };
  // (two cases: each finite-difference check costs about half a minute on a loaded machine)
  for (const auto& [gate, arch, bias] : {Case{AttnGate::Headwise, Arch::Gpt, LinearBias::None},
                                         Case{AttnGate::Elementwise, Arch::Encoder, LinearBias::Qkv}}) {
    SCOPED_TRACE(fmt::format("{} {} bias {}", to_string(gate), to_string(arch), int(bias)));
    ModelConfig c = tiny(arch, {Placement::Pre, Placement::Post}, NormKind::RMSNorm);
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.positions = Positions::Rope;
    c.qk_norm = arch == Arch::Gpt ? QkNorm::Heads : QkNorm::None;
    c.bias = bias;
    c.attn_gate = gate;
    const ParamTable t = make_param_table(c);
    const ParamSpec* w = t.find("h.1.attn.gate.weight");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->shape[0], gate == AttnGate::Headwise ? 4 : c.attn_width());
    EXPECT_EQ(w->shape[1], c.d_model);
    EXPECT_EQ(t.find("h.1.attn.gate.bias") != nullptr, bias != LinearBias::None);
    EXPECT_EQ(t.find("h.1.mlp.gate.weight"), nullptr);  // self-attention only
    check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
  }
}

// Learned sink logits (gpt-oss's attention sinks): one per query head, with grouped-query attention, RoPE
// and QK-norm in a causal model, and in an encoder with padding and a soft cap on the scores (not on the
// sink): gradients, the sinks' included, against finite differences (check_model_gradients moves the
// sinks away from 0 first, so that their probabilities differ across heads).
TEST(ModelGradientsMore, LearnedSinkLogits) {
  for (const Arch arch : {Arch::Gpt, Arch::Encoder}) {
    SCOPED_TRACE(to_string(arch));
    ModelConfig c = tiny(arch, {Placement::Pre, Placement::Post}, NormKind::RMSNorm);
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.positions = Positions::Rope;
    c.qk_norm = arch == Arch::Gpt ? QkNorm::Heads : QkNorm::None;
    if (arch == Arch::Encoder) c.attn_softcap = 3.0;
    c.attn_sink = true;
    const ParamTable t = make_param_table(c);
    for (int layer = 0; layer < c.n_layers; layer++) {
      const ParamSpec* s = t.find(fmt::format("h.{}.attn.sinks", layer));
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->numel, size_t(c.n_heads));
      EXPECT_FALSE(s->decays());
    }
    EXPECT_EQ(t.find("h.0.mlp.sinks"), nullptr);  // self-attention only
    check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
  }
}

// QK-norm per head and over the whole projection, with and without the values, for the norm kinds
// that carry a statistic and a point-wise one, with RoPE after it and grouped-query attention (4 query
// heads of 2, 2 key-value heads: the k and v parts are narrower than q), both architectures.
TEST(ModelGradientsMore, QkNormLayoutsKindsAndGroupedQueries) {
  for (QkNorm how : {QkNorm::Heads, QkNorm::Whole})
    for (NormKind norm : {NormKind::RMSNorm, NormKind::LayerNorm, NormKind::DyT})
      for (bool v : {false, true}) {
        const Arch arch = v ? Arch::Encoder : Arch::Gpt;
        SCOPED_TRACE(fmt::format("{} {} v_norm={} {}", to_string(how), to_string(norm), v, to_string(arch)));
        ModelConfig c = tiny(arch, {Placement::Reordered, Placement::Pre}, norm);
        c.n_heads = 4;
        c.n_kv_heads = 2;
        c.positions = Positions::Rope;
        c.qk_norm = how;
        c.v_norm = v;
        const ParamTable t = make_param_table(c);
        ASSERT_NE(t.find("h.1.attn.k_norm.weight"), nullptr);
        EXPECT_EQ(t.find("h.1.attn.q_norm.weight")->numel, how == QkNorm::Heads ? 2u : 8u);
        EXPECT_EQ(t.find("h.1.attn.k_norm.weight")->numel, how == QkNorm::Heads ? 2u : 4u);
        EXPECT_EQ(t.find("h.1.attn.v_norm.weight") != nullptr, v);
        check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
      }
  // HybridNorm asks for QKV-norm itself (per head when qk_norm is none); v_norm needs qk_norm
  ModelConfig h = tiny(Arch::Gpt, {Placement::HybridNorm}, NormKind::RMSNorm);
  EXPECT_EQ(make_param_table(h).find("h.0.attn.v_norm.weight")->numel, 4u);
  // the authors' N(h), the FFN's input that its residual carries too, is the attention's out norm
  EXPECT_EQ(make_param_table(h).find("h.0.attn.ln_out.weight")->numel, 8u);
  EXPECT_EQ(make_param_table(h).find("h.0.mlp.ln_out.weight"), nullptr);
  EXPECT_EQ(make_param_table(h).find("h.0.mlp.ln_in.weight"), nullptr);
  // weightless QK-norm (no gain, no bias), per head and whole, with the values
  for (QkNorm how : {QkNorm::Heads, QkNorm::Whole}) {
    ModelConfig w = tiny(Arch::Encoder, {Placement::Pre}, NormKind::LayerNorm);
    w.qk_norm = how;
    w.v_norm = true;
    w.qk_norm_affine = false;
    const ParamTable t = make_param_table(w);
    EXPECT_EQ(t.find("h.0.attn.q_norm.weight"), nullptr);
    EXPECT_EQ(t.find("h.0.attn.v_norm.bias"), nullptr);
    EXPECT_NE(t.find("h.0.attn.ln_in.weight"), nullptr);  // the other sites keep theirs
    check_model_gradients(w, /*padding=*/true);
  }
  ModelConfig bad = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  bad.qk_norm_affine = false;  // weightless QK-norm without a QK-norm: refused by name
  EXPECT_THROW(bad.validate(), Error);
  bad.qk_norm_affine = true;
  bad.v_norm = true;
  EXPECT_THROW(bad.validate(), Error);
  ModelConfig encdec = tiny(Arch::EncDec, {Placement::HybridNorm}, NormKind::RMSNorm);
  EXPECT_THROW(encdec.validate(), Error);
}

// The pieces of GPT-2 and BERT: exact GELU, token types, embedding norm, the MLM head, padding.
TEST(ModelGradientsMore, BertAndGpt2Pieces) {
  ModelConfig bert = tiny(Arch::Encoder, {Placement::Post}, NormKind::LayerNorm);
  bert.activation = Activation::GeluExact;
  bert.type_vocab = 2;
  bert.embed_norm = true;
  bert.head = Head::Mlm;
  bert.eps = 1e-12;
  check_model_gradients(bert, true);
  check_model_gradients(bert, false);
  ModelConfig gpt = tiny(Arch::Gpt, {Placement::Pre}, NormKind::LayerNorm);
  gpt.activation = Activation::GeluExact;
  check_model_gradients(gpt, true);
  ModelConfig odd = tiny(Arch::Gpt, {Placement::Sandwich, Placement::Post}, NormKind::RMSNorm);
  odd.embed_norm = true;
  odd.head = Head::Mlm;
  odd.type_vocab = 3;
  check_model_gradients(odd, true);
}

TEST(Model, HeadlessHasNoLogitsLossOrGradient) {
  ModelConfig c = tiny(Arch::Encoder, {Placement::Post}, NormKind::LayerNorm);
  c.head = Head::None;
  c.embed_norm = true;
  Model<double> model(c);
  const Tokens tok = tokens_for(c, 2, 5, 3);
  EXPECT_TRUE(std::isnan(model.forward(tok.ids.data(), tok.labels.data(), 2, 5)));
  EXPECT_EQ(model.logits(), nullptr);
  model.zero_grad();
  model.backward();
  for (double g : model.grads()) ASSERT_EQ(g, 0.0);
  for (const ParamSpec& p : model.table().specs) EXPECT_EQ(p.name.rfind("head.", 0), std::string::npos);
}

TEST(AttentionOnly, GradientsMatchFiniteDifferences) {
  for (const auto& placement : std::vector<std::vector<Placement>>{
           {Placement::Pre}, {Placement::Post}, {Placement::Sandwich, Placement::DeepNorm, Placement::PrePost}}) {
    ModelConfig c = tiny(Arch::Gpt, placement, NormKind::LayerNorm);
    c.mlp = false;
    check_model_gradients(c);
    c.residual = false;
    check_model_gradients(c);
  }
  ModelConfig enc = tiny(Arch::Encoder, {Placement::Pre}, NormKind::RMSNorm);
  enc.mlp = false;
  check_model_gradients(enc);
}

TEST(AttentionOnly, HasNoMlpParametersAndEqualsAZeroMlpBranch) {
  // A pre-norm model whose MLP branches output exactly 0 (weights and biases 0) computes the same
  // function as the attention-only model with the same remaining parameters.
  ModelConfig full = tiny(Arch::Gpt, {Placement::Pre}, NormKind::LayerNorm);
  ModelConfig attn = full;
  attn.mlp = false;
  Model<double> a(full), b(attn);
  for (const ParamSpec& p : b.table().specs) EXPECT_EQ(p.name.find(".mlp."), std::string::npos) << p.name;
  for (const ParamSpec& p : a.table().specs) {
    if (p.name.find(".mlp.") != std::string::npos) {
      std::fill_n(a.params().begin() + p.offset, p.numel, 0.0);
      continue;
    }
    const ParamSpec* q = b.table().find(p.name);
    ASSERT_NE(q, nullptr) << p.name;
    std::copy_n(a.params().begin() + p.offset, p.numel, b.params().begin() + q->offset);
  }
  const Tokens tok = tokens_for(full, 2, 5, 9);
  const double la = a.forward(tok.ids.data(), tok.labels.data(), 2, 5);
  const double lb = b.forward(tok.ids.data(), tok.labels.data(), 2, 5);
  EXPECT_NEAR(la, lb, 1e-13);
  for (int i = 0; i < 2 * full.n_layers; i += 2)
    for (int k = 0; k < 2 * 5 * full.d_model; k++) ASSERT_NEAR(a.stream(i)[k], b.stream(i)[k], 1e-13);
}

TEST(DeepNorm, ScalesTheStreamNotTheBranch) {
  // With all linear weights 0, the attention branch is its output bias b: x1 = LN(alpha x0 + b).
  // The known mis-implementation LN(x0 + alpha b) gives a different result.
  ModelConfig c = tiny(Arch::Gpt, {Placement::DeepNorm}, NormKind::LayerNorm);
  c.n_layers = 1;
  c.eps = 0.0;
  Model<double> model(c);
  const ParamTable& t = model.table();
  for (const ParamSpec& p : t.specs)
    if (p.role == ParamRole::LinearWeight) std::fill_n(model.params().begin() + p.offset, p.numel, 0.0);
  const ParamSpec* b = t.find("h.0.attn.proj.bias");
  for (size_t i = 0; i < b->numel; i++) model.params()[b->offset + i] = 0.1 * (double(i) - 3.0);
  const Tokens tok = tokens_for(c, 1, 3, 3);
  model.forward(tok.ids.data(), tok.labels.data(), 1, 3);
  const double alpha = std::pow(2.0 * c.n_layers, 0.25);
  EXPECT_DOUBLE_EQ(c.residual_alpha(0), alpha);
  const int C = c.d_model;
  auto ln = [&](std::vector<double> v) {
    double m = 0, var = 0;
    for (double x : v) m += x / C;
    for (double x : v) var += (x - m) * (x - m) / C;
    for (double& x : v) x = (x - m) / std::sqrt(var);
    return v;
  };
  for (int tkn = 0; tkn < 3; tkn++) {
    std::vector<double> right(C), wrong(C), got(C);
    for (int i = 0; i < C; i++) {
      const double x0 = model.stream(0)[tkn * C + i], bi = model.params()[b->offset + i];
      right[i] = alpha * x0 + bi;
      wrong[i] = x0 + alpha * bi;
      got[i] = model.stream(1)[tkn * C + i];
    }
    right = ln(right);
    wrong = ln(wrong);
    expect_close("deepnorm x1", got, right, 1e-12, 1e-12);
    double diff = 0;
    for (int i = 0; i < C; i++) diff = std::max(diff, std::abs(right[i] - wrong[i]));
    EXPECT_GT(diff, 1e-3) << "test cannot tell the two forms apart";
  }
}

TEST(Init, Gpt2ScalesResidualProjectionsAndDeepNetUsesBeta) {
  auto sd = [](const Model<float>& m, const std::string& name, size_t begin = 0, size_t end = 0) {
    const ParamSpec* p = m.table().find(name);
    end = end ? end : p->numel;
    double s = 0;
    for (size_t i = begin; i < end; i++) s += double(m.params()[p->offset + i]) * m.params()[p->offset + i];
    return std::sqrt(s / double(end - begin));
  };
  ModelConfig c;
  c.d_model = 256;
  c.n_layers = 8;
  c.placement = {Placement::Pre};
  Model<float> gpt2(c);
  EXPECT_NEAR(sd(gpt2, "h.0.attn.qkv.weight"), 0.02, 0.001);
  EXPECT_NEAR(sd(gpt2, "h.0.mlp.proj.weight"), 0.02 / std::sqrt(16.0), 0.0003);
  c.placement = {Placement::DeepNorm};
  Model<float> deep(c);
  EXPECT_EQ(deep.config().resolved_init(), InitScheme::DeepNet);
  const double beta = std::pow(8.0 * 8, -0.25), xavier_qk = std::sqrt(2.0 / (256 + 256));
  const size_t C2 = 2 * 256 * 256;
  EXPECT_NEAR(sd(deep, "h.0.attn.qkv.weight", 0, C2), xavier_qk, 0.02 * xavier_qk);  // q, k: gain 1
  EXPECT_NEAR(sd(deep, "h.0.attn.qkv.weight", C2), beta * xavier_qk, 0.02 * beta * xavier_qk);
  EXPECT_NEAR(sd(deep, "h.0.mlp.fc.weight"), beta * std::sqrt(2.0 / (256 + 1024)), 0.002);
  // an untied output matrix is no residual branch: gain 1 (it had beta)
  c.head = Head::Untied;
  Model<float> untied(c);
  const double xavier_out = std::sqrt(2.0 / (256 + 256));
  EXPECT_NEAR(sd(untied, "lm_head.weight"), xavier_out, 0.02 * xavier_out);
  // heads wider than C / NH: the query map's A = 512 rows are one projection of fan-out A (its first
  // C rows had fan-out C), under Xavier as under DeepNet
  ModelConfig wide;
  wide.d_model = 256;
  wide.n_heads = 4;
  wide.head_dim = 128;
  wide.init = InitScheme::Xavier;
  Model<float> w(wide);
  const double xavier_q = std::sqrt(2.0 / (256 + 512));
  EXPECT_NEAR(sd(w, "h.0.attn.qkv.weight", 0, 256 * 256), xavier_q, 0.02 * xavier_q);
  EXPECT_NEAR(sd(w, "h.0.attn.qkv.weight", 256 * 256, 512 * 256), xavier_q, 0.02 * xavier_q);
}

// norm_bias says what the norm sites hold: an RMSNorm (or L2) has no bias whatever the setting (a
// Llama-family model read from a file printed norm_bias = true); LayerNorm keeps the choice.
TEST(Config, NormBiasIsWhatTheNormSitesHold) {
  ModelConfig rms;
  rms.norm = NormKind::RMSNorm;  // norm_bias left at its default, true
  EXPECT_FALSE(model_config_to_json(rms)["norm_bias"].get<bool>());
  EXPECT_FALSE(model_config_from_json({{"norm", "rmsnorm"}, {"norm_bias", true}}, "test").norm_bias);
  EXPECT_TRUE(model_config_from_json({{"norm", "layernorm"}}, "test").norm_bias);
  EXPECT_FALSE(model_config_from_json({{"norm", "layernorm"}, {"norm_bias", false}}, "test").norm_bias);
}

// The longest sequence within the activation limit, what an import caps seq_len at: the estimate
// keeps it and refuses one token more, and a config at it validates (SmolLM2-1.7B's shape: 2,755 tokens,
// where its 8,192 would imply 258 GB; 1.7 B parameters are within the cap).
TEST(Config, LongestSequenceWithinTheActivationLimit) {
  ModelConfig c;
  c.d_model = 2048, c.n_layers = 24, c.n_heads = 32, c.d_ff = 8192, c.vocab = 49152;
  c.norm = NormKind::RMSNorm, c.activation = Activation::SwiGlu, c.positions = Positions::Rope;
  c.placement = {Placement::Pre};
  const int T = c.longest_sequence_within_limit();
  EXPECT_LE(c.sequence_activation_bytes(T), kMaxSequenceActivationBytes);
  EXPECT_GT(c.sequence_activation_bytes(T + 1), kMaxSequenceActivationBytes);
  EXPECT_EQ(T, 2755);
  c.seq_len = T;
  EXPECT_TRUE(c.violations().empty()) << c.violations().front();
  c.seq_len = T + 1;
  EXPECT_FALSE(c.violations().empty());
}

TEST(Config, ValidateReportsEveryViolationAtOnce) {
  nlohmann::json j = {{"d_model", 30}, {"n_heads", 4}, {"dropout", 1.5}, {"colour", "red"},
                      {"placement", "sideways"}, {"eps", "small"}};
  try {
    model_config_from_json(j, "test");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* needle : {"not divisible", "dropout", "unknown key 'colour'", "sideways", "'eps' must be a number"})
      EXPECT_NE(msg.find(needle), std::string::npos) << needle << " missing from: " << msg;
  }
  j = {{"placement", {"pre", "post"}}, {"n_layers", 3}};
  EXPECT_THROW(model_config_from_json(j, "test"), Error);
  j = {{"type_vocab", -1}};
  EXPECT_THROW(model_config_from_json(j, "test"), Error);
  j = {{"head", "pooler"}};
  EXPECT_THROW(model_config_from_json(j, "test"), Error);
  j = {{"arch", "encoder"}, {"vocab", 256}};  // a model config like any other; byte-level masked training refuses it
  EXPECT_NO_THROW(model_config_from_json(j, "test"));
}

// Mix-LN is read as a whole stack: floor(L / 4) post layers, then pre; refused in a list and for encdec.
TEST(Config, MixLnExpandsToTheAuthorsArrangement) {
  for (auto [L, post] : {std::pair{12, 3}, std::pair{24, 6}, std::pair{5, 1}, std::pair{3, 0}}) {
    const ModelConfig c = model_config_from_json({{"placement", "mixln"}, {"n_layers", L}}, "test");
    ASSERT_EQ(int(c.placement.size()), L);
    for (int l = 0; l < L; l++) EXPECT_EQ(c.placement_of(l), l < post ? Placement::Post : Placement::Pre) << L << " " << l;
    EXPECT_TRUE(c.has_final_norm());
  }
  for (const nlohmann::json& bad : {nlohmann::json{{"placement", {"pre", "mixln"}}, {"n_layers", 2}},
                                    nlohmann::json{{"placement", "mixln"}, {"arch", "encdec"}}}) {
    try {
      model_config_from_json(bad, "test");
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mixln"), std::string::npos) << e.what();
    }
  }
}

// Peri-LN's embedding norm and LayerNorm Scaling's constant scales come from their Method entries.
TEST(Config, PeriAddsTheEmbeddingNormAndLnsScalesByDepth) {
  ModelConfig peri = tiny(Arch::Gpt, {Placement::Peri}, NormKind::LayerNorm);
  EXPECT_TRUE(peri.has_embed_norm());
  EXPECT_NE(make_param_table(peri).find("ln_emb.weight"), nullptr);
  EXPECT_EQ(make_param_table(tiny(Arch::Gpt, {Placement::Post, Placement::Peri}, NormKind::LayerNorm)).find("ln_emb.weight"),
            nullptr);  // the stack's first layer decides
  ModelConfig encdec = peri;
  encdec.arch = Arch::EncDec;
  EXPECT_THROW(encdec.validate(), Error);
  ModelConfig lns = tiny(Arch::Gpt, {Placement::Lns}, NormKind::RMSNorm);
  lns.n_layers = 4;
  Model<double> m(lns);
  for (int i = 0; i < lns.n_slots(); i++)
    EXPECT_DOUBLE_EQ(m.sublayer_params_of(i).ln_in.scale, 1.0 / std::sqrt(double(i / 2 + 1))) << i;
  EXPECT_DOUBLE_EQ(m.final_norm().scale, 1.0);
}

TEST(Config, JsonRoundTrip) {
  ModelConfig c = tiny(Arch::Encoder, {Placement::Pre, Placement::DeepNorm}, NormKind::RMSNorm);
  const nlohmann::json j = model_config_to_json(c);
  const ModelConfig back = model_config_from_json(j, "roundtrip");
  EXPECT_EQ(model_config_to_json(back), j);
}

TEST(Model, FloatAgreesWithDouble) {
  ModelConfig c = tiny(Arch::Gpt, {Placement::Post}, NormKind::LayerNorm);
  c.init_std = 0.05;
  Model<double> md(c);
  Model<float> mf(c);
  for (size_t i = 0; i < md.params().size(); i++) md.params()[i] = mf.params()[i];
  const Tokens tok = tokens_for(c, 3, 6, 9);
  const double ld = md.forward(tok.ids.data(), tok.labels.data(), 3, 6);
  const double lf = mf.forward(tok.ids.data(), tok.labels.data(), 3, 6);
  EXPECT_NEAR(lf, ld, 1e-5 * std::abs(ld));
  md.zero_grad();
  mf.zero_grad();
  md.backward();
  mf.backward();
  std::vector<double> gf(mf.grads().begin(), mf.grads().end());
  double scale = 0;
  for (double g : md.grads()) scale = std::max(scale, std::abs(g));
  expect_close("grads float vs double", gf, md.grads(), 1e-3, 1e-5 * scale);
}

TEST(Model, ReplanningForANewShapeGivesTheSameLoss) {
  ModelConfig c = tiny(Arch::Gpt, {Placement::Sandwich}, NormKind::LayerNorm);
  Model<double> m(c);
  const Tokens a = tokens_for(c, 2, 5, 1), b = tokens_for(c, 1, 3, 2);
  const double first = m.forward(a.ids.data(), a.labels.data(), 2, 5);
  m.forward(b.ids.data(), b.labels.data(), 1, 3);
  EXPECT_EQ(m.forward(a.ids.data(), a.labels.data(), 2, 5), first);
}

// model.residual = false drops the skip path of every method (ModelConfig::shortcut_of): no method
// keeps a shortcut parameter, the gradients are right, and a method that differs from another only in
// its shortcut (Admin's omega, DeepNorm's alpha: both Post-LN otherwise) computes the same function
// as that method once the skip is gone, given the same weights. Admin kept omega * x here once.
TEST(NoResidual, EveryMethodLosesItsShortcut) {
  auto same_but_shortcut = [](const Method& a, const Method& b) {
    auto sites = [](const NormSites& s) { return std::tuple(s.in, s.branch, s.out); };
    auto ffn = [&](const Method& m) { return sites(m.ffn_sites ? *m.ffn_sites : m.sites); };
    return sites(a.sites) == sites(b.sites) && ffn(a) == ffn(b) && a.gain == b.gain &&
           a.final_norm == b.final_norm && a.streams == b.streams && a.embed_norm == b.embed_norm &&
           a.depth_scaled_input == b.depth_scaled_input && a.qkv_norm == b.qkv_norm;
  };
  int compared = 0;
  for (const Method& m : all_methods()) {
    if (m.streams != Streams::One) continue;  // ResiDual's second stream is a skip path: refused
    if (m.sphere) continue;  // nGPT's update is a residual on the sphere: residual = false is refused (NGpt tests)
    SCOPED_TRACE(m.name);
    ModelConfig c = tiny(Arch::Gpt, {m.id}, NormKind::LayerNorm);
    c.residual = false;
    Model<double> model(c);
    for (const ParamSpec& p : model.table().specs) EXPECT_FALSE(p.name.ends_with(".omega")) << p.name;
    for (int l = 0; l < c.n_layers; l++) EXPECT_EQ(c.residual_alpha(l), 0.0);
    check_model_gradients(c);
    if (m.shortcut == Shortcut::One) continue;
    for (const Method& twin : all_methods()) {
      if (twin.shortcut != Shortcut::One || !same_but_shortcut(m, twin)) continue;
      ModelConfig t = c;
      t.placement = {twin.id};
      Model<double> other(t);
      for (const ParamSpec& p : other.table().specs) {
        const ParamSpec* q = model.table().find(p.name);
        ASSERT_NE(q, nullptr) << p.name;
        std::copy_n(model.params().begin() + q->offset, p.numel, other.params().begin() + p.offset);
      }
      const Tokens tok = tokens_for(c, 2, 5, 3);
      EXPECT_NEAR(model.forward(tok.ids.data(), tok.labels.data(), 2, 5),
                  other.forward(tok.ids.data(), tok.labels.data(), 2, 5), 1e-13) << "vs " << twin.name;
      compared++;
    }
  }
  EXPECT_GE(compared, 2);  // admin and deepnorm against post
}
