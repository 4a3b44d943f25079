// test_encdec.cpp: the encoder-decoder and the methods table against independent checks: whole-model
// gradients vs central finite differences in double precision (every method, in the encoder and in
// the decoder, odd sizes, source and target padding, shared and separate embeddings, both norms);
// the forward-mode Jacobian through both stacks vs finite differences; the adjoint identity
// <u, J v> = <J^T u, v>; the published constants (DeepNet's enc-dec alpha and beta, Admin's closed
// forms); the identity-at-init of ReZero and SkipInit; and config refusals.
#include <gtest/gtest.h>

#include <cmath>

#include "check.h"
#include "model/methods.h"
#include "model/model.h"
#include "ops/common.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;

namespace {

const Placement kEveryMethod[] = {Placement::Post,     Placement::Pre,      Placement::Sandwich,
                                  Placement::PrePost,  Placement::DeepNorm, Placement::None,
                                  Placement::Admin,    Placement::ReZero,   Placement::SkipInit,
                                  Placement::LayerScale, Placement::TFixup, Placement::ResiDual};

// Odd sizes: C = 9 with 3 heads of 3, F = 13, N = 2 encoder and M = 3 decoder layers.
ModelConfig encdec(std::vector<Placement> placement, NormKind norm = NormKind::LayerNorm) {
  ModelConfig c;
  c.arch = Arch::EncDec;
  c.d_model = 9;
  c.n_heads = 3;
  c.n_layers = 2;
  c.dec_layers = 3;
  c.d_ff = 13;
  c.vocab = 17;
  c.seq_len = 7;
  c.norm = norm;
  c.placement = std::move(placement);
  c.init_std = 0.3;  // large enough that every path carries signal
  return c;
}

struct Batch2 {
  int B = 2, T = 6, S = 5;
  std::vector<int32_t> src, tgt, labels;
  std::vector<uint8_t> src_mask, tgt_mask;
};

// Row b of the source keeps S - b tokens, row b of the target T - b (right padding, label -100 there).
Batch2 batch_for(const ModelConfig& c, uint64_t seed, int B = 2) {
  Batch2 x;
  x.B = B;
  Rng rng(seed);
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < x.S; s++) {
      x.src.push_back(int32_t(rng.below(c.src_vocab_size())));
      x.src_mask.push_back(s < x.S - b);
    }
    for (int t = 0; t < x.T; t++) {
      x.tgt.push_back(int32_t(rng.below(c.vocab_size())));
      x.tgt_mask.push_back(t < x.T - b);
      x.labels.push_back(t < x.T - b && t != 2 ? int32_t(rng.below(c.vocab_size())) : ops::kIgnoreLabel);
    }
  }
  return x;
}

// Perturbs every scale, gain and bias away from its init (ReZero/SkipInit gains start at 0, where
// their branches carry no gradient) so that every parameter's gradient is generic.
void perturb(Model<double>& m, uint64_t seed) {
  Rng rng(seed);
  for (const ParamSpec& p : m.table().specs) {
    if (p.role == ParamRole::LinearWeight || p.role == ParamRole::Embedding) continue;
    for (size_t i = 0; i < p.numel; i++) {
      double& v = m.params()[p.offset + i];
      v = p.role == ParamRole::Gate ? 0.5 + 0.5 * rng.uniform() : v + 0.2 * rng.normal();
    }
  }
}

double forward(Model<double>& m, const Batch2& x, bool pad) {
  const Source src{x.src.data(), x.S, pad ? x.src_mask.data() : nullptr};
  return m.forward(x.tgt.data(), x.labels.data(), x.B, x.T, nullptr, pad ? x.tgt_mask.data() : nullptr, src);
}

