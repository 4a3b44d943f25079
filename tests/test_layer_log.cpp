// test_layer_log.cpp: the per-layer logs of training (train.log_every_layers, layer_log.h) against an
// independent recomputation. check_record recomputes every logged number from the Model's public
// views and the parameters before and after the step with code written here: attention entropies
// from a softmax of the saved q and k (not from the saved probabilities), parameter groups from the
// names in the table, norms in double. It checks a record written by `train` itself (the step-1 and
// step-2 records of a gpt run with two micro-batches and the model update on, replayed step by step
// here) and records of an encoder-decoder and of a two-stream (ResiDual) model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "model/methods.h"
#include "model/model.h"
#include "train/data.h"
#include "train/layer_log.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/rng.h"

using namespace normlab;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// float activations and gradients summed in double on both sides: only the summation order differs
constexpr double kRtol = 1e-6;
// the entropy from a softmax recomputed in double vs the model's float probabilities
constexpr double kEntropyRtol = 1e-5;

void expect_near_rel(double got, double want, double rtol, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rtol * std::abs(want) + 1e-12) << what << ": logged " << got << ", recomputed " << want;
}

double rms_mean(const float* v, long rows, int C) {
  double total = 0;
  for (long r = 0; r < rows; r++) {
    double s = 0;
    for (int c = 0; c < C; c++) s += double(v[r * C + c]) * v[r * C + c];
    total += std::sqrt(s / C);
  }
  return total / double(rows);
}

// Entropy of softmax(q k^T / sqrt(HS)) per (batch, head, query), mean; q rows of stride qs, k of ks.
// Attention probabilities (B, NH, Tq, Tk) recomputed from q and k in double (keys past the query 0
// when causal): the oracle of the attention readings.
std::vector<double> probs_from_qk(const float* q, int qs, const float* k, int ks, int B, int Tq, int Tk, int C, int NH,
                                  bool causal) {
  const int HS = C / NH;
  std::vector<double> P(size_t(B) * NH * Tq * Tk, 0.0);
  std::vector<double> s(size_t(Tk), 0.0);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < Tq; t++) {
        const int keys = causal ? t + 1 : Tk;
        double mx = -INFINITY;
        for (int u = 0; u < keys; u++) {
          double dot = 0;
          for (int d = 0; d < HS; d++)
            dot += double(q[(size_t(b) * Tq + t) * qs + h * HS + d]) * k[(size_t(b) * Tk + u) * ks + h * HS + d];
          s[size_t(u)] = dot / std::sqrt(double(HS));
          mx = std::max(mx, s[size_t(u)]);
        }
        double z = 0;
        for (int u = 0; u < keys; u++) z += std::exp(s[size_t(u)] - mx);
        double* row = P.data() + ((size_t(b) * NH + h) * Tq + t) * Tk;
        for (int u = 0; u < keys; u++) row[u] = std::exp(s[size_t(u)] - mx) / z;
      }
  return P;
}

double entropy_from_qk(const float* q, int qs, const float* k, int ks, int B, int Tq, int Tk, int C, int NH,
                       bool causal) {
  const std::vector<double> P = probs_from_qk(q, qs, k, ks, B, Tq, Tk, C, NH, causal);
  double total = 0;
  for (double p : P)
    if (p > 0) total -= p * std::log(p);
  return total / (double(B) * NH * Tq);
}

// Gu et al.'s sink on the first token, by its definition: per (row, head) the first key's mean
// attention over the queries that see it (all T) above 0.3
double sink_share_from_qk(const float* qkv, int B, int T, int C, int NH, bool causal) {
  const std::vector<double> P = probs_from_qk(qkv, 3 * C, qkv + C, 3 * C, B, T, T, C, NH, causal);
  int sinks = 0;
  for (int bh = 0; bh < B * NH; bh++) {
    double importance = 0;
    for (int t = 0; t < T; t++) importance += P[(size_t(bh) * T + t) * T] / T;
    if (std::fabs(importance - 0.3) < 1e-4) return NAN;  // either side in float: not a test of the rule
    sinks += importance > 0.3;
  }
  return double(sinks) / (B * NH);
}

