// gguf.cpp: the GGUF header, metadata and tensor table, read strictly (gguf.h). The block formats
// and their dequantization are in gguf_quants.cpp.
#include "io/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

#include "util/error.h"
#include "util/files.h"

namespace normlab::gguf {

const char* to_string(ValueType t) {
  switch (t) {
    case ValueType::U8: return "uint8";
    case ValueType::I8: return "int8";
    case ValueType::U16: return "uint16";
    case ValueType::I16: return "int16";
    case ValueType::U32: return "uint32";
    case ValueType::I32: return "int32";
    case ValueType::F32: return "float32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::U64: return "uint64";
    case ValueType::I64: return "int64";
    case ValueType::F64: return "float64";
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> TensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }

namespace {

// Limits far beyond any real file, so that a hostile count fails here and not in an allocation.
constexpr uint64_t kMaxKeyBytes = 1 << 16;
constexpr int kMaxDims = 4;

// A bounds-checked little-endian cursor over the file's bytes.
class Cursor {
 public:
  Cursor(const std::string& bytes, const std::string& path) : s_(bytes), path_(path) {}
  size_t pos() const { return pos_; }
  uint64_t left() const { return s_.size() - pos_; }

  template <class T>
  T scalar(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what, uint64_t max_bytes = UINT64_MAX) {
    const uint64_t n = scalar<uint64_t>(what);
    if (n > left() || n > max_bytes)
      fail(fmt::format("{} claims {} bytes, {}", what, n,
                       n > left() ? fmt::format("more than the {} left in the file", left())
                                  : fmt::format("more than the {} allowed", max_bytes)));
    std::string out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("{}: {} (at byte {}); not a valid GGUF file, or truncated", path_, what, pos_));
  }

 private:
  void need(uint64_t n, const char* what) {
    if (n > left()) fail(fmt::format("{}: needs {} bytes, {} left", what, n, left()));
  }
  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};

size_t value_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
    case ValueType::String: return 8;  // a string is at least its u64 length
    case ValueType::Array: return 12;  // element type + count
  }
  return 1;
}

ValueType value_type(uint32_t t, Cursor& c, const std::string& key) {
  if (t > uint32_t(ValueType::F64)) c.fail(fmt::format("metadata '{}' has unknown value type {}", key, t));
  return ValueType(t);
}

double number(Cursor& c, ValueType t, const std::string& key) {
  auto whole = [&](auto v) {
    if (v > (int64_t(1) << 53) || v < -(int64_t(1) << 53))
      c.fail(fmt::format("metadata '{}' holds {}, too large to use exactly", key, v));
    return double(v);
  };
  switch (t) {
    case ValueType::U8: return c.scalar<uint8_t>("a uint8");
    case ValueType::I8: return c.scalar<int8_t>("an int8");
    case ValueType::U16: return c.scalar<uint16_t>("a uint16");
    case ValueType::I16: return c.scalar<int16_t>("an int16");
    case ValueType::U32: return c.scalar<uint32_t>("a uint32");
    case ValueType::I32: return c.scalar<int32_t>("an int32");
    case ValueType::F32: return c.scalar<float>("a float32");
    case ValueType::Bool: {
      const uint8_t b = c.scalar<uint8_t>("a bool");
      if (b > 1) c.fail(fmt::format("metadata '{}': bool byte {} is neither 0 nor 1", key, b));
      return b;
    }
    case ValueType::U64: {
      const uint64_t v = c.scalar<uint64_t>("a uint64");
      if (v > (uint64_t(1) << 53)) c.fail(fmt::format("metadata '{}' holds {}, too large to use exactly", key, v));
      return double(v);
    }
    case ValueType::I64: return whole(c.scalar<int64_t>("an int64"));
    case ValueType::F64: return c.scalar<double>("a float64");
    case ValueType::String:
    case ValueType::Array: break;
  }
  c.fail(fmt::format("metadata '{}': not a number", key));
}

