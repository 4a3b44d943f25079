// bench_step.cpp: times one normlab training step (forward, backward, AdamW) on the benchmark
// shapes of the core issue and prints one JSON line: ms per step (median), tokens/s, achieved
// GFLOP/s and the process' peak resident memory. Run one shape per process so the peak memory is
// that shape's. --precision bf16: the GEMMs in bf16 with float32 accumulation (train.precision).
// Usage: bench_step --shape a|b|c --placement pre|post [--precision fp32|bf16] [--iters N] [--warmup N]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/isa.h"
#include "train/optimizer.h"
#include "util/rng.h"

using namespace normlab;

namespace {

struct Shape {
  const char* name;
  int V, d, L, H, T, B;
};
constexpr Shape kShapes[] = {{"a", 50257, 768, 12, 12, 64, 4},
                             {"b", 256, 256, 6, 8, 128, 16},
                             {"c", 256, 128, 48, 4, 64, 8}};

// --placement llama: the Llama-family block on the same shape: pre-RMSNorm, RoPE, SwiGLU with
// d_ff = 8d/3 rounded to a multiple of 8 (the same MLP FLOPs as GPT-2's 4d), H/4 key-value heads,
// no biases.
int llama_ff(int d) { return (8 * d / 3 + 7) / 8 * 8; }
int llama_kv_heads(int H) { return H >= 4 ? H / 4 : 1; }

// Model FLOPs of one training step: 6 per multiply-add-pair of every linear map (forward 2,
// backward 4), including the tied output projection, plus attention's QK^T and PV (full T x T).
double step_flops(const Shape& s, bool llama) {
  const double N = double(s.B) * s.T, d = s.d, f = 4.0 * d;
  const double kv = llama ? 2.0 * d * (double(llama_kv_heads(s.H)) / s.H) : 2.0 * d;
  const double mlp = llama ? 3.0 * d * llama_ff(s.d) : 2 * d * f;
  const double linear = s.L * (d * d + kv * d + d * d + mlp) + double(s.V) * d;
  const double attention = s.L * 2.0 * 2.0 * s.B * double(s.T) * s.T * d;
  return 3.0 * (2.0 * N * linear + attention);
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_name = "b", placement = "pre", precision = "fp32";
  int iters = 10, warmup = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--shape")) shape_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--placement")) placement = argv[i + 1];
    else if (!std::strcmp(argv[i], "--precision")) precision = argv[i + 1];
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
  }
  const Shape* s = nullptr;
  for (const auto& k : kShapes)
    if (shape_name == k.name) s = &k;
  const bool llama = placement == "llama";
  auto p = llama ? std::optional<Placement>(Placement::Pre) : placement_from_string(placement);
  auto prec = ops::precision_from_string(precision);
  if (!s || !p || !prec || iters < 1) {
    std::fprintf(stderr, "usage: bench_step --shape a|b|c --placement pre|post|llama [--precision fp32|bf16] [--iters N]\n");
    return 1;
  }
  if (*prec == ops::Precision::Bf16 && !ops::bf16_unsupported_reason().empty()) {
    std::fprintf(stderr, "bench_step: --precision bf16: %s\n", ops::bf16_unsupported_reason().c_str());
    return 1;
  }
  ModelConfig cfg;
  cfg.vocab = s->V;
  cfg.d_model = s->d;
  cfg.n_layers = s->L;
  cfg.n_heads = s->H;
  cfg.seq_len = s->T;
  cfg.placement = {*p};
  if (llama) {
    cfg.norm = NormKind::RMSNorm;
    cfg.positions = Positions::Rope;
    cfg.activation = Activation::SwiGlu;
    cfg.d_ff = llama_ff(s->d);
    cfg.n_kv_heads = llama_kv_heads(s->H);
    cfg.bias = LinearBias::None;
  }
  Model<float> model(cfg);
  model.set_precision(*prec);
  AdamW opt(model.table(), AdamWConfig{});
  Rng rng(1);
  const int N = s->B * s->T;
  std::vector<int32_t> ids(N), labels(N);
  for (int i = 0; i < N; i++) {
    ids[i] = int32_t(rng.below(s->V));
    labels[i] = int32_t(rng.below(s->V));
  }
  std::vector<double> times;
  for (int it = 0; it < warmup + iters; it++) {
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    model.forward(ids.data(), labels.data(), s->B, s->T);
    model.backward();
    uint16_t* rounded = model.bf16_weights_buffer();  // as the trainer: bf16 rounding in AdamW's pass
    opt.step(model.params().data(), model.grads().data(), 1e-4, it + 1, 1.0, rounded);
    if (rounded) model.bf16_weights_written();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it >= warmup) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"impl\": \"normlab\", \"shape\": \"%s\", \"placement\": \"%s\", \"precision\": \"%s\", \"ms\": %.3f, "
      "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"peak_rss_mb\": %.1f, \"params\": %zu, \"kernels\": \"%s\"}\n",
      s->name, placement.c_str(), precision.c_str(), median * 1e3, N / median, step_flops(*s, llama) / median / 1e9,
      ru.ru_maxrss / 1024.0, model.table().total, ops::to_string(ops::isa_choice().isa));
  return 0;
}
