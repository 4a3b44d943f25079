// data.cpp: corpus and token-stream loading, batch sampling, token files of rows, batch checks.
#include "train/data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iterator>

#include "ops/common.h"
#include "io/bible.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "util/error.h"
#include "util/files.h"
#include "util/hints.h"
#include "util/resources.h"

namespace normlab {

std::string builtin_corpus_path() { return resource_path("data/kjv.txt"); }

namespace {

// The named corpora: name -> (Bible pair, file of its built directory, what it is)
struct NamedCorpus {
  const char *name, *pair, *file, *what;
};
const NamedCorpus kNamed[] = {
    {"bible:es", "es-en", "train.src", "the Spanish Reina-Valera 1909"},
    {"bible:web", "es-en", "train.tgt", "the World English Bible"},
};

std::vector<uint8_t> read_corpus_bytes(const std::string& path) {
  const std::string text = read_file(path, "corpus");
  std::vector<uint8_t> bytes(text.begin(), text.end());
  if (bytes.empty()) throw Error(fmt::format("corpus '{}' is empty", path));
  return bytes;
}

// The first max_bytes bytes, cut back to the end of their last whole line
void keep_first_lines(std::vector<uint8_t>& bytes, size_t max_bytes, const std::string& path) {
  if (max_bytes == 0 || bytes.size() <= max_bytes) return;
  size_t end = max_bytes;
  while (end > 0 && bytes[end - 1] != '\n') end--;
  if (end == 0)
    throw Error(fmt::format("corpus '{}': data.max_bytes = {} holds no whole line (its first line is longer)", path,
                            max_bytes));
  bytes.resize(end);
}

}  // namespace

const std::vector<std::string>& corpus_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"builtin"};
    for (const NamedCorpus& c : kNamed) n.push_back(c.name);
    return n;
  }();
  return names;
}

std::string corpus_path(const std::string& corpus) {
  if (corpus == "builtin") return builtin_corpus_path();
  for (const NamedCorpus& c : kNamed) {
    if (corpus != c.name) continue;
    const std::string path = bible::default_corpus_root() + "/" + c.pair + "/" + c.file;
    if (!std::filesystem::is_regular_file(path))
      throw Error(fmt::format("data.corpus = \"{}\" ({}) is read from the built Bible corpus, which is not in {}: "
                              "`normlab corpus bible` builds it (scripts/setup.sh does)",
                              corpus, c.what, bible::default_corpus_root()));
    return path;
  }
  if (corpus.starts_with("bible:"))
    throw Error(fmt::format("data.corpus = \"{}\" is not a named corpus (known: {})", corpus,
                            fmt::join(corpus_names(), ", ")));
  return corpus;
}

namespace {

}  // namespace

Masking Corpus::masking() const {
  if (!mask_id && token_file)
    throw Error(fmt::format("data.tokens '{}' is a token stream without a mask token: an encoder's masked-LM "
                            "training needs one (train an encoder on a text corpus, or use model.arch = \"gpt\")",
                            path));
  if (!mask_id)
    throw Error(fmt::format("data.tokenizer '{}' has no [MASK] token: an encoder's masked-LM training needs "
                            "one (use a BERT WordPiece tokenizer, or model.arch = \"gpt\")",
                            tokenizer));
  return {*mask_id, vocab};
}

std::string Corpus::description() const {
  if (token_file) return fmt::format("token stream '{}'", path);
  std::string name = path == builtin_corpus_path() ? std::string("the built-in corpus (data/kjv.txt)")
                                                   : fmt::format("corpus '{}'", path);
  for (const NamedCorpus& c : kNamed)
    if (this->name == c.name) name = fmt::format("{} ({}, '{}')", c.what, c.name, path);
  if (max_bytes > 0) name += fmt::format(", its first {} bytes (whole lines)", max_bytes);
  return bytes() ? name + (path == builtin_corpus_path() ? "" : " (bytes)")
                 : fmt::format("{} through {}", name, tokenizer_description);
}

