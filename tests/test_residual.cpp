// test_residual.cpp: ResiDual (model.placement = "residual", two streams per stack) against
// independent checks: whole-model gradients vs central finite differences in double precision (gpt,
// encoder, encdec; LayerNorm and RMSNorm; odd sizes; padding; attention-only; BERT pieces; an
// encdec whose encoder is ResiDual and whose decoder is not, and the reverse); forward mode through
// the stacks (jvp_stacks) vs finite differences and the adjoint identity with vjp_stacks (for
// one-stream methods too); the stack output recomputed from the saved activations with a layernorm
// written here (the x-transformers#145 regression: LN_final once at the end of the stack, never per
// layer); config refusals (mixing in one stack, residual = false) and the refusals of one-stream
// products.
#include <gtest/gtest.h>

#include <cmath>

#include "check.h"
#include "model/methods.h"
#include "model/model.h"
#include "ops/common.h"
#include "util/error.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::test;

namespace {

constexpr Placement kRes = Placement::ResiDual;

// Odd sizes: C = 9 with 3 heads of 3, F = 13; 2 layers (encdec: 2 encoder, 3 decoder).
ModelConfig residual_config(Arch arch, NormKind norm = NormKind::LayerNorm) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 9;
  c.n_heads = 3;
  c.n_layers = 2;
  if (arch == Arch::EncDec) c.dec_layers = 3;
  c.d_ff = 13;
  c.vocab = arch == Arch::Encoder ? 259 : 17;
  c.seq_len = 7;
  c.norm = norm;
  c.placement = {kRes};
  c.init_std = 0.3;  // large enough that every path carries signal
  return c;
}

// A batch with right padding: row b keeps T - b target (or only) tokens and S - b source tokens.
struct ResBatch {
  int B = 2, T = 6, S = 5;
  std::vector<int32_t> ids, labels, src;
  std::vector<uint8_t> mask, src_mask;
};

ResBatch residual_batch(const ModelConfig& c, uint64_t seed, int B = 2) {
  ResBatch x;
  x.B = B;
  Rng rng(seed);
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < x.T; t++) {
      x.ids.push_back(int32_t(rng.below(std::min(c.vocab_size(), 256))));
      x.mask.push_back(t < x.T - b);
      x.labels.push_back(t < x.T - b && t != 2 ? int32_t(rng.below(c.vocab_size()))
                                               : ops::kIgnoreLabel);
    }
    for (int s = 0; s < x.S; s++) {
      x.src.push_back(int32_t(rng.below(c.src_vocab_size())));
      x.src_mask.push_back(s < x.S - b);
    }
  }
  return x;
}

double run_forward(Model<double>& m, const ResBatch& x, bool pad) {
  const Source src =
      m.config().encdec() ? Source{x.src.data(), x.S, pad ? x.src_mask.data() : nullptr} : Source{};
  return m.forward(x.ids.data(), x.labels.data(), x.B, x.T, nullptr, pad ? x.mask.data() : nullptr,
                   src);
}

// Every norm gain and bias (ln_f included) moved off its init so that a forgotten one shows.
void perturb_norms(Model<double>& m, uint64_t seed) {
  Rng rng(seed);
  for (const ParamSpec& p : m.table().specs) {
    if (p.role == ParamRole::LinearWeight || p.role == ParamRole::Embedding) continue;
    for (size_t i = 0; i < p.numel; i++) m.params()[p.offset + i] += 0.2 * rng.normal();
  }
}

// training = true: dropout on (its masks depend only on the step seed and the site, so every
// finite-difference forward drops the same entries; x_d adds the dropped branch output)
void check_residual_gradients(const ModelConfig& cfg, bool pad = true, bool training = false) {
  Model<double> model(cfg);
  model.set_training(training, 42);
  perturb_norms(model, 5);
  const ResBatch x = residual_batch(cfg, 7);
  run_forward(model, x, pad);
  model.zero_grad();
  model.backward();
  const std::vector<double> analytic = model.grads();
  const std::vector<double> numeric = finite_diff(
      model.params(), [&] { return run_forward(model, x, pad); }, 1e-6);
  for (const ParamSpec& p : model.table().specs) {
    std::vector<double> a(analytic.begin() + p.offset, analytic.begin() + p.offset + p.numel);
    std::vector<double> n(numeric.begin() + p.offset, numeric.begin() + p.offset + p.numel);
    expect_close(p.name, a, n, 1e-5, 1e-7);
  }
}

