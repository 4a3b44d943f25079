// test_lanczos.cpp: the matrix-free extreme singular values (analysis/lanczos.h) against the dense
// SVD of stream_jacobian, multiplicities included, on briefly trained models whose Jacobians have
// exact zeros from structure (a norm ends the stack) and clusters of numerically zero values
// without it; the block eigensolver on a matrix with a repeated eigenvalue; and a budget too small
// to finish, which must say converged = false rather than report wrong values; GMRES against a
// dense LU solve.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "analysis/block_eigs.h"
#include "analysis/gmres.h"
#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "model/model.h"
#include "ops/common.h"
#include "train/optimizer.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::analysis;

namespace {

constexpr int kD = 32, kT = 8;
const char* const kText =
    "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. ";

ModelConfig small(std::vector<Placement> placement, NormKind norm, double eps,
                  Arch arch = Arch::Gpt) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = kD;
  c.n_heads = 4;
  c.n_layers = 2;
  c.seq_len = 16;
  c.placement = std::move(placement);
  c.norm = norm;
  c.eps = eps;
  return c;
}

// `steps` AdamW steps (lr 3e-3, batches of 4 sequences of kT bytes of kText) in float, then the
// parameters in double, run forward on one sequence: a model away from its initialization (gains
// and biases no longer 1 and 0), as the trained Post-LN gpt.
std::unique_ptr<Model<double>> trained(const ModelConfig& c, int steps) {
  Model<float> mf(c);
  AdamW opt(mf.table(), {});
  const int n = int(std::strlen(kText)), B = 4;
  const bool encoder = c.arch == Arch::Encoder;
  std::vector<int32_t> ids(size_t(B) * kT), labels(ids.size());
  for (int s = 1; s <= steps; s++) {
    for (int b = 0; b < B; b++)
      for (int t = 0; t < kT; t++) {
        const int at = (s * 7 + b * 11 + t) % n;
        const size_t i = size_t(b) * kT + t;
        ids[i] = uint8_t(kText[at]);
        labels[i] =
            encoder ? (t % 3 == 0 ? ids[i] : ops::kIgnoreLabel) : uint8_t(kText[(at + 1) % n]);
        if (encoder && t % 3 == 0) ids[i] = kMaskToken;  // BERT: predict the masked byte
      }
    mf.zero_grad();
    mf.forward(ids.data(), labels.data(), B, kT);
    mf.backward();
    opt.step(mf.params().data(), mf.grads().data(), 3e-3, s);
  }
  auto m = std::make_unique<Model<double>>(c);
  std::copy(mf.params().begin(), mf.params().end(), m->params().begin());
  std::vector<int32_t> one(kT), none(kT, ops::kIgnoreLabel);
  for (int t = 0; t < kT; t++) one[t] = uint8_t(kText[(5 * t + 3) % n]);
  m->forward(one.data(), none.data(), 1, kT);
  return m;
}

std::vector<int> all_tokens() {
  std::vector<int> t(kT);
  for (int i = 0; i < kT; i++) t[size_t(i)] = i;
  return t;
}

// The dense singular values of the end-to-end Jacobian, ascending.
std::vector<double> dense_ascending(const Model<double>& m) {
  const int L = m.config().n_layers;
  std::vector<double> sv =
      singular_values(stream_jacobian(m, 0, 2 * L, all_tokens(), all_tokens()), kT * kD, kT * kD);
  std::reverse(sv.begin(), sv.end());
  return sv;
}

// What `converged` promises (lanczos.h): |s - s_dense| <= kSmallestAtol sigma_max + kSmallestRtol
// s, plus the dense SVD's own rounding (~1e-15 sigma_max, here 1e-13 to spare).
void expect_smallest_match(const std::string& name, const std::vector<double>& got,
                           const std::vector<double>& dense) {
  const double smax = dense.back();
  ASSERT_LE(got.size(), dense.size()) << name;
  for (size_t i = 0; i < got.size(); i++) {
    const double tol = kSmallestAtol * smax + kSmallestRtol * dense[i] + 1e-13 * smax;
    EXPECT_NEAR(got[i], dense[i], tol)
        << name << ": smallest[" << i << "] of " << got.size() << ", got ["
        << fmt::format("{:.3e}", fmt::join(got, ", ")) << "]";
  }
}

