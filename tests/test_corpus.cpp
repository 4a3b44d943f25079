// test_corpus.cpp: the translation corpus pieces on small hand-made inputs: OSIS markup -> text
// (each rule of sword.h, on markup copied from the three modules), Strong's numbers, mod2imp output
// parsing, the alignment rules and the split of bible.h, and the parallel-corpus loader with every
// error it reports. The corpus built from the real modules is checked by tests/corpus_check.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/bible.h"
#include "io/parallel.h"
#include "io/sword.h"
#include "util/error.h"

namespace fs = std::filesystem;
using namespace normlab;

namespace {

std::string text(const std::string& osis) { return sword::osis_to_text(osis, "test"); }

// The message of the Error `f` throws ("" if none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("normlab_corpus_" + name + "_" + std::to_string(::getpid()))) {
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

bible::TextVerse verse(const std::string& book, int c, int v, const std::string& t,
                       std::vector<int> strongs = {}) {
  return {book, c, v, t, std::move(strongs)};
}

}  // namespace

// ---- OSIS markup -> text ----

TEST(Osis, WordsKeepTheirTextAndLoseAttributes) {
  // KJV Genesis 1:1
  EXPECT_EQ(text(R"(In the <w lemma="strong:H7225">beginning</w> <w lemma="strong:H0430">God</w> )"
                 R"(<w lemma="strong:H1254">created</w> the <w lemma="strong:H8064">heaven</w>.)"),
            "In the beginning God created the heaven.");
  // added words, the divine name, nested segments
  EXPECT_EQ(
      text(
          R"(and <transChange type="added">the <seg type="x-nested"><divineName>LORD</divineName></seg></transChange> talked)"),
      "and the LORD talked");
}

TEST(Osis, NotesAreRemovedWithTheirContent) {
  // KJV Genesis 1:4
  EXPECT_EQ(
      text(R"(the <w>light</w> <w>from</w> the <w>darkness</w>.<note placement="foot"><reference )"
           R"(type="annotateRef">1.4 </reference>the light from…: Heb. between the light</note>)"),
      "the light from the darkness.");
  // KJV Exodus 6:2: unbalanced markup inside the note ("\+nd*" instead of </divineName>)
  EXPECT_EQ(
      text(
          R"(I <transChange type="added">am</transChange> the <divineName><w>LORD</w></divineName>:)"
          R"(<note placement="foot"><reference>6.2 </reference>the <divineName>LORD\+nd*: or, )"
          R"(<seg type="x-nested"><divineName>JEHOVAH</divineName></seg></note>)"),
      "I am the LORD:");
  // WEB cross references and the Song of Solomon's speaker labels
  EXPECT_EQ(
      text(
          R"(<speaker>Beloved</speaker> Let him kiss me<note type="crossReference">Gen 1:1</note>.)"),
      "Let him kiss me.");
  EXPECT_NE(error_of([] { text("a <note>never closed"); }).find("<note> is not closed"),
            std::string::npos);
}

TEST(Osis, ARemovedNoteBetweenLettersLeavesASpace) {
  // WEB Leviticus 1:1: "Yahweh</w><note>...</note><w>called"
  EXPECT_EQ(
      text(
          R"(<w lemma="strong:H3068">Yahweh</w><note placement="foot">“Yahweh” is God’s proper Name.</note>)"
          R"(<w lemma="strong:H7121">called</w> to Moses)"),
      "Yahweh called to Moses");
  EXPECT_EQ(text("end.<note>n</note> Next"), "end. Next");
}

TEST(Osis, TitlesAreKeptAndBlocksSeparateWords) {
  // KJV Psalm 3:1: the superscription is verse text; <l> and <lg> milestones separate words
  EXPECT_EQ(
      text(
          R"(<div type="x-milestone" subType="x-preverse" sID="pv2099"/><title canonical="true" )"
          R"(type="psalm">A Psalm of David.</title><lg sID="g1"/><l level="1" sID="g2"/><divineName>LORD</divineName>, )"
          R"(how are they increased!<l eID="g2" level="1"/><l sID="g3"/>Many<lb/>more)"),
      "A Psalm of David. LORD, how are they increased! Many more");
}

