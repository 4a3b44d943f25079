// test_data_split.cpp: the test split (data.test_fraction): how a corpus, a token stream and a file
// of rows are cut into training, validation and test; the windows a test split is read in; the
// test loss a run writes, against a naive recomputation from its saved parameters (with and without
// a first token, data.bos); and the refusals (fractions out of range, a split too short, a parallel
// corpus, a first token outside the vocabulary or without a GPT's windows).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "model/model.h"
#include "ops/common.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("normlab_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void expect_error_contains(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no Error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A text of `n` bytes that is not periodic (so that a misplaced window shows)
fs::path write_corpus(const fs::path& dir, size_t n) {
  const fs::path path = dir / "corpus.txt";
  std::ofstream out(path, std::ios::binary);
  uint64_t x = 12345;
  for (size_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out.put(i % 61 == 60 ? '\n' : char('a' + (x >> 59)));
  }
  return path;
}

std::vector<int32_t> bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<int32_t> ids;
  for (char c; in.get(c);) ids.push_back(int32_t(uint8_t(c)));
  return ids;
}

}  // namespace

TEST(TestSplit, ACorpusIsCutIntoTrainingValidationAndTestInThatOrder) {
  const fs::path dir = temp_dir("split_corpus");
  const fs::path path = write_corpus(dir, 10000);
  const std::vector<int32_t> all = bytes_of(path);
  const Corpus c = load_corpus(path.string(), 0.1, 32, "", 0, 0.05);
  ASSERT_EQ(c.test.size(), 500u);
  ASSERT_EQ(c.val.size(), 1000u);
  EXPECT_EQ(c.train, std::vector<int32_t>(all.begin(), all.begin() + 8500));
  EXPECT_EQ(c.val, std::vector<int32_t>(all.begin() + 8500, all.begin() + 9500));
  EXPECT_EQ(c.test, std::vector<int32_t>(all.begin() + 9500, all.end()));
  // without a test split nothing moves: validation is the last val_fraction, as before
  const Corpus plain = load_corpus(path.string(), 0.1, 32);
  EXPECT_TRUE(plain.test.empty());
  EXPECT_EQ(plain.val, std::vector<int32_t>(all.begin() + 9000, all.end()));
  EXPECT_EQ(plain.train, std::vector<int32_t>(all.begin(), all.begin() + 9000));
  fs::remove_all(dir);
}

TEST(TestSplit, WindowsCoverTheSplitFromItsFirstIdOnce) {
  std::vector<int32_t> ids(100);
  for (int i = 0; i < 100; i++) ids[size_t(i)] = i;
  // a GPT window needs T + 1 ids: starts 0, 16, ..., 80 (80 + 17 = 97 <= 100); 96 + 17 > 100
  EXPECT_EQ(window_count(ids, Arch::Gpt, 16), 6u);
  EXPECT_EQ(window_count(ids, Arch::Encoder, 16), 6u);  // 96 + 16 > 100
  EXPECT_EQ(window_count(ids, Arch::Encoder, 20), 5u);  // 80 + 20 = 100
  EXPECT_EQ(window_count(std::vector<int32_t>(16), Arch::Gpt, 16), 0u);
  Rng rng(1);
  const Batch b = window_batch(ids, Arch::Gpt, 2, 4, 16, rng);
  ASSERT_EQ(b.B, 4);
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < 16; t++) {
      EXPECT_EQ(b.ids[size_t(r * 16 + t)], (2 + r) * 16 + t);
      EXPECT_EQ(b.labels[size_t(r * 16 + t)], (2 + r) * 16 + t + 1);
    }
  expect_error_contains([&] { window_batch(ids, Arch::Gpt, 4, 3, 16, rng); }, "it has 6 windows of 16");
  // an encoder's windows: the ids where unmasked, a label at the chosen positions only
  const Batch e = window_batch(ids, Arch::Encoder, 0, 5, 20, rng);
  int labelled = 0;
  for (size_t i = 0; i < e.ids.size(); i++) {
    if (e.labels[i] != ops::kIgnoreLabel) {
      labelled++;
      EXPECT_EQ(e.labels[i], int32_t(i));
    } else {
      EXPECT_EQ(e.ids[i], int32_t(i));
    }
  }
  EXPECT_EQ(labelled, 5 * 3);  // round(0.15 x 20) per window
}

