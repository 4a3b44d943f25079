// test_hyper.cpp: hyper-connections (model.hyper; model/hyper.h): the config rules, mhc's Sinkhorn-Knopp
// projection (doubly stochastic, its reverse and forward mode against finite differences), the forms at
// initialization (hc and hc_static equal Pre-LN: every stream carries the same x; one static stream
// is Pre-LN exactly), every gradient of hc, hc_static and mhc against central finite differences
// (causal LayerNorm, a Llama-like RMSNorm block with RoPE and grouped queries, a padded encoder), the
// forward-mode products on the n streams against finite differences and the reverse, and what reads
// one stream refusing by name. The PyTorch golden cases
// (tests/torch/golden_cases.py, "hyper") check the same models against a reference written from the
// authors' code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/dynamics.h"
#include "analysis/jacobian.h"
#include "analysis/sinks.h"
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

// Attention Residuals with blocks of `block` sub-layers (1: Full AttnRes): its streams follow from the depth.
ModelConfig attn_res_model(int block, Arch arch = Arch::Gpt) {
  ModelConfig c = hyper_model(HyperMix::AttnRes, 1, arch);
  c.attn_res_block = block;
  c.hyper_streams = c.attn_res_streams();
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

// Moves every hyper-connection parameter off its start (whose input-dependent parts are 0) by 0.3 N(0, 1).
void perturb_mixes(Model<double>& m, uint64_t seed) {
  Rng rng(seed);
  for (const ParamSpec& p : m.table().specs)
    if (p.name.find(".hc.") != std::string::npos)
      for (size_t j = 0; j < p.numel; j++) m.params()[p.offset + j] += 0.3 * rng.normal();
}

// The instruments' batch of B rows of T tokens.
Batch batch_of(const Tokens& tok, int B, int T) {
  Batch b;
  b.B = B;
  b.T = T;
  b.ids = tok.ids;
  b.labels = tok.labels;
  return b;
}

// On a 2-layer model after a forward of one row of T >= 3 tokens: the adjoint identity of the forward-mode
// product with the training reverse on per-stream tangents through slots 1..4, and block 1's token-local
// Jacobian at token 2 against the full-sequence product's diagonal block there.
void check_adjoint_and_token_local(Model<double>& m, int T, Rng& rng) {
  const int W = m.state_width(), last = 4;
  std::vector<double> u(size_t(T) * W), v(u.size()), ju(u.size()), jtv(u.size());
  for (double& x : u) x = rng.normal();
  for (double& x : v) x = rng.normal();
  m.jvp_sublayers(ju.data(), u.data(), 1, 1, last);
  m.vjp_sublayers(jtv.data(), v.data(), 1, last);
  double a = 0, b = 0;
  for (size_t k = 0; k < u.size(); k++) a += v[k] * ju[k], b += jtv[k] * u[k];
  EXPECT_NEAR(a, b, 1e-10 * std::max(1.0, std::abs(a))) << "adjoint";
  std::vector<double> eye(size_t(W) * W, 0.0), local(eye.size()), full(size_t(W) * T * W);
  std::vector<int64_t> unit(static_cast<size_t>(W));
  for (int k = 0; k < W; k++) eye[size_t(k) * W + size_t(k)] = 1.0, unit[size_t(k)] = 2 * W + k;
  m.jvp_block_token_local(local.data(), eye.data(), W, 1, 2);
  m.jvp_sublayers_unit(full.data(), unit.data(), W, 2, 4);
  double worst = 0;
  for (int k = 0; k < W; k++)
    for (int j = 0; j < W; j++) worst = std::max(worst, std::abs(local[size_t(k) * W + j] - full[size_t(k) * T * W + 2 * W + j]));
  EXPECT_LT(worst, 1e-12) << "token-local";
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
    // forward mode: two tangents at once, each against central differences along it
    const int K = 2;
    std::vector<double> tX(size_t(K) * n * n), tM(tX.size());
    for (double& v : tX) v = rng.normal();
    sinkhorn_jvp(X.data(), n, iters, K, tX.data(), tM.data());
    for (int k = 0; k < K; k++) {
      std::vector<double> plus(n * n), minus(n * n), Y(n * n);
      for (int j = 0; j < n * n; j++) Y[j] = X[j] + 1e-6 * tX[size_t(k) * n * n + j];
      sinkhorn_forward(Y.data(), n, iters, plus.data());
      for (int j = 0; j < n * n; j++) Y[j] = X[j] - 1e-6 * tX[size_t(k) * n * n + j];
      sinkhorn_forward(Y.data(), n, iters, minus.data());
      for (int j = 0; j < n * n; j++) {
        const double fd = (plus[j] - minus[j]) / 2e-6;
        EXPECT_NEAR(tM[size_t(k) * n * n + j], fd, 1e-8 + 1e-6 * std::abs(fd)) << "jvp iters " << iters << " entry " << j;
      }
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
  for (int block : {1, 2, 3}) {  // attn_res: Full AttnRes (5 streams), blocks of one layer, of 3 sub-layers
    SCOPED_TRACE(fmt::format("attn_res, blocks of {} sub-layers", block));
    ModelConfig c = attn_res_model(block);
    check_model_gradients(c);
    c.norm = NormKind::RMSNorm;
    c.activation = Activation::SwiGlu;
    c.positions = Positions::Rope;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    check_model_gradients(c);
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

// The forward-mode products on the n-stream state (K, T, n, C). Oracles: central differences of the
// forward (perturbing the learned positions moves x0, which every stream starts as; the streams leaving
// the stack sum to stream(last)), the training reverse (<v, J u> = <J^T v, u> with tangents that differ
// per stream), the full-sequence product at one token for the token-local block Jacobian, and
// differences of the final hidden state for jvp_stacks. Mixes perturbed off their Pre-LN start.
TEST(Hyper, ForwardModeAgainstFiniteDifferencesAndTheReverse) {
  for (HyperMix form : {HyperMix::HcStatic, HyperMix::Hc, HyperMix::Mhc, HyperMix::MhcLite})
  for (bool llama : {false, true}) {
    SCOPED_TRACE(fmt::format("{} {}", to_string(form), llama ? "RMSNorm, SwiGLU, grouped queries" : "LayerNorm"));
    const int n = 3, T = 4, B = 1;
    ModelConfig c = hyper_model(form, n);
    c.sinkhorn_iters = 4;
    if (llama) {
      c.norm = NormKind::RMSNorm;
      c.activation = Activation::SwiGlu;
      c.n_heads = 4;
      c.n_kv_heads = 2;
    }
    const int C = c.d_model, W = n * C, last = 2 * c.n_layers;
    Model<double> m(c);
    Rng rng(11);
    for (const ParamSpec& p : m.table().specs)
      if (p.name.find(".hc.") != std::string::npos || p.role == ParamRole::NormGain)
        for (size_t j = 0; j < p.numel; j++) m.params()[p.offset + j] += 0.3 * rng.normal();
    ASSERT_EQ(m.state_width(), W);
    const Tokens tok = tokens_for(c, B, T, 3);
    auto forward = [&] { m.forward(tok.ids.data(), tok.labels.data(), B, T); };
    forward();
    // J of the whole stack on x0's tangents copied into every stream, and of the stack with the final norm
    const int K = T * C;
    std::vector<double> tin(size_t(K) * T * W, 0.0), tout(tin.size()), t0(size_t(K) * K, 0.0), tf(t0.size());
    for (int k = 0; k < K; k++) {
      for (int s = 0; s < n; s++) tin[size_t(k) * T * W + size_t(k / C) * W + size_t(s) * C + size_t(k % C)] = 1.0;
      t0[size_t(k) * K + size_t(k)] = 1.0;
    }
    m.jvp_sublayers(tout.data(), tin.data(), K, 0, last);
    m.jvp_stacks(tf.data(), nullptr, t0.data(), K);
    const size_t wpe = m.table().find("wpe.weight")->offset;
    const double h = 1e-6;
    double worst = 0, scale = 0, worst_f = 0, scale_f = 0;
    for (int k = 0; k < K; k++) {
      double& w = m.params()[wpe + size_t(k)];
      const double saved = w;
      w = saved + h;
      forward();
      const std::vector<double> plus(m.stream(last), m.stream(last) + K), plus_f(m.final_hidden(), m.final_hidden() + K);
      w = saved - h;
      forward();
      w = saved;
      for (int j = 0; j < K; j++) {
        double sum = 0;  // the streams' sum at token j / C, channel j % C
        for (int s = 0; s < n; s++) sum += tout[size_t(k) * T * W + size_t(j / C) * W + size_t(s) * C + size_t(j % C)];
        const double fd = (plus[size_t(j)] - m.stream(last)[j]) / (2 * h);
        worst = std::max(worst, std::abs(fd - sum));
        scale = std::max(scale, std::abs(fd));
        const double fd_f = (plus_f[size_t(j)] - m.final_hidden()[j]) / (2 * h);
        worst_f = std::max(worst_f, std::abs(fd_f - tf[size_t(k) * K + size_t(j)]));
        scale_f = std::max(scale_f, std::abs(fd_f));
      }
    }
    EXPECT_LT(worst, 1e-6 * scale) << "jvp_sublayers";
    EXPECT_LT(worst_f, 1e-6 * scale_f) << "jvp_stacks";
    forward();
    check_adjoint_and_token_local(m, T, rng);
  }
}

// attn_res in forward mode: the stack from x0 (into stream 0 alone) through every read, write and the
// final read against finite differences of the final hidden state, the adjoint identity with the training
// reverse on per-stream tangents, and a block's token-local Jacobian against the full-sequence product.
TEST(Hyper, AttnResForwardModeAgainstFiniteDifferencesAndTheReverse) {
  for (int block : {1, 2}) {
    SCOPED_TRACE(fmt::format("attn_res, blocks of {} sub-layers", block));
    ModelConfig c = attn_res_model(block);
    c.norm = NormKind::RMSNorm;
    c.activation = Activation::SwiGlu;
    const int T = 4, B = 1, C = c.d_model, n = c.hyper_streams, W = n * C;
    Model<double> m(c);
    perturb_mixes(m, 12);
    ASSERT_EQ(m.state_width(), W);
    const Tokens tok = tokens_for(c, B, T, 3);
    auto forward = [&] { m.forward(tok.ids.data(), tok.labels.data(), B, T); };
    forward();
    const int K = T * C;
    std::vector<double> t0(size_t(K) * K, 0.0), tf(t0.size());
    for (int k = 0; k < K; k++) t0[size_t(k) * K + size_t(k)] = 1.0;
    m.jvp_stacks(tf.data(), nullptr, t0.data(), K);
    const size_t wpe = m.table().find("wpe.weight")->offset;
    const double h = 1e-6;
    double worst = 0, scale = 0;
    for (int k = 0; k < K; k++) {
      double& w = m.params()[wpe + size_t(k)];
      const double saved = w;
      w = saved + h;
      forward();
      const std::vector<double> plus(m.final_hidden(), m.final_hidden() + K);
      w = saved - h;
      forward();
      w = saved;
      for (int j = 0; j < K; j++) {
        const double fd = (plus[size_t(j)] - m.final_hidden()[j]) / (2 * h);
        worst = std::max(worst, std::abs(fd - tf[size_t(k) * K + size_t(j)]));
        scale = std::max(scale, std::abs(fd));
      }
    }
    EXPECT_LT(worst, 1e-6 * scale) << "jvp_stacks";
    forward();
    Rng rng(4);
    check_adjoint_and_token_local(m, T, rng);
  }
}

// analyze jacobian on an hc model: its blocks and end to end map a token's n streams (n d values), and
// the matrix-free extremes of the end-to-end Jacobian agree with the dense SVD of the one the
// forward-mode products build (those are checked above).
TEST(Hyper, TheJacobianInstrumentReadsTheStreams) {
  const int n = 2, T = 4;
  ModelConfig c = hyper_model(HyperMix::Hc, n);
  Model<double> m(c);
  perturb_mixes(m, 2);
  const Tokens tok = tokens_for(c, 1, T, 4);
  m.forward(tok.ids.data(), tok.labels.data(), 1, T);
  analysis::JacobianOptions opts;
  opts.lanczos_k = 3;
  const analysis::JacobianReport r = analysis::analyze_jacobian(m, opts);
  EXPECT_EQ(r.state, n * c.d_model);
  EXPECT_EQ(r.streams, n);
  ASSERT_EQ(r.blocks.size(), 2u);
  EXPECT_EQ(r.blocks[0].local.sv.size(), size_t(n * c.d_model));
  ASSERT_TRUE(r.end_to_end.full);
  EXPECT_EQ(r.end_to_end.full->sv.size(), size_t(T * n * c.d_model));
  ASSERT_TRUE(r.end_to_end.lanczos_vs_dense);
  EXPECT_LT(*r.end_to_end.lanczos_vs_dense, 1e-9);
  EXPECT_EQ(r.norms.size(), 5u);  // ln_in of the four sub-layers and ln_f, each d x d
  EXPECT_EQ(r.norms[0].spectrum.sv.size(), size_t(c.d_model));
}

// analyze dynamics on an hc_static model against the streams recomputed by hand: every stream starts as
// x0 (stream(0)), and slot i maps them to H'_t = sum_s alpha_i[s, 1 + t] H_s + beta_i[t] g_i, g_i the
// branch output the forward kept; each stream's RMS entering a layer, and the composite mix's gains
// (the product of the alpha matrices multiplied out by loops), against the instrument's.
TEST(Hyper, DynamicsReadsEachStreamAgainstAHandRecomputation) {
  const int n = 3, B = 2, T = 5;
  ModelConfig c = hyper_model(HyperMix::HcStatic, n);
  const int C = c.d_model, n1 = n + 1, L = c.n_layers;
  Model<double> m(c);
  perturb_mixes(m, 6);
  const Tokens tok = tokens_for(c, B, T, 8);
  const Batch batch = batch_of(tok, B, T);
  const analysis::DynamicsReport r = analysis::analyze_dynamics(m, {batch});  // (its last forward is this batch's)
  const long N = long(B) * T;
  std::vector<double> H(size_t(N) * n * C), next(H.size());
  for (long k = 0; k < N; k++)
    for (int t = 0; t < n; t++) std::copy_n(m.stream(0) + k * C, C, H.begin() + (k * n + t) * C);
  std::vector<double> comp(size_t(n) * n, 0.0);  // composite H^res (t, s), starting at the identity
  for (int t = 0; t < n; t++) comp[size_t(t) * n + t] = 1.0;
  for (int i = 0; i < 2 * L; i++) {
    const int l = i / 2;
    if (i % 2 == 0) {  // the layer's streams entering
      ASSERT_EQ(r.layers[size_t(l)].streams_rms.size(), size_t(n));
      for (int t = 0; t < n; t++) {
        double rms = 0;
        for (long k = 0; k < N; k++) {
          double sq = 0;
          for (int ch = 0; ch < C; ch++) sq += H[(k * n + t) * C + ch] * H[(k * n + t) * C + ch];
          rms += std::sqrt(sq / C) / double(N);
        }
        EXPECT_NEAR(r.layers[size_t(l)].streams_rms[size_t(t)], rms, 1e-12 * rms) << "layer " << l << " stream " << t;
      }
    }
    const double* alpha = m.params().data() + m.table().find(slot_prefix(c, i) + ".hc.alpha")->offset;
    const double* beta = m.params().data() + m.table().find(slot_prefix(c, i) + ".hc.beta")->offset;
    const double* g = m.acts(i).g;
    for (long k = 0; k < N; k++)
      for (int t = 0; t < n; t++)
        for (int ch = 0; ch < C; ch++) {
          double v = beta[t] * g[k * C + ch];
          for (int s2 = 0; s2 < n; s2++) v += alpha[s2 * n1 + 1 + t] * H[(k * n + s2) * C + ch];
          next[(k * n + t) * C + ch] = v;
        }
    H.swap(next);
    std::vector<double> prod(size_t(n) * n, 0.0);  // H^res_i comp, H^res[t, s] = alpha[s, 1 + t]
    for (int t = 0; t < n; t++)
      for (int s2 = 0; s2 < n; s2++)
        for (int k = 0; k < n; k++) prod[size_t(t) * n + s2] += alpha[k * n1 + 1 + t] * comp[size_t(k) * n + s2];
    comp = prod;
    if (i % 2 == 1) {  // through the layer: the largest absolute row sum and column sum
      double fwd = 0, bwd = 0;
      for (int a = 0; a < n; a++) {
        double row = 0, col = 0;
        for (int b = 0; b < n; b++) row += std::abs(comp[size_t(a) * n + b]), col += std::abs(comp[size_t(b) * n + a]);
        fwd = std::max(fwd, row), bwd = std::max(bwd, col);
      }
      EXPECT_NEAR(r.layers[size_t(l)].composite_forward, fwd, 1e-12 * fwd) << "layer " << l;
      EXPECT_NEAR(r.layers[size_t(l)].composite_backward, bwd, 1e-12 * bwd) << "layer " << l;
    }
  }
  // the recomputed streams sum to the model's last stream (what the final norm reads)
  for (long k = 0; k < N; k++)
    for (int ch = 0; ch < C; ch++) {
      double sum = 0;
      for (int t = 0; t < n; t++) sum += H[(k * n + t) * C + ch];
      EXPECT_NEAR(m.stream(2 * L)[k * C + ch], sum, 1e-12 * (1 + std::abs(sum)));
    }
  ASSERT_EQ(r.rank_collapse.size(), 4u);  // the model's own setting and the three ablations (the next test)
  for (const auto& v : r.rank_collapse)
    for (double x : v.residual_rank) EXPECT_TRUE(std::isfinite(x));
}

// The rank-collapse ablations of a hyper-connected model (Model::set_ablation) against the same model with
// its learned mixes edited by hand: skips off is hc_static with every residual mix M = 0, MLP off the one
// whose MLP sub-layers have M = I and b = 0 (their streams pass unchanged); bit for bit, since 0 * h and
// 1 * h + 0 * h' are exact. Every other form runs them with finite readings, and Ablation{} gives the
// model's own logits back.
TEST(Hyper, AblationsAreTheMixesEditedByHand) {
  const int n = 3, B = 2, T = 5;
  const ModelConfig c = hyper_model(HyperMix::HcStatic, n);
  const int n1 = n + 1;
  Model<double> m(c);
  perturb_mixes(m, 11);
  const Tokens tok = tokens_for(c, B, T, 12);
  const size_t V = size_t(B) * T * c.vocab_size();
  auto logits_of = [&](Model<double>& model) {
    model.forward(tok.ids.data(), tok.labels.data(), B, T);
    return std::vector<double>(model.logits(), model.logits() + V);
  };
  const std::vector<double> own = logits_of(m);
  for (const bool skips : {true, false})
    for (const bool mlp : {true, false}) {
      if (skips && mlp) continue;
      Model<double> edited(c);
      edited.params() = m.params();
      for (int i = 0; i < 2 * c.n_layers; i++) {
        double* alpha = edited.params().data() + edited.table().find(slot_prefix(c, i) + ".hc.alpha")->offset;
        double* beta = edited.params().data() + edited.table().find(slot_prefix(c, i) + ".hc.beta")->offset;
        const bool removed = !mlp && i % 2 == 1;  // (slot 2l + 1: layer l's MLP)
        for (int s2 = 0; s2 < n; s2++)
          for (int t = 0; t < n; t++) alpha[s2 * n1 + 1 + t] = removed ? double(s2 == t) : skips ? alpha[s2 * n1 + 1 + t] : 0.0;
        if (removed) std::fill_n(beta, n, 0.0);
      }
      m.set_ablation({skips, mlp});
      const std::vector<double> ablated = logits_of(m);
      m.set_ablation({});
      EXPECT_EQ(max_diff(ablated, logits_of(edited)), 0.0) << "skips " << skips << " mlp " << mlp;
      EXPECT_GT(max_diff(ablated, own), 1e-6) << "skips " << skips << " mlp " << mlp << ": the ablation changed nothing";
    }
  EXPECT_EQ(max_diff(logits_of(m), own), 0.0);
  for (const HyperMix form : {HyperMix::Hc, HyperMix::Mhc, HyperMix::MhcLite, HyperMix::AttnRes}) {
    const ModelConfig f = form == HyperMix::AttnRes ? attn_res_model(2) : hyper_model(form, form == HyperMix::MhcLite ? 3 : 2);
    Model<double> model(f);
    perturb_mixes(model, 13);
    const Tokens ft = tokens_for(f, B, T, 14);
    const analysis::DynamicsReport r = analysis::analyze_dynamics(model, {batch_of(ft, B, T)});
    ASSERT_EQ(r.rank_collapse.size(), 4u) << to_string(form);
    for (const auto& v : r.rank_collapse)
      for (double x : v.residual_rank) EXPECT_TRUE(std::isfinite(x)) << to_string(form);
    EXPECT_NE(r.rank_collapse[1].residual_rank.back(), r.rank_collapse[0].residual_rank.back()) << to_string(form);
  }
}

// attn_res's depth weights in analyze dynamics against Kimi K3's layer recomputed by hand from the
// embedding output and each sub-layer's output g: a bank of finished blocks and the block's prefix sum,
// each read a softmax over [bank, prefix] of w . RMSNorm_gamma(row); and the final read against the
// model's last stream (what the final norm reads).
TEST(Hyper, AttnResDepthWeightsAgainstKimisLayerByHand) {
  for (int block : {1, 3}) {
    SCOPED_TRACE(fmt::format("blocks of {} sub-layers", block));
    const int B = 2, T = 5;
    const ModelConfig c = attn_res_model(block);
    const int C = c.d_model, L = c.n_layers, n = c.hyper_streams;
    Model<double> m(c);
    perturb_mixes(m, 7);
    const Tokens tok = tokens_for(c, B, T, 9);
    const analysis::DynamicsReport r = analysis::analyze_dynamics(m, {batch_of(tok, B, T)});
    const long N = long(B) * T;
    auto param = [&](const std::string& name) { return m.params().data() + m.table().find(name)->offset; };
    // softmax over rows of w . RMSNorm_gamma(row) at token k: the weights, and the weighted sum into out
    auto aggregate = [&](const std::vector<std::vector<double>>& rows, long k, const std::string& prefix,
                         std::vector<double>& p, double* out) {
      const double* gamma = param(prefix + ".hc.norm.weight");
      const double* w = param(prefix + ".hc.query");
      p.assign(rows.size(), 0.0);
      double mx = -1e300, z = 0;
      for (size_t s = 0; s < rows.size(); s++) {
        const double* x = rows[s].data() + k * C;
        double ms = 0, dot = 0;
        for (int ch = 0; ch < C; ch++) ms += x[ch] * x[ch] / C;
        for (int ch = 0; ch < C; ch++) dot += x[ch] / std::sqrt(ms + c.eps) * gamma[ch] * w[ch];
        mx = std::max(mx, p[s] = dot);
      }
      for (double& v : p) z += (v = std::exp(v - mx));
      for (double& v : p) v /= z;
      if (out)
        for (int ch = 0; ch < C; ch++) {
          out[ch] = 0;
          for (size_t s = 0; s < rows.size(); s++) out[ch] += p[s] * rows[s][size_t(k * C + ch)];
        }
    };
    std::vector<std::vector<double>> bank;
    std::vector<double> prefix(m.stream(0), m.stream(0) + N * C), p;
    for (int i = 0; i < 2 * L; i++) {
      std::vector<std::vector<double>> rows = bank;
      rows.push_back(prefix);
      std::vector<double> mean(size_t(n), 0.0);
      for (long k = 0; k < N; k++) {
        aggregate(rows, k, slot_prefix(c, i), p, nullptr);
        for (size_t s = 0; s < p.size(); s++) mean[s] += p[s] / double(N);
      }
      const analysis::LayerDynamics& d = r.layers[size_t(i / 2)];
      const std::vector<double>& got = i % 2 == 0 ? d.depth_weights_attn : d.depth_weights_mlp;
      ASSERT_EQ(got.size(), size_t(n));
      for (int s = 0; s < n; s++) EXPECT_NEAR(got[size_t(s)], mean[size_t(s)], 1e-12) << "slot " << i << " source " << s;
      const double* g = m.acts(i).g;
      if (i % block == 0) {
        bank.push_back(prefix);
        prefix.assign(g, g + N * C);
      } else {
        for (long k = 0; k < N * C; k++) prefix[size_t(k)] += g[k];
      }
    }
    bank.push_back(prefix);
    std::vector<double> out(static_cast<size_t>(C)), mean(bank.size(), 0.0);
    for (long k = 0; k < N; k++) {
      aggregate(bank, k, "out", p, out.data());
      for (size_t s = 0; s < p.size(); s++) mean[s] += p[s] / double(N);
      for (int ch = 0; ch < C; ch++)
        EXPECT_NEAR(m.stream(2 * L)[k * C + ch], out[size_t(ch)], 1e-12 * (1 + std::abs(out[size_t(ch)])));
    }
    ASSERT_EQ(r.final_depth_weights.size(), mean.size());
    for (size_t s = 0; s < mean.size(); s++) EXPECT_NEAR(r.final_depth_weights[s], mean[s], 1e-12) << "final read, source " << s;
  }
}

// analyze sinks on an mhc model, one window: the gradient at the stream point entering layer 0 is
// d(loss)/d(x0) (a shift of every stream), against central differences of the loss in the learned
// position of each token; an input norm's largest ||x_t|| is that of the mix the sub-layer read.
TEST(Hyper, SinksReadTheStreamsGradientAndTheNormsOwnInput) {
  const int T = 5;
  ModelConfig c = hyper_model(HyperMix::Mhc, 3);
  const int C = c.d_model;
  Model<double> m(c);
  perturb_mixes(m, 9);
  const Tokens tok = tokens_for(c, 1, T, 5);
  const Batch batch = batch_of(tok, 1, T);
  const analysis::SinksReport r = analysis::analyze_sinks(m, {batch});
  EXPECT_EQ(r.hyper_streams, 3);
  ASSERT_FALSE(r.gradients.empty());
  // the next-token loss the instrument differentiates
  std::vector<int32_t> labels(size_t(T), ops::kIgnoreLabel);
  for (int t = 0; t + 1 < T; t++) labels[size_t(t)] = tok.ids[size_t(t) + 1];
  const size_t wpe = m.table().find("wpe.weight")->offset;
  std::vector<double> norms(static_cast<size_t>(T));
  for (int t = 0; t < T; t++) {
    double sq = 0;
    for (int ch = 0; ch < C; ch++) {
      double& w = m.params()[wpe + size_t(t) * C + size_t(ch)];
      const double saved = w;
      w = saved + 1e-6;
      const double plus = m.forward(tok.ids.data(), labels.data(), 1, T);
      w = saved - 1e-6;
      const double minus = m.forward(tok.ids.data(), labels.data(), 1, T);
      w = saved;
      sq += std::pow((plus - minus) / 2e-6, 2);
    }
    norms[size_t(t)] = std::sqrt(sq);
  }
  EXPECT_NEAR(r.gradients[0].first, norms[0], 1e-6 * norms[0]);
  const int top = int(std::max_element(norms.begin(), norms.end()) - norms.begin());
  EXPECT_EQ(r.gradients[0].top_token, top);
  EXPECT_NEAR(r.gradients[0].top, norms[size_t(top)], 1e-6 * norms[size_t(top)]);
  // the input norms' readings are of what each reads
  m.forward(tok.ids.data(), labels.data(), 1, T);
  ASSERT_GE(r.norm_gains.size(), 2u);
  for (const analysis::NormGain& g : r.norm_gains) {
    if (g.site == "ln_f") continue;
    const double* u = m.acts(2 * g.layer).x_in;
    double largest = 0;
    for (int t = 0; t < T; t++) {
      double sq = 0;
      for (int ch = 0; ch < C; ch++) sq += u[size_t(t) * C + ch] * u[size_t(t) * C + ch];
      largest = std::max(largest, std::sqrt(sq));
    }
    EXPECT_NEAR(g.norm_max, largest, 1e-12 * largest) << g.site;
  }
}

TEST(Hyper, OneStreamReadersRefuseByName) {
  ModelConfig c = hyper_model(HyperMix::Hc, 2);
  Model<double> m(c);
  const Tokens tok = tokens_for(c, 1, 4, 1);
  m.forward(tok.ids.data(), tok.labels.data(), 1, 4);
  auto names_hyper = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.hyper"), std::string::npos) << e.what();
    }
  };
  names_hyper([&] { require_one_stream(c, "a one-stream reader"); });
  EXPECT_FALSE(m.block_jacobian_covers(0, 2));
}

}  // namespace normlab::test