Value read_value(Cursor& c, ValueType t, const std::string& key) {
  Value v;
  v.type = t;
  if (t == ValueType::String) {
    v.text = c.string("a string value");
  } else if (t == ValueType::Array) {
    v.element = value_type(c.scalar<uint32_t>("an array's element type"), c, key);
    if (v.element == ValueType::Array) c.fail(fmt::format("metadata '{}': arrays of arrays are not read", key));
    const uint64_t n = c.scalar<uint64_t>("an array's length");
    if (n > c.left() / value_bytes(v.element))
      c.fail(fmt::format("metadata '{}' claims {} elements of {}, more than the {} bytes left can hold", key, n,
                         to_string(v.element), c.left()));
    if (v.element == ValueType::String) {
      v.strings.reserve(n);
      for (uint64_t i = 0; i < n; i++) v.strings.push_back(c.string("an array's string"));
    } else {
      v.numbers.reserve(n);
      for (uint64_t i = 0; i < n; i++) v.numbers.push_back(number(c, v.element, key));
    }
  } else {
    v.number = number(c, t, key);
  }
  return v;
}

}  // namespace

bool is_gguf(const std::string& path) {
  // only a regular file is opened: opening a FIFO would block until a writer comes (forever)
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in && in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

File read(const std::string& path) {
  File f;
  f.path = path;
  f.bytes = read_file(path, "GGUF file");
  Cursor c(f.bytes, path);
  if (f.bytes.size() < 4 || std::memcmp(f.bytes.data(), "GGUF", 4) != 0) c.fail("no \"GGUF\" magic at the start");
  c.scalar<uint32_t>("the magic");
  f.version = c.scalar<uint32_t>("the version");
  if (f.version != 2 && f.version != 3)
    c.fail(fmt::format("GGUF version {} (normlab reads versions 2 and 3)", f.version));
  const uint64_t n_tensors = c.scalar<uint64_t>("the tensor count"), n_kv = c.scalar<uint64_t>("the metadata count");
  // the smallest metadata entry is 8 + 4 + 1 bytes, the smallest tensor info 8 + 4 + 8 + 4 + 8
  if (n_kv > c.left() / 13) c.fail(fmt::format("{} metadata entries cannot fit in the {} bytes left", n_kv, c.left()));
  for (uint64_t i = 0; i < n_kv; i++) {
    std::string key = c.string("a metadata key", kMaxKeyBytes);
    const ValueType t = value_type(c.scalar<uint32_t>("a value type"), c, key);
    Value v = read_value(c, t, key);
    if (!f.metadata.emplace(key, std::move(v)).second) c.fail(fmt::format("metadata key '{}' appears twice", key));
  }
  if (n_tensors > c.left() / 32)
    c.fail(fmt::format("{} tensors cannot fit in the {} bytes left", n_tensors, c.left()));
  for (uint64_t i = 0; i < n_tensors; i++) {
    TensorInfo t;
    t.name = c.string("a tensor name", kMaxKeyBytes);
    const uint32_t dims = c.scalar<uint32_t>("a tensor's dimension count");
    if (dims < 1 || dims > kMaxDims)
      c.fail(fmt::format("tensor '{}' has {} dimensions (1 to {} expected)", t.name, dims, kMaxDims));
    int64_t numel = 1;
    for (uint32_t d = 0; d < dims; d++) {
      const uint64_t n = c.scalar<uint64_t>("a tensor dimension");
      if (n < 1 || n > (uint64_t(1) << 40) || double(numel) * double(n) > 1e15)
        c.fail(fmt::format("tensor '{}' has dimension {} = {}, out of range", t.name, d, n));
      t.ne.push_back(int64_t(n));
      numel *= int64_t(n);
    }
    const uint32_t type = c.scalar<uint32_t>("a tensor type");
    const auto known = {0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30};
    if (std::find(known.begin(), known.end(), int(type)) == known.end())
      throw Error(fmt::format("{}: tensor '{}' is of type {}, which normlab cannot dequantize (it reads F32, F16, "
                              "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
                              path, t.name, type_name(type)));
    t.type = TensorType(type);
    if (t.ne[0] % block_length(t.type) != 0)
      c.fail(fmt::format("tensor '{}': its rows of {} elements are not whole {} blocks of {}", t.name, t.ne[0],
                         type_name(type), block_length(t.type)));
    t.offset = c.scalar<uint64_t>("a tensor offset");
    t.bytes = type_bytes(t.type, numel);
    if (!f.index.emplace(t.name, f.tensors.size()).second) c.fail(fmt::format("tensor '{}' appears twice", t.name));
    f.tensors.push_back(std::move(t));
  }
  int64_t alignment = 32;
  if (f.get("general.alignment")) alignment = f.integer("general.alignment", 1, 1 << 20);
  if ((alignment & (alignment - 1)) != 0)
    throw Error(fmt::format("{}: general.alignment {} is not a power of two", path, alignment));
  f.data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (f.data_start > f.bytes.size()) c.fail("the file ends before its data section");
  const uint64_t data_bytes = f.bytes.size() - f.data_start;
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : f.tensors) {
    if (t.offset % uint64_t(alignment) != 0)
      throw Error(fmt::format("{}: tensor '{}' starts at offset {}, not a multiple of the alignment {}", path, t.name,
                              t.offset, alignment));
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset)
      throw Error(fmt::format("{}: tensor '{}' ({} bytes at offset {}) runs past the end of the file (data section "
                              "of {} bytes); truncated?",
                              path, t.name, t.bytes, t.offset, data_bytes));
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); i++)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      throw Error(fmt::format("{}: tensors '{}' and '{}' overlap in the data section", path, by_offset[i - 1]->name,
                              by_offset[i]->name));
  return f;
}

