// test_local_jacobian.cpp: the block's token-local Jacobian from row-i quantities
// (Model::jvp_block_token_local) against the full-sequence forward mode restricted to one token
// (jvp_sublayers_unit over the block's two sub-layers), for every placement, both norms, both
// architectures, MLP on and off, residual off, every activation, a key padding mask with two batch
// rows, first / middle / last tokens, and perturbed parameters (gains and biases away from init).
// The models: tests/jacobian_fixture.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <memory>
#include <vector>

#include "analysis/lanczos.h"
#include "jacobian_fixture.h"
#include "model/model.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::test;

namespace {

// this file's models: the fixture's, seeded from 7
std::unique_ptr<Model<double>> run(const JacobianCase& c, int B, int T) { return jacobian_model(c, 7, B, T); }

// max |fast - reference| / max |reference| over the block Jacobian at (row, token)
double block_error(const Model<double>& m, int layer, int token, int row) {
  const int B = m.planned_B(), T = m.planned_T(), C = m.config().d_model;
  const size_t NC = size_t(B) * T * C;
  std::vector<int64_t> unit(static_cast<size_t>(C));
  for (int c = 0; c < C; c++) unit[size_t(c)] = int64_t(row) * T * C + int64_t(token) * C + c;
  std::vector<double> full(size_t(C) * NC);
  m.jvp_sublayers_unit(full.data(), unit.data(), C, 2 * layer, 2 * layer + 2);
  std::vector<double> eye(size_t(C) * C, 0.0), fast(eye.size());
  for (int c = 0; c < C; c++) eye[size_t(c) * C + c] = 1.0;
  m.jvp_block_token_local(fast.data(), eye.data(), C, layer, token, row);
  double worst = 0, scale = 0;
  for (int k = 0; k < C; k++)
    for (int c = 0; c < C; c++) {
      const double ref = full[size_t(k) * NC + unit[0] + c];
      worst = std::max(worst, std::abs(fast[size_t(k) * C + c] - ref));
      scale = std::max(scale, std::abs(ref));
    }
  EXPECT_GT(scale, 0.0);
  return worst / scale;
}

constexpr double kTol = 1e-12;  // both are the same math in double, only summed in another order

}  // namespace

