// tokenizer.h: text <-> token ids, byte-exact with Hugging Face `tokenizers` 0.20.3 (the oracle
// in tests/torch/tokenizer_check.py). Two families:
//   GPT-2 byte-level BPE  vocab.json + merges.txt (or OpenAI's encoder.json + vocab.bpe), or a
//                         tokenizer.json with a BPE model and the ByteLevel pre-tokenizer;
//   BERT WordPiece        vocab.txt, or a tokenizer.json with a WordPiece model, BertNormalizer
//                         (or none), BertPreTokenizer and a Bert/Template post-processor.
// load_tokenizer() takes a file or a directory holding one of these. Anything else in a
// tokenizer.json (another model, normalizer, pre-tokenizer, post-processor or decoder) is an Error
// naming the file and the component: nothing is approximated. A tokenizer.json's truncation and
// padding are not applied (as transformers' tokenizers do not, unless asked per call).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/pipeline.h"

namespace normlab {

// What a vocab.txt cannot say about itself (a tokenizer.json says it; giving these for anything but
// a vocab.txt is an Error).
struct TokenizerOptions {
  std::optional<bool> lowercase;      // unset: true (BERT uncased)
  std::optional<bool> strip_accents;  // unset: as lowercase (the BertNormalizer default)
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerParts parts);

  // text must be UTF-8 (Error "text: invalid UTF-8 at byte offset N ..." otherwise). With
  // add_special_tokens the post-processor's ids ([CLS] ... [SEP]) are added; GPT-2 adds none.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Error for an id with no token. Special tokens are dropped unless asked for.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  // The token string of an id as the vocabulary writes it ("Ġworld", "##ing", "[CLS]"); Error
  // "id N is not in the vocabulary ..." if no token has it.
  const std::string& id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // 1 + the largest id (model vocabulary and added tokens): the embedding rows a model needs.
  int32_t vocab_size() const;
  // The tokens matched in the text before the model, e.g. [CLS] [SEP] [MASK] or <|endoftext|>.
  const std::vector<AddedToken>& added_tokens() const { return parts_.added_tokens; }
  // The ids added around every sequence by encode(text, true).
  const std::vector<int32_t>& prefix_ids() const { return parts_.prefix_ids; }
  const std::vector<int32_t>& suffix_ids() const { return parts_.suffix_ids; }
  // What was loaded from where, e.g. "GPT-2 byte-level BPE from '<dir>/encoder.json' and ...".
  const std::string& description() const { return parts_.source; }

 private:
  struct Segment {
    std::string text;
    std::optional<int32_t> id;  // set: an added token, already an id
  };
  // Cuts every text segment of `segments` around the matches of the added tokens whose
  // `normalized` flag equals `normalized`.
  void split_added(std::vector<Segment>& segments, bool normalized) const;
  // The text through the normalizer (BertNormalizer, NFC, or none: unchanged).
  std::string normalize(const std::string& text) const;
  bool normalizes() const { return parts_.normalizer || parts_.nfc; }

  TokenizerParts parts_;
  std::vector<std::string> normalized_content_;  // added token i as the normalizer writes it
};

// A file (tokenizer.json, vocab.json, encoder.json, vocab.txt: the merges file is looked up next
// to a vocab.json or encoder.json) or a directory holding tokenizer.json, vocab.json + merges.txt,
// encoder.json + vocab.bpe or vocab.txt (in that order of preference). Error naming the path if
// none is there or a file is malformed.
Tokenizer load_tokenizer(const std::string& path, const TokenizerOptions& options = {});

// The GPT-2 vocabulary vendored in third_party/gpt2-vocab (encoder.json + vocab.bpe).
std::string builtin_gpt2_tokenizer_dir();

// tokenizer.json -> the parts (tokenizer_json.cpp).
TokenizerParts tokenizer_json_parts(const std::string& path);

}  // namespace normlab
