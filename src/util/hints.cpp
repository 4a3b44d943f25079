// hints.cpp: nearest-name suggestions and directory descriptions for error messages (hints.h).
#include "util/hints.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace normlab {

namespace fs = std::filesystem;

int edit_distance(const std::string& a, const std::string& b) {
  // d[i][j]: distance of a[0..i) to b[0..j) (optimal string alignment)
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); i++) d[i][0] = int(i);
  for (size_t j = 0; j <= b.size(); j++) d[0][j] = int(j);
  for (size_t i = 1; i <= a.size(); i++)
    for (size_t j = 1; j <= b.size(); j++) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);  // two neighbours swapped: "trian" -> "train"
    }
  return d[a.size()][b.size()];
}

std::optional<std::string> nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  const int limit = std::max(1, int(word.size()) / 3);
  std::optional<std::string> best;
  int best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const int d = edit_distance(word, c);
    if (d < best_distance && c != word) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const auto best = nearest_name(word, candidates);
  return best ? fmt::format("; did you mean '{}'?", *best) : std::string();
}

std::string directory_hint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return "";
  const fs::path dir(path);
  const auto has = [&](const char* name) { return fs::exists(dir / name, ec); };
  const auto in = [&](const char* name) { return (dir / name).string(); };
  if (has("metrics.jsonl") || (has("config.json") && has("checkpoint.safetensors"))) {
    std::string hint = fmt::format("'{}' is a run directory; its config is {}", path, in("config.json"));
    if (has("checkpoint.safetensors")) hint += fmt::format(", its checkpoint {}", in("checkpoint.safetensors"));
    if (has("metrics.jsonl")) hint += fmt::format(", its metrics {}", in("metrics.jsonl"));
    return hint;
  }
  if (has("results.json"))
    return fmt::format("'{}' is a study directory from normlab compare (results.json, report.html; each run in "
                       "{})", path, in("runs"));
  if (has("config.json") && has("model.safetensors"))
    return fmt::format("'{}' is a Hugging Face model directory; its weights are {}", path, in("model.safetensors"));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  if (names.empty()) return fmt::format("'{}' is a directory, and empty", path);
  const size_t shown = std::min<size_t>(names.size(), 5);
  std::string list = fmt::format("{}", fmt::join(names.begin(), names.begin() + long(shown), ", "));
  if (names.size() > shown) list += fmt::format(", ... ({} entries)", names.size());
  return fmt::format("'{}' is a directory (holding {}), not a file", path, list);
}

// require_not_directory is require_regular_file (files.cpp): a FIFO or device is refused too.

}  // namespace normlab
