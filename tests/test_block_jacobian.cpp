// test_block_jacobian.cpp: one block's full-sequence Jacobian built from d x d blocks
// (Model::block_jacobian, src/model/model_jacobian.cpp) against the tangent path (jvp_sublayers_unit
// with every unit tangent over the block's two sub-layers), for every one-stream placement, both
// norms, gpt and encoder, MLP on and off, residual off, every activation, odd sizes (d = 12, 3
// heads, F = 20, T = 7), both layers of a 2-layer model, T = 1, a key padding mask, and perturbed
// parameters (gains and biases away from init); today's blocks (RoPE with its scalings and two kinds of
// layer, grouped-query attention, other head widths, QK- and V-norm, Gemma 2's score scale and soft cap). Causal blocks above the diagonal must be exact
// zeros. Also: where it does not apply (encdec, B = 2, part of a block, several blocks) it says so,
// and stream_jacobian falls back to the tangents. The models: tests/jacobian_fixture.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <memory>
#include <vector>

#include "analysis/lanczos.h"
#include "jacobian_fixture.h"
#include "model/methods.h"
#include "model/model.h"
#include "model/norm_of.h"
#include "model/norm_of.h"
#include "ops/common.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;

namespace {

// this file's models: the fixture's with one row, seeded from 11
std::unique_ptr<Model<double>> block_model(const JacobianCase& c, int T, int d = 12, int heads = 3, int ff = 20) {
  return jacobian_model(c, 11, 1, T, d, heads, ff);
}

// J (n, n) row-major by the tangent path: tangent k is column k
std::vector<double> tangent_jacobian(const Model<double>& m, int layer) {
  const int n = m.planned_T() * m.config().d_model;
  std::vector<int64_t> unit(static_cast<size_t>(n));
  for (int k = 0; k < n; k++) unit[size_t(k)] = k;
  std::vector<double> cols(size_t(n) * n), J(cols.size());
  m.jvp_sublayers_unit(cols.data(), unit.data(), n, 2 * layer, 2 * layer + 2);
  for (int k = 0; k < n; k++)
    for (int r = 0; r < n; r++) J[size_t(r) * n + k] = cols[size_t(k) * n + r];
  return J;
}

// Both are the same math in double, summed in another order: 1e-12 of the largest entry.
constexpr double kBlockTol = 1e-12;

// Checks the fast J against the tangent path; for a causal model also that every entry above the
// block diagonal is exactly zero.
void expect_block_jacobian(const Model<double>& m, int layer) {
  const int T = m.planned_T(), C = m.config().d_model, n = T * C;
  ASSERT_TRUE(m.block_jacobian_covers(2 * layer, 2 * layer + 2));
  std::vector<double> fast(size_t(n) * n, -7.0);  // poison: every entry must be written
  m.block_jacobian(fast.data(), layer);
  const std::vector<double> ref = tangent_jacobian(m, layer);
  double worst = 0, scale = 0;
  size_t worst_at = 0;
  for (size_t e = 0; e < ref.size(); e++) {
    scale = std::max(scale, std::abs(ref[e]));
    if (std::abs(fast[e] - ref[e]) > worst) {
      worst = std::abs(fast[e] - ref[e]);
      worst_at = e;
    }
  }
  ASSERT_GT(scale, 0.0);
  EXPECT_LE(worst, kBlockTol * scale) << "layer " << layer << ": worst at row " << worst_at / n << " col "
                                      << worst_at % n << ": fast " << fast[worst_at] << " vs tangents "
                                      << ref[worst_at] << " (max |J| " << scale << ")";
  if (m.config().causal()) {
    long nonzero = 0;
    for (int r = 0; r < n; r++)
      for (int k = (r / C + 1) * C; k < n; k++) nonzero += fast[size_t(r) * n + k] != 0.0;
    EXPECT_EQ(nonzero, 0) << "layer " << layer << ": entries above the block diagonal are not exact zeros";
  }
}

}  // namespace

