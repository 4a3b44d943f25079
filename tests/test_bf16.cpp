// test_bf16.cpp: mixed-precision training (train.precision = "bf16", ops/gemm_backend.h):
//   - the bf16 GEMM against a naive reference on bf16-rounded inputs with double accumulation, for
//     every transposition, odd sizes, alpha / beta and padded leading dimensions; and a check that
//     the rounding really happens (the result differs from the float GEMM by more than that bound);
//   - matmul_forward / matmul_backward in bf16 against their naive references on rounded operands;
//     bf16 attention against float attention within bf16's resolution;
//   - a short training run in bf16 whose losses track float32 within a stated tolerance, and that
//     is bit-identical when repeated (determinism on one machine and thread count), and when AdamW
//     writes the next forward's bf16 weights (the handoff), which a later write of a parameter
//     discards; the bulk rounding on both ISA paths against the scalar rule;
//   - the precision key: parsed, written back, a bad value rejected with one clear message;
//   - a CPU without AVX512_BF16 (simulated in a fresh process with DNNL_MAX_CPU_ISA=AVX2, where
//     oneDNN 2.6 has no bf16 matmul): the capability check says so, and the bf16 GEMM is emulated
//     on the float32 GEMM and still matches the reference (no crash, no illegal instruction).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <vector>

#include "check.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/gemm_backend.h"
#include "ops/isa.h"
#include "ops/matmul.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::ops;

namespace {

std::vector<float> randf(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(scale * rng.normal());
  return v;
}

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = bf16_to_float(round_to_bf16(v[i]));
  return r;
}

// Products of two bf16 numbers are exact in float (8 + 8 significant bits), so the only error of a
// float-accumulated bf16 GEMM is the float sum: |err| <= K * u * sum_k |a_ik b_kj| (u = 2^-24),
// plus one rounding of alpha * sum + beta * c. kBf16GemmSlack covers oneDNN's blocked summation
// order (still K terms) with margin.
constexpr double kBf16GemmSlack = 2.0;
constexpr double kFloatU = 1.0 / (1 << 24);

struct GemmCase {
  Trans ta, tb;
  int M, N, K;
  float alpha, beta;
  int pad;  // extra leading-dimension columns
};

// Checks gemm_bf16 on one case against the double reference on rounded inputs; returns the largest
// |bf16 result - float reference on unrounded inputs| / bound, to show the rounding is real.
double check_bf16_gemm(const GemmCase& g, uint64_t seed) {
  const bool tA = g.ta == Trans::Yes, tB = g.tb == Trans::Yes;
  const int arows = tA ? g.K : g.M, acols = tA ? g.M : g.K, brows = tB ? g.N : g.K, bcols = tB ? g.K : g.N;
  const int lda = acols + g.pad, ldb = bcols + g.pad, ldc = g.N + g.pad;
  const auto A = randf(size_t(arows) * lda, seed), B = randf(size_t(brows) * ldb, seed + 1);
  const auto C0 = randf(size_t(g.M) * ldc, seed + 2);
  const auto Ar = rounded(A), Br = rounded(B);
  std::vector<float> C = C0;
  gemm_bf16(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.data(), lda, B.data(), ldb, g.beta, C.data(), ldc);
  auto a_at = [&](const std::vector<float>& a, int i, int k) { return double(tA ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k]); };
  auto b_at = [&](const std::vector<float>& b, int k, int j) { return double(tB ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j]); };
  double worst_excess = -1, rounding_effect = 0;
  std::string where;
  for (int i = 0; i < g.M; i++)
    for (int j = 0; j < g.N; j++) {
      double ref = 0, mag = 0, unrounded = 0;
      for (int k = 0; k < g.K; k++) {
        ref += a_at(Ar, i, k) * b_at(Br, k, j);
        mag += std::abs(a_at(Ar, i, k) * b_at(Br, k, j));
        unrounded += a_at(A, i, k) * b_at(B, k, j);
      }
      const double c0 = C0[(size_t)i * ldc + j];
      ref = g.alpha * ref + g.beta * c0;
      unrounded = g.alpha * unrounded + g.beta * c0;
      const double bound = kBf16GemmSlack * (g.K + 2) * kFloatU * (std::abs(g.alpha) * mag + std::abs(g.beta * c0)) + 1e-30;
      const double got = C[(size_t)i * ldc + j];
      const double excess = std::abs(got - ref) - bound;
      if (!(excess <= worst_excess) || std::isnan(excess)) {
        worst_excess = std::isnan(excess) ? INFINITY : excess;
        where = "C[" + std::to_string(i) + "," + std::to_string(j) + "] = " + std::to_string(got) + ", reference " + std::to_string(ref);
      }
      rounding_effect = std::max(rounding_effect, std::abs(got - unrounded) / bound);
    }
  EXPECT_LE(worst_excess, 0.0) << "gemm_bf16 ta=" << tA << " tb=" << tB << " M=" << g.M << " N=" << g.N
                               << " K=" << g.K << ": " << where;
  // the padding columns of C are untouched
  for (int i = 0; i < g.M; i++)
    for (int j = g.N; j < ldc; j++) EXPECT_EQ(C[(size_t)i * ldc + j], C0[(size_t)i * ldc + j]) << "padding of C";
  return rounding_effect;
}

}  // namespace

