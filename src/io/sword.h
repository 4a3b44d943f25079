// sword.h: reading a SWORD Bible module (Debian's sword-text-* packages): where its .conf is and
// what it says (version, language, licence), its verses as dumped by `mod2imp` (libsword-utils),
// and the OSIS markup of a verse turned into plain text. The corpus built from them is in bible.h.
//
// `mod2imp <module>` prints each entry as a key line `$$$Genesis 1:1` followed by the entry's raw
// OSIS/XML text. Keys that are not `Book C:V` (module and testament headings) and verse 0 (book and
// chapter openings: book titles, chapter milestones) are not verses and are skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace normlab::sword {

// What a module's .conf says about it (empty strings for keys it does not have).
struct ModuleInfo {
  std::string name;           // e.g. engKJV2006eb (the section name of the .conf)
  std::string conf_path;      // the .conf file it was read from
  std::string version;        // Version=
  std::string version_date;   // SwordVersionDate=
  std::string description;    // Description=
  std::string language;       // Lang=
  std::string versification;  // Versification=
  std::string license;        // DistributionLicense=
};

// Finds the module's .conf in $SWORD_PATH/mods.d, $HOME/.sword/mods.d and /usr/share/sword/mods.d
// (matching the [section] name, case-insensitively). Throws Error naming `package_hint` (the
// Debian package that provides it) when it is not installed.
ModuleInfo find_module(const std::string& name, const std::string& package_hint);

// One verse entry of a module, in module order. `markup` is the raw OSIS text of the entry.
struct Verse {
  std::string book;  // SWORD's English book name, as mod2imp prints it: "Genesis", "I Samuel"
  int chapter = 0;
  int verse = 0;
  std::string markup;
  std::string ref() const;  // "Genesis 1:1": the key the corpus aligns and splits on
};

// Parses mod2imp output (`where` names it in errors). Skips non-verse keys and verse 0.
std::vector<Verse> parse_imp(std::string_view imp, const std::string& where);

// Runs `mod2imp <name>` and parses its output. Throws Error when mod2imp is missing or fails.
std::vector<Verse> read_module(const std::string& name);

// One verse's OSIS markup read: its plain text and the Strong's numbers of its words.
struct OsisText {
  std::string text;
  // The Strong's numbers in the lemma attributes of its <w> elements (outside notes), sorted and
  // unique, as H n -> n and G n -> kGreek + n ("strong:H0430" -> 430, "strong:G2424" -> 102424).
  std::vector<int> strongs;
};
constexpr int kGreek = 100000;

// Reads one verse's OSIS markup (`where` names the verse in errors). The text rules:
//  - <note> (footnotes, cross references) and <speaker> (WEB's editorial speaker labels in the
//    Song of Solomon) are removed with everything inside them;
//  - every other element keeps its text and loses its tags and attributes: <w> with Strong's
//    numbers and morphology, <transChange> (the KJV's added words), <divineName>, <title> (psalm
//    superscriptions, Psalm 119's acrostic letters), <q>, <seg>, <foreign>, ...;
//  - block and milestone elements (<l>, <lg>, <lb>, <p>, <div>, <chapter>, <milestone>, <title>,
//    <item>, <list>) separate words;
//  - the end of a chapter or book (`<chapter eID=.../>`, `<div eID=... type="book"/>`) ends the
//    verse: after it the KJV module puts the subscriptions of the epistles ("Written to the Romans
//    from Corinthus, ...", not verse text) and the WEB module its glossary;
//  - entities (&amp; &lt; &gt; &quot; &apos; &#N; &#xN;) are decoded; an unknown one is an Error;
//  - the pilcrow ¶ (the KJV's paragraph sign, not a word) is dropped, and so are USFM markers the
//    module's converter left in the text (`\nd `, `\+nd*`: 27 KJV verses);
//  - two word elements that touch with letters on both sides (`<w>Porque</w><transChange>pasados`,
//    about 500 places in the Reina-Valera module) are separated by a space, except an enclitic
//    pronoun after a verb (`sáca</w><transChange>lo` -> "sácalo"; see kNotVerbs in sword.cpp);
//  - a removed note between two letters leaves a space (the WEB writes "God</w><note>...</note><w>
//    created" in about 300 places);
//  - white space (Unicode White_Space) is collapsed to single spaces and trimmed.
OsisText read_osis(std::string_view osis, const std::string& where);
inline std::string osis_to_text(std::string_view osis, const std::string& where) {
  return read_osis(osis, where).text;
}

}  // namespace normlab::sword