void check_gradients(const ModelConfig& cfg, bool pad = true) {
  Model<double> model(cfg);
  perturb(model, 5);
  const Batch2 x = batch_for(cfg, 7);
  forward(model, x, pad);
  model.zero_grad();
  model.backward();
  const std::vector<double> analytic = model.grads();
  const std::vector<double> numeric = finite_diff(model.params(), [&] { return forward(model, x, pad); }, 1e-6);
  for (const ParamSpec& p : model.table().specs) {
    std::vector<double> a(analytic.begin() + p.offset, analytic.begin() + p.offset + p.numel);
    std::vector<double> n(numeric.begin() + p.offset, numeric.begin() + p.offset + p.numel);
    expect_close(p.name, a, n, 1e-5, 1e-7);
  }
}

std::string name_of(Placement p) { return method_of(p).name; }

}  // namespace

// Every method once in the encoder and once in the decoder (uniform stacks), with padding.
class EncDecGradients : public testing::TestWithParam<Placement> {};

TEST_P(EncDecGradients, MatchFiniteDifferences) {
  check_gradients(encdec({GetParam()}));
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, EncDecGradients, testing::ValuesIn(kEveryMethod),
                         [](const auto& info) { return name_of(info.param); });

TEST(EncDecGradientsMore, MixedMethodsRmsNormSeparateEmbeddingsNoPadding) {
  ModelConfig c = encdec({Placement::Admin, Placement::LayerScale, Placement::Post, Placement::ReZero,
                          Placement::Pre},
                         NormKind::RMSNorm);
  c.shared_embeddings = false;
  c.src_vocab = 5;
  check_gradients(c, false);
  ModelConfig attn_only = encdec({Placement::SkipInit, Placement::DeepNorm, Placement::Sandwich,
                                  Placement::PrePost, Placement::TFixup});
  attn_only.mlp = false;
  attn_only.activation = Activation::Relu;
  check_gradients(attn_only);
  ModelConfig untied = encdec({Placement::Post});
  untied.head = Head::Untied;  // an output matrix of its own (source and target still share wte)
  check_gradients(untied);
}

// The new methods in the decoder-only and encoder-only models too.
class MethodGradients : public testing::TestWithParam<std::tuple<Arch, Placement>> {};

TEST_P(MethodGradients, MatchFiniteDifferences) {
  auto [arch, method] = GetParam();
  ModelConfig c;
  c.arch = arch;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  c.d_ff = 12;
  c.vocab = arch == Arch::Gpt ? 11 : 259;
  c.seq_len = 6;
  c.placement = {method};
  c.init_std = 0.3;
  Model<double> model(c);
  perturb(model, 3);
  const int B = 2, T = 5;
  Rng rng(9);
  std::vector<int32_t> ids(B * T), labels(B * T);
  for (int i = 0; i < B * T; i++) {
    ids[size_t(i)] = int32_t(rng.below(c.vocab_size()));
    labels[size_t(i)] = i % 3 == 1 ? ops::kIgnoreLabel : int32_t(rng.below(c.vocab_size()));
  }
  model.forward(ids.data(), labels.data(), B, T);
  model.zero_grad();
  model.backward();
  const std::vector<double> analytic = model.grads();
  const std::vector<double> numeric =
      finite_diff(model.params(), [&] { return model.forward(ids.data(), labels.data(), B, T); }, 1e-6);
  for (const ParamSpec& p : model.table().specs) {
    std::vector<double> a(analytic.begin() + p.offset, analytic.begin() + p.offset + p.numel);
    std::vector<double> n(numeric.begin() + p.offset, numeric.begin() + p.offset + p.numel);
    expect_close(p.name, a, n, 1e-5, 1e-7);
  }
}

INSTANTIATE_TEST_SUITE_P(NewMethods, MethodGradients,
                         testing::Combine(testing::Values(Arch::Gpt, Arch::Encoder),
                                          testing::Values(Placement::Admin, Placement::ReZero,
                                                          Placement::SkipInit, Placement::LayerScale,
                                                          Placement::TFixup)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  name_of(std::get<1>(info.param));
                         });

