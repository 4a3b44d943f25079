// run_config.cpp: TOML and override parsing, strict conversion of the run config.
#include "train/run_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <sstream>
#include <toml++/toml.h>

#include "io/unicode.h"
#include "train/data.h"
#include "train/toml_guard.h"
#include "util/error.h"
#include "util/files.h"
#include "util/hints.h"
#include "util/json_reader.h"

namespace normlab {

static nlohmann::json toml_to_json(const toml::table& table, const std::string& where) {
  std::stringstream ss;
  ss << toml::json_formatter{table};
  return parse_json(ss.str(), where);  // toml++ nests up to 256 levels; parse_json allows 512
}

// Every TOML text passes check_toml_text first: Debian's toml++ 3.3.0 reaches
// __builtin_unreachable on some non-ASCII input (toml_guard.h).
static toml::table parse_toml_text(const std::string& text, const std::string& where, const std::string& source) {
  check_toml_text(text, where);
  return toml::parse(text, source);
}

nlohmann::json read_toml(const std::string& path) {
  const std::string text = read_file(path, "config");  // refuses directories, FIFOs, devices
  // a model file given where a config goes: say what it is, not "invalid UTF-8 at byte offset 0"
  const bool safetensors = text.size() >= 9 && text[8] == '{' && text.compare(0, 8, std::string(8, '\0')) != 0;
  if (safetensors || text.rfind("GGUF", 0) == 0)
    throw Error(fmt::format("config '{}' is a model file ({}), not a config: give it as --checkpoint (or as "
                            "train.init_from to start training from it)",
                            path, safetensors ? "safetensors" : "GGUF"));
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0)  // a run's config.json
    return parse_json(text, fmt::format("config '{}'", path));
  try {
    return toml_to_json(parse_toml_text(text, fmt::format("config '{}'", path), path), fmt::format("config '{}'", path));
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw Error(fmt::format("config '{}' line {}, column {}: {}", path, where.line, where.column,
                            e.description()));
  }
}

void apply_overrides(nlohmann::json& doc, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    const auto eq = o.find('=');
    const auto dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq)
      throw Error(fmt::format("--set '{}': expected section.key=value, e.g. train.lr=3e-4", o));
    const std::string section = o.substr(0, dot), key = o.substr(dot + 1, eq - dot - 1);
    const std::string value = o.substr(eq + 1);
    const std::string where = fmt::format("--set '{}'", o);
    unicode::check_utf8(o, where);
    nlohmann::json v;
    bool toml_text = true;  // a value toml++ may safely see (toml_guard.h)
    try {
      check_toml_text("v = " + value, where);
    } catch (const Error&) {
      toml_text = false;  // e.g. a path with non-ASCII letters: a string, as a bare word is
    }
    try {
      v = toml_text ? toml_to_json(toml::parse("v = " + value, std::string("--set")), where)["v"] : nlohmann::json(value);
    } catch (const toml::parse_error&) {
      v = value;  // a bare word such as post or layernorm is a string
    }
    if (!doc.is_object()) doc = nlohmann::json::object();
    if (!doc[section].is_object() && !doc[section].is_null())
      throw Error(fmt::format("--set '{}': '{}' is not a table", o, section));
    doc[section][key] = v;
  }
}

static void read_precision(JsonReader& r, ops::Precision& out) {
  if (!r.has("precision")) return;
  std::string s;
  r.get("precision", s);
  if (auto p = ops::precision_from_string(s)) out = *p;
  else if (r.raw("precision").is_string())
    r.fail(fmt::format("{}: 'precision' = \"{}\" is not one of fp32 | bf16", r.where(), s));
}