namespace {

// The last test_fraction of the ids to test, the val_fraction before it to validation; Error unless
// each split holds T + 1 ids.
void split_ids(Corpus& c, std::vector<int32_t>& ids, double val_fraction, double test_fraction, int T) {
  const size_t n_test = size_t(double(ids.size()) * test_fraction);
  const size_t n_val = size_t(double(ids.size()) * val_fraction);
  const auto val_end = ids.end() - ptrdiff_t(n_test), val_begin = val_end - ptrdiff_t(n_val);
  c.train.assign(ids.begin(), val_begin);
  c.val.assign(val_begin, val_end);
  c.test.assign(val_end, ids.end());
  const size_t need = size_t(T) + 1;
  if (c.train.size() < need || c.val.size() < need || (test_fraction > 0 && c.test.size() < need))
    throw Error(fmt::format("{} '{}' has {} {}s: too short for a {}/{}{} train/validation{} split "
                            "with sequences of {} {}s (each split needs at least {})",
                            c.token_file ? "token stream" : "corpus", c.path, ids.size(), c.unit(), c.train.size(),
                            c.val.size(), test_fraction > 0 ? fmt::format("/{}", c.test.size()) : "",
                            test_fraction > 0 ? "/test" : "", T, c.unit(), need));
}

// data.val_fraction and data.test_fraction, checked before any file is read
void check_fractions(double val_fraction, double test_fraction) {
  if (!(val_fraction > 0 && val_fraction < 1))
    throw Error(fmt::format("data.val_fraction = {} must be in (0, 1)", val_fraction));
  if (!(test_fraction >= 0 && test_fraction < 1 && val_fraction + test_fraction < 1))
    throw Error(fmt::format("data.test_fraction = {} must be in [0, 1) and leave training data (val_fraction + "
                            "test_fraction < 1; val_fraction is {})",
                            test_fraction, val_fraction));
}

// a nanoGPT-style token stream: uint16 ids, little-endian
bool has_bin_suffix(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
}

}  // namespace

bool is_token_stream(const std::string& path) {
  if (has_bin_suffix(path)) return true;
  return safetensors::read_index(path).tensors.count("labels") == 0;
}

Corpus load_token_stream(const std::string& path, double val_fraction, int T, double test_fraction) {
  check_fractions(val_fraction, test_fraction);
  Corpus c;
  c.path = path;
  c.token_file = true;
  std::vector<int32_t> ids;
  if (has_bin_suffix(path)) {
    const std::vector<uint8_t> bytes = read_corpus_bytes(path);
    if (bytes.size() % 2 != 0)
      throw Error(fmt::format("token stream '{}': {} bytes is not a whole number of uint16 ids", path, bytes.size()));
    for (size_t i = 0; i < bytes.size(); i += 2) ids.push_back(int32_t(bytes[i]) | int32_t(bytes[i + 1]) << 8);
  } else {
    const safetensors::File f = safetensors::read(path);
    for (const auto& [name, t] : f.tensors)
      if (name != "input_ids")
        throw Error(fmt::format("token stream '{}': unexpected tensor '{}' (a stream holds only int32 input_ids of "
                                "shape (N) or (1, N); a token file of rows also holds labels)",
                                path, name));
    const auto& t = f.at("input_ids");
    if (t.dtype != safetensors::DType::I32 || t.shape.empty() || t.shape.size() > 2 ||
        (t.shape.size() == 2 && t.shape[0] != 1))
      throw Error(fmt::format("token stream '{}': input_ids must be int32 of shape (N) or (1, N) (a file of several "
                              "rows needs labels: see docs/USAGE.md, data.tokens)",
                              path));
    ids = t.as_i32();
  }
  if (ids.empty()) throw Error(fmt::format("token stream '{}' is empty", path));
  int32_t top = 0;
  for (size_t i = 0; i < ids.size(); i++) {
    if (ids[i] < 0) throw Error(fmt::format("token stream '{}': id {} at position {} is negative", path, ids[i], i));
    if (ids[i] >= kMaxVocab)
      throw Error(fmt::format("token stream '{}': id {} at position {} is beyond the largest vocabulary normlab "
                              "builds ({} ids)", path, ids[i], i, kMaxVocab));
    top = std::max(top, ids[i]);
  }
  c.vocab = top + 1;
  split_ids(c, ids, val_fraction, test_fraction, T);
  return c;
}

