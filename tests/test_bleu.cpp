// test_bleu.cpp: BLEU on small hand-checked cases: the 13a tokenizer (expected strings printed by
// sacrebleu 2.6.0's Tokenizer13a), the statistics, the score from its closed form (the product of
// the four precisions, the 'exp' smoothing, the brevity penalty, the effective order) and the
// errors. The comparison with sacrebleu itself on real and corrupted text is tests/bleu_check.py.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "eval/bleu.h"
#include "util/error.h"

using namespace normlab;

namespace {

// BLEU's closed form: 100 * BP * (p1 p2 p3 p4)^(1/4), precisions as fractions.
double closed_form(double bp, double p1, double p2, double p3, double p4) {
  return 100.0 * bp * std::pow(p1 * p2 * p3 * p4, 0.25);
}

}  // namespace

TEST(Tokenizer13a, MatchesSacrebleu) {
  // (input, what sacrebleu's Tokenizer13a()(input.rstrip()) returns)
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Hello, world!", "Hello , world !"},
      {"It costs $3.50, or 3,000 yen.", "It costs $ 3.50 , or 3,000 yen ."},
      {"e.g. U.S.A. end.", "e . g . U . S . A . end ."},
      {"1-2 a-b 3 -4", "1 - 2 a-b 3 -4"},
      {"&quot;x&quot; &amp;lt; &lt;b&gt;", "\" x \" < < b >"},
      {"don't (stop) [now] {ok} x/y @home #1 ~tilde `q` ^_^",
       "don't ( stop ) [ now ] { ok } x / y @ home # 1 ~ tilde ` q ` ^ _ ^"},
      {"¿Qué? ¡Sí! “quoted” — dash…", "¿Qué ? ¡Sí ! “quoted” — dash…"},
      {"a\u00a0b\u2003c\u200bd",
       "a b c\u200bd"},  // NBSP and EM SPACE split, ZERO WIDTH SPACE does not
      {"trailing.   ", "trailing ."},
      {"<skipped> gone", "gone"},
      {"", ""},
      {"...", ". . ."},
      {"a.b,c", "a . b , c"},
      {"5.", "5 ."},
      {".5", ". 5"},
      {"x ,y", "x , y"},
      {"tab\there\x1f"
       "unit-sep",
       "tab here unit-sep"},  // U+001F is white space to Python
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(bleu::tokenize_13a(in), want) << "input: " << in;
  EXPECT_EQ(bleu::tokens_13a("Hello, world!"),
            (std::vector<std::string>{"Hello", ",", "world", "!"}));
}

TEST(Bleu, StatisticsClipMatches) {
  // hyp "the the the the" against "the cat": 1 of the 4 unigrams matches (clipped to the ref's one)
  const bleu::Stats s = bleu::line_stats("the the the the", "the cat");
  EXPECT_EQ(s.hyp_len, 4);
  EXPECT_EQ(s.ref_len, 2);
  EXPECT_EQ(s.correct, (std::array<long, 4>{1, 0, 0, 0}));
  EXPECT_EQ(s.total, (std::array<long, 4>{4, 3, 2, 1}));
}

TEST(Bleu, ClosedFormAndSacrebleuValue) {
  // 5/6, 3/5, 1/4, 1/6 matched; sacrebleu: 37.99178428257963
  const bleu::Score s = bleu::corpus_bleu({"the cat sat on the mat"}, {"the cat is on the mat"});
  EXPECT_NEAR(s.score, closed_form(1, 5.0 / 6, 3.0 / 5, 1.0 / 4, 1.0 / 6), 1e-12);
  EXPECT_NEAR(s.score, 37.99178428257963, 1e-10);
  EXPECT_EQ(s.bp, 1.0);
  EXPECT_EQ(s.ratio, 1.0);
  EXPECT_NE(
      s.verbose().find("83.3/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)"),
      std::string::npos)
      << s.verbose();
  EXPECT_EQ(s.signature(), "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:normlab");
}

