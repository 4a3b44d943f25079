// test_safetensors.cpp: the safetensors reader/writer. Round trips, the atomic writer's refusals
// and failures, a corruption suite (every error names the file, nothing crashes), and interop with
// the official Python package (tests/safetensors_interop.py; skipped unless NORMLAB_PYTHON is set).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "util/error.h"

namespace st = normlab::safetensors;
namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

namespace {

// A fresh directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("normlab_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);  // empty if SetUp skipped
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A hand-made file: u64 little-endian header length (by default the header's), header, data.
Bytes raw_file(const std::string& header, size_t data_size,
               std::optional<uint64_t> header_length = std::nullopt) {
  const uint64_t length = header_length.value_or(header.size());
  Bytes bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<unsigned char>(length >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_size; ++i) bytes.push_back(static_cast<unsigned char>(i));
  return bytes;
}

uint64_t header_length_of(const Bytes& file) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | file.at(static_cast<size_t>(i));
  return length;
}

// read(path) must throw normlab::Error naming the file and containing `what`.
void expect_read_error(const std::string& path, const std::string& what) {
  try {
    st::read(path);
    ADD_FAILURE() << "read(" << path << ") accepted a file that should fail with: " << what;
  } catch (const normlab::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << "expected '" << what << "' in: " << message;
  }
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const normlab::Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct Sample {  // one tensor of each dtype, incl. a scalar and an empty tensor
  std::vector<float> f32{0.5f, -1.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
  std::vector<double> f64{3.141592653589793};
  std::vector<int32_t> i32{1, -2, 2147483647, -2147483647 - 1};
  std::vector<int64_t> i64{};
  std::vector<st::TensorView> views() const {
    return {{"w.f32", st::DType::F32, {2, 3}, f32.data()},
            {"scalar.f64", st::DType::F64, {}, f64.data()},
            {"ids.i32", st::DType::I32, {4}, i32.data()},
            {"empty.i64", st::DType::I64, {0, 3}, nullptr}};
  }
};

TEST_F(SafetensorsTest, RoundTripAllDtypesScalarEmptyAndMetadata) {
  Sample sample;
  std::map<std::string, std::string> metadata{
      {"config", R"({"d_model": 8, "q": "\"x\""})"}, {"note", "caf\u00e9 \u2713"}, {"empty", ""}};
  st::write(file("m.safetensors"), sample.views(), metadata, false);
  st::File f = st::read(file("m.safetensors"));
  EXPECT_EQ(f.path, file("m.safetensors"));
  EXPECT_EQ(f.metadata, metadata);
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.expect("w.f32", st::DType::F32, {2, 3}).as_f32(), sample.f32);
  const st::Tensor& scalar = f.expect("scalar.f64", st::DType::F64, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.as_f64(), sample.f64);
  EXPECT_EQ(f.expect("ids.i32", st::DType::I32, {4}).as_i32(), sample.i32);
  const st::Tensor& empty = f.expect("empty.i64", st::DType::I64, {0, 3});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.as_i64().empty());
  EXPECT_EQ(listing(), std::vector<std::string>{"m.safetensors"});  // no temporary left
}

// The index (what a big model's loader reads first) holds what read() holds but the bytes, and
// read_tensor gives each tensor's bytes exactly; a file cut after its index was read is an error
// naming it, not garbage.
TEST_F(SafetensorsTest, IndexAndReadTensorEqualTheWholeRead) {
  Sample sample;
  const std::map<std::string, std::string> metadata{{"config", "{}"}};
  st::write(file("m.safetensors"), sample.views(), metadata, false);
  const st::File whole = st::read(file("m.safetensors"));
  const st::Index index = st::read_index(file("m.safetensors"));
  EXPECT_EQ(index.path, file("m.safetensors"));
  EXPECT_EQ(index.metadata, whole.metadata);
  ASSERT_EQ(index.tensors.size(), whole.tensors.size());
  for (const auto& [name, tensor] : whole.tensors) {
    const st::Index::Entry& entry = index.expect(name, tensor.dtype, tensor.shape);
    ASSERT_EQ(entry.size, tensor.bytes.size()) << name;
    Bytes got(entry.size + 1, 0xAB);  // (one guard byte: nothing past the tensor is written)
    st::read_tensor(index, name, got.data());
    EXPECT_EQ(Bytes(got.begin(), got.end() - 1), tensor.bytes) << name;
    EXPECT_EQ(got.back(), 0xAB) << name;
  }
  EXPECT_THROW((void)index.expect("w.f32", st::DType::F64, {2, 3}), normlab::Error);
  EXPECT_THROW((void)index.expect("nope", st::DType::F32, {2, 3}), normlab::Error);
  Bytes bytes = read_bytes(file("m.safetensors"));
  bytes.resize(bytes.size() - 8);
  write_bytes(file("m.safetensors"), bytes);
  int32_t out[4];  // (ids.i32 is the last tensor with bytes: the cut is in it)
  try {
    st::read_tensor(index, "ids.i32", out);
    FAIL() << "a file cut after its index was read gave no error";
  } catch (const normlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find(file("m.safetensors")), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, LayoutKeepsOrderIsContiguousAndPadded) {
  std::vector<float> a{1, 2, 3};
  std::vector<int64_t> b{4};
  std::vector<int32_t> c{5, 6};
  st::write(file("o.safetensors"),
            {{"z", st::DType::F32, {3}, a.data()},
             {"a", st::DType::I64, {1}, b.data()},
             {"m", st::DType::I32, {2}, c.data()}},
            {{"k", "v"}}, false);
  Bytes bytes = read_bytes(file("o.safetensors"));
  const uint64_t n = header_length_of(bytes);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12 + 8 + 8);
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  auto ordered = nlohmann::ordered_json::parse(header);
  std::vector<std::string> keys;
  for (const auto& [key, value] : ordered.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "z", "a", "m"}));
  EXPECT_EQ(ordered["z"]["data_offsets"], nlohmann::ordered_json({0, 12}));
  EXPECT_EQ(ordered["a"]["data_offsets"], nlohmann::ordered_json({12, 20}));
  EXPECT_EQ(ordered["m"]["data_offsets"], nlohmann::ordered_json({20, 28}));
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find_last_of('}') + 1);  // pad is spaces
}