TEST(Bf16Gemm, MatchesReferenceOnRoundedInputsEveryTranspositionAndOddSizes) {
  const int sizes[][3] = {{1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {3, 5, 7}, {17, 33, 65}, {64, 48, 128}, {31, 129, 200}};
  uint64_t seed = 100;
  double rounding_effect = 0;
  for (Trans ta : {Trans::No, Trans::Yes})
    for (Trans tb : {Trans::No, Trans::Yes})
      for (const auto& s : sizes)
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {1.0f, 1.0f}, {0.125f, 0.5f}})
          for (int pad : {0, 3}) {
            rounding_effect = std::max(rounding_effect, check_bf16_gemm({ta, tb, s[0], s[1], s[2], alpha, beta, pad}, seed));
            seed += 3;
          }
  // bf16 rounding (relative 2^-9) is far above float accumulation error: a GEMM that did not round
  // its inputs would be within the bound everywhere
  EXPECT_GT(rounding_effect, 10.0) << "gemm_bf16 gives the float result: its inputs are not rounded to bf16";
}

TEST(Bf16Gemm, RoundingIsToNearestEvenAndKeepsNaNAndInf) {
  EXPECT_EQ(round_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(round_to_bf16(bf16_to_float(0x3f80) + std::ldexp(1.0f, -8)), 0x3f80);   // tie -> even
  EXPECT_EQ(round_to_bf16(bf16_to_float(0x3f81) + std::ldexp(1.0f, -8)), 0x3f82);   // tie -> even
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);  // above tie
  EXPECT_TRUE(std::isnan(bf16_to_float(round_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(round_to_bf16(INFINITY)), INFINITY);
  EXPECT_EQ(bf16_to_float(round_to_bf16(-INFINITY)), -INFINITY);
}

TEST(Bf16Matmul, ForwardAndBackwardMatchNaiveOnRoundedOperands) {
  // large enough to take the threaded split (kParallelMinWork), with odd sizes
  const int N = 67, IC = 45, OC = 93;
  const auto x = randf(size_t(N) * IC, 1), w = randf(size_t(OC) * IC, 2, 0.2), b = randf(OC, 3);
  const auto dy = randf(size_t(N) * OC, 4);
  const auto xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  std::vector<float> y(size_t(N) * OC), y_ref(y.size());
  matmul_forward(y.data(), x.data(), w.data(), b.data(), N, IC, OC, Precision::Bf16);
  matmul_forward_naive(y_ref.data(), xr.data(), wr.data(), b.data(), N, IC, OC);
  std::vector<float> dx(size_t(N) * IC, 0.5f), dw(w.size(), 0.25f), db(OC, 1.0f);
  std::vector<float> dx_ref = dx, dw_ref = dw, db_ref = db;
  matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IC, OC, Precision::Bf16);
  // the naive backward on rounded operands; the bias gradient sums the unrounded dy
  std::vector<float> db_unused(OC, 0.0f);
  matmul_backward_naive(dx_ref.data(), dw_ref.data(), db_unused.data(), dyr.data(), xr.data(), wr.data(), N, IC, OC);
  for (int o = 0; o < OC; o++) {
    double s = 0;
    for (int n = 0; n < N; n++) s += dy[(size_t)n * OC + o];
    db_ref[o] += float(s);
  }
  auto d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  // float accumulation of <= 93 exact products of magnitude ~1: a few 1e-6 absolute
  test::expect_close("bf16 matmul out", d(y), d(y_ref), 1e-5, 2e-5);
  test::expect_close("bf16 matmul dinp", d(dx), d(dx_ref), 1e-5, 2e-5);
  test::expect_close("bf16 matmul dweight", d(dw), d(dw_ref), 1e-5, 1e-4);
  test::expect_close("bf16 matmul dbias", d(db), d(db_ref), 1e-6, 1e-5);
}

// The model rounds its weights once per forward (Model::forward) and hands them to the GEMMs: the
// same bits as rounding them in every call, for both thread splits of the forward (rows when
// N >= OC, else columns of W) and the input gradient
TEST(Bf16Matmul, PreRoundedWeightsGiveTheSameBits) {
  for (const auto& [N, IC, OC] : {std::tuple{67, 45, 93}, std::tuple{211, 45, 33}}) {
    const auto x = randf(size_t(N) * IC, 5), w = randf(size_t(OC) * IC, 6, 0.2), b = randf(OC, 7);
    const auto dy = randf(size_t(N) * OC, 8);
    std::vector<uint16_t> w16(w.size());
    round_to_bf16(w16.data(), w.data(), w.size());
    std::vector<float> y(size_t(N) * OC), y16(y.size());
    matmul_forward(y.data(), x.data(), w.data(), b.data(), N, IC, OC, Precision::Bf16);
    matmul_forward(y16.data(), x.data(), w.data(), b.data(), N, IC, OC, Precision::Bf16, w16.data());
    EXPECT_EQ(y, y16) << N << " x " << IC << " x " << OC;
    std::vector<float> dx(size_t(N) * IC, 0.5f), dw(w.size(), 0.25f), db(OC, 1.0f);
    std::vector<float> dx16 = dx, dw16 = dw, db16 = db;
    matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IC, OC, Precision::Bf16);
    matmul_backward(dx16.data(), dw16.data(), db16.data(), dy.data(), x.data(), w.data(), N, IC, OC,
                    Precision::Bf16, w16.data());
    EXPECT_EQ(dx, dx16);
    EXPECT_EQ(dw, dw16);
    EXPECT_EQ(db, db16);
    // and the rounded weights are what is used: a different w16 changes the result
    std::vector<uint16_t> other(w16.size(), round_to_bf16(0.5f));
    matmul_forward(y16.data(), x.data(), w.data(), b.data(), N, IC, OC, Precision::Bf16, other.data());
    EXPECT_NE(y, y16);
  }
}