static void read_schedule(JsonReader& r, Schedule& out) {
  std::string s;
  if (!r.has("lr_schedule")) return;
  r.get("lr_schedule", s);
  for (Schedule k : {Schedule::Constant, Schedule::Warmup, Schedule::InvSqrt, Schedule::Cosine})
    if (s == to_string(k)) {
      out = k;
      return;
    }
  if (r.raw("lr_schedule").is_string())
    r.fail(fmt::format("{}: 'lr_schedule' = \"{}\" is not one of constant | warmup | invsqrt | "
                       "cosine",
                       r.where(), s));
}

RunConfig run_config_from_json(const nlohmann::json& doc, const std::string& where) {
  RunConfig cfg;
  std::vector<std::string> errors;
  if (!doc.is_object()) throw Error(fmt::format("{}: expected a table", where));
  // a study file ([study], [base], [[grid]]) given where a run config goes: say what it is
  if (doc.contains("base") || doc.contains("grid") || doc.contains("study"))
    throw Error(fmt::format("{}: this is a study (it has [study], [base] or [[grid]]), not a run config: run it "
                            "with normlab compare --config",
                            where));
  for (const auto& [section, value] : doc.items())
    if (section != "model" && section != "train" && section != "data")
      errors.push_back(fmt::format("{}: unknown section [{}] (expected [model], [train], [data]){}", where,
                                   section, did_you_mean(section, {"model", "train", "data"})));
  if (doc.contains("model")) {
    cfg.model_given = true;
    try {
      cfg.model = model_config_from_json(doc["model"], where + " [model]", errors);
    } catch (const Error& e) {  // a value the model reader refuses outright
      errors.push_back(e.what());
    }
  }
  static const nlohmann::json empty = nlohmann::json::object();
  {
    JsonReader r(doc.contains("train") ? doc["train"] : empty, where + " [train]");
    TrainConfig& t = cfg.train;
    r.get("steps", t.steps);
    r.get("batch_size", t.batch_size);
    r.get("grad_accum", t.grad_accum);
    r.get("seq_len", t.seq_len);
    r.get("lr", t.lr);
    read_schedule(r, t.schedule);
    read_precision(r, t.precision);
    r.get("warmup_steps", t.warmup_steps);
    r.get("min_lr", t.min_lr);
    r.get("beta1", t.adamw.beta1);
    r.get("beta2", t.adamw.beta2);
    r.get("adam_eps", t.adamw.eps);
    r.get("weight_decay", t.adamw.weight_decay);
    r.get("grad_clip", t.grad_clip);
    r.get("seed", t.seed);
    r.get("label_smoothing", t.label_smoothing);
    r.get("z_loss", t.z_loss);
    r.get("qk_clip", t.qk_clip);
    r.get("qk_clip_alpha", t.qk_clip_alpha);
    r.get("eval_every", t.eval_every);
    r.get("eval_batches", t.eval_batches);
    r.get("stop_patience", t.stop_patience);
    r.get("stop_min_improvement", t.stop_min_improvement);
    r.get("stop_after_warmup", t.stop_after_warmup);
    r.get("log_every", t.log_every);
    r.get("checkpoint_every", t.checkpoint_every);
    r.get("keep_checkpoints", t.keep_checkpoints);
    r.get("log_every_layers", t.log_every_layers);
    r.get("log_model_update", t.log_model_update);
    r.get("out_dir", t.out_dir);
    r.get("init_from", t.init_from);
    for (auto& e : r.finish()) errors.push_back(e);
    auto check = [&](bool ok, const std::string& msg) {
      if (!ok) errors.push_back(msg);
    };
    check(t.steps >= 1 && t.steps <= 100000000, fmt::format("train.steps = {} must be >= 1", t.steps));
    check(t.batch_size >= 1 && t.batch_size <= 65536,
          fmt::format("train.batch_size = {} must be in [1, 65536]", t.batch_size));
    check(t.grad_accum >= 1 && t.grad_accum <= 65536,
          fmt::format("train.grad_accum = {} must be >= 1", t.grad_accum));
    check(t.seq_len >= 0, fmt::format("train.seq_len = {} must be >= 1 (or 0 for the model's)", t.seq_len));
    check(t.lr > 0 && std::isfinite(t.lr), fmt::format("train.lr = {} must be > 0", t.lr));
    check(t.warmup_steps >= 0, fmt::format("train.warmup_steps = {} must be >= 0", t.warmup_steps));
    check(t.min_lr >= 0 && t.min_lr <= t.lr,
          fmt::format("train.min_lr = {} must be in [0, lr = {}]", t.min_lr, t.lr));
    check(t.adamw.beta1 >= 0 && t.adamw.beta1 < 1, fmt::format("train.beta1 = {} must be in [0, 1)", t.adamw.beta1));
    check(t.adamw.beta2 >= 0 && t.adamw.beta2 < 1, fmt::format("train.beta2 = {} must be in [0, 1)", t.adamw.beta2));
    check(t.adamw.eps > 0, fmt::format("train.adam_eps = {} must be > 0", t.adamw.eps));
    check(t.adamw.weight_decay >= 0, fmt::format("train.weight_decay = {} must be >= 0", t.adamw.weight_decay));
    check(t.grad_clip >= 0, fmt::format("train.grad_clip = {} must be >= 0 (0 = off)", t.grad_clip));
    check(t.label_smoothing >= 0 && t.label_smoothing < 1,
          fmt::format("train.label_smoothing = {} must be in [0, 1)", t.label_smoothing));
    check(t.z_loss >= 0 && t.z_loss <= 1, fmt::format("train.z_loss = {} must be in [0, 1] (PaLM uses 1e-4)", t.z_loss));
    check(t.qk_clip >= 0 && std::isfinite(t.qk_clip),
          fmt::format("train.qk_clip = {} must be a finite threshold >= 0 (0: off; Kimi K2 used 100)", t.qk_clip));
    check(t.qk_clip_alpha >= 0 && t.qk_clip_alpha <= 1,
          fmt::format("train.qk_clip_alpha = {} must be in [0, 1]", t.qk_clip_alpha));
    check(t.eval_every >= 0, fmt::format("train.eval_every = {} must be >= 0", t.eval_every));
    check(t.stop_patience >= 0 && t.stop_patience <= 1000000,
          fmt::format("train.stop_patience = {} must be in [0, 1000000] (0 = off)", t.stop_patience));
    check(t.stop_patience == 0 || t.eval_every > 0,
          "train.stop_patience > 0 needs train.eval_every > 0 (the evaluations a plateau is counted in)");
    check(!t.stop_after_warmup || t.stop_patience > 0,
          "train.stop_after_warmup = true needs train.stop_patience > 0 (it keeps the warm-up out of a plateau)");
    check(t.stop_min_improvement >= 0 && t.stop_min_improvement < 1,
          fmt::format("train.stop_min_improvement = {} must be in [0, 1)", t.stop_min_improvement));
    check(t.eval_batches >= 1, fmt::format("train.eval_batches = {} must be >= 1", t.eval_batches));
    check(t.log_every >= 1, fmt::format("train.log_every = {} must be >= 1", t.log_every));
    check(t.checkpoint_every >= 0, fmt::format("train.checkpoint_every = {} must be >= 0", t.checkpoint_every));
    check(t.keep_checkpoints >= 1 && t.keep_checkpoints <= 1000000,
          fmt::format("train.keep_checkpoints = {} must be in [1, 1000000]", t.keep_checkpoints));
    check(t.log_every_layers >= 0 && t.log_every_layers <= 100000000,
          fmt::format("train.log_every_layers = {} must be in [0, 100000000] (0 = off)", t.log_every_layers));
    check(!t.log_model_update || t.log_every_layers > 0,
          "train.log_model_update = true needs train.log_every_layers > 0 (the steps it is measured at)");
    check(!t.out_dir.empty(), "train.out_dir must not be empty");
    if (cfg.model_given && t.seq_len > cfg.model.seq_len)
      errors.push_back(fmt::format("train.seq_len = {} exceeds model.seq_len = {}", t.seq_len,
                                   cfg.model.seq_len));
  }
  {
    JsonReader r(doc.contains("data") ? doc["data"] : empty, where + " [data]");
    r.get("corpus", cfg.data.corpus);
    r.get("max_bytes", cfg.data.max_bytes);
    r.get("val_fraction", cfg.data.val_fraction);
    r.get("test_fraction", cfg.data.test_fraction);
    r.get("tokens", cfg.data.tokens);
    r.get("tokenizer", cfg.data.tokenizer);
    r.get("parallel", cfg.data.parallel);
    r.get("bleu_sentences", cfg.data.bleu_sentences);
    r.get("bos", cfg.data.bos);
    for (auto& e : r.finish()) errors.push_back(e);
    if (cfg.data.bos < -1 || cfg.data.bos >= kMaxVocab)
      errors.push_back(fmt::format("data.bos = {} must be -1 (none) or an id in [0, {})", cfg.data.bos, kMaxVocab));
    if (cfg.data.bos >= 0 && !cfg.data.parallel.empty())
      errors.push_back("data.bos starts a GPT's windows of a corpus; a parallel corpus (data.parallel) has its own BOS");
    if (cfg.data.bleu_sentences < 0 || cfg.data.bleu_sentences > 100000)
      errors.push_back(fmt::format("data.bleu_sentences = {} must be in [0, 100000]", cfg.data.bleu_sentences));
    if (!cfg.data.parallel.empty() && (!cfg.data.tokens.empty() || !cfg.data.tokenizer.empty()))
      errors.push_back("data.parallel is byte-level and excludes data.tokens and data.tokenizer");
    if (cfg.data.max_bytes < 0 || cfg.data.max_bytes > 1'000'000'000'000)
      errors.push_back(fmt::format("data.max_bytes = {} must be in [0, 1e12] (0 = the whole corpus)", cfg.data.max_bytes));
    if (cfg.data.max_bytes > 0 && (!cfg.data.tokens.empty() || !cfg.data.parallel.empty()))
      errors.push_back("data.max_bytes cuts a text corpus (data.corpus); it does not apply to data.tokens or data.parallel");
    if (cfg.data.corpus.starts_with("bible:") &&
        std::find(corpus_names().begin(), corpus_names().end(), cfg.data.corpus) == corpus_names().end())
      errors.push_back(fmt::format("data.corpus = \"{}\" is not a named corpus (known: {}){}", cfg.data.corpus,
                                   fmt::join(corpus_names(), ", "), did_you_mean(cfg.data.corpus, corpus_names())));
    if (!(cfg.data.val_fraction > 0 && cfg.data.val_fraction < 1))
      errors.push_back(fmt::format("data.val_fraction = {} must be in (0, 1)", cfg.data.val_fraction));
    if (!(cfg.data.test_fraction >= 0 && cfg.data.test_fraction < 1 &&
          cfg.data.val_fraction + cfg.data.test_fraction < 1))
      errors.push_back(fmt::format("data.test_fraction = {} must be in [0, 1) and leave training data "
                                   "(val_fraction + test_fraction < 1)", cfg.data.test_fraction));
    if (cfg.data.test_fraction > 0 && !cfg.data.parallel.empty())
      errors.push_back("data.test_fraction splits a corpus or a token file; a parallel corpus (data.parallel) has "
                       "no test split in normlab");
    if (!cfg.data.tokens.empty() && !cfg.data.tokenizer.empty())
      errors.push_back(fmt::format("data.tokens and data.tokenizer exclude each other: a token file already "
                                   "holds ids (tokenize text with `normlab tokenize`)"));
  }
  if (!errors.empty()) throw Error(join_errors("invalid config " + where, errors));
  for (std::string* path : {&cfg.data.corpus, &cfg.data.tokens, &cfg.data.tokenizer, &cfg.data.parallel,
                            &cfg.train.out_dir, &cfg.train.init_from})
    *path = expand_home(*path);  // "~/..." as a shell reads it (util/files.h)
  return cfg;
}