// Singular values below this fraction of sigma_max count as (numerically) zero in the multiplicity
// checks: the dense SVD puts exact zeros at ~1e-16 sigma_max; the next values in these models are
// 1e-1 or above, or (eps > 0 Post-LN) ~1e-20 -- zero too.
constexpr double kZeroRtol = 1e-9;

int count_zeros(const std::vector<double>& ascending, size_t first_k, double smax) {
  int z = 0;
  for (size_t i = 0; i < std::min(first_k, ascending.size()); i++)
    z += ascending[i] <= kZeroRtol * smax;
  return z;
}

struct Case {
  std::string name;
  ModelConfig config;
  int structural_zeros;  // expected from the last norm: T (LayerNorm), 2T (eps = 0), 0 (RMSNorm,
                         // eps > 0)
};

std::vector<Case> cases() {
  const Placement post = Placement::Post, prepost = Placement::PrePost;
  return {
      {"post layernorm eps 1e-5", small({post}, NormKind::LayerNorm, 1e-5), kT},
      {"post layernorm eps 0", small({post}, NormKind::LayerNorm, 0.0), 2 * kT},
      {"post rmsnorm eps 1e-5", small({post}, NormKind::RMSNorm, 1e-5), 0},
      {"post rmsnorm eps 0", small({post}, NormKind::RMSNorm, 0.0), kT},

      {"prepost, post layernorm eps 1e-5", small({prepost, post}, NormKind::LayerNorm, 1e-5), kT},
      {"post, prepost layernorm eps 0", small({post, prepost}, NormKind::LayerNorm, 0.0), 2 * kT},
      {"encoder post layernorm eps 1e-5", small({post}, NormKind::LayerNorm, 1e-5, Arch::Encoder),
       kT},
  };
}

}  // namespace

TEST(BlockEigs, FindsEveryCopyOfARepeatedEigenvalue) {
  // A = Q diag(lambda) Q^T with lambda = 5 ten times, then 4.5, 4, 3.9, ... and a deflated
  // direction carrying the largest eigenvalue of all (10), which must not be found.
  const int n = 120;
  Eigen::VectorXd lambda(n);
  for (int i = 0; i < n; i++) lambda(i) = i < 10 ? 5.0 : 4.5 - 0.03 * (i - 10);
  lambda(n - 1) = 10.0;
  Rng rng(3);
  Eigen::MatrixXd G(n, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) G(i, j) = rng.normal();
  const Eigen::MatrixXd Q = Eigen::HouseholderQR<Eigen::MatrixXd>(G).householderQ();
  const Eigen::MatrixXd A = Q * lambda.asDiagonal() * Q.transpose();
  const Eigen::MatrixXd deflate = Q.rightCols(1);
  BlockEigsOptions o;
  o.nev = 12;
  o.block =
      3;  // fewer than the multiplicity: the copies beyond 3 come through the random directions
  long used = 0;
  o.affordable = [&](int cols) { return (used += cols) <= 2000; };
  const BlockEigsResult r = block_largest_eigenpairs(
      [&](const Eigen::MatrixXd& X, Eigen::MatrixXd& Y) { Y = A * X; }, n, deflate, o);
  ASSERT_TRUE(r.converged) << r.reason;
  ASSERT_EQ(r.values.size(), 12);
  for (int i = 0; i < 10; i++) EXPECT_NEAR(r.values(i), 5.0, 1e-10) << i;
  EXPECT_NEAR(r.values(10), 4.5, 1e-10);
  EXPECT_NEAR(r.values(11), 4.47, 1e-10);
  EXPECT_NEAR(r.guard, 4.44, 1e-10);
  // orthonormal eigenvectors, orthogonal to the deflated direction
  EXPECT_LT((r.vectors.transpose() * r.vectors - Eigen::MatrixXd::Identity(12, 12)).norm(), 1e-12);
  EXPECT_LT((deflate.transpose() * r.vectors).norm(), 1e-12);
  EXPECT_LT((A * r.vectors - r.vectors * r.values.asDiagonal()).norm(), 1e-9);
  // a cluster is not cut: asking for 4 returns all ten copies of 5, and the guard below them
  o.nev = 4;
  used = 0;
  const BlockEigsResult c = block_largest_eigenpairs(
      [&](const Eigen::MatrixXd& X, Eigen::MatrixXd& Y) { Y = A * X; }, n, deflate, o);
  ASSERT_TRUE(c.converged) << c.reason;
  EXPECT_EQ(c.values.size(), 10);
  EXPECT_NEAR(c.guard, 4.5, 1e-10);
}

