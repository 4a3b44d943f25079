// test_jvp.cpp: every kernel's forward-mode tangent (JVP) against central finite differences in
// double precision, and tied to backward by the adjoint identity <v, J u> = <J^T v, u>, with
// several tangents at once.
#include <gtest/gtest.h>

#include "check.h"
#include "model/activation_of.h"
#include "model/norm_of.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"

using namespace normlab;
using namespace normlab::ops;
using namespace normlab::test;
using Vec = std::vector<double>;

namespace {

// f: R^n -> R^m evaluated into out. Checks jvp(U) (K tangents) against central differences along
// each tangent, and <v, J u> against <J^T v, u> with J^T v from vjp.
void check_jvp(size_t n, size_t m, int K, Vec& x, const std::function<void(Vec&)>& f,
               const std::function<void(Vec&, const Vec&)>& jvp,
               const std::function<void(Vec&, const Vec&)>& vjp, double rtol = 1e-6,
               double atol = 1e-8) {
  const Vec U = randn(n * K, 1001), V = randn(m, 1002);
  Vec JU(m * K), primal(m);
  f(primal);  // the forward call saves what jvp and vjp use (statistics, probabilities)
  jvp(JU, U);
  const double h = 1e-6;
  for (int k = 0; k < K; k++) {
    const Vec saved = x;
    Vec fp(m), fm(m);
    for (size_t i = 0; i < n; i++) x[i] = saved[i] + h * U[k * n + i];
    f(fp);
    for (size_t i = 0; i < n; i++) x[i] = saved[i] - h * U[k * n + i];
    f(fm);
    x = saved;
    Vec numeric(m), analytic(JU.begin() + k * m, JU.begin() + (k + 1) * m);
    for (size_t j = 0; j < m; j++) numeric[j] = (fp[j] - fm[j]) / (2 * h);
    expect_close("jvp tangent " + std::to_string(k), analytic, numeric, rtol, atol);
  }
  Vec out(m);
  f(out);  // restore the saved activations of the primal point
  Vec JtV(n, 0.0);
  vjp(JtV, V);
  for (int k = 0; k < K; k++) {
    const Vec u(U.begin() + k * n, U.begin() + (k + 1) * n), Ju(JU.begin() + k * m, JU.begin() + (k + 1) * m);
    const double lhs = dot(V, Ju), rhs = dot(JtV, u);
    EXPECT_NEAR(lhs, rhs, 1e-10 * (std::abs(lhs) + 1)) << "adjoint identity, tangent " << k;
  }
}

}  // namespace

TEST(Jvp, LayerNormAndRMSNorm) {
  for (auto [N, C] : {std::pair{1, 2}, std::pair{3, 5}, std::pair{4, 17}}) {
    Vec x = randn(N * C, 1), w = randn(C, 2), b = randn(C, 3), y(N * C), mean(N), rstd(N);
    auto f = [&](Vec& out) {
      layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    };
    check_jvp(N * C, N * C, 3, x, f,
              [&](Vec& t, const Vec& u) {
                layernorm_jvp(t.data(), u.data(), x.data(), w.data(), mean.data(), rstd.data(), 3, N, C);
              },
              [&](Vec& g, const Vec& v) {
                Vec dw(C), db(C);
                layernorm_backward(g.data(), dw.data(), db.data(), v.data(), x.data(), w.data(),
                                   mean.data(), rstd.data(), N, C);
              });
    auto fr = [&](Vec& out) { rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5); };
    check_jvp(N * C, N * C, 2, x, fr,
              [&](Vec& t, const Vec& u) {
                rmsnorm_jvp(t.data(), u.data(), x.data(), w.data(), rstd.data(), 2, N, C);
              },
              [&](Vec& g, const Vec& v) {
                Vec dw(C);
                rmsnorm_backward(g.data(), dw.data(), v.data(), x.data(), w.data(), rstd.data(), N, C);
              });
  }
}

