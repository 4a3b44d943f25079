// sword.cpp: SWORD module lookup (.conf), mod2imp output parsing and OSIS markup -> plain text
// (the rules are listed in sword.h).
#include "io/sword.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "io/unicode.h"
#include "util/error.h"

namespace normlab::sword {

namespace fs = std::filesystem;

namespace {

std::string lowercase_ascii(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

std::string_view trim_ascii(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The [section] name of a .conf file and its first value of each key.
struct ConfFile {
  std::string section;
  std::vector<std::pair<std::string, std::string>> keys;
  std::string get(const std::string& key) const {
    for (const auto& [k, v] : keys)
      if (k == key) return v;
    return "";
  }
};

ConfFile read_conf(const fs::path& path) {
  ConfFile conf;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view t = trim_ascii(line);
    if (t.empty() || t.front() == '#') continue;
    if (t.front() == '[' && t.back() == ']') {
      if (!conf.section.empty()) break;  // one module per file; stop at a second section
      conf.section = std::string(t.substr(1, t.size() - 2));
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string_view::npos || conf.section.empty()) continue;
    conf.keys.emplace_back(std::string(trim_ascii(t.substr(0, eq))),
                           std::string(trim_ascii(t.substr(eq + 1))));
  }
  return conf;
}

std::vector<fs::path> mods_d_dirs() {
  std::vector<fs::path> dirs;
  if (const char* p = std::getenv("SWORD_PATH"); p && *p) dirs.emplace_back(fs::path(p) / "mods.d");
  if (const char* h = std::getenv("HOME"); h && *h)
    dirs.emplace_back(fs::path(h) / ".sword" / "mods.d");
  dirs.emplace_back("/usr/share/sword/mods.d");
  return dirs;
}

// True if an executable `name` is on PATH.
bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string_view rest = path;
  while (true) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    std::error_code ec;
    if (!dir.empty() && fs::is_regular_file(fs::path(dir) / name, ec)) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

// ---- OSIS -> text ----

// A tag between '<' and '>': its name, and whether it is a closing or self-closing tag.
struct Tag {
  std::string_view name;
  std::string_view body;  // everything between the angle brackets
  bool closing = false, self_closing = false;
  bool has_attr(std::string_view attr_eq_value) const {
    return body.find(attr_eq_value) != std::string_view::npos;
  }
};

Tag parse_tag(std::string_view body) {
  Tag t;
  t.body = body;
  std::string_view s = body;
  if (!s.empty() && s.front() == '/') t.closing = true, s.remove_prefix(1);
  if (!s.empty() && s.back() == '/') t.self_closing = true, s.remove_suffix(1);
  size_t end = 0;
  while (end < s.size() && s[end] != ' ' && s[end] != '\t' && s[end] != '\n' && s[end] != '/')
    ++end;
  t.name = s.substr(0, end);
  return t;
}

// Elements removed with all their content.
bool is_dropped(std::string_view name) { return name == "note" || name == "speaker"; }

// Elements that stand between words (blocks, poetry lines, milestones, headings).
bool is_separator(std::string_view name) {
  static const std::set<std::string_view> k = {"l",       "lg",        "lb",    "p",    "div",
                                               "chapter", "milestone", "title", "item", "list",
                                               "verse",   "head",      "table", "row",  "cell"};
  return k.count(name) > 0;
}

// The inline word elements that the Reina-Valera module sometimes writes with no space between.
bool is_word_element(std::string_view name) { return name == "w" || name == "transChange"; }

// Spanish enclitic pronouns (one or two of them: "lo", "le", "melo", "selo").
bool is_enclitic(std::string_view s) {
  static const std::array<std::string_view, 11> k = {"me", "te",  "se",  "nos", "os", "lo",
                                                     "la", "los", "las", "le",  "les"};
  for (std::string_view a : k) {
    if (s == a) return true;
    if (s.substr(0, a.size()) == a)
      for (std::string_view b : k)
        if (s.substr(a.size()) == b) return true;
  }
  return false;
}

// The words of the Reina-Valera module that touch a following enclitic pronoun but are not verbs
// ("no</w><transChange>lo" is "no lo"); found by listing every such place in the module (about
// 100, the others all verbs: "díjo"+"le", "sacar"+"la", "Dad"+"me").
bool is_not_verb(std::string_view word) {
  static const std::set<std::string_view> kNotVerbs = {"y",      "que",   "no",     "os",
                                                       "como",   "Como",  "cuánto", "ellos",
                                                       "gentes", "Josué", "Jehová", "Dios"};
  return kNotVerbs.count(word) > 0;
}

// The last code point of well-formed UTF-8 (0 if empty).
char32_t last_code_point(std::string_view s) {
  if (s.empty()) return 0;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  const std::u32string cps = unicode::decode_utf8(s.substr(i));
  return cps.empty() ? 0 : cps.back();
}

char32_t first_code_point(std::string_view s) {
  if (s.empty()) return 0;
  size_t n = 1;
  while (n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) ++n;
  const std::u32string cps = unicode::decode_utf8(s.substr(0, n));
  return cps.empty() ? 0 : cps.front();
}

// The word at the end of `s` (after its last space).
std::string_view last_word(std::string_view s) {
  const size_t sp = s.find_last_of(' ');
  return sp == std::string_view::npos ? s : s.substr(sp + 1);
}

// Appends the character of the entity &ent; (named XML entities and character references).
void append_entity(std::string& out, std::string_view ent, const std::string& where) {
  static const std::pair<std::string_view, char> kNamed[] = {
      {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
  for (const auto& [name, c] : kNamed)
    if (ent == name) {
      out += c;
      return;
    }
  if (ent[0] != '#') throw Error(fmt::format("{}: unknown entity '&{};'", where, ent));
  const bool hex = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X');
  const std::string digits(ent.substr(hex ? 2 : 1));
  char* end = nullptr;
  const unsigned long cp = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
  if (digits.empty() || *end != '\0' || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    throw Error(fmt::format("{}: bad character reference '&{};'", where, ent));
  unicode::append_utf8(out, char32_t(cp));
}

// Decodes the entities of a text run and drops the pilcrow and leftover USFM markers.
std::string decode_text(std::string_view s, const std::string& where) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "\xC2\xB6") == 0) {  // U+00B6 PILCROW SIGN
      i += 2;
      continue;
    }
    if (s[i] == '\\') {  // a USFM marker the module's converter left (\nd, \+nd*: KJV, 27 verses)
      size_t j = i + 1;
      if (j < s.size() && s[j] == '+') ++j;
      const size_t letters = j;
      while (j < s.size() && std::isalnum(static_cast<unsigned char>(s[j]))) ++j;
      if (j > letters) {
        if (j < s.size() && s[j] == '*') ++j;
        i = j;
        continue;
      }
    }
    if (s[i] != '&') {
      out += s[i++];
      continue;
    }
    const size_t semi = s.find(';', i);
    const std::string_view ent =
        semi == std::string_view::npos ? s.substr(i, 12) : s.substr(i + 1, semi - i - 1);
    if (semi == std::string_view::npos || ent.empty() || ent.size() > 10)
      throw Error(fmt::format("{}: '&' that starts no entity: '{}'", where, s.substr(i, 12)));
    append_entity(out, ent, where);
    i = semi + 1;
  }
  return out;
}

// Appends the Strong's numbers of a <w> tag's lemma attribute: lemma="strong:H0430",
// lemma="strong:G2424 G5547", lemma="strong:H0853 strong:H1254"; other lemma schemes are ignored.
void add_strongs(std::string_view tag_body, std::vector<int>& out, const std::string& where) {
  const size_t at = tag_body.find("lemma=\"");
  if (at == std::string_view::npos) return;
  const size_t begin = at + 7, end = tag_body.find('"', begin);
  if (end == std::string_view::npos)
    throw Error(fmt::format("{}: unterminated lemma attribute", where));
  std::string_view rest = tag_body.substr(begin, end - begin);
  while (!rest.empty()) {
    const size_t sp = rest.find(' ');
    std::string_view token = rest.substr(0, sp);
    rest.remove_prefix(sp == std::string_view::npos ? rest.size() : sp + 1);
    if (token.substr(0, 7) == "strong:") token.remove_prefix(7);
    if (token.size() < 2 || (token[0] != 'H' && token[0] != 'G')) continue;
    int n = 0;
    size_t k = 1;
    for (; k < token.size() && token[k] >= '0' && token[k] <= '9' && n < kGreek; ++k)
      n = n * 10 + (token[k] - '0');
    if (k == 1 || n >= kGreek) continue;  // not a number (or an absurd one)
    out.push_back(token[0] == 'G' ? kGreek + n : n);
  }
}

// Collapses Unicode white space runs to one ' ' and trims.
std::string normalize_space(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool pending_space = false;
  for (char32_t c : unicode::decode_utf8(s)) {
    if (unicode::is_white_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    unicode::append_utf8(out, c);
  }
  return out;
}

}  // namespace

std::string Verse::ref() const { return fmt::format("{} {}:{}", book, chapter, verse); }

ModuleInfo find_module(const std::string& name, const std::string& package_hint) {
  const std::string want = lowercase_ascii(name);
  std::vector<std::string> looked;
  for (const fs::path& dir : mods_d_dirs()) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    looked.push_back(dir.string());
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".conf") continue;
      const ConfFile conf = read_conf(entry.path());
      if (lowercase_ascii(conf.section) != want) continue;
      ModuleInfo info;
      info.name = conf.section;
      info.conf_path = entry.path().string();
      info.version = conf.get("Version");
      info.version_date = conf.get("SwordVersionDate");
      info.description = conf.get("Description");
      info.language = conf.get("Lang");
      info.versification = conf.get("Versification");
      info.license = conf.get("DistributionLicense");
      return info;
    }
  }
  throw Error(
      fmt::format("SWORD module '{}' is not installed (looked in {}); install the Debian "
                  "package {} (scripts/setup.sh does)",
                  name,
                  looked.empty() ? std::string("no mods.d directory")
                                 : fmt::format("{}", fmt::join(looked, ", ")),
                  package_hint));
}