// Population layernorm of one row, written here independently of ops/layernorm (gamma, beta).
std::vector<double> layernorm_row(const double* z, const double* gamma, const double* beta, int C,
                                  double eps) {
  double mean = 0, var = 0;
  for (int c = 0; c < C; c++) mean += z[c] / C;
  for (int c = 0; c < C; c++) var += (z[c] - mean) * (z[c] - mean) / C;
  std::vector<double> out(static_cast<size_t>(C));
  for (int c = 0; c < C; c++)
    out[size_t(c)] = (z[c] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c];
  return out;
}

const double* param(const Model<double>& m, const std::string& name) {
  const ParamSpec* p = m.table().find(name);
  if (!p) throw Error("test: no parameter " + name);
  return m.params().data() + p->offset;
}

}  // namespace

class ResidualGradients : public testing::TestWithParam<std::tuple<Arch, NormKind>> {};

TEST_P(ResidualGradients, MatchFiniteDifferencesWithPadding) {
  auto [arch, norm] = GetParam();
  check_residual_gradients(residual_config(arch, norm));
}

INSTANTIATE_TEST_SUITE_P(ArchAndNorm, ResidualGradients,
                         testing::Combine(testing::Values(Arch::Gpt, Arch::Encoder, Arch::EncDec),
                                          testing::Values(NormKind::LayerNorm, NormKind::RMSNorm)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

TEST(ResidualGradientsMore, AttentionOnlyBertPiecesAndOneResiDualStackOfTwo) {
  ModelConfig attn_only = residual_config(Arch::Gpt);
  attn_only.mlp = false;
  attn_only.activation = Activation::Relu;
  check_residual_gradients(attn_only, false);
  // BERT's embedding norm and masked-LM head around a ResiDual encoder: x_d starts after ln_emb
  ModelConfig bert = residual_config(Arch::Encoder);
  bert.embed_norm = true;
  bert.head = Head::Mlm;
  bert.type_vocab = 2;
  check_residual_gradients(bert);
  // each stack of an encdec has its own streams: a ResiDual encoder under a pre-LN decoder, and a
  // post-LN encoder under a ResiDual decoder (separate embeddings)
  ModelConfig enc_only = residual_config(Arch::EncDec);
  enc_only.placement = {kRes, kRes, Placement::Pre, Placement::Pre, Placement::Pre};
  check_residual_gradients(enc_only);
  ModelConfig dec_only = residual_config(Arch::EncDec, NormKind::RMSNorm);
  dec_only.placement = {Placement::Post, Placement::Post, kRes, kRes, kRes};
  dec_only.shared_embeddings = false;
  dec_only.src_vocab = 5;
  check_residual_gradients(dec_only);
  // dropout on the embeddings and every branch, in every stack
  for (Arch arch : {Arch::Gpt, Arch::EncDec}) {
    ModelConfig drop = residual_config(arch);
    drop.dropout = 0.25;
    check_residual_gradients(drop, true, true);
  }
}

// Forward mode through the stacks against central differences, and the adjoint identity
// <u, J v> = <J^T u, v> with vjp_stacks. With B = 1 the stack input at (t, c) moves exactly with
// wpe[t, c] (and the source's with enc.wpe), so perturbing those rows moves the inputs.
TEST(ResidualJacobian, ForwardModeMatchesFiniteDifferencesAndTheAdjoint) {
  struct Case {
    Arch arch;
    NormKind norm;
    std::vector<Placement> placement;
  };
  const std::vector<Case> cases = {
      {Arch::Gpt, NormKind::LayerNorm, {kRes}},
      {Arch::Encoder, NormKind::RMSNorm, {kRes}},
      {Arch::EncDec, NormKind::LayerNorm, {kRes}},
      {Arch::EncDec,
       NormKind::RMSNorm,
       {kRes, kRes, Placement::Post, Placement::Admin, Placement::Pre}},
      {Arch::Gpt,
       NormKind::LayerNorm,
       {Placement::Pre}},  // one-stream stacks through the same path
      {Arch::EncDec, NormKind::LayerNorm, {Placement::Sandwich, Placement::Post, kRes, kRes, kRes}},
  };
  for (const Case& k : cases) {
    ModelConfig c = residual_config(k.arch, k.norm);
    c.placement = k.placement;
    SCOPED_TRACE(std::string(to_string(k.arch)) + " " + to_string(c.placement_of(0)) + " / " +
                 to_string(c.placement_of(c.total_layers() - 1)));
    Model<double> model(c);
    perturb_norms(model, 11);
    const ResBatch x = residual_batch(c, 13, 1);
    const bool ed = c.encdec();
    run_forward(model, x, true);
    const int S = x.S, T = x.T, C = c.d_model, K = 2;
    const std::vector<double> vs = randn(size_t(K) * S * C, 1), vt = randn(size_t(K) * T * C, 2);
    std::vector<double> jv(size_t(K) * T * C);
    model.jvp_stacks(jv.data(), ed ? vs.data() : nullptr, vt.data(), K);
    const ParamSpec* enc_wpe = model.table().find("enc.wpe.weight");
    const ParamSpec* wpe = model.table().find("wpe.weight");
    for (int kk = 0; kk < K; kk++) {
      auto output_at = [&](double eps) {
        std::vector<double>& p = model.params();
        auto move = [&](double e) {
          if (ed)
            for (size_t i = 0; i < size_t(S) * C; i++)
              p[enc_wpe->offset + i] += e * vs[size_t(kk) * S * C + i];
          for (size_t i = 0; i < size_t(T) * C; i++)
            p[wpe->offset + i] += e * vt[size_t(kk) * T * C + i];
        };
        move(eps);
        run_forward(model, x, true);
        std::vector<double> out(model.final_hidden(), model.final_hidden() + size_t(T) * C);
        move(-eps);
        return out;
      };
      const double h = 1e-6;
      const std::vector<double> plus = output_at(h), minus = output_at(-h);
      std::vector<double> fd(size_t(T) * C),
          got(jv.begin() + long(kk) * T * C, jv.begin() + long(kk + 1) * T * C);
      for (size_t i = 0; i < fd.size(); i++) fd[i] = (plus[i] - minus[i]) / (2 * h);
      expect_close("jvp_stacks tangent " + std::to_string(kk), got, fd, 1e-6, 1e-8);
    }
    run_forward(model, x, true);
    const std::vector<double> u = randn(size_t(T) * C, 3);
    std::vector<double> js(size_t(S) * C), jt(size_t(T) * C);
    model.vjp_stacks(ed ? js.data() : nullptr, jt.data(), u.data());
    const std::vector<double> v0s(vs.begin(), vs.begin() + long(S) * C),
        v0t(vt.begin(), vt.begin() + long(T) * C);
    const std::vector<double> jv0(jv.begin(), jv.begin() + long(T) * C);
    const double lhs = dot(u, jv0), rhs = (ed ? dot(js, v0s) : 0.0) + dot(jt, v0t);
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
  }
}

// x-transformers#145: a version of x-transformers added LN(x_d) into the stream inside the layer
// loop (after every layer) instead of once after it. Here every sub-layer's output is recomputed
// from its saved input and branch output as LN(x + f) -- nothing else enters x, so a per-layer
// LN_f(x_d) term (of size ~1, checked) would show -- and the stack's output as x_L + LN_f(x_0 + sum
// f), with a layernorm written in this test. The parameter table has one ln_out per sub-layer and
// one ln_f.
TEST(ResiDual, FinalNormOnceAtTheEndNotPerLayer) {
  ModelConfig c = residual_config(Arch::Gpt);
  c.n_layers = 3;
  Model<double> model(c);
  perturb_norms(model, 17);
  const ResBatch x = residual_batch(c, 19, 1);
  run_forward(model, x, false);
  const int T = x.T, C = c.d_model, n_slots = c.n_slots();
  int norms = 0;
  for (const ParamSpec& p : model.table().specs) norms += p.role == ParamRole::NormGain;
  EXPECT_EQ(norms, n_slots + 1);
  EXPECT_NE(model.table().find("ln_f.weight"), nullptr);
  const double* gf = param(model, "ln_f.weight");
  const double* bf = param(model, "ln_f.bias");
  double worst = 0, smallest_dual_term = 1e300;
  std::vector<double> xd(model.stream(0), model.stream(0) + size_t(T) * C);  // x_d = x_0
  for (int i = 0; i < n_slots; i++) {
    const SublayerActs<double>& a = model.acts(i);
    const double* g = param(model, slot_prefix(c, i) + ".ln_out.weight");
    const double* b = param(model, slot_prefix(c, i) + ".ln_out.bias");
    for (int t = 0; t < T; t++) {
      std::vector<double> r(static_cast<size_t>(C));
      for (int k = 0; k < C; k++) r[size_t(k)] = a.x_in[t * C + k] + a.f[t * C + k];
      const std::vector<double> want = layernorm_row(r.data(), g, b, C, c.eps);
      for (int k = 0; k < C; k++)
        worst = std::max(worst, std::abs(a.x_out[t * C + k] - want[size_t(k)]));
      for (int k = 0; k < C; k++) xd[size_t(t * C + k)] += a.f[t * C + k];
      // the term #145 would have added here: LN_f(x_d) of this point of the stack
      const std::vector<double> term = layernorm_row(xd.data() + t * C, gf, bf, C, c.eps);
      double size = 0;
      for (double v : term) size = std::max(size, std::abs(v));
      smallest_dual_term = std::min(smallest_dual_term, size);
    }
  }
  EXPECT_LT(worst, 1e-12)
      << "a sub-layer's x is not LN(x + F(x)): something else entered the stream";
  EXPECT_GT(smallest_dual_term, 0.1) << "LN_f(x_d) too small for the check above to see it";
  double worst_end = 0;
  for (int t = 0; t < T; t++) {
    const std::vector<double> n = layernorm_row(xd.data() + t * C, gf, bf, C, c.eps);
    for (int k = 0; k < C; k++)
      worst_end = std::max(worst_end, std::abs(model.final_hidden()[t * C + k] -
                                               (model.stream(n_slots)[t * C + k] + n[size_t(k)])));
  }
  EXPECT_LT(worst_end, 1e-12) << "the output is not x_L + LN_f(x_0 + sum F)";
  ASSERT_NE(model.dual_stream(), nullptr);
  std::vector<double> kept(model.dual_stream(), model.dual_stream() + xd.size());
  expect_close("x_d at the end of the stack", kept, xd, 1e-13, 1e-13);
}

TEST(ResiDual, ConfigRefusesMixingInOneStackAndNoResidual) {
  ModelConfig mixed = residual_config(Arch::Gpt);
  mixed.placement = {kRes, Placement::Pre};
  try {
    mixed.validate();
    FAIL() << "accepted residual mixed with pre in one stack";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot be mixed"), std::string::npos) << m;
    EXPECT_NE(m.find("[residual, pre]"), std::string::npos) << m;
  }
  ModelConfig dec = residual_config(Arch::EncDec);
  dec.placement = {kRes, kRes, kRes, Placement::Post, kRes};
  EXPECT_THROW(dec.validate(), Error);
  dec.placement = {kRes, kRes, Placement::Post, Placement::Post,
                   Placement::Post};  // one stack each: fine
  EXPECT_NO_THROW(dec.validate());
  ModelConfig none = residual_config(Arch::Encoder);
  none.residual = false;
  try {
    none.validate();
    FAIL() << "accepted residual = false";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.residual = false"), std::string::npos) << e.what();
  }
  // the name round-trips through JSON, and the method table says two streams
  const ModelConfig back =
      model_config_from_json(model_config_to_json(residual_config(Arch::EncDec)), "test");
  EXPECT_EQ(back.placement_of(4), kRes);
  EXPECT_EQ(method_of(kRes).streams, Streams::Dual);
  EXPECT_TRUE(back.dual_stack(0));
  EXPECT_TRUE(back.has_enc_final_norm());
}

TEST(ResiDual, OneStreamProductsRefuseByName) {
  Model<double> gpt(residual_config(Arch::Gpt));
  const ResBatch x = residual_batch(gpt.config(), 23, 1);
  run_forward(gpt, x, false);
  const size_t n = size_t(x.T) * gpt.config().d_model;
  std::vector<double> a(n, 1.0), b(n);
  auto refuses = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what()).find("ResiDual") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refuses([&] { gpt.jvp_sublayers(b.data(), a.data(), 1, 0, 2); }));
  EXPECT_TRUE(refuses([&] { gpt.vjp_sublayers(b.data(), a.data(), 0, 2); }));
  EXPECT_TRUE(refuses([&] { gpt.jvp_block_token_local(b.data(), a.data(), 1, 0, 0); }));
  EXPECT_TRUE(refuses([] { require_one_stream(residual_config(Arch::Encoder), "an instrument"); }));
  EXPECT_NO_THROW(require_one_stream(ModelConfig{}, "an instrument"));
  Model<double> ed(residual_config(Arch::EncDec));
  run_forward(ed, x, false);
  std::vector<double> s(size_t(x.S) * ed.config().d_model, 1.0);
  EXPECT_TRUE(refuses([&] { ed.jvp_encdec(b.data(), s.data(), a.data(), 1); }));
  // a one-stream decoder under a ResiDual encoder still takes the one-stream products of its own
  // range
  ModelConfig half = residual_config(Arch::EncDec);
  half.placement = {kRes, kRes, Placement::Pre, Placement::Pre, Placement::Pre};
  Model<double> h(half);
  run_forward(h, x, false);
  EXPECT_NO_THROW(
      h.jvp_sublayers(b.data(), a.data(), 1, half.first_decoder_slot(), half.n_slots()));
  EXPECT_TRUE(refuses([&] { h.jvp_sublayers(s.data(), s.data(), 1, 0, 2); }));
}