// Every norm kind through the seam (model/norm_of.h): JVP against finite differences and the adjoint
// identity with the backward, and the backward's parameter gradients (gain, bias, alpha, shift)
// against finite differences, on sizes 1, odd and past a column block (65).
TEST(Jvp, EveryNormKindThroughTheSeam) {
  for (NormKind kind : kNormKinds)
    for (auto [N, C] : {std::pair{1, 1}, std::pair{3, 5}, std::pair{2, 65}}) {
      SCOPED_TRACE(std::string(to_string(kind)) + " N=" + std::to_string(N) + " C=" + std::to_string(C));
      Vec x = randn(N * C, 11), w = randn(C, 12), b = randn(C, 13), alpha{0.7}, shift{-0.3}, mean(N), rstd(N);
      NormParams<double> p{w.data(), b.data(), alpha.data(), shift.data()};
      auto f = [&](Vec& out) { norm_forward(kind, out.data(), mean.data(), rstd.data(), x.data(), p, N, C, 1e-5); };
      // a kind reads only the parameters it has (C = 1 LayerNorm: the output is its bias, J = 0)
      check_jvp(N * C, N * C, 3, x, f,
                [&](Vec& t, const Vec& u) {
                  norm_jvp(kind, t.data(), u.data(), x.data(), p, mean.data(), rstd.data(), 3, N, C);
                },
                [&](Vec& g, const Vec& v) {
                  Vec dw(C), db(C), da(1), ds(1);
                  NormParams<double> dp{dw.data(), db.data(), da.data(), ds.data()};
                  norm_backward(kind, g.data(), dp, v.data(), x.data(), p, mean.data(), rstd.data(), N, C);
                });
      // the structural kernel at eps = 0 has the dimension the rank checks use (LayerNorm 2, RMSNorm 1,
      // the point-wise kinds 0), for a generic row
      if (C >= 3) {
        EXPECT_EQ(norm_structural_kernel(kind, x.data(), C, 0.0).size(), size_t(norm_kernel_dimension(kind)));
      }
      // parameter gradients of <v, y(params)>
      const Vec v = randn(N * C, 14);
      Vec out(N * C), gx(N * C, 0.0), dw(C, 0.0), db(C, 0.0), da(1, 0.0), ds(1, 0.0);
      f(out);
      NormParams<double> dp{dw.data(), db.data(), da.data(), ds.data()};
      norm_backward(kind, gx.data(), dp, v.data(), x.data(), p, mean.data(), rstd.data(), N, C);
      for (const NormParamSpec& spec : norm_param_specs(kind)) {
        const std::string suffix = spec.suffix;
        Vec& param = suffix == ".weight" ? w : suffix == ".bias" ? b : suffix == ".alpha" ? alpha : shift;
        const Vec& grad = suffix == ".weight" ? dw : suffix == ".bias" ? db : suffix == ".alpha" ? da : ds;
        auto objective = [&] {
          f(out);
          return dot(v, out);
        };
        expect_close("d" + suffix, grad, finite_diff(param, objective, 1e-6), 1e-6, 1e-8);
      }
    }
}

// Gated activations (SwiGLU, GeGLU) through the model's dispatch: (N, 2F) -> (N, F), odd F.
TEST(Jvp, GatedActivations) {
  for (Activation act : {Activation::SwiGlu, Activation::GeGlu}) {
    SCOPED_TRACE(to_string(act));
    const int N = 3, F = 5;
    Vec hid = randn(N * 2 * F, 21);
    check_jvp(N * 2 * F, N * F, 3, hid,
              [&](Vec& out) { activation_forward(act, out.data(), hid.data(), N, F); },
              [&](Vec& t, const Vec& u) { activation_jvp(act, t.data(), hid.data(), u.data(), N, F, 3); },
              [&](Vec& g, const Vec& v) { activation_backward(act, g.data(), hid.data(), v.data(), N, F); });
  }
}

