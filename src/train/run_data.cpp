// run_data.cpp: opening a training run's data and taking its batches (train/run_data.h).
#include "train/run_data.h"

#include <algorithm>
#include <fmt/format.h>
#include <limits>

#include "model/decode.h"
#include "util/error.h"

namespace normlab {

RunData open_run_data(const RunConfig& cfg, const ModelConfig& model_cfg, bool quiet) {
  const TrainConfig& tc = cfg.train;
  RunData d;
  d.arch = model_cfg.arch;
  d.unigram_entropy = std::numeric_limits<double>::quiet_NaN();
  const int T = d.T = tc.seq_len > 0 ? tc.seq_len : model_cfg.seq_len;
  if (T > model_cfg.seq_len)
    throw Error(fmt::format("train.seq_len = {} exceeds the model's seq_len {}", T, model_cfg.seq_len));
  if (!cfg.data.parallel.empty() && !model_cfg.encdec())
    throw Error(fmt::format("data.parallel is a translation corpus: it needs model.arch = \"encdec\" (this model is {})",
                            to_string(model_cfg.arch)));
  if (!cfg.data.tokens.empty() && !is_token_stream(cfg.data.tokens)) {
    const Batch all = load_token_file(cfg.data.tokens);
    check_batch(all, model_cfg, cfg.data.tokens);
    d.rows = split_token_rows(all, cfg.data.tokens, cfg.data.val_fraction, cfg.data.test_fraction);
    d.input = d.rows->description();
  } else if (!cfg.data.tokens.empty()) {
    if (model_cfg.encdec())
      throw Error(fmt::format("data.tokens '{}' is a token stream; an encoder-decoder trains on source-target rows "
                              "(a seq2seq token file) or data.parallel",
                              cfg.data.tokens));
    d.corpus = load_token_stream(cfg.data.tokens, cfg.data.val_fraction, T, cfg.data.test_fraction);
  } else if (model_cfg.encdec()) {
    if (cfg.data.parallel.empty())
      throw Error("an encoder-decoder (model.arch = \"encdec\") trains on a parallel corpus: set data.parallel "
                  "(a directory of {train,valid}.{src,tgt}, or es-en / web-kjv) or data.tokens");
    if (model_cfg.vocab_size() < kEosToken + 1 || model_cfg.src_vocab_size() < kEosToken + 1)
      throw Error(fmt::format("data.parallel is byte-level with BOS {} and EOS {}: model.vocab must be >= {}",
                              kBosToken, kEosToken, kEosToken + 1));
    d.parallel = load_translation(cfg.data.parallel, T);
    d.input = fmt::format("parallel corpus '{}'", d.parallel->dir);
    if (!quiet)
      fmt::print("parallel corpus '{}': {} training and {} validation pairs ({} and {} longer than seq_len {} "
                 "left out)\n",
                 d.parallel->dir, d.parallel->train.size(), d.parallel->valid.size(), d.parallel->dropped_train,
                 d.parallel->dropped_valid, T);
  } else {
    d.corpus = load_corpus(cfg.data.corpus, cfg.data.val_fraction, T, cfg.data.tokenizer,
                           size_t(cfg.data.max_bytes), cfg.data.test_fraction);
  }
  if (d.corpus) {
    const Corpus& c = *d.corpus;
    check_model_fits_corpus(model_cfg, c);
    d.masking = model_cfg.arch == Arch::Encoder ? c.masking() : Masking{};
    d.unigram_entropy = unigram_entropy(c.train);
    d.unigram_unit = c.unit();
    d.input = fmt::format("{}: {} training{}{} validation {}s{}", c.description(), c.train.size(),
                          c.test.empty() ? " and " : ", ", c.val.size(), c.unit(),
                          c.test.empty() ? "" : fmt::format(" and {} test {}s", c.test.size(), c.unit()));
  }
  if (cfg.data.bos >= 0) {
    if (!d.corpus || model_cfg.arch != Arch::Gpt)
      throw Error(fmt::format("data.bos starts the windows a GPT reads from a corpus or a token stream; this run "
                              "reads {}", d.corpus ? "them into an encoder (masked tokens, no first token)"
                                                   : d.rows ? "the rows of a token file, as they are" : "no corpus"));
    if (cfg.data.bos >= model_cfg.vocab_size())
      throw Error(fmt::format("data.bos = {} is outside the model's vocabulary of {} ids (a byte corpus's own token "
                              "beside its 256 bytes: data.bos = 256 with model.vocab = 257)",
                              cfg.data.bos, model_cfg.vocab_size()));
    d.bos = cfg.data.bos;
    d.input += fmt::format("; every window starts with id {} (data.bos)", d.bos);
  }
  d.B = d.rows ? std::min(tc.batch_size, d.rows->train.B) : tc.batch_size;
  d.Tb = d.rows ? d.rows->train.T : T;
  return d;
}

Batch RunData::train_batch(Rng& rng, long& next_row, double& tokens) const {
  if (parallel) {
    Batch b = sample_translation_batch(parallel->train, B, rng);
    for (uint8_t m : b.src_mask) tokens += m;
    for (uint8_t m : b.mask) tokens += m;
    return b;
  }
  if (rows) {
    Batch b = batch_rows(rows->train, next_row, B);
    next_row = (next_row + B) % rows->train.B;
    return b;
  }
  return windows(corpus->train, B, rng);
}

Batch RunData::windows(const std::vector<int32_t>& ids, int n, Rng& rng) const {
  Batch b = sample_batch(ids, arch, n, T, rng, masking);
  return bos >= 0 ? with_first_token(std::move(b), bos) : b;
}

double RunData::validation_loss(Model<float>& model, const TrainConfig& tc) const {
  if (parallel) {  // the first eval_batches x batch_size validation pairs, in order
    model.set_training(false);
    double sum = 0;
    int64_t count = 0;
    const size_t n = std::min(parallel->valid.size(), size_t(tc.eval_batches) * size_t(tc.batch_size));
    for (size_t first = 0; first < n; first += size_t(tc.batch_size)) {
      const Batch b = translation_batch(parallel->valid, first, int(std::min(size_t(tc.batch_size), n - first)));
      const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T, nullptr, b.mask_or_null(),
                                        b.source());
      sum += loss * double(model.label_count());
      count += model.label_count();
    }
    return sum / double(count);
  }
  if (rows) {  // the validation rows, in order, eval_batches x batch_size at most
    if (rows->val.B == 0) return std::numeric_limits<double>::quiet_NaN();
    model.set_training(false);
    double sum = 0;
    int64_t count = 0;
    const long n = std::min<long>(rows->val.B, long(tc.eval_batches) * tc.batch_size);
    for (long first = 0; first < n; first += tc.batch_size) {
      const Batch b = batch_rows(rows->val, first, int(std::min<long>(tc.batch_size, n - first)));
      const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T, b.types_or_null(),
                                        b.mask_or_null(), b.source());
      sum += loss * double(model.label_count());
      count += model.label_count();
    }
    return count > 0 ? sum / double(count) : std::numeric_limits<double>::quiet_NaN();
  }
  if (!corpus) return std::numeric_limits<double>::quiet_NaN();
  model.set_training(false);
  Rng eval_rng(uint64_t(tc.seed), 2);  // the same validation batches every time
  double sum = 0;
  int64_t count = 0;
  for (int k = 0; k < tc.eval_batches; k++) {
    const Batch b = windows(corpus->val, tc.batch_size, eval_rng);
    const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T);
    sum += loss * double(model.label_count());
    count += model.label_count();
  }
  return sum / double(count);
}