TEST(TestSplit, RowsOfATokenFileSplitAtTheEnd) {
  Batch all;
  all.B = 20, all.T = 4;
  for (int i = 0; i < 80; i++) all.ids.push_back(i), all.labels.push_back(i + 1);
  const TokenRows r = split_token_rows(all, "rows.safetensors", 0.1, 0.25);
  EXPECT_EQ(r.train.B, 13);
  EXPECT_EQ(r.val.B, 2);
  EXPECT_EQ(r.test.B, 5);
  EXPECT_EQ(r.val.ids[0], 13 * 4);
  EXPECT_EQ(r.test.ids[0], 15 * 4);
  EXPECT_EQ(r.test.ids.back(), 79);
  EXPECT_NE(r.description().find("(13 training, 2 validation, 5 test)"), std::string::npos) << r.description();
  expect_error_contains([&] { split_token_rows(all, "rows.safetensors", 0.1, 0.01); }, "is no row");
}

TEST(TestSplit, FractionsOutOfRangeAndShortSplitsAreRefused) {
  const fs::path dir = temp_dir("split_refuse");
  const fs::path path = write_corpus(dir, 1000);
  expect_error_contains([&] { load_corpus(path.string(), 0.5, 8, "", 0, 0.5); }, "data.test_fraction = 0.5");
  expect_error_contains([&] { load_corpus(path.string(), 0.1, 8, "", 0, -0.1); }, "data.test_fraction = -0.1");
  expect_error_contains([&] { load_corpus(path.string(), 0.1, 64, "", 0, 0.01); }, "/test split");
  const auto config = [&](double test, const std::string& parallel) {
    nlohmann::json doc = {{"data", {{"test_fraction", test}}}};
    if (!parallel.empty()) doc["data"]["parallel"] = parallel, doc["model"] = {{"arch", "encdec"}};
    return run_config_from_json(doc, "test");
  };
  expect_error_contains([&] { config(0.95, ""); }, "val_fraction + test_fraction < 1");
  expect_error_contains([&] { config(0.1, "es-en"); }, "a parallel corpus (data.parallel) has no test split");
  EXPECT_EQ(run_config_to_json(config(0.05, ""))["data"]["test_fraction"], 0.05);
  fs::remove_all(dir);
}

// The test loss a run writes is the mean loss of its final parameters over every window of the test
// split, recomputed here one window at a time from the checkpoint the run saved.
TEST(TestSplit, ARunScoresItsFinalParametersOnTheWholeTestSplit) {
  const fs::path dir = temp_dir("split_run");
  const fs::path path = write_corpus(dir, 20000);
  nlohmann::json doc = {
      {"model", {{"d_model", 32}, {"n_heads", 2}, {"n_layers", 2}, {"seq_len", 32}, {"dropout", 0.1}}},
      {"train", {{"steps", 30}, {"batch_size", 8}, {"lr", 3e-3}, {"warmup_steps", 5}, {"eval_every", 10},
                 {"eval_batches", 2}, {"out_dir", (dir / "run").string()}, {"checkpoint_every", 0}}},
      {"data", {{"corpus", path.string()}, {"val_fraction", 0.1}, {"test_fraction", 0.05}}}};
  TrainOptions quiet;
  quiet.quiet = true;
  const TrainResult r = train(run_config_from_json(doc, "test"), quiet);
  ASSERT_FALSE(r.diverged);
  const int T = 32;
  const size_t windows = (1000 - (T + 1)) / T + 1;  // 1,000 test bytes
  EXPECT_EQ(r.test_tokens, int64_t(windows * T));

  const auto model = load_model((dir / "run" / "checkpoint.safetensors").string());
  model->set_training(false);
  const Corpus c = load_corpus(path.string(), 0.1, T, "", 0, 0.05);
  double sum = 0;
  for (size_t w = 0; w < windows; w++) {
    const std::vector<int32_t> ids(c.test.begin() + ptrdiff_t(w * T), c.test.begin() + ptrdiff_t(w * T + T));
    const std::vector<int32_t> labels(c.test.begin() + ptrdiff_t(w * T + 1), c.test.begin() + ptrdiff_t(w * T + T + 1));
    sum += model->forward(ids.data(), labels.data(), 1, T);
  }
  EXPECT_NEAR(r.test_loss, sum / double(windows), 1e-5);
  // the record and the summary carry it; it is not the validation loss
  bool record = false;
  std::ifstream in(dir / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "test") {
      record = true;
      EXPECT_EQ(j["step"], 30);
      EXPECT_NEAR(j["loss"].get<double>(), r.test_loss, 1e-12);
    }
    if (j["type"] == "summary") { EXPECT_NEAR(j["test_loss"].get<double>(), r.test_loss, 1e-12); }
  }
  EXPECT_TRUE(record);
  EXPECT_NE(r.test_loss, r.last_val_loss);
  fs::remove_all(dir);
}

