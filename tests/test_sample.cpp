// test_sample.cpp: generation from a GPT (model/generate.h) against independent oracles: greedy
// decoding equals a naive loop of full forwards with its own argmax (a context longer than seq_len
// slides); sampling with a seed is reproducible; top-k 1 is greedy at any temperature; and the first
// sampled token over many seeds follows softmax(logits / T) restricted to the top k, computed here,
// by a per-token bound that the test also shows to reject the nearby wrong distributions (no
// temperature, one token too many, no top-k), so it cannot pass by accident.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/generate.h"
#include "ops/common.h"
#include "util/error.h"

using namespace normlab;

namespace {

ModelConfig tiny_gpt(Placement placement) {
  ModelConfig c;
  c.arch = Arch::Gpt;
  c.vocab = 24;
  c.d_model = 12;
  c.n_heads = 3;
  c.n_layers = 2;
  c.seq_len = 6;
  c.placement = {placement};
  c.init_std = 0.3;  // logits spread over a few units: distinct probabilities to test
  return c;
}

// The naive oracle: rerun the model on the whole context (its last seq_len tokens) and take the
// first maximum of the last row.
std::vector<int32_t> naive_greedy(Model<float>& model, std::vector<int32_t> context, int max_new) {
  const int V = model.config().vocab_size(), L = model.config().seq_len;
  const size_t prompt = context.size();
  for (int n = 0; n < max_new; n++) {
    const int T = std::min<int>(int(context.size()), L);
    std::vector<int32_t> window(context.end() - T, context.end()), labels(size_t(T), ops::kIgnoreLabel);
    model.forward(window.data(), labels.data(), 1, T);
    const float* row = model.logits() + size_t(T - 1) * V;
    int32_t best = 0;
    for (int v = 1; v < V; v++)
      if (row[v] > row[best]) best = v;
    context.push_back(best);
  }
  return std::vector<int32_t>(context.begin() + long(prompt), context.end());
}

std::vector<int32_t> run(Model<float>& model, const std::vector<int32_t>& prompt, int max_new, double temperature,
                         int top_k, uint64_t seed) {
  SampleOptions o;
  o.max_new = max_new;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  return generate(model, prompt, o);
}

// softmax(logits / T) over the top_k largest logits (0: all), zero elsewhere, in double.
std::vector<double> restricted_softmax(const std::vector<float>& logits, double T, int top_k) {
  const int V = int(logits.size());
  std::vector<int> order(size_t(V), 0);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  const int k = top_k == 0 ? V : top_k;
  std::vector<double> p(size_t(V), 0.0);
  double z = 0;
  for (int i = 0; i < k; i++) z += p[size_t(order[size_t(i)])] = std::exp(double(logits[size_t(order[size_t(i)])]) / T);
  for (double& x : p) x /= z;
  return p;
}

// The largest z-score |count - N p| / sqrt(N p (1 - p)) over the tokens; a token with p = 0 that was
// drawn counts as infinitely far.
double worst_z(const std::vector<long>& counts, const std::vector<double>& p, long N) {
  double worst = 0;
  for (size_t v = 0; v < p.size(); v++) {
    if (p[v] == 0) {
      if (counts[v] > 0) return INFINITY;
      continue;
    }
    const double mean = double(N) * p[v], sd = std::sqrt(double(N) * p[v] * (1 - p[v]));
    worst = std::max(worst, std::abs(double(counts[v]) - mean) / sd);
  }
  return worst;
}

}  // namespace

TEST(Generate, GreedyEqualsTheNaiveLoopOfFullForwards) {
  for (Placement placement : {Placement::Pre, Placement::Post}) {
    Model<float> model(tiny_gpt(placement));
    const std::vector<int32_t> prompt = {3, 17, 5};
    const int max_new = 11;  // the context (14) outgrows seq_len (6): the window slides
    const auto greedy = run(model, prompt, max_new, 0.0, 0, 0);
    EXPECT_EQ(greedy, naive_greedy(model, prompt, max_new));
    EXPECT_EQ(int(greedy.size()), max_new);
    // a continuation that fits seq_len runs on the KV cache: the same tokens
    EXPECT_EQ(run(model, {3, 17}, 4, 0.0, 0, 0), naive_greedy(model, {3, 17}, 4));
    EXPECT_EQ(run(model, {9}, 5, 0.0, 0, 0), naive_greedy(model, {9}, 5));
  }
}

