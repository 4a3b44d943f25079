// test_optimizer.cpp: the optimizer layer: the learning-rate schedules against their closed forms,
// AdamW against a scalar hand computation, clipping folded into the step, the watched update (each
// tensor's values before and after, bit for bit the plain update) and the refusal of moments the
// machine cannot hold.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "train/step.h"
#include "util/error.h"

using namespace normlab;

namespace {

// One layer of width 4: a parameter table small enough to step by hand.
ModelConfig tiny_config() {
  ModelConfig c;
  c.d_model = 4;
  c.n_heads = 1;
  c.n_layers = 1;
  c.seq_len = 2;
  return c;
}

}  // namespace

TEST(Schedule, MatchesClosedForms) {
  ScheduleConfig s{Schedule::Warmup, 1.0, 10, 0.0, 100};
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 50), 1.0);
  s.kind = Schedule::InvSqrt;
  EXPECT_DOUBLE_EQ(learning_rate(s, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(s, 40), std::sqrt(10.0 / 40));
  s.kind = Schedule::Cosine;
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1.0);
  EXPECT_NEAR(learning_rate(s, 55), 0.1 + 0.45 * (1 + std::cos(M_PI * 0.5)), 1e-15);
  EXPECT_NEAR(learning_rate(s, 100), 0.1, 1e-15);
  s.kind = Schedule::Constant;
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 1.0);
}

TEST(AdamW, MatchesHandComputedSteps) {
  const ParamTable table = make_param_table(tiny_config());
  AdamWConfig a{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(table, a);
  std::vector<float> p(table.total, 0.5f), g(table.total, 0.0f);
  const size_t w = 0;                                    // wte.weight[0]: decays
  const size_t b = table.find("h.0.attn.qkv.bias")->offset;  // no decay
  double pw = 0.5, pb = 0.5, m = 0, v = 0;
  for (long t = 1; t <= 3; t++) {
    const double grad = 0.3 * t, lr = 0.01;
    g[w] = g[b] = float(grad);
    opt.step(p.data(), g.data(), lr, t);
    m = 0.9 * m + 0.1 * grad;
    v = 0.95 * v + 0.05 * grad * grad;
    const double update = lr / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.95, t)) + 1e-8);
    pw = pw * (1 - lr * 0.1) - update;
    pb = pb - update;
    EXPECT_NEAR(p[w], pw, 1e-6);
    EXPECT_NEAR(p[b], pb, 1e-6);
  }
}

TEST(Clip, ScalesToMaxNormInsideTheAdamWStep) {
  std::vector<float> g = {3, 4};
  EXPECT_DOUBLE_EQ(grad_norm(g), 5.0);
  EXPECT_NEAR(clip_scale(5.0, 1.0), 1.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_scale(5.0, 0.0), 1.0);  // 0 turns clipping off
  // AdamW on clipped gradients equals AdamW on gradients scaled beforehand
  const ParamTable table = make_param_table(tiny_config());
  std::vector<float> pa(table.total, 0.5f), pb(pa), ga(table.total), gb(table.total);
  for (size_t i = 0; i < ga.size(); i++) ga[i] = float(i % 7) - 3.0f;
  const double scale = clip_scale(grad_norm(ga), 1.0);
  for (size_t i = 0; i < gb.size(); i++) gb[i] = float(ga[i] * scale);
  AdamW a(table, {}), b(table, {});
  a.step(pa.data(), ga.data(), 1e-2, 1, scale);
  b.step(pb.data(), gb.data(), 1e-2, 1);
  for (size_t i = 0; i < pa.size(); i++) EXPECT_NEAR(pa[i], pb[i], 1e-6);
}

// apply_update with a per-tensor watch is the plain update bit for bit, and reports each tensor's values
// before and after it (one tensor held at a time; the whole model for nGPT, whose projection follows)
TEST(AdamW, WatchedUpdateIsThePlainOneAndReportsEachTensor) {
  for (const std::string placement : {"pre", "ngpt"}) {
    nlohmann::json model = {{"d_model", 16}, {"n_heads", 2}, {"n_layers", 2}, {"seq_len", 8}, {"placement", placement}};
    if (placement == "ngpt")
      model.update({{"eps", 0}, {"head", "untied"}, {"norm", "l2"}, {"positions", "rope"}, {"bias", "none"}});
    const ModelConfig c = run_config_from_json({{"model", model}}, "test").model;
    SCOPED_TRACE(placement);
    ASSERT_EQ(c.on_sphere(), placement == "ngpt");
    Model<float> a(c), b(c);
    b.params() = a.params();
    Batch batch;
    batch.B = 2;
    batch.T = 8;
    for (int i = 0; i < 16; i++) batch.ids.push_back(i * 7 % 64), batch.labels.push_back(i * 5 % 64);
    AdamW oa(a.table(), {}), ob(b.table(), {});
    for (long t = 1; t <= 2; t++) {
      batch_gradients(a, batch);
      batch_gradients(b, batch);
      const std::vector<float> before = b.params();
      apply_update(a, oa, 1e-2, t, 0.5);
      size_t seen = 0;
      apply_update(b, ob, 1e-2, t, 0.5, [&](size_t spec, const float* old, const float* now) {
        const ParamSpec& p = b.table().specs[spec];
        EXPECT_EQ(spec, seen++);
        for (size_t i = 0; i < p.numel; i++) {
          ASSERT_EQ(old[i], before[p.offset + i]) << p.name;
          ASSERT_EQ(now[i], a.params()[p.offset + i]) << p.name;  // (a's: the plain update's, already done)
        }
      });
      EXPECT_EQ(seen, b.table().specs.size());
      EXPECT_EQ(a.params(), b.params());
    }
  }
}

// A model too big for its optimizer is refused by name before the moments are allocated
TEST(AdamW, RefusesMomentsBeyondTheMachinesMemory) {
  ParamTable table = make_param_table(tiny_config());
  table.total = size_t(1) << 44;  // 128 TB of moments
  try {
    AdamW opt(table, {});
    ADD_FAILURE() << "no Error for 2^44 parameters' moments";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AdamW's two moments"), std::string::npos) << e.what();
  }
}