TEST(Bf16Attention, TracksFloatAttentionWithinBf16Resolution) {
  const int B = 2, T = 19, C = 24, NH = 3;
  const auto qkv = randf(size_t(B) * T * 3 * C, 7);
  const auto dout = randf(size_t(B) * T * C, 8);
  std::vector<float> out32(size_t(B) * T * C), out16(out32.size()), att32(size_t(B) * NH * T * T), att16(att32.size());
  attention_forward(out32.data(), att32.data(), qkv.data(), B, T, C, NH, NH, true);
  attention_forward(out16.data(), att16.data(), qkv.data(), B, T, C, NH, NH, true, nullptr, Precision::Bf16);
  std::vector<float> d32(qkv.size(), 0.0f), d16(qkv.size(), 0.0f), datt(att32.size());
  attention_backward(d32.data(), datt.data(), dout.data(), qkv.data(), att32.data(), B, T, C, NH, NH, true);
  attention_backward(d16.data(), datt.data(), dout.data(), qkv.data(), att16.data(), B, T, C, NH, NH, true, Precision::Bf16);
  double max_diff = 0;
  for (size_t i = 0; i < out32.size(); i++) max_diff = std::max(max_diff, double(std::abs(out32[i] - out16[i])));
  auto d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  // bf16 operands carry a relative error of 2^-9 each; scores are sums of HS = 8 products of unit
  // normals, outputs and gradients are O(1): a few 2^-9 absolute, 0.03 allows ~15 of them
  test::expect_close("bf16 attention out", d(out16), d(out32), 0.0, 0.03);
  test::expect_close("bf16 attention probabilities", d(att16), d(att32), 0.0, 0.03);
  test::expect_close("bf16 attention dqkv", d(d16), d(d32), 0.0, 0.05);
  EXPECT_GT(max_diff, 1e-5) << "bf16 attention equals float attention: bf16 is not used";
  // the causal mask holds exactly: probabilities above the diagonal are 0
  for (int bh = 0; bh < B * NH; bh++)
    for (int i = 0; i < T; i++)
      for (int j = i + 1; j < T; j++) EXPECT_EQ(att16[((size_t)bh * T + i) * T + j], 0.0f);
}

