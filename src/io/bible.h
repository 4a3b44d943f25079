// bible.h: the verse-aligned Bible translation corpus built from Debian's SWORD modules (sword.h):
// which pairs there are, the rules that align, filter and split them, and the builder behind
// `normlab corpus bible`. Reading a built corpus is parallel.h.
//
// Pairs (source -> target), all three texts public domain:
//   es-en    Spanish Reina-Valera 1909 (spaRV1909eb, sword-text-sparv)
//            -> World English Bible (engWEB2015eb, sword-text-web)
//   web-kjv  World English Bible -> King James Version 1769 (engKJV2006eb, sword-text-kjv)
//
// Alignment: by verse reference ("Genesis 1:1"); a reference must be a verse of both modules.
// Dropped, in this order, and counted in info.json:
//   1. pairs where either side is empty after sword::read_osis;
//   2. the versification guard: every verse of a chapter in which either module leaves a verse
//      empty, and of the next chapter when that empty verse is its chapter's last. A module left
//      a verse empty because its own numbering put the text elsewhere: the Reina-Valera module
//      leaves Numbers 12:16 empty and starts chapter 13 with it, so all of Numbers 13 is one verse
//      off; 2 Corinthians 13:14 is empty and verse 13 holds its text;
//   3. the Strong's check (es-en): where the Reina-Valera divides verses differently with no empty
//      verse to show it (1 Kings 22:44-53, 1 Chronicles 21, Judges 14:18-20), its verses are
//      compared with the KJV's, which has the reference versification: both modules tag their
//      words with Strong's numbers, so a verse holds the same numbers in both when it holds the
//      same text. A verse is misplaced when the Dice overlap of the two sets is below
//      kStrongsMinDice, or when a KJV verse up to kStrongsWindow verses away in the same chapter
//      overlaps it by more than kStrongsMargin more; misplaced verses are dropped, and every verse
//      of a chapter with kStrongsChapterRun or more of them (a shifted run). The WEB side needs no
//      check: its verse division is the KJV's (its own Strong's tags follow the Hebrew numbering
//      in some chapters, so they cannot be used for this);
//   4. pairs whose character lengths disagree by more than kMaxLengthRatio (after dividing by the
//      pair's overall length ratio): what the others cannot see, e.g. the WEB's Romans 14:23 that
//      also holds the doxology the KJV has as 16:25-27.
// Split, fixed and the same for every pair: bucket = splitmix64(fnv1a64(reference)) % 1000;
// bucket < 40 -> valid, 40 <= bucket < 80 -> test, else train (about 4% each). A verse's split
// depends on its reference only, so it never changes when other verses are dropped or a module is
// updated, and a verse held out in one pair is held out in every pair (the WEB text of a test
// verse of es-en is never a training source of web-kjv). Then a valid or test pair whose source
// text also occurs in train is dropped (the Bible repeats formulae: "And the LORD spake unto
// Moses, saying,"; a model that memorised it is not translating).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace normlab::bible {

// Bumped whenever a rule above changes: a cached corpus of another format is rebuilt.
constexpr int kFormat = 1;
constexpr double kMaxLengthRatio = 2.5;
constexpr int kStrongsWindow = 3, kStrongsChapterRun = 3;
constexpr double kStrongsMinDice = 0.3, kStrongsMargin = 0.2;
constexpr int kSplitBuckets = 1000, kValidBuckets = 40, kTestBuckets = 40;

struct ModuleSpec {
  const char* name;            // SWORD module
  const char* debian_package;  // provides it
};
struct PairSpec {
  const char* name;  // directory name under the corpus root
  ModuleSpec source, target;
  const char* description;
  const ModuleSpec* strongs_check;  // rule 3: this module's verses against the KJV's (or none)
};
extern const ModuleSpec kKJV;  // the reference versification of rule 3
const std::vector<PairSpec>& pairs();

enum class Split { train, valid, test };
const char* to_string(Split s);

uint64_t fnv1a64(const std::string& s);
uint64_t splitmix64(uint64_t x);
Split split_of(const std::string& reference);  // the rule above

// ${NORMLAB_CACHE:-$HOME/.cache/normlab}/bible
std::string default_corpus_root();

// A module verse read (sword::read_osis of its markup).
struct TextVerse {
  std::string book;
  int chapter = 0, verse = 0;
  std::string text;
  std::vector<int> strongs;  // sorted, unique
  std::string ref() const;
};

// Rule 3: the references of `module` whose verse is misplaced against `reference` (the KJV).
std::vector<std::string> strongs_misplaced(const std::vector<TextVerse>& module,
                                           const std::vector<TextVerse>& reference);

// One aligned verse pair before the split (rules 1-4 applied by align_pair).
struct VersePair {
  std::string ref, src, tgt;
};
struct AlignStats {
  long both = 0;          // references that are verses of both modules
  long only_one = 0;      // verses of one module only
  long empty = 0;         // rule 1
  long guard = 0;         // rule 2
  long strongs = 0;       // rule 3
  long length_ratio = 0;  // rule 4
};
// Aligns two modules' verses by reference and applies rules 1-4 (`misplaced`: rule 3's references,
// from strongs_misplaced, or none), in the source module's order.
std::vector<VersePair> align_pair(const std::vector<TextVerse>& src,
                                  const std::vector<TextVerse>& tgt,
                                  const std::vector<std::string>& misplaced, AlignStats& stats);

// The split of aligned pairs (order kept): split_of each reference, then the valid and test pairs
// whose source text occurs in train are dropped (counted in held_out_duplicates).
struct SplitPairs {
  std::vector<VersePair> train, valid, test;
  long held_out_duplicates = 0;
};
SplitPairs split_pairs(std::vector<VersePair> pairs);

struct PairCounts {
  std::string name;
  long train = 0, valid = 0, test = 0;
  long held_out_duplicates = 0;  // valid/test pairs dropped because their source is in train
  AlignStats align;
};

struct BuildResult {
  std::string root;
  bool rebuilt = false;  // false: every pair was present and up to date
  std::vector<PairCounts> pairs;
  double seconds = 0;
};

// Builds every pair into root/<pair>/ ({train,valid,test}.{src,tgt,ref} and info.json). Unless
// `force`, a pair whose info.json has this format and the installed modules' versions is kept.
BuildResult build_corpus(const std::string& root, bool force);

}  // namespace normlab::bible
