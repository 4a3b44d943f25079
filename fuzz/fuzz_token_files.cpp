// fuzz_token_files.cpp: libFuzzer harness of the token files (data.tokens, --tokens; train/data.h):
// the input written as a .bin stream (little-endian uint16 ids) and as a .safetensors file, read the
// way `normlab train` reads it -- a stream (load_token_stream, the model fit, the unigram entropy,
// a batch) or rows (load_token_file, check_batch against a GPT and an encoder-decoder, the
// training/validation split).
#include "fuzz/fuzz_util.h"
#include "train/data.h"

namespace {

using namespace normlab;

void read_stream(const std::string& path) {
  const Corpus c = load_token_stream(path, 0.1, 8);
  ModelConfig cfg;
  check_model_fits_corpus(cfg, c);
  unigram_entropy(c.train);
  Rng rng(1);
  sample_batch(c.train, Arch::Gpt, 2, 8, rng);
}

void read_rows(const std::string& path) {
  const Batch all = load_token_file(path);
  ModelConfig cfg;
  if (!all.src.empty()) cfg.arch = Arch::EncDec;
  check_batch(all, cfg, path);
  const TokenRows rows = split_token_rows(all, path, 0.1);
  rows.description();
  batch_rows(rows.train, 1, 3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string bin = fuzz::write_scratch("tokens.bin", bytes);
  const std::string st = fuzz::write_scratch("tokens.safetensors", bytes);
  fuzz::expect_clean([&] { read_stream(bin); });
  fuzz::expect_clean([&] {
    if (is_token_stream(st)) read_stream(st);
    else read_rows(st);
  });
  return 0;
}
