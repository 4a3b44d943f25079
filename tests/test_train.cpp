// test_train.cpp: the training layer (the optimizer's own tests: test_optimizer.cpp):
// checkpoints (round trip and strict refusal of malformed files), bitwise determinism, divergence
// handling, and short runs on the built-in corpus whose validation loss ends well below the corpus'
// byte unigram entropy, for both pre and post placement; training through a tokenizer
// (data.tokenizer): batches are windows of the tokenizer's ids, the model's vocab and [MASK] are
// checked, and the byte path is unchanged (against the pre-tokenizer implementation, kept here).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <atomic>
#include <functional>
#include <map>
#include <unistd.h>

#include "check.h"
#include "model/model.h"
#include "ops/common.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

TrainOptions quiet_options() {
  TrainOptions o;
  o.quiet = true;
  return o;
}


fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("normlab_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// `f` throws an Error whose message contains `needle`
void expect_error_contains(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no Error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::vector<nlohmann::json> read_metrics(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

RunConfig small_run(const fs::path& out, Placement placement, long steps) {
  nlohmann::json doc = {
      {"model", {{"d_model", 64}, {"n_heads", 4}, {"n_layers", 2}, {"seq_len", 64},
                 {"placement", to_string(placement)}}},
      {"train", {{"steps", steps}, {"batch_size", 16}, {"lr", 1.5e-3}, {"warmup_steps", 60},
                 {"eval_every", 0}, {"eval_batches", 4}, {"out_dir", out.string()},
                 {"checkpoint_every", 0}}}};
  return run_config_from_json(doc, "test");
}

}  // namespace

TEST(Divergence, NaNPropagatesToTheLossAndTheGradientNorm) {
  // the build flags (-fno-trapping-math -fno-math-errno, no -ffast-math) must keep NaN/Inf
  ModelConfig c;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_layers = 2;
  c.seq_len = 4;
  Model<float> m(c);
  std::vector<int32_t> ids = {1, 2, 3, 4}, labels = {2, 3, 4, 5};
  m.params()[m.table().find("h.1.mlp.fc.weight")->offset + 3] = NAN;
  EXPECT_TRUE(std::isnan(m.forward(ids.data(), labels.data(), 1, 4)));
  // a finite forward whose gradient is not: an infinite loss scale reaches every gradient
  m.params()[m.table().find("h.1.mlp.fc.weight")->offset + 3] = 0.0f;
  ASSERT_TRUE(std::isfinite(m.forward(ids.data(), labels.data(), 1, 4)));
  m.zero_grad();
  m.backward(INFINITY);
  EXPECT_FALSE(std::isfinite(grad_norm(m.grads())));
}

TEST(Checkpoint, RoundTripAndStrictRefusal) {
  const fs::path dir = temp_dir("ckpt");
  ModelConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 2;
  c.seq_len = 8;
  c.placement = {Placement::Sandwich, Placement::Post};
  c.norm = NormKind::RMSNorm;
  Model<float> m(c);
  const std::string path = (dir / "m.safetensors").string();
  save_checkpoint(path, m, nullptr, 7, false);
  auto back = load_model(path);
  EXPECT_EQ(back->params(), m.params());
  EXPECT_EQ(model_config_to_json(back->config()), model_config_to_json(m.config()));
  // read straight into float64 (the instruments' model): the same numbers, widened, with or without gradients
  for (bool forward_only : {false, true}) {
    const auto wide = load_model_double(path, forward_only);
    EXPECT_EQ(wide->forward_only(), forward_only);
    EXPECT_EQ(model_config_to_json(wide->config()), model_config_to_json(m.config()));
    ASSERT_EQ(wide->params().size(), m.params().size());
    for (size_t i = 0; i < m.params().size(); i++) ASSERT_EQ(wide->params()[i], double(m.params()[i])) << i;
  }
  // refuses to overwrite, and the file is unchanged
  EXPECT_THROW(save_checkpoint(path, m, nullptr, 7, false), Error);
  EXPECT_EQ(load_model(path)->params(), m.params());
  // every truncation is refused with an Error naming the file
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t len : {size_t(0), size_t(5), size_t(8), size_t(100), bytes.size() / 2, bytes.size() - 1}) {
    const std::string cut = (dir / "cut.safetensors").string();
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(len));
    for (bool wide : {false, true}) {
      try {
        if (wide) load_model_double(cut);
        else load_model(cut);
        ADD_FAILURE() << "truncated to " << len << " bytes was accepted" << (wide ? " (float64)" : "");
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cut.safetensors"), std::string::npos) << e.what();
      }
    }
  }
  // a file whose tensors do not match its config
  ModelConfig other = c;
  other.d_ff = 40;
  const std::string bad = (dir / "bad.safetensors").string();
  std::vector<safetensors::TensorView> views;
  for (const ParamSpec& p : m.table().specs)
    views.push_back({p.name, safetensors::DType::F32, p.shape, m.params().data() + p.offset});
  safetensors::write(bad, views, {{"config", model_config_to_json(other).dump()}}, true);
  EXPECT_THROW(load_model(bad), Error);
  EXPECT_THROW(load_model_double(bad), Error);
  // a NaN weight is named in float64 as in float32
  std::vector<float> poisoned(m.params().begin(), m.params().end());
  poisoned[m.table().specs[1].offset] = NAN;
  views.clear();
  for (const ParamSpec& p : m.table().specs)
    views.push_back({p.name, safetensors::DType::F32, p.shape, poisoned.data() + p.offset});
  safetensors::write(bad, views, {{"config", model_config_to_json(c).dump()}}, true);
  for (bool wide : {false, true}) {
    try {
      if (wide) load_model_double(bad);
      else load_model(bad);
      ADD_FAILURE() << "a NaN weight was accepted" << (wide ? " (float64)" : "");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("non-finite value"), std::string::npos) << e.what();
    }
  }
  // no config in the metadata
  safetensors::write(bad, views, {}, true);
  EXPECT_THROW(load_model(bad), Error);
  fs::remove_all(dir);
}