TEST(TestSplit, AFirstTokenStartsEveryWindowAndEveryIdIsStillPredictedOnce) {
  Batch b;
  b.B = 2, b.T = 4;
  b.ids = {10, 11, 12, 13, 20, 21, 22, 23};
  b.labels = {11, 12, 13, 14, 21, 22, 23, 24};
  const Batch f = with_first_token(b, 300);
  EXPECT_EQ(f.ids, (std::vector<int32_t>{300, 10, 11, 12, 300, 20, 21, 22}));
  EXPECT_EQ(f.labels, (std::vector<int32_t>{10, 11, 12, 13, 20, 21, 22, 23}));
}

TEST(TestSplit, AWindowOfIdsIsWithFirstTokensRowAndStaysInsideItsIds) {
  const std::vector<int32_t> ids = {10, 11, 12, 13, 14, 15};
  EXPECT_EQ(window_ids(ids, 1, 4), (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(window_ids(ids, 1, 4, 300), (std::vector<int32_t>{300, 11, 12, 13}));
  Batch b;
  b.B = 1, b.T = 4;
  b.ids = window_ids(ids, 1, 4);
  b.labels = {12, 13, 14, 15};
  EXPECT_EQ(with_first_token(b, 300).ids, window_ids(ids, 1, 4, 300));
  EXPECT_EQ(window_ids(ids, 2, 4), (std::vector<int32_t>{12, 13, 14, 15}));
  EXPECT_EQ(window_ids(ids, 3, 4, 300), (std::vector<int32_t>{300, 13, 14, 15}));  // (T - 1 of the ids)
  expect_error_contains([&] { window_ids(ids, 3, 4); }, "past their end");
  expect_error_contains([&] { window_ids(ids, 7, 1, 300); }, "past their end");
}

TEST(TestSplit, ARunWithAFirstTokenScoresTheTestSplitWithIt) {
  const fs::path dir = temp_dir("split_bos");
  const fs::path path = write_corpus(dir, 20000);
  nlohmann::json doc = {
      {"model", {{"d_model", 32}, {"n_heads", 2}, {"n_layers", 2}, {"seq_len", 32}, {"vocab", 257}}},
      {"train", {{"steps", 20}, {"batch_size", 8}, {"lr", 3e-3}, {"warmup_steps", 5}, {"eval_every", 10},
                 {"eval_batches", 2}, {"out_dir", (dir / "run").string()}, {"checkpoint_every", 0}}},
      {"data", {{"corpus", path.string()}, {"val_fraction", 0.1}, {"test_fraction", 0.05}, {"bos", 256}}}};
  TrainOptions quiet;
  quiet.quiet = true;
  const TrainResult r = train(run_config_from_json(doc, "test"), quiet);
  ASSERT_FALSE(r.diverged);
  const int T = 32;
  const size_t windows = (1000 - (T + 1)) / T + 1;  // 1,000 test bytes: the windows as without a first token
  EXPECT_EQ(r.test_tokens, int64_t(windows * T));
  const auto model = load_model((dir / "run" / "checkpoint.safetensors").string());
  model->set_training(false);
  const Corpus c = load_corpus(path.string(), 0.1, T, "", 0, 0.05);
  double sum = 0;
  for (size_t w = 0; w < windows; w++) {  // 256, then bytes wT .. wT + T - 2; labels bytes wT .. wT + T - 1
    std::vector<int32_t> ids = {256};
    ids.insert(ids.end(), c.test.begin() + ptrdiff_t(w * T), c.test.begin() + ptrdiff_t(w * T + T - 1));
    const std::vector<int32_t> labels(c.test.begin() + ptrdiff_t(w * T), c.test.begin() + ptrdiff_t(w * T + T));
    sum += model->forward(ids.data(), labels.data(), 1, T);
  }
  EXPECT_NEAR(r.test_loss, sum / double(windows), 1e-5);

  // refused: outside the vocabulary, out of range, an encoder's masked windows, a parallel corpus
  doc["train"]["out_dir"] = (dir / "refused").string();
  doc["model"]["vocab"] = 256;
  expect_error_contains([&] { train(run_config_from_json(doc, "test"), quiet); }, "outside the model's vocabulary of 256");
  doc["model"]["vocab"] = 257;
  doc["model"]["arch"] = "encoder";
  expect_error_contains([&] { train(run_config_from_json(doc, "test"), quiet); }, "into an encoder");
  doc["model"]["arch"] = "gpt";
  doc["data"]["bos"] = -2;
  expect_error_contains([&] { run_config_from_json(doc, "test"); }, "data.bos = -2 must be -1 (none)");
  doc["data"]["bos"] = 3;
  doc["data"]["parallel"] = "es-en";
  doc["data"]["test_fraction"] = 0;
  expect_error_contains([&] { run_config_from_json(doc, "test"); }, "data.bos starts a GPT's windows");
  EXPECT_FALSE(fs::exists(dir / "refused"));
  fs::remove_all(dir);
}
