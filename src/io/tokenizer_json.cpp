// tokenizer_json.cpp: a Hugging Face tokenizer.json -> TokenizerParts. Only the components normlab
// reproduces exactly are accepted (see tokenizer.h); every other one, and every ill-typed field, is
// an Error naming the file, the component and the field.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/bpe.h"
#include "io/spm.h"
#include "io/tokenizer.h"
#include "io/wordpiece.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab {

namespace {

// Typed field reads: a missing or null field keeps the default; any other type is an Error.
struct JsonFields {
  const nlohmann::json& obj;
  std::string where;  // "tokenizer 'x.json' normalizer"

  bool has(const char* key) const { return obj.contains(key) && !obj.at(key).is_null(); }
  [[noreturn]] void bad(const char* key, const char* expected) const {
    throw Error(
        fmt::format("{}: '{}' must be {}, got {}", where, key, expected, obj.at(key).dump()));
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!obj.at(key).is_boolean()) bad(key, "true or false");
    return obj.at(key).get<bool>();
  }
  std::optional<bool> optional_boolean(const char* key) const {
    if (!has(key)) return std::nullopt;
    return boolean(key, false);
  }
  std::optional<std::string> string(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!obj.at(key).is_string()) bad(key, "a string");
    return obj.at(key).get<std::string>();
  }
  int64_t integer(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    if (!obj.at(key).is_number_integer()) bad(key, "an integer");
    return obj.at(key).get<int64_t>();
  }
  std::string type() const {
    const auto t = string("type");
    if (!t) throw Error(fmt::format("{}: no 'type'", where));
    return *t;
  }
};

// Like the reference, an ill-formed id or a non-empty prefix/suffix on the way in is rejected.
Vocab json_vocab(const nlohmann::json& vocab, const std::string& where) {
  if (!vocab.is_object())
    throw Error(fmt::format("{}: 'vocab' must be an object {{\"token\": id}}", where));
  Vocab v;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer())
      throw Error(fmt::format("{}: vocab token \"{}\" has id {}, expected an integer", where, token,
                              id.dump()));
    v.add(token, id.get<int64_t>(), where);
  }
  return v;
}

std::vector<std::pair<std::string, std::string>> json_merges(const nlohmann::json& merges,
                                                             const std::string& where) {
  if (!merges.is_array()) throw Error(fmt::format("{}: 'merges' must be an array", where));
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < merges.size(); ++i) {
    const nlohmann::json& m = merges[i];
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      continue;
    }
    if (m.is_string()) {  // the older "left right" form
      const std::string s = m.get<std::string>();
      if (s.starts_with("#version")) continue;
      const size_t space = s.find(' ');
      if (space != std::string::npos && space > 0 && space + 1 < s.size() &&
          s.find(' ', space + 1) == std::string::npos) {
        out.emplace_back(s.substr(0, space), s.substr(space + 1));
        continue;
      }
    }
    throw Error(fmt::format("{}: merge {} is {}, expected \"left right\" or [\"left\", \"right\"]",
                            where, i + 1, m.dump()));
  }
  return out;
}

// SentencePiece's form in tokenizer.json (Llama 2, Mistral, TinyLlama: spm.h). The normalizer
// Sequence [Prepend("▁"), Replace(" " -> "▁")] (every segment gets "▁" in front, always), or the
// Replace alone (no prefix): nullopt when `norm` is neither, else whether it prepends.
std::optional<bool> spm_normalizer(const nlohmann::json& norm) {
  if (!norm.is_object() || norm.value("type", "") != "Sequence" || !norm.contains("normalizers")) return std::nullopt;
  const nlohmann::json& seq = norm.at("normalizers");
  if (!seq.is_array() || seq.empty() || seq.size() > 2) return std::nullopt;
  for (const auto& n : seq)
    if (!n.is_object()) return std::nullopt;
  const std::string space(spm::kSpace);
  const nlohmann::json& replace = seq.back();
  const bool prepends = seq.size() == 2;
  if (prepends && !(seq[0].value("type", "") == "Prepend" && seq[0].value("prepend", "") == space)) return std::nullopt;
  if (!(replace.value("type", "") == "Replace" && replace.contains("pattern") && replace.at("pattern").is_object() &&
        replace.at("pattern").value("String", "") == " " && replace.value("content", "") == space))
    return std::nullopt;
  return prepends;
}