TEST(Jvp, MatmulActivationsResidual) {
  const int N = 5, IC = 7, OC = 3, K = 4;
  Vec x = randn(N * IC, 4), w = randn(OC * IC, 5), b = randn(OC, 6);
  check_jvp(N * IC, N * OC, K, x,
            [&](Vec& out) { matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC); },
            [&](Vec& t, const Vec& u) { matmul_jvp(t.data(), u.data(), w.data(), K, N, IC, OC); },
            [&](Vec& g, const Vec& v) {
              Vec dw(OC * IC), db(OC);
              matmul_backward(g.data(), dw.data(), db.data(), v.data(), x.data(), w.data(), N, IC, OC);
            });
  const size_t n = 11;
  Vec a = randn(n, 7);
  check_jvp(n, n, 2, a, [&](Vec& out) { gelu_forward(out.data(), a.data(), n); },
            [&](Vec& t, const Vec& u) { gelu_jvp(t.data(), a.data(), u.data(), n, 2); },
            [&](Vec& g, const Vec& v) { gelu_backward(g.data(), a.data(), v.data(), n); });
  check_jvp(n, n, 2, a, [&](Vec& out) { gelu_exact_forward(out.data(), a.data(), n); },
            [&](Vec& t, const Vec& u) { gelu_exact_jvp(t.data(), a.data(), u.data(), n, 2); },
            [&](Vec& g, const Vec& v) { gelu_exact_backward(g.data(), a.data(), v.data(), n); });
  check_jvp(n, n, 2, a, [&](Vec& out) { relu_forward(out.data(), a.data(), n); },
            [&](Vec& t, const Vec& u) { relu_jvp(t.data(), a.data(), u.data(), n, 2); },
            [&](Vec& g, const Vec& v) { relu_backward(g.data(), a.data(), v.data(), n); });
  // gated residual (Admin's omega and LayerScale's lambda, one row of n): inputs (x, g) stacked as 2n
  Vec xg = randn(2 * n, 8), omega = randn(n, 9), lambda = randn(n, 10);
  check_jvp(2 * n, n, 3, xg,
            [&](Vec& out) {
              gated_residual_forward(out.data(), xg.data(), xg.data() + n, omega.data(), lambda.data(), int(n),
                                     1.0, 1, int(n));
            },
            [&](Vec& t, const Vec& u) {
              for (int k = 0; k < 3; k++)
                gated_residual_jvp(t.data() + k * n, u.data() + 2 * k * n, u.data() + 2 * k * n + n, omega.data(),
                                   lambda.data(), int(n), 1.0, 1, int(n));
            },
            [&](Vec& g, const Vec& v) {
              gated_residual_backward<double>(g.data(), g.data() + n, nullptr, nullptr, v.data(), xg.data(), xg.data() + n,
                                      omega.data(), lambda.data(), int(n), 1.0, 1, int(n));
            });
}

TEST(Jvp, Attention) {
  for (auto [B, T, C, NH, KVH] : {std::tuple{1, 1, 2, 1, 1}, std::tuple{2, 5, 6, 3, 3}, std::tuple{1, 7, 8, 2, 2},
                                  std::tuple{2, 5, 12, 6, 2}, std::tuple{2, 4, 8, 4, 1}})  // + grouped-query
    for (bool causal : {true, false}) {
      SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " KVH=" << KVH << " causal=" << causal);
      Vec qkv = randn(B * T * (C + 2 * KVH * (C / NH)), 9), att(B * NH * T * T), tatt(att.size());
      const int K = 3;
      // padding: row b keeps its first T - b keys (the JVP reads the masked probabilities only)
      std::vector<uint8_t> mask(size_t(B) * T, 1);
      for (int b = 0; b < B; b++)
        for (int t = std::max(1, T - b); t < T; t++) mask[size_t(b) * T + t] = 0;
      check_jvp(qkv.size(), B * T * C, K, qkv,
                [&](Vec& out) {
                  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data());
                },
                [&](Vec& t, const Vec& u) {
                  attention_jvp(t.data(), tatt.data(), u.data(), qkv.data(), att.data(), K, B, T, C, NH, KVH);
                },
                [&](Vec& g, const Vec& v) {
                  attention_backward(g.data(), tatt.data(), v.data(), qkv.data(), att.data(), B, T, C, NH, KVH, causal);
                });
    }
}