// The largest |x| of n entries over their median |x| (sorted, not selected)
std::pair<double, double> peak_by_sorting(const float* x, size_t n) {
  std::vector<double> a(n);
  for (size_t k = 0; k < n; k++) a[k] = std::fabs(double(x[k]));
  std::sort(a.begin(), a.end());
  const double median = n % 2 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
  return {a.back(), a.back() / median};
}

// sqrt of the sum of squares (of a - b when b is given) over the tensors named prefix.name{,.weight,.bias}
double group_norm(const ParamTable& table, const std::vector<float>& a, const std::vector<float>* b,
                  const std::string& prefix, const std::string& name, size_t& numel) {
  double s = 0;
  for (const std::string& full : {prefix + name, prefix + name + ".weight", prefix + name + ".bias"})
    if (const ParamSpec* p = table.find(full)) {
      numel += p->numel;
      for (size_t k = 0; k < p->numel; k++) {
        const double d = double(a[p->offset + k]) - (b ? double((*b)[p->offset + k]) : 0.0);
        s += d * d;
      }
    }
  return std::sqrt(s);
}

// The largest q.k / sqrt(HS) over the pairs the softmax saw, with q and k recomputed here from the
// slot's input h and its qkv weights (the small models here: learned positions, no QK-norm, so q and k
// are h W^T + b), not read from the forward's saved qkv. params: those of the forward (before the step).
double max_logit_from_h(const Model<float>& model, const std::vector<float>& params, int i, int len, bool causal) {
  const ModelConfig& cfg = model.config();
  const int C = cfg.d_model, NH = cfg.n_heads, HS = C / NH, B = model.planned_B();
  const ParamSpec* w = model.table().find(slot_prefix(cfg, i) + ".qkv.weight");
  const ParamSpec* bias = model.table().find(slot_prefix(cfg, i) + ".qkv.bias");
  EXPECT_NE(w, nullptr);
  if (!w) return NAN;
  const float* W = params.data() + w->offset;
  const float* h = model.acts(i).h;
  std::vector<double> qk(size_t(B) * len * 2 * C);  // (B, len, [q | k])
  for (long r = 0; r < long(B) * len; r++)
    for (int o = 0; o < 2 * C; o++) {
      double v = bias ? double(params[bias->offset + size_t(o)]) : 0.0;
      for (int c = 0; c < C; c++) v += double(h[r * C + c]) * W[size_t(o) * C + c];
      qk[size_t(r) * 2 * C + size_t(o)] = v;
    }
  double best = -INFINITY;
  for (int b = 0; b < B; b++)
    for (int hd = 0; hd < NH; hd++)
      for (int t = 0; t < len; t++)
        for (int u = 0; u < (causal ? t + 1 : len); u++) {
          double dot = 0;
          for (int d = 0; d < HS; d++)
            dot += qk[(size_t(b) * len + t) * 2 * C + size_t(hd * HS + d)] *
                   qk[(size_t(b) * len + u) * 2 * C + size_t(C + hd * HS + d)];
          best = std::max(best, dot / std::sqrt(double(HS)));
        }
  return best;
}