TEST_F(SafetensorsTest, EmptyFileRoundTrips) {
  st::write(file("e.safetensors"), {}, {}, false);
  st::File f = st::read(file("e.safetensors"));
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.metadata.empty());
}

TEST_F(SafetensorsTest, RefusesToOverwriteUnlessAsked) {
  std::vector<float> one{1}, two{2};
  const std::string path = file("x.safetensors");
  st::write(path, {{"t", st::DType::F32, {1}, one.data()}}, {}, false);
  const Bytes original = read_bytes(path);
  std::string message = error_of([&] {
    st::write(path, {{"t", st::DType::F32, {1}, two.data()}}, {}, false);
  });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("already exists"), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), original);
  EXPECT_EQ(listing(), std::vector<std::string>{"x.safetensors"});
  st::write(path, {{"t", st::DType::F32, {1}, two.data()}}, {}, true);
  EXPECT_EQ(st::read(path).at("t").as_f32(), two);
  EXPECT_EQ(listing(), std::vector<std::string>{"x.safetensors"});
}

TEST_F(SafetensorsTest, UnwritableDirectoryIsAnError) {
  write_bytes(file("plain"), {1, 2, 3});
  std::vector<float> data{1};
  for (const std::string& path :
       {file("plain") + "/x.safetensors", std::string("/proc/nonexistent/x.safetensors")}) {
    std::string message = error_of([&] {
      st::write(path, {{"t", st::DType::F32, {1}, data.data()}}, {}, true);
    });
    EXPECT_NE(message.find(path), std::string::npos) << message;
  }
  EXPECT_EQ(read_bytes(file("plain")), (Bytes{1, 2, 3}));
  EXPECT_EQ(listing(), std::vector<std::string>{"plain"});
}

// A write that fails half-way (file size limit -> EFBIG) leaves the old file and no temporary.
TEST_F(SafetensorsTest, FailedWriteLeavesNoPartialFile) {
  const std::string path = file("big.safetensors");
  std::vector<float> small{1}, big(1 << 16, 2.0f);
  st::write(path, {{"t", st::DType::F32, {1}, small.data()}}, {}, false);
  const Bytes original = read_bytes(path);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit limited = saved;
  limited.rlim_cur = 4096;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message = error_of([&] {
    st::write(path, {{"t", st::DType::F32, {1 << 16}, big.data()}}, {}, true);
  });
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), original);
  EXPECT_EQ(listing(), std::vector<std::string>{"big.safetensors"});
}