// The decoder Sequence [Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)] of the same files
// (the Strip only when the normalizer prepends): nullopt when `dec` is not it, else whether it strips.
std::optional<bool> spm_decoder(const nlohmann::json& dec) {
  if (!dec.is_object() || dec.value("type", "") != "Sequence" || !dec.contains("decoders")) return std::nullopt;
  const nlohmann::json& seq = dec.at("decoders");
  if (!seq.is_array() || seq.size() < 3 || seq.size() > 4) return std::nullopt;
  for (const auto& d : seq)
    if (!d.is_object()) return std::nullopt;
  const std::string space(spm::kSpace);
  const bool head = seq[0].value("type", "") == "Replace" && seq[0].contains("pattern") &&
                    seq[0].at("pattern").is_object() && seq[0].at("pattern").value("String", "") == space &&
                    seq[0].value("content", "") == " " && seq[1].value("type", "") == "ByteFallback" &&
                    seq[2].value("type", "") == "Fuse";
  if (!head) return std::nullopt;
  if (seq.size() == 3) return false;
  if (seq[3].value("type", "") == "Strip" && seq[3].value("content", "") == " " && seq[3].value("start", -1) == 1 &&
      seq[3].value("stop", -1) == 0)
    return true;
  return std::nullopt;
}

// The Metaspace pre-tokenizer (tokenizers 0.14 and later): "▁" for spaces, prepend_scheme always /
// first / never (older files: add_prefix_space), split before every "▁" unless split = false.
PreTokenizer metaspace_pre_tokenizer(const JsonFields& f) {
  if (f.string("replacement").value_or(std::string(spm::kSpace)) != spm::kSpace)
    throw Error(fmt::format("{}: a Metaspace replacement other than U+2581 is not supported", f.where));
  PreTokenizer p;
  p.kind = PreTokenizerKind::Metaspace;
  const std::string scheme =
      f.string("prepend_scheme").value_or(f.boolean("add_prefix_space", true) ? "always" : "never");
  if (scheme != "always" && scheme != "first" && scheme != "never")
    throw Error(fmt::format("{}: prepend_scheme '{}' is not always, first or never", f.where, scheme));
  p.add_prefix_space = scheme != "never";
  p.prefix_first_only = scheme == "first";
  p.prefix_unless_present = true;
  p.metaspace_split = f.boolean("split", true);
  return p;
}

