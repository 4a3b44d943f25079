// bleu.cpp: sacrebleu's 13a tokenizer, n-gram statistics and compute_bleu, transcribed step by step
// (sacrebleu/tokenizers/tokenizer_13a.py, tokenizer_re.py, metrics/bleu.py, metrics/helpers.py)
// so that every intermediate value, and the order of the floating-point operations, is the same.
#include "eval/bleu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "util/error.h"

namespace normlab::bleu {

namespace {

// Python's str.isspace (what str.split() and str.rstrip() use): bidirectional class WS, B or S, or
// category Zs. The complete list (stable since Unicode 6.3, when U+180E stopped being one).
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The length of the UTF-8 sequence at s[i] and its code point. BLEU's input is checked UTF-8 (the
// CLI checks it); a stray byte here counts as one non-space character.
size_t utf8_at(std::string_view s, size_t i, char32_t& cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  if (i + len > s.size()) len = 1;
  cp = len == 1 ? b : (len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return len;
}

// Python's str.split() with no arguments.
std::vector<std::string> split_python(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const size_t len = utf8_at(s, i, cp);
    if (is_python_space(cp)) {
      if (!cur.empty()) out.push_back(std::move(cur)), cur.clear();
    } else {
      cur.append(s.substr(i, len));
    }
    i += len;
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// Python's str.rstrip() with no arguments.
std::string_view rstrip_python(std::string_view s) {
  size_t end = 0;  // one past the last non-space code point
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const size_t len = utf8_at(s, i, cp);
    i += len;
    if (!is_python_space(cp)) end = i;
  }
  return s.substr(0, end);
}

// Python's str.replace(from, to): non-overlapping, left to right.
std::string replace_python(std::string s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  out.append(s, pos, std::string::npos);
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The first rule's class [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII symbols and the space, but not
// ' - . , (those have rules of their own or none).
bool is_13a_symbol(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) ||
         (u >= 0x28 && u <= 0x2B) || (u >= 0x3A && u <= 0x40) || u == 0x2F;
}

// One of the two-character substitutions of TokenizerRegexp, as re.sub applies it: scanning left to
// right, a match at i is replaced and the scan resumes after it. Working on UTF-8 bytes gives the
// same result as Python on code points: every class is ASCII except [^0-9], and a multi-byte
// character matches [^0-9] as a whole exactly when its last byte does.
template <class Match, class Emit>
std::string substitute_pairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// The statistics' n-grams: tokens joined by ' ' (tokens hold no white space, so the key is exact
// and its order is its number of spaces + 1).
std::unordered_map<std::string, long> count_ngrams(const std::vector<std::string>& tokens) {
  std::unordered_map<std::string, long> counts;
  for (int n = 1; n <= kMaxOrder; ++n)
    for (size_t i = 0; i + size_t(n) <= tokens.size(); ++i) {
      std::string key = tokens[i];
      for (int k = 1; k < n; ++k) key.append(" ").append(tokens[i + size_t(k)]);
      ++counts[key];
    }
  return counts;
}

// sacrebleu.utils.my_log
double my_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

}  // namespace

std::string tokenize_13a(std::string_view line_in) {
  // Tokenizer13a.__call__ (BLEU._preprocess_segment rstrips first)
  std::string line(rstrip_python(line_in));
  line = replace_python(line, "<skipped>", "");
  line = replace_python(line, "-\n", "");
  line = replace_python(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    line = replace_python(line, "&quot;", "\"");
    line = replace_python(line, "&amp;", "&");
    line = replace_python(line, "&lt;", "<");
    line = replace_python(line, "&gt;", ">");
  }
  line = " " + line + " ";

  // TokenizerRegexp.__call__
  std::string s;
  s.reserve(line.size() * 2);
  for (char c : line) {  // ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 '
    if (is_13a_symbol(c))
      s.append(1, ' ').append(1, c).append(1, ' ');
    else
      s += c;
  }
  // ([^0-9])([\.,]) -> '\1 \2 '   (period and comma unless preceded by a digit)
  s = substitute_pairs(
      s, [](char a, char b) { return !is_digit(a) && (b == '.' || b == ','); },
      [](std::string& o, char a, char b) {
        o.append(1, a).append(1, ' ').append(1, b).append(1, ' ');
      });
  // ([\.,])([^0-9]) -> ' \1 \2'   (period and comma unless followed by a digit)
  s = substitute_pairs(
      s, [](char a, char b) { return (a == '.' || a == ',') && !is_digit(b); },
      [](std::string& o, char a, char b) {
        o.append(1, ' ').append(1, a).append(1, ' ').append(1, b);
      });
  // ([0-9])(-) -> '\1 \2 '   (dash after a digit)
  s = substitute_pairs(
      s, [](char a, char b) { return is_digit(a) && b == '-'; },
      [](std::string& o, char a, char b) {
        o.append(1, a).append(1, ' ').append(1, b).append(1, ' ');
      });

  std::string out;
  for (const std::string& t : split_python(s)) out.append(out.empty() ? "" : " ").append(t);
  return out;
}

std::vector<std::string> tokens_13a(std::string_view line) {
  return split_python(tokenize_13a(line));
}

Stats& Stats::operator+=(const Stats& o) {
  hyp_len += o.hyp_len, ref_len += o.ref_len;
  for (int n = 0; n < kMaxOrder; ++n) correct[n] += o.correct[n], total[n] += o.total[n];
  return *this;
}

Stats line_stats(std::string_view hyp, std::string_view ref) {
  const std::vector<std::string> h = tokens_13a(hyp), r = tokens_13a(ref);
  const auto hyp_ngrams = count_ngrams(h), ref_ngrams = count_ngrams(r);
  Stats st;
  st.hyp_len = long(h.size()), st.ref_len = long(r.size());  // one reference: it is the closest
  for (const auto& [ngram, count] : hyp_ngrams) {
    const size_t n = size_t(std::count(ngram.begin(), ngram.end(), ' '));
    st.total[n] += count;
    if (auto it = ref_ngrams.find(ngram); it != ref_ngrams.end())
      st.correct[n] += std::min(count, it->second);
  }
  return st;
}

Score score_from_stats(const Stats& stats, bool effective_order) {
  Score s;
  s.stats = stats;
  s.effective_order = effective_order;
  const long sys_len = stats.hyp_len, ref_len = stats.ref_len;
  s.bp = 1.0;
  if (sys_len < ref_len)
    s.bp = sys_len > 0 ? std::exp(1.0 - double(ref_len) / double(sys_len)) : 0.0;
  s.ratio = ref_len ? double(sys_len) / double(ref_len) : 0.0;
  bool any_correct = false;
  for (long c : stats.correct) any_correct |= c != 0;
  if (!any_correct) return s;  // score 0, precisions 0 (sacrebleu #141)

  double smooth_mteval = 1.0;
  int eff_order = kMaxOrder;
  for (int n = 1; n <= kMaxOrder; ++n) {
    const long correct = stats.correct[n - 1], total = stats.total[n - 1];
    if (total == 0) break;
    if (effective_order) eff_order = n;
    if (correct == 0) {
      smooth_mteval *= 2;
      s.precisions[n - 1] = 100. / (smooth_mteval * double(total));
    } else {
      s.precisions[n - 1] = 100. * double(correct) / double(total);
    }
  }
  double sum = 0;
  for (int n = 0; n < eff_order; ++n) sum += my_log(s.precisions[n]);
  s.score = s.bp * std::exp(sum / eff_order);
  return s;
}

std::string Score::verbose() const {
  return fmt::format(
      "{:.2f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})",
      score, precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio, stats.hyp_len,
      stats.ref_len);
}

std::string Score::signature() const {
  return fmt::format("nrefs:1|case:mixed|eff:{}|tok:13a|smooth:exp|version:normlab",
                     effective_order ? "yes" : "no");
}

Score corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs) {
  if (hyps.size() != refs.size())
    throw Error(
        fmt::format("BLEU: {} hypothesis lines but {} reference lines", hyps.size(), refs.size()));
  if (hyps.empty()) throw Error("BLEU: no lines to score");
  Stats total;
  for (size_t i = 0; i < hyps.size(); ++i) total += line_stats(hyps[i], refs[i]);
  return score_from_stats(total);
}

Score sentence_bleu(std::string_view hyp, std::string_view ref) {
  return score_from_stats(line_stats(hyp, ref), true);
}

}  // namespace normlab::bleu