TEST_F(SafetensorsTest, WriteRejectsBadTensors) {
  std::vector<float> data{1, 2};
  const std::string path = file("bad.safetensors");
  auto write_error = [&](std::vector<st::TensorView> views) {
    return error_of([&] { st::write(path, views, {}, true); });
  };
  std::vector<std::pair<std::string, std::vector<st::TensorView>>> cases = {
      {"duplicate tensor name 'a'",
       {{"a", st::DType::F32, {1}, &data[0]}, {"a", st::DType::F32, {1}, &data[1]}}},
      {"'__metadata__'", {{"__metadata__", st::DType::F32, {1}, data.data()}}},
      {"negative dim", {{"a", st::DType::F32, {2, -1}, data.data()}}},
      {"null pointer", {{"a", st::DType::F32, {2}, nullptr}}},
      {"2^62", {{"a", st::DType::F32, {1ll << 31, 1ll << 31}, data.data()}}},
      {"cannot encode header", {{"bad\xff", st::DType::F32, {1}, data.data()}}},
  };
  for (const auto& [what, views] : cases) {
    std::string message = write_error(views);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << "expected '" << what << "' in: " << message;
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, AtExpectAndConversionsCheckNamesAndTypes) {
  std::vector<int32_t> ids{1, 2};
  st::write(file("t.safetensors"), {{"ids", st::DType::I32, {2}, ids.data()}}, {}, false);
  st::File f = st::read(file("t.safetensors"));
  EXPECT_EQ(error_of([&] { f.at("nope"); }), file("t.safetensors") + ": no tensor 'nope'");
  EXPECT_EQ(error_of([&] { f.expect("ids", st::DType::F32, {2}); }),
            file("t.safetensors") + ": tensor 'ids' is I32 [2], expected F32 [2]");
  EXPECT_THROW(f.at("ids").as_f32(), normlab::Error);
  EXPECT_THROW(f.at("ids").as_i64(), normlab::Error);
}

TEST_F(SafetensorsTest, MissingFileAndDirectoryAreErrors) {
  expect_read_error(file("missing.safetensors"), "cannot open");
  expect_read_error(dir_.string(), "expected a file; '" + dir_.string() + "' is a");
}

// A file that is not safetensors at all is named as such, not reported as an absurd header length.
TEST_F(SafetensorsTest, TextAndRandomBytesAreNotSafetensors) {
  write_bytes(file("x.txt"), Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  expect_read_error(file("x.txt"), file("x.txt") + " is not a safetensors file: it begins with the text \"hello wo");
  write_bytes(file("short.txt"), Bytes{'h', 'i'});
  expect_read_error(file("short.txt"), "is not a safetensors file: it is only 2 bytes long");
  Bytes noise(64);
  for (size_t i = 0; i < noise.size(); i++) noise[i] = static_cast<unsigned char>(0x80 + i * 37 % 100);
  write_bytes(file("noise.bin"), noise);
  expect_read_error(file("noise.bin"), "is not a safetensors file: it begins with the bytes 80");
}

TEST_F(SafetensorsTest, EveryTruncationIsAnError) {
  Sample sample;
  st::write(file("full.safetensors"), sample.views(), {{"k", "v"}}, false);
  const Bytes full = read_bytes(file("full.safetensors"));
  for (size_t length = 0; length < full.size(); ++length) {
    SCOPED_TRACE("prefix length " + std::to_string(length));
    write_bytes(file("cut.safetensors"),
                Bytes(full.begin(), full.begin() + static_cast<long>(length)));
    expect_read_error(file("cut.safetensors"), "");
  }
}

// Any single-byte corruption of the header either still parses or gives normlab::Error.
TEST_F(SafetensorsTest, ByteFlipsGiveErrorsNotCrashes) {
  Sample sample;
  st::write(file("full.safetensors"), sample.views(), {{"k", "v"}}, false);
  const Bytes full = read_bytes(file("full.safetensors"));
  const uint64_t header_end = 8 + header_length_of(full);
  int rejected = 0;
  for (uint64_t at = 0; at < header_end; ++at) {
    for (int value : {0x00, 0x01, 0x20, 0x22, 0x2d, 0x39, 0x5d, 0x7d, 0x80, 0xff}) {
      Bytes bytes = full;
      bytes[at] = static_cast<unsigned char>(value);
      write_bytes(file("flip.safetensors"), bytes);
      try {
        st::read(file("flip.safetensors"));
      } catch (const normlab::Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST_F(SafetensorsTest, HeaderLengthOutOfRange) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  for (uint64_t length : {UINT64_MAX, uint64_t{1} << 63, uint64_t{header.size() + 5}}) {
    write_bytes(file("h.safetensors"), raw_file(header, 4, length));
    expect_read_error(file("h.safetensors"), "exceeds the");
  }
  // A file big enough (sparse) that only the 100 MB limit stops a 100 MB + 1 header.
  write_bytes(file("huge.safetensors"), raw_file("", 0, st::max_header_bytes + 1));
  fs::resize_file(file("huge.safetensors"), st::max_header_bytes + 64);
  expect_read_error(file("huge.safetensors"), "100 MB limit");
}

TEST_F(SafetensorsTest, CorruptHeadersAreErrors) {
  // A header with one tensor 'a' (dtype unquoted; shape and offsets as JSON text).
  auto one = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"a":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" +
           offsets + "}}";
  };
  struct Case {
    std::string header;
    size_t data_size;
    std::string what;
  };
  const std::vector<Case> cases = {
      {"", 0, "not valid JSON"},
      {"not json", 0, "not valid JSON"},
      {R"({"a": )", 0, "not valid JSON"},
      {std::string("{\"a\0\": 1}", 9), 0, "not valid JSON"},
      {"{\"caf\xe9\": 1}", 0, "not valid JSON"},
      {"[1, 2]", 0, "header is a JSON array, not an object"},
      {"42", 0, "not an object"},
      {R"({"a": 3})", 0, "tensor 'a' entry is a JSON number, not an object"},
      {one("F8_E4M3", "[2]", "[0,2]"), 2, "unsupported dtype 'F8_E4M3'"},
      {R"({"a":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", 4, "dtype is not a string"},
      {one("F32", "[2,-1]", "[0,4]"), 4, "tensor 'a' has negative dim -1"},
      {one("F32", "[2.5]", "[0,4]"), 4, "non-negative integers"},
      {one("F32", "[1e30]", "[0,4]"), 4, "non-negative integers"},
      {one("F32", "2", "[0,8]"), 8, "shape is not a list"},
      {one("F32", "[18446744073709551615]", "[0,4]"), 4, "beyond 2^62"},
      {one("F32", "[4294967296,4294967296,4]", "[0,4]"), 4, "larger than 2^62"},
      {one("I64", "[2147483648,2147483648]", "[0,4]"), 4, "larger than 2^62"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", 4, R"(tensor 'a' has no "data_offsets")"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4, "unknown key 'x'"},
      {one("F32", "[1]", "[0]"), 4, "data_offsets must be [begin, end]"},
      {one("F32", "[1]", "[-4,0]"), 4, "data_offsets must be [begin, end]"},
      {one("F32", "[1]", "[8,4]"), 8, "[8, 4] with begin > end"},
      {one("F32", "[4]", "[0,16]"), 8, "beyond the data section of 8 bytes"},
      {one("F32", "[1]", "[18446744073709551612,18446744073709551615]"), 4, "needs 4 bytes"},
      {R"({"wte.weight":{"dtype":"F32","shape":[5,3],"data_offsets":[0,100]}})", 100,
       "tensor 'wte.weight' has data_offsets [0, 100] but shape [5, 3] F32 needs 60 bytes"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})",
       12, "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "duplicate tensor name 'a'"},
      {R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4,
       "duplicate key 'dtype'"},
      {R"({"__metadata__": [1]})", 0, "__metadata__ is a JSON array, not an object"},
      {R"({"__metadata__": {"k": 1}})", 0, "__metadata__ value of 'k' is a JSON number"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].header);
    write_bytes(file("c.safetensors"), raw_file(cases[i].header, cases[i].data_size));
    expect_read_error(file("c.safetensors"), cases[i].what);
  }
}

// What the format allows but our writer never produces: header padding, data laid out in another
// order than the header, an empty tensor anywhere.
TEST_F(SafetensorsTest, AcceptsValidOddities) {
  const std::string header = R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},)"
                             R"("a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                             R"("e":{"dtype":"F64","shape":[2,0],"data_offsets":[2,2]},)"
                             R"("z":{"dtype":"I64","shape":[0,4611686018427387904,)"
                             R"(4611686018427387904],"data_offsets":[8,8]}}   )";
  write_bytes(file("odd.safetensors"), raw_file(header, 8));
  st::File f = st::read(file("odd.safetensors"));
  EXPECT_EQ(f.at("a").as_i32(), std::vector<int32_t>{0x03020100});
  EXPECT_EQ(f.at("b").as_i32(), std::vector<int32_t>{0x07060504});
  EXPECT_EQ(f.at("e").numel(), 0);
  EXPECT_EQ(f.at("z").numel(), 0);
}

// The format forbids holes: the tensors tile the data section exactly (no gap, no trailing bytes),
// so nothing else can hide in a file that reads as safetensors.
TEST_F(SafetensorsTest, GapsAndTrailingBytesAreErrors) {
  const std::string two = R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  write_bytes(file("gap.safetensors"), raw_file(two, 12));
  expect_read_error(file("gap.safetensors"), "bytes [4, 8] of the data section belong to no tensor");
  const std::string late = R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})";
  write_bytes(file("late.safetensors"), raw_file(late, 8));
  expect_read_error(file("late.safetensors"), "before the first tensor");
  const std::string one = R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  write_bytes(file("trail.safetensors"), raw_file(one, 5));
  expect_read_error(file("trail.safetensors"), "1 trailing bytes after the last tensor");
  write_bytes(file("none.safetensors"), raw_file("{}", 3));
  expect_read_error(file("none.safetensors"), "3 trailing bytes");
}

