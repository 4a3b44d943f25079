// test_tokenizer.cpp: the tokenizers on small hand-checked cases (UTF-8, the character classes,
// the GPT-2 regex, BPE merge order, WordPiece, BERT normalization, special tokens, decoding) and
// every error path (ill-formed text and files, unsupported tokenizer.json components). The
// comparison with Hugging Face `tokenizers` on a large text set is tests/torch/tokenizer_check.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/bpe.h"
#include "io/spm.h"
#include "io/tokenizer.h"
#include "io/unicode.h"
#include "io/wordpiece.h"
#include "util/error.h"

namespace fs = std::filesystem;
using namespace normlab;

namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("normlab_tok_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
    return (path_ / name).string();
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// Expects fn to throw Error whose message contains every needle.
template <class Fn>
void expect_error(Fn fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown; expected one with '" << needles.front() << "'";
  } catch (const Error& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << n;
  }
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  for (const auto& [b, e] : bpe::regex_words(text)) words.push_back(text.substr(b, e - b));
  return words;
}

std::vector<std::string> tokens_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.id_to_token(id));
  return out;
}

const Tokenizer& gpt2() {
  static const Tokenizer tok = load_tokenizer(builtin_gpt2_tokenizer_dir());
  return tok;
}

// A BERT vocab.txt small enough to check by hand.
const char* kBertVocab =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\nhello\nworld\n!\n,\n##s\n\xe4\xbd\xa0\n"
    "\xe5\xa5\xbd\nhe\n##llo\ncafe\nH\xc3\xa9llo\n";
enum BertId {
  PAD,
  UNK,
  CLS,
  SEP,
  MASK,
  UN,
  AFF,
  ABLE,
  HELLO,
  WORLD,
  BANG,
  COMMA,
  S,
  NI,
  HAO,
  HE,
  LLO,
  CAFE,
  HELLO_ACCENT
};

}  // namespace

TEST(Utf8, IllFormedSequencesNameTheirByteOffset) {
  EXPECT_NO_THROW(unicode::check_utf8("plain \xc3\xa9 \xe4\xbd\xa0 \xf0\x9f\x98\x80", "t"));
  expect_error([] { unicode::check_utf8("ab\xc3\x28", "t"); },
               {"t: invalid UTF-8 at byte offset 2", "c3 28"});
  expect_error([] { unicode::check_utf8("x\xc0\xaf", "t"); }, {"byte offset 1"});       // overlong
  expect_error([] { unicode::check_utf8("xy\xed\xa0\x80", "t"); }, {"byte offset 2"});  // surrogate
  expect_error([] { unicode::check_utf8("\xf4\x90\x80\x80", "t"); },
               {"byte offset 0"});  // > U+10FFFF
  expect_error([] { unicode::check_utf8("abc\xe2\x82", "t"); }, {"byte offset 3", "truncated"});
  expect_error([] { unicode::check_utf8("abc\xff", "t"); }, {"byte offset 3 (bytes ff)"});
}

