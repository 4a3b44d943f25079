// json_reader.cpp: the strict typed JSON object reader.
#include "util/json_reader.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "util/error.h"
#include "util/hints.h"

namespace normlab {

JsonReader::JsonReader(const nlohmann::json& obj, std::string where)
    : obj_(obj), where_(std::move(where)) {
  // `model = 5` would otherwise read as a table with no keys: every default, silently
  if (!obj_.is_object())
    errors_.push_back(fmt::format("{}: expected a table of keys, not a {} ({})", where_, obj_.type_name(),
                                  dump_json(obj_).substr(0, 60)));
}

bool JsonReader::has(const char* key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  if (!obj_.is_object() || !obj_.contains(key)) return false;
  used_.insert(key);
  return true;
}

void JsonReader::get(const char* key, int& out) {
  long v = out;
  get(key, v);
  if (v < INT32_MIN || v > INT32_MAX) {
    fail(fmt::format("{}: '{}' = {} is out of range", where_, key, v));
    return;
  }
  out = int(v);
}

void JsonReader::get(const char* key, long& out) {
  if (!has(key)) return;
  const auto& v = obj_.at(key);
  if (const auto i = json_integer<long>(v)) {
    out = *i;
  } else if (v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
    fail(fmt::format("{}: '{}' = {} is out of range", where_, key, v.dump()));
  } else {
    fail(fmt::format("{}: '{}' must be an integer, got {}", where_, key, dump_json(v)));
  }
}

void JsonReader::get(const char* key, double& out) {
  if (!has(key)) return;
  const auto& v = obj_.at(key);
  if (v.is_number()) {
    out = v.get<double>();
  } else {
    fail(fmt::format("{}: '{}' must be a number, got {}", where_, key, dump_json(v)));
  }
}

void JsonReader::get(const char* key, bool& out) {
  if (!has(key)) return;
  const auto& v = obj_.at(key);
  if (v.is_boolean()) {
    out = v.get<bool>();
  } else {
    fail(fmt::format("{}: '{}' must be true or false, got {}", where_, key, dump_json(v)));
  }
}

void JsonReader::get(const char* key, std::string& out) {
  if (!has(key)) return;
  const auto& v = obj_.at(key);
  if (v.is_string()) {
    out = v.get<std::string>();
  } else {
    fail(fmt::format("{}: '{}' must be a string, got {}", where_, key, dump_json(v)));
  }
}

std::vector<std::string> JsonReader::finish() {
  if (obj_.is_object()) {
    for (const auto& [key, value] : obj_.items())
      if (!used_.count(key)) errors_.push_back(fmt::format("{}: unknown key '{}'{}", where_, key, did_you_mean(key, known_)));
  } else if (!obj_.is_null()) {
    errors_.push_back(fmt::format("{}: expected a table, got {}", where_, dump_json(obj_)));
  }
  return errors_;
}

void check_json_depth(std::string_view text, const std::string& where) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw Error(fmt::format("{}: JSON nested deeper than {} levels (at byte {}); refused", where, kMaxJsonDepth, i));
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& where,
                          const nlohmann::json::parser_callback_t& callback) {
  check_json_depth(text, where);
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ...": keep the reason
    if (const auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    throw Error(fmt::format("{}: not valid JSON: {}", where, what));
  }
}

nlohmann::json parse_json_or_discarded(std::string_view text) {
  try {
    check_json_depth(text, "");
  } catch (const Error&) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
}

namespace {
int json_depth(const nlohmann::json& v, int limit) {  // depth up to limit + 1 (stops there)
  if (limit < 0 || !v.is_structured()) return 0;
  int deepest = 0;
  for (const auto& item : v) deepest = std::max(deepest, json_depth(item, limit - 1));
  return deepest + 1;
}
}  // namespace

std::string dump_json(const nlohmann::json& value, int indent) {
  if (json_depth(value, kMaxJsonDepth) > kMaxJsonDepth)
    throw Error(fmt::format("a JSON value nested deeper than {} levels cannot be written", kMaxJsonDepth));
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void throw_named(const std::string& where, const std::string& what) {
  std::string text = what;  // "[json.exception.type_error.302] type must be string": keep the reason
  if (const auto close = text.find("] "); text.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
    text = text.substr(close + 2);
  throw Error(fmt::format("{}: {}", where, text));
}

std::string join_errors(const std::string& title, const std::vector<std::string>& lines) {
  std::string msg = title + ":";
  for (const auto& l : lines) msg += "\n  - " + l;
  return msg;
}

}  // namespace normlab