TEST(Osis, TheEndOfTheChapterOrBookEndsTheVerse) {
  // KJV Galatians 6:18: the subscription after the chapter's end is not verse text
  EXPECT_EQ(
      text(
          R"(with your spirit. Amen. <div eID="gen9078" type="x-p"/> <chapter eID="Gal.6"/> )"
          R"(<title>Unto the Galatians written from Rome.</title> <div canonical="true" eID="g" osisID="Gal" type="book"/>)"),
      "with your spirit. Amen.");
  // WEB Revelation 22:21: the glossary after the book's end
  EXPECT_EQ(
      text(
          R"(all the saints. Amen. <div canonical="true" eID="gen35575" osisID="Rev" type="book"/> )"
          R"(<div sID="gen35837" type="glossary"/> <title>World English Bible Glossary</title> Abaddon)"),
      "all the saints. Amen.");
  // a book's start is not its end
  EXPECT_EQ(text(R"(<div canonical="true" osisID="Gen" sID="gen2" type="book"/>In the beginning)"),
            "In the beginning");
}

TEST(Osis, EntitiesPilcrowUsfmAndWhiteSpace) {
  EXPECT_EQ(text("a &amp; b &lt;c&gt; &quot;d&quot; &apos;e&apos; &#233; &#xF1;"),
            "a & b <c> \"d\" 'e' é ñ");
  EXPECT_NE(error_of([] { text("&nbsp;"); }).find("unknown entity '&nbsp;'"), std::string::npos);
  EXPECT_NE(error_of([] { text("a & b"); }).find("'&' that starts no entity"), std::string::npos);
  EXPECT_NE(error_of([] { text("&#xD800;"); }).find("bad character reference"), std::string::npos);
  EXPECT_EQ(text(" \u00b6 And the LORD"), "And the LORD");  // KJV pilcrow
  EXPECT_EQ(text(R"(the \nd <w>LORD</w>\+nd*, the \nd LORD\nd*)"),
            "the LORD, the LORD");  // KJV, 27 verses
  EXPECT_EQ(text("  a\n\tb\u00a0\u2003c  "), "a b c");
  EXPECT_EQ(text(""), "");
  EXPECT_EQ(text(R"(<div type="x-p"/> <chapter sID="Gen.1"/>)"), "");
}

TEST(Osis, TouchingWordElementsAndSpanishEnclitics) {
  // Reina-Valera: words written with no space between elements
  EXPECT_EQ(
      text(
          R"(<w lemma="strong:H3588">Porque</w><transChange type="added">pasados</transChange> siete)"),
      "Porque pasados siete");
  EXPECT_EQ(
      text(R"(<transChange type="added">enviada</transChange><w lemma="strong:G1223">por</w>)"
           R"(<transChange type="added">medio de</transChange><w lemma="strong:G5402">Febe</w>)"),
      "enviada por medio de Febe");
  // an enclitic pronoun joins the verb before it...
  EXPECT_EQ(
      text(R"(<w lemma="strong:H3318">sáca</w><transChange type="added">lo</transChange> fuera)"),
      "sácalo fuera");
  EXPECT_EQ(text(R"(<w>Júrame</w><transChange type="added">lo</transChange>)"), "Júramelo");
  EXPECT_EQ(text(R"(<w>Dad</w><transChange type="added">melo</transChange>)"), "Dadmelo");
  // ...but not a word that is no verb
  EXPECT_EQ(text(R"(<w>y no</w><transChange type="added">lo</transChange> hizo)"), "y no lo hizo");
  EXPECT_EQ(text(R"(<w>Josué</w><transChange type="added">los</transChange>)"), "Josué los");
  // a KJV word split by its Strong's tag stays one word (element then text, not element to element)
  EXPECT_EQ(text(R"(<w lemma="strong:G1144">with tear</w>s, and)"), "with tears, and");
  // punctuation between elements gets no space
  EXPECT_EQ(text(R"(<w>a</w><w>, b</w>)"), "a, b");
}

TEST(Osis, StrongsNumbers) {
  const sword::OsisText t = sword::read_osis(
      R"(<w lemma="strong:H0430">God</w> <w lemma="strong:G2424 G5547">Jesucristo</w> )"
      R"(<w lemma="strong:H0853 strong:H1254" morph="x">created</w> <w lemma="lemma.Strong:xyz">x</w> )"
      R"(<w lemma="strong:H0430">God</w><note><w lemma="strong:H9999">in a note</w></note>)",
      "test");
  EXPECT_EQ(t.strongs,
            (std::vector<int>{430, 853, 1254, sword::kGreek + 2424, sword::kGreek + 5547}));
  EXPECT_EQ(t.text, "God Jesucristo created x God");
}

// ---- mod2imp output ----