Corpus load_corpus(const std::string& corpus, double val_fraction, int T, const std::string& tokenizer,
                   size_t max_bytes, double test_fraction) {
  check_fractions(val_fraction, test_fraction);
  const std::string path = corpus_path(corpus);
  Corpus c;
  c.path = path;
  c.name = corpus;
  c.max_bytes = max_bytes;
  c.tokenizer = tokenizer;
  std::vector<int32_t> ids;
  if (tokenizer.empty()) {
    std::vector<uint8_t> bytes = read_corpus_bytes(path);
    keep_first_lines(bytes, max_bytes, path);
    ids.assign(bytes.begin(), bytes.end());
    c.mask_id = kMaskToken;
  } else {
    std::optional<Tokenizer> tok;
    try {
      tok.emplace(load_tokenizer(tokenizer == "gpt2" ? builtin_gpt2_tokenizer_dir() : tokenizer));
    } catch (const Error& e) {
      throw Error(fmt::format("data.tokenizer: {}", e.what()));
    }
    std::vector<uint8_t> bytes = read_corpus_bytes(path);
    keep_first_lines(bytes, max_bytes, path);
    try {
      ids = tok->encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                        /*add_special_tokens=*/false);
    } catch (const Error& e) {
      throw Error(fmt::format("corpus '{}': {}", path, e.what()));
    }
    if (ids.empty()) throw Error(fmt::format("corpus '{}' has no tokens", path));
    c.tokenizer_description = tok->description();
    c.vocab = tok->vocab_size();
    c.mask_id = tok->token_to_id("[MASK]");
    if (!c.mask_id) c.mask_id = tok->token_to_id("<mask>");
  }
  split_ids(c, ids, val_fraction, test_fraction, T);
  return c;
}

void check_model_fits_corpus(const ModelConfig& cfg, const Corpus& corpus) {
  const int V = cfg.vocab_size();
  if (corpus.bytes()) {
    if (V < kByteVocab)
      throw Error(fmt::format("model.vocab = {} is too small for byte tokens (needs >= 256)", V));
    if (cfg.arch == Arch::Encoder && V <= kMaskToken)
      throw Error(fmt::format("model.vocab = {} leaves no room for the mask token {} of byte-level masked "
                              "training (use vocab >= 257)",
                              V, kMaskToken));
    return;
  }
  if (corpus.token_file) {
    if (V < corpus.vocab)
      throw Error(fmt::format("token stream '{}' holds id {}, outside the model's vocabulary of {} (set model.vocab)",
                              corpus.path, corpus.vocab - 1, V));
    if (cfg.arch == Arch::Encoder) corpus.masking();  // Error: a stream has no mask token
    return;
  }
  if (V < corpus.vocab)
    throw Error(fmt::format("model.vocab = {} is smaller than the tokenizer's {} tokens (data.tokenizer = "
                            "'{}'); set model.vocab",
                            V, corpus.vocab, corpus.tokenizer));
  if (cfg.arch == Arch::Encoder) corpus.masking();  // Error without a [MASK]
}

// Counts by sorting a copy: memory in proportion to the ids, not to the largest id (a file of a few
// ids as large as 2^24 must not make normlab allocate a table of 2^24 counts).
double unigram_entropy(const std::vector<int32_t>& ids) {
  std::vector<int32_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  double h = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) j++;
    const double p = double(j - i) / double(sorted.size());
    h -= p * std::log(p);
    i = j;
  }
  return h;
}

namespace {

// Row b of a batch from the window of `tokens` at `start`: a GPT's next ids as labels; an encoder's
// round(15% of T) (>= 1) distinct positions, chosen by a partial Fisher-Yates shuffle, as labels, 80%
// of them masked, 10% a random id, 10% kept
void fill_row(Batch& batch, int b, const std::vector<int32_t>& tokens, size_t start, Arch arch, Rng& rng,
              const Masking& masking) {
  const int T = batch.T;
  int32_t* ids = batch.ids.data() + size_t(b) * T;
  int32_t* labels = batch.labels.data() + size_t(b) * T;
  for (int t = 0; t < T; t++) ids[t] = tokens[start + t];
  if (arch == Arch::Gpt) {
    for (int t = 0; t < T; t++) labels[t] = tokens[start + t + 1];
    return;
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
    if (u < 0.8) ids[t] = masking.mask_id;
    else if (u < 0.9) ids[t] = int32_t(rng.below(uint64_t(masking.random_below)));
  }
}

Batch empty_batch(int B, int T) {
  Batch batch;
  batch.B = B;
  batch.T = T;
  batch.ids.resize(size_t(B) * T);
  batch.labels.resize(size_t(B) * T);
  return batch;
}

}  // namespace

