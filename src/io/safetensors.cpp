// safetensors.cpp: the safetensors reader (validate everything, then copy each tensor out) and the
// atomic writer (temporary file, fsync, rename). Every error names the file: "<path>: <what>".
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/half.h"
#include "util/files.h"
#include "util/hints.h"
#include "util/json_reader.h"

namespace normlab::safetensors {

// The data section is copied byte for byte between the file and memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

using nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo dtype_table[] = {
    {DType::F32, "F32", 4}, {DType::F64, "F64", 8}, {DType::I32, "I32", 4}, {DType::I64, "I64", 8},
    {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2}};

const DTypeInfo& dtype_info(DType dtype) {
  for (const DTypeInfo& info : dtype_table)
    if (info.dtype == dtype) return info;
  throw Error("safetensors: invalid DType value " + std::to_string(static_cast<int>(dtype)));
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

namespace {

std::string offsets_text(uint64_t begin, uint64_t end) {
  std::string text = "[";  // appended, not chained: GCC 12 gives a false -Wrestrict on the latter
  return text.append(std::to_string(begin)).append(", ").append(std::to_string(end)).append("]");
}

// A JSON value for an error message, cut short so a hostile header cannot flood the terminal.
std::string short_dump(const json& value) {
  std::string text = value.dump();
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

// numel * dtype_size, or nullopt if a dim is negative or the count exceeds max_tensor_bytes.
std::optional<uint64_t> byte_count(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t count = dtype_size(dtype);
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim == 0) return 0;  // an empty tensor, whatever the other dims
  }
  for (int64_t dim : shape) {
    if (static_cast<uint64_t>(dim) > max_tensor_bytes / count) return std::nullopt;
    count *= static_cast<uint64_t>(dim);
  }
  return count;
}

template <typename T>
std::vector<T> copy_elements(const Tensor& tensor, DType wanted, const char* function) {
  if (tensor.dtype != wanted)
    throw Error(std::string("safetensors: ") + function + "() on a " + dtype_name(tensor.dtype) +
                " tensor of shape " + shape_text(tensor.shape) + " (use File::expect to check)");
  if (tensor.bytes.size() != static_cast<size_t>(tensor.numel()) * sizeof(T))
    throw Error(std::string("safetensors: ") + function + "() on a tensor of shape " +
                shape_text(tensor.shape) + " holding " + std::to_string(tensor.bytes.size()) +
                " bytes");
  std::vector<T> values(tensor.bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
  return values;
}

struct FileDescriptor {  // closed when it goes out of scope
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// ---------------------------------------------------------------------------------------------
// Reading

struct Entry {  // one validated header entry
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // relative to the data section
};

void read_exact(const std::string& path, int fd, void* out, uint64_t size, uint64_t offset) {
  auto* cursor = static_cast<unsigned char*>(out);
  while (size > 0) {
    ssize_t got = ::pread(fd, cursor, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, "read error at byte " + std::to_string(offset) + ": " + errno_text());
    if (got == 0)
      fail(path, "file shrank while being read (at byte " + std::to_string(offset) + ")");
    cursor += got;
    offset += static_cast<uint64_t>(got);
    size -= static_cast<uint64_t>(got);
  }
}

// Parses the header; rejects invalid JSON and duplicate keys (which plain parsing would merge).
json parse_header(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> open_objects;  // keys seen so far in each enclosing object
  std::optional<std::string> duplicate;
  bool duplicate_is_tensor_name = false;
  auto track_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) open_objects.pop_back();
    if (event == json::parse_event_t::key && !duplicate &&
        !open_objects.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
      duplicate_is_tensor_name = open_objects.size() == 1;
    }
    return true;
  };
  const json header = parse_json(text, path + ": header", track_keys);
  if (duplicate && duplicate_is_tensor_name)
    fail(path, "duplicate tensor name '" + *duplicate + "'");
  if (duplicate) fail(path, "duplicate key '" + *duplicate + "' in header");
  if (!header.is_object())
    fail(path, std::string("header is a JSON ") + header.type_name() + ", not an object");
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
  if (!value.is_object())
    fail(path, std::string("__metadata__ is a JSON ") + value.type_name() + ", not an object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      fail(path, "__metadata__ value of '" + key + "' is a JSON " + item.type_name() +
                     ", not a string: " + short_dump(item));
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

Entry parse_entry(const std::string& path, const std::string& name, const json& value,
                  uint64_t data_size) {
  auto bad = [&](const std::string& what) { fail(path, "tensor '" + name + "' " + what); };
  if (!value.is_object())
    bad(std::string("entry is a JSON ") + value.type_name() + ", not an object");
  for (const auto& [key, item] : value.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      bad("has unknown key '" + key + "'");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) bad(std::string("has no \"") + key + "\"");

  Entry entry{name, DType::F32, {}, 0, 0};
  const json& dtype = value["dtype"];
  if (!dtype.is_string()) bad("dtype is not a string: " + short_dump(dtype));
  std::optional<DType> known = dtype_from_name(dtype.get<std::string>());
  if (!known)
    bad("has unsupported dtype '" + dtype.get<std::string>() +
        "' (normlab reads F32, F64, F16, BF16, I32, I64)");
  entry.dtype = *known;

  const json& shape = value["shape"];
  if (!shape.is_array()) bad("shape is not a list: " + short_dump(shape));
  for (const json& dim : shape) {
    if (dim.is_number_integer() && !dim.is_number_unsigned())
      bad("has negative dim " + dim.dump() + " in shape " + short_dump(shape));
    if (!dim.is_number_unsigned())
      bad("shape must hold non-negative integers: " + short_dump(shape));
    if (dim.get<uint64_t>() > max_tensor_bytes)
      bad("has dim " + dim.dump() + " beyond 2^62 in shape " + short_dump(shape));
    entry.shape.push_back(dim.get<int64_t>());
  }
  const std::string shape_dtype = shape_text(entry.shape) + " " + dtype_name(entry.dtype);

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad("data_offsets must be [begin, end] of non-negative integers: " + short_dump(offsets));
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  const std::string range = "data_offsets " + offsets_text(entry.begin, entry.end);
  if (entry.begin > entry.end) bad("has " + range + " with begin > end");
  std::optional<uint64_t> needed = byte_count(entry.shape, entry.dtype);
  if (!needed) bad("shape " + shape_dtype + " is larger than 2^62 bytes");
  if (entry.end - entry.begin != *needed)
    bad("has " + range + " but shape " + shape_dtype + " needs " + std::to_string(*needed) +
        " bytes");
  if (entry.end > data_size)
    bad("has " + range + " beyond the data section of " + std::to_string(data_size) +
        " bytes (file truncated?)");
  return entry;
}

// The tensors tile the data section exactly (the format forbids holes, so that no other content can
// hide in a file): two tensors may not share a byte, none may leave a gap before the next, and the
// last ends where the file does. Sorted by begin, every violation shows up between neighbours.
// (An empty tensor occupies no byte and may sit at any offset within the section.)
void check_tiling(const std::string& path, std::vector<const Entry*> entries, uint64_t data_size) {
  std::erase_if(entries, [](const Entry* e) { return e->begin == e->end; });
  std::sort(entries.begin(), entries.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  uint64_t covered = 0;  // the data section is tiled up to here
  const Entry* prev = nullptr;
  for (const Entry* next : entries) {
    if (prev && next->begin < prev->end)
      fail(path, "tensors '" + prev->name + "' " + offsets_text(prev->begin, prev->end) + " and '" +
                     next->name + "' " + offsets_text(next->begin, next->end) + " overlap");
    if (next->begin > covered)
      fail(path, "bytes " + offsets_text(covered, next->begin) + " of the data section belong to no tensor (a gap " +
                     (prev ? "after tensor '" + prev->name + "'" : std::string("before the first tensor")) +
                     "; the format forbids holes)");
    covered = next->end;
    prev = next;
  }
  if (covered < data_size)
    fail(path, std::to_string(data_size - covered) + " trailing bytes after the last tensor (the data section is " +
                   std::to_string(data_size) + " bytes, the tensors end at " + std::to_string(covered) +
                   "; the format forbids them)");
}

// ---------------------------------------------------------------------------------------------
// Writing

// Checks the caller's tensors and returns the header text, padded with spaces to a multiple of 8.
std::string build_header(const std::string& path, const std::vector<TensorView>& tensors,
                         const std::map<std::string, std::string>& metadata,
                         std::vector<uint64_t>& sizes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorView& view : tensors) {
    const std::string tensor = "tensor '" + view.name + "'";
    if (view.name == "__metadata__") fail(path, "a tensor may not be named '__metadata__'");
    if (!names.insert(view.name).second) fail(path, "duplicate tensor name '" + view.name + "'");
    for (int64_t dim : view.shape)
      if (dim < 0) fail(path, tensor + " has negative dim in shape " + shape_text(view.shape));
    std::optional<uint64_t> size = byte_count(view.shape, view.dtype);
    if (!size || offset + *size > max_tensor_bytes)
      fail(path, tensor + " shape " + shape_text(view.shape) + " makes the file exceed 2^62 bytes");
    if (*size > 0 && view.data == nullptr) fail(path, tensor + " has no data (null pointer)");
    header[view.name] = {{"dtype", dtype_name(view.dtype)},
                         {"shape", view.shape},
                         {"data_offsets", {offset, offset + *size}}};
    sizes.push_back(*size);
    offset += *size;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {  // e.g. a name that is not UTF-8
    fail(path, std::string("cannot encode header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

bool path_exists(const std::string& path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0;  // a dangling symlink counts: it would be replaced
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// DType and Tensor

size_t dtype_size(DType dtype) { return dtype_info(dtype).size; }
const char* dtype_name(DType dtype) { return dtype_info(dtype).name; }

std::optional<DType> dtype_from_name(const std::string& name) {
  for (const DTypeInfo& info : dtype_table)
    if (name == info.name) return info.dtype;
  return std::nullopt;
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::vector<float> Tensor::as_f32() const {
  return copy_elements<float>(*this, DType::F32, "as_f32");
}
std::vector<double> Tensor::as_f64() const {
  return copy_elements<double>(*this, DType::F64, "as_f64");
}
std::vector<int32_t> Tensor::as_i32() const {
  return copy_elements<int32_t>(*this, DType::I32, "as_i32");
}
std::vector<int64_t> Tensor::as_i64() const {
  return copy_elements<int64_t>(*this, DType::I64, "as_i64");
}

std::vector<float> Tensor::to_f32() const {
  const size_t n = size_t(numel());
  std::vector<float> out(n);
  switch (dtype) {
    case DType::F32: return as_f32();
    case DType::F64: {
      const std::vector<double> d = as_f64();
      for (size_t i = 0; i < n; i++) out[i] = float(d[i]);
      return out;
    }
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < n; i++) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = dtype == DType::F16 ? half_to_float(h) : bf16_to_float(h);
      }
      return out;
    case DType::I32:
    case DType::I64:
      break;
  }
  throw Error(std::string("to_f32: tensor is ") + dtype_name(dtype) + ", not a floating type");
}

// ---------------------------------------------------------------------------------------------
// File, read, write

const Tensor& File::at(const std::string& name) const {
  auto found = tensors.find(name);
  if (found == tensors.end()) fail(path, "no tensor '" + name + "'");
  return found->second;
}

const Tensor& File::expect(const std::string& name, DType dtype,
                           const std::vector<int64_t>& shape) const {
  const Tensor& tensor = at(name);
  if (tensor.dtype != dtype || tensor.shape != shape)
    fail(path, "tensor '" + name + "' is " + dtype_name(tensor.dtype) + " " +
                   shape_text(tensor.shape) + ", expected " + dtype_name(dtype) + " " +
                   shape_text(shape));
  return tensor;
}

// The first bytes of a file that is not safetensors, quoted as text when they are text ("hello wo")
// and as hex otherwise, for the message that names the file as such.
std::string quote_start(const unsigned char* bytes, size_t n) {
  const bool text = std::all_of(bytes, bytes + n, [](unsigned char c) { return c == '\n' || c == '\t' || (c >= 32 && c < 127); });
  std::string out;
  for (size_t i = 0; i < n; i++) {
    if (text) out += (bytes[i] == '\n' || bytes[i] == '\t') ? ' ' : char(bytes[i]);
    else {
      if (i) out += ' ';
      out += "0123456789abcdef"[bytes[i] >> 4];
      out += "0123456789abcdef"[bytes[i] & 15];
    }
  }
  return text ? "the text \"" + out + "\"" : "the bytes " + out;
}

[[noreturn]] void not_safetensors(const std::string& path, const std::string& why) {
  throw Error(path + " is not a safetensors file: " + why +
              " (a safetensors file starts with an 8-byte little-endian header length and then a JSON header '{')");
}

Index read_index(const std::string& path) {
  require_regular_file(path, "safetensors file");
  FileDescriptor fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) fail(path, "cannot open for reading: " + errno_text());
  struct stat info;
  if (::fstat(fd.fd, &info) != 0) fail(path, "cannot stat: " + errno_text());
  if (!S_ISREG(info.st_mode)) fail(path, "not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  if (file_size < 8) not_safetensors(path, "it is only " + std::to_string(file_size) + " bytes long");

  unsigned char start[9] = {};  // the header length and the header's first byte
  const size_t start_size = std::min<uint64_t>(file_size, 9);
  read_exact(path, fd.fd, start, start_size, 0);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | start[i];
  // Not safetensors at all (a text file, random bytes) rather than a damaged one: the length is
  // beyond the file and no JSON header starts where it should. (A length within the file is left to
  // the header checks below, which name what is wrong with it.)
  const bool brace = start_size == 9 && start[8] == '{';
  if (header_size > file_size - 8 && !brace) not_safetensors(path, "it begins with " + quote_start(start, start_size));
  if (header_size > file_size - 8)
    fail(path, "header length " + std::to_string(header_size) + " exceeds the " +
                   std::to_string(file_size - 8) +
                   " bytes after it (truncated or not safetensors?)");
  if (header_size > max_header_bytes)
    fail(path, "header length " + std::to_string(header_size) + " exceeds the 100 MB limit");

  std::string header_text(header_size, '\0');
  read_exact(path, fd.fd, header_text.data(), header_size, 8);
  const json header = parse_header(path, header_text);

  Index index;
  index.path = path;
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__")
      index.metadata = parse_metadata(path, value);
    else
      entries.push_back(parse_entry(path, name, value, data_size));
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& entry : entries) by_offset.push_back(&entry);
  check_tiling(path, by_offset, data_size);
  for (Entry& entry : entries)
    index.tensors.emplace(entry.name, Index::Entry{entry.dtype, std::move(entry.shape), data_start + entry.begin,
                                                   entry.end - entry.begin});
  return index;
}

const Index::Entry& Index::expect(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const {
  auto found = tensors.find(name);
  if (found == tensors.end()) fail(path, "no tensor '" + name + "'");
  const Entry& entry = found->second;
  if (entry.dtype != dtype || entry.shape != shape)
    fail(path, "tensor '" + name + "' is " + dtype_name(entry.dtype) + " " + shape_text(entry.shape) + ", expected " +
                   dtype_name(dtype) + " " + shape_text(shape));
  return entry;
}

void read_tensor(const Index& index, const std::string& name, void* dst) {
  auto found = index.tensors.find(name);
  if (found == index.tensors.end()) fail(index.path, "no tensor '" + name + "'");
  FileDescriptor fd{::open(index.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) fail(index.path, "cannot open for reading: " + errno_text());
  read_exact(index.path, fd.fd, dst, found->second.size, found->second.offset);
}

// Reads and validates the whole file (read_index), then every tensor's bytes.
File read(const std::string& path) {
  Index index = read_index(path);
  File file;
  file.path = path;
  file.metadata = std::move(index.metadata);
  FileDescriptor fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) fail(path, "cannot open for reading: " + errno_text());
  for (auto& [name, entry] : index.tensors) {
    Tensor tensor{entry.dtype, std::move(entry.shape), {}};
    tensor.bytes.resize(entry.size);
    read_exact(path, fd.fd, tensor.bytes.data(), entry.size, entry.offset);
    file.tensors.emplace(name, std::move(tensor));
  }
  return file;
}

void write(const std::string& path, const std::vector<TensorView>& tensors,
           const std::map<std::string, std::string>& metadata, bool overwrite) {
  std::vector<uint64_t> sizes;
  const std::string header = build_header(path, tensors, metadata, sizes);
  if (!overwrite && path_exists(path)) fail(path, "already exists (and overwrite is off)");

  AtomicFile file(path);  // "<path>.tmp.<pid>", removed on any failure
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i)
    length_bytes[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  file.write(length_bytes, 8);
  file.write(header);
  for (size_t i = 0; i < tensors.size(); ++i) file.write(tensors[i].data, sizes[i]);
  file.commit(overwrite);
}

}  // namespace normlab::safetensors