// The Jacobian of the decoder's last stream with respect to both stacks' input streams: forward mode
// (jvp_encdec) against central differences. With B = 1 the source stream at (s, c) moves exactly
// with enc.wpe[s, c] and the target stream with wpe[t, c], so perturbing those rows moves the inputs.
TEST(EncDecJacobian, ForwardModeMatchesFiniteDifferencesAndTheAdjoint) {
  for (Placement method : {Placement::Post, Placement::Pre, Placement::Admin, Placement::DeepNorm}) {
    SCOPED_TRACE(name_of(method));
    ModelConfig c = encdec({method, Placement::Sandwich, Placement::Post, method, Placement::LayerScale});
    Model<double> model(c);
    perturb(model, 11);
    const Batch2 x = batch_for(c, 13, 1);
    forward(model, x, true);
    const int S = x.S, T = x.T, C = c.d_model, K = 2, n_slots = c.n_slots();
    const std::vector<double> vs = randn(size_t(K) * S * C, 1), vt = randn(size_t(K) * T * C, 2);
    std::vector<double> jv(size_t(K) * T * C);
    model.jvp_encdec(jv.data(), vs.data(), vt.data(), K);
    const ParamSpec* enc_wpe = model.table().find("enc.wpe.weight");
    const ParamSpec* wpe = model.table().find("wpe.weight");
    for (int k = 0; k < K; k++) {
      auto stream_at = [&](double eps) {
        std::vector<double>& p = model.params();
        for (size_t i = 0; i < size_t(S) * C; i++) p[enc_wpe->offset + i] += eps * vs[size_t(k) * S * C + i];
        for (size_t i = 0; i < size_t(T) * C; i++) p[wpe->offset + i] += eps * vt[size_t(k) * T * C + i];
        forward(model, x, true);
        std::vector<double> out(model.stream(n_slots), model.stream(n_slots) + size_t(T) * C);
        for (size_t i = 0; i < size_t(S) * C; i++) p[enc_wpe->offset + i] -= eps * vs[size_t(k) * S * C + i];
        for (size_t i = 0; i < size_t(T) * C; i++) p[wpe->offset + i] -= eps * vt[size_t(k) * T * C + i];
        return out;
      };
      const double h = 1e-6;
      const std::vector<double> plus = stream_at(h), minus = stream_at(-h);
      std::vector<double> fd(size_t(T) * C), got(jv.begin() + long(k) * T * C, jv.begin() + long(k + 1) * T * C);
      for (size_t i = 0; i < fd.size(); i++) fd[i] = (plus[i] - minus[i]) / (2 * h);
      expect_close("jvp_encdec tangent " + std::to_string(k), got, fd, 1e-6, 1e-8);
    }
    // adjoint: <u, J v> = <J^T u, v> with J^T from the reverse pass through both stacks
    forward(model, x, true);
    const std::vector<double> u = randn(size_t(T) * C, 3);
    std::vector<double> js(size_t(S) * C), jt(size_t(T) * C);
    model.vjp_encdec(js.data(), jt.data(), u.data());
    const std::vector<double> v0s(vs.begin(), vs.begin() + long(S) * C), v0t(vt.begin(), vt.begin() + long(T) * C);
    const std::vector<double> jv0(jv.begin(), jv.begin() + long(T) * C);
    const double lhs = dot(u, jv0), rhs = dot(js, v0s) + dot(jt, v0t);
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
  }
}

TEST(EncDecJacobian, PaddedSourceTokensDoNotMoveTheOutput) {
  ModelConfig c = encdec({Placement::Pre});
  Model<double> model(c);
  const Batch2 x = batch_for(c, 17);
  const double base = forward(model, x, true);
  Batch2 y = x;
  y.src[size_t(1) * y.S + size_t(y.S - 1)] = (y.src[size_t(1) * y.S + size_t(y.S - 1)] + 1) % c.vocab_size();
  EXPECT_EQ(base, forward(model, y, true)) << "a padded source token changed the loss";
  y.src[0] = (y.src[0] + 1) % c.vocab_size();
  EXPECT_NE(base, forward(model, y, true)) << "a real source token did not change the loss";
}