std::pair<double, int64_t> RunData::test_loss(Model<float>& model, const TrainConfig& tc) const {
  model.set_training(false);
  double sum = 0;
  int64_t count = 0;
  const auto add = [&](const Batch& b) {
    const double loss = model.forward(b.ids.data(), b.labels.data(), b.B, b.T, b.types_or_null(),
                                      b.mask_or_null(), b.source());
    sum += loss * double(model.label_count());
    count += model.label_count();
  };
  if (rows) {
    for (long first = 0; first < rows->test.B; first += tc.batch_size)
      add(batch_rows(rows->test, first, int(std::min<long>(tc.batch_size, rows->test.B - first))));
  } else if (corpus) {
    Rng mask_rng(uint64_t(tc.seed), 5);  // an encoder's masked positions: the same for every run of a seed
    const size_t n_windows = window_count(corpus->test, arch, T);
    for (size_t first = 0; first < n_windows; first += size_t(tc.batch_size)) {
      Batch b = window_batch(corpus->test, arch, first, int(std::min(size_t(tc.batch_size), n_windows - first)),
                             T, mask_rng, masking);
      add(bos >= 0 ? with_first_token(std::move(b), bos) : b);
    }
  }
  return {count > 0 ? sum / double(count) : std::numeric_limits<double>::quiet_NaN(), count};
}

Batch RunData::profile_batch(uint64_t seed) const {
  Rng profile_rng(seed, 3);
  return parallel ? translation_batch(parallel->train, 0, B)
         : rows   ? batch_rows(rows->train, 0, B)
                  : windows(corpus->train, B, profile_rng);
}

Batch RunData::probe_batch(uint64_t seed) const {
  Rng probe_rng(seed, 4);
  if (parallel) {  // the first validation pairs (training pairs if there are none)
    const std::vector<TokenPair>& pairs = parallel->valid.empty() ? parallel->train : parallel->valid;
    return translation_batch(pairs, 0, int(std::min(size_t(B), pairs.size())));
  }
  // rows: the first validation rows (training rows if there are none); a corpus: a validation window
  return rows ? batch_rows(rows->val.B > 0 ? rows->val : rows->train, 0, B)
              : windows(corpus->val, B, probe_rng);
}

}  // namespace normlab
