// generate.cpp: greedy and top-k / temperature sampling from a GPT (generate.h).
#include "model/generate.h"

#include "model/decode.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>

#include "ops/common.h"
#include "util/error.h"

namespace normlab {

int32_t sample_next(const float* logits, int V, double temperature, int top_k, Rng& rng) {
  if (temperature <= 0) return int32_t(std::max_element(logits, logits + V) - logits);  // first maximum
  std::vector<int32_t> order(size_t(V), 0);
  std::iota(order.begin(), order.end(), 0);
  const int k = top_k > 0 && top_k < V ? top_k : V;
  const auto larger = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), larger);
  // p_i = exp((l_i - l_max) / T) / sum over the k kept; the draw inverts the cumulative sum
  std::vector<double> weight(static_cast<size_t>(k));
  const double top = logits[order[0]];
  double total = 0;
  for (int i = 0; i < k; i++) total += weight[size_t(i)] = std::exp((double(logits[order[size_t(i)]]) - top) / temperature);
  const double u = rng.uniform() * total;
  double cumulative = 0;
  for (int i = 0; i < k; i++) {
    cumulative += weight[size_t(i)];
    if (u < cumulative) return order[size_t(i)];
  }
  return order[size_t(k) - 1];  // u within rounding of the total
}

std::vector<int32_t> generate(Model<float>& model, const std::vector<int32_t>& prompt, const SampleOptions& options) {
  const ModelConfig& cfg = model.config();
  if (cfg.arch != Arch::Gpt || !cfg.has_logits())
    throw Error(fmt::format("generation needs a GPT model with a head (model.arch = \"gpt\"); this one is {}",
                            to_string(cfg.arch)));
  if (prompt.empty()) throw Error("generation needs a prompt of at least one token");
  const size_t lead = options.first >= 0 ? 1 : 0;  // the first token, read before the prompt
  if (prompt.size() + lead > size_t(cfg.seq_len))
    throw Error(fmt::format("the prompt is {} tokens{}, more than the model's context (seq_len) of {}", prompt.size(),
                            lead ? " after its first token" : "", cfg.seq_len));
  const int V = cfg.vocab_size();
  for (int32_t id : prompt)
    if (id < 0 || id >= V) throw Error(fmt::format("prompt token id {} is outside the vocabulary of {}", id, V));
  if (options.first >= V)
    throw Error(fmt::format("the first token {} is outside the vocabulary of {}", options.first, V));
  if (options.max_new < 0) throw Error("generation: max_new must be >= 0");
  model.set_training(false);
  Rng rng(options.seed, 0x5a3b1e);  // a stream of its own
  std::vector<int32_t> context = prompt;
  if (lead + prompt.size() + size_t(options.max_new) <= size_t(cfg.seq_len)) {
    // the whole context fits: a KV cache, one token's work per step (the prompt fed token by token)
    IncrementalDecoder<float> dec(model, 1, int(lead + prompt.size()) + std::max(options.max_new, 1));
    const std::vector<float>* logits = nullptr;
    if (lead) dec.step(&options.first);
    for (int32_t id : prompt) logits = &dec.step(&id);
    for (int n = 0; n < options.max_new; n++) {
      const int32_t next = sample_next(logits->data(), V, options.temperature, options.top_k, rng);
      context.push_back(next);
      if (n + 1 < options.max_new) logits = &dec.step(&next);
    }
    return std::vector<int32_t>(context.begin() + long(prompt.size()), context.end());
  }
  // a context that outgrows seq_len slides: a full forward over its last seq_len tokens per step
  // (with a first token: it, then the last seq_len - 1 tokens)
  const std::vector<int32_t> no_labels(size_t(cfg.seq_len), ops::kIgnoreLabel);
  std::vector<int32_t> window;
  for (int n = 0; n < options.max_new; n++) {
    const size_t tail = std::min(context.size(), size_t(cfg.seq_len) - lead);
    window.assign(lead, options.first);
    window.insert(window.end(), context.end() - long(tail), context.end());
    const int T = int(window.size());
    model.forward(window.data(), no_labels.data(), 1, T);
    const float* last = model.logits() + size_t(T - 1) * V;
    context.push_back(sample_next(last, V, options.temperature, options.top_k, rng));
  }
  return std::vector<int32_t>(context.begin() + long(prompt.size()), context.end());
}

}  // namespace normlab
