// test_rope.cpp: rotary positions by what each variant must equal, bit for bit: a base per layer
// (Gemma 3), linear scaling, a divisor per frequency (Llama 3.1's llama3, GGUF's rope_freqs) and NoPE
// layers (SmolLM3); their closed forms, gradients, config checks and JSON round trips. The gradients of
// the rotary blocks themselves are in test_model (ModelGradientsMore.RotaryAndNoPositions).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/model.h"
#include "model_fixture.h"
#include "ops/rope.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::test;

// A RoPE base per layer (Gemma 3) by what it must equal: every layer global (rope_global_every = 1) is
// the model with rope_base alone, every layer local (rope_global_every past the last layer) the model
// with rope_base = rope_local_base, bit for bit; a mixed stack equals neither; and linear scaling by s
// turns the angle at position s p into the unscaled angle at p.
TEST(ModelRope, ABasePerLayerIsTheOneBaseModelOnEachLayer) {
  ModelConfig base = tiny(Arch::Gpt, {Placement::Pre, Placement::Pre, Placement::Pre}, NormKind::RMSNorm);
  base.positions = Positions::Rope;
  base.seq_len = 8;
  base.rope_base = 1e4;
  const Tokens tok = tokens_for(base, 2, 8, 3);
  const auto logits = [&](const ModelConfig& c) { return logits_with_weights_of(base, c, tok); };
  ModelConfig all_global = base, all_local = base, local_only = base, mixed = base;
  all_global.rope_local_base = 10;
  all_global.rope_global_every = 1;
  all_local.rope_local_base = 10;
  all_local.rope_global_every = 100;
  local_only.rope_base = 10;
  mixed.rope_local_base = 10;
  mixed.rope_global_every = 2;  // layers 0 and 2 local, layer 1 global
  EXPECT_EQ(logits(all_global), logits(base));
  EXPECT_EQ(logits(all_local), logits(local_only));
  EXPECT_NE(logits(mixed), logits(base));
  EXPECT_NE(logits(mixed), logits(local_only));
  EXPECT_FALSE(mixed.rope_local(1));
  EXPECT_TRUE(mixed.rope_local(0) && mixed.rope_local(2));

  const int P = 16, R = 8;
  std::vector<double> c1(P * R / 2), s1(c1.size()), c2(c1.size()), s2(c1.size());
  ops::rope_tables(c1.data(), s1.data(), P, R, 1e4);
  ops::rope_tables(c2.data(), s2.data(), P, R, 1e4, 2.0);
  for (int p = 0; 2 * p < P; p++)
    for (int i = 0; i < R / 2; i++) {
      EXPECT_NEAR(c2[size_t(2 * p) * (R / 2) + i], c1[size_t(p) * (R / 2) + i], 1e-15);
      EXPECT_NEAR(s2[size_t(2 * p) * (R / 2) + i], s1[size_t(p) * (R / 2) + i], 1e-15);
    }
  ModelConfig bad = base;
  bad.rope_scale = 0.5;
  EXPECT_THROW(bad.validate(), Error);
  bad = base;
  bad.rope_local_base = 1;
  EXPECT_THROW(bad.validate(), Error);
  bad = base;
  bad.rope_global_every = 0;
  EXPECT_THROW(bad.validate(), Error);
}

// A divisor per frequency (Llama 3.1's llama3 scaling, a GGUF rope_freqs): all equal to s is linear
// scaling by s, bit for bit; divisors of 1 are no scaling; llama3_rope_factors against its closed form
// at a head of 12 (wavelengths 6.3, 29, 135, ...: kept, interpolated, divided) and the config's checks.
TEST(ModelRope, DivisorsPerFrequency) {
  ModelConfig base = tiny(Arch::Gpt, {Placement::Pre, Placement::Pre}, NormKind::RMSNorm);
  base.positions = Positions::Rope;
  base.seq_len = 8;
  const int pairs = base.rope_dims() / 2;
  const Tokens tok = tokens_for(base, 2, 8, 4);
  const auto logits = [&](const ModelConfig& c) { return logits_with_weights_of(base, c, tok); };
  ModelConfig linear = base, divided = base, ones = base, mixed = base;
  linear.rope_scale = 3;
  divided.rope_freq_factors.assign(size_t(pairs), 3.0);
  ones.rope_freq_factors.assign(size_t(pairs), 1.0);
  mixed.rope_freq_factors.assign(size_t(pairs), 1.0);
  mixed.rope_freq_factors.back() = 5.0;
  EXPECT_EQ(logits(divided), logits(linear));
  EXPECT_EQ(logits(ones), logits(base));
  EXPECT_NE(logits(mixed), logits(base));

  const double kPi = 3.14159265358979323846;
  const std::vector<double> f = ops::llama3_rope_factors(12, 1e4, 8.0, 1.0, 4.0, 32.0);
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[0], 1.0);  // wavelength 2 pi < 32 / 4
  const double wavelength = 2 * kPi * std::pow(1e4, 2.0 / 12), s = (32.0 / wavelength - 1.0) / 3.0;
  EXPECT_NEAR(f[1], 1.0 / ((1 - s) / 8.0 + s), 1e-12);
  EXPECT_GT(f[1], 1.0);
  EXPECT_LT(f[1], 8.0);
  for (int i = 2; i < 6; i++) EXPECT_EQ(f[size_t(i)], 8.0) << i;  // wavelengths > 32

  ModelConfig bad = base;
  bad.rope_freq_factors.assign(size_t(pairs) + 1, 1.0);
  EXPECT_THROW(bad.validate(), Error);
  bad.rope_freq_factors.assign(size_t(pairs), 0.0);
  EXPECT_THROW(bad.validate(), Error);
  bad = divided;
  bad.positions = Positions::Learned;
  EXPECT_THROW(bad.validate(), Error);
  // the config's JSON round trip keeps the divisors; a config without them writes an empty list
  const ModelConfig back = model_config_from_json(model_config_to_json(mixed), "test");
  EXPECT_EQ(back.rope_freq_factors, mixed.rope_freq_factors);
  EXPECT_EQ(model_config_to_json(base)["rope_freq_factors"], nlohmann::json::array());
}

