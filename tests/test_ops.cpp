// test_ops.cpp: every kernel's backward against central finite differences in double precision,
// optimized kernels against their naive references, and the += accumulation convention.
// Sizes sweep 1, odd sizes and non-multiples of any SIMD width or tile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <limits>

#include "check.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/common.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/sgemm_avx2.h"
#include "ops/softmax_xent.h"
#include "ops/vecmath.h"

using namespace normlab;
using namespace normlab::ops;
using namespace normlab::test;
using Vec = std::vector<double>;

namespace {

// One differentiable input: its values and the gradient buffer backward adds into.
struct Input {
  const char* name;
  Vec* value;
  Vec* grad;
};

// Checks backward of loss = <w, forward(inputs)> against finite differences for every input, then
// that a second backward call doubles every gradient (the += convention).
void check_backward(std::vector<Input> inputs, const std::function<double()>& loss,
                    const std::function<void()>& backward, double rtol = kFdRtol,
                    double atol = kFdAtol) {
  for (auto& in : inputs) std::fill(in.grad->begin(), in.grad->end(), 0.0);
  backward();
  for (auto& in : inputs) {
    const Vec numeric = finite_diff(*in.value, loss);
    expect_close(std::string(in.name) + " grad vs finite differences", *in.grad, numeric, rtol, atol);
  }
  std::vector<Vec> once;
  for (auto& in : inputs) once.push_back(*in.grad);
  backward();
  for (size_t k = 0; k < inputs.size(); k++) {
    Vec twice = once[k];
    for (auto& x : twice) x *= 2;
    expect_close(std::string(inputs[k].name) + " accumulates", *inputs[k].grad, twice, 1e-12, 1e-14);
  }
}

struct Dims2 {
  int N, C;
};
const Dims2 kRowShapes[] = {{1, 1}, {1, 2}, {3, 5}, {7, 17}, {2, 33}};

}  // namespace

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  for (auto [N, C] : kRowShapes)
    for (double eps : {1e-5, 0.0}) {
      if (eps == 0.0 && C < 2) continue;  // a single channel has zero variance: undefined at eps 0
      SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " eps=" << eps);
      Vec x = randn(N * C, 1), w = randn(C, 2), b = randn(C, 3), dy = randn(N * C, 4);
      Vec y(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
      auto loss = [&] {
        layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, eps);
        return dot(y, dy);
      };
      check_backward({{"x", &x, &dx}, {"weight", &w, &dw}, {"bias", &b, &db}}, loss, [&] {
        loss();
        layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
      });
    }
}

TEST(LayerNorm, ForwardHasZeroMeanUnitVariance) {
  const int N = 4, C = 37;
  Vec x = randn(N * C, 5, 3.0), w(C, 1.0), b(C, 0.0), y(N * C), mean(N), rstd(N);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 0.0);
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += y[n * C + c] / C;
    for (int c = 0; c < C; c++) v += (y[n * C + c] - m) * (y[n * C + c] - m) / C;
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v, 1.0, 1e-12);
  }
}

TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  for (auto [N, C] : kRowShapes)
    for (double eps : {1e-5, 0.0}) {
      SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " eps=" << eps);
      Vec x = randn(N * C, 11), w = randn(C, 12), dy = randn(N * C, 14);
      Vec y(N * C), rstd(N), dx(N * C), dw(C);
      auto loss = [&] {
        rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, eps);
        return dot(y, dy);
      };
      check_backward({{"x", &x, &dx}, {"weight", &w, &dw}}, loss, [&] {
        loss();
        rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
      });
    }
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  struct D {
    int N, IC, OC;
  };
  for (auto [N, IC, OC] : {D{1, 1, 1}, D{3, 5, 7}, D{17, 13, 9}})
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(testing::Message() << "N=" << N << " IC=" << IC << " OC=" << OC);
      Vec x = randn(N * IC, 21), w = randn(OC * IC, 22), b = randn(OC, 23), dy = randn(N * OC, 24);
      Vec y(N * OC), dx(N * IC), dw(OC * IC), db(OC);
      auto loss = [&] {
        matmul_forward(y.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IC, OC);
        return dot(y, dy);
      };
      std::vector<Input> inputs = {{"x", &x, &dx}, {"weight", &w, &dw}};
      if (with_bias) inputs.push_back({"bias", &b, &db});
      check_backward(inputs, loss, [&] {
        matmul_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, dy.data(), x.data(),
                        w.data(), N, IC, OC);
      });
    }
}