TEST(Imp, ParsesVersesAndSkipsHeadingsAndVerseZero) {
  const std::string imp =
      "$$$[ Module Heading ]\n\n$$$[ Testament 1 Heading ]\n<milestone/>\n"
      "$$$Genesis 0:0\n<title>Genesis</title>\n$$$Genesis 1:0\n<chapter/>\n"
      "$$$Genesis 1:1\nIn the beginning\n$$$Genesis 1:2\nline one\nline two\n"
      "$$$I Samuel 12:34\n<w>x</w>\n";
  const auto v = sword::parse_imp(imp, "test.imp");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].ref(), "Genesis 1:1");
  EXPECT_EQ(v[0].markup, "In the beginning");
  EXPECT_EQ(v[1].markup, "line one\nline two");
  EXPECT_EQ(v[2].book, "I Samuel");
  EXPECT_EQ(v[2].chapter, 12);
  EXPECT_EQ(v[2].verse, 34);
  EXPECT_NE(error_of([] {
              sword::parse_imp("$$$Genesis one:1\nx\n", "f.imp");
            }).find("f.imp line 1: key 'Genesis one:1'"),
            std::string::npos);
}

TEST(Imp, MissingModuleNamesThePackage) {
  const std::string msg = error_of([] { sword::find_module("noSuchModule", "sword-text-nosuch"); });
  EXPECT_NE(msg.find("SWORD module 'noSuchModule' is not installed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sword-text-nosuch"), std::string::npos) << msg;
}

// ---- alignment and split ----

