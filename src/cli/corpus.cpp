// corpus.cpp: `normlab corpus bible`: options, the build (or the check that the cached corpus is up
// to date), and the summary it prints.
#include "cli/corpus.h"

#include <fmt/format.h>

#include "io/bible.h"

namespace normlab::cli {

void add_corpus_command(CLI::App& app, CorpusCommand& cmd) {
  cmd.corpus = app.add_subcommand("corpus", "build a translation corpus (subcommand: bible)");
  cmd.corpus->require_subcommand(1);
  cmd.bible = cmd.corpus->add_subcommand(
      "bible",
      "verse-aligned Bible translation pairs (es-en, web-kjv) from Debian's SWORD modules");
  cmd.bible->footer(
      "Pairs (all texts public domain):\n"
      "  es-en    Spanish Reina-Valera 1909 -> World English Bible\n"
      "  web-kjv  World English Bible -> King James Version (1769)\n"
      "Each as <out>/<pair>/{train,valid,test}.{src,tgt,ref} (one verse a line, aligned) and\n"
      "info.json (module versions, counts, every rule). Split: splitmix64(fnv1a64(reference)) %\n"
      "1000 < 40 valid, < 80 test, else train (about 4% each; the same verses held out in both\n"
      "pairs). Needs mod2imp (libsword-utils) and sword-text-sparv, sword-text-web, "
      "sword-text-kjv\n"
      "(scripts/setup.sh installs them and runs this). A pair already built from the installed\n"
      "module versions is kept unless --force. See docs/TRANSLATION.md.");
  cmd.bible->add_option("--out", cmd.out,
                        "corpus root (default ${NORMLAB_CACHE:-$HOME/.cache/normlab}/bible)");
  cmd.bible->add_flag("--force", cmd.force, "rebuild even if the corpus is present and up to date");
}

int run_corpus(const CorpusCommand& cmd) {
  const std::string root = cmd.out.empty() ? bible::default_corpus_root() : cmd.out;
  const bible::BuildResult r = bible::build_corpus(root, cmd.force);
  if (!r.rebuilt) {  // one line: scripts/setup.sh runs this on every `scripts/run.sh`
    std::string sizes;
    for (const bible::PairCounts& p : r.pairs)
      sizes +=
          fmt::format("{}{} {}/{}/{}", sizes.empty() ? "" : ", ", p.name, p.train, p.valid, p.test);
    fmt::print("bible corpus up to date in {} ({} train/valid/test verses; --force rebuilds)\n",
               root, sizes);
    return 0;
  }
  for (const bible::PairCounts& p : r.pairs)
    fmt::print("{:<8} train {:>6}  valid {:>5}  test {:>5}  -> {}/{}\n", p.name, p.train, p.valid,
               p.test, root, p.name);
  fmt::print(
      "bible corpus built in {:.1f} s (rules, sources and dropped counts in <pair>/info.json)\n",
      r.seconds);
  return 0;
}

}  // namespace normlab::cli