Batch sample_batch(const std::vector<int32_t>& tokens, Arch arch, int B, int T, Rng& rng,
                   const Masking& masking) {
  Batch batch = empty_batch(B, T);
  const size_t windows = tokens.size() - size_t(T);  // starts with T + 1 ids available
  for (int b = 0; b < B; b++) fill_row(batch, b, tokens, rng.below(windows), arch, rng, masking);
  return batch;
}

Batch with_first_token(Batch batch, int32_t first) {
  if (batch.T < 1) return batch;
  const size_t T = size_t(batch.T);
  for (size_t b = 0; b < size_t(batch.B); b++) {
    int32_t* ids = batch.ids.data() + b * T;
    int32_t* labels = batch.labels.data() + b * T;
    std::copy(ids, ids + T, labels);         // each position predicts the id it held
    std::copy_backward(ids, ids + T - 1, ids + T);  // and reads the one before it
    ids[0] = first;
  }
  return batch;
}

std::vector<int32_t> window_ids(const std::vector<int32_t>& ids, size_t start, int T, int32_t first) {
  const size_t lead = first >= 0 ? 1 : 0, n = size_t(T) - std::min(size_t(T), lead);
  if (T < 1 || start > ids.size() || ids.size() - start < n)
    throw Error(fmt::format("a window of {} ids at {} of {} ids: past their end", T, start, ids.size()));
  std::vector<int32_t> out;
  out.reserve(size_t(T));
  if (lead) out.push_back(first);
  out.insert(out.end(), ids.begin() + ptrdiff_t(start), ids.begin() + ptrdiff_t(start + n));
  return out;
}

size_t window_count(const std::vector<int32_t>& ids, Arch arch, int T) {
  const size_t need = arch == Arch::Gpt ? size_t(T) + 1 : size_t(T);
  return ids.size() < need ? 0 : (ids.size() - need) / size_t(T) + 1;
}

Batch window_batch(const std::vector<int32_t>& ids, Arch arch, size_t first, int n, int T, Rng& rng,
                   const Masking& masking) {
  if (first + size_t(n) > window_count(ids, arch, T))
    throw Error(fmt::format("windows {} to {} of a split of {} ids: it has {} windows of {}", first,
                            first + size_t(n) - 1, ids.size(), window_count(ids, arch, T), T));
  Batch batch = empty_batch(n, T);
  for (int b = 0; b < n; b++) fill_row(batch, b, ids, (first + size_t(b)) * size_t(T), arch, rng, masking);
  return batch;
}