TEST(LocalJacobian, EqualsTheFullSequenceJvpForEveryConfiguration) {
  std::vector<JacobianCase> cases;
  for (Placement p : {Placement::Post, Placement::Pre, Placement::Sandwich, Placement::PrePost,
                      Placement::DeepNorm, Placement::None})
    for (NormKind norm : {NormKind::LayerNorm, NormKind::RMSNorm})
      for (Arch arch : {Arch::Gpt, Arch::Encoder}) cases.push_back({p, norm, arch});
  for (Activation act : {Activation::Gelu, Activation::GeluExact, Activation::Relu}) {
    cases.push_back({Placement::Post, NormKind::LayerNorm, Arch::Encoder, true, true, act});
    cases.push_back({Placement::Pre, NormKind::RMSNorm, Arch::Gpt, true, true, act});
  }
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    cases.push_back({Placement::Pre, NormKind::LayerNorm, arch, false});
    cases.push_back({Placement::Post, NormKind::RMSNorm, arch, false});
    cases.push_back({Placement::Pre, NormKind::LayerNorm, arch, true, false});
    cases.push_back({Placement::Sandwich, NormKind::LayerNorm, arch, false, false});
    // today's blocks: RoPE (the token's own rotation), gated MLPs, the new norm kinds and methods
    cases.push_back({Placement::Pre, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false, Positions::Rope});
    cases.push_back({Placement::Peri, NormKind::DyT, arch, true, true, Activation::GeGlu, false, Positions::Rope});
    cases.push_back({Placement::Lns, NormKind::Derf, arch, true, true, Activation::Gelu, false, Positions::None});
    cases.push_back({Placement::Reordered, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu});
    // the Llama-family block with multi-query attention (3 query heads, 1 key-value head)
    cases.push_back({Placement::Pre, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false, Positions::Rope, 1});
    // QK-norm (OLMo 2's whole-projection form after RoPE's rotation; per head with the values) and HybridNorm
    cases.push_back({Placement::Reordered, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false,
                     Positions::Rope, 1, QkNorm::Whole});
    cases.push_back({Placement::Pre, NormKind::LayerNorm, arch, true, true, Activation::Gelu, false, Positions::Rope, 0,
                     QkNorm::Heads, true});
    cases.push_back({Placement::HybridNorm, NormKind::DyT, arch, true, true, Activation::SwiGlu});
    // weightless QK-norm with the values; DyT without beta (its LLaMA recipe)
    cases.push_back({Placement::Pre, NormKind::LayerNorm, arch, true, true, Activation::Gelu, false, Positions::Rope, 0,
                     QkNorm::Heads, true, /*qk_norm_affine=*/false});
    cases.push_back({Placement::Pre, NormKind::DyT, arch, true, true, Activation::SwiGlu, false, Positions::Rope, 0,
                     QkNorm::None, false, true, /*norm_bias=*/false});
    cases.push_back({Placement::Sandwich, NormKind::RMSNorm, arch, true, true, Activation::GeGlu, false,
                     Positions::Rope, 1, QkNorm::None, false, true, true, /*attn_softcap=*/0.7});
    // heads of another width (model.head_dim): wider with multi-query attention, RoPE and QK-norm per
    // head; narrower with OLMo 2's whole-projection QK-norm
    JacobianCase wide{Placement::Pre, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false, Positions::Rope, 1,
                      QkNorm::Heads};
    wide.head_dim = 6;
    cases.push_back(wide);
    JacobianCase narrow{Placement::Reordered, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false,
                        Positions::Rope, 0, QkNorm::Whole};
    narrow.head_dim = 2;
    cases.push_back(narrow);
    // gated attention: one gate per head (with multi-query attention and RoPE) and per channel (with
    // Qwen2's q, k, v biases, so the gate map has a bias too)
    JacobianCase headwise{Placement::Pre, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false, Positions::Rope, 1};
    headwise.attn_gate = AttnGate::Headwise;
    cases.push_back(headwise);
    JacobianCase elementwise{Placement::Post, NormKind::LayerNorm, arch};
    elementwise.attn_gate = AttnGate::Elementwise;
    cases.push_back(elementwise);
    // learned sink logits: with grouped queries and RoPE, and in a padded encoder
    JacobianCase sink{Placement::Pre, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false, Positions::Rope, 1};
    sink.attn_sink = true;
    cases.push_back(sink);
    JacobianCase sink_post{Placement::Post, NormKind::LayerNorm, arch, true, true, Activation::Gelu, true};
    sink_post.attn_sink = true;
    cases.push_back(sink_post);
    // value residual learning: layer 1 mixes layer 0's values (held: they are not the block's input), with
    // grouped queries and RoPE, and after a per-head v-norm
    JacobianCase values{Placement::Pre, NormKind::RMSNorm, arch, true, true, Activation::SwiGlu, false, Positions::Rope, 1};
    values.value_residual = 0.5;
    cases.push_back(values);
    JacobianCase values_normed{Placement::Post, NormKind::LayerNorm, arch, true, true, Activation::Gelu, true};
    values_normed.qk_norm = QkNorm::Heads;
    values_normed.v_norm = true;
    values_normed.value_residual = 0.3;
    cases.push_back(values_normed);
    // CompleteP's branch multiplier (1/2), in Post-LN's order
    JacobianCase completep{Placement::Post, NormKind::LayerNorm, arch};
    completep.completep_base_depth = 1;
    cases.push_back(completep);
    // nGPT: the update on the sphere, unit q and k heads times s_qk, s_uv (gated and plain MLPs)
    cases.push_back({Placement::NGpt, NormKind::L2, arch, true, true, Activation::SwiGlu, false, Positions::Rope});
    cases.push_back({Placement::NGpt, NormKind::L2, arch, true, true, Activation::Gelu, false, Positions::None});
  }
  const int T = 7;
  for (const JacobianCase& c : cases) {
    SCOPED_TRACE(jacobian_case_name(c));
    auto m = run(c, 1, T);
    for (int layer : {0, 1})
      for (int token : {0, 3, T - 1}) {
        SCOPED_TRACE(fmt::format("layer {} token {}", layer, token));
        EXPECT_LE(block_error(*m, layer, token, 0), kTol);
      }
  }
}

TEST(LocalJacobian, KeyPaddingMaskWithTwoRows) {
  const int T = 7;
  for (Arch arch : {Arch::Encoder, Arch::Gpt})
    for (Placement p : {Placement::Post, Placement::Pre}) {
      JacobianCase c{p, NormKind::LayerNorm, arch, true, true, Activation::GeluExact, true};
      SCOPED_TRACE(jacobian_case_name(c));
      auto m = run(c, 2, T);
      for (int row : {0, 1})
        for (int layer : {0, 1})
          for (int token : {0, 2, T - 2, T - 1}) {  // T - 2 and T - 1 are padding in row 1
            SCOPED_TRACE(fmt::format("row {} layer {} token {}", row, layer, token));
            EXPECT_LE(block_error(*m, layer, token, row), kTol);
          }
    }
}

