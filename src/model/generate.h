// generate.h: text generation from a GPT (causal) model, token by token: greedy decoding (argmax)
// or sampling from softmax(logits / temperature) restricted to the top-k logits, with a seeded,
// fully specified random stream (util/rng.h), so the same seed gives the same text on any machine.
// While prompt and continuation fit in seq_len, a KV cache (model/decode.h) makes each new token
// one token's work; a context that would outgrow seq_len instead slides, as nanoGPT's generate does,
// with one full forward over its last seq_len tokens per new token.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "util/rng.h"

namespace normlab {

struct SampleOptions {
  int max_new = 64;          // tokens to generate
  double temperature = 0;    // 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
  int top_k = 0;             // > 0: sample only among the k largest logits; 0: all
  uint64_t seed = 0;         // the random stream of the draws (unused when greedy)
  // >= 0: an id every window the model reads starts with (its run's data.bos): the prompt is read
  // after it, and a context that slides keeps it first (then the last seq_len - 1 tokens)
  int32_t first = -1;
};

// The next token from one row of logits (V): at temperature 0 the argmax (the lowest id on ties);
// otherwise one draw (one rng.uniform()) from softmax(logits / temperature) over the top_k largest
// logits (ties at the k-th broken by the lower id; 0 or >= V: all), accumulated in double.
int32_t sample_next(const float* logits, int V, double temperature, int top_k, Rng& rng);

// The prompt's continuation: max_new ids (without the prompt). The model must be causal with a head
// (Error otherwise); the prompt must be non-empty, no longer than seq_len, and in the vocabulary.
// Dropout is off while generating.
std::vector<int32_t> generate(Model<float>& model, const std::vector<int32_t>& prompt, const SampleOptions& options);

}  // namespace normlab