TEST(Matmul, MatchesNaiveReferenceInFloat) {
  // float GEMM vs the double-accumulating naive loop: error ~ sqrt(K) * eps_f * |x||w|
  const int N = 37, IC = 129, OC = 67;
  auto tof = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  auto tod = [](const std::vector<float>& v) { return Vec(v.begin(), v.end()); };
  auto x = tof(randn(N * IC, 31)), w = tof(randn(OC * IC, 32)), b = tof(randn(OC, 33)),
       dy = tof(randn(N * OC, 34));
  std::vector<float> y(N * OC), yr(N * OC), dx(N * IC), dxr(N * IC), dw(OC * IC), dwr(OC * IC),
      db(OC), dbr(OC);
  matmul_forward(y.data(), x.data(), w.data(), b.data(), N, IC, OC);
  matmul_forward_naive(yr.data(), x.data(), w.data(), b.data(), N, IC, OC);
  matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IC, OC);
  matmul_backward_naive(dxr.data(), dwr.data(), dbr.data(), dy.data(), x.data(), w.data(), N, IC, OC);
  const double atol = 1e-5 * std::sqrt(double(IC)) * 4;  // ~4 sigma of the float rounding walk
  expect_close("out", tod(y), tod(yr), 1e-5, atol);
  expect_close("dinp", tod(dx), tod(dxr), 1e-5, atol);
  expect_close("dweight", tod(dw), tod(dwr), 1e-5, atol);
  expect_close("dbias", tod(db), tod(dbr), 1e-5, atol);
}

TEST(SgemmAvx2, MatchesTheDoubleReferenceOnEveryTranspositionEdgeAndBlock) {
  // normlab's own AVX2 GEMM (attention's on AVX2 CPUs) against a double-accumulating loop: sizes
  // below, at and past its 6 x 16 tile and its K (256), row (144) and column (2048) blocks; leading
  // dimensions wider than the matrices; alpha != 1; beta 0 over a C full of NaN (C must not be read),
  // beta 1 and beta -0.5. Every call is repeated: the same bits.
  struct Size {
    int M, N, K;
  };
  const Size sizes[] = {{1, 1, 1},     {6, 16, 8},    {7, 17, 3},    {5, 15, 256}, {13, 33, 257},
                        {145, 20, 31}, {12, 2049, 9}, {150, 40, 600}, {3, 5, 0},
                        {128, 16, 300}, {131, 32, 16}, {64, 48, 70}};  // (narrow: A's rows read in place)
  uint64_t seed = 70;
  for (const Size& sz : sizes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          const int M = sz.M, N = sz.N, K = sz.K, pad = 3;
          const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          const Vec ad = randn(size_t(ta ? K : M) * lda + 1, seed++), bd = randn(size_t(tb ? N : K) * ldb + 1, seed++),
                    cd = randn(size_t(M) * ldc, seed++);
          const std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end());
          std::vector<float> c(cd.begin(), cd.end());
          if (beta == 0.0f) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
          const std::vector<float> c0 = c;
          const float alpha = 0.75f;
          sgemm_avx2(ta ? Trans::Yes : Trans::No, tb ? Trans::Yes : Trans::No, M, N, K, alpha, a.data(), lda,
                     b.data(), ldb, beta, c.data(), ldc);
          std::vector<float> again = c0;
          sgemm_avx2(ta ? Trans::Yes : Trans::No, tb ? Trans::Yes : Trans::No, M, N, K, alpha, a.data(), lda,
                     b.data(), ldb, beta, again.data(), ldc);
          for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
              double sum = 0, mag = 0;
              for (int k = 0; k < K; k++) {
                const double x = a[ta ? (long)k * lda + i : (long)i * lda + k],
                             y = b[tb ? (long)j * ldb + k : (long)k * ldb + j];
                sum += x * y;
                mag += std::abs(x * y);
              }
              const long at = (long)i * ldc + j;
              const double want = alpha * sum + (beta != 0.0f ? beta * double(c0[at]) : 0.0);
              const double tol = 4e-7 * (alpha * mag + std::abs(beta * double(beta != 0.0f ? c0[at] : 0.0f))) + 1e-30;
              ASSERT_NEAR(c[at], want, tol) << "M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb
                                            << " beta " << beta << " at (" << i << ", " << j << ")";
              ASSERT_EQ(std::memcmp(&c[at], &again[at], sizeof(float)), 0) << "not repeatable at " << at;
            }
          // the padding between rows of C is never written
          for (int i = 0; i < M; i++)
            for (int j = N; j < ldc; j++) {
              const long at = (long)i * ldc + j;
              ASSERT_TRUE(std::isnan(c0[at]) ? std::isnan(c[at]) : c[at] == c0[at]) << "padding written at " << at;
            }
        }
}

struct AttnDims {
  int B, T, C, NH;
};
// T = 70 and 33 take attention's causal row blocks (32 rows) past one block, the last one partial
const AttnDims kAttnShapes[] = {{1, 1, 1, 1}, {2, 5, 6, 3}, {1, 7, 8, 2}, {3, 4, 12, 4}, {1, 70, 4, 2}, {2, 33, 6, 3}};

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (auto [B, T, C, NH] : kAttnShapes)
    for (bool causal : {true, false}) {
      SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH
                                      << " causal=" << causal);
      Vec qkv = randn(B * T * 3 * C, 41), dy = randn(B * T * C, 42);
      Vec y(B * T * C), att(B * NH * T * T), datt(B * NH * T * T), dqkv(qkv.size());
      auto loss = [&] {
        attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, NH, causal);
        return dot(y, dy);
      };
      check_backward({{"qkv", &qkv, &dqkv}}, loss, [&] {
        loss();
        attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C,
                           NH, NH, causal);
      });
    }
}

