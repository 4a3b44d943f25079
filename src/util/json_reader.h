// json_reader.h: strict reading of a JSON object into typed fields: every missing-but-optional key
// keeps its default, every ill-typed value and every unknown key becomes one line of a single error
// message. TOML configs are converted to JSON first, so one reader serves TOML, JSON and --set.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace normlab {

class JsonReader {
 public:
  // `where` names the source in messages, e.g. "config.toml [model]".
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

// Joins error lines into one message: "<title>:\n  - line\n  - line".
std::string join_errors(const std::string& title, const std::vector<std::string>& lines);

}  // namespace normlab