// Every number of `record` against a recomputation from `model` (after the step's last forward and
// backward; parameters `after`) and the parameters `before` the optimizer step.
void check_record(const json& record, const Model<float>& model, const std::vector<float>& before,
                  const std::vector<float>& after, const std::vector<float>& logits) {
  const ModelConfig& cfg = model.config();
  const ParamTable& table = model.table();
  const int C = cfg.d_model, NH = cfg.n_heads, B = model.planned_B(), T = model.planned_T(), S = model.planned_S();
  ASSERT_EQ(record["type"], "layers");
  int present = 0;
  for (int i = 0; i < cfg.n_slots(); i++) present += cfg.slot(i).present;
  ASSERT_EQ(record["sublayers"].size(), size_t(present));
  size_t covered = 0;  // parameters in some group
  std::set<std::string> kinds;
  for (const json& s : record["sublayers"]) {
    const int i = s["slot"];
    const Slot slot = cfg.slot(i);
    const std::string where = "slot " + std::to_string(i);
    kinds.insert(s["sub"].get<std::string>());
    const int len = cfg.encdec() && slot.encoder ? S : T;
    const long N = long(B) * len;
    const SublayerActs<float>& a = model.acts(i);
    const NormSites sites = norm_sites(cfg.placement_of(slot.layer), slot.kind);
    expect_near_rel(s["stream_rms"], rms_mean(model.stream(i), N, C), kRtol, where + " stream_rms");
    const auto [peak, peak_ratio] = peak_by_sorting(model.stream(i), size_t(N) * C);
    expect_near_rel(s["stream_max_abs"], peak, kRtol, where + " stream_max_abs");
    expect_near_rel(s["stream_max_ratio"], peak_ratio, kRtol, where + " stream_max_ratio");
    double ratio = 0;
    for (long r = 0; r < N; r++) {
      double f2 = 0, x2 = 0;
      for (int c = 0; c < C; c++) {
        f2 += double(a.f[r * C + c]) * a.f[r * C + c];
        x2 += double(model.stream(i)[r * C + c]) * model.stream(i)[r * C + c];
      }
      ratio += std::sqrt(f2 / x2);
    }
    expect_near_rel(s["branch_ratio"], ratio / double(N), kRtol, where + " branch_ratio");
    if (sites.in) expect_near_rel(s["ln_in_input_rms"], rms_mean(model.stream(i), N, C), kRtol, where + " ln_in");
    else EXPECT_TRUE(s["ln_in_input_rms"].is_null()) << where;
    if (sites.branch) expect_near_rel(s["ln_branch_input_rms"], rms_mean(a.f, N, C), kRtol, where + " ln_branch");
    else EXPECT_TRUE(s["ln_branch_input_rms"].is_null()) << where;
    if (sites.out) expect_near_rel(s["ln_out_input_rms"], rms_mean(a.r, N, C), kRtol, where + " ln_out");
    else EXPECT_TRUE(s["ln_out_input_rms"].is_null()) << where;
    if (slot.kind == Sublayer::Attn)
      expect_near_rel(s["attn_entropy"], entropy_from_qk(a.hid, 3 * C, a.hid + C, 3 * C, B, len, len, C, NH, cfg.causal() || (cfg.encdec() && !slot.encoder)),
                      kEntropyRtol, where + " attention entropy");
    else if (slot.kind == Sublayer::Cross)
      expect_near_rel(s["attn_entropy"], entropy_from_qk(a.hid, C, a.kv, 2 * C, B, T, S, C, NH, false), kEntropyRtol,
                      where + " cross-attention entropy");
    else EXPECT_TRUE(s["attn_entropy"].is_null()) << where;
    if (slot.kind == Sublayer::Attn)
      expect_near_rel(s["attn_max_logit"], max_logit_from_h(model, before, i, len, cfg.causal() || (cfg.encdec() && !slot.encoder)),
                      kEntropyRtol, where + " largest attention logit");
    else EXPECT_TRUE(s["attn_max_logit"].is_null()) << where;
    if (slot.kind == Sublayer::Attn) {
      const double share = sink_share_from_qk(a.hid, B, len, C, NH, cfg.causal() || (cfg.encdec() && !slot.encoder));
      if (!std::isnan(share)) { EXPECT_EQ(s["attn_sink_share"].get<double>(), share) << where << " attention sink share"; }
    } else {
      EXPECT_TRUE(s["attn_sink_share"].is_null()) << where;
    }
    // groups: each name resolves to tensors of this sub-layer (or the layer's rezero)
    const std::string prefix = slot_prefix(cfg, i) + ".";
    double g_total = 0, d_total = 0, p_total = 0;
    ASSERT_FALSE(s["grad_norm"].empty()) << where;
    for (const auto& [name, value] : s["grad_norm"].items()) {
      size_t n = 0;
      const std::string pre = name == "rezero" ? std::string(prefix.substr(0, prefix.rfind('.', prefix.size() - 2) + 1)) : prefix;
      const double g = group_norm(table, model.grads(), nullptr, pre, name, n);
      ASSERT_GT(n, 0u) << where << " group " << name << " names no tensor";
      covered += n;
      expect_near_rel(value, g, kRtol, where + " grad " + name);
      size_t ignore = 0;
      const double d = group_norm(table, after, &before, pre, name, ignore), p = group_norm(table, before, nullptr, pre, name, ignore);
      if (p > 0) expect_near_rel(s["update_ratio"][name], d / p, kRtol, where + " update ratio " + name);
      else EXPECT_TRUE(s["update_ratio"][name].is_null()) << where << " " << name;
      g_total += g * g;
      d_total += d * d;
      p_total += p * p;
    }
    expect_near_rel(s["grad_norm_total"], std::sqrt(g_total), kRtol, where + " grad total");
    if (p_total > 0) expect_near_rel(s["update_ratio_total"], std::sqrt(d_total / p_total), kRtol, where + " update total");
  }
  for (const auto& [name, value] : record["other"]["grad_norm"].items()) {
    size_t n = 0;
    expect_near_rel(value, group_norm(table, model.grads(), nullptr, "", name, n), kRtol, "grad " + name);
    covered += n;
  }
  EXPECT_EQ(covered, table.total) << "every parameter is in exactly one group";
  // stacks
  for (const json& st : record["stacks"]) {
    const bool enc = cfg.encdec() && st["stack"] == "encoder";
    const long N = long(B) * (enc ? S : T);
    const float* out = enc ? model.acts(cfg.first_decoder_slot() - 1).x_out : model.stream(cfg.n_slots());
    expect_near_rel(st["output_rms"], rms_mean(out, N, C), kRtol, "stack output");
    expect_near_rel(st["final_rms"], rms_mean(enc ? model.memory() : model.final_hidden(), N, C), kRtol, "stack final");
    if (const float* xd = model.dual_stream(enc)) expect_near_rel(st["dual_rms"], rms_mean(xd, N, C), kRtol, "dual");
    else EXPECT_TRUE(st["dual_rms"].is_null());
  }
  EXPECT_EQ(record["stacks"].size(), cfg.encdec() ? 2u : 1u);
  // the head: log Z of every position's logits (saved after the forward: the backward overwrites them
  // with their gradient), in double
  const int V = cfg.vocab_size();
  ASSERT_EQ(logits.size(), size_t(B) * T * V);
  double z_mean = 0, z_max = -INFINITY;
  for (long r = 0; r < long(B) * T; r++) {
    double sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(double(logits[size_t(r) * V + size_t(v)]));
    z_mean += std::log(sum) / double(long(B) * T);
    z_max = std::max(z_max, std::log(sum));
  }
  expect_near_rel(record["head"]["log_z_mean"], z_mean, kRtol, "log Z mean");
  expect_near_rel(record["head"]["log_z_max"], z_max, kRtol, "log Z max");
}

