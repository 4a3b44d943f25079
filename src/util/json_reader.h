// json_reader.h: strict reading of a JSON object into typed fields: every missing-but-optional key
// keeps its default, every ill-typed value and every unknown key becomes one line of a single error
// message. TOML configs are converted to JSON first, so one reader serves TOML, JSON and --set.
#pragma once

#include <nlohmann/json.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <string>
#include <vector>

namespace normlab {

class JsonReader {
 public:
  // `where` names the source in messages, e.g. "config.toml [model]". obj must be an object (a
  // table): anything else is an error line of finish().
  JsonReader(const nlohmann::json& obj, std::string where);

  void get(const char* key, int& out);
  void get(const char* key, long& out);
  void get(const char* key, double& out);
  void get(const char* key, bool& out);
  void get(const char* key, std::string& out);
  // true if the key is present (and marks it used); the caller reads it via raw().
  bool has(const char* key);
  const nlohmann::json& raw(const char* key) const { return obj_.at(key); }

  void fail(const std::string& message) { errors_.push_back(message); }
  // Appends "unknown key" errors for keys never read (each with the nearest key that was asked for,
  // when one is close: "did you mean 'lr'?"); returns all error lines.
  std::vector<std::string> finish();
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
  std::set<std::string> used_;
  std::vector<std::string> known_;  // every key asked for, in order: the valid keys of this table
  std::vector<std::string> errors_;
};

// Every JSON normlab reads from outside goes through parse_json: nlohmann::json copies, compares
// and dumps values recursively, so a value nested 200,000 deep (a few hundred kB of '[') would
// overflow the stack. parse_json scans the bracket depth first (outside strings) and refuses more
// than kMaxJsonDepth levels; a value it returns can be copied and dumped safely. Any parse error
// becomes Error "<where>: not valid JSON: <what> (byte N)"; `callback` is nlohmann's parser callback.
inline constexpr int kMaxJsonDepth = 512;
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          const nlohmann::json::parser_callback_t& callback = nullptr);
// parse(text, nullptr, false) behind the same depth guard: a discarded value (is_discarded()) when
// the text is not JSON or nests deeper than kMaxJsonDepth.
nlohmann::json parse_json_or_discarded(std::string_view text);
// Error "<where>: JSON nested deeper than 512 levels (at byte N)" if so; nothing otherwise.
void check_json_depth(std::string_view text, const std::string& where);
// dump() that never throws on invalid UTF-8 in strings (replaced by U+FFFD) and refuses values
// nested deeper than kMaxJsonDepth (built, not parsed, from outside input).
std::string dump_json(const nlohmann::json& value, int indent = -1);

// Checked conversion of a JSON number to an integer type: nullopt unless it is an integer (or a
// float with no fraction) within the range of I. Never UB for 1e300, NaN or 2^64.
template <class I>
std::optional<I> json_integer(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<I>::max())) return std::nullopt;
    return I(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < int64_t(std::numeric_limits<I>::min()) || (i > 0 && uint64_t(i) > uint64_t(std::numeric_limits<I>::max())))
      return std::nullopt;
    return I(i);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // the bounds are exact powers of two: -2^(bits-1) and 2^(bits-1) (or 2^bits unsigned)
    if (!(d == std::floor(d)) || !(d >= double(std::numeric_limits<I>::min())) ||
        !(d < 2.0 * double(std::numeric_limits<I>::max() / 2 + 1)))
      return std::nullopt;
    return I(d);
  }
  return std::nullopt;
}

[[noreturn]] void throw_named(const std::string& where, const std::string& what);  // Error "<where>: <what>"

// Runs fn(); a library exception from reading a JSON document (nlohmann's type_error, out_of_range,
// a range-checked conversion of json_assert.h) becomes Error "<where>: <what>", so the message names
// the file. The readers of outside JSON wrap their work in it.
template <class F>
auto naming_json_errors(const std::string& where, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const nlohmann::json::exception& e) {
    throw_named(where, e.what());
  } catch (const std::out_of_range& e) {
    throw_named(where, e.what());
  } catch (const std::domain_error& e) {
    throw_named(where, e.what());
  }
}
// Joins error lines into one message: "<title>:\n  - line\n  - line".
std::string join_errors(const std::string& title, const std::vector<std::string>& lines);

}  // namespace normlab