nlohmann::json run_config_to_json(const RunConfig& cfg) {
  const TrainConfig& t = cfg.train;
  return {{"model", model_config_to_json(cfg.model)},
          {"train",
           {{"steps", t.steps}, {"batch_size", t.batch_size}, {"grad_accum", t.grad_accum},
            {"seq_len", t.seq_len}, {"lr", t.lr}, {"lr_schedule", to_string(t.schedule)},
            {"precision", ops::to_string(t.precision)},
            {"warmup_steps", t.warmup_steps}, {"min_lr", t.min_lr}, {"beta1", t.adamw.beta1},
            {"beta2", t.adamw.beta2}, {"adam_eps", t.adamw.eps},
            {"weight_decay", t.adamw.weight_decay}, {"grad_clip", t.grad_clip}, {"seed", t.seed},
            {"label_smoothing", t.label_smoothing}, {"z_loss", t.z_loss},
            {"qk_clip", t.qk_clip}, {"qk_clip_alpha", t.qk_clip_alpha},
            {"eval_every", t.eval_every}, {"eval_batches", t.eval_batches},
            {"stop_patience", t.stop_patience}, {"stop_min_improvement", t.stop_min_improvement},
            {"stop_after_warmup", t.stop_after_warmup},
            {"log_every", t.log_every}, {"checkpoint_every", t.checkpoint_every},
            {"keep_checkpoints", t.keep_checkpoints},
            {"log_every_layers", t.log_every_layers}, {"log_model_update", t.log_model_update},
            {"out_dir", t.out_dir}, {"init_from", t.init_from}}},
          {"data",
           {{"corpus", cfg.data.corpus}, {"max_bytes", cfg.data.max_bytes}, {"val_fraction", cfg.data.val_fraction},
            {"test_fraction", cfg.data.test_fraction}, {"tokens", cfg.data.tokens}, {"tokenizer", cfg.data.tokenizer},
            {"parallel", cfg.data.parallel},
            {"bleu_sentences", cfg.data.bleu_sentences}, {"bos", cfg.data.bos}}}};
}

