// data.h: training data: a text corpus as token ids (its bytes, or a tokenizer's ids) or a token
// stream file, split into training and validation ids; batches for the GPT (next token) and encoder
// (BERT-style masking) objectives; token files of rows (safetensors with int32 input_ids and labels)
// split into training and validation rows; the words that say what an input was; and the range
// checks every batch passes at the API boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "util/rng.h"

namespace normlab {

struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> ids;     // (B, T) (an encoder-decoder's: the decoder input, BOS first)
  std::vector<int32_t> labels;  // (B, T), kIgnoreLabel where there is no loss
  std::vector<int32_t> types;   // (B, T) token types, or empty (all 0)
  std::vector<uint8_t> mask;    // (B, T) 1 = real token, 0 = padding, or empty (no padding)
  const int32_t* types_or_null() const { return types.empty() ? nullptr : types.data(); }
  const uint8_t* mask_or_null() const { return mask.empty() ? nullptr : mask.data(); }
  // encoder-decoder batches: the source
  int S = 0;
  std::vector<int32_t> src;      // (B, S)
  std::vector<uint8_t> src_mask; // (B, S) 1 = real token, 0 = padding, or empty
  Source source() const {
    return src.empty() ? Source{} : Source{src.data(), S, src_mask.empty() ? nullptr : src_mask.data()};
  }
};

// How encoder batches corrupt the chosen positions: 80% become mask_id, 10% a random id in
// [0, random_below), 10% stay. The default is byte-level: kMaskToken (256) and a random byte.
struct Masking {
  int32_t mask_id = kMaskToken;
  int32_t random_below = kByteVocab;
};

struct Corpus {
  std::string path;                   // the file read (a named corpus resolved by corpus_path)
  std::string name;                   // data.corpus as given: "builtin", "bible:es" or the path
  size_t max_bytes = 0;               // > 0: only the file's first bytes were read (cut at a line end)
  std::string tokenizer;              // "" = bytes, else data.tokenizer as given ("gpt2" or a path)
  std::string tokenizer_description;  // what was loaded from where ("" for bytes)
  bool token_file = false;            // the ids come from a token stream file (load_token_stream)
  std::vector<int32_t> train, val;    // token ids: bytes are ids 0..255
  std::vector<int32_t> test;          // the test split (data.test_fraction), empty without one
  int32_t vocab = kByteVocab;         // every id is in [0, vocab): 256, or the tokenizer's vocab_size
  std::optional<int32_t> mask_id;     // bytes: kMaskToken; a tokenizer: its [MASK] (or <mask>), if any
  bool bytes() const { return tokenizer.empty() && !token_file; }
  // "byte" or "token": the unit of the ids (for messages such as "token unigram entropy").
  const char* unit() const { return bytes() ? "byte" : "token"; }
  // The masking of encoder batches; Error if the tokenizer has no mask token.
  Masking masking() const;
  // What the ids are, for "input: ..." lines: "the built-in corpus (data/kjv.txt)", "corpus 'F'
  // (bytes)", "corpus 'F' through <tokenizer>", "token stream 'X'".
  std::string description() const;
};

// Reads a text file and splits its ids: the last test_fraction (0: none) is the test split, the
// val_fraction before it the validation split, the rest training. tokenizer "" reads
// the bytes (ids 0..255); otherwise the whole file is tokenized once by load_tokenizer(tokenizer)
// ("gpt2": the vendored GPT-2 vocabulary) without special tokens (no [CLS]/[SEP]: windows are cut
// anywhere in the stream of ids, for GPT-2 BPE and BERT WordPiece alike). Errors name the path:
// missing, unreadable, empty, not UTF-8 (with a tokenizer), or a split too short for one sequence
// of T + 1 ids.
// `corpus` is data.corpus: a path or a name of corpus_path. max_bytes > 0 reads only the file's first
// max_bytes bytes, cut back to the end of the last whole line in them (Error if no line ends there).
Corpus load_corpus(const std::string& corpus, double val_fraction, int T, const std::string& tokenizer = "",
                   size_t max_bytes = 0, double test_fraction = 0);

// The file behind data.corpus: "builtin" is the King James Bible shipped in data/kjv.txt; "bible:es"
// and "bible:web" are the Spanish Reina-Valera 1909 and the World English Bible, the two sides of the
// es-en Bible pair's training verses (one verse a line, in Bible order; `normlab corpus bible`
// builds them in the cache: Error naming that command when it has not); anything else is a path.
std::string corpus_path(const std::string& corpus);
// The names corpus_path knows, for messages.
const std::vector<std::string>& corpus_names();

// Whether a token file is a stream of ids (load_token_stream) rather than rows (load_token_file): a
// .bin file, or a .safetensors file without a `labels` tensor.
bool is_token_stream(const std::string& path);