std::unique_ptr<TokenizerModel> json_model(const nlohmann::json& model, const std::string& file,
                                           std::string& type) {
  const std::string where = file + " model";
  if (!model.is_object()) throw Error(fmt::format("{}: must be an object", where));
  const JsonFields f{model, where};
  if (f.has("type"))
    type = f.type();
  else  // files from before the 'type' tag
    type = model.contains("merges")                     ? "BPE"
           : model.contains("max_input_chars_per_word") ? "WordPiece"
                                                        : "";
  if (!model.contains("vocab")) throw Error(fmt::format("{}: no 'vocab'", where));
  if (type == "BPE") {
    if (!model.contains("merges")) throw Error(fmt::format("{}: no 'merges'", where));
    if (f.has("dropout")) {
      if (!model.at("dropout").is_number()) f.bad("dropout", "a number or null");
      if (model.at("dropout").get<double>() != 0.0)
        throw Error(fmt::format("{}: BPE dropout {} is not supported (it makes encoding random)",
                                where, model.at("dropout").dump()));
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (f.string(key).value_or("") != "")
        throw Error(fmt::format("{}: BPE with a {} is not supported (GPT-2 has none)", where, key));
    bpe::BpeConfig config;
    config.byte_fallback = f.boolean("byte_fallback", false);  // (Llama 2, Mistral: "<0xXX>" tokens)
    config.unk_token = f.string("unk_token");
    config.fuse_unk = f.boolean("fuse_unk", false);
    config.ignore_merges = f.boolean("ignore_merges", false);
    return std::make_unique<bpe::BpeModel>(json_vocab(model.at("vocab"), where),
                                           json_merges(model.at("merges"), where), config, where);
  }
  if (type == "WordPiece") {
    const int64_t max_chars = f.integer("max_input_chars_per_word", 100);
    if (max_chars < 0) f.bad("max_input_chars_per_word", "a non-negative integer");
    return std::make_unique<wordpiece::WordPieceModel>(
        json_vocab(model.at("vocab"), where), f.string("unk_token").value_or("[UNK]"),
        f.string("continuing_subword_prefix").value_or("##"), size_t(max_chars), where);
  }
  throw Error(fmt::format("{}: type '{}' is not supported (BPE and WordPiece are)", where, type));
}

// The ids a post-processor puts around one sequence; Sequence nests its processors in order.
void json_post_processor(const nlohmann::json& pp, const std::string& where,
                         std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (pp.is_null()) return;
  if (!pp.is_object()) throw Error(fmt::format("{}: must be an object or null", where));
  const JsonFields f{pp, where};
  const std::string type = f.type();
  auto pair_id = [&](const char* key) -> int32_t {  // "cls": ["[CLS]", 101]
    const nlohmann::json& v = pp.contains(key) ? pp.at(key) : nlohmann::json();
    if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number_integer())
      throw Error(fmt::format("{}: '{}' must be [\"token\", id], got {}", where, key, v.dump()));
    return v[1].get<int32_t>();
  };
  if (type == "ByteLevel") return;  // offsets only
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    prefix.insert(prefix.begin(), pair_id("cls"));
    suffix.push_back(pair_id("sep"));
    return;
  }
  if (type == "Sequence") {
    if (!pp.contains("processors") || !pp.at("processors").is_array())
      throw Error(fmt::format("{}: Sequence needs a 'processors' array", where));
    for (const nlohmann::json& inner : pp.at("processors"))
      json_post_processor(inner, where, prefix, suffix);
    return;
  }
  if (type != "TemplateProcessing")
    throw Error(
        fmt::format("{}: type '{}' is not supported (TemplateProcessing, BertProcessing, "
                    "RobertaProcessing, ByteLevel and Sequence are)",
                    where, type));
  const nlohmann::json& single = pp.contains("single") ? pp.at("single") : nlohmann::json();
  const nlohmann::json& specials =
      pp.contains("special_tokens") ? pp.at("special_tokens") : nlohmann::json::object();
  if (!single.is_array())
    throw Error(fmt::format("{}: TemplateProcessing needs a 'single' array", where));
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const nlohmann::json& piece : single) {
    if (piece.contains("Sequence") && piece.at("Sequence").value("id", "") == "A" &&
        !seen_sequence) {
      seen_sequence = true;
      continue;
    }
    const nlohmann::json* special =
        piece.contains("SpecialToken") ? &piece.at("SpecialToken") : nullptr;
    if (!special || !special->contains("id") || !special->at("id").is_string())
      throw Error(fmt::format(
          "{}: template piece {} is not supported (one Sequence A and SpecialTokens are)", where,
          piece.dump()));
    const std::string name = special->at("id").get<std::string>();
    if (!specials.contains(name) || !specials.at(name).contains("ids") ||
        !specials.at(name).at("ids").is_array())
      throw Error(fmt::format(
          "{}: special token '{}' of the template has no ids in 'special_tokens'", where, name));
    for (const nlohmann::json& id : specials.at(name).at("ids")) {
      if (!id.is_number_integer())
        throw Error(fmt::format("{}: special token '{}' has an id {}", where, name, id.dump()));
      (seen_sequence ? after : before).push_back(id.get<int32_t>());
    }
  }
  if (!seen_sequence)
    throw Error(fmt::format("{}: the 'single' template has no Sequence A", where));
  prefix.insert(prefix.begin(), before.begin(), before.end());
  suffix.insert(suffix.end(), after.begin(), after.end());
}

}  // namespace

static TokenizerParts tokenizer_json_parts_unchecked(const std::string& path);

TokenizerParts tokenizer_json_parts(const std::string& path) {
  return naming_json_errors(fmt::format("tokenizer '{}'", path), [&] { return tokenizer_json_parts_unchecked(path); });
}