TEST(Utf8, LossyDecodingReplacesEachMaximalSubpart) {
  EXPECT_EQ(unicode::utf8_lossy("a\xff"
                                "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(unicode::utf8_lossy("\xe2\x82"), "\xef\xbf\xbd");  // one prefix
  EXPECT_EQ(unicode::utf8_lossy("\xf0\x9f\x98 x"), "\xef\xbf\xbd x");
  EXPECT_EQ(unicode::utf8_lossy("\xed\xa0\x80"),
            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // no prefix
  EXPECT_EQ(unicode::encode_utf8(unicode::decode_utf8("\xf0\x9f\x98\x80\xc3\xa9")),
            "\xf0\x9f\x98\x80\xc3\xa9");
}

TEST(UnicodeClasses, FollowTheReferenceUnicodeVersions) {
  EXPECT_TRUE(unicode::is_letter(U'\u4E00'));
  EXPECT_TRUE(unicode::is_letter(U'\U0001E900'));   // Adlam, Unicode 9
  EXPECT_FALSE(unicode::is_letter(U'\U00011F04'));  // Kawi, Unicode 15: not in Oniguruma 6.9.8
  EXPECT_TRUE(unicode::is_number(U'\u2160'));
  EXPECT_TRUE(unicode::is_white_space(U'\u3000'));
  EXPECT_FALSE(unicode::is_white_space(U'\u200B'));
  EXPECT_TRUE(unicode::is_punctuation(U'\u166D'));  // Po in Unicode 8, So now
  EXPECT_FALSE(unicode::is_punctuation(U'$'));
  EXPECT_FALSE(unicode::is_nonspacing_mark(U'\u1885'));  // Lo in Unicode 8
  EXPECT_TRUE(unicode::is_nonspacing_mark(U'\u0301'));
  EXPECT_FALSE(unicode::is_nonspacing_mark(U'\U0001E944'));  // Unicode 9: unknown to the reference
  EXPECT_TRUE(unicode::is_other(U'\u200D'));
  EXPECT_FALSE(unicode::is_other(U'\u0890'));  // Cf since Unicode 14
  EXPECT_EQ(unicode::nfd(U"\u00E9"), U"e\u0301");
  EXPECT_EQ(unicode::nfd(U"q\u0307\u0323"), U"q\u0323\u0307");  // canonical order: 220 before 230
  EXPECT_EQ(unicode::nfd(U"\uAC00"), U"\u1100\u1161");          // Hangul
  std::u32string lower;
  for (char32_t c : std::u32string(U"\u0130\u03A3A\u1E9E")) unicode::append_lowercase(lower, c);
  EXPECT_EQ(lower, U"i\u0307\u03C3a\u00DF");
}

TEST(Gpt2Regex, CutsWordsAsTheReferenceRegex) {
  using W = std::vector<std::string>;
  EXPECT_EQ(split_words("Hello world"), (W{"Hello", " world"}));
  EXPECT_EQ(split_words("I'm they're we'll"), (W{"I", "'m", " they", "'re", " we", "'ll"}));
  EXPECT_EQ(split_words("IT'S"), (W{"IT", "'", "S"}));  // contractions are case-sensitive
  EXPECT_EQ(split_words("!!'s"), (W{"!!'", "s"}));
  EXPECT_EQ(split_words("a  b"), (W{"a", " ", " b"}));
  EXPECT_EQ(split_words("a\t\tb"), (W{"a", "\t", "\t", "b"}));
  EXPECT_EQ(split_words("x \n y"), (W{"x", " \n", " y"}));
  EXPECT_EQ(split_words("abc   "), (W{"abc", "   "}));
  EXPECT_EQ(split_words(" "), (W{" "}));
  EXPECT_EQ(split_words("123abc 4.5"), (W{"123", "abc", " 4", ".", "5"}));
  EXPECT_EQ(split_words(" \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80!"),
            (W{" \xe4\xbd\xa0\xe5\xa5\xbd", " \xf0\x9f\x98\x80!"}));
  EXPECT_TRUE(split_words("").empty());
}

TEST(Gpt2, ByteAlphabet) {
  EXPECT_EQ(bpe::byte_to_char(' '), "\xc4\xa0");   // U+0120 'Ġ'
  EXPECT_EQ(bpe::byte_to_char('\n'), "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(bpe::byte_to_char('a'), "a");
  EXPECT_EQ(bpe::byte_to_char(0xAD), "\xc5\x83");  // U+0143: the last of the 68 remapped bytes
  EXPECT_EQ(bpe::byte_to_char(0xFF), "\xc3\xbf");  // printable Latin-1 stands for itself
}

TEST(Gpt2, VendoredVocabulary) {
  const Tokenizer& tok = gpt2();
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok.encode("<|endoftext|>"), (std::vector<int32_t>{50256}));
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(tok.id_to_token(995), "\xc4\xa0world");
  EXPECT_EQ(tok.token_to_id("\xc4\xa0world"), 995);
  EXPECT_EQ(tok.encode("Hello world", /*add_special_tokens=*/false), tok.encode("Hello world"));
}

TEST(Gpt2, DecodeRoundTripsAndReplacesSplitCharacters) {
  const Tokenizer& tok = gpt2();
  const std::string text =
      "caf\xc3\xa9  \xe4\xbd\xa0\xe5\xa5\xbd\n\t\xf0\x9f\x98\x80 it's <|endoftext|>!";
  EXPECT_EQ(tok.decode(tok.encode(text), /*skip_special_tokens=*/false), text);
  EXPECT_EQ(tok.decode({50256, 15496}), "Hello");  // special tokens skipped by default
  EXPECT_EQ(tok.decode({50256, 15496}, false), "<|endoftext|>Hello");
  const std::vector<int32_t> smile = tok.encode(" \xf0\x9f\x98\x80");
  ASSERT_EQ(smile.size(), 2u);  // "Ġð\x9f\x98" + "\x80": the emoji's bytes split over two tokens
  EXPECT_EQ(tok.decode({smile[0]}), " \xef\xbf\xbd");
  expect_error([&] { tok.decode({50257}); }, {"id 50257 is not in the vocabulary", "ids 0..50256"});
  expect_error([&] { tok.id_to_token(-1); }, {"id -1"});
}

// A BPE small enough to follow by hand: ByteLevel characters of a, b, c are a, b, c.
std::string small_bpe_json(const std::string& merges, const std::string& extra_model = "") {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "aa": 6, "<unk>": 7})" +
         extra_model + R"(, "merges": )" + merges + "}}";
}

TEST(Bpe, MergesByRankThenPosition) {
  TempDir dir("bpe_rank");
  const Tokenizer first =
      load_tokenizer(dir.write("a.json", small_bpe_json(R"(["a b", "ab c", "b c", "a a"])")));
  EXPECT_EQ(first.encode("abc"), (std::vector<int32_t>{5}));     // a+b (rank 0), then ab+c
  EXPECT_EQ(first.encode("aaa"), (std::vector<int32_t>{6, 0}));  // equal ranks: leftmost first
  const Tokenizer second =
      load_tokenizer(dir.write("b.json", small_bpe_json(R"([["b", "c"], ["a", "b"]])")));
  EXPECT_EQ(second.encode("abc"), (std::vector<int32_t>{0, 4}));  // b+c wins; "a bc" is no merge
  EXPECT_EQ(second.encode("abcab"), (std::vector<int32_t>{0, 4, 3}));
}

// SentencePiece BPE (spm.h) on a vocabulary small enough to follow by hand: the pair whose merged
// piece scores highest merges first (the leftmost among equals), a piece without a token falls back
// to its bytes, and the decoder turns U+2581 back into spaces and byte tokens into bytes. (The
// sentencepiece library itself is the oracle of gguf_vs_gguf_package.)
TEST(SentencePiece, MergesByScoreThenPositionAndFallsBackToBytes) {
  const std::string sp(spm::kSpace);
  const std::vector<std::pair<std::string, float>> pieces = {
      {"<unk>", 0}, {sp, -1}, {"a", -2}, {"b", -3}, {"ab", -4}, {sp + "ab", -5}, {"ba", -4}, {"<0xC3>", 0}, {"<0xA9>", 0}};
  Vocab vocab;
  std::vector<float> scores;
  for (size_t i = 0; i < pieces.size(); i++) vocab.add(pieces[i].first, int64_t(i), "test"), scores.push_back(pieces[i].second);
  const spm::SpmModel model(vocab, scores, 0, "test");
  auto ids = [&](const std::string& text) {
    std::vector<int32_t> out;
    model.tokenize(spm::metaspace(text, true), out);
    return out;
  };
  // "▁ab": ab (-4) merges before anything, then ▁ + ab = ▁ab (-5)
  EXPECT_EQ(ids("ab"), (std::vector<int32_t>{5}));
  // "▁aba": ab (-4) and ba (-4) tie: the leftmost (ab) wins, then ▁ab; "a" is left
  EXPECT_EQ(ids("aba"), (std::vector<int32_t>{5, 2}));
  // "▁bab": ba (-4, left) beats ab (-4): ▁ ba b
  EXPECT_EQ(ids("bab"), (std::vector<int32_t>{1, 6, 3}));
  // é has no piece: its two bytes; "x" has no piece and no byte token: <unk>
  EXPECT_EQ(ids("\xC3\xA9"), (std::vector<int32_t>{1, 7, 8}));
  EXPECT_EQ(ids("x"), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(spm::metaspace("a b", false), "a" + sp + "b");
  EXPECT_EQ(spm::metaspace_decode({sp + "ab", "<0xC3>", "<0xA9>", sp, "a"}, true), "ab\xC3\xA9 a");
  EXPECT_EQ(spm::metaspace_decode({sp + "ab"}, false), " ab");
  EXPECT_EQ(spm::metaspace_decode({"<0xC3>"}, true), "\xEF\xBF\xBD");  // a lone lead byte: U+FFFD
  EXPECT_THROW(spm::SpmModel(vocab, {1.0f}, 0, "test"), Error);  // scores and tokens differ in number
}

TEST(Bpe, UnknownCharactersAreDroppedOrUnk) {
  TempDir dir("bpe_unk");
  const Tokenizer none = load_tokenizer(dir.write("n.json", small_bpe_json("[]")));
  EXPECT_EQ(none.encode("azzb"), (std::vector<int32_t>{0, 1}));  // no unk_token: dropped
  const Tokenizer unk =
      load_tokenizer(dir.write("u.json", small_bpe_json("[]", R"(, "unk_token": "<unk>")")));
  EXPECT_EQ(unk.encode("azzb"), (std::vector<int32_t>{0, 7, 7, 1}));
  const Tokenizer fused = load_tokenizer(
      dir.write("f.json", small_bpe_json("[]", R"(, "unk_token": "<unk>", "fuse_unk": true)")));
  EXPECT_EQ(fused.encode("azzb"), (std::vector<int32_t>{0, 7, 1}));
  const Tokenizer whole = load_tokenizer(
      dir.write("i.json", small_bpe_json(R"(["b c"])", R"(, "ignore_merges": true)")));
  EXPECT_EQ(whole.encode("abc"), (std::vector<int32_t>{5}));  // in the vocab as a whole
  EXPECT_EQ(whole.encode("abcb"), (std::vector<int32_t>{0, 4, 1}));
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  TempDir dir("wp_greedy");
  const Tokenizer tok = load_tokenizer(dir.write("vocab.txt", kBertVocab));
  EXPECT_EQ(tok.encode("unaffable"), (std::vector<int32_t>{CLS, UN, AFF, ABLE, SEP}));
  EXPECT_EQ(tok.encode("unaffable", false), (std::vector<int32_t>{UN, AFF, ABLE}));
  EXPECT_EQ(tok.encode("Hello, WORLD!"),
            (std::vector<int32_t>{CLS, HELLO, COMMA, WORLD, BANG, SEP}));
  EXPECT_EQ(tok.encode("unaffablez"),
            (std::vector<int32_t>{CLS, UNK, SEP}));  // an uncovered part: all unk
  std::string w100 = "un", w101 = "un";              // 100 characters are split, 101 are unknown
  for (int i = 0; i < 32; ++i) w100 += "aff";
  for (int i = 0; i < 33; ++i) w101 += "aff";
  w100 += "ss";
  EXPECT_EQ(tok.encode(w100, false).size(), 35u);  // un, 32 x ##aff, ##s, ##s
  EXPECT_EQ(tok.encode(w101), (std::vector<int32_t>{CLS, UNK, SEP}));
  EXPECT_EQ(tok.encode(""), (std::vector<int32_t>{CLS, SEP}));
  EXPECT_EQ(tok.vocab_size(), 19);
  EXPECT_EQ(tokens_of(tok, tok.encode("hellos")),
            (std::vector<std::string>{"[CLS]", "hello", "##s", "[SEP]"}));
}

TEST(WordPiece, LongWordLimitCountsCodePoints) {
  TempDir dir("wp_long");
  std::string vocab = kBertVocab;
  vocab += "\xc3\xa9\n##\xc3\xa9\n";  // é and ##é: ids 19, 20
  const Tokenizer tok = load_tokenizer(dir.write("vocab.txt", vocab),
                                       {.lowercase = false, .strip_accents = std::nullopt});
  std::string e100, e101;
  for (int i = 0; i < 100; ++i) e100 += "\xc3\xa9";
  e101 = e100 + "\xc3\xa9";
  EXPECT_EQ(tok.encode(e100, false).size(), 100u);  // 200 bytes, 100 characters: still split
  EXPECT_EQ(tok.encode(e101, false), (std::vector<int32_t>{UNK}));
}

TEST(WordPiece, BertNormalizer) {
  TempDir dir("wp_norm");
  const std::string path = dir.write("vocab.txt", kBertVocab);
  const Tokenizer uncased = load_tokenizer(path);
  EXPECT_EQ(uncased.encode("H\xc3\xa9llo", false), (std::vector<int32_t>{HELLO}));  // é -> e
  EXPECT_EQ(uncased.encode("he\x01llo\xef\xbf\xbd", false),
            (std::vector<int32_t>{HELLO}));  // control, U+FFFD
  EXPECT_EQ(uncased.encode("\xe4\xbd\xa0\xe5\xa5\xbd", false),
            (std::vector<int32_t>{NI, HAO}));  // CJK split
  EXPECT_EQ(uncased.encode("hello\xe3\x80\x80world\xc2\xa0!", false),
            (std::vector<int32_t>{HELLO, WORLD, BANG}));
  const Tokenizer cased = load_tokenizer(path, {.lowercase = false, .strip_accents = std::nullopt});
  EXPECT_EQ(cased.encode("H\xc3\xa9llo", false), (std::vector<int32_t>{HELLO_ACCENT}));
  EXPECT_EQ(cased.encode("Hello", false), (std::vector<int32_t>{UNK}));
  const Tokenizer cased_stripped =
      load_tokenizer(path, {.lowercase = false, .strip_accents = true});
  EXPECT_EQ(cased_stripped.encode("H\xc3\xa9llo", false), (std::vector<int32_t>{UNK}));  // "Hello"
  const Tokenizer uncased_accents =
      load_tokenizer(path, {.lowercase = true, .strip_accents = false});
  EXPECT_EQ(uncased_accents.encode("H\xc3\xa9llo", false), (std::vector<int32_t>{UNK}));  // "héllo"

  const std::string normalized =
      wordpiece::bert_normalize("A\tB\xc3\x89\xe4\xb8\x80\xcc\x81", BertNormalizer{});
  EXPECT_EQ(normalized,
            "a be \xe4\xb8\x80 ");  // tab -> space, É -> e, 一 spaced, lone mark dropped
}

TEST(WordPiece, SpecialTokensInTheTextAndDecoding) {
  TempDir dir("wp_special");
  const Tokenizer tok = load_tokenizer(dir.write("vocab.txt", kBertVocab));
  EXPECT_EQ(tok.encode("[MASK] hello[SEP]"), (std::vector<int32_t>{CLS, MASK, HELLO, SEP, SEP}));
  EXPECT_EQ(tok.encode("[mask]", false),
            (std::vector<int32_t>{UNK, UNK, UNK}));  // raw-text match only
  const std::vector<int32_t> ids = tok.encode("unaffable, hellos world!");
  EXPECT_EQ(tok.decode(ids), "unaffable, hellos world!");
  EXPECT_EQ(tok.decode(ids, false), "[CLS] unaffable, hellos world! [SEP]");
  ASSERT_EQ(tok.added_tokens().size(), 5u);
  EXPECT_EQ(tok.prefix_ids(), std::vector<int32_t>{CLS});
  EXPECT_EQ(wordpiece::wordpiece_cleanup(" do n't , ok ."), " don't, ok.");
}

TEST(AddedTokens, SingleWordAndStripOptions) {
  TempDir dir("added");
  auto json_with = [](const std::string& flags) {
    return R"({"added_tokens": [{"id": 19, "content": "<x>", "special": true, "normalized": false)" +
           flags +
           R"(}], "normalizer": {"type": "BertNormalizer", "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "b": 2, "<": 3, ">": 4, "x": 5}}})";
  };
  const Tokenizer plain = load_tokenizer(dir.write("p.json", json_with("")));
  EXPECT_EQ(plain.encode("a<x>b"), (std::vector<int32_t>{1, 19, 2}));
  const Tokenizer single =
      load_tokenizer(dir.write("s.json", json_with(R"(, "single_word": true)")));
  EXPECT_EQ(single.encode("a<x>b"),
            (std::vector<int32_t>{1, 3, 5, 4, 2}));  // inside a word: not matched
  EXPECT_EQ(single.encode("a <x> b"), (std::vector<int32_t>{1, 19, 2}));
  const Tokenizer strip =
      load_tokenizer(dir.write("l.json", json_with(R"(, "lstrip": true, "rstrip": true)")));
  EXPECT_EQ(strip.encode("a  <x>  b"), (std::vector<int32_t>{1, 19, 2}));
  EXPECT_EQ(strip.decode({1, 19, 2}, false), "a <x> b");  // no decoder: joined with spaces
}

