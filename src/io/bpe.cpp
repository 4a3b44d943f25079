// bpe.cpp: GPT-2 byte-level BPE: the regex by hand (and Llama 3's / Qwen2's), the byte alphabet, merges by rank, the
// byte-level decoder, and vocab.json / merges.txt reading.
#include "io/bpe.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "io/unicode.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::bpe {

namespace {

enum class Gpt2Class : uint8_t { Space, Letter, Number, Other };

Gpt2Class gpt2_class(char32_t c) {
  if (unicode::is_white_space(c)) return Gpt2Class::Space;
  if (unicode::is_letter(c)) return Gpt2Class::Letter;
  if (unicode::is_number(c)) return Gpt2Class::Number;
  return Gpt2Class::Other;
}

// The end of the regex's match at code point i (every position matches one alternative, and the
// alternatives are tried in order, as a backtracking engine does).
size_t gpt2_match(const std::u32string& cp, const std::vector<Gpt2Class>& cls, size_t i) {
  const size_t n = cp.size();
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive: "'S" is not a contraction)
  if (cp[i] == U'\'' && i + 1 < n) {
    const char32_t a = cp[i + 1];
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
    if (i + 2 < n) {
      const char32_t b = cp[i + 2];
      if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l'))
        return i + 3;
    }
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020, then a run of one class.
  const size_t p = cp[i] == U' ' ? i + 1 : i;
  if (p < n && cls[p] != Gpt2Class::Space) {
    size_t j = p;
    while (j < n && cls[j] == cls[p]) ++j;
    return j;
  }
  // `\s+(?!\S)`: a white-space run that ends the text, or all of a run but its last character
  // (which then starts the next word, e.g. " world"); else `\s+` takes the single character.
  NL_ASSERT(cls[i] == Gpt2Class::Space);
  size_t j = i;
  while (j < n && cls[j] == Gpt2Class::Space) ++j;
  if (j == n) return n;
  return j - i >= 2 ? j - 1 : i + 1;
}

// Llama 3's regex (Qwen2's with max_numbers 1), by hand as gpt2_match: the end of its match at i.
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t llama3_match(const std::u32string& cp, const std::vector<Gpt2Class>& cls, size_t i, int max_numbers) {
  const size_t n = cp.size();
  const auto lower = [&](size_t k) { return k < n && cp[k] < 0x80 ? char32_t(std::tolower(int(cp[k]))) : cp[k]; };
  const auto newline = [&](size_t k) { return cp[k] == U'\r' || cp[k] == U'\n'; };
  // contractions, case-insensitive: 's 't 're 've 'm 'll 'd
  if (cp[i] == U'\'' && i + 1 < n) {
    const char32_t a = lower(i + 1), b = lower(i + 2);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
    if (i + 2 < n && ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l'))) return i + 3;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+: letters, after at most one character that is none of those
  {
    size_t p = i;
    if (cls[i] != Gpt2Class::Letter && cls[i] != Gpt2Class::Number && !newline(i) && i + 1 < n &&
        cls[i + 1] == Gpt2Class::Letter)
      p = i + 1;
    if (cls[p] == Gpt2Class::Letter) {
      while (p < n && cls[p] == Gpt2Class::Letter) ++p;
      return p;
    }
  }
  // \p{N}{1,max}
  if (cls[i] == Gpt2Class::Number) {
    size_t j = i;
    while (j < n && cls[j] == Gpt2Class::Number && int(j - i) < max_numbers) ++j;
    return j;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`: an optional U+0020, a run of other characters, the line breaks after it
  {
    const size_t p = cp[i] == U' ' ? i + 1 : i;
    if (p < n && cls[p] == Gpt2Class::Other) {
      size_t j = p;
      while (j < n && cls[j] == Gpt2Class::Other) ++j;
      while (j < n && newline(j)) ++j;
      return j;
    }
  }
  // what is left starts a white-space run
  NL_ASSERT(cls[i] == Gpt2Class::Space);
  size_t j = i;
  while (j < n && cls[j] == Gpt2Class::Space) ++j;
  // \s*[\r\n]+: the run up to and with its last line break
  for (size_t k = j; k > i; --k)
    if (newline(k - 1)) return k;
  // \s+(?!\S): a run that ends the text, or all of a run but its last character; else \s+
  if (j == n) return n;
  return j - i >= 2 ? j - 1 : j;
}

// The code points of text, their classes, and the byte offset of each (then the end).
struct Decoded {
  std::u32string cp;
  std::vector<Gpt2Class> cls;
  std::vector<size_t> offset;
};

Decoded decode(std::string_view text) {
  Decoded d{unicode::decode_utf8(text), {}, {}};
  d.cls.resize(d.cp.size());
  d.offset.assign(d.cp.size() + 1, 0);
  std::string scratch;
  for (size_t i = 0; i < d.cp.size(); ++i) {
    d.cls[i] = gpt2_class(d.cp[i]);
    scratch.clear();
    unicode::append_utf8(scratch, d.cp[i]);
    d.offset[i + 1] = d.offset[i] + scratch.size();
  }
  return d;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes take
// U+0100.. in byte order.
std::array<char32_t, 256> make_byte_chars() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[size_t(b)] = printable ? char32_t(b) : next++;
  }
  return map;
}

const std::array<char32_t, 256>& byte_chars() {
  static const std::array<char32_t, 256> map = make_byte_chars();
  return map;
}

// The inverse alphabet: character -> byte (every character is below U+0144).
const std::vector<int>& char_bytes() {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(0x144, -1);
    for (int b = 0; b < 256; ++b) inv[byte_chars()[size_t(b)]] = b;
    return inv;
  }();
  return inverse;
}

std::string bpe_read_file(const std::string& path, const char* what) {
  return read_file(path, what);
}

constexpr size_t kBpeCacheCapacity = 10000;  // words (the reference's default)
constexpr size_t kBpeCachedWordBytes = 4096;  // a longer word is not kept (its copy would be the memory)

}  // namespace

std::vector<std::pair<size_t, size_t>> regex_words(std::string_view text, int llama3_numbers) {
  const Decoded d = decode(text);
  std::vector<std::pair<size_t, size_t>> words;
  for (size_t i = 0; i < d.cp.size();) {
    const size_t end = llama3_numbers > 0 ? llama3_match(d.cp, d.cls, i, llama3_numbers) : gpt2_match(d.cp, d.cls, i);
    words.emplace_back(d.offset[i], d.offset[end]);
    i = end;
  }
  return words;
}

int llama3_pattern_numbers(std::string_view pattern) {
  const std::string_view head = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})";
  const std::string_view tail = R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pattern == std::string(head) + "{1,3}" + std::string(tail)) return 3;
  if (pattern == std::string(head) + std::string(tail)) return 1;
  return 0;
}

const std::string& byte_to_char(uint8_t b) {
  static const std::array<std::string, 256> utf8 = [] {
    std::array<std::string, 256> s;
    for (int k = 0; k < 256; ++k) unicode::append_utf8(s[size_t(k)], byte_chars()[size_t(k)]);
    return s;
  }();
  return utf8[b];
}

// One piece through the ByteLevel pre-tokenizer proper.
static void byte_level_piece(std::string_view piece, const PreTokenizer& options, std::vector<std::string>& words) {
  std::string text;
  if (options.add_prefix_space && (piece.empty() || piece.front() != ' ')) text = " ";
  text += piece;
  std::vector<std::pair<size_t, size_t>> ranges;
  if (options.use_regex)
    ranges = regex_words(text);
  else
    ranges.emplace_back(0, text.size());
  for (const auto& [begin, end] : ranges) {
    std::string word;
    for (size_t k = begin; k < end; ++k) word += byte_to_char(uint8_t(text[k]));
    words.push_back(std::move(word));
  }
}

void byte_level_pre_tokenize(std::string_view segment, const PreTokenizer& options,
                             std::vector<std::string>& words) {
  if (options.split_numbers > 0) {  // Split(Llama 3's regex, isolated) first, then ByteLevel on each piece
    for (const auto& [begin, end] : regex_words(segment, options.split_numbers))
      byte_level_piece(segment.substr(begin, end - begin), options, words);
    return;
  }
  if (!options.split_digits) return byte_level_piece(segment, options, words);
  // Digits(individual_digits) first: every numeric character is a piece of its own, the runs
  // between them are pieces too; then ByteLevel on each piece.
  size_t start = 0, pos = 0;
  for (char32_t c : unicode::decode_utf8(segment)) {
    const size_t len = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (unicode::is_numeric(c)) {
      if (pos > start) byte_level_piece(segment.substr(start, pos - start), options, words);
      byte_level_piece(segment.substr(pos, len), options, words);
      start = pos + len;
    }
    pos += len;
  }
  if (pos > start) byte_level_piece(segment.substr(start, pos - start), options, words);
}

std::string byte_level_decode(const std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& token : tokens) {
    const std::u32string chars = unicode::decode_utf8(token);
    std::string own;
    bool all_mapped = true;
    for (char32_t c : chars) {
      const int b = c < char_bytes().size() ? char_bytes()[c] : -1;
      if (b < 0) {
        all_mapped = false;
        break;
      }
      own += char(b);
    }
    bytes += all_mapped ? own : token;
  }
  return unicode::utf8_lossy(bytes);
}

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeConfig config, const std::string& where)
    : vocab_(std::move(vocab)), config_(std::move(config)), byte_ids_(byte_token_ids(vocab_)) {
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto a_id = vocab_.find(a), b_id = vocab_.find(b), new_id = vocab_.find(a + b);
    const char* missing = !a_id     ? "its left part"
                          : !b_id   ? "its right part"
                          : !new_id ? "the merged token"
                                    : nullptr;
    if (missing)
      throw Error(fmt::format("{}: merge {} (\"{} {}\"): {} is not in the vocabulary", where,
                              rank + 1, a, b, missing));
    // A pair listed twice keeps its last rank, as in the reference.
    merges_[pair_key(*a_id, *b_id)] = Merge{uint32_t(rank), *new_id};
  }
  if (config_.unk_token && !vocab_.find(*config_.unk_token))
    throw Error(
        fmt::format("{}: unk_token '{}' is not in the vocabulary", where, *config_.unk_token));
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (config_.ignore_merges)
    if (const auto id = vocab_.find(word)) {
      ids.push_back(*id);
      return;
    }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto hit = cache_.find(std::string(word));
    if (hit != cache_.end()) {
      ids.insert(ids.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  std::vector<int32_t> merged = merge_word(word);
  ids.insert(ids.end(), merged.begin(), merged.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kBpeCacheCapacity && word.size() <= kBpeCachedWordBytes)
    cache_.emplace(std::string(word), std::move(merged));
}

// The reference's Word::merge_all: a min-heap of candidate merges by (rank, position) over a
// linked list of symbols. An entry is stale when its symbol was absorbed or the pair at its
// position no longer merges into the same token.
std::vector<int32_t> BpeModel::byte_tokens(std::string_view ch) const {
  std::vector<int32_t> ids;
  for (char c : ch) {
    if (byte_ids_[uint8_t(c)] < 0) return {};
    ids.push_back(byte_ids_[uint8_t(c)]);
  }
  return ids;
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  struct Symbol {
    int32_t id;
    long prev, next;  // -1: none
    size_t len;       // bytes; 0 once merged into its left neighbour
  };
  std::vector<Symbol> sym;
  auto add = [&](int32_t id, size_t len) {
    const long n = long(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, len});
  };
  // One symbol per character; unknown characters become unk (fused if asked) or are dropped.
  // unk_len > 0: an unk symbol of that many bytes is pending.
  const int32_t unk_id = config_.unk_token ? *vocab_.find(*config_.unk_token) : -1;
  size_t unk_len = 0;
  const std::u32string chars = unicode::decode_utf8(word);
  std::string ch;
  for (char32_t c : chars) {
    ch.clear();
    unicode::append_utf8(ch, c);
    if (const auto id = vocab_.find(ch)) {
      if (unk_len > 0) add(unk_id, unk_len), unk_len = 0;
      add(*id, ch.size());
    } else if (const auto bytes = config_.byte_fallback ? byte_tokens(ch) : std::vector<int32_t>(); !bytes.empty()) {
      if (unk_len > 0) add(unk_id, unk_len), unk_len = 0;
      for (int32_t b : bytes) add(b, 1);
    } else if (unk_id >= 0) {
      if (unk_len > 0 && !config_.fuse_unk) add(unk_id, unk_len), unk_len = 0;
      unk_len += ch.size();
    }
  }
  if (unk_len > 0) add(unk_id, unk_len);

  struct Candidate {
    uint32_t rank;
    size_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto merge_of = [&](int32_t a, int32_t b) -> const Merge* {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i)
    if (const Merge* m = merge_of(sym[i].id, sym[i + 1].id)) queue.push({m->rank, i, m->new_id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const size_t right_pos = size_t(left.next);
    const Symbol right = sym[right_pos];
    const Merge* m = merge_of(left.id, right.id);
    if (!m || m->new_id != top.new_id) continue;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    sym[right_pos].len = 0;
    if (right.next != -1) sym[size_t(right.next)].prev = long(top.pos);
    if (left.prev != -1)
      if (const Merge* p = merge_of(sym[size_t(left.prev)].id, left.id))
        queue.push({p->rank, size_t(left.prev), p->new_id});
    if (left.next != -1)
      if (const Merge* q = merge_of(left.id, sym[size_t(left.next)].id))
        queue.push({q->rank, top.pos, q->new_id});
  }
  std::vector<int32_t> ids;
  for (const Symbol& s : sym)
    if (s.len != 0) ids.push_back(s.id);
  return ids;
}

Vocab read_vocab_json(const std::string& path) {
  const std::string text = bpe_read_file(path, "vocab");
  const nlohmann::json doc = parse_json(text, fmt::format("vocab '{}'", path));
  if (!doc.is_object())
    throw Error(fmt::format("vocab '{}': expected a JSON object {{\"token\": id, ...}}", path));
  Vocab vocab;
  const std::string where = fmt::format("vocab '{}'", path);
  for (const auto& [token, id] : doc.items()) {
    if (!id.is_number_integer())
      throw Error(
          fmt::format("{}: token \"{}\" has id {}, expected an integer", where, token, id.dump()));
    vocab.add(token, id.get<int64_t>(), where);
  }
  if (vocab.size() == 0) throw Error(fmt::format("{}: the vocabulary is empty", where));
  return vocab;
}

std::vector<std::pair<std::string, std::string>> read_merges_txt(const std::string& path) {
  const std::string text = bpe_read_file(path, "merges");
  unicode::check_utf8(text, fmt::format("merges '{}'", path));
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r' && end < text.size()) line.remove_suffix(1);
    if (line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw Error(
          fmt::format("merges '{}' line {}: expected two tokens separated by one space, got \"{}\"",
                      path, line_no, line));
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  return merges;
}

TokenizerParts gpt2_parts(const std::string& vocab_path, const std::string& merges_path) {
  TokenizerParts parts;
  parts.source = fmt::format("GPT-2 byte-level BPE from '{}' and '{}'", vocab_path, merges_path);
  Vocab vocab = read_vocab_json(vocab_path);
  if (const auto eot = vocab.find("<|endoftext|>"))
    parts.added_tokens.push_back({.content = "<|endoftext|>", .id = *eot, .special = true});
  parts.model = std::make_unique<BpeModel>(std::move(vocab), read_merges_txt(merges_path),
                                           BpeConfig{}, fmt::format("merges '{}'", merges_path));
  parts.pre_tokenizer = {PreTokenizerKind::ByteLevel, false, true};
  parts.decoder.kind = DecoderKind::ByteLevel;
  return parts;
}

}  // namespace normlab::bpe