TEST(LocalJacobian, ArbitraryTangentsAreTheJacobianTimesThem) {
  // linearity in the tangent: K random tangents give J_ii applied to them
  JacobianCase c{Placement::Sandwich, NormKind::LayerNorm, Arch::Encoder};
  auto m = run(c, 1, 5);
  const int C = 12, K = 5;
  std::vector<double> eye(size_t(C) * C, 0.0), J(eye.size());
  for (int k = 0; k < C; k++) eye[size_t(k) * C + k] = 1.0;
  m->jvp_block_token_local(J.data(), eye.data(), C, 1, 2);
  Rng rng(3);
  std::vector<double> tin(size_t(K) * C), tout(tin.size());
  for (double& v : tin) v = rng.normal();
  m->jvp_block_token_local(tout.data(), tin.data(), K, 1, 2);
  for (int k = 0; k < K; k++)
    for (int c = 0; c < C; c++) {
      double ref = 0;
      for (int e = 0; e < C; e++) ref += J[size_t(e) * C + c] * tin[size_t(k) * C + e];
      EXPECT_NEAR(tout[size_t(k) * C + c], ref, 1e-12 * (1 + std::abs(ref)));
    }
}

TEST(LocalJacobian, StreamJacobianAgrees) {
  // the analysis' dense builder (stream_jacobian) and the fast path give the same d x d matrix
  JacobianCase c{Placement::Post, NormKind::LayerNorm, Arch::Encoder, true, true, Activation::GeluExact};
  auto m = run(c, 1, 6);
  for (int layer : {0, 1}) {
    const std::vector<double> ref = analysis::stream_jacobian(*m, 2 * layer, 2 * layer + 2, {5}, {5});
    const std::vector<double> fast = analysis::token_local_jacobian(*m, 2 * layer, 2 * layer + 2, 5);
    ASSERT_EQ(ref.size(), fast.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); i++) {
      worst = std::max(worst, std::abs(ref[i] - fast[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
    EXPECT_LE(worst, kTol * scale);
  }
}

TEST(LocalJacobian, CausalEndToEndIsTheChainOfBlocks) {
  // causal: a tangent at token i only moves tokens >= i, which token i never reads, so the
  // end-to-end J_ii is the product of the blocks' J_ii (for every token, not only the last)
  const int T = 7;
  for (Placement p : {Placement::Pre, Placement::Post, Placement::DeepNorm})
    for (bool mlp : {true, false}) {
      JacobianCase c{p, NormKind::RMSNorm, Arch::Gpt, mlp, true, Activation::Relu};
      SCOPED_TRACE(jacobian_case_name(c));
      auto m = run(c, 1, T);
      for (int token : {0, 4, T - 1}) {
        const std::vector<double> ref = analysis::stream_jacobian(*m, 0, 4, {token}, {token});
        const std::vector<double> fast = analysis::token_local_jacobian(*m, 0, 4, token);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < ref.size(); i++) {
          worst = std::max(worst, std::abs(ref[i] - fast[i]));
          scale = std::max(scale, std::abs(ref[i]));
        }
        EXPECT_LE(worst, kTol * scale) << "token " << token;
      }
    }
}

TEST(LocalJacobian, OneTokenSequences) {
  // T = 1: attention is the value path alone (P = 1, tP = 0)
  for (Arch arch : {Arch::Gpt, Arch::Encoder})
    for (Placement p : {Placement::Post, Placement::Pre, Placement::PrePost}) {
      JacobianCase c{p, NormKind::LayerNorm, arch};
      SCOPED_TRACE(jacobian_case_name(c));
      auto m = run(c, 1, 1);
      for (int layer : {0, 1}) EXPECT_LE(block_error(*m, layer, 0, 0), kTol);
    }
}

TEST(LocalJacobian, BidirectionalEndToEndIsNotTheChain) {
  // the control for the causal shortcut: in an encoder, token i's tangent comes back to it through
  // the other tokens after two blocks, so the chain of blocks differs from the end-to-end J_ii (and
  // token_local_jacobian therefore keeps the full-sequence pass there)
  JacobianCase c{Placement::Post, NormKind::LayerNorm, Arch::Encoder, true, true, Activation::GeluExact};
  auto m = run(c, 1, 6);
  const int C = 12, token = 2;
  const std::vector<double> ref = analysis::stream_jacobian(*m, 0, 4, {token}, {token});
  EXPECT_EQ(analysis::token_local_jacobian(*m, 0, 4, token), ref);
  std::vector<double> t(size_t(C) * C, 0.0);
  for (int k = 0; k < C; k++) t[size_t(k) * C + k] = 1.0;
  for (int l = 0; l < 2; l++) m->jvp_block_token_local(t.data(), t.data(), C, l, token);
  double worst = 0, scale = 0;
  for (int k = 0; k < C; k++)
    for (int e = 0; e < C; e++) {
      worst = std::max(worst, std::abs(t[size_t(k) * C + e] - ref[size_t(e) * C + k]));
      scale = std::max(scale, std::abs(ref[size_t(e) * C + k]));
    }
  EXPECT_GT(worst, 1e-6 * scale);
}