TEST(BlockJacobian, EqualsTheTangentPathForEveryConfiguration) {
  std::vector<JacobianCase> cases;
  // every one-stream method (ResiDual's two streams: test_residual)
  for (const Method& m : all_methods())
    for (NormKind norm : kNormKinds)
      for (Arch arch : {Arch::Gpt, Arch::Encoder})
        if (m.sphere) {  // nGPT (norm l2 only; its spheres, scales and update; RoPE as in its paper)
          if (norm == NormKind::L2)
            cases.push_back({m.id, norm, arch, true, true, Activation::SwiGlu, false, Positions::Rope});
        } else if (!dual_stream(m.id)) {  // (HybridNorm's QKV-norm included)
          cases.push_back({m.id, norm, arch});
        }
  for (Activation act : {Activation::Gelu, Activation::GeluExact, Activation::Relu}) {
    cases.push_back({Placement::Post, NormKind::LayerNorm, Arch::Encoder, true, true, act});
    cases.push_back({Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, act});
  }
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    cases.push_back({Placement::Pre, NormKind::LayerNorm, arch, false});
    cases.push_back({Placement::Post, NormKind::RMSNorm, arch, false});
    cases.push_back({Placement::Pre, NormKind::LayerNorm, arch, true, false});
    cases.push_back({Placement::Sandwich, NormKind::LayerNorm, arch, false, false});
    cases.push_back({Placement::Pre, NormKind::LayerNorm, arch, true, true, Activation::GeluExact, true});
    cases.push_back({Placement::DeepNorm, NormKind::RMSNorm, arch, true, true, Activation::Gelu, true});
  }
  for (const JacobianCase& c : cases) {
    SCOPED_TRACE(jacobian_case_name(c));
    auto m = block_model(c, 7);
    for (int layer : {0, 1}) expect_block_jacobian(*m, layer);
  }
}

TEST(BlockJacobian, TodaysBlocksEqualTheTangentPath) {
  // RoPE (rotated q and k at each token's position; two kinds of layer with a factor and divisors),
  // grouped-query attention, heads wider and narrower than d / heads, QK-norm per head and over the
  // whole projections (with V-norm, weightless), Gemma 2's score scale and soft cap, a padded row:
  // d = 16, 4 query heads, T = 7
  const Positions rope = Positions::Rope;
  std::vector<JacobianCase> cases = {
      {Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope},
      {Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2},
      {Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, true, rope, 1},
      {Placement::Pre, NormKind::RMSNorm, Arch::Encoder, true, true, Activation::Gelu, true, rope, 2},
      {Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2, QkNorm::Heads},
      {Placement::Reordered, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2,
       QkNorm::Whole},
      {Placement::Post, NormKind::LayerNorm, Arch::Gpt, true, true, Activation::Gelu, false, rope, 2, QkNorm::Heads,
       true},
      {Placement::Pre, NormKind::LayerNorm, Arch::Gpt, true, true, Activation::Gelu, false, Positions::Learned, 0,
       QkNorm::Whole, true, false},
      {Placement::Sandwich, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::GeGlu, false, rope, 2,
       QkNorm::None, false, true, true, 5.0},
      {Placement::Sandwich, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::GeGlu, true, rope, 2,
       QkNorm::Heads, false, true, true, 2.0, 6},
      {Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2, QkNorm::None,
       false, true, true, 0.0, 2},
      {Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2, QkNorm::Heads,
       false, true, true, 0.0, 0, true},
  };
  // learned sink logits (rows of P sum to less than 1), with grouped queries, and beside Gemma 2's soft cap
  // (the cap is on the scores, not on the sink) on a padded row
  JacobianCase sink{Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2};
  sink.attn_sink = true;
  cases.push_back(sink);
  JacobianCase capped_sink{Placement::Sandwich, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::GeGlu, true, rope,
                           2, QkNorm::None, false, true, true, 5.0};
  capped_sink.attn_sink = true;
  cases.push_back(capped_sink);
  // value residual learning: layer 1's values mix layer 0's, which its block Jacobian holds fixed
  JacobianCase values{Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2};
  values.value_residual = 0.5;
  cases.push_back(values);
  // CompleteP: every branch times base / L = 1/2, with Sandwich's branch norm before it
  JacobianCase completep{Placement::Sandwich, NormKind::RMSNorm, Arch::Gpt, true, true, Activation::SwiGlu, false, rope, 2};
  completep.completep_base_depth = 1;
  cases.push_back(completep);
  for (const JacobianCase& c : cases) {
    SCOPED_TRACE(jacobian_case_name(c));
    auto m = block_model(c, 7, 16, 4, 20);
    for (int layer : {0, 1}) expect_block_jacobian(*m, layer);
  }
}