TEST(Lanczos, SmallestWithMultiplicityAgreeWithTheDenseSvdOnTrainedModels) {
  for (const Case& cs : cases()) {
    SCOPED_TRACE(cs.name);
    const auto m = trained(cs.config, 30);
    const std::vector<double> dense = dense_ascending(*m);
    const double smax = dense.back();
    for (int k : {5, 40}) {
      const std::string name = fmt::format("{}, k = {}", cs.name, k);
      const ExtremeSingularValues x =
          extreme_singular_values(*m, 0, 4, all_tokens(), all_tokens(), k);
      ASSERT_TRUE(x.converged) << name << ": " << x.reason;
      EXPECT_EQ(x.structural_zeros, cs.structural_zeros) << name;
      EXPECT_LT(x.structural_residual, 1e-13) << name;
      EXPECT_LE(x.products, x.budget) << name;
      ASSERT_EQ(x.smallest.size(), size_t(k)) << name;
      EXPECT_TRUE(std::is_sorted(x.smallest.begin(), x.smallest.end())) << name;
      expect_smallest_match(name, x.smallest, dense);
      // the multiplicity of zero, explicitly: as many (numerically) zero values as the dense SVD
      // has
      EXPECT_EQ(count_zeros(x.smallest, size_t(k), smax), count_zeros(dense, size_t(k), smax))
          << name;
      for (int i = 0; i < std::min(k, x.structural_zeros); i++)
        EXPECT_EQ(x.smallest[size_t(i)], 0.0) << name;
      ASSERT_EQ(x.largest.size(), size_t(k)) << name;
      for (int i = 0; i < k; i++)
        EXPECT_NEAR(x.largest[size_t(i)], dense[dense.size() - 1 - size_t(i)], 1e-9 * smax) << name;
    }
  }
}

// DyT's and Derf's Jacobians are diagonal with no zero: a post block ending in one has no structural
// null space at any eps, so the smallest come from the solver alone (fresh models: after 30 steps
// of training their end-to-end spectra span ~1e-7 .. 6e-6 and the solvers need more than the test's
// budget, which they report as not converged).
TEST(Lanczos, PointwiseNormsAddNoStructuralZeros) {
  for (NormKind kind : {NormKind::DyT, NormKind::Derf}) {
    SCOPED_TRACE(to_string(kind));
    const auto m = trained(small({Placement::Post}, kind, 0.0), 0);
    const std::vector<double> dense = dense_ascending(*m);
    const ExtremeSingularValues x = extreme_singular_values(*m, 0, 4, all_tokens(), all_tokens(), 5);
    ASSERT_TRUE(x.converged) << x.reason;
    EXPECT_EQ(x.structural_zeros, 0);
    expect_smallest_match(to_string(kind), x.smallest, dense);
    for (int i = 0; i < 5; i++) EXPECT_NEAR(x.largest[size_t(i)], dense[dense.size() - 1 - size_t(i)], 1e-9 * dense.back());
  }
}

TEST(Lanczos, ZeroGainsAddStructuralZeros) {
  // RMSNorm with eps > 0 annihilates nothing; a gain of exactly 0 in the last norm zeroes that
  // output channel at every token: T more exact zeros (two zero gains: 2T)
  const auto m = trained(small({Placement::Post}, NormKind::RMSNorm, 1e-5), 30);
  const ParamSpec* gain = m->table().find("h.1.mlp.ln_out.weight");
  ASSERT_NE(gain, nullptr);
  m->params()[gain->offset + 3] = 0.0;
  m->params()[gain->offset + 17] = 0.0;
  std::vector<int32_t> ids(kT), none(kT, ops::kIgnoreLabel);
  for (int t = 0; t < kT; t++) ids[t] = uint8_t(kText[(5 * t + 3) % std::strlen(kText)]);
  m->forward(ids.data(), none.data(), 1, kT);
  const std::vector<double> dense = dense_ascending(*m);
  for (int k : {5, 40}) {
    const ExtremeSingularValues x =
        extreme_singular_values(*m, 0, 4, all_tokens(), all_tokens(), k);
    ASSERT_TRUE(x.converged) << x.reason;
    EXPECT_EQ(x.structural_zeros, 2 * kT);
    ASSERT_EQ(x.smallest.size(), size_t(k));
    expect_smallest_match(fmt::format("zero gains, k = {}", k), x.smallest, dense);
  }
}