namespace {

// The GPT of the training tests: 2 layers, d 64, 4 heads, vocabulary 64, sequences of 16
ModelConfig small_gpt() {
  ModelConfig cfg;
  cfg.vocab = 64;
  cfg.d_model = 64;
  cfg.n_layers = 2;
  cfg.n_heads = 4;
  cfg.seq_len = 16;
  return cfg;
}

// Losses of `steps` AdamW steps of a small GPT on fixed random batches. handoff: AdamW writes the
// bf16 weights of the next forward (Model::bf16_weights_buffer) as the trainer does. params: the
// final parameters, if wanted.
std::vector<double> train_losses(Precision prec, int steps, const ModelConfig& cfg, bool handoff = false,
                                 std::vector<float>* params = nullptr) {
  Model<float> model(cfg);
  model.set_precision(prec);
  AdamW opt(model.table(), AdamWConfig{});
  const int B = 8, T = 16, N = B * T;
  Rng rng(5);
  std::vector<int32_t> ids(N), labels(N);
  for (int i = 0; i < N; i++) ids[i] = int32_t(rng.below(64));
  for (int i = 0; i < N; i++) labels[i] = ids[(i + 1) % N];  // a learnable shifted sequence
  std::vector<double> losses;
  for (int s = 1; s <= steps; s++) {
    model.zero_grad();
    losses.push_back(model.forward(ids.data(), labels.data(), B, T));
    model.backward();
    uint16_t* rounded = handoff ? model.bf16_weights_buffer() : nullptr;
    opt.step(model.params().data(), model.grads().data(), 3e-3, s, 1.0, rounded);
    if (rounded) model.bf16_weights_written();
  }
  if (params) *params = model.params();
  return losses;
}
std::vector<double> train_losses(Precision prec, int steps, Placement placement, bool handoff = false,
                                 std::vector<float>* params = nullptr) {
  ModelConfig cfg = small_gpt();
  cfg.placement = {placement};
  return train_losses(prec, steps, cfg, handoff, params);
}

}  // namespace

TEST(Bf16Training, LossesTrackFloat32AndRepeatBitForBit) {
  for (Placement pl : {Placement::Pre, Placement::Post}) {
    const int steps = 60;
    const auto l32 = train_losses(Precision::Fp32, steps, pl);
    const auto l16 = train_losses(Precision::Bf16, steps, pl);
    const auto l16b = train_losses(Precision::Bf16, steps, pl);
    // bf16 GEMM inputs perturb each step by ~2^-9 relative; over 60 steps of a model that learns
    // from ln(64) = 4.16 nats down, the curves stay within 0.05 nats + 2% of each other
    for (int s = 0; s < steps; s++) {
      EXPECT_NEAR(l16[s], l32[s], 0.05 + 0.02 * l32[s]) << "step " << s + 1 << " placement " << to_string(pl);
      EXPECT_EQ(l16[s], l16b[s]) << "bf16 run not bit-identical at step " << s + 1;
    }
    EXPECT_LT(l16.back(), l16.front() - 1.0) << "bf16 training does not learn";
    EXPECT_NE(l16.back(), l32.back()) << "bf16 run equals the fp32 run: bf16 is not used";
  }
}