// A header nested 200,000 deep (in the tensors or the metadata) is refused before nlohmann::json
// recurses through it; a FIFO is refused before open() could block.
TEST_F(SafetensorsTest, DeepHeadersAndFifosAreErrors) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  write_bytes(file("deep.safetensors"), raw_file(R"({"a":)" + deep + "}", 0));
  expect_read_error(file("deep.safetensors"), "nested deeper than 512 levels");
  write_bytes(file("meta.safetensors"), raw_file(R"({"__metadata__":{"k":)" + deep + "}}", 0));
  expect_read_error(file("meta.safetensors"), "nested deeper than 512 levels");
  ASSERT_EQ(::mkfifo(file("fifo.safetensors").c_str(), 0644), 0);
  expect_read_error(file("fifo.safetensors"), "is a FIFO (named pipe), not a regular file");
}

// ---------------------------------------------------------------------------------------------
// Interop with the official package, through $NORMLAB_PYTHON and tests/safetensors_interop.py.

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The Python with the official package: $NORMLAB_PYTHON, else the one the build was configured
// with (scripts/test.sh configures build/pyenv); empty if neither.
std::string interop_python() {
  const char* env = std::getenv("NORMLAB_PYTHON");
  if (env != nullptr && *env != '\0') return env;
  return NORMLAB_PYTHON_CONFIGURED;
}