std::vector<int32_t> random_ids(size_t n, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(rng.next_u64() % uint64_t(V));
  return v;
}

// A step on one batch with the logger around the optimizer step; then check_record.
void log_and_check(ModelConfig cfg, int B, int T, int S) {
  Model<float> model(cfg);
  const int V = cfg.vocab_size();
  const auto ids = random_ids(size_t(B) * T, std::min(V, 250), 1), labels = random_ids(size_t(B) * T, std::min(V, 250), 2);
  const auto src = random_ids(size_t(B) * S, std::min(V, 250), 3);
  const Source source{cfg.encdec() ? src.data() : nullptr, cfg.encdec() ? S : 0, nullptr};
  model.set_training(true, 1);
  model.zero_grad();
  model.forward(ids.data(), labels.data(), B, T, nullptr, nullptr, source);
  const std::vector<float> logits(model.logits(), model.logits() + size_t(B) * T * V);
  model.backward();
  LayerLogger logger(model);
  logger.begin(model);
  const std::vector<float> before = model.params();
  AdamW opt(model.table(), AdamWConfig{});
  opt.step(model.params().data(), model.grads().data(), 1e-2, 1);
  const json record = logger.finish(model, 1);
  EXPECT_EQ(record["step"], 1);
  check_record(record, model, before, model.params(), logits);
}