TEST(Bleu, ExpSmoothingOfUnmatchedOrders) {
  // "a b x d e" vs "a b c d e": 4/5, 2/4, then 0/3 and 0/2 -> 1/(2*3) and 1/(4*2)
  const bleu::Score s = bleu::corpus_bleu({"a b x d e"}, {"a b c d e"});
  EXPECT_NEAR(s.precisions[2], 100.0 / 6, 1e-12);
  EXPECT_NEAR(s.precisions[3], 100.0 / 8, 1e-12);
  EXPECT_NEAR(s.score, closed_form(1, 4.0 / 5, 2.0 / 4, 1.0 / 6, 1.0 / 8), 1e-12);
}

TEST(Bleu, BrevityPenalty) {
  // corpus of two lines: hyp 3 + 2 = 5 tokens, ref 3 + 4 = 7; every hyp n-gram matches
  const bleu::Score s = bleu::corpus_bleu({"a b c", "d e"}, {"a b c", "d e f g"});
  EXPECT_NEAR(s.bp, std::exp(1.0 - 7.0 / 5.0), 1e-15);
  EXPECT_NEAR(s.ratio, 5.0 / 7.0, 1e-15);
  // orders: 5/5, 3/3, 1/1, then no 4-grams at all: sacrebleu stops there and the missing order's
  // precision stays 0, so the corpus score is 0 (not smoothed)
  EXPECT_EQ(s.stats.total[3], 0);
  EXPECT_EQ(s.score, 0.0);
  // a longer hypothesis has no penalty
  EXPECT_EQ(bleu::corpus_bleu({"a b c d e"}, {"a b c d"}).bp, 1.0);
}

TEST(Bleu, NoMatchesEmptyHypothesesAndPerfect) {
  EXPECT_EQ(bleu::corpus_bleu({"x y z"}, {"a b c"}).score, 0.0);
  const bleu::Score empty = bleu::corpus_bleu({"", ""}, {"a b", "c"});
  EXPECT_EQ(empty.score, 0.0);
  EXPECT_EQ(empty.bp, 0.0);
  EXPECT_EQ(empty.stats.hyp_len, 0);
  EXPECT_NEAR(bleu::corpus_bleu({"one two three four", "five six seven eight."},
                                {"one two three four", "five six seven eight."})
                  .score,
              100.0, 1e-12);
}

TEST(Bleu, SentenceBleuUsesEffectiveOrder) {
  // "the cat" against a 6-token reference: orders 1 and 2 only, both 100%; BP = e^(1 - 6/2).
  // sacrebleu.sentence_bleu: 13.533528323661276
  const bleu::Score s = bleu::sentence_bleu("the cat", "the cat is on the mat");
  EXPECT_NEAR(s.score, 100.0 * std::exp(-2.0), 1e-12);
  EXPECT_TRUE(s.effective_order);
  EXPECT_EQ(s.signature(), "nrefs:1|case:mixed|eff:yes|tok:13a|smooth:exp|version:normlab");
  // the same line as a corpus is 0: no 3-grams
  EXPECT_EQ(bleu::corpus_bleu({"the cat"}, {"the cat is on the mat"}).score, 0.0);
}

TEST(Bleu, StatisticsAddUp) {
  bleu::Stats a = bleu::line_stats("a b c", "a b d");
  const bleu::Stats b = bleu::line_stats("e f", "e f");
  a += b;
  const bleu::Score whole = bleu::corpus_bleu({"a b c", "e f"}, {"a b d", "e f"});
  EXPECT_EQ(bleu::score_from_stats(a).score, whole.score);
}

TEST(Bleu, Errors) {
  EXPECT_THROW(bleu::corpus_bleu({"a"}, {"a", "b"}), Error);
  EXPECT_THROW(bleu::corpus_bleu({}, {}), Error);
  try {
    bleu::corpus_bleu({"a", "b", "c"}, {"a"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 hypothesis lines but 1 reference lines"),
              std::string::npos)
        << e.what();
  }
}