TEST(TokenizerJson, PostProcessorsAddTheirIds) {
  TempDir dir("post");
  auto with_post = [](const std::string& post) {
    return R"({"normalizer": null, "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": )" +
           post +
           R"(, "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3}}})";
  };
  const Tokenizer bert = load_tokenizer(dir.write(
      "b.json",
      with_post(R"({"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]})")));
  EXPECT_EQ(bert.encode("a"), (std::vector<int32_t>{1, 3, 2}));
  const Tokenizer templ =
      load_tokenizer(dir.write("t.json", with_post(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
      "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                         "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}}})")));
  EXPECT_EQ(templ.encode("a a"), (std::vector<int32_t>{1, 3, 3, 2, 2}));
  EXPECT_EQ(templ.encode("a a", false), (std::vector<int32_t>{3, 3}));
}

TEST(TokenizerErrors, MalformedOrUnsupportedFilesNameFileAndComponent) {
  TempDir dir("errors");
  const std::string ok_model = R"("model": {"type": "WordPiece", "vocab": {"[UNK]": 0}})";
  auto bert_json = [&](const std::string& fields) {
    return "{" + fields + R"(, "pre_tokenizer": {"type": "BertPreTokenizer"}, )" + ok_model + "}";
  };
  expect_error([&] { load_tokenizer(dir.write("bad.json", "{\"model\": ")); },
               {"bad.json", "not valid JSON"});
  expect_error([&] { load_tokenizer(dir.write("nomodel.json", "{\"a\": 1}")); },
               {"nomodel.json", "no 'model'"});
  expect_error(
      [&] {
        load_tokenizer(dir.write("uni.json", R"({"model": {"type": "Unigram", "vocab": []}})"));
      },
      {"uni.json", "model", "Unigram", "not supported"});
  expect_error(
      [&] { load_tokenizer(dir.write("nfc.json", bert_json(R"("normalizer": {"type": "NFC"})"))); },
      {"nfc.json", "normalizer", "NFC"});
  expect_error(
      [&] {
        load_tokenizer(dir.write("meta.json",
                                 R"({"pre_tokenizer": {"type": "Metaspace"}, )" + ok_model + "}"));
      },
      {"meta.json", "pre_tokenizer", "Metaspace"});
  expect_error(
      [&] {
        load_tokenizer(dir.write("decoder.json", bert_json(R"("decoder": {"type": "Metaspace"})")));
      },
      {"decoder.json", "decoder", "Metaspace"});
  expect_error(
      [&] {
        load_tokenizer(dir.write(
            "lc.json",
            bert_json(R"("normalizer": {"type": "BertNormalizer", "lowercase": "yes"})")));
      },
      {"lc.json", "normalizer", "'lowercase' must be true or false"});
  expect_error([&] { load_tokenizer(dir.write("merge.json", small_bpe_json(R"(["a z"])"))); },
               {"merge.json", "merge 1", "\"a z\"", "right part"});
  expect_error(
      [&] { load_tokenizer(dir.write("drop.json", small_bpe_json("[]", R"(, "dropout": 0.1)"))); },
      {"drop.json", "dropout"});
  expect_error(
      [&] { load_tokenizer(dir.write("ver.json", R"({"version": "2.0", )" + ok_model + "}")); },
      {"ver.json", "version '2.0'"});
  expect_error(
      [&] {
        load_tokenizer(dir.write(
            "ids.json",
            R"({"pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 0}}})"));
      },
      {"ids.json", "id 0 is given to both"});
}