static TokenizerParts tokenizer_json_parts_unchecked(const std::string& path) {
  const std::string file = fmt::format("tokenizer '{}'", path);
  const nlohmann::json doc = parse_json(read_file(path, "tokenizer"), file);
  if (!doc.is_object() || !doc.contains("model"))
    throw Error(
        fmt::format("{}: not a tokenizer.json (no 'model'; a plain vocab.json needs merges.txt "
                    "next to it and its own name)",
                    file));
  const JsonFields top{doc, file};
  if (const auto version = top.string("version"); version && *version != "1.0")
    throw Error(fmt::format("{}: version '{}' is not supported (1.0 is)", file, *version));

  TokenizerParts parts;
  std::string model_type;
  parts.model = json_model(doc.at("model"), file, model_type);

  const nlohmann::json& norm = doc.contains("normalizer") ? doc.at("normalizer") : nlohmann::json();
  const std::optional<bool> spm_norm = model_type == "BPE" ? spm_normalizer(norm) : std::nullopt;
  const bool nfc = norm.is_object() && norm.value("type", "") == "NFC" && model_type == "BPE";
  parts.nfc = nfc;
  if (!norm.is_null() && !spm_norm && !nfc) {
    const JsonFields f{norm, file + " normalizer"};
    if (!norm.is_object() || f.type() != "BertNormalizer")
      throw Error(fmt::format("{}: {} is not supported (BertNormalizer, NFC with a BPE model, or none is)", f.where,
                              norm.dump().substr(0, 200)));
    if (model_type != "WordPiece")
      throw Error(fmt::format("{}: BertNormalizer goes with a WordPiece model, not {}", f.where,
                              model_type));
    parts.normalizer =
        BertNormalizer{f.boolean("clean_text", true), f.boolean("handle_chinese_chars", true),
                       f.optional_boolean("strip_accents"), f.boolean("lowercase", true)};
  }

  const nlohmann::json& pre =
      doc.contains("pre_tokenizer") ? doc.at("pre_tokenizer") : nlohmann::json();
  const JsonFields pf{pre, file + " pre_tokenizer"};
  const std::string pre_type = pre.is_object() ? pf.type() : pre.dump();
  // Sequence [Digits (individual digits), ByteLevel]: SmolLM's; each of the two read as on its own
  const bool digits_then_bytes = [&] {
    if (pre_type != "Sequence" || !pre.contains("pretokenizers") || !pre.at("pretokenizers").is_array()) return false;
    const nlohmann::json& seq = pre.at("pretokenizers");
    if (seq.size() != 2 || !seq[0].is_object() || !seq[1].is_object()) return false;
    const JsonFields d{seq[0], file + " pre_tokenizer.pretokenizers[0]"}, b{seq[1], file + " pre_tokenizer.pretokenizers[1]"};
    return d.type() == "Digits" && d.boolean("individual_digits", false) && b.type() == "ByteLevel";
  }();
  // Sequence [Split (Llama 3's or Qwen2's regex, isolated, not inverted), ByteLevel]: Llama 3's and Qwen2's
  const int split_numbers = [&] {
    if (pre_type != "Sequence" || !pre.contains("pretokenizers") || !pre.at("pretokenizers").is_array()) return 0;
    const nlohmann::json& seq = pre.at("pretokenizers");
    if (seq.size() != 2 || !seq[0].is_object() || !seq[1].is_object()) return 0;
    const JsonFields sp{seq[0], file + " pre_tokenizer.pretokenizers[0]"}, b{seq[1], file + " pre_tokenizer.pretokenizers[1]"};
    if (sp.type() != "Split" || b.type() != "ByteLevel" || !seq[0].contains("pattern") ||
        !seq[0].at("pattern").is_object() || !seq[0].at("pattern").contains("Regex") ||
        !seq[0].at("pattern").at("Regex").is_string())
      return 0;
    const int numbers = bpe::llama3_pattern_numbers(seq[0].at("pattern").at("Regex").get<std::string>());
    if (numbers == 0)
      throw Error(fmt::format("{}: the Split regex {} is not one normlab implements (Llama 3's and Qwen2's are)",
                              sp.where, seq[0].at("pattern").at("Regex").dump().substr(0, 200)));
    if (seq[0].value("behavior", "") != "Isolated" || sp.boolean("invert", false))
      throw Error(fmt::format("{}: a Split with behavior {} and invert {} is not supported (Isolated, not inverted, is)",
                              sp.where, seq[0].value("behavior", "(none)"), sp.boolean("invert", false)));
    return numbers;
  }();
  if (spm_norm && pre.is_null()) {  // SentencePiece's form through normalizers: one word per segment
    parts.pre_tokenizer = {PreTokenizerKind::Metaspace, *spm_norm, false};
  } else if (model_type == "BPE" && pre_type == "Metaspace" && norm.is_null()) {
    parts.pre_tokenizer = metaspace_pre_tokenizer(pf);
  } else if (model_type == "BPE" && pre_type == "ByteLevel") {
    parts.pre_tokenizer = {PreTokenizerKind::ByteLevel, pf.boolean("add_prefix_space", true),
                           pf.boolean("use_regex", true)};
  } else if (model_type == "BPE" && digits_then_bytes) {
    const JsonFields b{pre.at("pretokenizers")[1], file + " pre_tokenizer.pretokenizers[1]"};
    parts.pre_tokenizer = {PreTokenizerKind::ByteLevel, b.boolean("add_prefix_space", true),
                           b.boolean("use_regex", true), /*split_digits=*/true};
  } else if (model_type == "BPE" && split_numbers > 0) {
    const JsonFields b{pre.at("pretokenizers")[1], file + " pre_tokenizer.pretokenizers[1]"};
    parts.pre_tokenizer = {PreTokenizerKind::ByteLevel, b.boolean("add_prefix_space", true),
                           b.boolean("use_regex", true)};
    parts.pre_tokenizer.split_numbers = split_numbers;
  } else if (model_type == "WordPiece" && pre_type == "BertPreTokenizer") {
    parts.pre_tokenizer.kind = PreTokenizerKind::Bert;
  } else {
    throw Error(
        fmt::format("{}: {} with a {} model is not supported (BPE needs ByteLevel, or Digits "
                    "(individual_digits) then ByteLevel, or Split (Llama 3's or Qwen2's regex) then ByteLevel, or Metaspace, or none after the normalizers Prepend and "
                    "Replace of SentencePiece's form; WordPiece needs BertPreTokenizer)",
                    pf.where, pre_type, model_type));
  }

  json_post_processor(doc.contains("post_processor") ? doc.at("post_processor") : nlohmann::json(),
                      file + " post_processor", parts.prefix_ids, parts.suffix_ids);

  const nlohmann::json& dec = doc.contains("decoder") ? doc.at("decoder") : nlohmann::json();
  if (!dec.is_null()) {
    const JsonFields f{dec, file + " decoder"};
    const std::string type = dec.is_object() ? f.type() : dec.dump();
    if (type == "ByteLevel") {
      parts.decoder.kind = DecoderKind::ByteLevel;
    } else if (parts.pre_tokenizer.kind != PreTokenizerKind::Metaspace && (spm_decoder(dec) || type == "Metaspace")) {
      throw Error(fmt::format("{}: {} decodes SentencePiece-style BPE, not this {} model", f.where,
                              type == "Metaspace" ? "a Metaspace decoder" : "SentencePiece's decoder Sequence",
                              model_type));
    } else if (const std::optional<bool> strips = spm_decoder(dec)) {
      parts.decoder.kind = DecoderKind::Metaspace;
      parts.decoder.strip_prefix = *strips;
    } else if (type == "Metaspace") {
      parts.decoder.kind = DecoderKind::Metaspace;
      parts.decoder.strip_prefix =
          f.string("prepend_scheme").value_or(f.boolean("add_prefix_space", true) ? "always" : "never") != "never";
    } else if (type == "WordPiece") {
      parts.decoder = {DecoderKind::WordPiece, f.string("prefix").value_or("##"),
                       f.boolean("cleanup", true)};
    } else {
      throw Error(fmt::format("{}: type {} is not supported (ByteLevel, WordPiece, Metaspace, SentencePiece's "
                              "Sequence [Replace, ByteFallback, Fuse, Strip] or none are)",
                              f.where, type));
    }
  }

  const nlohmann::json& added =
      doc.contains("added_tokens") ? doc.at("added_tokens") : nlohmann::json::array();
  if (!added.is_array()) throw Error(fmt::format("{}: 'added_tokens' must be an array", file));
  for (size_t i = 0; i < added.size(); ++i) {
    const JsonFields f{added[i], fmt::format("{} added_tokens[{}]", file, i)};
    if (!added[i].is_object()) throw Error(fmt::format("{}: must be an object", f.where));
    AddedToken t;
    t.content = f.string("content").value_or("");
    if (t.content.empty()) continue;  // ignored by the reference too
    // The model's id wins over the listed one (the reference warns and does the same).
    const auto model_id = parts.model->vocab().find(t.content);
    const int64_t id = model_id ? *model_id : f.integer("id", -1);
    if (id < 0 || id > kMaxTokenId)
      throw Error(fmt::format("{}: no valid 'id' for \"{}\" (ids are in [0, {}])", f.where, t.content, kMaxTokenId));
    t.id = int32_t(id);
    t.special = f.boolean("special", false);
    t.normalized = f.boolean("normalized", true);
    t.single_word = f.boolean("single_word", false);
    t.lstrip = f.boolean("lstrip", false);
    t.rstrip = f.boolean("rstrip", false);
    const bool repeated = std::any_of(parts.added_tokens.begin(), parts.added_tokens.end(),
                                      [&](const AddedToken& o) { return o.content == t.content; });
    if (!repeated) parts.added_tokens.push_back(std::move(t));
  }
  parts.source =
      fmt::format("{} {} from '{}'",
                  model_type == "WordPiece"                                   ? "WordPiece"
                  : parts.pre_tokenizer.kind == PreTokenizerKind::Metaspace ? "SentencePiece-style BPE"
                                                                              : "byte-level BPE",
                  "tokenizer.json", path);
  return parts;
}

}  // namespace normlab
