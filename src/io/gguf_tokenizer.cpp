// gguf_tokenizer.cpp: the tokenizer a GGUF file's metadata holds (gguf_tokenizer.h).
#include "io/gguf_tokenizer.h"

#include <cmath>
#include <fmt/format.h>

#include "io/bpe.h"
#include "io/spm.h"
#include "util/error.h"

namespace normlab::gguf {

namespace {

// The tokens, their control (3) and user-defined (4) ones as added tokens (llama.cpp's token types:
// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), and the post-processor's BOS / EOS.
Vocab read_tokens(const File& f, TokenizerParts& parts) {
  const std::vector<std::string>& tokens = f.strings("tokenizer.ggml.tokens");
  const std::string where = f.path + ": tokenizer.ggml.tokens";
  if (tokens.empty()) throw Error(fmt::format("{} is empty: a tokenizer needs at least one token", where));
  Vocab vocab;
  for (size_t i = 0; i < tokens.size(); i++) vocab.add(tokens[i], int64_t(i), where);
  const std::vector<double>* types = f.get("tokenizer.ggml.token_type") ? &f.numbers("tokenizer.ggml.token_type") : nullptr;
  if (types && types->size() != tokens.size())
    throw Error(fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path, types->size(), tokens.size()));
  for (size_t i = 0; types && i < tokens.size(); i++)
    if ((*types)[i] == 3 || (*types)[i] == 4)
      parts.added_tokens.push_back({.content = tokens[i], .id = int32_t(i), .special = (*types)[i] == 3});
  auto special_id = [&](const char* key) -> std::optional<int32_t> {
    if (auto id = f.integer_or(key, 0, int64_t(tokens.size()) - 1)) return int32_t(*id);
    return std::nullopt;
  };
  // (llama.cpp's defaults when the key is absent: BOS for SentencePiece vocabularies, nothing for BPE)
  const bool spm = f.text_or("tokenizer.ggml.model").value_or("") == "llama";
  if (f.boolean_or("tokenizer.ggml.add_bos_token").value_or(spm))
    if (auto bos = special_id("tokenizer.ggml.bos_token_id")) parts.prefix_ids.push_back(*bos);
  if (f.boolean_or("tokenizer.ggml.add_eos_token").value_or(false))
    if (auto eos = special_id("tokenizer.ggml.eos_token_id")) parts.suffix_ids.push_back(*eos);
  return vocab;
}

// tokenizer.ggml.model = "llama": SentencePiece BPE (tokens, scores, byte fallback; spm.h).
TokenizerParts sentencepiece_parts(const File& f) {
  TokenizerParts parts;
  Vocab vocab = read_tokens(f, parts);
  const std::vector<double>& score_list = f.numbers("tokenizer.ggml.scores");
  std::vector<float> scores(score_list.begin(), score_list.end());
  if (scores.size() != vocab.size())
    throw Error(fmt::format("{}: tokenizer.ggml.scores has {} entries for {} tokens", f.path, scores.size(), vocab.size()));
  for (size_t i = 0; i < scores.size(); i++)  // the merge order is by score: a NaN leaves it undefined
    if (!std::isfinite(scores[i]))
      throw Error(fmt::format("{}: tokenizer.ggml.scores[{}] (token '{}') is {}, not a finite number", f.path, i,
                              f.strings("tokenizer.ggml.tokens")[i], scores[i]));
  const int32_t unk = int32_t(f.integer_or("tokenizer.ggml.unknown_token_id", 0, int64_t(vocab.size()) - 1).value_or(-1));
  const bool prefix = f.boolean_or("tokenizer.ggml.add_space_prefix").value_or(true);
  parts.pre_tokenizer = {PreTokenizerKind::Metaspace, prefix, false};
  parts.model = std::make_unique<spm::SpmModel>(std::move(vocab), std::move(scores), unk, f.path + ": tokenizer.ggml");
  parts.decoder.kind = DecoderKind::Metaspace;
  parts.decoder.strip_prefix = prefix;
  parts.source = fmt::format("SentencePiece BPE (scores, byte fallback) from the metadata of '{}'", f.path);
  return parts;
}

}  // namespace

TokenizerParts tokenizer_parts(const File& f) {
  const std::string kind = f.text_or("tokenizer.ggml.model").value_or("(none)");
  if (kind == "llama") return sentencepiece_parts(f);
  if (kind != "gpt2")
    throw Error(fmt::format("{}: tokenizer.ggml.model is '{}'; normlab reads byte-level BPE ('gpt2') and SentencePiece "
                            "BPE ('llama') from GGUF metadata (give the model's tokenizer.json with --tokenizer)",
                            f.path, kind));
  const std::string pre = f.text_or("tokenizer.ggml.pre").value_or("gpt-2");
  TokenizerParts parts;
  parts.pre_tokenizer = {PreTokenizerKind::ByteLevel, f.boolean_or("tokenizer.ggml.add_space_prefix").value_or(false),
                         true};
  if (pre == "smollm") {
    parts.pre_tokenizer.split_digits = true;
  } else if (pre == "llama-bpe" || pre == "qwen2") {  // Llama 3's regex (Qwen2's: numbers one by one), then bytes
    parts.pre_tokenizer.split_numbers = pre == "qwen2" ? 1 : 3;
    parts.pre_tokenizer.use_regex = false;
  } else if (pre != "gpt-2" && pre != "gpt2") {
    throw Error(fmt::format("{}: tokenizer.ggml.pre is '{}'; normlab implements the pre-tokenizers 'gpt-2', "
                            "'smollm', 'llama-bpe' and 'qwen2' (give the model's tokenizer.json with --tokenizer)",
                            f.path, pre));
  }
  Vocab vocab = read_tokens(f, parts);
  std::vector<std::pair<std::string, std::string>> merges;
  for (const std::string& m : f.strings("tokenizer.ggml.merges")) {
    const size_t space = m.find(' ');
    if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos)
      throw Error(fmt::format("{}: tokenizer.ggml.merges entry '{}' is not two tokens separated by one space", f.path, m));
    merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  parts.model = std::make_unique<bpe::BpeModel>(std::move(vocab), merges, bpe::BpeConfig{}, f.path + ": tokenizer.ggml.merges");
  parts.decoder.kind = DecoderKind::ByteLevel;
  parts.source = fmt::format("byte-level BPE (pre-tokenizer '{}') from the metadata of '{}'", pre, f.path);
  return parts;
}

}  // namespace normlab::gguf