// A factor m on cos and sin (LongRoPE's and YaRN's attention factor): with whole heads rotated it is
// the score scale m^2 (q.k over rotated dimensions only), with part of each head rotated it is not
// (the other dimensions keep their share); gradients by finite differences with partial rotary;
// yarn_rope_factors against its closed form (R 12, base 1e4, factor 4, original length 64: the
// correction range [0, 2] truncated, [0, 1.51] not); the config's checks and round trip.
TEST(ModelRope, FactorOnCosAndSin) {
  ModelConfig base = tiny(Arch::Gpt, {Placement::Pre, Placement::Pre}, NormKind::RMSNorm);
  base.positions = Positions::Rope;
  base.seq_len = 8;
  const Tokens tok = tokens_for(base, 2, 8, 6);
  const auto logits = [&](const ModelConfig& c) { return logits_with_weights_of(base, c, tok); };
  const double m = 1.3;
  ModelConfig scaled = base, scores = base;
  scaled.rope_mscale = m;
  scores.attn_scale = m * m / std::sqrt(double(base.head_size()));
  const auto a = logits(scaled), b = logits(scores);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) EXPECT_NEAR(a[i], b[i], 1e-12) << i;
  EXPECT_NE(logits(scaled), logits(base));
  ModelConfig half = base;  // 2 of each head's 4 dimensions rotate
  half.rope_fraction = 0.5;
  ModelConfig half_scaled = half, half_scores = half;
  half_scaled.rope_mscale = m;
  half_scores.attn_scale = m * m / std::sqrt(double(base.head_size()));
  const auto c = logits(half_scaled), d = logits(half_scores);
  double gap = 0;
  for (size_t i = 0; i < c.size(); i++) gap = std::max(gap, std::abs(c[i] - d[i]));
  EXPECT_GT(gap, 1e-4);
  check_model_gradients(half_scaled);

  const std::vector<double> f = ops::yarn_rope_factors(12, 1e4, 4.0, 32.0, 1.0, 64.0);
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[0], 1.0);                               // ramp 0: kept
  EXPECT_NEAR(f[1], 1.0 / (0.5 / 4.0 + 0.5), 1e-12);  // ramp 1/2: blended
  for (int i = 2; i < 6; i++) EXPECT_NEAR(f[size_t(i)], 4.0, 1e-12) << i;  // ramp 1: interpolated
  const double kPi = 3.14159265358979323846;
  const double high = 12 * std::log(64.0 / (2 * kPi)) / (2 * std::log(1e4));  // 1.51 (low: below 0)
  const std::vector<double> g = ops::yarn_rope_factors(12, 1e4, 4.0, 32.0, 1.0, 64.0, /*truncate=*/false);
  EXPECT_NEAR(g[1], 1.0 / ((1 / high) / 4.0 + 1 - 1 / high), 1e-12);
  EXPECT_NEAR(g[2], 4.0, 1e-12);

  ModelConfig bad = base;
  bad.rope_mscale = 0;
  EXPECT_THROW(bad.validate(), Error);
  bad = scaled;
  bad.positions = Positions::Learned;
  EXPECT_THROW(bad.validate(), Error);
  EXPECT_EQ(model_config_from_json(model_config_to_json(scaled), "test").rope_mscale, m);
  EXPECT_EQ(model_config_to_json(base)["rope_mscale"], 1.0);
}

// NoPE layers (SmolLM3): every layer NoPE is the model without positions, bit for bit; nope_every
// past the last layer is the plain RoPE model; a mixed stack equals neither; its gradients by
// finite differences (gpt and encoder); the config's checks and round trip.
TEST(ModelRope, NoPeLayers) {
  ModelConfig base = tiny(Arch::Gpt, {Placement::Pre, Placement::Pre, Placement::Pre}, NormKind::RMSNorm);
  base.positions = Positions::Rope;
  base.seq_len = 8;
  const Tokens tok = tokens_for(base, 2, 8, 5);
  const auto logits = [&](const ModelConfig& c) { return logits_with_weights_of(base, c, tok); };
  ModelConfig all = base, none = base, past = base, mixed = base;
  all.nope_every = 1;
  none.positions = Positions::None;
  past.nope_every = 4;
  mixed.nope_every = 2;  // layer 1 NoPE, layers 0 and 2 rotate
  EXPECT_EQ(logits(all), logits(none));
  EXPECT_EQ(logits(past), logits(base));
  EXPECT_NE(logits(mixed), logits(base));
  EXPECT_NE(logits(mixed), logits(none));
  EXPECT_TRUE(mixed.rope_at(0) && mixed.rope_at(2));
  EXPECT_FALSE(mixed.rope_at(1));
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    ModelConfig c = tiny(arch, {Placement::Pre, Placement::Pre}, NormKind::RMSNorm);
    c.positions = Positions::Rope;
    c.nope_every = 2;
    check_model_gradients(c, /*padding=*/arch == Arch::Encoder);
  }
  ModelConfig bad = mixed;
  bad.nope_every = -1;
  EXPECT_THROW(bad.validate(), Error);
  bad = mixed;
  bad.positions = Positions::Learned;
  EXPECT_THROW(bad.validate(), Error);
  EXPECT_EQ(model_config_from_json(model_config_to_json(mixed), "test").nope_every, 2);
  EXPECT_EQ(model_config_to_json(base)["nope_every"], 0);
}
