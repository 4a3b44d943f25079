// bleu.cpp: `normlab bleu`: reads the two files strictly (UTF-8, same number of lines), scores
// them, and prints sacrebleu's line (or JSON with every part of the score).
#include "cli/bleu.h"

#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "eval/bleu.h"
#include "io/parallel.h"
#include "util/error.h"

namespace normlab::cli {

namespace {

nlohmann::json score_json(const bleu::Score& s) {
  return {{"name", "BLEU"},
          {"score", s.score},
          {"signature", s.signature()},
          {"verbose_score", s.verbose()},
          {"precisions", s.precisions},
          {"counts", s.stats.correct},
          {"totals", s.stats.total},
          {"bp", s.bp},
          {"ratio", s.ratio},
          {"hyp_len", s.stats.hyp_len},
          {"ref_len", s.stats.ref_len}};
}

}  // namespace

void add_bleu_command(CLI::App& app, BleuCommand& cmd) {
  cmd.bleu = app.add_subcommand(
      "bleu", "corpus BLEU of a hypothesis file against a reference file (= sacrebleu's)");
  cmd.bleu->footer(
      "Line k of --hyp is scored against line k of --ref. The number is sacrebleu 2.6.0's default\n"
      "corpus BLEU: one reference, tokenizer 13a, case-sensitive, n-grams up to 4, 'exp'\n"
      "smoothing, brevity penalty (tests/bleu_check.py compares the two). Printed as sacrebleu\n"
      "does: BLEU|<signature> = score p1/p2/p3/p4 (BP = .. ratio = .. hyp_len = .. ref_len = ..).\n"
      "Empty lines are allowed; missing files, files of different line counts, empty files and\n"
      "invalid UTF-8 are errors (one message, exit 1).");
  cmd.bleu->add_option("--hyp", cmd.hyp, "hypotheses: a UTF-8 text file, one line per segment")
      ->required();
  cmd.bleu->add_option("--ref", cmd.ref, "references: a UTF-8 text file with as many lines")
      ->required();
  cmd.bleu->add_flag(
      "--json", cmd.json,
      "print JSON: score, signature, precisions, counts, totals, bp, ratio, hyp_len, "
      "ref_len, lines (and sentences with --sentence)");
  cmd.bleu->add_flag("--sentence", cmd.sentence,
                     "also each line's sentence BLEU (sacrebleu.sentence_bleu: effective order)");
}

int run_bleu(const BleuCommand& cmd) {
  const std::vector<std::string> hyps = read_text_lines(cmd.hyp, EmptyLines::allow);
  const std::vector<std::string> refs = read_text_lines(cmd.ref, EmptyLines::allow);
  if (hyps.size() != refs.size())
    throw Error(fmt::format(
        "--hyp '{}' has {} lines but --ref '{}' has {}: one hypothesis per reference line", cmd.hyp,
        hyps.size(), cmd.ref, refs.size()));
  const bleu::Score corpus = bleu::corpus_bleu(hyps, refs);
  if (cmd.json) {
    nlohmann::json j = score_json(corpus);
    j["lines"] = hyps.size();
    if (cmd.sentence) {
      j["sentences"] = nlohmann::json::array();
      for (size_t i = 0; i < hyps.size(); ++i)
        j["sentences"].push_back(score_json(bleu::sentence_bleu(hyps[i], refs[i])));
    }
    std::cout << j.dump(1) << '\n';
    return 0;
  }
  if (cmd.sentence)
    for (size_t i = 0; i < hyps.size(); ++i)
      fmt::print("line {}: {}\n", i + 1, bleu::sentence_bleu(hyps[i], refs[i]).verbose());
  fmt::print("BLEU|{} = {}\n", corpus.signature(), corpus.verbose());
  return 0;
}

}  // namespace normlab::cli