// Reads a token stream: the ids of a whole dataset in one sequence, split like a corpus (the last
// test_fraction to test, the val_fraction before it to validation) and sampled in windows of T (+1)
// ids. Two formats: a .safetensors file
// whose only tensor is int32 input_ids of shape (N) or (1, N) (`normlab tokenize --out` writes one),
// or a .bin file of little-endian uint16 ids (nanoGPT's train.bin). vocab is the largest id + 1.
// Errors name the path: missing, another tensor, a negative id, or a split too short for T + 1 ids.
Corpus load_token_stream(const std::string& path, double val_fraction, int T, double test_fraction = 0);

// Throws Error unless the model can train on the corpus: bytes need vocab >= 256 (an encoder >= 257
// for kMaskToken); a tokenizer needs vocab >= its vocab_size, and an encoder needs its [MASK].
void check_model_fits_corpus(const ModelConfig& cfg, const Corpus& corpus);

// The built-in corpus shipped in the repository (data/kjv.txt).
std::string builtin_corpus_path();

// Unigram entropy of the ids (nats per id: per byte for a byte corpus, per token with a tokenizer).
double unigram_entropy(const std::vector<int32_t>& ids);

// Draws a batch of B random windows of T (+1 for gpt) ids. encoder: 15% of the positions of each
// row (at least one) get a label; of those 80% become masking.mask_id, 10% a random id in
// [0, masking.random_below), 10% stay.
Batch sample_batch(const std::vector<int32_t>& ids, Arch arch, int B, int T, Rng& rng,
                   const Masking& masking = {});

// The batch with `first` at the first position of every row (a GPT's windows): row b's ids become
// first, ids[0 .. T-2] and its labels become ids[0 .. T-1], so every id of the window is still predicted
// once (the first from `first`) and the window's last id, predicted before, is left for the next one.
// What `data.bos` gives every window of a run: one token that starts every sequence, as a dedicated
// sink token does (StreamingLLM, Xiao et al. 2024) and a document's BOS does in pretraining.
Batch with_first_token(Batch batch, int32_t first);
// The T ids a window at `start` of `ids` gives the model: ids[start, start + T), or, with a first token
// (first >= 0), that id, then ids[start, start + T - 1): with_first_token's rows, for one window of
// ids with no labels (the instruments' inputs). The window must lie inside `ids`.
std::vector<int32_t> window_ids(const std::vector<int32_t>& ids, size_t start, int T, int32_t first = -1);

// A split read once from end to end, as a test split is scored: its consecutive windows (starting at
// 0, T, 2T, ...; a GPT's need T + 1 ids), `first` to first + n - 1 of them, as one batch; an
// encoder's positions are chosen and masked as in sample_batch, by `rng`.
size_t window_count(const std::vector<int32_t>& ids, Arch arch, int T);
Batch window_batch(const std::vector<int32_t>& ids, Arch arch, size_t first, int n, int T, Rng& rng,
                   const Masking& masking = {});

// Reads a token file (input_ids, labels: int32 (B, T); optional token_type_ids and attention_mask,
// int32 (B, T), as Hugging Face names them). With decoder_input_ids it is an encoder-decoder's
// (Hugging Face's seq2seq names): input_ids (B, S) and attention_mask (B, S) are the source,
// decoder_input_ids, decoder_attention_mask and labels (B, T) the target.
Batch load_token_file(const std::string& path);

// A token file of rows as a dataset of sequences: the last floor(B * test_fraction) rows are the test
// rows, the floor(B * val_fraction) before them the validation rows (none when B is small: then there
// is no validation loss), the others the training rows. Training batches are consecutive rows in file order, wrapping around (rows(first, n)).
struct TokenRows {
  std::string path;
  Batch train, val, test;  // val.B == 0: no validation rows; test.B == 0: no test rows
  std::string description() const;  // "token file 'X': 40 rows of T = 16 (36 training, 4 validation)"
};
TokenRows split_token_rows(const Batch& all, const std::string& path, double val_fraction, double test_fraction = 0);
// Rows [first, first + n) of a batch, wrapping around past its last row, with every tensor.
Batch batch_rows(const Batch& all, long first, int n);

// Throws Error naming `where` if any id is outside [0, V), a label outside [0, V) and not
// kIgnoreLabel, a token type outside [0, type_vocab), a mask value other than 0/1, a row whose
// queries would see no key (gpt: the first token padded; encoder: every token padded), T exceeds
// seq_len, or no position has a label (unless require_label is false: instruments without a loss).
void check_batch(const Batch& batch, const ModelConfig& cfg, const std::string& where,
                 bool require_label = true);

}  // namespace normlab