TEST(TokenizerErrors, VocabularyFiles) {
  TempDir dir("vocab_files");
  expect_error([&] { load_tokenizer(dir.str() + "/missing"); }, {"missing", "no such file"});
  expect_error([&] { load_tokenizer(dir.str()); }, {dir.str(), "holds none of"});
  dir.write("vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  expect_error([&] { load_tokenizer(dir.str()); }, {"vocab.json needs merges.txt"});
  dir.write("merges.txt", "#version: 0.2\na b\na  b\n");
  expect_error([&] { load_tokenizer(dir.str()); }, {"merges.txt' line 3", "two tokens"});
  dir.write("merges.txt", "#version: 0.2\r\na b\r\n");
  EXPECT_EQ(load_tokenizer(dir.str()).encode("ab"), (std::vector<int32_t>{2}));  // CRLF lines
  dir.write("vocab.json", R"({"a": "zero"})");
  expect_error([&] { load_tokenizer(dir.str()); }, {"vocab.json", "\"a\" has id \"zero\""});
  const std::string no_unk = dir.write("vocab.txt", "[CLS]\n[SEP]\nhello\n");
  expect_error([&] { load_tokenizer(no_unk); }, {"vocab.txt", "[UNK]"});
  const std::string bad_line = dir.write("bad.txt", "[UNK]\n[CLS]\n[SEP]\nok\nbad\xff\n");
  expect_error([&] { load_tokenizer(bad_line); },
               {"bad.txt' line 5", "invalid UTF-8 at byte offset 3"});
  expect_error(
      [&] {
        load_tokenizer(builtin_gpt2_tokenizer_dir(),
                       {.lowercase = false, .strip_accents = std::nullopt});
      },
      {"apply to a vocab.txt only"});
  expect_error([&] { gpt2().encode("ok \xe2\x28\xa1"); }, {"text: invalid UTF-8 at byte offset 3"});
}