// A run trained with data.bos reads every window after its first token: generation reads the prompt
// after it, and a sliding context keeps it first. Oracle: the naive loop on windows built by hand.
TEST(Generate, AFirstTokenStaysFirstInEveryWindow) {
  Model<float> model(tiny_gpt(Placement::Pre));
  const int V = model.config().vocab_size(), L = model.config().seq_len;
  const int32_t first = 23;
  const std::vector<int32_t> prompt = {3, 17, 5};
  for (int max_new : {2, 9}) {  // 1 + 3 + 2 fits seq_len (the KV cache); 1 + 3 + 9 slides
    SampleOptions o;
    o.max_new = max_new;
    o.first = first;
    std::vector<int32_t> context = prompt;
    for (int n = 0; n < max_new; n++) {
      const size_t tail = std::min(context.size(), size_t(L - 1));
      std::vector<int32_t> window = {first};
      window.insert(window.end(), context.end() - long(tail), context.end());
      std::vector<int32_t> labels(window.size(), ops::kIgnoreLabel);
      model.forward(window.data(), labels.data(), 1, int(window.size()));
      const float* row = model.logits() + (window.size() - 1) * size_t(V);
      context.push_back(int32_t(std::max_element(row, row + V) - row));
    }
    EXPECT_EQ(generate(model, prompt, o), std::vector<int32_t>(context.begin() + 3, context.end())) << max_new;
  }
  SampleOptions o;
  o.first = first;
  EXPECT_THROW(generate(model, std::vector<int32_t>(size_t(L), 1), o), Error);  // seq_len tokens after the first
  o.first = V;
  EXPECT_THROW(generate(model, prompt, o), Error);
}

TEST(Generate, SeededSamplingIsReproducible) {
  Model<float> model(tiny_gpt(Placement::Pre));
  const std::vector<int32_t> prompt = {1, 2};
  const auto a = run(model, prompt, 20, 1.0, 0, 7), b = run(model, prompt, 20, 1.0, 0, 7);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, run(model, prompt, 20, 1.0, 0, 8));  // 20 draws from 24 ids: another seed differs
  EXPECT_NE(a, run(model, prompt, 20, 0.0, 0, 7));  // and sampling is not greedy
}

TEST(Generate, TopKOneIsGreedyAtAnyTemperature) {
  Model<float> model(tiny_gpt(Placement::Post));
  const std::vector<int32_t> prompt = {9, 4, 11};
  const auto greedy = run(model, prompt, 12, 0.0, 0, 0);
  for (double t : {0.5, 1.0, 5.0})
    for (uint64_t seed : {0, 1, 99}) EXPECT_EQ(run(model, prompt, 12, t, 1, seed), greedy) << "T " << t;
}

TEST(Generate, FirstTokenFollowsTheTopKTemperatureSoftmax) {
  Model<float> model(tiny_gpt(Placement::Pre));
  const std::vector<int32_t> prompt = {5, 8, 13};
  const int V = model.config().vocab_size();
  std::vector<int32_t> labels(prompt.size(), ops::kIgnoreLabel);
  model.forward(prompt.data(), labels.data(), 1, int(prompt.size()));
  const std::vector<float> logits(model.logits() + (prompt.size() - 1) * size_t(V), model.logits() + prompt.size() * size_t(V));
  const double T = 0.6;
  const int k = 6;
  const std::vector<double> p = restricted_softmax(logits, T, k);
  // the distribution must be worth testing: no token dominant, none negligible
  for (double x : p) EXPECT_TRUE(x == 0 || (x > 0.02 && x < 0.8)) << x;

  const long N = 20000;
  std::vector<long> counts(size_t(V), 0);
  for (long seed = 0; seed < N; seed++) counts[size_t(run(model, prompt, 1, T, k, uint64_t(seed))[0])]++;
  // Each count within 5 standard deviations of N p (a chance failure: about 6e-7 per token), and
  // nothing outside the top k.
  const double bound = 5;
  EXPECT_LE(worst_z(counts, p, N), bound);
  // The same bound rejects the distributions a plausible bug would sample from.
  EXPECT_GT(worst_z(counts, restricted_softmax(logits, 1.0, k), N), 2 * bound) << "temperature ignored";
  EXPECT_GT(worst_z(counts, restricted_softmax(logits, T, k + 1), N), 2 * bound) << "top-k off by one";
  EXPECT_GT(worst_z(counts, restricted_softmax(logits, T, 0), N), 2 * bound) << "top-k ignored";
}

TEST(Generate, SampleNextGreedyTakesTheFirstMaximum) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  Rng rng(1);
  EXPECT_EQ(sample_next(logits.data(), 4, 0.0, 0, rng), 1);
  EXPECT_EQ(sample_next(logits.data(), 4, 1.0, 1, rng), 1);  // top-1 ties: the lower id
}

TEST(Generate, RefusesWhatItCannotContinue) {
  Model<float> gpt(tiny_gpt(Placement::Pre));
  EXPECT_THROW(run(gpt, {}, 3, 0, 0, 0), Error);
  EXPECT_THROW(run(gpt, std::vector<int32_t>(7, 1), 3, 0, 0, 0), Error);  // longer than seq_len 6
  EXPECT_THROW(run(gpt, {1, 24}, 3, 0, 0, 0), Error);                     // outside the vocabulary
  ModelConfig enc = tiny_gpt(Placement::Pre);
  enc.arch = Arch::Encoder;
  enc.vocab = 25;
  Model<float> encoder(enc);
  EXPECT_THROW(run(encoder, {1, 2}, 3, 0, 0, 0), Error);
}
