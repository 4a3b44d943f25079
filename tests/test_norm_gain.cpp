// test_norm_gain.cpp: the largest singular value of a norm site's Jacobian (analysis/norm_gain.h)
// against LAPACK's SVD of the dense closed form, on every norm kind: random inputs and gains, gains
// that tie (ones: a fresh model's), an input that is zero at the largest gain, eps 0 and 1e-5, a site
// scale, widths 1 to 300.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "analysis/linalg.h"
#include "analysis/norm_gain.h"
#include "model/norm_of.h"

using namespace normlab;

namespace {

double dense_gain(NormKind kind, const std::vector<double>& z, const NormParams<double>& p, double eps) {
  const int d = int(z.size());
  return analysis::singular_values(norm_jacobian_closed_form(kind, z.data(), p, d, eps), d, d).front();
}

}  // namespace

TEST(NormGain, EqualsTheDenseSvdOnEveryKind) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  int compared = 0;
  for (NormKind kind : {NormKind::RMSNorm, NormKind::SSNorm, NormKind::LayerNorm, NormKind::L2, NormKind::DyT,
                        NormKind::Derf})
    for (int d : {1, 2, 3, 17, 64, 300})
      for (int gains = 0; gains < 3; gains++)  // random, all ones, random with a zero input at the largest
        for (double eps : {0.0, 1e-5})
          for (double scale : {1.0, 0.5}) {
            // d = 1: LayerNorm's and eps = 0's Jacobian is 0/0; the RMS kinds' one singular value is the
            // input's own direction, (1 - b) = eps / r^2 of the gain, which both computations reach by
            // cancellation (1e-4 apart at eps 1e-5): not a case a model's site (d >= 2) meets
            if (d == 1 && (kind == NormKind::LayerNorm || eps == 0.0 || kind == NormKind::RMSNorm ||
                           kind == NormKind::SSNorm))
              continue;
            std::vector<double> z(static_cast<size_t>(d)), weight(static_cast<size_t>(d), 1.0), bias(static_cast<size_t>(d), 0.1);
            double alpha = 0.7, shift = 0.2;
            for (double& v : z) v = 3.0 * normal(rng);
            if (gains != 1)
              for (double& v : weight) v = 1.0 + 0.5 * normal(rng);
            if (gains == 2) {
              size_t top = 0;
              for (size_t i = 1; i < weight.size(); i++)
                if (weight[i] * weight[i] > weight[top] * weight[top]) top = i;
              z[top] = 0.0;
            }
            NormParams<double> p;
            p.weight = weight.data();
            p.bias = bias.data();
            p.alpha = &alpha;
            p.shift = &shift;
            p.scale = scale;
            const double want = dense_gain(kind, z, p, eps);
            const double got = analysis::norm_jacobian_gain(kind, z.data(), p, d, eps);
            EXPECT_NEAR(got, want, 1e-11 * want + 1e-300)
                << "kind " << int(kind) << " d " << d << " gains " << gains << " eps " << eps << " scale " << scale;
            compared++;
          }
  EXPECT_GT(compared, 300);
}

// The case a big model's readings meet: a massive activation (one entry 1,000 times the others) read
// by a norm whose gains nearly tie; the secular equation's root sits within rounding of a pole.
TEST(NormGain, AMassiveEntryNextToNearlyTiedGains) {
  const int d = 256;
  std::vector<double> z(static_cast<size_t>(d), 0.01), weight(static_cast<size_t>(d), 1.0);
  z[5] = 10.0;
  for (int i = 0; i < d; i++) weight[size_t(i)] = 1.0 + 1e-9 * i;
  NormParams<double> p;
  p.weight = weight.data();
  for (double eps : {0.0, 1e-6}) {
    const double want = dense_gain(NormKind::RMSNorm, z, p, eps);
    EXPECT_NEAR(analysis::norm_jacobian_gain(NormKind::RMSNorm, z.data(), p, d, eps), want, 1e-11 * want);
  }
}