int run_interop(const std::vector<std::string>& args) {
  std::string command = shell_quote(interop_python());
  std::string script = NORMLAB_SOURCE_DIR;
  command.append(" ").append(shell_quote(script.append("/tests/safetensors_interop.py")));
  for (const std::string& arg : args) command.append(" ").append(shell_quote(arg));
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class Interop : public SafetensorsTest {
 protected:
  void SetUp() override {
    if (interop_python().empty())
      GTEST_SKIP() << "set NORMLAB_PYTHON to run interop tests";
    SafetensorsTest::SetUp();
  }
};

TEST_F(Interop, PythonReadsNormlabFile) {
  Sample sample;
  std::map<std::string, std::string> metadata{{"config", R"({"k": 1})"}, {"note", "caf\u00e9"}};
  st::write(file("n.safetensors"), sample.views(), metadata, false);
  nlohmann::json expect = {
      {"__metadata__", metadata},
      {"w.f32", {{"dtype", "float32"}, {"shape", {2, 3}}, {"values", sample.f32}}},
      {"scalar.f64",
       {{"dtype", "float64"}, {"shape", nlohmann::json::array()}, {"values", sample.f64}}},
      {"ids.i32", {{"dtype", "int32"}, {"shape", {4}}, {"values", sample.i32}}},
      {"empty.i64", {{"dtype", "int64"}, {"shape", {0, 3}}, {"values", nlohmann::json::array()}}}};
  std::ofstream(file("expect.json")) << expect.dump();
  EXPECT_EQ(run_interop({"check", file("n.safetensors"), file("expect.json")}), 0);
  // The checker must be able to fail: a wrong value is reported with a non-zero exit.
  expect["ids.i32"]["values"][0] = 99;
  std::ofstream(file("wrong.json")) << expect.dump();
  EXPECT_NE(run_interop({"check", file("n.safetensors"), file("wrong.json")}), 0);
}

TEST_F(Interop, NormlabReadsPythonFile) {
  ASSERT_EQ(run_interop({"write", file("p.safetensors")}), 0);
  st::File f = st::read(file("p.safetensors"));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"config", R"({"k": 1})"}}));
  EXPECT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.expect("a", st::DType::F32, {2, 3}).as_f32(),
            (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  EXPECT_EQ(f.expect("b", st::DType::I32, {2, 2}).as_i32(), (std::vector<int32_t>{1, -2, 3, 4}));
  EXPECT_EQ(f.expect("c", st::DType::F64, {1}).as_f64(), std::vector<double>{1.25});
}

}  // namespace