std::optional<DataConfig> run_data_of(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(checkpoint, ec) ? fs::path(checkpoint) : fs::path(checkpoint).parent_path();
  const fs::path config = dir / "config.json";
  // a run's config.json has [model], [train] and [data]; a Hugging Face config.json is not one
  if (!fs::is_regular_file(config, ec) || !fs::exists(dir / "metrics.jsonl", ec)) return std::nullopt;
  try {
    return run_config_from_json(parse_json(read_file(config.string(), "config"), config.string()), config.string()).data;
  } catch (const Error&) {
    return std::nullopt;
  }
}

void refuse_other_tokenizer(const std::string& given, const std::string& checkpoint) {
  namespace fs = std::filesystem;
  const std::optional<DataConfig> data = run_data_of(checkpoint);
  if (!data || given.empty()) return;
  const std::string& trained = data->tokenizer;
  const std::string want = given == "bytes" ? "" : given;
  std::error_code ec;
  const bool same = want == trained || (!want.empty() && !trained.empty() && fs::exists(want, ec) &&
                                        fs::exists(trained, ec) && fs::equivalent(want, trained, ec));
  if (!same)
    throw Error(fmt::format("--tokenizer {}: the run that made '{}' read its data as {} (data.tokenizer of its "
                            "config.json); through another tokenizer the model would get ids it never saw. Give "
                            "that tokenizer, or none",
                            given, checkpoint, trained.empty() ? std::string("bytes") : "'" + trained + "'"));
}

}  // namespace normlab