// Grouped-query attention: KVH key-value heads shared by NH / KVH query heads each (1: multi-query;
// NH: multi-head), qkv (B, T, C + 2 KVH HS): against finite differences and the naive reference,
// with padding, causal and not, T = 1 included.
TEST(Attention, GroupedQueryMatchesNaiveAndFiniteDifferences) {
  for (auto [B, T, C, NH] : {std::tuple{2, 5, 12, 6}, std::tuple{1, 1, 8, 4}, std::tuple{2, 7, 18, 3}})
    for (int KVH = 1; KVH <= NH; KVH++) {
      if (NH % KVH) continue;
      for (bool causal : {true, false}) {
        SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " NH=" << NH << " KVH=" << KVH << " causal=" << causal);
        const int W = C + 2 * KVH * (C / NH);
        Vec qkv = randn(B * T * W, 61, 1.5), dy = randn(B * T * C, 62);
        Vec y(B * T * C), yr(y.size()), att(B * NH * T * T), attr(att.size()), datt(att.size());
        Vec dqkv(qkv.size()), dqkvr(qkv.size());
        std::vector<uint8_t> mask(size_t(B) * T, 1);
        if (T > 2) mask[size_t(B) * T - 1] = 0;  // the last row's last key is padding
        attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data());
        attention_forward_naive(yr.data(), attr.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data());
        attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, KVH, causal);
        attention_backward_naive(dqkvr.data(), dy.data(), qkv.data(), attr.data(), B, T, C, NH, KVH, causal);
        expect_close("out", y, yr, 1e-12, 1e-13);
        expect_close("dqkv", dqkv, dqkvr, 1e-11, 1e-12);
        std::fill(dqkv.begin(), dqkv.end(), 0.0);
        auto loss = [&] {
          attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data());
          return dot(y, dy);
        };
        check_backward({{"qkv", &qkv, &dqkv}}, loss, [&] {
          loss();
          attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, KVH, causal);
        });
      }
    }
}

TEST(Attention, MatchesNaiveReference) {
  for (auto [B, T, C, NH] : kAttnShapes)
    for (bool causal : {true, false}) {
      Vec qkv = randn(B * T * 3 * C, 51, 2.0), dy = randn(B * T * C, 52);
      Vec y(B * T * C), yr(B * T * C), att(B * NH * T * T), attr(att.size()), datt(att.size());
      Vec dqkv(qkv.size()), dqkvr(qkv.size());
      attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, NH, causal);
      attention_forward_naive(yr.data(), attr.data(), qkv.data(), B, T, C, NH, NH, causal);
      attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, NH, causal);
      attention_backward_naive(dqkvr.data(), dy.data(), qkv.data(), attr.data(), B, T, C, NH, NH, causal);
      expect_close("out", y, yr, 1e-12, 1e-13);
      expect_close("att", att, attr, 1e-12, 1e-13);
      expect_close("dqkv", dqkv, dqkvr, 1e-11, 1e-12);
      if (causal) {  // no probability on future keys
        for (int bh = 0; bh < B * NH; bh++)
          for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++) EXPECT_EQ(att[(bh * T + i) * T + j], 0.0);
      }
    }
}

// A padding mask (B, T): row b keeps its first T - b keys (at least one).
std::vector<uint8_t> right_padding(int B, int T) {
  std::vector<uint8_t> m(size_t(B) * T, 1);
  for (int b = 0; b < B; b++)
    for (int t = std::max(1, T - b); t < T; t++) m[size_t(b) * T + t] = 0;
  return m;
}

TEST(Attention, KeyMaskBackwardMatchesFiniteDifferencesAndNaive) {
  for (auto [B, T, C, NH] : kAttnShapes)
    for (bool causal : {true, false}) {
      SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " causal=" << causal);
      const std::vector<uint8_t> mask = right_padding(B, T);
      Vec qkv = randn(B * T * 3 * C, 43, 2.0), dy = randn(B * T * C, 44);
      Vec y(B * T * C), yr(y.size()), att(B * NH * T * T), attr(att.size()), datt(att.size()), dqkv(qkv.size());
      auto loss = [&] {
        attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, NH, causal, mask.data());
        return dot(y, dy);
      };
      check_backward({{"qkv", &qkv, &dqkv}}, loss, [&] {
        loss();
        attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, NH, causal);
      });
      attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, NH, causal, mask.data());
      attention_forward_naive(yr.data(), attr.data(), qkv.data(), B, T, C, NH, NH, causal, mask.data());
      expect_close("masked out", y, yr, 1e-12, 1e-13);
      expect_close("masked att", att, attr, 1e-12, 1e-13);
      for (int b = 0; b < B; b++)  // no probability on a padded key, from any query
        for (int h = 0; h < NH; h++)
          for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
              if (!mask[size_t(b) * T + j]) {
                EXPECT_EQ(att[((size_t(b) * NH + h) * T + i) * T + j], 0.0);
              }
            }
    }
}

