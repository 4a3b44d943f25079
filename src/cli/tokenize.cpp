// tokenize.cpp: `normlab tokenize`: option checks, reading the text (or the texts of a --jsonl file),
// and the three outputs (ids on one line, JSON, an int32 safetensors file).
#include "cli/tokenize.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/text_input.h"
#include "io/tokenizer.h"
#include "io/unicode.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/files.h"
#include "util/hints.h"
#include "util/json_reader.h"

namespace normlab::cli {

void add_tokenize_command(CLI::App& app, TokenizeCommand& cmd) {
  cmd.tokenize =
      app.add_subcommand("tokenize", "text -> token ids (GPT-2 byte-level BPE or BERT WordPiece)");
  cmd.tokenize->add_option(
      "--tokenizer", cmd.tokenizer,
      "tokenizer.json, vocab.json/encoder.json (merges next to it), vocab.txt, a "
      "directory holding one, or gpt2: the vendored GPT-2 vocabulary (default)");
  cmd.text_option = cmd.tokenize->add_option("--text", cmd.text, "the text to tokenize");
  cmd.tokenize->add_option("--text-file", cmd.text_file, "a UTF-8 file to tokenize, byte for byte");
  cmd.tokenize->add_option("--jsonl", cmd.jsonl,
                           "many texts: a UTF-8 file of one JSON string per line (\"a text\\nover lines\"); "
                           "prints one line per text, in order");
  cmd.tokenize->add_flag("--json", cmd.json, "print {\"ids\": [...], \"tokens\": [...]}");
  cmd.tokenize->add_option("--out", cmd.out,
                           "also write int32 input_ids (1, T) to this .safetensors");
  cmd.tokenize->add_flag("--force", cmd.force, "replace --out if it exists");
  cmd.tokenize->add_flag("--no-special", cmd.no_special, "no [CLS] ... [SEP] around the ids");
  cmd.tokenize->add_option("--lowercase", cmd.lowercase, "vocab.txt only: true (default) or false")
      ->check(CLI::IsMember({"true", "false"}));
  cmd.tokenize
      ->add_option("--strip-accents", cmd.strip_accents,
                   "vocab.txt only: true or false (default: as --lowercase)")
      ->check(CLI::IsMember({"true", "false"}));
}

namespace {

// The texts of a --jsonl file: every line one JSON string (a final newline ends the last line).
// Checked whole before anything is tokenized: Error naming the file and the line.
std::vector<std::string> read_jsonl_texts(const std::string& path) {
  const std::string where = fmt::format("--jsonl '{}'", path);
  require_regular_file(path, "--jsonl");
  const std::string text = read_file(path, "--jsonl");
  unicode::check_utf8(text, where);  // the rule for every text normlab reads (io/unicode.h)
  std::vector<std::string> texts;
  std::string_view rest = text;
  for (size_t line = 1; !rest.empty(); ++line) {
    const size_t end = rest.find('\n');
    const std::string_view row = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    const std::string at = fmt::format("{} line {}", where, line);
    const nlohmann::json j = parse_json(row, at);
    if (!j.is_string()) throw Error(fmt::format("{}: expected one JSON string per line, got a JSON {}", at, j.type_name()));
    texts.push_back(j.get<std::string>());
  }
  return texts;
}

}  // namespace

int run_tokenize(const TokenizeCommand& cmd) {
  const bool has_text = cmd.text_option->count() > 0, has_file = !cmd.text_file.empty(), has_jsonl = !cmd.jsonl.empty();
  if (int(has_text) + int(has_file) + int(has_jsonl) != 1) throw Error("give exactly one of --text, --text-file and --jsonl");
  if (has_jsonl && !cmd.out.empty())
    throw Error("--out writes one sequence (input_ids of shape (1, T)); it does not apply to the many texts of --jsonl");
  if (!cmd.out.empty() && !cmd.force && std::filesystem::exists(cmd.out))
    throw Error(fmt::format("--out '{}' already exists; pass --force to replace it", cmd.out));

  TokenizerOptions options;
  if (!cmd.lowercase.empty()) options.lowercase = cmd.lowercase == "true";
  if (!cmd.strip_accents.empty()) options.strip_accents = cmd.strip_accents == "true";
  const Tokenizer tok = load_tokenizer(
      cmd.tokenizer == "gpt2" ? builtin_gpt2_tokenizer_dir() : cmd.tokenizer, options);

  // one line of output per text: the ids, or {"ids": [...], "tokens": [...]}
  auto print = [&](const std::vector<int32_t>& ids) {
    if (cmd.json) {
      nlohmann::json j;
      j["ids"] = ids;
      j["tokens"] = nlohmann::json::array();
      for (int32_t id : ids) j["tokens"].push_back(tok.id_to_token(id));
      std::cout << j.dump() << '\n';
    } else {
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) line += fmt::format("{}{}", i ? " " : "", ids[i]);
      std::cout << line << '\n';
    }
  };
  if (has_jsonl) {
    for (const std::string& text : read_jsonl_texts(cmd.jsonl)) print(tok.encode(text, !cmd.no_special));
    return 0;
  }
  const TextInput in = read_text_input(cmd.text, has_file ? cmd.text_file : "", 0);
  const std::vector<int32_t> ids = tok.encode(in.text, !cmd.no_special);
  print(ids);
  if (!cmd.out.empty()) {
    namespace st = safetensors;
    st::write(cmd.out, {{"input_ids", st::DType::I32, {1, int64_t(ids.size())}, ids.data()}},
              {{"tokenizer", tok.description()}}, cmd.force);
    std::cerr << fmt::format("{} tokens -> {}\n", ids.size(), cmd.out);
  }
  return 0;
}

}  // namespace normlab::cli
