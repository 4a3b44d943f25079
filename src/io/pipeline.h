// pipeline.h: the stages a Tokenizer is assembled from, in the order the text meets them (the
// same stages as a Hugging Face tokenizer.json): added tokens matched in the text, a normalizer,
// a pre-tokenizer that cuts words, a model that turns each word into ids, a post-processor that
// adds [CLS]/[SEP]-style ids, and a decoder for the way back. The loaders (tokenizer.cpp for
// vocabulary files, tokenizer_json.cpp for tokenizer.json) fill a TokenizerParts.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace normlab {

// A token matched in the text before the model sees it ([CLS], <|endoftext|>, ...).
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;      // dropped by decode(..., skip_special_tokens = true)
  bool normalized = false;   // matched in the normalized text (true) or in the raw text (false)
  bool single_word = false;  // only where neither neighbour is a word character
  bool lstrip = false;       // also takes the white space on its left
  bool rstrip = false;       // also takes the white space on its right
};

// The largest token id a tokenizer may give (vocab_size() = 1 + the largest id must fit an int32).
inline constexpr int64_t kMaxTokenId = INT32_MAX - 1;

// token <-> id of a model. Ids are unique and in [0, kMaxTokenId]; they need not be contiguous, and
// memory follows the number of tokens, not the largest id (a file of two tokens, one with id 2^31 - 2,
// is a small table).
class Vocab {
 public:
  // Error "<where>: ..." on a negative or repeated id. A repeated token keeps its last id (as the
  // reference's hash map does, e.g. for a vocab.txt with a line twice).
  void add(std::string token, int64_t id, const std::string& where);
  std::optional<int32_t> find(std::string_view token) const;
  const std::string* token(int32_t id) const;  // null if no token has this id
  int32_t max_id() const { return max_id_; }  // -1 when empty
  size_t size() const { return ids_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::unordered_map<int32_t, std::string> tokens_;  // by id
  int32_t max_id_ = -1;
};

// The ids of the byte tokens "<0x00>" .. "<0xFF>" of SentencePiece-style vocabularies (byte
// fallback: spm.h, and BPE with byte_fallback), -1 where the vocabulary has none.
std::array<int32_t, 256> byte_token_ids(const Vocab& vocab);

// A model: one pre-tokenized word -> ids.
class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  // Appends the ids of one word (valid UTF-8, non-empty).
  virtual void tokenize(std::string_view word, std::vector<int32_t>& ids) const = 0;
  virtual const Vocab& vocab() const = 0;
};

// Hugging Face's BertNormalizer (BERT's BasicTokenizer cleaning).
struct BertNormalizer {
  bool clean_text = true;             // drop NUL, U+FFFD and control characters; white space -> ' '
  bool handle_chinese_chars = true;   // a space on both sides of every CJK ideograph
  std::optional<bool> strip_accents;  // NFD, then drop nonspacing marks; unset: as lowercase
  bool lowercase = true;
};

enum class PreTokenizerKind {
  ByteLevel,  // GPT-2: the pre-tokenization regex, then bytes -> printable characters
  Bert,       // split on white space (dropped) and around every punctuation character
  Metaspace,  // SentencePiece: a segment is one word, spaces -> U+2581, one in front (spm.h)
};

struct PreTokenizer {
  PreTokenizerKind kind = PreTokenizerKind::ByteLevel;
  bool add_prefix_space = false;  // ByteLevel: a space before a segment that lacks one; Metaspace:
                                  // "▁" before the text and after every added token (llama.cpp)
  bool use_regex = true;          // ByteLevel: cut words with the GPT-2 regex (else: one word)
  bool split_digits = false;      // ByteLevel: first cut every numeric character into a piece of
                                  // its own (Digits(individual_digits) before ByteLevel, as SmolLM2)
  int split_numbers = 0;          // ByteLevel: > 0: first cut with Llama 3's regex (a Split pre-tokenizer
                                  // before ByteLevel without its own regex), numbers in runs of at most
                                  // this many (Llama 3: 3; Qwen2: 1, its otherwise equal regex)
  // Metaspace, as Hugging Face's pre-tokenizer (the GGUF / sentencepiece form is all false):
  bool prefix_first_only = false;     // "▁" before the text's first segment only (prepend_scheme first)
  bool prefix_unless_present = false; // not before a segment that already starts with "▁"
  bool metaspace_split = false;       // cut the segment before every "▁" (split = true)
};

enum class DecoderKind {
  Join,       // no decoder: tokens joined with single spaces (the reference's fallback)
  ByteLevel,  // printable characters -> bytes -> UTF-8 (ill-formed bytes become U+FFFD)
  WordPiece,  // "##" continuations glued on, other tokens after a space
  Metaspace,  // SentencePiece: U+2581 -> ' ', "<0xXX>" -> the byte, the prefix space dropped (spm.h)
};

struct Decoder {
  DecoderKind kind = DecoderKind::Join;
  std::string prefix = "##";  // WordPiece
  bool cleanup = true;        // WordPiece: " ." -> ".", " n't" -> "n't", ...
  bool strip_prefix = false;  // Metaspace: drop the one space a prefix "▁" decodes to
};

struct TokenizerParts {
  std::string source;  // what was loaded, e.g. "GPT-2 byte-level BPE from '<dir>'"
  std::vector<AddedToken> added_tokens;
  std::optional<BertNormalizer> normalizer;
  bool nfc = false;  // instead: Hugging Face's NFC normalizer (Qwen2's), canonical composition (unicode::nfc)
  PreTokenizer pre_tokenizer;
  std::unique_ptr<TokenizerModel> model;
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor of one sequence: [CLS] / [SEP]
  Decoder decoder;
};

}  // namespace normlab
