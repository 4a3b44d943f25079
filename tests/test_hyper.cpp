// test_hyper.cpp: hyper-connections (model.hyper; model/hyper.h): the config rules, mhc's Sinkhorn-Knopp
// projection (doubly stochastic, and its reverse against finite differences), the forms at
// initialization (hc and hc_static equal Pre-LN: every stream carries the same x; one static stream
// is Pre-LN exactly), every gradient of hc, hc_static and mhc against central finite differences
// (causal LayerNorm, a Llama-like RMSNorm block with RoPE and grouped queries, a padded encoder), and
// the products and instruments that read one stream refusing by name. The PyTorch golden cases
// (tests/torch/golden_cases.py, "hyper") check the same models against a reference written from the
// authors' code.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/decode.h"
#include "model/hyper.h"
#include "model/methods.h"
#include "model/model.h"
#include "model_fixture.h"
#include "util/error.h"
#include "util/rng.h"

namespace normlab::test {
namespace {

ModelConfig hyper_model(HyperMix form, int streams, Arch arch = Arch::Gpt) {
  ModelConfig c = tiny(arch, {Placement::Pre}, NormKind::LayerNorm);  // (2 layers: 4 sub-layers)
  c.hyper = form;
  c.hyper_streams = streams;
  return c;
}

// The logits of `c` with the parameters of `from` copied by name (those `c` has); the others keep c's init.
std::vector<double> logits_by_name(const ModelConfig& from_cfg, const ModelConfig& c, const Tokens& tok, int B, int T) {
  const Model<double> from(from_cfg);
  Model<double> m(c);
  for (const ParamSpec& p : m.table().specs)
    if (const ParamSpec* q = from.table().find(p.name))
      std::copy(from.params().begin() + q->offset, from.params().begin() + q->offset + q->numel,
                m.params().begin() + p.offset);
  m.forward(tok.ids.data(), tok.labels.data(), B, T);
  return {m.logits(), m.logits() + size_t(B) * T * c.vocab_size()};
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t k = 0; k < a.size(); k++) d = std::max(d, std::abs(a[k] - b[k]));
  return d;
}

}  // namespace

TEST(Hyper, ConfigRules) {
  EXPECT_NO_THROW(hyper_model(HyperMix::Hc, 4).validate());
  for (int bad : {0, 17}) {
    ModelConfig c = hyper_model(HyperMix::Hc, bad);
    EXPECT_THROW(c.validate(), Error) << bad;
  }
  ModelConfig lite = hyper_model(HyperMix::MhcLite, 7);  // 5040 permutations
  EXPECT_THROW(lite.validate(), Error);
  EXPECT_EQ(make_param_table(hyper_model(HyperMix::MhcLite, 4)).find("h.0.attn.hc.phi")->shape,
            (std::vector<int64_t>{2 * 4 + 24, 4 * 8}));
  ModelConfig iters = hyper_model(HyperMix::Mhc, 4);
  iters.sinkhorn_iters = 0;
  EXPECT_THROW(iters.validate(), Error);
  // a norm after the sum, a scaled shortcut or branch, nGPT's update: no shortcut x + g to replace
  for (Placement p : {Placement::Post, Placement::DeepNorm, Placement::ReZero, Placement::Admin, Placement::ResiDual}) {
    ModelConfig c = hyper_model(HyperMix::Hc, 2);
    c.placement = {p};
    try {
      c.validate();
      ADD_FAILURE() << method_of(p).name << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.hyper"), std::string::npos) << e.what();
    }
  }
  ModelConfig ed = hyper_model(HyperMix::Mhc, 2, Arch::EncDec);
  EXPECT_THROW(ed.validate(), Error);
  // each form's parameters, per sub-layer
  ModelConfig c = hyper_model(HyperMix::Mhc, 3);
  const ParamTable t = make_param_table(c);
  const ParamSpec* phi = t.find("h.1.mlp.hc.phi");
  ASSERT_NE(phi, nullptr);
  EXPECT_EQ(phi->shape, (std::vector<int64_t>{2 * 3 + 9, 3 * 8}));
  // hc adds to hc_static's alpha and beta the norm gain (C), alpha_fn (n+1, C), beta_fn (C) and two scales
  EXPECT_EQ(make_param_table(hyper_model(HyperMix::Hc, 3)).total - make_param_table(hyper_model(HyperMix::HcStatic, 3)).total,
            size_t(4 * (8 + 8 * 4 + 8 + 2)));
}