// Today's blocks and methods in bf16: the Llama block (RoPE, SwiGLU, grouped queries, RMSNorm, no
// biases), OLMo 2 (reordered, whole-projection QK-norm), Peri-LN with DyT, LayerNorm Scaling,
// HybridNorm (QKV-norm), Gemma 2 (sandwich, GeGLU, sqrt(d) embedding, its score scale and soft caps)
// DyT's LLaMA recipe (no beta, per-site alpha, a learned embedding scale) and gated attention with sink logits: the same tolerance as
// above, bit-identical repeats, and bf16 really used
TEST(Bf16Training, TodaysBlocksAndMethodsTrackFloat32) {
  auto llama = [] {
    ModelConfig c = small_gpt();
    c.norm = NormKind::RMSNorm;
    c.positions = Positions::Rope;
    c.activation = Activation::SwiGlu;
    c.bias = LinearBias::None;
    c.n_kv_heads = 2;
    return c;
  };
  std::vector<std::pair<const char*, ModelConfig>> cases;
  cases.push_back({"llama", llama()});
  ModelConfig olmo2 = llama();
  olmo2.placement = {Placement::Reordered};
  olmo2.qk_norm = QkNorm::Whole;
  cases.push_back({"olmo2", olmo2});
  ModelConfig peri = llama();
  peri.placement = {Placement::Peri};
  cases.push_back({"peri", peri});
  ModelConfig lns = llama();
  lns.placement = {Placement::Lns};
  cases.push_back({"lns", lns});
  ModelConfig hybrid = llama();
  hybrid.placement = {Placement::HybridNorm};
  cases.push_back({"hybridnorm", hybrid});
  ModelConfig gemma2 = llama();
  gemma2.placement = {Placement::Sandwich};
  gemma2.activation = Activation::GeGlu;
  gemma2.embed_scale = 8.0;
  gemma2.attn_scale = 0.2;
  gemma2.attn_softcap = 5.0;
  gemma2.logit_softcap = 3.0;
  cases.push_back({"gemma2", gemma2});
  ModelConfig dyt = llama();
  dyt.norm = NormKind::DyT;
  dyt.norm_bias = false;
  dyt.norm_alpha_attn = 0.8;
  dyt.norm_alpha = 0.2;
  dyt.embed_scale = 8.0;
  dyt.embed_scale_learned = true;
  cases.push_back({"dyt llama recipe", dyt});
  ModelConfig gated = llama();
  gated.attn_gate = AttnGate::Elementwise;  // gated attention: the gate map's GEMM in bf16 too
  gated.attn_sink = true;  // and learned sink logits: their gradient from the bf16 attention's probabilities
  cases.push_back({"gated attention with sink logits", gated});
  ModelConfig values = llama();
  values.value_residual = 0.5;  // value residual learning: the first layer's values in every later one
  cases.push_back({"value residual", values});
  for (const auto& [name, cfg] : cases) {
    SCOPED_TRACE(name);
    const int steps = 40;
    const auto l32 = train_losses(Precision::Fp32, steps, cfg);
    const auto l16 = train_losses(Precision::Bf16, steps, cfg);
    const auto l16b = train_losses(Precision::Bf16, steps, cfg);
    for (int s = 0; s < steps; s++) {
      EXPECT_NEAR(l16[s], l32[s], 0.05 + 0.02 * l32[s]) << "step " << s + 1;
      EXPECT_EQ(l16[s], l16b[s]) << "bf16 run not bit-identical at step " << s + 1;
    }
    EXPECT_LT(l16.back(), l16.front() - 0.5) << "bf16 training does not learn";
    EXPECT_NE(l16.back(), l32.back()) << "bf16 run equals the fp32 run: bf16 is not used";
  }
}

// AdamW writing the next forward's bf16 weights in its own pass (the trainer's way) gives the same
// bits as the forward rounding them itself
TEST(Bf16Training, WeightsRoundedByAdamWGiveTheSameBits) {
  std::vector<float> p_self, p_handoff;
  const auto self = train_losses(Precision::Bf16, 12, Placement::Pre, false, &p_self);
  const auto handoff = train_losses(Precision::Bf16, 12, Placement::Pre, true, &p_handoff);
  EXPECT_EQ(self, handoff);
  EXPECT_EQ(p_self, p_handoff);
}

// A parameter written after the handoff (through params(), the way to write them) is seen by the
// next forward: the handoff is discarded, not used stale
TEST(Bf16Training, ParamsWrittenAfterTheHandoffAreSeen) {
  const ModelConfig cfg = small_gpt();
  const int B = 4, T = 16, N = B * T;
  std::vector<int32_t> ids(N), labels(N);
  for (int i = 0; i < N; i++) ids[i] = int32_t((7 * i) % 64), labels[i] = int32_t((7 * i + 7) % 64);
  // the same step on two models, one handing its rounding over
  auto stepped = [&](bool handoff) {
    auto m = std::make_unique<Model<float>>(cfg);
    m->set_precision(Precision::Bf16);
    AdamW opt(m->table(), AdamWConfig{});
    m->zero_grad();
    m->forward(ids.data(), labels.data(), B, T);
    m->backward();
    uint16_t* rounded = handoff ? m->bf16_weights_buffer() : nullptr;
    EXPECT_EQ(handoff, rounded != nullptr);
    opt.step(m->params().data(), m->grads().data(), 1e-2, 1, 1.0, rounded);
    if (rounded) m->bf16_weights_written();
    return m;
  };
  auto a = stepped(true), b = stepped(false);
  const ParamSpec* w1 = nullptr;
  for (const ParamSpec& spec : a->table().specs)
    if (spec.name.find(".fc.weight") != std::string::npos) w1 = w1 ? w1 : &spec;
  ASSERT_NE(w1, nullptr);
  const double before = b->forward(ids.data(), labels.data(), B, T);
  for (auto* m : {a.get(), b.get()})
    for (size_t i = 0; i < w1->numel; i++) m->params()[w1->offset + i] *= 3.0f;
  const double after_a = a->forward(ids.data(), labels.data(), B, T);
  const double after_b = b->forward(ids.data(), labels.data(), B, T);
  EXPECT_NE(after_b, before) << "the change does not move the loss: the test cannot see a stale copy";
  EXPECT_EQ(after_a, after_b) << "the forward after the handoff used the weights from before the change";
  // fp32 models have no bf16 buffer
  Model<float> f(cfg);
  EXPECT_EQ(f.bf16_weights_buffer(), nullptr);
}

