// tables.cpp: CSV tables of a study's results and of a run's metrics (tables.h).
#include "study/tables.h"

#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <set>
#include <sstream>

#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::study {

namespace {

using json = nlohmann::json;

// One RFC 4180 field: a number as the shortest text that reads back exactly, a string quoted when
// it holds a comma, a quote or a line break, true / false, and nothing for null or an absent value.
std::string field(const json& v) {
  if (v.is_null()) return "";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number()) return v.dump();  // the shortest text that reads back as the same double
  const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string row(const std::vector<json>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); i++) {
    if (i) out += ',';
    out += field(values[i]);
  }
  return out + "\r\n";
}

json at(const json& obj, const char* key) { return obj.is_object() && obj.contains(key) ? obj[key] : json(); }
json at(const json& arr, size_t i) { return arr.is_array() && i < arr.size() ? arr[i] : json(); }

}  // namespace

std::vector<std::string> write_study_tables(const json& results, const std::string& dir) {
  const json& runs = results.at("runs");
  // the grid keys, in the order the runs first name them
  std::vector<std::string> keys;
  for (const json& r : runs)
    if (r.contains("grid") && r["grid"].is_object())
      for (const auto& [k, v] : r["grid"].items())
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  const std::vector<std::string> finals = {"steps", "train_loss", "val_loss", "diverged", "diverged_step", "seconds",
                                           "tokens_per_s"};
  std::vector<json> header = {"name", "label", "status"};
  for (const auto& k : keys) header.push_back(k);
  for (const auto& k : finals) header.push_back(k);
  header.push_back("steps_to_target");
  std::string runs_csv = row(header), curves_csv = row({"run", "split", "step", "loss", "lr", "grad_norm"});
  for (const json& r : runs) {
    std::vector<json> v = {at(r, "name"), at(r, "label"), at(r, "status")};
    for (const auto& k : keys) v.push_back(r.contains("grid") && r["grid"].contains(k) ? r["grid"][k] : json());
    const json summary = at(r, "summary");
    for (const auto& k : finals) v.push_back(at(summary, k.c_str()));
    v.push_back(at(r, "steps_to_target"));
    runs_csv += row(v);
    for (const char* split : {"train", "val"}) {
      const json curve = at(r, split);
      const json steps = at(curve, "step");
      for (size_t i = 0; steps.is_array() && i < steps.size(); i++)
        curves_csv += row({at(r, "name"), split, steps[i], at(at(curve, "loss"), i), at(at(curve, "lr"), i),
                           at(at(curve, "grad_norm"), i)});
    }
  }
  const std::string a = (std::filesystem::path(dir) / "runs.csv").string(),
                    b = (std::filesystem::path(dir) / "curves.csv").string();
  write_file_atomic(a, runs_csv);
  write_file_atomic(b, curves_csv);
  return {a, b};
}

std::string write_run_table(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  std::istringstream lines(read_file(path, "metrics file"));
  std::vector<json> records;
  std::vector<std::string> keys = {"type", "step"};
  std::string line;
  for (long n = 1; std::getline(lines, line); n++) {
    if (line.empty()) continue;
    const json j = parse_json(line, fmt::format("{} line {}", path, n));
    if (!j.is_object() || !j.contains("type") || !(j["type"] == "train" || j["type"] == "val")) continue;
    for (const auto& [k, v] : j.items())
      if (v.is_number() && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    records.push_back(j);
  }
  if (records.empty()) throw Error(fmt::format("{}: no train or val records (a run that never logged a step?)", path));
  std::vector<json> header(keys.begin(), keys.end());
  std::string csv = row(header);
  for (const json& r : records) {
    std::vector<json> v;
    for (const auto& k : keys) v.push_back(r.contains(k) ? r[k] : json());
    csv += row(v);
  }
  const std::string out = (std::filesystem::path(run_dir) / "metrics.csv").string();
  write_file_atomic(out, csv);
  return out;
}

}  // namespace normlab::study
