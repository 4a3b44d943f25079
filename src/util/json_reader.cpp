// json_reader.cpp: the strict typed JSON object reader.
#include "util/json_reader.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "util/hints.h"

namespace normlab {

JsonReader::JsonReader(const nlohmann::json& obj, std::string where)
    : obj_(obj), where_(std::move(where)) {}

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
  if (v.is_number_integer()) {
    out = v.get<long>();
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
    out = long(v.get<double>());
  } else {
    fail(fmt::format("{}: '{}' must be an integer, got {}", where_, key, v.dump()));
  }
}

void JsonReader::get(const char* key, double& out) {
  if (!has(key)) return;
  const auto& v = obj_.at(key);
  if (v.is_number()) {
    out = v.get<double>();
  } else {
    fail(fmt::format("{}: '{}' must be a number, got {}", where_, key, v.dump()));
  }
}

void JsonReader::get(const char* key, bool& out) {
  if (!has(key)) return;
  const auto& v = obj_.at(key);
  if (v.is_boolean()) {
    out = v.get<bool>();
  } else {
    fail(fmt::format("{}: '{}' must be true or false, got {}", where_, key, v.dump()));
  }
}

void JsonReader::get(const char* key, std::string& out) {
  if (!has(key)) return;
  const auto& v = obj_.at(key);
  if (v.is_string()) {
    out = v.get<std::string>();
  } else {
    fail(fmt::format("{}: '{}' must be a string, got {}", where_, key, v.dump()));
  }
}

std::vector<std::string> JsonReader::finish() {
  if (obj_.is_object()) {
    for (const auto& [key, value] : obj_.items())
      if (!used_.count(key)) errors_.push_back(fmt::format("{}: unknown key '{}'{}", where_, key, did_you_mean(key, known_)));
  } else if (!obj_.is_null()) {
    errors_.push_back(fmt::format("{}: expected a table, got {}", where_, obj_.dump()));
  }
  return errors_;
}

std::string join_errors(const std::string& title, const std::vector<std::string>& lines) {
  std::string msg = title + ":";
  for (const auto& l : lines) msg += "\n  - " + l;
  return msg;
}

}  // namespace normlab