std::vector<Verse> parse_imp(std::string_view imp, const std::string& where) {
  std::vector<Verse> verses;
  bool in_verse = false;  // the current entry is a verse (its text lines are kept)
  size_t line_no = 0;
  while (!imp.empty()) {
    const size_t nl = imp.find('\n');
    std::string_view line = imp.substr(0, nl);
    imp.remove_prefix(nl == std::string_view::npos ? imp.size() : nl + 1);
    ++line_no;
    if (line.substr(0, 3) == "$$$") {
      const std::string_view key = trim_ascii(line.substr(3));
      in_verse = false;
      if (key.empty() || key.front() == '[')
        continue;  // [ Module Heading ], [ Testament 1 Heading ]
      const size_t sp = key.rfind(' ');
      const size_t colon = key.rfind(':');
      if (sp == std::string_view::npos || colon == std::string_view::npos || colon < sp)
        throw Error(
            fmt::format("{} line {}: key '{}' is not 'Book chapter:verse'", where, line_no, key));
      Verse v;
      v.book = std::string(key.substr(0, sp));
      const std::string ch(key.substr(sp + 1, colon - sp - 1)), vs(key.substr(colon + 1));
      char *e1 = nullptr, *e2 = nullptr;
      v.chapter = int(std::strtol(ch.c_str(), &e1, 10));
      v.verse = int(std::strtol(vs.c_str(), &e2, 10));
      if (ch.empty() || vs.empty() || *e1 || *e2)
        throw Error(
            fmt::format("{} line {}: key '{}' is not 'Book chapter:verse'", where, line_no, key));
      if (v.chapter == 0 || v.verse == 0) continue;  // book and chapter openings
      verses.push_back(std::move(v));
      in_verse = true;
      continue;
    }
    if (!in_verse) continue;
    std::string& m = verses.back().markup;
    if (!m.empty()) m += '\n';
    m += line;
  }
  return verses;
}