TEST(Data, EncoderMaskingFollowsBert) {
  std::vector<int32_t> bytes(5000);
  for (size_t i = 0; i < bytes.size(); i++) bytes[i] = uint8_t('a' + i % 26);
  Rng rng(3);
  const Batch b = sample_batch(bytes, Arch::Encoder, 400, 40, rng);
  long labelled = 0, masked = 0, unchanged = 0;
  for (size_t i = 0; i < b.ids.size(); i++) {
    if (b.labels[i] == ops::kIgnoreLabel) continue;
    labelled++;
    masked += b.ids[i] == kMaskToken;
    unchanged += b.ids[i] == b.labels[i];
  }
  EXPECT_EQ(labelled, 400 * 6);  // round(0.15 * 40) per row
  EXPECT_NEAR(double(masked) / labelled, 0.8, 0.03);
  EXPECT_NEAR(double(unchanged) / labelled, 0.1 + 0.1 / 256, 0.03);
}

// A one-row batch of two tokens (ids, labels, token types, padding mask; the source stays empty).
static Batch two_tokens(std::vector<int32_t> ids, std::vector<int32_t> labels, std::vector<int32_t> types,
                 std::vector<uint8_t> mask) {
  Batch b;
  b.B = 1;
  b.T = 2;
  b.ids = std::move(ids);
  b.labels = std::move(labels);
  b.types = std::move(types);
  b.mask = std::move(mask);
  return b;
}

TEST(Data, BadBatchesAreRefused) {
  ModelConfig c;
  Batch b = two_tokens({1, 300}, {2, 3}, {}, {});
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // id out of range
  b = two_tokens({1, 2}, {-100, -100}, {}, {});
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // no labels
  b = two_tokens({1, 2}, {-5, 3}, {}, {});
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // bad label
  b = two_tokens({1, 2}, {2, 3}, {0, 1}, {});
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // a token type without a token-type embedding
  b = two_tokens({1, 2}, {2, 3}, {}, {0, 1});
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // a gpt row starting with padding (left padding)
  b = two_tokens({1, 2}, {2, 3}, {}, {1, 2});
  EXPECT_THROW(check_batch(b, c, "x"), Error);  // a mask value other than 0/1
  b = two_tokens({1, 2}, {2, 3}, {}, {1, 0});
  EXPECT_NO_THROW(check_batch(b, c, "x"));      // right padding
  const fs::path dir = temp_dir("data");
  std::ofstream(dir / "empty.txt").close();
  EXPECT_THROW(load_corpus((dir / "empty.txt").string(), 0.1, 8), Error);
  EXPECT_THROW(load_corpus((dir / "missing.txt").string(), 0.1, 8), Error);
  fs::remove_all(dir);
}

