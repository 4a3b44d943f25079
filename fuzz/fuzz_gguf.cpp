// fuzz_gguf.cpp: libFuzzer harness of the GGUF reader (io/gguf.cpp, `normlab gguf`, any command
// given a .gguf checkpoint): any bytes as a .gguf file through gguf::read, then every tensor
// dequantized (bounded: a file this size holds at most this many values) and the tokenizer built
// from its metadata with a fixed text encoded and decoded.
#include "fuzz/fuzz_util.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab;
  const std::string path = fuzz::write_scratch("model.gguf", {reinterpret_cast<const char*>(data), size});
  fuzz::expect_clean([&] {
    const gguf::File f = gguf::read(path);
    for (const gguf::TensorInfo& t : f.tensors)
      if (t.numel() <= (int64_t(1) << 20)) f.dequantize(t);
    const Tokenizer tok(gguf::tokenizer_parts(f));
    const std::vector<int32_t> ids = tok.encode("Hello world, it's 2026! Caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80", false);
    tok.decode(ids, false);
  });
  return 0;
}
