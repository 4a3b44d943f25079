// translation.h: training data of an encoder-decoder: a parallel corpus (io/parallel.h; the Bible
// pairs that `normlab corpus bible` builds, or any directory of {train,valid,test}.{src,tgt}) as
// byte-level token pairs, padded batches, and validation BLEU by greedy decoding.
//
// Tokens (vocab 258): a source is its UTF-8 bytes then EOS (257); the decoder reads BOS (256) then
// the target's bytes and predicts the bytes then EOS. A pair that does not fit the model's seq_len
// (source + EOS or BOS + target longer than seq_len) is left out and counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/data.h"
#include "util/rng.h"

namespace normlab {

struct TokenPair {
  std::vector<int32_t> src;  // bytes + EOS
  std::vector<int32_t> tgt;  // bytes (no BOS, no EOS)
};

struct TranslationData {
  std::string dir;                       // the corpus directory read
  std::vector<TokenPair> train, valid;   // pairs that fit
  std::vector<std::string> valid_src, valid_ref;  // their text (valid[k] is valid_src[k] -> valid_ref[k])
  size_t dropped_train = 0, dropped_valid = 0;    // too long for seq_len
};

// `where` is a corpus directory, or the name of a built Bible pair ("es-en", "web-kjv") under the
// corpus cache. Error if a split is missing or broken (io/parallel.h), or no pair fits.
TranslationData load_translation(const std::string& where, int seq_len);

// The byte ids of a sentence as a source: bytes + EOS.
std::vector<int32_t> source_ids(const std::string& text);
// The text of target ids (bytes; EOS and BOS are not text).
std::string target_text(const std::vector<int32_t>& ids);

// A right-padded batch of pairs[first .. first + B) (wrapping), or of B random pairs.
Batch translation_batch(const std::vector<TokenPair>& pairs, size_t first, int B);
Batch sample_translation_batch(const std::vector<TokenPair>& pairs, int B, Rng& rng);

// Corpus BLEU (sacrebleu's default) of greedy translations of the first n validation pairs.
struct BleuResult {
  double bleu = 0;
  int sentences = 0;
  std::string detail;  // sacrebleu-style: precisions, BP, ratio, lengths
};
BleuResult validation_bleu(Model<float>& model, const TranslationData& data, int n, int beam = 1);

}  // namespace normlab