TEST(Hyper, SinkhornIsDoublyStochasticAndItsReverseMatchesFiniteDifferences) {
  const int n = 4;
  Rng rng(3);
  std::vector<double> X(n * n), M(n * n);
  for (double& x : X) x = 2.0 * rng.normal();
  sinkhorn_forward(X.data(), n, 20, M.data());
  for (int k = 0; k < n; k++) {
    double row = 0, col = 0;
    for (int m = 0; m < n; m++) {
      row += M[k * n + m];
      col += M[m * n + k];
      EXPECT_GT(M[k * n + m], 0.0);
    }
    EXPECT_NEAR(col, 1.0, 1e-5);  // the last step normalizes the columns
    EXPECT_NEAR(row, 1.0, 1e-2);  // (rows converge as the iterations go on)
  }
  // d <w, M(X)> / dX against central differences
  std::vector<double> w(n * n), dX(n * n);
  for (double& v : w) v = rng.normal();
  for (int iters : {1, 3, 20}) {
    sinkhorn_backward(X.data(), n, iters, w.data(), dX.data());
    for (int k = 0; k < n * n; k++) {
      auto f = [&](double h) {
        std::vector<double> Y = X, out(n * n);
        Y[k] += h;
        sinkhorn_forward(Y.data(), n, iters, out.data());
        double s = 0;
        for (int j = 0; j < n * n; j++) s += w[j] * out[j];
        return s;
      };
      const double fd = (f(1e-6) - f(-1e-6)) / 2e-6;
      EXPECT_NEAR(dX[k], fd, 1e-7 + 1e-6 * std::abs(fd)) << "iters " << iters << " entry " << k;
    }
  }
}

// At initialization every stream carries Pre-LN's x (they start equal and receive the same g), so the
// stack ends at n x; the final LayerNorm of n x is that of x when eps = 0: the logits are Pre-LN's.
TEST(Hyper, AtInitHyperConnectionsArePreLN) {
  ModelConfig pre = hyper_model(HyperMix::None, 1);
  pre.eps = 0;
  const Tokens tok = tokens_for(pre, 2, 6, 9);
  const std::vector<double> ref = logits_by_name(pre, pre, tok, 2, 6);
  for (HyperMix form : {HyperMix::HcStatic, HyperMix::Hc})
    for (int n : {1, 2, 4}) {
      ModelConfig c = hyper_model(form, n);
      c.eps = 0;
      EXPECT_LT(max_diff(logits_by_name(pre, c, tok, 2, 6), ref), 1e-12) << to_string(form) << " n = " << n;
    }
  // mhc and mhc_lite do not start as Pre-LN (P = 1/2 per stream, M near uniform): they must differ
  for (HyperMix form : {HyperMix::Mhc, HyperMix::MhcLite}) {
    ModelConfig m = hyper_model(form, 4);
    m.eps = 0;
    EXPECT_GT(max_diff(logits_by_name(pre, m, tok, 2, 6), ref), 1e-3) << to_string(form);
  }
}

