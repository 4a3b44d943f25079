// bible.cpp: the Bible translation corpus: pair table, alignment with the versification guard and
// the length-ratio filter, the hashed split, and the builder that writes root/<pair>/ (rules in
// bible.h).
#include "io/bible.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "io/sword.h"
#include "io/unicode.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::bible {

namespace fs = std::filesystem;

const ModuleSpec kKJV = {"engKJV2006eb", "sword-text-kjv"};

namespace {

constexpr ModuleSpec kRV1909 = {"spaRV1909eb", "sword-text-sparv"};
constexpr ModuleSpec kWEB = {"engWEB2015eb", "sword-text-web"};

const char* const kFiles[] = {"train.src", "train.tgt", "train.ref", "valid.src", "valid.tgt",
                              "valid.ref", "test.src",  "test.tgt",  "test.ref",  "info.json"};

using ChapterKey = std::pair<std::string, int>;  // (book, chapter)

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The largest verse number of each chapter of a module.
std::map<ChapterKey, int> last_verses(const std::vector<TextVerse>& verses) {
  std::map<ChapterKey, int> last;
  for (const TextVerse& v : verses) {
    int& m = last[{v.book, v.chapter}];
    m = std::max(m, v.verse);
  }
  return last;
}

std::vector<TextVerse> module_text(const std::vector<sword::Verse>& verses,
                                   const std::string& module) {
  std::vector<TextVerse> out;
  out.reserve(verses.size());
  for (const sword::Verse& v : verses) {
    sword::OsisText t = sword::read_osis(v.markup, fmt::format("{} {}", module, v.ref()));
    out.push_back({v.book, v.chapter, v.verse, std::move(t.text), std::move(t.strongs)});
  }
  return out;
}

nlohmann::json module_json(const sword::ModuleInfo& m, const ModuleSpec& spec) {
  return {{"module", m.name},
          {"debian_package", spec.debian_package},
          {"version", m.version},
          {"sword_version_date", m.version_date},
          {"description", m.description},
          {"language", m.language},
          {"versification", m.versification},
          {"license", m.license}};
}

// True if root/<pair> holds every file, of this format, built from these module versions.
bool is_up_to_date(const fs::path& dir, const sword::ModuleInfo& src,
                   const sword::ModuleInfo& tgt) {
  for (const char* f : kFiles)
    if (!fs::is_regular_file(dir / f)) return false;
  try {
    const nlohmann::json j = parse_json(read_file((dir / "info.json").string(), "info"), (dir / "info.json").string());
    return j.at("format").get<int>() == kFormat && j.at("source").at("version") == src.version &&
           j.at("target").at("version") == tgt.version && j.at("source").at("module") == src.name &&
           j.at("target").at("module") == tgt.name;
  } catch (const std::exception&) {
    return false;
  }
}

void write_lines(const fs::path& path, const std::vector<VersePair>& pairs,
                 std::string VersePair::*field) {
  std::string text;
  for (const VersePair& p : pairs) text.append(p.*field).append("\n");
  write_file_atomic(path.string(), text);
}

std::string split_rule_text() {
  return fmt::format(
      "bucket = splitmix64(fnv1a64(reference)) % {}, reference as in the .ref files ('Genesis "
      "1:1', "
      "UTF-8 bytes); bucket < {} -> valid, < {} -> test, else train; then valid/test pairs whose "
      "source line also occurs in train are dropped",
      kSplitBuckets, kValidBuckets, kValidBuckets + kTestBuckets);
}

std::string filter_rules_text(const PairSpec& spec) {
  const std::string strongs =
      spec.strongs_check
          ? fmt::format(
                "verses of {} misplaced against the KJV by their Strong's numbers (Dice overlap "
                "below {}, or a KJV verse up to {} away in the chapter overlapping by more than {} "
                "more; every verse of a chapter with {} or more misplaced); ",
                spec.strongs_check->name, kStrongsMinDice, kStrongsWindow, kStrongsMargin,
                kStrongsChapterRun)
          : "";
  return fmt::format(
      "aligned by reference (verses of both modules); dropped: pairs with an empty side; every "
      "verse of a chapter in which either module has an empty verse, and of the next chapter when "
      "that verse is its chapter's last (versification guard); {}pairs whose ratio of lengths in "
      "code points, divided by the pair's overall ratio, is above {} or below 1/{}",
      strongs, kMaxLengthRatio, kMaxLengthRatio);
}

double dice(const std::vector<int>& a, const std::vector<int>& b) {
  size_t common = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] == b[j])
      ++common, ++i, ++j;
    else if (a[i] < b[j])
      ++i;
    else
      ++j;
  }
  return 2.0 * double(common) / double(a.size() + b.size());
}