ModelConfig small(Arch arch, Placement p) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 12;
  c.n_heads = 3;
  c.n_layers = 2;
  if (arch == Arch::EncDec) c.dec_layers = 3;
  c.d_ff = 20;
  c.seq_len = 16;
  c.placement = {p};
  return c;
}

}  // namespace

TEST(LayerLog, EveryMethodGptAndEncoderMatchRecomputation) {
  for (Placement p : {Placement::Post, Placement::Pre, Placement::Sandwich, Placement::PrePost, Placement::DeepNorm,
                      Placement::None, Placement::Admin, Placement::ReZero, Placement::SkipInit, Placement::LayerScale,
                      Placement::TFixup, Placement::ResiDual}) {
    SCOPED_TRACE(to_string(p));
    log_and_check(small(Arch::Gpt, p), 3, 11, 0);
    log_and_check(small(Arch::Encoder, p), 2, 9, 0);
  }
}

TEST(LayerLog, EncDecBothStacksAndCrossAttention) {
  for (Placement p : {Placement::Post, Placement::Pre, Placement::DeepNorm, Placement::ResiDual, Placement::ReZero}) {
    SCOPED_TRACE(to_string(p));
    log_and_check(small(Arch::EncDec, p), 2, 7, 10);
  }
}

TEST(LayerLog, AttentionOnlyModelSkipsTheAbsentMlps) {
  ModelConfig c = small(Arch::Gpt, Placement::Post);
  c.mlp = false;
  log_and_check(c, 2, 8, 0);
}