Batch load_token_file(const std::string& path) {
  const safetensors::File f = safetensors::read(path);
  const bool seq2seq = f.tensors.count("decoder_input_ids") > 0;
  const char* ids_name = seq2seq ? "decoder_input_ids" : "input_ids";
  const auto& ids = f.at(ids_name);
  const auto& labels = f.at("labels");
  auto check_2d = [&](const safetensors::Tensor& t, const char* name) {
    if (t.dtype != safetensors::DType::I32 || t.shape.size() != 2)
      throw Error(fmt::format("{}: tensor '{}' must be int32 with shape (B, T)", path, name));
    if (t.shape[0] < 1 || t.shape[1] < 1)
      throw Error(fmt::format("{}: {} is empty (shape [{}, {}])", path, name, t.shape[0], t.shape[1]));
    if (t.shape[0] > (1 << 20) || t.shape[1] > (1 << 20))
      throw Error(fmt::format("{}: {} shape [{}, {}] is too large", path, name, t.shape[0], t.shape[1]));
  };
  check_2d(ids, ids_name);
  check_2d(labels, "labels");
  if (ids.shape != labels.shape)
    throw Error(fmt::format("{}: {} and labels have different shapes", path, ids_name));
  Batch b;
  b.B = int(ids.shape[0]);
  b.T = int(ids.shape[1]);
  b.ids = ids.as_i32();
  b.labels = labels.as_i32();
  auto read_mask = [&](const safetensors::Tensor& t, const char* name, const std::vector<int64_t>& shape) {
    if (t.dtype != safetensors::DType::I32 || t.shape != shape)
      throw Error(fmt::format("{}: tensor '{}' must be int32 with the shape of {}", path, name,
                              std::string(name).find("decoder") == 0 || !seq2seq ? ids_name : "input_ids"));
    std::vector<uint8_t> m;
    for (int32_t v : t.as_i32()) {
      if (v != 0 && v != 1) throw Error(fmt::format("{}: {} holds {} (only 0 and 1 are allowed)", path, name, v));
      m.push_back(uint8_t(v));
    }
    return m;
  };
  std::vector<std::string> known = {ids_name, "labels"};
  if (seq2seq) {
    const auto& src = f.at("input_ids");
    check_2d(src, "input_ids");
    if (src.shape[0] != ids.shape[0])
      throw Error(fmt::format("{}: input_ids has {} rows and decoder_input_ids {}", path, src.shape[0], ids.shape[0]));
    b.S = int(src.shape[1]);
    b.src = src.as_i32();
    if (f.tensors.count("attention_mask")) b.src_mask = read_mask(f.at("attention_mask"), "attention_mask", src.shape);
    if (f.tensors.count("decoder_attention_mask"))
      b.mask = read_mask(f.at("decoder_attention_mask"), "decoder_attention_mask", ids.shape);
    known.insert(known.end(), {"input_ids", "attention_mask", "decoder_attention_mask"});
  } else {
    if (f.tensors.count("token_type_ids")) {
      const auto& t = f.at("token_type_ids");
      if (t.dtype != safetensors::DType::I32 || t.shape != ids.shape)
        throw Error(fmt::format("{}: tensor 'token_type_ids' must be int32 with the shape of input_ids", path));
      b.types = t.as_i32();
    }
    if (f.tensors.count("attention_mask")) b.mask = read_mask(f.at("attention_mask"), "attention_mask", ids.shape);
    known.insert(known.end(), {"token_type_ids", "attention_mask"});
  }
  for (const auto& [name, t] : f.tensors)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw Error(fmt::format("{}: unexpected tensor '{}' (a token file holds input_ids, labels, and "
                              "optionally token_type_ids and attention_mask; an encoder-decoder's "
                              "input_ids, attention_mask, decoder_input_ids, decoder_attention_mask "
                              "and labels)",
                              path, name));
  return b;
}

Batch batch_rows(const Batch& all, long first, int n) {
  Batch b;
  b.B = n;
  b.T = all.T;
  b.S = all.S;
  auto take = [&](const auto& v, int width, auto& out) {
    if (v.empty()) return;
    for (int k = 0; k < n; k++) {
      const size_t row = size_t((first + k) % all.B);
      out.insert(out.end(), v.begin() + ptrdiff_t(row * width), v.begin() + ptrdiff_t((row + 1) * width));
    }
  };
  take(all.ids, all.T, b.ids);
  take(all.labels, all.T, b.labels);
  take(all.types, all.T, b.types);
  take(all.mask, all.T, b.mask);
  take(all.src, all.S, b.src);
  take(all.src_mask, all.S, b.src_mask);
  return b;
}

TokenRows split_token_rows(const Batch& all, const std::string& path, double val_fraction, double test_fraction) {
  const int n_test = int(double(all.B) * test_fraction), n_val = int(double(all.B) * val_fraction);
  if (test_fraction > 0 && n_test == 0)
    throw Error(fmt::format("token file '{}': data.test_fraction = {} of its {} rows is no row", path, test_fraction,
                            all.B));
  if (all.B - n_test - n_val < 1)
    throw Error(fmt::format("token file '{}': {} rows leave no training row after {} validation and {} test rows",
                            path, all.B, n_val, n_test));
  TokenRows r;
  r.path = path;
  r.train = batch_rows(all, 0, all.B - n_val - n_test);
  if (n_val > 0) r.val = batch_rows(all, all.B - n_val - n_test, n_val);
  if (n_test > 0) r.test = batch_rows(all, all.B - n_test, n_test);
  return r;
}

