// test_train.cpp: the training layer: schedules, AdamW against a scalar hand computation,
// checkpoints (round trip and strict refusal of malformed files), bitwise determinism, divergence
// handling, and short runs on the built-in corpus whose validation loss ends well below the corpus'
// byte unigram entropy, for both pre and post placement.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <unistd.h>

#include "check.h"
#include "model/model.h"
#include "ops/common.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "io/safetensors.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

TrainOptions quiet_options() {
  TrainOptions o;
  o.quiet = true;
  return o;
}


fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("normlab_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<nlohmann::json> read_metrics(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

RunConfig small_run(const fs::path& out, Placement placement, long steps) {
  nlohmann::json doc = {
      {"model", {{"d_model", 64}, {"n_heads", 4}, {"n_layers", 2}, {"seq_len", 64},
                 {"placement", to_string(placement)}}},
      {"train", {{"steps", steps}, {"batch_size", 16}, {"lr", 1.5e-3}, {"warmup_steps", 60},
                 {"eval_every", 0}, {"eval_batches", 4}, {"out_dir", out.string()},
                 {"checkpoint_every", 0}}}};
  return run_config_from_json(doc, "test");
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
  ModelConfig c;
  c.d_model = 4;
  c.n_heads = 1;
  c.n_layers = 1;
  c.seq_len = 2;
  const ParamTable table = make_param_table(c);
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
  ModelConfig c;
  c.d_model = 4;
  c.n_heads = 1;
  c.n_layers = 1;
  c.seq_len = 2;
  const ParamTable table = make_param_table(c);
  std::vector<float> pa(table.total, 0.5f), pb(pa), ga(table.total), gb(table.total);
  for (size_t i = 0; i < ga.size(); i++) ga[i] = float(i % 7) - 3.0f;
  const double scale = clip_scale(grad_norm(ga), 1.0);
  for (size_t i = 0; i < gb.size(); i++) gb[i] = float(ga[i] * scale);
  AdamW a(table, {}), b(table, {});
  a.step(pa.data(), ga.data(), 1e-2, 1, scale);
  b.step(pb.data(), gb.data(), 1e-2, 1);
  for (size_t i = 0; i < pa.size(); i++) EXPECT_NEAR(pa[i], pb[i], 1e-6);
}

TEST(Divergence, NaNPropagatesToTheLossAndTheGradientNorm) {
  // the build flags (-fno-trapping-math -fno-math-errno, no -ffast-math) must keep NaN/Inf
  ModelConfig c;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  c.seq_len = 4;
  Model<float> m(c);
  std::vector<int32_t> ids = {1, 2, 3, 4}, labels = {2, 3, 4, 5};
  m.params()[m.table().find("h.1.mlp.fc.weight")->offset + 3] = NAN;
  EXPECT_TRUE(std::isnan(m.forward(ids.data(), labels.data(), 1, 4)));
  // a finite forward whose gradient is not: an infinite loss scale reaches every gradient
  m.params()[m.table().find("h.1.mlp.fc.weight")->offset + 3] = 0.0f;
  ASSERT_TRUE(std::isfinite(m.forward(ids.data(), labels.data(), 1, 4)));
  m.zero_grad();
  m.backward(INFINITY);
  EXPECT_FALSE(std::isfinite(grad_norm(m.grads())));
}

TEST(Checkpoint, RoundTripAndStrictRefusal) {
  const fs::path dir = temp_dir("ckpt");
  ModelConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 2;
  c.seq_len = 8;
  c.placement = {Placement::Sandwich, Placement::Post};
  c.norm = NormKind::RMSNorm;
  Model<float> m(c);
  const std::string path = (dir / "m.safetensors").string();
  save_checkpoint(path, m, nullptr, 7, false);
  auto back = load_model(path);
  EXPECT_EQ(back->params(), m.params());
  EXPECT_EQ(model_config_to_json(back->config()), model_config_to_json(m.config()));
  // refuses to overwrite, and the file is unchanged
  EXPECT_THROW(save_checkpoint(path, m, nullptr, 7, false), Error);
  EXPECT_EQ(load_model(path)->params(), m.params());
  // every truncation is refused with an Error naming the file
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t len : {size_t(0), size_t(5), size_t(8), size_t(100), bytes.size() / 2, bytes.size() - 1}) {
    const std::string cut = (dir / "cut.safetensors").string();
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(len));
    try {
      load_model(cut);
      ADD_FAILURE() << "truncated to " << len << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.safetensors"), std::string::npos) << e.what();
    }
  }
  // a file whose tensors do not match its config
  ModelConfig other = c;
  other.d_ff = 40;
  const std::string bad = (dir / "bad.safetensors").string();
  std::vector<safetensors::TensorView> views;
  for (const ParamSpec& p : m.table().specs)
    views.push_back({p.name, safetensors::DType::F32, p.shape, m.params().data() + p.offset});
  safetensors::write(bad, views, {{"config", model_config_to_json(other).dump()}}, true);
  EXPECT_THROW(load_model(bad), Error);
  // no config in the metadata
  safetensors::write(bad, views, {}, true);
  EXPECT_THROW(load_model(bad), Error);
  fs::remove_all(dir);
}

