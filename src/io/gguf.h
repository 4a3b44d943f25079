// gguf.h: reading llama.cpp's GGUF files (versions 2 and 3). Layout
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), all little-endian:
//   "GGUF", u32 version, u64 tensor count, u64 metadata count;
//   metadata: string key, u32 value type, value (strings are u64 length + bytes; arrays are
//     u32 element type + u64 count + elements);
//   tensor infos: string name, u32 n_dims, u64 ne[n_dims] (ne[0] varies fastest), u32 ggml type,
//     u64 offset from the start of the data section;
//   padding to general.alignment (default 32), then the data section.
// read() trusts nothing: every count and length is checked against the bytes left before anything
// is allocated, every tensor must lie inside the data section, aligned, without overlapping
// another; every violation is an Error "<path>: <what>". dequantize() turns a tensor of any type
// normlab knows (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) into float32,
// with the arithmetic of the reference (ggml's dequantize_row_*, the `gguf` package's numpy).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

namespace normlab::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* to_string(ValueType t);

// One metadata value. Numbers (and booleans) are held as double, exact for every integer GGUF
// files carry in practice (|n| < 2^53; a larger one is an Error on read). An array holds
// strings or numbers, by its element type (arrays of arrays are an Error).
struct Value {
  ValueType type = ValueType::U32;
  ValueType element = ValueType::U32;  // arrays only
  double number = 0;
  std::string text;
  std::vector<double> numbers;
  std::vector<std::string> strings;
};

// ggml tensor types normlab reads (the numbering is ggml's).
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13,
  Q6_K = 14, BF16 = 30,
};
// "Q4_K"; for a type normlab does not read, its ggml name if known ("IQ2_XXS") or "type N".
std::string type_name(uint32_t ggml_type);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the row length (PyTorch's last dimension)
  TensorType type;
  uint64_t offset = 0;       // into the data section
  uint64_t bytes = 0;        // size in the file
  int64_t numel() const;
  // PyTorch order (the reverse of ne), e.g. [rows, row length] for a matrix.
  std::vector<int64_t> shape() const;
};

struct File {
  std::string path;
  uint32_t version = 3;
  std::map<std::string, Value> metadata;
  std::vector<TensorInfo> tensors;   // in file order
  std::unordered_map<std::string, size_t> index;  // name -> position in tensors (a file may hold many)
  std::string bytes;                 // the whole file
  uint64_t data_start = 0;           // offset of the data section in bytes

  const TensorInfo* find(const std::string& name) const;
  // Typed metadata: Error "<path>: metadata '<key>' ..." if absent (the *_or forms return the
  // default) or of another kind; integers must be whole and inside [lo, hi].
  const Value* get(const std::string& key) const;
  std::string text(const std::string& key) const;
  std::optional<std::string> text_or(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const;
  std::optional<int64_t> integer_or(const std::string& key, int64_t lo, int64_t hi) const;
  std::optional<double> real_or(const std::string& key) const;
  std::optional<bool> boolean_or(const std::string& key) const;
  const std::vector<std::string>& strings(const std::string& key) const;
  const std::vector<double>& numbers(const std::string& key) const;

  // The tensor's values as float32, row-major in PyTorch order.
  std::vector<float> dequantize(const TensorInfo& t) const;
};

// Whether a path names a GGUF file (a regular file whose first four bytes are "GGUF"); false for
// directories, FIFOs, devices and anything unreadable (none of them is opened).
bool is_gguf(const std::string& path);

File read(const std::string& path);

// Dequantizes n elements (a whole number of blocks) of type `type` from `src` into `out`.
void dequantize(TensorType type, const unsigned char* src, int64_t n, float* out);
// Bytes of n elements of a type (n a whole number of blocks), and its block length in elements.
uint64_t type_bytes(TensorType type, int64_t n);
int64_t block_length(TensorType type);

}  // namespace normlab::gguf