TEST(Methods, EveryMethodHasItsOwnEntryAndName) {
  for (Placement p : kEveryMethod) {
    EXPECT_EQ(method_of(p).id, p);
    EXPECT_EQ(placement_from_string(method_of(p).name), p);
  }
}

TEST(Methods, PublishedConstants) {
  // Admin's O(log n) closed form (admin-torch calculate_init): S = 12, 36, 200 sub-layers
  EXPECT_NEAR(admin_omega(AdminInit::Log, 12), 2.017, 5e-4);
  EXPECT_NEAR(admin_omega(AdminInit::Log, 36), 3.041, 5e-4);
  EXPECT_NEAR(admin_omega(AdminInit::Log, 200), 6.075, 5e-4);
  EXPECT_DOUBLE_EQ(admin_omega(AdminInit::Sqrt, 36), 6.0);
  // DeepNet, enc-dec: encoder alpha 0.81 (N^4 M)^(1/16), beta 0.87 (N^4 M)^(-1/16); decoder (3M)^(1/4),
  // (12M)^(-1/4). N = M = 6: (6^5)^(1/16) = 6^(5/16)
  ModelConfig c = encdec({Placement::DeepNorm});
  c.n_layers = 6;
  c.dec_layers = 6;
  EXPECT_NEAR(c.residual_alpha(0), 0.81 * std::pow(6.0, 5.0 / 16), 1e-12);
  EXPECT_NEAR(c.deepnet_beta(0), 0.87 * std::pow(6.0, -5.0 / 16), 1e-12);
  EXPECT_NEAR(c.residual_alpha(6), std::pow(18.0, 0.25), 1e-12);
  EXPECT_NEAR(c.deepnet_beta(11), std::pow(72.0, -0.25), 1e-12);
  EXPECT_DOUBLE_EQ(layerscale_init(12), 0.1);
  EXPECT_DOUBLE_EQ(layerscale_init(24), 1e-5);
  EXPECT_DOUBLE_EQ(layerscale_init(36), 1e-6);
}

// ReZero and SkipInit start as the identity: every stream equals the embedding.
TEST(Methods, ReZeroAndSkipInitStartAsTheIdentity) {
  for (Placement p : {Placement::ReZero, Placement::SkipInit}) {
    ModelConfig c = encdec({p});
    Model<double> model(c);
    const Batch2 x = batch_for(c, 19);
    forward(model, x, true);
    const size_t n = size_t(x.B) * x.T * c.d_model;
    const int last = c.n_slots();
    std::vector<double> a(model.stream(c.first_decoder_slot()), model.stream(c.first_decoder_slot()) + n);
    std::vector<double> b(model.stream(last), model.stream(last) + n);
    EXPECT_EQ(a, b) << name_of(p);
  }
}

TEST(Methods, ParameterTableFollowsTheMethod) {
  ModelConfig c = encdec({Placement::Admin, Placement::ReZero, Placement::LayerScale, Placement::SkipInit,
                          Placement::Pre});
  const ParamTable t = make_param_table(c);
  ASSERT_NE(t.find("enc.h.0.attn.omega"), nullptr);
  EXPECT_EQ(t.find("enc.h.0.attn.omega")->shape, std::vector<int64_t>{9});
  ASSERT_NE(t.find("enc.h.1.rezero"), nullptr);
  EXPECT_EQ(t.find("h.0.cross.gain")->shape, std::vector<int64_t>{9});
  EXPECT_EQ(t.find("h.1.cross.gain")->shape, std::vector<int64_t>{1});
  EXPECT_EQ(t.find("h.1.cross.kv.weight")->shape, (std::vector<int64_t>{18, 9}));
  EXPECT_EQ(t.find("enc.ln_f.weight"), nullptr);  // the encoder ends with rezero: no final norm
  EXPECT_NE(t.find("ln_f.weight"), nullptr);      // the decoder ends with pre
  EXPECT_NE(t.find("enc.wpe.weight"), nullptr);
  EXPECT_EQ(t.find("enc.wte.weight"), nullptr);  // shared embeddings
}

