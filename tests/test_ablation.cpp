// test_ablation.cpp: Model::set_ablation, the skip-free and MLP-free forms of a model run on its own
// parameters (what analyze dynamics' rank-collapse readings use instead of a copy of the model): for
// several methods (Admin's learned omega, DeepNet's alpha, LayerScale's and ReZero's gains among them)
// every stream and the loss equal, bit for bit, those of a model built with model.residual / model.mlp
// off holding the same parameters by name; turning it off gives the plain forward back bit for bit;
// what it cannot mean is refused, and backward, the products and the decoder refuse while it is on.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <vector>

#include "model/decode.h"
#include "model/methods.h"
#include "model/model.h"
#include "model_fixture.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;

namespace {

// The streams entering every slot and leaving the last, and the loss, of the last forward.
struct Readout {
  std::vector<std::vector<double>> streams;
  double loss = 0;
};

Readout readout(Model<double>& m, const Tokens& tok, int B, int T) {
  Readout r;
  r.loss = m.forward(tok.ids.data(), tok.labels.data(), B, T);
  const size_t n = size_t(B) * T * m.config().d_model;
  for (int i = 0; i <= m.config().n_slots(); i++) r.streams.emplace_back(m.stream(i), m.stream(i) + n);
  return r;
}

}  // namespace

TEST(Ablation, EqualsTheModelBuiltWithoutSkipsOrMlpsBitForBit) {
  for (Placement p : {Placement::Pre, Placement::Post, Placement::Sandwich, Placement::Admin, Placement::DeepNorm,
                      Placement::LayerScale, Placement::ReZero}) {
    ModelConfig c = tiny(Arch::Gpt, {p}, NormKind::LayerNorm);
    c.n_layers = 3;
    c.seq_len = 8;
    c.init = InitScheme::Auto;
    Model<double> m(c);
    for (double& x : m.params()) x += 0.05;  // (ReZero's and LayerScale's gains away from 0)
    const Tokens tok = tokens_for(c, 2, 7, 5);
    const Readout plain = readout(m, tok, 2, 7);
    for (auto [skips, mlp] : {std::pair{false, true}, std::pair{true, false}, std::pair{false, false}}) {
      SCOPED_TRACE(fmt::format("{} skips={} mlp={}", method_of(p).name, skips, mlp));
      ModelConfig v = c;
      v.residual = skips;
      v.mlp = mlp;
      Model<double> clone(v);
      for (const ParamSpec& s : clone.table().specs) {
        const ParamSpec* src = m.table().find(s.name);
        ASSERT_NE(src, nullptr) << s.name;
        std::copy_n(m.params().data() + src->offset, s.numel, clone.params().data() + s.offset);
      }
      const Readout want = readout(clone, tok, 2, 7);
      m.set_ablation({skips, mlp});
      const Readout got = readout(m, tok, 2, 7);
      EXPECT_EQ(got.streams, want.streams);
      EXPECT_EQ(got.loss, want.loss);
      EXPECT_THROW(m.backward(), Error);
      std::vector<double> t(size_t(2) * 7 * c.d_model, 1.0), out(t.size());
      EXPECT_THROW(m.jvp_sublayers(out.data(), t.data(), 1, 0, 2), Error);
      EXPECT_THROW(IncrementalDecoder<double>(m, 1, 4), Error);
      m.set_ablation({});
      const Readout back = readout(m, tok, 2, 7);
      EXPECT_EQ(back.streams, plain.streams);
      EXPECT_EQ(back.loss, plain.loss);
    }
  }
}