TEST(Data, EncoderMaskingFollowsBert) {
  std::vector<int32_t> bytes(5000);
  for (size_t i = 0; i < bytes.size(); i++) bytes[i] = uint8_t('a' + i % 26);
  Rng rng(3);
  const Batch b = sample_batch(bytes, Arch::Encoder, 400, 40, rng);
  long labelled = 0, masked = 0, unchanged = 0;
  for (size_t i = 0; i < b.ids.size(); i++) {
    if (b.labels[i] == ops::kIgnoreLabel) continue;
    labelled++;
    masked += b.ids[i] == kMaskToken;
    unchanged += b.ids[i] == b.labels[i];
  }
  EXPECT_EQ(labelled, 400 * 6);  // round(0.15 * 40) per row
  EXPECT_NEAR(double(masked) / labelled, 0.8, 0.03);
  EXPECT_NEAR(double(unchanged) / labelled, 0.1 + 0.1 / 256, 0.03);
}

TEST(Data, BadBatchesAreRefused) {
  ModelConfig c;
  Batch b{1, 2, {1, 300}, {2, 3}};
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // id out of range
  b = {1, 2, {1, 2}, {-100, -100}};
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // no labels
  b = {1, 2, {1, 2}, {-5, 3}};
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // bad label
  const fs::path dir = temp_dir("data");
  std::ofstream(dir / "empty.txt").close();
  EXPECT_THROW(load_corpus((dir / "empty.txt").string(), 0.1, 8), Error);
  EXPECT_THROW(load_corpus((dir / "missing.txt").string(), 0.1, 8), Error);
  fs::remove_all(dir);
}

TEST(Training, SameSeedSameLossesBitForBit) {
  const fs::path dir = temp_dir("det");
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; run++) {
    RunConfig cfg = small_run(dir / std::to_string(run), Placement::Pre, 15);
    cfg.model.dropout = 0.1;
    cfg.train.grad_accum = 2;
    train(cfg, quiet_options());
    std::vector<double> losses;
    for (const auto& line : read_metrics(dir / std::to_string(run) / "metrics.jsonl"))
      if (line["type"] == "train") losses.push_back(line["loss"].get<double>());
    ASSERT_EQ(losses.size(), 15u);
    runs.push_back(losses);
  }
  for (size_t i = 0; i < runs[0].size(); i++)
    EXPECT_EQ(std::memcmp(&runs[0][i], &runs[1][i], sizeof(double)), 0) << "step " << i + 1;
  fs::remove_all(dir);
}

TEST(Training, DivergenceStopsNamingTheStepAndKeepsMetrics) {
  const fs::path dir = temp_dir("div");
  RunConfig cfg = small_run(dir, Placement::Post, 50);
  cfg.train.lr = 1e30;  // the first update overflows the next forward pass
  cfg.train.schedule = Schedule::Constant;
  cfg.train.grad_clip = 0;
  const TrainResult r = train(cfg, quiet_options());
  EXPECT_TRUE(r.diverged);
  EXPECT_GE(r.diverged_step, 2);
  EXPECT_LT(r.diverged_step, 50);
  const auto lines = read_metrics(dir / "metrics.jsonl");
  bool found = false;
  for (const auto& l : lines)
    if (l["type"] == "diverged") {
      found = true;
      EXPECT_EQ(l["step"].get<long>(), r.diverged_step);
      EXPECT_FALSE(l["tensor"].get<std::string>().empty());
    }
  EXPECT_TRUE(found);
  EXPECT_TRUE(fs::exists(dir / "checkpoint.safetensors"));
  // the run directory is not silently reused
  EXPECT_THROW(train(cfg, quiet_options()), Error);
  fs::remove_all(dir);
}

class Convergence : public testing::TestWithParam<Placement> {};

TEST_P(Convergence, ValidationLossEndsWellBelowUnigramEntropy) {
  const fs::path dir = temp_dir(std::string("conv_") + to_string(GetParam()));
  RunConfig cfg = small_run(dir, GetParam(), 400);
  const TrainResult r = train(cfg, quiet_options());
  ASSERT_FALSE(r.diverged);
  // a model that only learned byte frequencies would sit at the unigram entropy (~3.07 nats);
  // "well below" = at least 0.5 nats under it
  EXPECT_LT(r.last_val_loss, r.unigram_entropy - 0.5)
      << "val " << r.last_val_loss << " vs unigram entropy " << r.unigram_entropy;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(PreAndPost, Convergence, testing::Values(Placement::Pre, Placement::Post),
                         [](const auto& info) { return std::string(to_string(info.param)); });