std::string text_rules_text() {
  return "OSIS markup removed: <note> and <speaker> with their content; every other element keeps "
         "its text (Strong's numbers and morphology attributes dropped, <transChange>, "
         "<divineName>, <title> kept); text after the chapter's or book's end marker dropped (the "
         "KJV's subscriptions to the epistles, the WEB's glossary); entities decoded; the pilcrow "
         "and leftover USFM markers dropped; a removed note between two letters leaves a space; "
         "touching word elements separated by a space unless an enclitic "
         "pronoun follows a verb; white space collapsed and trimmed. One verse per line, UTF-8, "
         "line k of .src aligned with line k of .tgt and .ref";
}

}  // namespace

const std::vector<PairSpec>& pairs() {
  static const std::vector<PairSpec> k = {
      {"es-en", kRV1909, kWEB,
       "Spanish (Reina-Valera 1909) -> modern English (World English Bible)", &kRV1909},
      {"web-kjv", kWEB, kKJV,
       "modern English (World English Bible) -> King James English (KJV, 1769 text)", nullptr},
  };
  return k;
}

const char* to_string(Split s) {
  switch (s) {
    case Split::train:
      return "train";
    case Split::valid:
      return "valid";
    case Split::test:
      return "test";
  }
  return "?";
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Split split_of(const std::string& reference) {
  const uint64_t bucket = splitmix64(fnv1a64(reference)) % kSplitBuckets;
  if (bucket < uint64_t(kValidBuckets)) return Split::valid;
  if (bucket < uint64_t(kValidBuckets + kTestBuckets)) return Split::test;
  return Split::train;
}

std::string default_corpus_root() { return (fs::path(normlab_cache_dir()) / "bible").string(); }

std::string TextVerse::ref() const { return fmt::format("{} {}:{}", book, chapter, verse); }

std::vector<std::string> strongs_misplaced(const std::vector<TextVerse>& module,
                                           const std::vector<TextVerse>& reference) {
  // The reference's verses by chapter, in order, to look at the neighbours of each.
  std::map<ChapterKey, std::vector<const TextVerse*>> chapters;
  for (const TextVerse& v : reference) chapters[{v.book, v.chapter}].push_back(&v);
  std::vector<std::string> misplaced;
  std::map<ChapterKey, int> per_chapter;
  for (const TextVerse& v : module) {
    auto ch = chapters.find({v.book, v.chapter});
    if (ch == chapters.end() || v.strongs.empty()) continue;
    const std::vector<const TextVerse*>& verses = ch->second;
    long at = -1;
    for (size_t k = 0; k < verses.size(); ++k)
      if (verses[k]->verse == v.verse) at = long(k);
    if (at < 0 || verses[size_t(at)]->strongs.empty()) continue;  // nothing to compare with
    const double own = dice(v.strongs, verses[size_t(at)]->strongs);
    double best_other = 0;
    for (long k = std::max(0L, at - kStrongsWindow);
         k <= std::min(long(verses.size()) - 1, at + kStrongsWindow); ++k)
      if (k != at && !verses[size_t(k)]->strongs.empty())
        best_other = std::max(best_other, dice(v.strongs, verses[size_t(k)]->strongs));
    if (own < kStrongsMinDice || best_other > own + kStrongsMargin) {
      misplaced.push_back(v.ref());
      ++per_chapter[{v.book, v.chapter}];
    }
  }
  // A run of misplaced verses is a shift: its chapter goes whole (the verses at the run's ends hold
  // part of a neighbour's text and still overlap enough to pass).
  for (const auto& [key, n] : per_chapter)
    if (n >= kStrongsChapterRun)
      for (const TextVerse* v : chapters.at(key)) misplaced.push_back(v->ref());
  std::sort(misplaced.begin(), misplaced.end());
  misplaced.erase(std::unique(misplaced.begin(), misplaced.end()), misplaced.end());
  return misplaced;
}

std::vector<VersePair> align_pair(const std::vector<TextVerse>& src,
                                  const std::vector<TextVerse>& tgt,
                                  const std::vector<std::string>& misplaced, AlignStats& stats) {
  const std::unordered_set<std::string> misplaced_set(misplaced.begin(), misplaced.end());
  stats = AlignStats{};
  std::unordered_map<std::string, const TextVerse*> tgt_by_ref;
  for (const TextVerse& v : tgt) tgt_by_ref.emplace(v.ref(), &v);

  // References of both modules, in source order.
  std::vector<std::pair<const TextVerse*, const TextVerse*>> both;
  for (const TextVerse& s : src)
    if (auto it = tgt_by_ref.find(s.ref()); it != tgt_by_ref.end())
      both.emplace_back(&s, it->second);
  stats.both = long(both.size());
  stats.only_one = long(src.size() + tgt.size() - 2 * both.size());

  // Rule 2: the chapters a versification shift may have reached.
  const auto src_last = last_verses(src), tgt_last = last_verses(tgt);
  std::set<ChapterKey> suspect;
  for (const auto& [s, t] : both) {
    const bool s_empty = s->text.empty(), t_empty = t->text.empty();
    if (!s_empty && !t_empty) continue;
    suspect.insert({s->book, s->chapter});
    if ((s_empty && src_last.at({s->book, s->chapter}) == s->verse) ||
        (t_empty && tgt_last.at({t->book, t->chapter}) == t->verse))
      suspect.insert({s->book, s->chapter + 1});
  }

  std::vector<VersePair> kept;
  for (const auto& [s, t] : both) {
    if (s->text.empty() || t->text.empty()) {
      ++stats.empty;
    } else if (suspect.count({s->book, s->chapter})) {
      ++stats.guard;
    } else if (misplaced_set.count(s->ref())) {
      ++stats.strongs;
    } else {
      kept.push_back({s->ref(), s->text, t->text});
    }
  }

  // Rule 4, against the overall ratio of what is left.
  double src_total = 0, tgt_total = 0;
  for (const VersePair& p : kept)
    src_total += double(code_points(p.src)), tgt_total += double(code_points(p.tgt));
  const double overall = src_total > 0 ? tgt_total / src_total : 1.0;
  std::vector<VersePair> out;
  out.reserve(kept.size());
  for (VersePair& p : kept) {
    const double r = double(code_points(p.tgt)) / double(code_points(p.src)) / overall;
    if (r > kMaxLengthRatio || r < 1.0 / kMaxLengthRatio)
      ++stats.length_ratio;
    else
      out.push_back(std::move(p));
  }
  return out;
}

SplitPairs split_pairs(std::vector<VersePair> pairs) {
  SplitPairs out;
  std::vector<VersePair> valid, test;
  for (VersePair& p : pairs) {
    switch (split_of(p.ref)) {
      case Split::train:
        out.train.push_back(std::move(p));
        break;
      case Split::valid:
        valid.push_back(std::move(p));
        break;
      case Split::test:
        test.push_back(std::move(p));
        break;
    }
  }
  std::unordered_set<std::string> train_sources;
  for (const VersePair& p : out.train) train_sources.insert(p.src);
  for (auto [from, to] : {std::pair{&valid, &out.valid}, std::pair{&test, &out.test}})
    for (VersePair& p : *from) {
      if (train_sources.count(p.src))
        ++out.held_out_duplicates;
      else
        to->push_back(std::move(p));
    }
  return out;
}

BuildResult build_corpus(const std::string& root, bool force) {
  const auto t0 = std::chrono::steady_clock::now();
  BuildResult result;
  result.root = root;
  std::map<std::string, std::vector<TextVerse>> texts;  // module -> verses as text, read once
  auto text_of = [&](const ModuleSpec& m) -> const std::vector<TextVerse>& {
    auto it = texts.find(m.name);
    if (it == texts.end())
      it = texts.emplace(m.name, module_text(sword::read_module(m.name), m.name)).first;
    return it->second;
  };

  for (const PairSpec& spec : pairs()) {
    const sword::ModuleInfo src_info =
        sword::find_module(spec.source.name, spec.source.debian_package);
    const sword::ModuleInfo tgt_info =
        sword::find_module(spec.target.name, spec.target.debian_package);
    const fs::path dir = fs::path(root) / spec.name;
    PairCounts counts;
    counts.name = spec.name;
    if (!force && is_up_to_date(dir, src_info, tgt_info)) {
      const std::string info = (dir / "info.json").string();
      const nlohmann::json j = parse_json(read_file(info, "info"), info);
      naming_json_errors(info, [&] {  // a library exception names the file
        counts.train = j.at("counts").at("train"), counts.valid = j.at("counts").at("valid"),
        counts.test = j.at("counts").at("test");
      });
      result.pairs.push_back(counts);
      continue;
    }
    result.rebuilt = true;
    const std::vector<std::string> misplaced =
        spec.strongs_check ? strongs_misplaced(text_of(*spec.strongs_check), text_of(kKJV))
                           : std::vector<std::string>{};
    const std::vector<VersePair> aligned =
        align_pair(text_of(spec.source), text_of(spec.target), misplaced, counts.align);
    const SplitPairs split = split_pairs(aligned);
    counts.train = long(split.train.size()), counts.valid = long(split.valid.size()),
    counts.test = long(split.test.size());
    counts.held_out_duplicates = split.held_out_duplicates;
    if (split.train.empty() || split.valid.empty() || split.test.empty())
      throw Error(fmt::format("bible corpus {}: a split came out empty ({} / {} / {})", spec.name,
                              counts.train, counts.valid, counts.test));

    // Written next to the old directory, then swapped in: a half-written corpus is never left.
    const fs::path tmp = fs::path(root) / (std::string(spec.name) + ".partial");
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) throw Error(fmt::format("cannot create '{}': {}", tmp.string(), ec.message()));
    for (const auto& [name, part] :
         {std::pair{"train", &split.train}, std::pair{"valid", &split.valid},
          std::pair{"test", &split.test}}) {
      write_lines(tmp / fmt::format("{}.src", name), *part, &VersePair::src);
      write_lines(tmp / fmt::format("{}.tgt", name), *part, &VersePair::tgt);
      write_lines(tmp / fmt::format("{}.ref", name), *part, &VersePair::ref);
    }
    const AlignStats& a = counts.align;
    const nlohmann::json info = {
        {"format", kFormat},
        {"pair", spec.name},
        {"description", spec.description},
        {"source", module_json(src_info, spec.source)},
        {"target", module_json(tgt_info, spec.target)},
        {"license", "public domain (all three texts; see the modules' DistributionLicense)"},
        {"counts", {{"train", counts.train}, {"valid", counts.valid}, {"test", counts.test}}},
        {"dropped",
         {{"references_in_one_module_only", a.only_one},
          {"empty_side", a.empty},
          {"versification_guard", a.guard},
          {"strongs_check", a.strongs},
          {"length_ratio", a.length_ratio},
          {"valid_test_source_in_train", counts.held_out_duplicates}}},
        {"references_in_both_modules", a.both},
        {"split_rule", split_rule_text()},
        {"filter_rules", filter_rules_text(spec)},
        {"text_rules", text_rules_text()},
        {"files", "{train,valid,test}.{src,tgt,ref}: one verse per line; .ref holds the reference"},
        {"built_by", "normlab corpus bible (src/io/bible.cpp, src/io/sword.cpp)"},
    };
    {
      write_file_atomic((tmp / "info.json").string(), dump_json(info, 1) + "\n");
    }
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec)
      throw Error(
          fmt::format("cannot move '{}' to '{}': {}", tmp.string(), dir.string(), ec.message()));
    result.pairs.push_back(counts);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace normlab::bible
