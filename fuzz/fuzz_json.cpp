// fuzz_json.cpp: libFuzzer harness of the JSON reader every outside JSON document goes through
// (util/json_reader.h): parse_json's depth guard and parse, dump_json, parse_json_or_discarded, and
// JsonReader's typed, range-checked reads of every key as each type (int, long, double, bool,
// string), with the checked integer conversions.
#include "fuzz/fuzz_util.h"
#include "util/json_reader.h"

namespace {

template <class T>
void read_every_key_as(const nlohmann::json& obj) {
  normlab::JsonReader r(obj, "fuzz");
  for (const auto& [key, value] : obj.items()) {
    T out{};
    r.get(key.c_str(), out);
  }
  r.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  normlab::parse_json_or_discarded(text);
  normlab::fuzz::expect_clean([&] {
    const nlohmann::json doc = normlab::parse_json(text, "fuzz");
    normlab::dump_json(doc);
    normlab::dump_json(doc, 2);
    if (!doc.is_object()) return;
    read_every_key_as<int>(doc);
    read_every_key_as<long>(doc);
    read_every_key_as<double>(doc);
    read_every_key_as<bool>(doc);
    read_every_key_as<std::string>(doc);
    for (const auto& [key, value] : doc.items()) {
      normlab::json_integer<int32_t>(value);
      normlab::json_integer<uint64_t>(value);
      normlab::json_integer<int64_t>(value);
    }
  });
  return 0;
}