TEST(Attention, FloatMatchesTheDoubleReferenceAcrossRowBlocks) {
  // the float path (its GEMMs on the CPU's own kernels: normlab's AVX2 kernel or OpenBLAS) with
  // several causal row blocks, a key mask and grouped-query heads, against the double reference
  const int B = 2, T = 75, C = 24, NH = 4, KVH = 2, HS = C / NH, C3 = C + 2 * KVH * HS;
  const Vec qkvd = randn(B * T * C3, 61, 1.5), dyd = randn(B * T * C, 62);
  std::vector<uint8_t> mask(B * T, 1);
  mask[3] = mask[T + 40] = 0;
  for (bool causal : {true, false})
    for (const uint8_t* km : {(const uint8_t*)nullptr, (const uint8_t*)mask.data()}) {
      const std::vector<float> qkv(qkvd.begin(), qkvd.end()), dy(dyd.begin(), dyd.end());
      std::vector<float> y(B * T * C), att(B * NH * T * T), datt(att.size()), dqkv(qkv.size());
      Vec yr(y.size()), attr(att.size()), dqkvr(qkv.size());
      attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, km);
      attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, KVH, causal);
      attention_forward_naive(yr.data(), attr.data(), qkvd.data(), B, T, C, NH, KVH, causal, km);
      attention_backward_naive(dqkvr.data(), dyd.data(), qkvd.data(), attr.data(), B, T, C, NH, KVH, causal);
      expect_close("out", Vec(y.begin(), y.end()), yr, 1e-4, 1e-5);
      expect_close("att", Vec(att.begin(), att.end()), attr, 1e-4, 1e-6);
      expect_close("dqkv", Vec(dqkv.begin(), dqkv.end()), dqkvr, 1e-4, 1e-5);
    }
}