TEST(Ablation, WhatAModelCannotMeanIsRefused) {
  ModelConfig ngpt = tiny(Arch::Gpt, {Placement::NGpt}, NormKind::L2);
  ngpt.bias = LinearBias::None;
  ngpt.positions = Positions::Rope;
  ngpt.head = Head::Untied;
  ngpt.init = InitScheme::Auto;
  Model<double> m(ngpt);
  EXPECT_THROW(m.set_ablation({false, true}), Error);  // nGPT's update has no skip-free form
  EXPECT_FALSE(m.ablated());
  ModelConfig dual = tiny(Arch::Gpt, {Placement::ResiDual}, NormKind::LayerNorm);
  dual.init = InitScheme::Auto;
  Model<double> d(dual);
  EXPECT_THROW(d.set_ablation({true, false}), Error);
}

// Model::forward_from (fake depth's layer removal): after a layer's weights change, rerunning from that
// layer gives the loss, logits and every stream of a whole forward bit for bit, in float and double, for
// methods with state along the stream (Admin's omega, DeepNet's alpha, value residuals, RMSNorm's Llama
// block); what carries state beside the stream is refused.
template <class S>
void check_forward_from(const ModelConfig& c) {
  Model<S> m(c), whole(c);
  for (S& x : m.params()) x += S(0.05);
  const Tokens tok = tokens_for(c, 2, 7, 5);
  const int slots = c.n_slots();
  const size_t n = size_t(2) * 7 * c.d_model, nl = size_t(2) * 7 * c.vocab_size();
  m.forward(tok.ids.data(), tok.labels.data(), 2, 7);
  for (int l = c.n_layers - 1; l >= 0; l--) {  // top down, as fake depth runs it
    const ParamSpec* proj = m.table().find(fmt::format("h.{}.mlp.proj.weight", l));
    ASSERT_NE(proj, nullptr);
    for (size_t i = 0; i < proj->numel; i++) m.params()[proj->offset + i] *= S(-0.5);
    const double again = m.forward_from(2 * l);
    whole.params() = m.params();
    EXPECT_EQ(again, whole.forward(tok.ids.data(), tok.labels.data(), 2, 7)) << "layer " << l;
    for (int i = 0; i <= slots; i++)
      ASSERT_TRUE(std::equal(m.stream(i), m.stream(i) + n, whole.stream(i))) << "layer " << l << ", stream " << i;
    ASSERT_TRUE(std::equal(m.logits(), m.logits() + nl, whole.logits())) << "layer " << l;
  }
}

TEST(ForwardFrom, EqualsAWholeForwardBitForBit) {
  for (Placement p : {Placement::Pre, Placement::Post, Placement::Peri, Placement::Admin, Placement::DeepNorm,
                      Placement::LayerScale, Placement::Sandwich}) {
    ModelConfig c = tiny(Arch::Gpt, {p}, NormKind::LayerNorm);
    c.n_layers = 3;
    c.seq_len = 8;
    c.init = InitScheme::Auto;
    SCOPED_TRACE(method_of(p).name);
    check_forward_from<double>(c);
    check_forward_from<float>(c);
  }
  ModelConfig llama = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  llama.n_layers = 3;
  llama.seq_len = 8;
  llama.activation = Activation::SwiGlu;
  llama.positions = Positions::Rope;
  llama.bias = LinearBias::None;
  llama.value_residual = 0.5;
  SCOPED_TRACE("llama block with value residuals");
  check_forward_from<float>(llama);
}

TEST(ForwardFrom, StateBesideTheStreamIsRefused) {
  ModelConfig dual = tiny(Arch::Gpt, {Placement::ResiDual}, NormKind::LayerNorm);
  dual.init = InitScheme::Auto;
  Model<double> d(dual);
  const Tokens tok = tokens_for(dual, 1, 4, 3);
  d.forward(tok.ids.data(), tok.labels.data(), 1, 4);
  EXPECT_FALSE(d.can_forward_from());
  EXPECT_THROW(d.forward_from(0), Error);
  Model<double> fresh(tiny(Arch::Gpt, {Placement::Pre}, NormKind::LayerNorm));
  EXPECT_THROW(fresh.forward_from(0), Error);  // no forward to rerun
}