// data.max_bytes: the first bytes, cut back to the end of the last whole line in them; the named
// corpora resolve to the built Bible corpus in the cache, or say how to build it.
TEST(Data, MaxBytesKeepsWholeLinesAndNamedCorporaResolve) {
  const fs::path dir = temp_dir("max_bytes");
  std::string text;
  for (int i = 0; i < 40; i++) text += fmt::format("line {:02} of the corpus\n", i);
  const size_t L = text.size() / 40;  // bytes a line (22)
  std::ofstream(dir / "c.txt") << text;
  const std::string path = (dir / "c.txt").string();
  const Corpus all = load_corpus(path, 0.25, 8);
  EXPECT_EQ(all.train.size() + all.val.size(), text.size());
  const Corpus cut = load_corpus(path, 0.25, 8, "", 11 * L - 1);  // 10 whole lines and one byte short
  ASSERT_EQ(cut.train.size() + cut.val.size(), 10 * L);
  EXPECT_EQ(cut.val.back(), int32_t('\n'));
  EXPECT_EQ(cut.train.front(), int32_t('l'));
  EXPECT_NE(cut.description().find(fmt::format("its first {} bytes (whole lines)", 11 * L - 1)), std::string::npos)
      << cut.description();
  expect_error_contains([&] { load_corpus(path, 0.25, 8, "", L - 1); }, "holds no whole line");
  EXPECT_EQ(load_corpus(path, 0.25, 8, "", 1 << 20).train, all.train);  // more than the file: all of it
  // the names: "builtin" and the Bible's sides, from the cache named by NORMLAB_CACHE
  EXPECT_EQ(corpus_path("builtin"), builtin_corpus_path());
  EXPECT_EQ(corpus_path(path), path);
  const char* had = std::getenv("NORMLAB_CACHE");
  const std::string saved = had ? had : "";
  setenv("NORMLAB_CACHE", (dir / "cache").c_str(), 1);
  expect_error_contains([] { corpus_path("bible:es"); }, "`normlab corpus bible` builds it");
  expect_error_contains([] { corpus_path("bible:fr"); }, "not a named corpus (known: builtin, bible:es, bible:web)");
  fs::create_directories(dir / "cache" / "bible" / "es-en");
  std::ofstream(dir / "cache" / "bible" / "es-en" / "train.src") << text;
  EXPECT_EQ(corpus_path("bible:es"), (dir / "cache" / "bible" / "es-en" / "train.src").string());
  const Corpus es = load_corpus("bible:es", 0.25, 8, "", 5 * L);
  EXPECT_EQ(es.train.size() + es.val.size(), 5 * L);
  EXPECT_NE(es.description().find("the Spanish Reina-Valera 1909 (bible:es"), std::string::npos) << es.description();
  if (had) setenv("NORMLAB_CACHE", saved.c_str(), 1);
  else unsetenv("NORMLAB_CACHE");
  // the config's checks
  auto config_error = [](const std::string& data) {
    try {
      run_config_from_json(nlohmann::json::parse(R"({"data": )" + data + "}"), "t");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(config_error(R"({"max_bytes": -1})").find("data.max_bytes = -1 must be in [0, 1e12]"), std::string::npos);
  EXPECT_NE(config_error(R"({"max_bytes": 100, "tokens": "x.bin"})").find("does not apply to data.tokens"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"corpus": "bible:ES"})").find("not a named corpus"), std::string::npos);
  EXPECT_EQ(config_error(R"({"corpus": "bible:web", "max_bytes": 1000})"), "");
  fs::remove_all(dir);
}

// ---- data.tokenizer ----------------------------------------------------------------------------

namespace {

// The byte-level batch sampler as it was before corpora held token ids (commit d0bed03), verbatim
// but for the name: the byte path must still draw exactly these batches.
Batch old_byte_sample_batch(const std::vector<uint8_t>& bytes, Arch arch, int B, int T, Rng& rng) {
  Batch batch;
  batch.B = B;
  batch.T = T;
  batch.ids.resize(size_t(B) * T);
  batch.labels.resize(size_t(B) * T);
  const size_t windows = bytes.size() - size_t(T);  // starts with T + 1 bytes available
  for (int b = 0; b < B; b++) {
    const size_t start = rng.below(windows);
    int32_t* ids = batch.ids.data() + size_t(b) * T;
    int32_t* labels = batch.labels.data() + size_t(b) * T;
    for (int t = 0; t < T; t++) ids[t] = bytes[start + t];
    if (arch == Arch::Gpt) {
      for (int t = 0; t < T; t++) labels[t] = bytes[start + t + 1];
      continue;
    }
    for (int t = 0; t < T; t++) labels[t] = ops::kIgnoreLabel;
    std::vector<int> pos(T);
    for (int t = 0; t < T; t++) pos[t] = t;
    const int k = std::max(1, int(std::lround(0.15 * T)));
    for (int j = 0; j < k; j++) {
      const int pick = j + int(rng.below(uint64_t(T - j)));
      std::swap(pos[j], pos[pick]);
      const int t = pos[j];
      labels[t] = ids[t];
      const double u = rng.uniform();
      if (u < 0.8) ids[t] = kMaskToken;
      else if (u < 0.9) ids[t] = int32_t(rng.below(kByteVocab));
    }
  }
  return batch;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A small corpus of lowercase words, spaces and newlines, and two tokenizers that cover it:
// a GPT-2 style byte-level BPE (vocab.json + merges.txt, 36 ids, no [MASK]) and a BERT vocab.txt.
struct TokenizerFixture {
  fs::path dir, corpus, bpe, bert;
  explicit TokenizerFixture(const std::string& name) : dir(temp_dir(name)) {
    corpus = dir / "corpus.txt";
    std::ofstream text(corpus);
    const char* lines[] = {"in the beginning god created the heaven and the earth\n",
                           "and the earth was without form and void\n",
                           "and darkness was upon the face of the deep\n"};
    for (int i = 0; i < 60; i++) text << lines[i % 3];
    text.close();
    bpe = dir / "bpe";
    fs::create_directories(bpe);
    nlohmann::json vocab = nlohmann::json::object();
    for (int c = 0; c < 26; c++) vocab[std::string(1, char('a' + c))] = c;
    const std::vector<std::string> more = {"\u0120", "\u010a", "th", "\u0120th", "\u0120the", "an",
                                           "\u0120an", "\u0120and", "in", "\u0120in"};
    for (size_t i = 0; i < more.size(); i++) vocab[more[i]] = int(26 + i);
    std::ofstream(bpe / "vocab.json") << vocab.dump();
    std::ofstream(bpe / "merges.txt") << "#version: 0.2\nt h\n\u0120 th\n\u0120th e\na n\n\u0120 an\n\u0120an d\n"
                                         "i n\n\u0120 in\n";
    bert = dir / "vocab.txt";
    std::ofstream v(bert);
    v << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    for (const char* w : {"in", "the", "beginning", "god", "created", "heaven", "and", "earth", "was",
                          "without", "form", "void", "darkness", "upon", "face", "of", "deep"})
      v << w << "\n";
  }
  ~TokenizerFixture() { fs::remove_all(dir); }
  RunConfig run(const std::string& tokenizer, const std::string& arch, int vocab, long steps,
                const std::string& out) const {
    nlohmann::json doc = {
        {"model", {{"arch", arch}, {"d_model", 32}, {"n_heads", 2}, {"n_layers", 1}, {"seq_len", 16},
                   {"vocab", vocab}}},
        {"train", {{"steps", steps}, {"batch_size", 8}, {"lr", 1e-2}, {"warmup_steps", 5},
                   {"eval_every", 0}, {"eval_batches", 2}, {"out_dir", (dir / out).string()},
                   {"checkpoint_every", 0}}},
        {"data", {{"corpus", corpus.string()}, {"tokenizer", tokenizer}, {"val_fraction", 0.2}}}};
    return run_config_from_json(doc, "test");
  }
};

void expect_error_containing(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(DataTokenizer, BatchesAreWindowsOfTheTokenizersEncoding) {
  const TokenizerFixture fx("tok_windows");
  const Tokenizer tok = load_tokenizer(fx.bpe.string());
  ASSERT_EQ(tok.vocab_size(), 36);
  const std::string text = read_text(fx.corpus);
  const std::vector<int32_t> all = tok.encode(text, false);
  EXPECT_EQ(all[0], 34);  // "in"
  EXPECT_EQ(all[1], 30);  // "Ġthe"
  const Corpus c = load_corpus(fx.corpus.string(), 0.2, 16, fx.bpe.string());
  EXPECT_EQ(c.vocab, 36);
  EXPECT_FALSE(c.mask_id.has_value());
  EXPECT_STREQ(c.unit(), "token");
  const size_t n_val = size_t(double(all.size()) * 0.2);
  EXPECT_EQ(c.train, std::vector<int32_t>(all.begin(), all.end() - ptrdiff_t(n_val)));
  EXPECT_EQ(c.val, std::vector<int32_t>(all.end() - ptrdiff_t(n_val), all.end()));

  const int B = 4, T = 16;
  Rng rng(5), mirror(5);
  const Batch b = sample_batch(c.train, Arch::Gpt, B, T, rng);
  for (int r = 0; r < B; r++) {
    const size_t start = mirror.below(c.train.size() - T);
    const std::vector<int32_t> ids(b.ids.begin() + r * T, b.ids.begin() + (r + 1) * T);
    const std::vector<int32_t> labels(b.labels.begin() + r * T, b.labels.begin() + (r + 1) * T);
    EXPECT_EQ(ids, std::vector<int32_t>(c.train.begin() + ptrdiff_t(start), c.train.begin() + ptrdiff_t(start) + T));
    EXPECT_EQ(labels,
              std::vector<int32_t>(c.train.begin() + ptrdiff_t(start) + 1, c.train.begin() + ptrdiff_t(start) + T + 1));
    EXPECT_NE(text.find(tok.decode(ids)), std::string::npos) << tok.decode(ids);  // a window of the text
  }
  // the token unigram entropy counts ids, not bytes
  std::map<int32_t, double> count;
  for (int32_t id : c.train) count[id] += 1;
  double h = 0;
  for (const auto& [id, n] : count) h -= n / double(c.train.size()) * std::log(n / double(c.train.size()));
  EXPECT_NEAR(unigram_entropy(c.train), h, 1e-12);
}

TEST(DataTokenizer, GptTrainsAndTheLossFalls) {
  const TokenizerFixture fx("tok_train");
  RunConfig cfg = fx.run(fx.bpe.string(), "gpt", 36, 80, "run");
  EXPECT_EQ(run_config_to_json(cfg)["data"]["tokenizer"], fx.bpe.string());
  const TrainResult r = train(cfg, quiet_options());
  ASSERT_FALSE(r.diverged);
  EXPECT_EQ(r.unigram_unit, "token");
  std::vector<double> losses;
  nlohmann::json summary;
  for (const auto& line : read_metrics(fx.dir / "run" / "metrics.jsonl")) {
    if (line["type"] == "train") losses.push_back(line["loss"].get<double>());
    if (line["type"] == "summary") summary = line;
  }
  ASSERT_EQ(losses.size(), 80u);
  EXPECT_NEAR(losses[0], std::log(36.0), 0.5);  // uniform over the tokenizer's ids at init
  EXPECT_LT(r.last_train_loss, losses[0] - 1.5);
  EXPECT_LT(r.last_val_loss, r.unigram_entropy - 0.5) << "val " << r.last_val_loss << " vs token unigram entropy "
                                                      << r.unigram_entropy;
  EXPECT_EQ(summary["unigram_unit"], "token");
  const auto written = nlohmann::json::parse(read_text(fx.dir / "run" / "config.json"));
  EXPECT_EQ(written["data"]["tokenizer"], fx.bpe.string());
}

TEST(DataTokenizer, VocabAndMaskAreChecked) {
  const TokenizerFixture fx("tok_refuse");
  expect_error_containing([&] { train(fx.run(fx.bpe.string(), "gpt", 20, 1, "small"), quiet_options()); },
                          "model.vocab = 20 is smaller than the tokenizer's 36 tokens");
  expect_error_containing([&] { train(fx.run(fx.bpe.string(), "encoder", 64, 1, "nomask"), quiet_options()); },
                          "has no [MASK] token");
  expect_error_containing([&] { train(fx.run((fx.dir / "nope").string(), "gpt", 64, 1, "missing"), quiet_options()); },
                          "data.tokenizer: tokenizer '");
  EXPECT_FALSE(fs::exists(fx.dir / "small"));  // refused before the run directory is made
  nlohmann::json doc = {{"data", {{"tokenizer", "gpt2"}, {"tokens", "t.safetensors"}}}};
  expect_error_containing([&] { run_config_from_json(doc, "test"); }, "exclude each other");
}

TEST(DataTokenizer, EncoderMasksWithTheTokenizersMask) {
  const TokenizerFixture fx("tok_encoder");
  const Corpus c = load_corpus(fx.corpus.string(), 0.2, 16, fx.bert.string());
  ASSERT_TRUE(c.mask_id.has_value());
  EXPECT_EQ(*c.mask_id, 4);
  EXPECT_EQ(c.vocab, 22);
  for (int32_t id : c.train) {
    EXPECT_GT(id, 4);  // no [CLS]/[SEP] (nor [UNK]) in the stream
    if (id <= 4) break;
  }
  Rng rng(3);
  const Batch b = sample_batch(c.train, Arch::Encoder, 400, 16, rng, c.masking());
  long labelled = 0, masked = 0, unchanged = 0;
  for (size_t i = 0; i < b.ids.size(); i++) {
    EXPECT_TRUE(b.ids[i] >= 0 && b.ids[i] < 22) << b.ids[i];
    if (b.labels[i] == ops::kIgnoreLabel) continue;
    labelled++;
    masked += b.ids[i] == 4;
    unchanged += b.ids[i] == b.labels[i];
  }
  EXPECT_EQ(labelled, 400 * 2);  // round(0.15 * 16) per row
  EXPECT_NEAR(double(masked) / labelled, 0.8, 0.04);
  EXPECT_NEAR(double(unchanged) / labelled, 0.1 + 0.1 / 22, 0.04);
  // and an encoder trains through it
  const TrainResult r = train(fx.run(fx.bert.string(), "encoder", 22, 3, "enc"), quiet_options());
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_TRUE(std::isfinite(r.last_val_loss));
}

TEST(DataTokenizer, BytesAreUnchanged) {
  const std::string path = builtin_corpus_path();
  const std::string text = read_text(path);
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  const Corpus c = load_corpus(path, 0.1, 64);
  EXPECT_TRUE(c.bytes());
  EXPECT_EQ(c.vocab, 256);
  EXPECT_EQ(c.mask_id.value_or(-1), kMaskToken);
  const size_t n_val = size_t(double(bytes.size()) * 0.1);
  const std::vector<uint8_t> train_bytes(bytes.begin(), bytes.end() - ptrdiff_t(n_val));
  ASSERT_EQ(c.train.size(), train_bytes.size());
  EXPECT_TRUE(std::equal(c.train.begin(), c.train.end(), train_bytes.begin()));
  for (Arch arch : {Arch::Gpt, Arch::Encoder}) {
    Rng a(1, 1), b(1, 1);
    for (int k = 0; k < 3; k++) {
      const Batch now = sample_batch(c.train, arch, 16, 64, a);
      const Batch before = old_byte_sample_batch(train_bytes, arch, 16, 64, b);
      EXPECT_EQ(now.ids, before.ids);
      EXPECT_EQ(now.labels, before.labels);
    }
  }
  // the byte unigram entropy as it was computed (a 256-bin histogram)
  std::vector<double> count(256, 0.0);
  for (uint8_t x : train_bytes) count[x] += 1;
  double h = 0;
  for (double n : count)
    if (n > 0) h -= n / double(train_bytes.size()) * std::log(n / double(train_bytes.size()));
  EXPECT_EQ(unigram_entropy(c.train), h);
  EXPECT_NEAR(h, 3.07, 0.01);
}

TEST(Training, SameSeedSameLossesBitForBit) {
  const fs::path dir = temp_dir("det");
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; run++) {
    RunConfig cfg = small_run(dir / std::to_string(run), Placement::Pre, 15);
    cfg.model.dropout = 0.1;
    cfg.train.grad_accum = 2;
    train(cfg, quiet_options());
    std::vector<double> losses;
    for (const auto& line : read_metrics(dir / std::to_string(run) / "metrics.jsonl"))
      if (line["type"] == "train") losses.push_back(line["loss"].get<double>());
    ASSERT_EQ(losses.size(), 15u);
    runs.push_back(losses);
  }
  for (size_t i = 0; i < runs[0].size(); i++)
    EXPECT_EQ(std::memcmp(&runs[0][i], &runs[1][i], sizeof(double)), 0) << "step " << i + 1;
  fs::remove_all(dir);
}

TEST(Training, DivergenceStopsNamingTheStepAndKeepsMetrics) {
  const fs::path dir = temp_dir("div");
  RunConfig cfg = small_run(dir, Placement::Post, 50);
  cfg.train.lr = 1e30;  // the first update overflows the next forward pass
  cfg.train.schedule = Schedule::Constant;
  cfg.train.grad_clip = 0;
  const TrainResult r = train(cfg, quiet_options());
  EXPECT_TRUE(r.diverged);
  EXPECT_GE(r.diverged_step, 2);
  EXPECT_LT(r.diverged_step, 50);
  const auto lines = read_metrics(dir / "metrics.jsonl");
  bool found = false;
  for (const auto& l : lines)
    if (l["type"] == "diverged") {
      found = true;
      EXPECT_EQ(l["step"].get<long>(), r.diverged_step);
      EXPECT_FALSE(l["tensor"].get<std::string>().empty());
    }
  EXPECT_TRUE(found);
  EXPECT_TRUE(fs::exists(dir / "checkpoint.safetensors"));
  // the run directory is not silently reused
  EXPECT_THROW(train(cfg, quiet_options()), Error);
  fs::remove_all(dir);
}

class Convergence : public testing::TestWithParam<Placement> {};

TEST_P(Convergence, ValidationLossEndsWellBelowUnigramEntropy) {
  const fs::path dir = temp_dir(std::string("conv_") + to_string(GetParam()));
  RunConfig cfg = small_run(dir, GetParam(), 400);
  const TrainResult r = train(cfg, quiet_options());
  ASSERT_FALSE(r.diverged);
  // a model that only learned byte frequencies would sit at the unigram entropy (~3.07 nats);
  // "well below" = at least 0.5 nats under it
  EXPECT_LT(r.last_val_loss, r.unigram_entropy - 0.5)
      << "val " << r.last_val_loss << " vs unigram entropy " << r.unigram_entropy;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(PreAndPost, Convergence, testing::Values(Placement::Pre, Placement::Post),
                         [](const auto& info) { return std::string(to_string(info.param)); });

namespace {
// A term of the training loss (label smoothing, z-loss) reaches the loss in training mode only: the
// training forward equals the naive loss of its own logits with the term, evaluation the plain one,
// and the gradient is the training loss's (a central difference on a weight of the MLP and of the
// embedding). set(model) switches the term on; row_loss(z, label, V, lse) is one labelled row's loss
// with it, row_loss0 without; min_gap: how far the two losses must be apart at initialization.
template <class Set, class Row, class Row0>
void check_training_only_term(Set set, Row row_loss, Row0 row_loss0, double min_gap) {
  ModelConfig mc;
  mc.d_model = 16;
  mc.n_heads = 2;
  mc.n_layers = 1;
  mc.seq_len = 8;
  Model<double> model(mc);
  const int B = 2, T = 8, V = mc.vocab_size();
  std::vector<int32_t> ids(B * T), labels(B * T);
  for (int i = 0; i < B * T; i++) ids[size_t(i)] = int32_t((7 * i + 3) % V), labels[size_t(i)] = int32_t((5 * i + 1) % V);
  set(model);
  auto naive = [&](auto row) {
    const double* z = model.logits();
    double sum = 0;
    for (int n = 0; n < B * T; n++) {
      const double* zn = z + size_t(n) * V;
      double mx = -1e300, s = 0;
      for (int v = 0; v < V; v++) mx = std::max(mx, zn[v]);
      for (int v = 0; v < V; v++) s += std::exp(zn[v] - mx);
      sum += row(zn, labels[size_t(n)], V, mx + std::log(s));
    }
    return sum / (B * T);
  };
  model.set_training(false);
  const double eval = model.forward(ids.data(), labels.data(), B, T);
  EXPECT_NEAR(eval, naive(row_loss0), 1e-12);
  model.set_training(true);
  const double trained = model.forward(ids.data(), labels.data(), B, T);
  EXPECT_NEAR(trained, naive(row_loss), 1e-12);
  EXPECT_GT(std::abs(trained - eval), min_gap);
  model.zero_grad();
  model.backward();
  for (const char* name : {"h.0.mlp.fc.weight", "wte.weight"}) {
    const size_t k = model.table().find(name)->offset + 5;
    const double g = model.grads()[k], h = 1e-6, w = model.params()[k];
    model.params()[k] = w + h;
    const double up = model.forward(ids.data(), labels.data(), B, T);
    model.params()[k] = w - h;
    const double down = model.forward(ids.data(), labels.data(), B, T);
    model.params()[k] = w;
    EXPECT_NEAR(g, (up - down) / (2 * h), 1e-7 * std::max(1.0, std::abs(g))) << name;
  }
}

double plain_row(const double* z, int32_t label, int, double lse) { return lse - z[label]; }
}  // namespace

// train.z_loss: the plain loss plus zeta (log Z)^2 per labelled row in training; the key is read.
TEST(Training, ZLossIsTheTrainingLossOnly) {
  const double zeta = 0.3;
  check_training_only_term([&](Model<double>& m) { m.set_z_loss(zeta); },
                           [&](const double* z, int32_t label, int, double lse) { return lse - z[label] + zeta * lse * lse; },
                           plain_row, 1e-2);  // log Z ~ log 256 at init: the term is ~0.3 * 30
  RunConfig rc = run_config_from_json(nlohmann::json{{"train", {{"z_loss", 1e-4}}}}, "test");
  EXPECT_EQ(rc.train.z_loss, 1e-4);
  EXPECT_THROW(run_config_from_json(nlohmann::json{{"train", {{"z_loss", -1.0}}}}, "test"), Error);
}

// train.label_smoothing: the target (1 - eps) one-hot + eps / V in training.
TEST(Training, LabelSmoothingIsTheTrainingLossOnly) {
  const double eps = 0.2;
  check_training_only_term([&](Model<double>& m) { m.set_label_smoothing(eps); },
                           [&](const double* z, int32_t label, int V, double lse) {
                             double sum = 0;
                             for (int v = 0; v < V; v++) sum += ((v == label ? 1 - eps : 0.0) + eps / V) * (lse - z[v]);
                             return sum;
                           },
                           plain_row, 1e-4);
}

namespace {
// A run whose validation loss cannot improve (lr 1e-9), evaluated every 5 steps on one batch, that
// stops after 2 evaluations without a 0.5% gain.
RunConfig flat_run(const fs::path& dir) {
  RunConfig cfg = small_run(dir, Placement::Pre, 400);
  cfg.train.lr = 1e-9;
  cfg.train.min_lr = 0;
  cfg.train.eval_every = 5;
  cfg.train.eval_batches = 1;
  cfg.train.stop_patience = 2;
  return cfg;
}
}  // namespace

// train.stop_patience: a run whose validation loss stops improving stops after that many
// evaluations without a 0.5% gain, writes a plateau record and a checkpoint there; a run stopped
// before it and resumed stops at the same step with the same records; resuming the stopped run
// trains nothing more.
TEST(Training, StopsAtAValidationPlateauAndAResumeKeepsTheCount) {
  const fs::path dir = temp_dir("plateau");
  auto run_cfg = [&](const std::string& name) {
    RunConfig cfg = flat_run(dir / name);
    cfg.train.checkpoint_every = 5;
    return cfg;
  };
  auto val_records = [&](const std::string& name) {
    std::vector<std::string> out;
    for (const auto& l : read_metrics(dir / name / "metrics.jsonl"))
      if (l["type"] == "val" || l["type"] == "plateau") out.push_back(l.dump());
    return out;
  };
  const TrainResult whole = train(run_cfg("whole"), quiet_options());
  EXPECT_TRUE(whole.stopped_at_plateau);
  EXPECT_EQ(whole.steps_done, 15);  // evaluations at 5 (the reference), 10 and 15 (no gain twice)
  const auto records = val_records("whole");
  ASSERT_EQ(records.size(), 4u);
  const auto plateau = nlohmann::json::parse(records.back());
  EXPECT_EQ(plateau["type"], "plateau");
  double lowest = 1e300;
  long lowest_step = 0;
  for (size_t i = 0; i + 1 < records.size(); i++) {
    const auto v = nlohmann::json::parse(records[i]);
    if (v["loss"].get<double>() < lowest) lowest = v["loss"].get<double>(), lowest_step = v["step"].get<long>();
  }
  EXPECT_EQ(plateau["lowest_val_loss"].get<double>(), lowest);
  EXPECT_EQ(plateau["lowest_step"].get<long>(), lowest_step);
  EXPECT_TRUE(fs::exists(dir / "whole" / "checkpoints" / "step-000000015.safetensors"));

  std::atomic<bool> stop{false};
  TrainOptions first = quiet_options();
  first.stop = &stop;
  first.on_step = [&](const StepInfo& s) { stop = s.step == 12; };
  EXPECT_TRUE(train(run_cfg("parts"), first).interrupted);
  TrainOptions again = quiet_options();
  again.resume = true;
  const TrainResult resumed = train(run_cfg("parts"), again);
  EXPECT_TRUE(resumed.stopped_at_plateau);
  EXPECT_EQ(resumed.steps_done, 15);
  EXPECT_EQ(val_records("parts"), records);

  const TrainResult after = train(run_cfg("whole"), again);
  EXPECT_TRUE(after.stopped_at_plateau);
  EXPECT_EQ(after.steps_done, 15);
  fs::remove_all(dir);
}

// train.stop_after_warmup: the evaluations within the warm-up set the reference but are not counted,
// so the same flat run with a 20-step warm-up stops two evaluations after step 20 instead of at 15;
// without the key it still stops at 15. The key without a plateau rule is refused.
TEST(Training, StopAfterWarmupKeepsTheWarmupOutOfAPlateau) {
  const fs::path dir = temp_dir("plateau-warmup");
  auto run_cfg = [&](const std::string& name, bool after_warmup) {
    RunConfig cfg = flat_run(dir / name);
    cfg.train.warmup_steps = 20;
    cfg.train.stop_after_warmup = after_warmup;
    cfg.train.checkpoint_every = 0;
    return cfg;
  };
  const TrainResult counted = train(run_cfg("counted", false), quiet_options());
  EXPECT_TRUE(counted.stopped_at_plateau);
  EXPECT_EQ(counted.steps_done, 15);
  const TrainResult after = train(run_cfg("after", true), quiet_options());
  EXPECT_TRUE(after.stopped_at_plateau);
  EXPECT_EQ(after.steps_done, 30);  // 25 and 30: the first two evaluations past the warm-up
  const nlohmann::json alone = {{"train", {{"stop_after_warmup", true}}}};
  expect_error_containing([&] { run_config_from_json(alone, "test"); },
                          "train.stop_after_warmup = true needs train.stop_patience > 0");
  fs::remove_all(dir);
}