// A learned sink logit per query head (gpt-oss): against the naive reference (its own loop), against
// the softmax written out over the scores and the sink (the reference code's concatenated column, then
// dropped), finite differences in qkv and the sinks, grouped-query heads, padding, causal and not, T = 1;
// a sink far below every score changes nothing (bit for bit), and the float path across row blocks.
TEST(Attention, SinkLogitsMatchTheConcatenatedSoftmaxNaiveAndFiniteDifferences) {
  for (auto [B, T, C, NH, KVH] : {std::tuple{2, 5, 12, 6, 3}, std::tuple{1, 1, 8, 4, 4}, std::tuple{2, 7, 18, 3, 1}})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " NH=" << NH << " KVH=" << KVH << " causal=" << causal);
      const int HS = C / NH, W = C + 2 * KVH * HS;
      Vec qkv = randn(B * T * W, 71, 1.5), dy = randn(B * T * C, 72), sink = randn(NH, 73, 1.5);
      std::vector<uint8_t> mask(size_t(B) * T, 1);
      if (T > 2) mask[size_t(B) * T - 1] = 0;
      Vec y(B * T * C), yr(y.size()), att(B * NH * T * T), attr(att.size()), datt(att.size());
      Vec dqkv(qkv.size()), dqkvr(qkv.size()), dsink(NH), dsinkr(NH);
      attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data(), Precision::Fp32, {},
                        sink.data());
      attention_forward_naive(yr.data(), attr.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data(), sink.data());
      attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, KVH, causal,
                         Precision::Fp32, {}, dsink.data());
      attention_backward_naive(dqkvr.data(), dy.data(), qkv.data(), attr.data(), B, T, C, NH, KVH, causal,
                               dsinkr.data());
      expect_close("out", y, yr, 1e-12, 1e-13);
      expect_close("att", att, attr, 1e-12, 1e-13);
      expect_close("dqkv", dqkv, dqkvr, 1e-11, 1e-12);
      expect_close("dsink", dsink, dsinkr, 1e-11, 1e-12);
      // the written-out softmax over [scores | sink] with the sink's column dropped
      for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
          for (int i = 0; i < T; i++) {
            std::vector<double> z;
            for (int j = 0; j < T; j++) {
              double s = -std::numeric_limits<double>::infinity();
              if ((!causal || j <= i) && mask[size_t(b) * T + j]) {
                s = 0;
                for (int e = 0; e < HS; e++)
                  s += qkv[(size_t(b) * T + i) * W + h * HS + e] * qkv[(size_t(b) * T + j) * W + C + (h / (NH / KVH)) * HS + e];
                s /= std::sqrt(double(HS));
              }
              z.push_back(s);
            }
            z.push_back(sink[h]);
            double mx = -std::numeric_limits<double>::infinity(), sum = 0;
            for (double v : z) mx = std::max(mx, v);
            for (double v : z) sum += std::exp(v - mx);
            for (int j = 0; j < T; j++)
              EXPECT_NEAR(att[((size_t(b) * NH + h) * T + i) * T + j], std::exp(z[size_t(j)] - mx) / sum, 1e-14);
          }
      std::fill(dqkv.begin(), dqkv.end(), 0.0);
      auto loss = [&] {
        attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data(), Precision::Fp32, {},
                          sink.data());
        return dot(y, dy);
      };
      check_backward({{"qkv", &qkv, &dqkv}, {"sink", &sink, &dsink}}, loss, [&] {
        loss();
        attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, KVH, causal,
                           Precision::Fp32, {}, dsink.data());
      });
      // a sink far below every score: the plain softmax, bit for bit
      Vec far(NH, -1e4), y0(y.size()), att0(att.size());
      attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data(), Precision::Fp32, {},
                        far.data());
      attention_forward(y0.data(), att0.data(), qkv.data(), B, T, C, NH, KVH, causal, mask.data());
      EXPECT_EQ(y, y0);
      EXPECT_EQ(att, att0);
    }
  // float, several causal row blocks, against the double reference
  const int B = 2, T = 75, C = 24, NH = 4, KVH = 2, C3 = C + 2 * KVH * (C / NH);
  const Vec qkvd = randn(B * T * C3, 74, 1.5), dyd = randn(B * T * C, 75), sinkd = randn(NH, 76, 2.0);
  const std::vector<float> qkv(qkvd.begin(), qkvd.end()), dy(dyd.begin(), dyd.end()), sink(sinkd.begin(), sinkd.end());
  std::vector<float> y(B * T * C), att(B * NH * T * T), datt(att.size()), dqkv(qkv.size()), dsink(NH);
  Vec yr(y.size()), attr(att.size()), dqkvr(qkv.size()), dsinkr(NH);
  attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, KVH, true, nullptr, Precision::Fp32, {}, sink.data());
  attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH, KVH, true,
                     Precision::Fp32, {}, dsink.data());
  attention_forward_naive(yr.data(), attr.data(), qkvd.data(), B, T, C, NH, KVH, true, nullptr, sinkd.data());
  attention_backward_naive(dqkvr.data(), dyd.data(), qkvd.data(), attr.data(), B, T, C, NH, KVH, true, dsinkr.data());
  expect_close("float out", Vec(y.begin(), y.end()), yr, 1e-4, 1e-5);
  expect_close("float att", Vec(att.begin(), att.end()), attr, 1e-4, 1e-6);
  expect_close("float dqkv", Vec(dqkv.begin(), dqkv.end()), dqkvr, 1e-4, 1e-5);
  expect_close("float dsink", Vec(dsink.begin(), dsink.end()), dsinkr, 1e-4, 1e-4);
}

TEST(Attention, SoftmaxIsStableForHugeScores) {
  const int B = 1, T = 3, C = 2, NH = 1;
  Vec qkv(B * T * 3 * C, 0.0);
  for (int t = 0; t < T; t++) qkv[t * 3 * C + 0] = qkv[t * 3 * C + C] = 1e3 * (t + 1);
  Vec y(B * T * C), att(T * T);
  attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH, NH, false);
  for (double a : att) EXPECT_TRUE(std::isfinite(a));
}

TEST(Activation, GeluAndReluBackwardMatchFiniteDifferences) {
  for (size_t n : {1, 7, 33}) {
    Vec x = randn(n, 61, 2.0), dy = randn(n, 62), y(n), dx(n);
    for (auto& v : x)  // ReLU's kink at 0: keep inputs away from it
      if (std::abs(v) < 1e-3) v = 0.5;
    auto gelu_loss = [&] {
      gelu_forward(y.data(), x.data(), n);
      return dot(y, dy);
    };
    check_backward({{"gelu x", &x, &dx}}, gelu_loss,
                   [&] { gelu_backward(dx.data(), x.data(), dy.data(), n); });
    auto relu_loss = [&] {
      relu_forward(y.data(), x.data(), n);
      return dot(y, dy);
    };
    check_backward({{"relu x", &x, &dx}}, relu_loss,
                   [&] { relu_backward(dx.data(), x.data(), dy.data(), n); });
  }
}

