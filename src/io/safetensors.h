// safetensors.h: reading and writing the safetensors file format (checkpoints, token files,
// gradient dumps). Layout (https://github.com/huggingface/safetensors): u64 little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {k: v}}, then the raw little-endian data section that the offsets point into.
//
// read() trusts nothing in the file: every violation is a normlab::Error "<path>: <what>".
// write() is atomic: a temporary file in the same directory, fsync, then rename over the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace normlab::safetensors {

// names in the file: "F32" "F64" "I32" "I64" "F16" "BF16"
enum class DType { F32, F64, I32, I64, F16, BF16 };

// "[2, 3]" (for messages)
std::string shape_text(const std::vector<int64_t>& shape);

size_t dtype_size(DType dtype);                                 // bytes per element
const char* dtype_name(DType dtype);                            // "F32", ...
std::optional<DType> dtype_from_name(const std::string& name);  // nullopt if not one of the six

// For writing: points at caller-owned memory holding numel * dtype_size bytes, row-major.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // [] is a scalar (1 element); a zero dim makes an empty tensor
  const void* data;            // may be null only if the tensor has no elements
};

// A tensor read from a file; owns its bytes (row-major, little-endian).
struct Tensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // numel() * dtype_size(dtype)

  int64_t numel() const;                // product of shape; 1 for a scalar
  std::vector<float> as_f32() const;    // Error unless dtype is F32
  std::vector<double> as_f64() const;   // Error unless dtype is F64
  std::vector<int32_t> as_i32() const;  // Error unless dtype is I32
  std::vector<int64_t> as_i64() const;  // Error unless dtype is I64
  // Any floating dtype converted to float32: F16 and BF16 exactly (every value is representable),
  // F64 rounded to nearest. Error for integer dtypes.
  std::vector<float> to_f32() const;
};

struct File {
  std::map<std::string, std::string> metadata;
  std::map<std::string, Tensor> tensors;  // sorted by name
  std::string path;                       // as given to read(); named in every error

  // Throws Error "<path>: no tensor '<name>'".
  const Tensor& at(const std::string& name) const;
  // at(name), then Error "<path>: tensor '<name>' is I32 [2, 3], expected F32 [2, 3]" on mismatch.
  const Tensor& expect(const std::string& name, DType dtype,
                       const std::vector<int64_t>& shape) const;
};

// Writes atomically through AtomicFile (util/files.h): to "<path>.tmp.<pid>" in the same
// directory, fsync, then rename over path.
// overwrite == false and path exists -> Error, nothing touched. Any failure -> Error naming path,
// and no temporary file is left behind. Tensors are laid out in the order given, contiguously; the
// header is padded with spaces to a multiple of 8 bytes; "__metadata__" (if non-empty) comes first.
void write(const std::string& path, const std::vector<TensorView>& tensors,
           const std::map<std::string, std::string>& metadata, bool overwrite);

// Reads and validates the whole file; any violation -> Error "<path>: <what>". The tensors must
// tile the data section exactly, as the format requires: no overlap, no gap, no trailing bytes
// (an empty tensor may sit anywhere). A FIFO or device is refused before it is opened; the header
// JSON is limited to 512 levels of nesting (parse_json).
File read(const std::string& path);

// A file's header, validated as read() validates it (the tensors tile the data section exactly),
// without the tensors' bytes: what a reader of a big file needs to put each tensor straight where it
// goes (read_tensor), or to read only the metadata.
struct Index {
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset = 0, size = 0;  // the tensor's bytes in the file: from byte `offset`, `size` of them
  };
  std::map<std::string, std::string> metadata;
  std::map<std::string, Entry> tensors;  // sorted by name
  std::string path;

  // Error "<path>: no tensor '<name>'", or "<path>: tensor '<name>' is I32 [2, 3], expected F32 [2, 3]".
  const Entry& expect(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
};
Index read_index(const std::string& path);
// The bytes of tensor `name` (its entry's size) into dst; Error naming the file if it shrank since.
void read_tensor(const Index& index, const std::string& name, void* dst);

// Limits enforced by read() (and write(), for the byte count).
inline constexpr uint64_t max_header_bytes = 100ull * 1000 * 1000;  // 100 MB
inline constexpr uint64_t max_tensor_bytes = 1ull << 62;            // numel * dtype_size

}  // namespace normlab::safetensors
