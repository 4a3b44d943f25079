// tokenizer.cpp: the Tokenizer pipeline (added tokens, normalizer, pre-tokenizer, model,
// post-processor; decoders on the way back), the Vocab, and load_tokenizer's file detection.
#include "io/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <filesystem>

#include "io/bpe.h"
#include "io/spm.h"
#include "io/gguf_tokenizer.h"
#include "io/unicode.h"
#include "io/wordpiece.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/resources.h"

namespace normlab {

namespace fs = std::filesystem;

std::array<int32_t, 256> byte_token_ids(const Vocab& vocab) {
  std::array<int32_t, 256> ids;
  for (int b = 0; b < 256; b++) ids[size_t(b)] = vocab.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
  return ids;
}

void Vocab::add(std::string token, int64_t id, const std::string& where) {
  if (id < 0 || id > kMaxTokenId)
    throw Error(fmt::format("{}: token \"{}\" has id {}, outside [0, {}]", where, token, id, kMaxTokenId));
  const int32_t key = int32_t(id);
  if (const auto taken = tokens_.find(key); taken != tokens_.end())
    throw Error(fmt::format("{}: id {} is given to both \"{}\" and \"{}\"", where, id, taken->second, token));
  if (const auto old = ids_.find(token); old != ids_.end()) tokens_.erase(old->second);
  tokens_[key] = token;
  max_id_ = std::max(max_id_, key);  // a replaced id keeps counting: as before, the table's length
  ids_[std::move(token)] = key;
}

std::optional<int32_t> Vocab::find(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* Vocab::token(int32_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

Tokenizer::Tokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  if (!parts_.model) throw Error(fmt::format("{}: no model", parts_.source));
  for (const AddedToken& t : parts_.added_tokens)
    normalized_content_.push_back(t.normalized ? normalize(t.content) : t.content);
}

std::string Tokenizer::normalize(const std::string& text) const {
  if (parts_.normalizer) return wordpiece::bert_normalize(text, *parts_.normalizer);
  if (parts_.nfc) return unicode::encode_utf8(unicode::nfc(unicode::decode_utf8(text)));
  return text;
}

namespace {

// The last code point before byte `end` / the first at byte `begin` of valid UTF-8.
char32_t code_point_before(const std::string& s, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && (uint8_t(s[begin]) & 0xC0) == 0x80) --begin;
  return unicode::decode_utf8(std::string_view(s).substr(begin, end - begin)).front();
}

char32_t code_point_at(const std::string& s, size_t begin) {
  size_t end = begin + 1;
  while (end < s.size() && (uint8_t(s[end]) & 0xC0) == 0x80) ++end;
  return unicode::decode_utf8(std::string_view(s).substr(begin, end - begin)).front();
}

// Start of the white space that ends s[0, end) / end of the white space that starts s[begin, ..).
size_t white_space_start_before(const std::string& s, size_t end) {
  while (end > 0 && unicode::is_white_space(code_point_before(s, end))) {
    --end;
    while (end > 0 && (uint8_t(s[end]) & 0xC0) == 0x80) --end;
  }
  return end;
}

size_t white_space_end_after(const std::string& s, size_t begin) {
  while (begin < s.size() && unicode::is_white_space(code_point_at(s, begin))) {
    ++begin;
    while (begin < s.size() && (uint8_t(s[begin]) & 0xC0) == 0x80) ++begin;
  }
  return begin;
}

}  // namespace

// The reference's AddedVocabulary::find_matches: leftmost-longest matches, scanning on after each
// match's end; a single_word token next to a word character is skipped; lstrip / rstrip widen the
// match over adjacent white space.
void Tokenizer::split_added(std::vector<Segment>& segments, bool normalized) const {
  std::vector<size_t> candidates;
  std::array<bool, 256> first_byte{};
  for (size_t k = 0; k < parts_.added_tokens.size(); ++k)
    if (parts_.added_tokens[k].normalized == normalized && !normalized_content_[k].empty()) {
      candidates.push_back(k);
      first_byte[uint8_t(
          (normalized ? normalized_content_[k] : parts_.added_tokens[k].content)[0])] = true;
    }
  if (candidates.empty()) return;
  std::vector<Segment> out;
  for (Segment& seg : segments) {
    if (seg.id) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::string& s = seg.text;
    size_t start_offset = 0;
    for (size_t pos = 0; pos < s.size();) {
      size_t start = std::string::npos, length = 0;
      const AddedToken* token = nullptr;
      for (size_t p = pos; p < s.size() && !token; ++p) {
        if (!first_byte[uint8_t(s[p])]) continue;
        for (size_t k : candidates) {
          const std::string& pattern =
              normalized ? normalized_content_[k] : parts_.added_tokens[k].content;
          if (pattern.size() > length && s.compare(p, pattern.size(), pattern) == 0)
            start = p, length = pattern.size(), token = &parts_.added_tokens[k];
        }
      }
      if (!token) break;
      size_t stop = start + length;
      pos = stop;
      if (token->single_word) {
        const bool space_before = start == 0 || !unicode::is_word_char(code_point_before(s, start));
        const bool space_after = stop == s.size() || !unicode::is_word_char(code_point_at(s, stop));
        if (!space_before || !space_after) continue;
      }
      if (token->lstrip) start = std::max(white_space_start_before(s, start), start_offset);
      if (token->rstrip) stop = white_space_end_after(s, stop);
      if (start_offset < start) out.push_back({s.substr(start_offset, start - start_offset), {}});
      out.push_back({s.substr(start, stop - start), token->id});
      start_offset = stop;
    }
    if (start_offset < s.size()) out.push_back({s.substr(start_offset), {}});
  }
  segments = std::move(out);
}

// Memory, checked before it is allocated: a piece of text whose tokenization would need more than
// this machine (or ulimit -v) has free is refused, naming what in the text makes it so. Working bytes
// per byte of text: the byte-level pre-tokenizer's (each character decoded with its class and byte
// offset: 4 + 4 + 8) and the model's on one word (BPE's merge, the largest: a 32-byte symbol per
// character, up to two queued candidate merges of 24 bytes, the word as UTF-32, its ids and a copy).
// SentencePiece's indices are int, so no word may exceed INT32_MAX bytes. Only pieces of 1 MiB and
// more are checked (/proc/meminfo is read for them).
constexpr size_t kPreTokenizerBytesPerByte = 16, kModelBytesPerByte = 96, kCheckedBytes = size_t(1) << 20;

// `what()` names the text in the message (made only for a refusal: this runs once per word).
template <class What>
static void check_fits(size_t bytes, size_t per_byte, const What& what) {
  if (bytes < kCheckedBytes) return;
  const double need = double(bytes) * double(per_byte);
  const std::optional<uint64_t> free = available_memory_bytes();
  if (bytes <= size_t(INT32_MAX) && (!free || need <= double(*free))) return;
  const std::string why = bytes > size_t(INT32_MAX)
                              ? fmt::format("more than the {} bytes a word may have", INT32_MAX)
                              : fmt::format("tokenizing it needs about {} and only {} is available", memory_text(need),
                                            memory_text(double(*free)));
  throw Error(fmt::format("the text holds {}: {}; split the text into smaller pieces", what(), why));
}

// The byte-level and BERT pre-tokenizers cut words at white space, so a segment is pre-tokenized and
// tokenized a piece of about kPieceBytes at a time (the memory of a corpus is its ids, not its words).
// A piece ends before a space that follows an ASCII byte other than white space: every word of those
// pre-tokenizers starts there (GPT-2's and Llama 3's patterns hold a space only at a match's start or
// in a run of white space, and none reaches from a non-white byte into white space; BERT's ends a
// word at white space), and a piece that starts with a space gets no prefix space, so the pieces give
// the words of the whole segment.
constexpr size_t kPieceBytes = size_t(1) << 20;

static size_t piece_end(std::string_view s, size_t from) {
  for (size_t p = std::max(from + kPieceBytes, size_t(1)); p < s.size(); p++) {
    const unsigned char before = static_cast<unsigned char>(s[p - 1]);
    if (s[p] == ' ' && before < 0x80 && !std::isspace(before)) return p;
  }
  return s.size();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  unicode::check_utf8(text, "text");
  std::vector<Segment> segments;
  if (!text.empty()) segments.push_back({std::string(text), {}});
  split_added(segments, /*normalized=*/false);
  if (normalizes()) {
    for (Segment& seg : segments)
      if (!seg.id) seg.text = normalize(seg.text);
    std::erase_if(segments, [](const Segment& seg) { return !seg.id && seg.text.empty(); });
  }
  split_added(segments, /*normalized=*/true);

  std::vector<int32_t> ids;
  if (add_special_tokens) ids = parts_.prefix_ids;
  std::vector<std::string> words;
  for (size_t k = 0; k < segments.size(); k++) {
    const Segment& seg = segments[k];
    if (seg.id) {
      ids.push_back(*seg.id);
      continue;
    }
    const PreTokenizer& pre = parts_.pre_tokenizer;
    const std::string_view text = seg.text;
    const bool byte_level = pre.kind == PreTokenizerKind::ByteLevel;
    const bool in_pieces = pre.kind == PreTokenizerKind::Bert || (byte_level && pre.use_regex);
    for (size_t start = 0, end = 0; start < text.size(); start = end) {
      end = in_pieces ? piece_end(text, start) : text.size();
      const std::string_view piece = text.substr(start, end - start);
      if (byte_level)
        check_fits(piece.size(), kPreTokenizerBytesPerByte, [&] {
          return fmt::format("{} bytes without a space, which its pre-tokenizer reads as one piece", piece.size());
        });
      words.clear();
      if (byte_level)
        bpe::byte_level_pre_tokenize(piece, pre, words);
      else if (pre.kind == PreTokenizerKind::Metaspace)
        spm::metaspace_pre_tokenize(piece, pre, /*at_start=*/k == 0, words);
      else
        wordpiece::bert_pre_tokenize(piece, words);
      for (const std::string& word : words) {
        check_fits(word.size(), kModelBytesPerByte, [&] {
          return fmt::format("a word of {} bytes ({})", word.size(),
                             pre.kind == PreTokenizerKind::Metaspace
                                 ? "a SentencePiece tokenizer takes all the text between two added tokens as one word"
                                 : "its pre-tokenizer splits text at white space and between letters, digits and "
                                   "other characters");
        });
        parts_.model->tokenize(word, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), parts_.suffix_ids.begin(), parts_.suffix_ids.end());
  return ids;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  for (const AddedToken& t : parts_.added_tokens)
    if (t.id == id) return t.content;
  if (const std::string* token = parts_.model->vocab().token(id)) return *token;
  throw Error(fmt::format("id {} is not in the vocabulary of {} (ids 0..{})", id, parts_.source,
                          vocab_size() - 1));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : parts_.added_tokens)
    if (t.content == token) return t.id;
  return parts_.model->vocab().find(token);
}

int32_t Tokenizer::vocab_size() const {
  int32_t max_id = parts_.model->vocab().max_id();
  for (const AddedToken& t : parts_.added_tokens) max_id = std::max(max_id, t.id);
  return max_id + 1;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    const std::string& token = id_to_token(id);
    const bool special =
        std::any_of(parts_.added_tokens.begin(), parts_.added_tokens.end(),
                    [&](const AddedToken& t) { return t.special && t.content == token; });
    if (!(skip_special_tokens && special)) tokens.push_back(token);
  }
  switch (parts_.decoder.kind) {
    case DecoderKind::ByteLevel:
      return bpe::byte_level_decode(tokens);
    case DecoderKind::WordPiece:
      return wordpiece::wordpiece_decode(tokens, parts_.decoder);
    case DecoderKind::Metaspace:
      return spm::metaspace_decode(tokens, parts_.decoder.strip_prefix);
    case DecoderKind::Join:
      break;
  }
  std::string joined;
  for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
  return joined;
}

std::string builtin_gpt2_tokenizer_dir() {
  return resource_path("third_party/gpt2-vocab");
}

Tokenizer load_tokenizer(const std::string& path, const TokenizerOptions& options) {
  const fs::path p(path);
  std::error_code ec;
  if (!fs::exists(p, ec))
    throw Error(fmt::format("tokenizer '{}': no such file or directory", path));
  auto gpt2 = [&](const fs::path& vocab, const fs::path& merges) {
    if (!fs::is_regular_file(merges, ec))
      throw Error(fmt::format("tokenizer '{}': {} needs {} next to it, which is missing", path,
                              vocab.filename().string(), merges.filename().string()));
    return bpe::gpt2_parts(vocab.string(), merges.string());
  };
  TokenizerParts parts;
  bool is_vocab_txt = false;
  if (fs::is_directory(p, ec)) {
    if (fs::is_regular_file(p / "tokenizer.json", ec)) {
      parts = tokenizer_json_parts((p / "tokenizer.json").string());
    } else if (fs::is_regular_file(p / "vocab.json", ec)) {
      parts = gpt2(p / "vocab.json", p / "merges.txt");
    } else if (fs::is_regular_file(p / "encoder.json", ec)) {
      parts = gpt2(p / "encoder.json", p / "vocab.bpe");
    } else if (fs::is_regular_file(p / "vocab.txt", ec)) {
      is_vocab_txt = true;
    } else {
      throw Error(
          fmt::format("tokenizer directory '{}' holds none of tokenizer.json, vocab.json + "
                      "merges.txt, encoder.json + vocab.bpe, vocab.txt",
                      path));
    }
  } else {
    const std::string name = p.filename().string();
    if (name == "vocab.json")
      parts = gpt2(p, p.parent_path() / "merges.txt");
    else if (name == "encoder.json")
      parts = gpt2(p, p.parent_path() / "vocab.bpe");
    else if (p.extension() == ".json")
      parts = tokenizer_json_parts(path);
    else if (p.extension() == ".txt")
      is_vocab_txt = true;
    else if (gguf::is_gguf(path))
      parts = gguf::tokenizer_parts(gguf::read(path));
    else
      throw Error(
          fmt::format("tokenizer '{}': not a tokenizer file (expected tokenizer.json, "
                      "vocab.json, encoder.json or vocab.txt)",
                      path));
  }
  if (is_vocab_txt)
    return Tokenizer(
        wordpiece::bert_parts(fs::is_directory(p, ec) ? (p / "vocab.txt").string() : path,
                              options.lowercase.value_or(true), options.strip_accents));
  if (options.lowercase || options.strip_accents)
    throw Error(
        fmt::format("tokenizer '{}': lowercase / strip_accents options apply to a vocab.txt only "
                    "(this tokenizer states its own normalization)",
                    path));
  return Tokenizer(std::move(parts));
}

}  // namespace normlab
