// run_data.h: what a training run reads, opened once from its config: a corpus (text, or a token
// stream in data.tokens), the rows of a token file, or a parallel corpus (an encoder-decoder); and
// the batches the loop takes from it: a training batch per micro-batch, the validation loss, the test
// split read once at the end, and the fixed batches of Admin's profiling and the model-update probe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "model/model.h"
#include "train/data.h"
#include "train/run_config.h"
#include "train/translation.h"
#include "util/rng.h"

namespace normlab {

struct RunData {
  std::optional<TokenRows> rows;
  std::optional<Corpus> corpus;
  std::optional<TranslationData> parallel;
  Masking masking;           // an encoder's masked-LM token draws
  Arch arch = Arch::Gpt;
  int T = 0;                 // the training window (train.seq_len, or the model's)
  int B = 0;                 // rows per batch (a token file with fewer training rows: all of them)
  int Tb = 0;                // a batch's width (a token file's rows, or T)
  std::string input;         // what the run trains on, in words (printed and in the summary)
  double unigram_entropy;    // of the training ids (NaN with a token file or a parallel corpus)
  std::string unigram_unit = "byte";
  int32_t bos = -1;          // data.bos: >= 0 starts every window of the corpus (with_first_token)

  bool has_test() const { return (rows && rows->test.B > 0) || (corpus && !corpus->test.empty()); }
  // The next training batch: drawn with rng (a corpus, parallel pairs) or the next rows of a token
  // file from next_row (advanced). tokens: a parallel batch's real (unpadded) tokens are added to it.
  Batch train_batch(Rng& rng, long& next_row, double& tokens) const;
  // The validation loss per labelled position: the first eval_batches x batch_size validation pairs
  // or rows in order, or eval_batches fixed windows of the corpus (the same every time); NaN without.
  double validation_loss(Model<float>& model, const TrainConfig& tc) const;
  // The test split, read once by the final parameters: every test row, or every window of the
  // corpus's test ids from its first to its last; (loss per labelled position, labelled positions).
  std::pair<double, int64_t> test_loss(Model<float>& model, const TrainConfig& tc) const;
  // Admin's profiling batch (one of its own: the training order is unchanged) and DeepNet's model-update
  // probe (the first validation pairs or rows, else training ones; a corpus: a validation window).
  Batch profile_batch(uint64_t seed) const;
  Batch probe_batch(uint64_t seed) const;

 private:
  // B random windows of a split of the corpus (sample_batch), each starting with bos if there is one
  Batch windows(const std::vector<int32_t>& ids, int n, Rng& rng) const;
};

// Reads the data of cfg for a model of model_cfg (refusing what it cannot train on, with the reason).
RunData open_run_data(const RunConfig& cfg, const ModelConfig& model_cfg, bool quiet);

}  // namespace normlab