TEST(Bible, SplitRuleIsTheDocumentedHash) {
  EXPECT_EQ(bible::fnv1a64(""), 0xcbf29ce484222325ULL);  // FNV-1a test vectors
  EXPECT_EQ(bible::fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(bible::splitmix64(0),
            0xe220a8397b1dcdafULL);  // the first output of splitmix64 seeded 0
  long n_valid = 0, n_test = 0, n = 0;
  for (int c = 1; c <= 150; ++c)
    for (int v = 1; v <= 200; ++v, ++n) {
      const std::string ref = "Psalms " + std::to_string(c) + ":" + std::to_string(v);
      const uint64_t bucket = bible::splitmix64(bible::fnv1a64(ref)) % 1000;
      const bible::Split s = bible::split_of(ref);
      EXPECT_EQ(s, bucket < 40   ? bible::Split::valid
                   : bucket < 80 ? bible::Split::test
                                 : bible::Split::train);
      n_valid += s == bible::Split::valid, n_test += s == bible::Split::test;
    }
  // 4% each of 30,000: binomial standard deviation 34
  EXPECT_NEAR(double(n_valid) / double(n), 0.04, 0.005);
  EXPECT_NEAR(double(n_test) / double(n), 0.04, 0.005);
}

TEST(Bible, AlignDropsEmptyShiftedAndOutOfRatioPairs) {
  const std::string long_text(40, 'x');
  std::vector<bible::TextVerse> src, tgt;
  for (int c = 1; c <= 4; ++c)
    for (int v = 1; v <= 5; ++v) {
      src.push_back(verse("Book", c, v, long_text));
      tgt.push_back(verse("Book", c, v, long_text));
    }
  src[2].text = "";    // Book 1:3 empty: rule 1 for it, rule 2 for the rest of chapter 1
  tgt[9].text = "";    // Book 2:5 empty and last of its chapter: chapter 2 and 3 go
  tgt[16].text = "y";  // Book 4:2 out of ratio: rule 4
  tgt.push_back(verse("Book", 4, 6, long_text));  // a verse of one module only
  bible::AlignStats st;
  const auto pairs = bible::align_pair(src, tgt, {"Book 4:5"}, st);  // Book 4:5 misplaced: rule 3
  EXPECT_EQ(st.both, 20);
  EXPECT_EQ(st.only_one, 1);
  EXPECT_EQ(st.empty, 2);
  EXPECT_EQ(st.guard, 4 + 4 + 5);
  EXPECT_EQ(st.strongs, 1);
  EXPECT_EQ(st.length_ratio, 1);
  std::vector<std::string> refs;
  for (const auto& p : pairs) refs.push_back(p.ref);
  EXPECT_EQ(refs, (std::vector<std::string>{"Book 4:1", "Book 4:3", "Book 4:4"}));
}

TEST(Bible, StrongsCheckFindsShiftedVerses) {
  // Reference chapter of 8 verses with distinct Strong's sets; the module's chapter 1 is aligned,
  // its chapter 2 is shifted by one verse from verse 3 on, and its 3:1 shares too little.
  std::vector<bible::TextVerse> ref, mod;
  auto set_of = [](int c, int v) {
    return std::vector<int>{c * 1000 + v * 10, c * 1000 + v * 10 + 1, c * 1000 + v * 10 + 2};
  };
  for (int c = 1; c <= 3; ++c)
    for (int v = 1; v <= 8; ++v) {
      ref.push_back(verse("B", c, v, "t", set_of(c, v)));
      const int from =
          (c == 2 && v >= 3) ? v - 1 : v;  // module's 2:v holds the reference's 2:(v-1)
      mod.push_back(verse("B", c, v, "t", set_of(c, from)));
    }
  mod[16].strongs = {1, 2, 3, 3010};  // B 3:1 shares one number of four with the reference's 3:1
  mod[17].strongs = {};               // B 3:2 without numbers: not judged
  const auto misplaced = bible::strongs_misplaced(mod, ref);
  std::vector<std::string> want;
  for (int v = 1; v <= 8; ++v)
    want.push_back("B 2:" + std::to_string(v));  // a run: the whole chapter
  want.push_back("B 3:1");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(misplaced, want);
}

TEST(Bible, SplitKeepsOrderAndDropsHeldOutDuplicatesOfTrain) {
  std::vector<bible::VersePair> pairs;
  for (int v = 1; v <= 3000; ++v) {
    const std::string ref = "Book 1:" + std::to_string(v);
    // every 10th source is the same formula
    pairs.push_back({ref, v % 10 == 0 ? "And he said," : "source " + std::to_string(v),
                     "target " + std::to_string(v)});
  }
  const bible::SplitPairs s = bible::split_pairs(pairs);
  EXPECT_EQ(long(s.train.size() + s.valid.size() + s.test.size()) + s.held_out_duplicates, 3000);
  EXPECT_GT(s.held_out_duplicates, 0);
  for (const auto* part : {&s.valid, &s.test})
    for (const auto& p : *part) {
      EXPECT_NE(p.src, "And he said,");
      EXPECT_NE(bible::split_of(p.ref), bible::Split::train);
    }
  for (size_t i = 1; i < s.train.size(); ++i)
    EXPECT_LT(std::stoi(s.train[i - 1].ref.substr(7)), std::stoi(s.train[i].ref.substr(7)));
}

// ---- the parallel-corpus loader ----

TEST(Parallel, LoadsAlignedLines) {
  TempDir d("load");
  d.write("train.src", "uno\ndos\r\ntres");  // CRLF and no final newline
  d.write("train.tgt", "one\ntwo\nthree\n");
  const ParallelCorpus c = load_parallel_split(d.str(), "train");
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.src, (std::vector<std::string>{"uno", "dos", "tres"}));
  EXPECT_EQ(c.tgt, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(c.src_path, (fs::path(d.str()) / "train.src").string());
}

TEST(Parallel, ErrorsNameTheFileAndTheProblem) {
  TempDir d("errors");
  const std::string a = d.write("a.src", "one\ntwo\nthree\n");
  const std::string b = d.write("b.tgt", "uno\ndos\n");
  const std::string empty = d.write("empty.txt", "");
  const std::string blank = d.write("blank.txt", "one\n\nthree\n");
  const std::string bad = d.write("bad.txt", "ok\nfine\nbad \xC3\x28 byte\n");
  const std::string missing = d.str() + "/missing.src";

  std::string msg = error_of([&] { load_parallel(a, b); });
  EXPECT_NE(msg.find("'" + a + "' has 3 lines, '" + b + "' has 2"), std::string::npos) << msg;
  msg = error_of([&] { load_parallel(missing, b); });
  EXPECT_NE(msg.find("'" + missing + "': no such file"), std::string::npos) << msg;
  msg = error_of([&] { load_parallel(a, empty); });
  EXPECT_NE(msg.find("'" + empty + "' is empty"), std::string::npos) << msg;
  msg = error_of([&] { load_parallel(blank, a); });
  EXPECT_NE(msg.find("'" + blank + "' line 2 is empty"), std::string::npos) << msg;
  msg = error_of([&] { load_parallel(a, bad); });
  EXPECT_NE(msg.find("'" + bad + "' line 3: invalid UTF-8 at byte offset 4"), std::string::npos)
      << msg;
  msg = error_of([&] { load_parallel_split(d.str(), "dev"); });
  EXPECT_NE(msg.find("split 'dev' is not one of train, valid, test"), std::string::npos) << msg;
  msg = error_of([&] { load_parallel_split(d.str() + "/nope", "train"); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = error_of([&] { load_parallel(d.str(), a); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  // empty lines are fine where asked for (hypothesis files)
  EXPECT_EQ(read_text_lines(blank, EmptyLines::allow),
            (std::vector<std::string>{"one", "", "three"}));
}
