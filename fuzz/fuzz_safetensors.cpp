// fuzz_safetensors.cpp: libFuzzer harness of the safetensors reader (io/safetensors.h), the format of
// checkpoints, token files and gradient dumps: any file, then every tensor read back as its dtype.
#include "fuzz/fuzz_util.h"
#include "io/safetensors.h"

namespace st = normlab::safetensors;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = normlab::fuzz::write_scratch("in.safetensors", {reinterpret_cast<const char*>(data), size});
  normlab::fuzz::expect_clean([&] {
    const st::File file = st::read(path);
    for (const auto& [name, tensor] : file.tensors) {
      file.expect(name, tensor.dtype, tensor.shape);
      switch (tensor.dtype) {
        case st::DType::I32: tensor.as_i32(); break;
        case st::DType::I64: tensor.as_i64(); break;
        default: tensor.to_f32(); break;
      }
    }
  });
  return 0;
}