// The records `train` writes: replay the run here (same batches, same optimizer) and check the
// step-1 and step-2 records against the model state of those steps: the activations of the last
// micro-batch, the accumulated gradients, the update, and the model update on the probe batch.
TEST(LayerLog, TrainerRecordsMatchAReplayOfTheRun) {
  const fs::path dir = fs::temp_directory_path() / ("normlab_layer_log_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream text(dir / "corpus.txt");
    Rng rng(5);
    for (int k = 0; k < 6000; k++) text << char('a' + rng.next_u64() % 26) << (k % 7 == 6 ? " " : "");
  }
  json doc = {{"model", {{"d_model", 16}, {"n_heads", 2}, {"n_layers", 2}, {"seq_len", 12}, {"placement", "post"}}},
              {"train", {{"steps", 5}, {"batch_size", 3}, {"grad_accum", 2}, {"lr", 3e-3}, {"warmup_steps", 2},
                         {"eval_every", 0}, {"eval_batches", 1}, {"checkpoint_every", 0}, {"log_every_layers", 2},
                         {"log_model_update", true}, {"out_dir", (dir / "run").string()}}},
              {"data", {{"corpus", (dir / "corpus.txt").string()}}}};
  const RunConfig cfg = run_config_from_json(doc, "test");
  TrainOptions quiet;
  quiet.quiet = true;
  train(cfg, quiet);
  std::vector<json> records;
  std::ifstream in(dir / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j["type"] == "layers") records.push_back(j);
  }
  ASSERT_EQ(records.size(), 4u) << "steps 1, 2, 4 and the last (5)";
  EXPECT_EQ(records[0]["step"], 1);
  EXPECT_EQ(records[1]["step"], 2);
  EXPECT_EQ(records[2]["step"], 4);
  EXPECT_EQ(records[3]["step"], 5);

  // the replay: the trainer's batches come from Rng(seed, 1), its probe batch from Rng(seed, 4)
  const TrainConfig& tc = cfg.train;
  const Corpus corpus = load_corpus((dir / "corpus.txt").string(), cfg.data.val_fraction, 12);
  Model<float> model(cfg.model);
  AdamW opt(model.table(), tc.adamw);
  Rng data_rng(uint64_t(tc.seed), 1), probe_rng(uint64_t(tc.seed), 4);
  const Batch probe = sample_batch(corpus.val, Arch::Gpt, tc.batch_size, 12, probe_rng);
  auto probe_logits = [&]() {
    model.set_training(false);
    model.forward(probe.ids.data(), probe.labels.data(), probe.B, probe.T);
    return std::vector<float>(model.logits(), model.logits() + size_t(probe.B) * probe.T * model.config().vocab_size());
  };
  const ScheduleConfig sched{tc.schedule, tc.lr, tc.warmup_steps, tc.min_lr, int(tc.steps)};
  for (long step = 1; step <= 2; step++) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> logits_before = probe_logits();  // at the parameters before the step
    model.zero_grad();
    std::vector<float> logits;  // the last micro-batch's, before its backward overwrites them
    for (int micro = 0; micro < tc.grad_accum; micro++) {
      const Batch b = sample_batch(corpus.train, Arch::Gpt, tc.batch_size, 12, data_rng);
      model.set_training(true, uint64_t(step) * 65536 + micro);
      model.forward(b.ids.data(), b.labels.data(), b.B, b.T);
      logits.assign(model.logits(), model.logits() + size_t(b.B) * b.T * model.config().vocab_size());
      model.backward(1.0 / tc.grad_accum);
    }
    const std::vector<float> before = model.params();
    opt.step(model.params().data(), model.grads().data(), learning_rate(sched, step), step,
             clip_scale(grad_norm(model.grads()), tc.grad_clip));
    check_record(records[size_t(step - 1)], model, before, model.params(), logits);  // the last micro-batch's
    const std::vector<float> logits_after = probe_logits();
    double du = 0;
    for (long r = 0; r < long(probe.B) * probe.T; r++) {
      double s = 0;
      for (int v = 0; v < model.config().vocab_size(); v++) {
        const double d = double(logits_after[size_t(r) * 256 + v]) - logits_before[size_t(r) * 256 + v];
        s += d * d;
      }
      du += std::sqrt(s);
    }
    expect_near_rel(records[size_t(step - 1)]["model_update"], du / double(probe.B * probe.T), kRtol, "model update");
    EXPECT_GT(records[size_t(step - 1)]["model_update"].get<double>(), 0);
  }
  fs::remove_all(dir);
}

TEST(LayerLog, ConfigKeysAreChecked) {
  auto parse = [](json train) { return run_config_from_json({{"train", train}}, "test"); };
  EXPECT_EQ(parse({{"log_every_layers", 10}}).train.log_every_layers, 10);
  EXPECT_THROW(parse({{"log_every_layers", -1}}), Error);
  EXPECT_THROW(parse({{"log_every_layers", 2.5}}), Error);
  EXPECT_THROW(parse({{"log_model_update", true}}), Error);  // needs log_every_layers
  EXPECT_THROW(parse({{"log_model_update", 1}}), Error);
  EXPECT_TRUE(parse({{"log_every_layers", 5}, {"log_model_update", true}}).train.log_model_update);
}