const TensorInfo* File::find(const std::string& name) const {
  const auto it = index.find(name);
  return it == index.end() ? nullptr : &tensors[it->second];
}

const Value* File::get(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

namespace {
bool is_number(ValueType t) { return t != ValueType::String && t != ValueType::Array; }
}  // namespace

std::optional<std::string> File::text_or(const std::string& key) const {
  const Value* v = get(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::String)
    throw Error(fmt::format("{}: metadata '{}' is a {}, expected a string", path, key, to_string(v->type)));
  return v->text;
}

std::string File::text(const std::string& key) const {
  if (auto v = text_or(key)) return *v;
  throw Error(fmt::format("{}: no metadata '{}'", path, key));
}

std::optional<int64_t> File::integer_or(const std::string& key, int64_t lo, int64_t hi) const {
  const Value* v = get(key);
  if (!v) return std::nullopt;
  if (!is_number(v->type) || v->type == ValueType::Bool || v->number != std::floor(v->number))
    throw Error(fmt::format("{}: metadata '{}' is not an integer", path, key));
  if (v->number < double(lo) || v->number > double(hi))
    throw Error(fmt::format("{}: metadata '{}' = {} is outside [{}, {}]", path, key, v->number, lo, hi));
  return int64_t(v->number);
}

int64_t File::integer(const std::string& key, int64_t lo, int64_t hi) const {
  if (auto v = integer_or(key, lo, hi)) return *v;
  throw Error(fmt::format("{}: no metadata '{}'", path, key));
}

std::optional<double> File::real_or(const std::string& key) const {
  const Value* v = get(key);
  if (!v) return std::nullopt;
  if (!is_number(v->type) || v->type == ValueType::Bool || !std::isfinite(v->number))
    throw Error(fmt::format("{}: metadata '{}' is not a finite number", path, key));
  return v->number;
}

std::optional<bool> File::boolean_or(const std::string& key) const {
  const Value* v = get(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::Bool) throw Error(fmt::format("{}: metadata '{}' is not a bool", path, key));
  return v->number != 0;
}

const std::vector<std::string>& File::strings(const std::string& key) const {
  const Value* v = get(key);
  if (!v) throw Error(fmt::format("{}: no metadata '{}'", path, key));
  if (v->type != ValueType::Array || v->element != ValueType::String)
    throw Error(fmt::format("{}: metadata '{}' is not an array of strings", path, key));
  return v->strings;
}

const std::vector<double>& File::numbers(const std::string& key) const {
  const Value* v = get(key);
  if (!v) throw Error(fmt::format("{}: no metadata '{}'", path, key));
  if (v->type != ValueType::Array || !is_number(v->element))
    throw Error(fmt::format("{}: metadata '{}' is not an array of numbers", path, key));
  return v->numbers;
}

std::vector<float> File::dequantize(const TensorInfo& t) const {
  std::vector<float> out(size_t(t.numel()));
  gguf::dequantize(t.type, reinterpret_cast<const unsigned char*>(bytes.data()) + data_start + t.offset, t.numel(),
                   out.data());
  return out;
}

}  // namespace normlab::gguf