// The bulk rounding (both ISA paths) equals the scalar rule on the values where rounding is subtle:
// ties both ways, the carry into the exponent, the largest floats (to infinity), denormals, NaN
TEST(Bf16Rounding, BulkRoundingEqualsTheScalarRuleOnEveryPath) {
  std::vector<float> v = randf(100003, 11);
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,
                        0x00000001u, 0x80000001u, 0x007fffffu, 0x00008000u, 0x00018000u, 0x7f800000u, 0xff800000u,
                        0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x80000000u, 0u})
    v.push_back(__builtin_bit_cast(float, bits));
  std::vector<uint16_t> expect(v.size());
  for (size_t i = 0; i < v.size(); i++) expect[i] = round_to_bf16(v[i]);
  const Isa saved = active_isa();
  std::vector<Isa> isas{Isa::Avx2};
  if (detect_cpu().avx512) isas.push_back(Isa::Avx512);
  for (Isa isa : isas) {
    force_isa(isa);
    std::vector<uint16_t> got(v.size());
    round_to_bf16(got.data(), v.data(), v.size());
    for (size_t i = 0; i < v.size(); i++)
      ASSERT_EQ(got[i], expect[i]) << to_string(isa) << " at " << i << " bits " << std::hex
                                   << __builtin_bit_cast(uint32_t, v[i]);
  }
  force_isa(saved);
  EXPECT_EQ(expect[v.size() - 19], 0x3f80);  // 1 + half an ulp: tie to even (down)
  EXPECT_EQ(expect[v.size() - 18], 0x3f82);  // tie to even (up)
  EXPECT_EQ(expect[v.size() - 15], 0x7f80);  // FLT_MAX rounds to infinity
}

TEST(Bf16Config, PrecisionKeyParsedWrittenBackAndBadValueRejected) {
  nlohmann::json doc = {{"train", {{"precision", "bf16"}}}};
  RunConfig cfg = run_config_from_json(doc, "test");
  EXPECT_EQ(cfg.train.precision, Precision::Bf16);
  EXPECT_EQ(run_config_to_json(cfg)["train"]["precision"], "bf16");
  EXPECT_EQ(run_config_from_json(run_config_to_json(cfg), "again").train.precision, Precision::Bf16);
  EXPECT_EQ(run_config_from_json(nlohmann::json::object(), "default").train.precision, Precision::Fp32);
  try {
    run_config_from_json({{"train", {{"precision", "fp16"}}}}, "test");
    FAIL() << "precision = fp16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'precision' = \"fp16\" is not one of fp32 | bf16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_config_from_json({{"train", {{"precision", 16}}}}, "test"), Error);
}

TEST(Bf16NoHardware, SaidSoAndTheGemmEmulatedCorrectly) {
  // A fresh process (threadsafe death test: the binary re-executed) with oneDNN limited to AVX2, as
  // on a CPU without AVX512_BF16.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("DNNL_MAX_CPU_ISA", "AVX2", 1);
        const std::string why = bf16_unsupported_reason();
        if (why.find("AVX512_BF16") == std::string::npos) std::exit(2);
        // the emulation computes the bf16 GEMM (rounded inputs; checked against the reference)
        const double effect = check_bf16_gemm({Trans::No, Trans::Yes, 17, 33, 65, 1.0f, 1.0f, 2}, 9);
        std::exit(::testing::Test::HasFailure() || effect <= 1.0 ? 3 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}