std::vector<Verse> read_module(const std::string& name) {
  if (!on_path("mod2imp"))
    throw Error(
        "mod2imp not found on PATH: install the Debian package libsword-utils (scripts/setup.sh "
        "does)");
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
      throw Error(fmt::format("'{}' is not a SWORD module name", name));
  FILE* pipe = ::popen(fmt::format("mod2imp '{}' 2>/dev/null", name).c_str(), "r");
  if (!pipe) throw Error(fmt::format("cannot run mod2imp {}", name));
  std::string out;
  std::array<char, 1 << 16> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(fmt::format("mod2imp {} failed (exit status {}): is the module installed?", name,
                            WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  unicode::check_utf8(out, fmt::format("mod2imp {}", name));
  std::vector<Verse> verses = parse_imp(out, fmt::format("mod2imp {}", name));
  if (verses.empty()) throw Error(fmt::format("mod2imp {} printed no verses", name));
  return verses;
}

OsisText read_osis(std::string_view osis, const std::string& where) {
  unicode::check_utf8(osis, where);  // the text rules below decode code points
  // What stands between the text written so far and the next text run, when nothing else does.
  enum class Gap { none, word_elements, removed_note };
  std::string out;
  std::vector<int> strongs;
  std::string_view dropping;  // the name of the dropped element we are in
  int drop_depth = 0;         // > 0 inside it: its nesting depth
  Gap gap = Gap::none;
  for (size_t i = 0; i < osis.size();) {
    if (osis[i] == '<') {
      if (osis.compare(i, 4, "<!--") == 0) {
        const size_t end = osis.find("-->", i + 4);
        if (end == std::string_view::npos)
          throw Error(fmt::format("{}: unterminated comment", where));
        i = end + 3;
        continue;
      }
      const size_t close = osis.find('>', i);
      if (close == std::string_view::npos)
        throw Error(fmt::format("{}: unterminated tag '{}'", where, osis.substr(i, 30)));
      const Tag tag = parse_tag(osis.substr(i + 1, close - i - 1));
      i = close + 1;
      if (tag.name.empty()) throw Error(fmt::format("{}: empty tag", where));
      if (drop_depth > 0) {  // only tags of the dropped element's name count: the KJV's notes hold
                             // unbalanced markup (Exodus 6:2: "<divineName>LORD\+nd*")
        if (tag.name == dropping && !tag.self_closing) drop_depth += tag.closing ? -1 : 1;
        if (drop_depth == 0) gap = Gap::removed_note;
        continue;
      }
      if (is_dropped(tag.name) && !tag.closing && !tag.self_closing) {
        drop_depth = 1;
        dropping = tag.name;
        continue;
      }
      // The end of the chapter or book ends the verse: after it come the KJV's subscriptions to the
      // epistles (a <title>) and the WEB's glossary.
      if ((tag.name == "chapter" || (tag.name == "div" && tag.has_attr("type=\"book\""))) &&
          tag.has_attr("eID="))
        break;
      if (tag.name == "w" && !tag.closing) add_strongs(tag.body, strongs, where);
      if (is_separator(tag.name)) {
        out += ' ';
        gap = Gap::none;
      } else if (tag.closing && is_word_element(tag.name) && i < osis.size() && osis[i] == '<') {
        const size_t next_close = osis.find('>', i);
        if (next_close != std::string_view::npos) {
          const Tag next = parse_tag(osis.substr(i + 1, next_close - i - 1));
          if (!next.closing && !next.self_closing && is_word_element(next.name))
            gap = Gap::word_elements;
        }
      }
      continue;
    }
    const size_t next = osis.find('<', i);
    const std::string_view raw =
        osis.substr(i, next == std::string_view::npos ? std::string_view::npos : next - i);
    i = next == std::string_view::npos ? osis.size() : next;
    if (drop_depth > 0) continue;
    const std::string text = decode_text(raw, where);
    if (text.empty()) continue;
    if (gap != Gap::none && unicode::is_letter(last_code_point(out)) &&
        unicode::is_letter(first_code_point(text))) {
      const bool enclitic =
          gap == Gap::word_elements && is_enclitic(text) && !is_not_verb(last_word(out));
      if (!enclitic) out += ' ';
    }
    gap = Gap::none;
    out += text;
  }
  if (drop_depth > 0) throw Error(fmt::format("{}: a <{}> is not closed", where, dropping));
  std::sort(strongs.begin(), strongs.end());
  strongs.erase(std::unique(strongs.begin(), strongs.end()), strongs.end());
  return {normalize_space(out), std::move(strongs)};
}

}  // namespace normlab::sword
