// fuzz_tokenizer_json.cpp: libFuzzer harness of the tokenizer.json loader (data.tokenizer,
// `normlab tokenize --tokenizer`; io/tokenizer_json.cpp): any file named tokenizer.json through
// load_tokenizer, then a fixed text (ASCII, accents, CJK, an emoji, special-token look-alikes)
// encoded with and without special tokens and decoded back.
#include "fuzz/fuzz_util.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab;
  const std::string path = fuzz::write_scratch("tokenizer.json", {reinterpret_cast<const char*>(data), size});
  fuzz::expect_clean([&] {
    const Tokenizer tok = load_tokenizer(path);
    tok.vocab_size();
    const std::string text = "Hello world, it's 2026! Caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 [CLS] <mask> ##ing  x";
    for (bool special : {true, false}) {
      const std::vector<int32_t> ids = tok.encode(text, special);
      tok.decode(ids, true);
      tok.decode(ids, false);
    }
  });
  return 0;
}