TEST(Hyper, GradientsAgainstFiniteDifferences) {
  for (HyperMix form : {HyperMix::HcStatic, HyperMix::Hc, HyperMix::Mhc, HyperMix::MhcLite}) {
    SCOPED_TRACE(to_string(form));
    {
      SCOPED_TRACE("causal LayerNorm, 3 streams");
      check_model_gradients(hyper_model(form, 3));
    }
    {
      SCOPED_TRACE("Llama-like: RMSNorm, SwiGLU, RoPE, grouped queries, 2 streams, 3 Sinkhorn iterations");
      ModelConfig c = hyper_model(form, 2);
      c.norm = NormKind::RMSNorm;
      c.activation = Activation::SwiGlu;
      c.positions = Positions::Rope;
      c.n_heads = 4;
      c.n_kv_heads = 2;
      c.sinkhorn_iters = 3;
      check_model_gradients(c);
    }
    {
      SCOPED_TRACE("padded encoder, Peri-LN, 4 streams");
      ModelConfig c = hyper_model(form, 4, Arch::Encoder);
      c.placement = {Placement::Sandwich};
      check_model_gradients(c, /*padding=*/true);
    }
  }
}

// hyper_gains against the product of the learned matrices themselves: with hc_static the residual mix of
// slot l is its parameter alpha_l[:, 1:], so the composite is a product of parameters, multiplied out
// here by plain loops, its row and column sums and (by power iteration) its largest singular value.
// mhc's mixes are doubly stochastic to Sinkhorn's tolerance: every composite's gains stay near 1.
TEST(Hyper, GainsAgainstTheProductOfTheLearnedMatrices) {
  const int n = 3, B = 2, T = 5;
  ModelConfig c = hyper_model(HyperMix::HcStatic, n);
  Model<float> m(c);
  Rng rng(21);
  for (const ParamSpec& p : m.table().specs)
    if (p.name.ends_with(".hc.alpha"))
      for (size_t k = 0; k < p.numel; k++) m.params()[p.offset + k] += float(0.4 * rng.normal());
  const Tokens tok = tokens_for(c, B, T, 4);
  m.forward(tok.ids.data(), tok.labels.data(), B, T);
  std::vector<const float*> mixes;
  for (int i = 0; i < c.n_slots(); i++) mixes.push_back(m.acts(i).hmix);
  const HyperGains g = hyper_gains(n, mixes, long(B) * T);
  std::vector<double> comp(n * n, 0.0);
  for (int k = 0; k < n; k++) comp[k * n + k] = 1;
  for (int l = 0; l < c.n_slots(); l++) {
    const float* alpha = m.params().data() + m.table().find(slot_prefix(c, l) + ".hc.alpha")->offset;
    std::vector<double> next(n * n, 0.0);  // res[t][s] = alpha[s][1 + t];  next = res comp
    for (int t = 0; t < n; t++)
      for (int j = 0; j < n; j++)
        for (int s = 0; s < n; s++) next[t * n + j] += alpha[s * (n + 1) + 1 + t] * comp[s * n + j];
    comp = next;
    double fwd = 0, bwd = 0;
    for (int t = 0; t < n; t++) {
      double row = 0, col = 0;
      for (int s = 0; s < n; s++) {
        row += std::abs(comp[t * n + s]);
        col += std::abs(comp[s * n + t]);
      }
      fwd = std::max(fwd, row);
      bwd = std::max(bwd, col);
    }
    std::vector<double> v(n, 1.0);  // power iteration on comp^T comp
    double sigma = 0;
    for (int it = 0; it < 500; it++) {
      std::vector<double> u(n, 0.0), w(n, 0.0);
      for (int t = 0; t < n; t++)
        for (int s = 0; s < n; s++) u[t] += comp[t * n + s] * v[s];
      for (int s = 0; s < n; s++)
        for (int t = 0; t < n; t++) w[s] += comp[t * n + s] * u[t];
      double norm = 0, unorm = 0;
      for (int s = 0; s < n; s++) norm += w[s] * w[s];
      for (int t = 0; t < n; t++) unorm += u[t] * u[t];
      sigma = std::sqrt(unorm / [&] { double q = 0; for (double x : v) q += x * x; return q; }());
      for (int s = 0; s < n; s++) v[s] = w[s] / std::sqrt(norm);
    }
    EXPECT_NEAR(g.composite[size_t(l)].forward, fwd, 1e-5 * fwd) << "slot " << l;
    EXPECT_NEAR(g.composite[size_t(l)].backward, bwd, 1e-5 * bwd) << "slot " << l;
    EXPECT_NEAR(g.composite[size_t(l)].spectral, sigma, 1e-5 * sigma) << "slot " << l;
  }
  EXPECT_GT(g.composite.back().forward, 1.2);  // perturbed, unconstrained mixes: the gain moves off 1

  ModelConfig mc = hyper_model(HyperMix::Mhc, 4);
  mc.n_layers = 6;
  Model<float> mm(mc);
  for (const ParamSpec& p : mm.table().specs)  // large scales and biases: far from uniform mixes
    if (p.name.ends_with(".hc.scale") || p.name.ends_with(".hc.bias"))
      for (size_t k = 0; k < p.numel; k++) mm.params()[p.offset + k] = float(3.0 * rng.normal());
  mm.forward(tok.ids.data(), tok.labels.data(), B, T);
  std::vector<const float*> mmixes;
  for (int i = 0; i < mc.n_slots(); i++) mmixes.push_back(mm.acts(i).hmix);
  const HyperGains mg = hyper_gains(4, mmixes, long(B) * T);
  for (const HyperGain& x : mg.composite) {
    // Sinkhorn's last step normalizes M's columns, so every row of H^res = M^T sums to 1 (to its eps):
    // the forward gain of any product of them is 1. M's rows are 1 only to Sinkhorn's convergence (20
    // iterations from logits of spread 3): through 12 sub-layers the backward gain stays within 5%.
    EXPECT_NEAR(x.forward, 1.0, 1e-4);
    EXPECT_LT(x.backward, 1.05);
    EXPECT_LT(x.spectral, 1.05);
  }
  // mhc_lite's mixes are convex combinations of permutation matrices: doubly stochastic exactly, so
  // every composite keeps gains of 1 (to float rounding)
  ModelConfig lc = hyper_model(HyperMix::MhcLite, 3);
  lc.n_layers = 6;
  Model<float> lm(lc);
  for (const ParamSpec& p : lm.table().specs)
    if (p.name.ends_with(".hc.scale") || p.name.ends_with(".hc.bias"))
      for (size_t k = 0; k < p.numel; k++) lm.params()[p.offset + k] = float(3.0 * rng.normal());
  lm.forward(tok.ids.data(), tok.labels.data(), B, T);
  std::vector<const float*> lmixes;
  for (int i = 0; i < lc.n_slots(); i++) lmixes.push_back(lm.acts(i).hmix);
  for (const HyperGain& x : hyper_gains(3, lmixes, long(B) * T).composite) {
    EXPECT_NEAR(x.forward, 1.0, 1e-5);
    EXPECT_NEAR(x.backward, 1.0, 1e-5);
    EXPECT_NEAR(x.spectral, 1.0, 1e-5);
  }
}

TEST(Hyper, OneStreamReadersRefuseByName) {
  ModelConfig c = hyper_model(HyperMix::Hc, 2);
  Model<double> m(c);
  const Tokens tok = tokens_for(c, 1, 4, 1);
  m.forward(tok.ids.data(), tok.labels.data(), 1, 4);
  const size_t n = size_t(4) * c.d_model;
  std::vector<double> tin(n, 1.0), tout(n);
  auto names_hyper = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.hyper"), std::string::npos) << e.what();
    }
  };
  names_hyper([&] { m.jvp_sublayers(tout.data(), tin.data(), 1, 0, 2); });
  names_hyper([&] { m.jvp_stacks(tout.data(), nullptr, tin.data(), 1); });
  names_hyper([&] { m.set_ablation({false, true}); });
  names_hyper([&] { require_one_stream(c, "analyze dynamics"); });
  names_hyper([&] { IncrementalDecoder<double> d(m, 1, 4); });
  EXPECT_FALSE(m.block_jacobian_covers(0, 2));
}

}  // namespace normlab::test
