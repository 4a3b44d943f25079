// wordpiece.cpp: BERT's normalizer, pre-tokenizer, WordPiece model and decoder, and vocab.txt.
#include "io/wordpiece.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "io/unicode.h"
#include "util/error.h"
#include "util/files.h"

namespace normlab::wordpiece {

namespace {

bool is_bert_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;  // white space, not control, to BERT
  return unicode::is_other(c);
}

// The CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana, which separate words with
// spaces).
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_punctuation(char32_t c) {
  const bool ascii = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                     (c >= 123 && c <= 126);
  return ascii || unicode::is_punctuation(c);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

std::string bert_normalize(std::string_view text, const BertNormalizer& normalizer) {
  std::u32string s = unicode::decode_utf8(text);
  if (normalizer.clean_text) {
    std::u32string kept;
    kept.reserve(s.size());
    for (char32_t c : s) {
      if (c == 0 || c == 0xFFFD || is_bert_control(c)) continue;
      kept.push_back(unicode::is_white_space(c) ? U' ' : c);
    }
    s = std::move(kept);
  }
  if (normalizer.handle_chinese_chars) {
    std::u32string spaced;
    spaced.reserve(s.size());
    for (char32_t c : s) {
      if (is_chinese_char(c)) {
        spaced += U' ';
        spaced += c;
        spaced += U' ';
      } else {
        spaced += c;
      }
    }
    s = std::move(spaced);
  }
  if (normalizer.strip_accents.value_or(normalizer.lowercase)) {
    std::u32string stripped;
    for (char32_t c : unicode::nfd(s))
      if (!unicode::is_nonspacing_mark(c)) stripped += c;
    s = std::move(stripped);
  }
  if (normalizer.lowercase) {
    std::u32string lower;
    lower.reserve(s.size());
    for (char32_t c : s) unicode::append_lowercase(lower, c);
    s = std::move(lower);
  }
  return unicode::encode_utf8(s);
}

void bert_pre_tokenize(std::string_view text, std::vector<std::string>& words) {
  std::string word;
  for (char32_t c : unicode::decode_utf8(text)) {
    const bool space = unicode::is_white_space(c);
    if (space || is_bert_punctuation(c)) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
      if (!space) {
        words.emplace_back();
        unicode::append_utf8(words.back(), c);
      }
    } else {
      unicode::append_utf8(word, c);
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
}

std::string wordpiece_cleanup(std::string token) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_all(token, from, to);
  return token;
}

std::string wordpiece_decode(const std::vector<std::string>& tokens, const Decoder& decoder) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string token = tokens[i];
    if (i != 0) {
      if (token.starts_with(decoder.prefix))
        token.erase(0, decoder.prefix.size());
      else
        token.insert(0, " ");
    }
    out += decoder.cleanup ? wordpiece_cleanup(std::move(token)) : token;
  }
  return out;
}

WordPieceModel::WordPieceModel(Vocab vocab, std::string unk_token, std::string prefix,
                               size_t max_input_chars_per_word, const std::string& where)
    : vocab_(std::move(vocab)), prefix_(std::move(prefix)), max_chars_(max_input_chars_per_word) {
  const auto unk = vocab_.find(unk_token);
  if (!unk)
    throw Error(
        fmt::format("{}: the unknown token '{}' is not in the vocabulary", where, unk_token));
  unk_id_ = *unk;
}

void WordPieceModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  size_t chars = 0;
  for (char ch : word) chars += (uint8_t(ch) & 0xC0) != 0x80;
  if (chars > max_chars_) {
    ids.push_back(unk_id_);
    return;
  }
  std::vector<int32_t> pieces;
  std::string candidate;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    std::optional<int32_t> found;
    while (start < end) {
      candidate.assign(start > 0 ? prefix_ : std::string());
      candidate.append(word.substr(start, end - start));
      if ((found = vocab_.find(candidate))) break;
      do --end;  // drop the last code point
      while (end > start && (uint8_t(word[end]) & 0xC0) == 0x80);
    }
    if (!found) {
      ids.push_back(unk_id_);  // a part no entry covers: the whole word is unknown
      return;
    }
    pieces.push_back(*found);
    start = end;
  }
  ids.insert(ids.end(), pieces.begin(), pieces.end());
}

Vocab read_vocab_txt(const std::string& path) {
  const std::string text = read_file(path, "vocab");
  Vocab vocab;
  const std::string where = fmt::format("vocab '{}'", path);
  int64_t index = 0;
  for (size_t pos = 0; pos < text.size(); ++index) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    unicode::check_utf8(line, fmt::format("{} line {}", where, index + 1));
    std::u32string cps = unicode::decode_utf8(line);
    while (!cps.empty() && unicode::is_white_space(cps.back())) cps.pop_back();  // also the '\r'
    vocab.add(unicode::encode_utf8(cps), index, where);
  }
  if (vocab.size() == 0) throw Error(fmt::format("{}: the vocabulary is empty", where));
  return vocab;
}

TokenizerParts bert_parts(const std::string& vocab_path, bool lowercase,
                          std::optional<bool> strip_accents) {
  TokenizerParts parts;
  const bool strip = strip_accents.value_or(lowercase);
  parts.source =
      fmt::format("BERT WordPiece from '{}' ({}, {})", vocab_path,
                  lowercase ? "lowercased" : "cased", strip ? "accents stripped" : "accents kept");
  Vocab vocab = read_vocab_txt(vocab_path);
  const std::string where = fmt::format("vocab '{}'", vocab_path);
  for (const char* name : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (const auto id = vocab.find(name))
      parts.added_tokens.push_back({.content = name, .id = *id, .special = true});
  const auto cls = vocab.find("[CLS]"), sep = vocab.find("[SEP]");
  if (!cls || !sep)
    throw Error(fmt::format("{}: no [CLS] or no [SEP] token (not a BERT vocabulary?)", where));
  parts.prefix_ids = {*cls};
  parts.suffix_ids = {*sep};
  parts.normalizer = BertNormalizer{.clean_text = true,
                                    .handle_chinese_chars = true,
                                    .strip_accents = strip_accents,
                                    .lowercase = lowercase};
  parts.pre_tokenizer.kind = PreTokenizerKind::Bert;
  parts.model = std::make_unique<WordPieceModel>(std::move(vocab), "[UNK]", "##", 100, where);
  parts.decoder = {DecoderKind::WordPiece, "##", true};
  return parts;
}

}  // namespace normlab::wordpiece
