// test_value_residual.cpp: value residual learning (model.value_residual; ResFormer): which slots mix
// and which is each stack's source, the gradients against finite differences (causal, padded encoder
// with a v-norm, both stacks of an encoder-decoder), forward mode through a range that holds the source
// against finite differences of the forward (the first layer's values carried to every later layer),
// reverse mode as its transpose, and a one-layer stack (nothing to mix) as the plain model bit for
// bit. The PyTorch golden
// cases (tests/torch/golden_cases.py, "value_residual") check the same model against the authors' form;
// the token-local and closed-form block Jacobians and the decoder are in their own tests' tables.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/model.h"
#include "model_fixture.h"
#include "util/error.h"

namespace normlab::test {
namespace {

ModelConfig llama_like(Arch arch, double lambda) {
  ModelConfig c = tiny(arch, {Placement::Pre}, NormKind::RMSNorm);
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.activation = Activation::SwiGlu;
  c.seq_len = 8;
  c.value_residual = lambda;
  return c;
}

}  // namespace

TEST(ValueResidual, EachStacksFirstSelfAttentionIsTheSource) {
  ModelConfig c = llama_like(Arch::Gpt, 0.5);
  EXPECT_TRUE(c.is_value_source(0));
  EXPECT_EQ(c.value_source(0), -1);
  EXPECT_EQ(c.value_source(1), -1);  // an MLP
  EXPECT_EQ(c.value_source(2), 0);
  EXPECT_EQ(c.value_source(4), 0);
  EXPECT_FALSE(c.is_value_source(2));
  c.value_residual = 0;
  EXPECT_FALSE(c.is_value_source(0));
  EXPECT_EQ(c.value_source(2), -1);
  // an encoder-decoder: the encoder's slot 0 for its layers, the decoder's first self-attention for its own
  ModelConfig e = tiny(Arch::EncDec, {Placement::Pre}, NormKind::LayerNorm);
  e.value_residual = 0.5;
  const int dec0 = e.first_decoder_slot();
  EXPECT_EQ(e.value_source(2), 0);
  EXPECT_TRUE(e.is_value_source(dec0));
  EXPECT_EQ(e.value_source(dec0), -1);
  EXPECT_EQ(e.value_source(dec0 + 1), -1);  // cross-attention keeps its values
  EXPECT_EQ(e.value_source(dec0 + 3), dec0);
  // a one-layer stack has no later self-attention, so no source
  ModelConfig one = llama_like(Arch::Gpt, 0.5);
  one.n_layers = 1;
  EXPECT_FALSE(one.is_value_source(0));
  for (double bad : {-0.1, 1.0, 2.0, std::nan("")}) {
    ModelConfig b = llama_like(Arch::Gpt, bad);
    EXPECT_THROW(b.validate(), Error) << bad;
  }
}

// A stack of one layer has no later self-attention to mix into: with lambda 0.5 it is the plain model
// bit for bit; at three layers the mix changes the model.
TEST(ValueResidual, OnlyLaterLayersMix) {
  ModelConfig plain = llama_like(Arch::Gpt, 0.0);
  plain.n_layers = 1;
  ModelConfig mixed = plain;
  mixed.value_residual = 0.5;
  const Tokens tok = tokens_for(plain, 2, 8, 3);
  EXPECT_EQ(logits_with_weights_of(plain, plain, tok), logits_with_weights_of(plain, mixed, tok));
  plain.n_layers = mixed.n_layers = 3;
  const std::vector<double> a = logits_with_weights_of(plain, plain, tok);
  const std::vector<double> b = logits_with_weights_of(plain, mixed, tok);
  double diff = 0;
  for (size_t k = 0; k < a.size(); k++) diff = std::max(diff, std::abs(a[k] - b[k]));
  EXPECT_GT(diff, 1e-3);
}

TEST(ValueResidual, GradientsAgainstFiniteDifferences) {
  for (Placement p : {Placement::Pre, Placement::Post}) {
    SCOPED_TRACE(method_of(p).name);
    ModelConfig c = llama_like(Arch::Gpt, 0.5);
    c.placement = {p};
    c.positions = Positions::Rope;
    check_model_gradients(c);
  }
  {
    SCOPED_TRACE("padded encoder, per-head QKV-norm, DyT");
    ModelConfig c = tiny(Arch::Encoder, {Placement::Post, Placement::Pre, Placement::Post}, NormKind::DyT);
    c.qk_norm = QkNorm::Heads;
    c.v_norm = true;
    c.value_residual = 0.3;
    check_model_gradients(c, /*padding=*/true);
  }
  {
    SCOPED_TRACE("encoder-decoder");
    ModelConfig c = tiny(Arch::EncDec, {Placement::Pre}, NormKind::LayerNorm);
    c.dec_layers = 3;
    c.value_residual = 0.5;
    Model<double> model(c);
    const int B = 2, S = 5, T = 4;
    Tokens src = tokens_for(c, B, S, 11), tgt = tokens_for(c, B, T, 12);
    const Source source{src.ids.data(), S, nullptr};
    model.forward(tgt.ids.data(), tgt.labels.data(), B, T, nullptr, nullptr, source);
    model.zero_grad();
    model.backward();
    const std::vector<double> analytic = model.grads();
    auto loss = [&] { return model.forward(tgt.ids.data(), tgt.labels.data(), B, T, nullptr, nullptr, source); };
    expect_close("encdec gradients", analytic, finite_diff(model.params(), loss, 1e-6), 1e-5, 1e-7);
  }
}

// The stream entering slot 0 is wte[ids] + wpe: moving row t of wpe by eps u moves token t of every
// batch row by eps u, so central differences of the last stream in wpe are an exact oracle for
// jvp_sublayers(0, n_slots) with the tangent u at token t of each row.
TEST(ValueResidual, ForwardModeCarriesTheFirstLayersValuesToEveryLaterLayer) {
  ModelConfig c = llama_like(Arch::Gpt, 0.5);
  Model<double> model(c);
  const int B = 2, T = 6, C = c.d_model, n = c.n_slots();
  const Tokens tok = tokens_for(c, B, T, 5);
  const size_t NC = size_t(B) * T * C;
  const int t = 2;
  Rng rng(9);
  std::vector<double> u(static_cast<size_t>(C));
  for (double& x : u) x = rng.normal();
  const size_t wpe = model.table().find("wpe.weight")->offset + size_t(t) * C;
  auto last_stream = [&](double eps) {
    for (int k = 0; k < C; k++) model.params()[wpe + k] += eps * u[size_t(k)];
    model.forward(tok.ids.data(), tok.labels.data(), B, T);
    std::vector<double> y(model.stream(n), model.stream(n) + NC);
    for (int k = 0; k < C; k++) model.params()[wpe + k] -= eps * u[size_t(k)];
    return y;
  };
  const double eps = 1e-5;
  const std::vector<double> plus = last_stream(eps), minus = last_stream(-eps);
  std::vector<double> fd(NC);
  for (size_t k = 0; k < NC; k++) fd[k] = (plus[k] - minus[k]) / (2 * eps);
  model.forward(tok.ids.data(), tok.labels.data(), B, T);
  std::vector<double> tin(NC, 0.0), tout(NC), mid(NC), held(NC);
  for (int b = 0; b < B; b++)
    for (int k = 0; k < C; k++) tin[(size_t(b) * T + t) * C + k] = u[size_t(k)];
  model.jvp_sublayers(tout.data(), tin.data(), 1, 0, n);
  expect_close("J u through every layer", tout, fd, 1e-7, 1e-9);
  // the same walk in two ranges holds the source's values in the second: a different (partial) Jacobian
  model.jvp_sublayers(mid.data(), tin.data(), 1, 0, 2);
  model.jvp_sublayers(held.data(), mid.data(), 1, 2, n);
  double gap = 0, scale = 0;
  for (size_t k = 0; k < NC; k++) {
    gap = std::max(gap, std::abs(held[k] - tout[k]));
    scale = std::max(scale, std::abs(tout[k]));
  }
  EXPECT_GT(gap, 1e-3 * scale);
  // reverse mode is the transpose of forward mode, over the whole range and over the range without the source
  std::vector<double> w(NC), din(NC);
  for (double& x : w) x = rng.normal();
  for (auto [first, fwd] : {std::pair{0, &tout}, std::pair{2, &held}}) {
    SCOPED_TRACE(first);
    const std::vector<double>& start = first == 0 ? tin : mid;
    model.vjp_sublayers(din.data(), w.data(), first, n);
    double lhs = 0, rhs = 0;
    for (size_t k = 0; k < NC; k++) {
      lhs += din[k] * start[k];
      rhs += w[k] * (*fwd)[k];
    }
    EXPECT_NEAR(lhs, rhs, 1e-10 * (std::abs(rhs) + 1));
  }
}

}  // namespace normlab::test
