// wordpiece.h: BERT's WordPiece: the BertNormalizer (cleaning, CJK spacing, accent stripping,
// lowercasing), the BertPreTokenizer (white space and punctuation), the greedy longest-match-first
// WordPiece model with its "##" continuations, the WordPiece decoder, and vocab.txt loading.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/pipeline.h"

namespace normlab::wordpiece {

// The BertNormalizer on valid UTF-8, in the reference's order: clean_text, handle_chinese_chars,
// strip_accents (default: as lowercase), lowercase.
std::string bert_normalize(std::string_view text, const BertNormalizer& normalizer);

// The BertPreTokenizer: splits on white space (dropped) and isolates every punctuation character
// (ASCII 33-47, 58-64, 91-96, 123-126, or Unicode P*). Appends the words.
void bert_pre_tokenize(std::string_view text, std::vector<std::string>& words);

// " ." -> ".", " n't" -> "n't", ... on every token (the reference's tokenization cleanup).
std::string wordpiece_cleanup(std::string token);

// The WordPiece decoder: a token starting with the prefix is glued to the previous one (prefix
// dropped), any other token after the first gets a leading space.
std::string wordpiece_decode(const std::vector<std::string>& tokens, const Decoder& decoder);

class WordPieceModel : public TokenizerModel {
 public:
  // Error "<where>: ..." if unk_token is not in the vocabulary.
  WordPieceModel(Vocab vocab, std::string unk_token, std::string prefix,
                 size_t max_input_chars_per_word, const std::string& where);
  // Greedy longest match first; a word longer than max_input_chars_per_word code points, or with
  // a part no vocabulary entry covers, is the single unk token.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;
  const Vocab& vocab() const override { return vocab_; }

 private:
  Vocab vocab_;
  std::string prefix_;
  size_t max_chars_;
  int32_t unk_id_;
};

// vocab.txt: one token per line, the id is the line number from 0 (trailing white space trimmed).
Vocab read_vocab_txt(const std::string& path);

// BERT from vocab.txt, as BertTokenizerFast builds it: BertNormalizer (clean_text and
// handle_chinese_chars on, the given lowercase and strip_accents), BertPreTokenizer, WordPiece
// ([UNK], "##", 100 characters), [CLS] ... [SEP], the WordPiece decoder, and [PAD] [UNK] [CLS]
// [SEP] [MASK] matched in the raw text as special tokens.
TokenizerParts bert_parts(const std::string& vocab_path, bool lowercase,
                          std::optional<bool> strip_accents);

}  // namespace normlab::wordpiece
