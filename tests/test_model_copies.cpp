// test_model_copies.cpp: the models the instruments make from others: model_with_params (a float
// model's values widened, nothing else), forward-only models (the same forward, no gradients, backward
// refused) and the gradients such a model is given later (enable_gradients), and set_eps.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "model_fixture.h"
#include "model/model.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;

// model_with_params: the widened copy the instruments read holds exactly the float model's values (no
// random initialization left anywhere), and a parameter count of another config is refused.
TEST(ModelWithParams, HoldsEveryGivenValueAndRefusesAnotherCount) {
  const ModelConfig c = tiny(Arch::Gpt, {Placement::Pre}, NormKind::LayerNorm);
  const Model<float> f(c);
  const auto d = model_with_params<double>(c, f.params());
  ASSERT_EQ(d->params().size(), f.params().size());
  for (size_t i = 0; i < f.params().size(); i++) ASSERT_EQ(d->params()[i], double(f.params()[i])) << i;
  std::vector<float> short_by_one(f.params().begin(), f.params().end() - 1);
  EXPECT_THROW(model_with_params<double>(c, short_by_one), Error);
}

// A forward-only model (an instrument's ablated copy): the same forward, bit for bit, for every
// architecture; no gradient memory; backward and the reverse-mode products refused by name.
TEST(ModelForwardOnly, SameForwardNoGradientsBackwardRefused) {
  for (Arch arch : {Arch::Gpt, Arch::Encoder, Arch::EncDec}) {
    SCOPED_TRACE(to_string(arch));
    const ModelConfig c = tiny(arch, {Placement::Post}, NormKind::LayerNorm);
    Model<double> full(c);
    Model<double> fwd(c, Model<double>::Unset{}, Model<double>::ForwardOnly{});
    std::copy(full.params().begin(), full.params().end(), fwd.params().begin());
    EXPECT_TRUE(fwd.forward_only());
    EXPECT_FALSE(full.forward_only());
    EXPECT_TRUE(fwd.grads().empty());
    const Tokens tok = tokens_for(c, 2, 5, 9);
    std::vector<int32_t> src(tok.ids);  // an encdec's source: the same ids
    const Source s = arch == Arch::EncDec ? Source{src.data(), 5, nullptr} : Source{};
    const double a = full.forward(tok.ids.data(), tok.labels.data(), 2, 5, nullptr, nullptr, s);
    const double b = fwd.forward(tok.ids.data(), tok.labels.data(), 2, 5, nullptr, nullptr, s);
    EXPECT_EQ(a, b);
    const size_t n = size_t(2) * 5 * c.vocab_size();
    EXPECT_TRUE(std::equal(full.logits(), full.logits() + n, fwd.logits()));
    EXPECT_THROW(fwd.backward(), Error);
    std::vector<double> din(size_t(2) * 5 * c.d_model), dout(din.size(), 1.0);
    if (arch != Arch::EncDec) {
      EXPECT_THROW(fwd.vjp_sublayers(din.data(), dout.data(), 0, 2), Error);
    }
    EXPECT_NO_THROW(full.backward());
  }
}

// A forward-only model given its gradients afterwards (enable_gradients: an instrument that opens a big
// model without them) computes the gradients of a model built with them, bit for bit, for every
// architecture and for the heads, tied and untied outputs and the Attention Residuals' final read that
// own gradient views of their own.
TEST(ModelForwardOnly, GradientsEnabledLaterAreTheGradientsOfAModelBuiltWithThem) {
  std::vector<ModelConfig> configs;
  for (Arch arch : {Arch::Gpt, Arch::Encoder, Arch::EncDec}) configs.push_back(tiny(arch, {Placement::Pre}, NormKind::LayerNorm));
  ModelConfig untied = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  untied.head = Head::Untied;
  configs.push_back(untied);
  ModelConfig attn_res = tiny(Arch::Gpt, {Placement::Pre}, NormKind::RMSNorm);
  attn_res.hyper = HyperMix::AttnRes;
  attn_res.attn_res_block = 2;
  attn_res.hyper_streams = attn_res.attn_res_streams();
  configs.push_back(attn_res);
  for (const ModelConfig& c : configs) {
    SCOPED_TRACE(model_config_to_json(c).dump());
    Model<double> full(c);
    Model<double> later(c, Model<double>::Unset{}, Model<double>::ForwardOnly{});
    std::copy(full.params().begin(), full.params().end(), later.params().begin());
    later.enable_gradients();
    EXPECT_FALSE(later.forward_only());
    ASSERT_EQ(later.grads().size(), full.grads().size());
    const Tokens tok = tokens_for(c, 2, 5, 9);
    std::vector<int32_t> src(tok.ids);
    const Source s = c.encdec() ? Source{src.data(), 5, nullptr} : Source{};
    for (Model<double>* m : {&full, &later}) {
      m->zero_grad();
      m->forward(tok.ids.data(), tok.labels.data(), 2, 5, nullptr, nullptr, s);
      m->backward();
    }
    EXPECT_EQ(later.grads(), full.grads());
    double norm = 0;
    for (double g : later.grads()) norm += g * g;
    EXPECT_GT(norm, 0);
  }
  Model<double> m(configs[0]);
  m.set_eps(0.5);
  EXPECT_EQ(m.config().eps, 0.5);
  EXPECT_THROW(m.set_eps(-1), Error);
}