TEST(Activation, ExactGeluBackwardMatchesFiniteDifferencesAndKnownValues) {
  for (size_t n : {1, 7, 33}) {
    Vec x = randn(n, 63, 2.0), dy = randn(n, 64), y(n), dx(n);
    auto loss = [&] {
      gelu_exact_forward(y.data(), x.data(), n);
      return dot(y, dy);
    };
    check_backward({{"gelu_exact x", &x, &dx}}, loss,
                   [&] { gelu_exact_backward(dx.data(), x.data(), dy.data(), n); });
  }
  // x Phi(x) at x = -1, 1, 2 (Phi from tables of the normal distribution, 16 digits)
  Vec x = {-1.0, 1.0, 2.0, 0.0}, y(4);
  gelu_exact_forward(y.data(), x.data(), 4);
  EXPECT_NEAR(y[0], -0.15865525393145707, 1e-15);
  EXPECT_NEAR(y[1], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(y[2], 2 * 0.9772498680518208, 1e-15);
  EXPECT_EQ(y[3], 0.0);
}

TEST(Embedding, TokenTypeBackwardMatchesFiniteDifferences) {
  const int N = 7, C = 5, types = 3;
  Vec wtt = randn(types * C, 71), dy = randn(N * C, 72), y(N * C), dwtt(wtt.size());
  const std::vector<int32_t> tt = {0, 2, 2, 1, 0, 2, 1};
  auto loss = [&] {
    std::fill(y.begin(), y.end(), 0.0);
    token_type_forward(y.data(), tt.data(), wtt.data(), N, C);
    return dot(y, dy);
  };
  check_backward({{"wtt", &wtt, &dwtt}}, loss, [&] { token_type_backward(dwtt.data(), dy.data(), tt.data(), N, C); });
}

TEST(Activation, GeluMatchesClosedFormValues) {
  Vec x = {-3.0, -1.0, 0.0, 0.5, 2.0}, y(5);
  gelu_forward(y.data(), x.data(), 5);
  for (int i = 0; i < 5; i++) {
    const double v = x[i];
    const double expected = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y[i], expected, 1e-15);
  }
}

// out = omega * x + lambda * g over N rows of C: the constant alpha (1, 0, DeepNet's), Admin's
// per-channel omega, and ReZero/SkipInit's scalar or LayerScale's per-channel lambda.
TEST(Residual, GatedAddBackward) {
  const int N = 3, C = 5;
  const size_t n = size_t(N) * C;
  struct Case {
    double alpha;
    bool omega;
    int lambda_c;  // 0: lambda = 1
  };
  for (Case c : {Case{1.0, false, 0}, Case{0.0, false, 0}, Case{1.6817928305074290, false, 0},
                 Case{1.0, true, 0}, Case{1.0, false, 1}, Case{1.0, true, C}}) {
    Vec x = randn(n, 71), g = randn(n, 72), dy = randn(n, 73), y(n), dx(n), dg(n);
    Vec omega = randn(C, 74), domega(C), lambda = randn(std::max(c.lambda_c, 1), 75), dlambda(lambda.size());
    const double* w = c.omega ? omega.data() : nullptr;
    const double* l = c.lambda_c ? lambda.data() : nullptr;
    auto loss = [&] {
      gated_residual_forward(y.data(), x.data(), g.data(), w, l, c.lambda_c, c.alpha, N, C);
      return dot(y, dy);
    };
    std::vector<Input> params = {{"x", &x, &dx}, {"g", &g, &dg}};
    if (c.omega) params.push_back({"omega", &omega, &domega});
    if (c.lambda_c) params.push_back({"lambda", &lambda, &dlambda});
    check_backward(params, loss, [&] {
      gated_residual_backward(dx.data(), dg.data(), domega.data(), dlambda.data(), dy.data(), x.data(), g.data(),
                              w, l, c.lambda_c, c.alpha, N, C);
    });
  }
}

TEST(SoftmaxXent, BackwardMatchesFiniteDifferences) {
  for (auto [N, V] : {Dims2{1, 1}, Dims2{1, 3}, Dims2{5, 7}, Dims2{4, 257}}) {
    Vec logits = randn(N * V, 81, 3.0), lse(N), work(N * V), dlogits(N * V);
    std::vector<int32_t> labels(N);
    Rng rng(82);
    for (int n = 0; n < N; n++) labels[n] = int32_t(rng.below(V));
    if (N > 2) labels[1] = kIgnoreLabel;
    int64_t count = 0;
    auto loss = [&] { return softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count); };
    loss();
    work = logits;
    softmax_xent_backward(work.data(), lse.data(), labels.data(), 1.0, N, V);
    expect_close("dlogits", work, finite_diff(logits, loss), kFdRtol, kFdAtol);
    EXPECT_EQ(count, N > 2 ? N - 1 : N);
  }
}

