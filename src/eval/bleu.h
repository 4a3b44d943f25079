// bleu.h: BLEU (Papineni et al., 2002) exactly as sacrebleu 2.6.0 computes it by default: one
// reference, the 13a tokenizer (mteval-v13a, as used by WMT), case-sensitive, n-grams up to 4,
// the 'exp' smoothing (mteval's: the k-th order with no match counts as 1 / (2^k * total)), the
// brevity penalty exp(1 - ref_len / hyp_len) when the hypotheses are shorter. Corpus BLEU sums the
// statistics of all lines before scoring; sentence BLEU scores one line with sacrebleu's
// sentence_bleu defaults (effective order: orders with no n-grams at all are left out).
// tests/bleu_check.py compares `normlab bleu` with sacrebleu itself.
//
// Depends on nothing of the model: the trainer and the CLI call it with plain strings.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace normlab::bleu {

constexpr int kMaxOrder = 4;

// sacrebleu's Tokenizer13a on one line (after its rstrip): the tokens joined by single spaces.
std::string tokenize_13a(std::string_view line);
// The same, as tokens.
std::vector<std::string> tokens_13a(std::string_view line);

// The sufficient statistics of one or more lines (they add up).
struct Stats {
  long hyp_len = 0, ref_len = 0;          // tokens
  std::array<long, kMaxOrder> correct{};  // clipped n-gram matches, n = 1..4
  std::array<long, kMaxOrder> total{};    // hypothesis n-grams, n = 1..4
  Stats& operator+=(const Stats& o);
};

// The statistics of one hypothesis line against its reference line (both untokenized).
Stats line_stats(std::string_view hyp, std::string_view ref);

struct Score {
  double score = 0;                            // 0..100
  std::array<double, kMaxOrder> precisions{};  // percent, smoothed as sacrebleu reports them
  double bp = 0;                               // brevity penalty
  double ratio = 0;                            // hyp_len / ref_len (0 if ref_len == 0)
  Stats stats;
  bool effective_order = false;
  // "38.00 83.3/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)", as sacrebleu
  // prints it after the signature (the score with 2 decimals).
  std::string verbose() const;
  // "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:normlab"
  std::string signature() const;
};

// sacrebleu's BLEU.compute_bleu with smooth_method='exp'.
Score score_from_stats(const Stats& stats, bool effective_order = false);

// Corpus BLEU of aligned hypothesis and reference lines (Error if the counts differ or are 0).
Score corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs);

// Sentence BLEU of one line (sacrebleu.sentence_bleu: effective order).
Score sentence_bleu(std::string_view hyp, std::string_view ref);

}  // namespace normlab::bleu
