// spm.cpp: SentencePiece BPE (spm.h). The merge loop follows llama.cpp's llm_tokenizer_spm and
// sentencepiece's bpe_model.cc: a priority queue of adjacent pairs by the merged piece's score, with
// stale pairs (a side already merged into something else) skipped when they come up.
#include "io/spm.h"

#include <fmt/format.h>

#include <cstdio>
#include <queue>

#include "io/unicode.h"
#include "util/error.h"

namespace normlab::spm {

std::string metaspace(std::string_view segment, bool prefix) {
  std::string out;
  out.reserve(segment.size() + 3 * (prefix ? 1 : 0));
  if (prefix) out += kSpace;
  for (char c : segment) {
    if (c == ' ') out += kSpace;
    else out += c;
  }
  return out;
}

void metaspace_pre_tokenize(std::string_view segment, const PreTokenizer& o, bool at_start,
                            std::vector<std::string>& words) {
  std::string word = metaspace(segment, false);
  const bool prefix = o.add_prefix_space && (!o.prefix_first_only || at_start) &&
                      !(o.prefix_unless_present && word.starts_with(kSpace));
  if (prefix) word.insert(0, kSpace);
  if (!o.metaspace_split) {
    words.push_back(std::move(word));
    return;
  }
  size_t start = 0;  // each piece starts at a "▁" (the first may not)
  for (size_t at = 1; at < word.size(); at++)
    if (std::string_view(word).substr(at).starts_with(kSpace)) {
      words.push_back(word.substr(start, at - start));
      start = at;
    }
  if (start < word.size()) words.push_back(word.substr(start));
}

SpmModel::SpmModel(Vocab vocab, std::vector<float> scores, int32_t unk_id, const std::string& where)
    : vocab_(std::move(vocab)), scores_(std::move(scores)), unk_id_(unk_id) {
  if (scores_.size() != size_t(vocab_.max_id() + 1))
    throw Error(fmt::format("{}: {} scores for {} tokens", where, scores_.size(), vocab_.max_id() + 1));
  byte_ids_ = byte_token_ids(vocab_);
}

namespace {

struct Symbol {
  int prev, next;     // neighbours in the word (-1: none)
  size_t start, len;  // bytes of the word; len 0: merged into its left neighbour
};

struct Pair {
  float score;
  int left, right;
  size_t len;  // the merged piece's length when the pair was made (else the pair is stale)
};

struct Lower {  // the queue's top: the highest score, then the leftmost
  bool operator()(const Pair& a, const Pair& b) const { return a.score < b.score || (a.score == b.score && a.left > b.left); }
};

}  // namespace

void SpmModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  std::vector<Symbol> sym;
  for (size_t at = 0; at < word.size();) {
    const uint8_t lead = uint8_t(word[at]);  // (valid UTF-8: the encoder checked it)
    const size_t n = std::min(word.size() - at, size_t(lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4));
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, at, n});
    at += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  std::priority_queue<Pair, std::vector<Pair>, Lower> queue;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view piece = word.substr(sym[size_t(left)].start, sym[size_t(left)].len + sym[size_t(right)].len);
    if (const auto id = vocab_.find(piece)) queue.push({scores_[size_t(*id)], left, right, piece.size()});
  };
  for (size_t i = 1; i < sym.size(); i++) try_pair(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol &l = sym[size_t(p.left)], &r = sym[size_t(p.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;  // stale: a side changed
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int i = 0; i >= 0; i = sym[size_t(i)].next) {
    const std::string_view piece = word.substr(sym[size_t(i)].start, sym[size_t(i)].len);
    if (const auto id = vocab_.find(piece)) {
      ids.push_back(*id);
      continue;
    }
    for (char c : piece) {  // byte fallback
      const int32_t b = byte_ids_[uint8_t(c)];  // (-1: none)
      if (b < 0 && unk_id_ < 0)
        throw Error(fmt::format("the SentencePiece vocabulary has neither a piece nor a byte token for byte 0x{:02X}, "
                                "and no unknown token",
                                uint8_t(c)));
      ids.push_back(b >= 0 ? b : unk_id_);
      if (b < 0) break;  // one unknown token for the piece (sentencepiece without byte fallback)
    }
  }
}

std::string metaspace_decode(const std::vector<std::string>& tokens, bool prefix) {
  std::string bytes;
  for (const std::string& t : tokens) {
    unsigned value = 0;
    if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
        std::sscanf(t.c_str() + 3, "%2X", &value) == 1) {
      bytes += char(value);
      continue;
    }
    for (size_t at = 0; at < t.size();) {
      if (std::string_view(t).substr(at).starts_with(kSpace)) {
        bytes += ' ';
        at += kSpace.size();
      } else {
        bytes += t[at++];
      }
    }
  }
  if (prefix && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
  return unicode::utf8_lossy(bytes);
}

}  // namespace normlab::spm