// Label smoothing: the loss against the naive sum -sum_v target_v log p_v (target (1 - eps) onehot +
// eps / V, PyTorch's CrossEntropyLoss(label_smoothing=eps)), and its backward (with and without the
// soft cap) against finite differences; eps = 0 gives plain cross-entropy bit for bit.
// The training loss's extra terms against the naive sum over labelled rows of
// -sum_v target_v log p_v (target (1 - eps) one-hot + eps / V: label smoothing) + zeta (log Z)^2
// (z-loss: PaLM; Wortsman et al.), its backward (with and without the soft cap) against finite
// differences, and the neutral values (eps = 0, zeta = 0) giving the plain loss and gradient bit for
// bit. seed: the logits' and labels'; shift: added to each row's first logit (log Z away from 0).
namespace {
void check_loss_terms(double eps, double zeta, uint64_t seed, double shift) {
  for (auto [N, V] : {Dims2{1, 2}, Dims2{5, 7}, Dims2{3, 257}}) {
    SCOPED_TRACE(fmt::format("eps {} zeta {} N {} V {}", eps, zeta, N, V));
    Vec logits = randn(N * V, seed, 3.0), lse(N), work(N * V);
    for (int n = 0; n < N; n++) logits[size_t(n * V)] += shift;
    std::vector<int32_t> labels(N);
    Rng rng(seed + 1);
    for (int n = 0; n < N; n++) labels[n] = int32_t(rng.below(V));
    if (N > 2) labels[2] = kIgnoreLabel;
    int64_t count = 0;
    double naive = 0;
    for (int n = 0; n < N; n++) {
      if (labels[n] == kIgnoreLabel) continue;
      double z = 0;
      for (int v = 0; v < V; v++) z += std::exp(logits[size_t(n * V + v)]);
      for (int v = 0; v < V; v++) {
        const double target = (v == labels[n] ? 1 - eps : 0.0) + eps / V;
        naive -= target * (logits[size_t(n * V + v)] - std::log(z));
      }
      naive += zeta * std::log(z) * std::log(z);
    }
    EXPECT_NEAR(softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count, eps, zeta), naive,
                1e-12 * std::abs(naive));
    for (double cap : {0.0, 4.0}) {
      Vec capped = logits;
      if (cap > 0) softcap_in_place(capped.data(), capped.size(), cap);
      auto loss = [&] {
        Vec y = logits;
        if (cap > 0) softcap_in_place(y.data(), y.size(), cap);
        return softmax_xent_forward(lse.data(), y.data(), labels.data(), N, V, &count, eps, zeta);
      };
      loss();
      work = capped;
      softmax_xent_backward(work.data(), lse.data(), labels.data(), 1.0, N, V, cap, eps, zeta);
      expect_close(cap > 0 ? "dlogits capped" : "dlogits", work, finite_diff(logits, loss), kFdRtol, kFdAtol);
    }
    // each term at its neutral value is the call without it, bit for bit
    Vec plain = logits, neutral = logits;
    EXPECT_EQ(softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count, eps),
              softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count, eps, 0.0));
    EXPECT_EQ(softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count),
              softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count, 0.0, 0.0));
    softmax_xent_backward(plain.data(), lse.data(), labels.data(), 0.5, N, V, 0.0, eps);
    softmax_xent_backward(neutral.data(), lse.data(), labels.data(), 0.5, N, V, 0.0, eps, 0.0);
    EXPECT_EQ(plain, neutral);
  }
}
}  // namespace

TEST(SoftmaxXent, LabelSmoothingMatchesTheNaiveTargetAndFiniteDifferences) { check_loss_terms(0.1, 0.0, 83, 0.0); }

TEST(SoftmaxXent, ZLossMatchesTheNaiveSumAndFiniteDifferences) {
  for (double eps : {0.0, 0.1}) check_loss_terms(eps, 0.05, 85, 4.0);
}

TEST(SoftmaxXent, LossMatchesLogSoftmaxAndIsStable) {
  const int N = 2, V = 3;
  Vec logits = {1000.0, 1001.0, 999.0, -5.0, 0.0, 5.0}, lse(N);
  std::vector<int32_t> labels = {1, 0};
  int64_t count = 0;
  const double sum = softmax_xent_forward(lse.data(), logits.data(), labels.data(), N, V, &count);
  const double row0 = -(1001.0 - (1000.0 + std::log(std::exp(0.0) + std::exp(1.0) + std::exp(-1.0))));
  const double row1 = -(-5.0 - (5.0 + std::log(std::exp(-10.0) + std::exp(-5.0) + 1.0)));
  EXPECT_NEAR(sum, row0 + row1, 1e-12);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 3, V = 4, maxT = 7;
  Vec wte = randn(V * C, 91), wpe = randn(maxT * C, 92), dy = randn(B * T * C, 93);
  Vec y(B * T * C), dwte(V * C), dwpe(maxT * C);
  std::vector<int32_t> ids = {0, 3, 3, 1, 0, 2, 2, 2, 3, 1};  // repeated ids accumulate
  auto loss = [&] {
    embedding_forward(y.data(), ids.data(), wte.data(), wpe.data(), B, T, C);
    return dot(y, dy);
  };
  check_backward({{"wte", &wte, &dwte}, {"wpe", &wpe, &dwpe}}, loss,
                 [&] { embedding_backward(dwte.data(), dwpe.data(), dy.data(), ids.data(), B, T, C); });
}

