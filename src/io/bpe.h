// bpe.h: GPT-2's byte-level BPE: the pre-tokenization regex (hand-written over code points), the
// byte <-> printable character map, the BPE model that merges by rank, and the byte-level
// decoder. Loading from vocab.json + merges.txt (OpenAI's encoder.json + vocab.bpe) is here too.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/pipeline.h"

namespace normlab::bpe {

// Cuts text into words with the byte-level tokenizers' regex: GPT-2's
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// or, with llama3_numbers > 0, Llama 3's (Qwen2's at 1: \p{N} for \p{N}{1,3})
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Returns [begin, end) byte ranges that tile `text` (valid UTF-8).
std::vector<std::pair<size_t, size_t>> regex_words(std::string_view text, int llama3_numbers = 0);
// The Split patterns of Llama 3's and Qwen2's tokenizer.json, as written there: the numbers' run
// length (3 or 1) of the one matching `pattern` exactly, else 0.
int llama3_pattern_numbers(std::string_view pattern);

// The byte-level alphabet: byte b -> the printable character GPT-2 writes for it, as UTF-8.
const std::string& byte_to_char(uint8_t b);

// The ByteLevel pre-tokenizer on one segment: the optional prefix space, the regex (if use_regex),
// then every byte of each word replaced by its printable character. Appends the words.
void byte_level_pre_tokenize(std::string_view segment, const PreTokenizer& options,
                             std::vector<std::string>& words);

// The ByteLevel decoder: the bytes behind the printable characters of every token (a token with a
// character outside the alphabet contributes its own UTF-8), then lossy UTF-8.
std::string byte_level_decode(const std::vector<std::string>& tokens);

struct BpeConfig {
  std::optional<std::string> unk_token;  // none: a character missing from the vocab is dropped
  bool fuse_unk = false;                 // consecutive unknown characters -> one unk
  bool ignore_merges = false;            // a word that is itself in the vocab is one token
  bool byte_fallback = false;            // a character missing from the vocab -> its bytes' "<0xXX>"
                                         // tokens when all exist (Llama 2, Mistral), else unk
};

class BpeModel : public TokenizerModel {
 public:
  // merges in rank order. Error "<where>: ..." for a merge whose parts or result are not in vocab.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeConfig config, const std::string& where);
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;
  const Vocab& vocab() const override { return vocab_; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  std::vector<int32_t> merge_word(std::string_view word) const;
  // The ids of "<0xXX>" for every byte of `ch`, or nothing when one is missing (byte_fallback).
  std::vector<int32_t> byte_tokens(std::string_view ch) const;

  Vocab vocab_;
  BpeConfig config_;
  std::array<int32_t, 256> byte_ids_;  // byte_token_ids(vocab_) (declared after vocab_: made from it)
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  // word -> ids; bounded like the reference's (which stops inserting when full).
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
  mutable std::mutex cache_mutex_;
};

// vocab.json ({"token": id, ...}) and merges.txt ("#version" line, then "left right" per line).
// Every error names the file and, for merges, the line.
Vocab read_vocab_json(const std::string& path);
std::vector<std::pair<std::string, std::string>> read_merges_txt(const std::string& path);

// GPT-2 from vocab.json + merges.txt: ByteLevel (no prefix space), BPE, ByteLevel decoder, and
// "<|endoftext|>" as a special token when the vocab has it (as GPT2TokenizerFast does).
TokenizerParts gpt2_parts(const std::string& vocab_path, const std::string& merges_path);

}  // namespace normlab::bpe
