// data.h: byte-level data: a text corpus split into training and validation bytes, batches for the
// GPT (next byte) and encoder (BERT-style masking) objectives, token files (safetensors with int32
// input_ids and labels), and the range checks every batch passes at the API boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "util/rng.h"

namespace normlab {

struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> ids;     // (B, T)
  std::vector<int32_t> labels;  // (B, T), kIgnoreLabel where there is no loss
  std::vector<int32_t> types;   // (B, T) token types, or empty (all 0)
  std::vector<uint8_t> mask;    // (B, T) 1 = real token, 0 = padding, or empty (no padding)
  const int32_t* types_or_null() const { return types.empty() ? nullptr : types.data(); }
  const uint8_t* mask_or_null() const { return mask.empty() ? nullptr : mask.data(); }
};

struct Corpus {
  std::string path;
  std::vector<uint8_t> train, val;
};

// Reads a text file as bytes; the last val_fraction goes to validation. Errors name the path:
// missing, unreadable, empty, or a split too short for one sequence of T + 1 bytes.
Corpus load_corpus(const std::string& path, double val_fraction, int T);

// The built-in corpus shipped in the repository (data/kjv.txt).
std::string builtin_corpus_path();

// Byte unigram entropy of the bytes, in nats per byte.
double unigram_entropy(const std::vector<uint8_t>& bytes);

// Draws a batch of B random windows of T (+1 for gpt) bytes. encoder: 15% of the positions of each
// row (at least one) get a label; of those 80% become the mask token, 10% a random byte, 10% stay.
Batch sample_batch(const std::vector<uint8_t>& bytes, Arch arch, int B, int T, Rng& rng);

// Reads a token file (input_ids, labels: int32 (B, T); optional token_type_ids and attention_mask,
// int32 (B, T), as Hugging Face names them).
Batch load_token_file(const std::string& path);

// Throws Error naming `where` if any id is outside [0, V), a label outside [0, V) and not
// kIgnoreLabel, a token type outside [0, type_vocab), a mask value other than 0/1, a row whose
// queries would see no key (gpt: the first token padded; encoder: every token padded), T exceeds
// seq_len, or no position has a label (unless require_label is false: instruments without a loss).
void check_batch(const Batch& batch, const ModelConfig& cfg, const std::string& where,
                 bool require_label = true);

}  // namespace normlab