TEST(Dropout, MaskIsSeededAndBackwardMatches) {
  const size_t n = 20000;
  const double p = 0.3;
  Vec x = randn(n, 101), y(n), y2(n), dy = randn(n, 102), dx(n);
  dropout_forward(y.data(), x.data(), p, 7, n);
  dropout_forward(y2.data(), x.data(), p, 7, n);
  EXPECT_EQ(y, y2);
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) kept += y[i] != 0.0;
  EXPECT_NEAR(double(kept) / n, 1 - p, 0.02);  // binomial sd = 0.0032
  Vec small = randn(9, 103), ysmall(9), dysmall = randn(9, 104), dsmall(9);
  auto loss = [&] {
    dropout_forward(ysmall.data(), small.data(), p, 9, 9);
    return dot(ysmall, dysmall);
  };
  check_backward({{"x", &small, &dsmall}}, loss,
                 [&] { dropout_backward(dsmall.data(), dysmall.data(), p, 9, 9); });
}

// The float path draws eight masks at a time (AVX2); every mask must be the documented function of
// (seed, index): splitmix64 of seed + golden (i + 1), kept when its top 53 bits / 2^53 >= p, written
// out here independently, at every offset, length and p; double (scalar) draws the same masks.
TEST(Dropout, TheVectorMasksAreTheScalarFunctionOfSeedAndIndex) {
  const auto kept = [](uint64_t seed, uint64_t i, double p) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return double(z >> 11) * 0x1.0p-53 >= p;
  };
  for (double p : {0.1, 0.5, 0.9, 1e-12})
    for (size_t n : {size_t(1), size_t(8), size_t(13), size_t(4099)})
      for (size_t first : {size_t(0), size_t(3), size_t(1) << 40}) {
        std::vector<float> x(n), y(n), d(n, -0.0f), g(n);
        std::vector<double> xd(n), yd(n);
        for (size_t i = 0; i < n; i++) x[i] = xd[i] = g[i] = float(i % 7) + 0.5f;
        dropout_forward(y.data(), x.data(), p, 77, n, first);
        dropout_forward(yd.data(), xd.data(), p, 77, n, first);
        dropout_backward(d.data(), g.data(), p, 77, n, first);
        const float scale = float(1.0 / (1.0 - p));
        for (size_t i = 0; i < n; i++) {
          const bool k = kept(77, first + i, p);
          ASSERT_EQ(y[i], k ? x[i] * scale : 0.0f) << "p " << p << " n " << n << " first " << first << " i " << i;
          ASSERT_EQ(yd[i] != 0.0, k) << i;
          if (k) ASSERT_EQ(d[i], std::fma(g[i], scale, -0.0f)) << i;
          else ASSERT_TRUE(d[i] == 0.0f && std::signbit(d[i])) << "a dropped element's gradient must keep its bits";
        }
      }
}

TEST(VecMath, ExpFastIsAccurateAndKeepsNaNAndInf) {
  // relative error against the double-precision exp across the float range: a few ulp (2^-23)
  double worst = 0;
  for (double x = -87.0; x <= 88.5; x += 0.001) {
    const double exact = std::exp(double(float(x)));
    worst = std::max(worst, std::abs(exp_fast(float(x)) - exact) / exact);
  }
  EXPECT_LT(worst, 4 * 1.2e-7);
  EXPECT_TRUE(std::isnan(exp_fast(NAN)));
  EXPECT_EQ(exp_fast(INFINITY), INFINITY);
  EXPECT_EQ(exp_fast(100.0f), INFINITY);
  EXPECT_EQ(exp_fast(-INFINITY), 0.0f);
  EXPECT_EQ(exp_fast(-100.0f), 0.0f);
  EXPECT_EQ(exp_fast(0.0f), 1.0f);
}

TEST(Activation, FloatGeluMatchesDoubleClosedForm) {
  std::vector<float> x(2001), y(2001), dx(2001, 0.0f), dy(2001, 1.0f);
  for (int i = 0; i < 2001; i++) x[i] = -10.0f + 0.01f * i;
  gelu_forward(y.data(), x.data(), x.size());
  gelu_backward(dx.data(), x.data(), dy.data(), x.size());
  for (int i = 0; i < 2001; i++) {
    const double v = x[i], u = std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
    const double expected = 0.5 * v * (1 + std::tanh(u));
    const double th = std::tanh(u), du = std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * v * v);
    const double dexpected = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * du;
    EXPECT_NEAR(y[i], expected, 1e-6 * (1 + std::abs(expected))) << "x=" << v;
    EXPECT_NEAR(dx[i], dexpected, 1e-6 * (1 + std::abs(dexpected))) << "x=" << v;
  }
}
