// spm.h: SentencePiece's BPE as llama.cpp and the `sentencepiece` library run it, for the
// vocabularies of llama-family GGUF files (tokenizer.ggml.model = "llama": tokens, scores, token
// types): the Metaspace pre-tokenizer (spaces become U+2581 "▁", one before the text), the model that
// merges the adjacent pair whose merged piece has the highest score, byte fallback, and the decoder
// back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/pipeline.h"

namespace normlab::spm {

inline constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// One segment of text as one word: every ' ' replaced by "▁", and "▁" in front when `prefix`.
std::string metaspace(std::string_view segment, bool prefix);

// The Metaspace pre-tokenizer on one segment (text between added tokens; at_start: the text's first):
// metaspace(), its prefix as `options` say (add_prefix_space; prefix_first_only: only at_start;
// prefix_unless_present: not when the segment already starts with "▁" after the replacement), then
// with metaspace_split the word cut before every "▁". Appends the words.
void metaspace_pre_tokenize(std::string_view segment, const PreTokenizer& options, bool at_start,
                            std::vector<std::string>& words);

class SpmModel : public TokenizerModel {
 public:
  // scores[i] is the score of the token with id i (the merge priority: higher first); byte tokens
  // "<0xXX>" are the fallback of bytes no piece covers; unk_id (or -1) what a byte without one gives.
  // Error naming `where` when scores and tokens differ in number.
  SpmModel(Vocab vocab, std::vector<float> scores, int32_t unk_id, const std::string& where);
  // Appends the ids of `word` (a metaspace()d segment): from its characters, merges the adjacent pair
  // of highest score (the leftmost among equals) while the merged piece is a token, then looks each
  // piece up, bytes of an unknown piece through the byte tokens.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;
  const Vocab& vocab() const override { return vocab_; }

 private:
  Vocab vocab_;
  std::vector<float> scores_;
  int32_t unk_id_;
  std::array<int32_t, 256> byte_ids_;  // "<0xXX>" -> id, or -1 (byte_token_ids)
};

// The decoder: "▁" -> ' ', byte tokens "<0xXX>" -> their bytes (then lossy UTF-8), and the one space
// that metaspace() put in front removed (when `prefix`).
std::string metaspace_decode(const std::vector<std::string>& tokens, bool prefix);

}  // namespace normlab::spm