std::string TokenRows::description() const {
  return fmt::format("token file '{}': {} rows of T = {}{} ({} training, {} validation{}{})", path,
                     train.B + val.B + test.B, train.T, train.S ? fmt::format(" (source S = {})", train.S) : "",
                     train.B, val.B, val.B ? "" : ": no validation loss",
                     test.B ? fmt::format(", {} test", test.B) : "");
}

void check_batch(const Batch& batch, const ModelConfig& cfg, const std::string& where, bool require_label) {
  const int V = cfg.vocab_size();
  if (cfg.encdec() && batch.src.empty())
    throw Error(fmt::format("{}: an encoder-decoder model needs a source (input_ids with "
                            "decoder_input_ids in a token file)",
                            where));
  if (!cfg.encdec() && !batch.src.empty())
    throw Error(fmt::format("{}: a source-target batch (decoder_input_ids) needs an encoder-decoder model "
                            "(model.arch = \"encdec\"); this one is {}",
                            where, to_string(cfg.arch)));
  if (cfg.encdec()) {
    if (batch.S > cfg.seq_len)
      throw Error(fmt::format("{}: source length {} exceeds the model's seq_len {}", where, batch.S, cfg.seq_len));
    const int SV = cfg.src_vocab_size();
    for (size_t i = 0; i < batch.src.size(); i++)
      if (batch.src[i] < 0 || batch.src[i] >= SV)
        throw Error(fmt::format("{}: source id {} at (row {}, position {}) is out of range [0, {})", where,
                                batch.src[i], i / batch.S, i % batch.S, SV));
    for (int b = 0; b < batch.B && !batch.src_mask.empty(); b++) {
      bool any = false;
      for (int s = 0; s < batch.S; s++) any |= batch.src_mask[size_t(b) * batch.S + s] == 1;
      if (!any) throw Error(fmt::format("{}: source row {} is all padding", where, b));
    }
  }
  if (batch.T > cfg.seq_len)
    throw Error(fmt::format("{}: sequence length {} exceeds the model's seq_len {}", where, batch.T,
                            cfg.seq_len));
  bool any_label = false;
  for (size_t i = 0; i < batch.ids.size(); i++) {
    const int32_t id = batch.ids[i], label = batch.labels[i];
    if (id < 0 || id >= V)
      throw Error(fmt::format("{}: token id {} at (row {}, position {}) is out of range [0, {})",
                              where, id, i / batch.T, i % batch.T, V));
    if (label != ops::kIgnoreLabel && (label < 0 || label >= V))
      throw Error(fmt::format("{}: label {} at (row {}, position {}) is out of range [0, {}) and is "
                              "not -100",
                              where, label, i / batch.T, i % batch.T, V));
    any_label |= label != ops::kIgnoreLabel;
  }
  if (!any_label && require_label)
    throw Error(fmt::format("{}: no position has a label (all are -100)", where));
  for (size_t i = 0; i < batch.types.size(); i++)
    if (batch.types[i] < 0 || batch.types[i] >= std::max(cfg.type_vocab, 1))
      throw Error(fmt::format("{}: token type {} at (row {}, position {}) is out of range [0, {})", where,
                              batch.types[i], i / batch.T, i % batch.T, std::max(cfg.type_vocab, 1)));
  if (!batch.mask.empty()) {
    for (int b = 0; b < batch.B; b++) {
      const uint8_t* m = batch.mask.data() + size_t(b) * batch.T;
      bool any = false;
      for (int t = 0; t < batch.T; t++) {
        if (m[t] > 1)
          throw Error(fmt::format("{}: attention mask value {} at (row {}, position {}) is not 0 or 1", where,
                                  int(m[t]), b, t));
        any |= m[t] == 1;
      }
      if ((cfg.causal() || cfg.encdec()) && m[0] == 0)
        throw Error(fmt::format("{}: row {} starts with padding; a causal model needs right padding "
                                "(the first token of every row must be real)",
                                where, b));
      if (!any) throw Error(fmt::format("{}: row {} is all padding", where, b));
    }
  }
}

}  // namespace normlab