// The largest attention logit by hand: one batch row, two query heads sharing one key head (GQA),
// three tokens. The largest scaled product q_0 . k_2 = 10 lies in the future of query 0 (causal: left
// out) and the next, q_2 . k_1 = 6, falls on a padded key; what remains is q_1 . k_1 = 4 of head 1
// (through the shared key head), times the scale.
TEST(LayerLog, LargestAttentionLogitByHand) {
  const int B = 1, T = 3, NH = 2, KVH = 1, HS = 2, A = NH * HS, QW = A + 2 * KVH * HS;
  std::vector<float> qkv(size_t(B) * T * QW, 0.0f);
  auto q = [&](int t, int h, float a, float b) { qkv[size_t(t) * QW + size_t(h * HS)] = a, qkv[size_t(t) * QW + size_t(h * HS + 1)] = b; };
  auto k = [&](int t, float a, float b) { qkv[size_t(t) * QW + A] = a, qkv[size_t(t) * QW + A + 1] = b; };
  k(0, 0.5f, 0.0f);
  k(1, 2.0f, 0.0f);
  k(2, 5.0f, 0.0f);
  q(0, 0, 2.0f, 0.0f);  // q_0 . k_2 = 10: a future key
  q(1, 1, 2.0f, 0.0f);  // q_1 . k_1 = 4
  q(2, 0, 3.0f, 0.0f);  // q_2 . k_1 = 6 (padded), q_2 . k_2 = 15 (k_2 padded too), q_2 . k_0 = 1.5
  const uint8_t mask[T] = {1, 1, 0};
  const uint8_t mask_k1[T] = {1, 0, 0};
  EXPECT_DOUBLE_EQ(max_attention_logit(qkv.data(), B, T, QW, A, NH, KVH, HS, 0.5, true, nullptr), 0.5 * 15);
  EXPECT_DOUBLE_EQ(max_attention_logit(qkv.data(), B, T, QW, A, NH, KVH, HS, 0.5, true, mask), 0.5 * 6);
  EXPECT_DOUBLE_EQ(max_attention_logit(qkv.data(), B, T, QW, A, NH, KVH, HS, 0.5, true, mask_k1), 0.5 * 1.5);
  EXPECT_DOUBLE_EQ(max_attention_logit(qkv.data(), B, T, QW, A, NH, KVH, HS, 0.5, false, mask_k1), 0.5 * 1.5);
  // not causal, no mask: q_2 . k_2 = 15 and q_0 . k_2 = 10: 15
  EXPECT_DOUBLE_EQ(max_attention_logit(qkv.data(), B, T, QW, A, NH, KVH, HS, 1.0, false, nullptr), 15.0);
}

// Gu et al.'s sink by hand: a head whose first key gets (1, 0.5, 0.2, 0.1) from the four queries has
// importance 0.45 > 0.3, one that gets (1, 0.1, 0, 0) has 0.275: a share of one head in two
TEST(LayerLog, SinkShareAndStreamPeakByHand) {
  const int B = 1, NH = 2, T = 4;
  std::vector<float> att(size_t(B) * NH * T * T, 0.0f);
  const float first[2][4] = {{1.0f, 0.5f, 0.2f, 0.1f}, {1.0f, 0.1f, 0.0f, 0.0f}};
  for (int h = 0; h < NH; h++)
    for (int q = 0; q < T; q++) {
      float* row = att.data() + (size_t(h) * T + q) * T;
      row[0] = first[h][q];
      row[q] += q > 0 ? 1.0f - first[h][q] : 0.0f;  // the rest on the query itself
    }
  EXPECT_DOUBLE_EQ(first_key_sink_share(att.data(), B, NH, T), 0.5);
  EXPECT_DOUBLE_EQ(first_key_sink_share(att.data(), B, NH, T, 0.5), 0.0);
  // |x| = 1, 2, 3, 100: median 2.5, ratio 40 (an even count averages the middle pair)
  const float x[] = {1.0f, -2.0f, 3.0f, -100.0f};
  EXPECT_DOUBLE_EQ(stream_peak(x, 4).max_abs, 100.0);
  EXPECT_DOUBLE_EQ(stream_peak(x, 4).ratio, 40.0);
  EXPECT_DOUBLE_EQ(stream_peak(x, 3).ratio, 3.0 / 2.0);
}

// log Z by hand: logits (0, 0) give log 2; (log 3, 0, 0)... (1 row each) log(3 + 2) = log 5.
TEST(LayerLog, LogPartitionByHand) {
  const float logits[2 * 3] = {0.0f, 0.0f, -1e30f, float(std::log(3.0)), 0.0f, 0.0f};
  const LogPartition z = log_partition(logits, 2, 3);
  EXPECT_NEAR(z.mean, (std::log(2.0) + std::log(5.0)) / 2, 1e-7);
  EXPECT_NEAR(z.max, std::log(5.0), 1e-7);
}