TEST(EncDecConfig, RefusesWhatItCannotBe) {
  ModelConfig c = encdec({Placement::Pre, Placement::Post});  // 2 methods for 5 layers
  c.type_vocab = 2;
  c.head = Head::Mlm;
  try {
    c.validate();
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("2 methods for 5 layers"), std::string::npos) << m;
    EXPECT_NE(m.find("type_vocab"), std::string::npos) << m;
    EXPECT_NE(m.find("head"), std::string::npos) << m;
  }
  ModelConfig g;
  g.dec_layers = 3;
  EXPECT_THROW(g.validate(), Error);
  ModelConfig headless = encdec({Placement::Pre});
  headless.head = Head::None;  // a translation model has logits: tied or untied only
  EXPECT_THROW(headless.validate(), Error);
  Model<double> m(encdec({Placement::Pre}));
  std::vector<int32_t> ids(6, 1), labels(6, 1);
  EXPECT_THROW(m.forward(ids.data(), labels.data(), 1, 6), Error);  // no source
}

TEST(EncDecConfig, JsonRoundTrip) {
  ModelConfig c = encdec({Placement::Admin, Placement::Pre, Placement::Post, Placement::DeepNorm, Placement::Pre});
  c.shared_embeddings = false;
  c.src_vocab = 30;
  c.admin_init = AdminInit::Sqrt;
  const ModelConfig back = model_config_from_json(model_config_to_json(c), "test");
  EXPECT_EQ(model_config_to_json(back), model_config_to_json(c));
  EXPECT_EQ(back.decoder_layers(), 3);
  EXPECT_EQ(back.src_vocab_size(), 30);
  EXPECT_EQ(make_param_table(back).total, make_param_table(c).total);
}

// Admin's profiled omega: each admin sub-layer's omega is the running ratio, ratio <- sqrt(Var(omega x)
// + Var(f)), restarting at 1 in each stack; recomputed here from the saved activations.
TEST(Methods, AdminProfileFollowsTheRatioChainPerStack) {
  ModelConfig c = encdec({Placement::Admin});
  c.admin_init = AdminInit::Profile;
  Model<double> model(c);
  const Batch2 x = batch_for(c, 23);
  const std::vector<double> omegas = model.profile_admin(x.tgt.data(), x.B, x.T, x.tgt_mask.data(),
                                                         Source{x.src.data(), x.S, x.src_mask.data()});
  ASSERT_EQ(int(omegas.size()), c.n_slots());
  auto var = [](const double* v, size_t n, double scale) {
    double m = 0, q = 0;
    for (size_t k = 0; k < n; k++) m += v[k];
    m /= double(n);
    for (size_t k = 0; k < n; k++) q += (v[k] - m) * (v[k] - m);
    return scale * scale * q / double(n);
  };
  double ratio = 1;
  for (int i = 0; i < c.n_slots(); i++) {
    if (i == c.first_decoder_slot()) ratio = 1;
    const size_t n = size_t(x.B) * (c.slot(i).encoder ? x.S : x.T) * c.d_model;
    EXPECT_NEAR(omegas[size_t(i)], ratio, 1e-12) << "slot " << i;
    EXPECT_EQ(model.sublayer_params_of(i).omega[4], omegas[size_t(i)]);
    ratio = std::sqrt(var(model.acts(i).x_in, n, ratio) + var(model.acts(i).f, n, 1.0));
  }
  EXPECT_NE(omegas[1], 1.0);  // the chain moves after the first sub-layer
}