TEST(Lanczos, ATooSmallBudgetSaysNotConvergedInsteadOfReportingWrongValues) {
  for (const Case& cs : {cases()[0], cases()[2]}) {
    SCOPED_TRACE(cs.name);
    const auto m = trained(cs.config, 30);
    const std::vector<double> dense = dense_ascending(*m);
    const ExtremeSingularValues x =
        extreme_singular_values(*m, 0, 4, all_tokens(), all_tokens(), 40, 300);
    EXPECT_FALSE(x.converged);
    EXPECT_NE(x.reason.find("budget"), std::string::npos) << x.reason;
    EXPECT_EQ(x.budget, 300);
    // at most the budget, plus what was already committed when it ran out (one block and the
    // structural certificate)
    EXPECT_LE(x.products, 300 + 8 + kT);
    // only what is certain is reported: the structural zeros, which are right
    EXPECT_EQ(x.smallest.size(), size_t(cs.structural_zeros));
    expect_smallest_match(cs.name + ", tiny budget", x.smallest, dense);
  }
}

// One whole causal block: the shift-invert solves run on the block's dense Jacobian
// (Model::block_jacobian, every right-hand side of a block step in one pass over it) instead of
// passes through the model; the values must still be the dense SVD's.
TEST(Lanczos, OneCausalBlockSolvesOnItsDenseJacobian) {
  for (Placement p : {Placement::Pre, Placement::Sandwich}) {
    ModelConfig c = small({p}, NormKind::LayerNorm, 1e-5);
    c.n_layers = 1;
    const auto m = trained(c, 30);
    ASSERT_TRUE(m->block_jacobian_covers(0, 2));
    const std::vector<double> dense = dense_ascending(*m);
    for (int k : {5, 40}) {
      const std::string name = fmt::format("{}, k = {}", to_string(p), k);
      const ExtremeSingularValues x = extreme_singular_values(*m, 0, 2, all_tokens(), all_tokens(), k);
      ASSERT_TRUE(x.converged) << name << ": " << x.reason;
      EXPECT_EQ(x.smallest_method, "inverse (block substitution)") << name;
      ASSERT_EQ(x.smallest.size(), size_t(k)) << name;
      expect_smallest_match(name, x.smallest, dense);
      for (int i = 0; i < k; i++)
        EXPECT_NEAR(x.largest[size_t(i)], dense[dense.size() - 1 - size_t(i)], 1e-9 * dense.back()) << name;
    }
  }
}

// GMRES (the shift-invert solves of non-causal models) against Eigen's LU on a nonsymmetric,
// well-conditioned matrix; too few iterations must say so; b = 0 gives z = 0
TEST(Gmres, SolvesAsDenseLuAndSaysWhenItStopsShort) {
  const int n = 40;
  Rng rng(3);
  Eigen::MatrixXd A(n, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) A(i, j) = rng.normal() / std::sqrt(double(n)) + (i == j ? 3.0 : 0.0);
  Eigen::VectorXd b(n);
  for (int i = 0; i < n; i++) b(i) = rng.normal();
  const auto apply = [&](const Eigen::VectorXd& x, Eigen::VectorXd& y) { y = A * x; };
  Eigen::VectorXd z;
  ASSERT_TRUE(gmres(apply, b, z, n, 1e-13));
  const Eigen::VectorXd ref = A.partialPivLu().solve(b);
  EXPECT_LT((z - ref).norm() / ref.norm(), 1e-11);
  EXPECT_FALSE(gmres(apply, b, z, 2, 1e-13)) << "2 iterations cannot reach 1e-13 on this system";
  EXPECT_GT((A * z - b).norm(), 1e-13 * b.norm());
  EXPECT_TRUE(gmres(apply, Eigen::VectorXd::Zero(n), z, n, 1e-13));
  EXPECT_EQ(z.norm(), 0.0);
}