TEST(BlockJacobian, OneTokenAndOtherSizes) {
  // T = 1 (attention is the value path alone); one head; a head size of 1; a larger d than F
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    for (Placement p : {Placement::Post, Placement::Pre, Placement::Sandwich}) {
      JacobianCase c{p, NormKind::LayerNorm, arch};
      SCOPED_TRACE(jacobian_case_name(c) + " T = 1");
      auto m = block_model(c, 1);
      for (int layer : {0, 1}) expect_block_jacobian(*m, layer);
    }
    JacobianCase c{Placement::Pre, NormKind::RMSNorm, arch};
    {
      SCOPED_TRACE(jacobian_case_name(c) + " d = 8, 1 head, F = 5, T = 5");
      auto m = block_model(c, 5, 8, 1, 5);
      for (int layer : {0, 1}) expect_block_jacobian(*m, layer);
    }
    {
      SCOPED_TRACE(jacobian_case_name(c) + " d = 6, 6 heads, F = 7, T = 9");
      auto m = block_model(c, 9, 6, 6, 7);
      for (int layer : {0, 1}) expect_block_jacobian(*m, layer);
    }
  }
}

TEST(BlockJacobian, StreamJacobianUsesItAndAgrees) {
  // stream_jacobian's block path (all tokens, and a subset of 4 of 7 tokens, out of order) against
  // the same subset of the tangent path; several blocks fall back to the tangents
  JacobianCase c{Placement::Post, NormKind::LayerNorm, Arch::Gpt, true, true, Activation::GeluExact};
  auto m = block_model(c, 7);
  const int C = 12, n = 7 * C;
  const std::vector<double> ref = tangent_jacobian(*m, 1);
  std::vector<int> all(7);
  for (int t = 0; t < 7; t++) all[size_t(t)] = t;
  const std::vector<double> full = analysis::stream_jacobian(*m, 2, 4, all, all);
  ASSERT_EQ(full.size(), ref.size());
  double worst = 0, scale = 0;
  for (size_t e = 0; e < ref.size(); e++) {
    worst = std::max(worst, std::abs(full[e] - ref[e]));
    scale = std::max(scale, std::abs(ref[e]));
  }
  EXPECT_LE(worst, kBlockTol * scale);
  const std::vector<int> in = {5, 1, 2, 6}, out = {6, 0, 3};
  const std::vector<double> sub = analysis::stream_jacobian(*m, 2, 4, in, out);
  ASSERT_EQ(sub.size(), out.size() * C * in.size() * C);
  const size_t K = in.size() * C;
  for (size_t b = 0; b < out.size(); b++)
    for (int r = 0; r < C; r++)
      for (size_t a = 0; a < in.size(); a++)
        for (int k = 0; k < C; k++)
          EXPECT_NEAR(sub[(b * C + r) * K + a * C + k],
                      ref[(size_t(out[b]) * C + r) * n + size_t(in[a]) * C + k], kBlockTol * scale);
  EXPECT_FALSE(m->block_jacobian_covers(0, 4));  // two blocks: the tangents
  EXPECT_FALSE(m->block_jacobian_covers(0, 1));  // part of a block
  EXPECT_FALSE(m->block_jacobian_covers(1, 3));
}

TEST(BlockJacobian, SaysWhereItDoesNotApply) {
  {  // a batch of two rows
    ModelConfig cfg;
    cfg.d_model = 12;
    cfg.n_heads = 3;
    cfg.n_layers = 1;
    cfg.seq_len = 8;
    Model<double> m(cfg);
    std::vector<int32_t> ids(8, 5), labels(8, ops::kIgnoreLabel);
    m.forward(ids.data(), labels.data(), 2, 4);
    EXPECT_FALSE(m.block_jacobian_covers(0, 2));
    std::vector<double> J(size_t(48) * 48);
    EXPECT_THROW(m.block_jacobian(J.data(), 0), Error);
  }
  {  // an encoder-decoder
    ModelConfig cfg;
    cfg.arch = Arch::EncDec;
    cfg.d_model = 12;
    cfg.n_heads = 3;
    cfg.n_layers = 1;
    cfg.seq_len = 8;
    Model<double> m(cfg);
    std::vector<int32_t> src(4, 7), ids(4, 5), labels(4, ops::kIgnoreLabel);
    Source s;
    s.ids = src.data();
    s.S = 4;
    m.forward(ids.data(), labels.data(), 1, 4, nullptr, nullptr, s);
    for (int first = 0; first + 2 <= cfg.n_slots(); first++) EXPECT_FALSE(m.block_jacobian_covers(first, first + 2));
  }
}
