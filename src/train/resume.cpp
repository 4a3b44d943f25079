// resume.cpp: checkpoint files of a run directory, the resume state, metrics truncation, the config
// check at resume and the cleanup of a killed run's temporary files (resume.h).
#include "train/resume.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab {

namespace fs = std::filesystem;

namespace resume_detail {

const char* const kStepDir = "checkpoints";

fs::path step_path(const fs::path& dir, long step) {
  return dir / kStepDir / fmt::format("step-{:09}.safetensors", step);
}

// The step files of a run directory, oldest first.
std::vector<std::pair<long, fs::path>> step_files(const fs::path& dir) {
  static const std::regex name(R"(step-([0-9]{1,18})\.safetensors)");
  std::vector<std::pair<long, fs::path>> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir / kStepDir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string file = it->path().filename().string();
    if (std::regex_match(file, m, name) && it->is_regular_file(ec)) files.push_back({std::stol(m[1]), it->path()});
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Best effort: makes a rename in `dir` durable. Failure here loses nothing already written.
void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string tmp_name(const fs::path& path) { return path.string() + ".tmp." + std::to_string(::getpid()); }

void replace_by_link(const fs::path& target, const fs::path& source) {
  const std::string tmp = tmp_name(target);
  ::unlink(tmp.c_str());
  std::error_code ec;
  if (::link(source.c_str(), tmp.c_str()) != 0) {  // no hard links here: a copy
    fs::copy_file(source, tmp, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      ::unlink(tmp.c_str());
      throw Error(fmt::format("cannot write '{}' ({})", target.string(), ec.message()));
    }
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot replace '{}' ({})", target.string(), why));
  }
  sync_directory(target.parent_path());
}

std::string json_text(const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, nlohmann::json>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [key, value] : j.items()) flatten(value, prefix.empty() ? key : prefix + "." + key, out);
  } else {
    out[prefix] = j;
  }
}

}  // namespace resume_detail

using namespace resume_detail;

std::string resume_state_to_text(const ResumeState& s) {
  nlohmann::json rng = nlohmann::json::array();
  for (uint64_t w : s.data_rng) rng.push_back(fmt::format("{:016x}", w));
  nlohmann::json j{{"format", "normlab-resume-1"}, {"step", s.step}, {"data_rng", rng},
                   {"next_row", s.next_row}, {"ranks", s.ranks}, {"run_config", s.run_config}};
  if (std::isfinite(s.plateau.reference))  // (absent: no validation yet, or written before plateaus)
    j["plateau"] = {{"reference", s.plateau.reference}, {"since", s.plateau.since},
                    {"lowest", s.plateau.lowest}, {"lowest_step", s.plateau.lowest_step}};
  return j.dump();
}

ResumeState resume_state_from_metadata(const std::map<std::string, std::string>& metadata, const std::string& path) {
  auto it = metadata.find(kResumeMetadataKey);
  if (it == metadata.end())
    throw Error(fmt::format("{}: a checkpoint without resume state (written by `normlab init`, or by a normlab "
                            "older than --resume): it cannot be resumed exactly",
                            path));
  const auto j = parse_json_or_discarded(it->second);
  ResumeState s;
  try {
    if (j.is_discarded() || !j.is_object() || j.value("format", "") != "normlab-resume-1")
      throw std::runtime_error("not a normlab-resume-1 record");
    s.step = j.at("step").get<long>();
    s.next_row = j.at("next_row").get<long>();
    const auto& rng = j.at("data_rng");
    if (!rng.is_array() || rng.size() != 4) throw std::runtime_error("data_rng is not 4 words");
    for (size_t i = 0; i < 4; i++) {
      const std::string w = rng[i].get<std::string>();
      if (w.size() != 16 || w.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw std::runtime_error("data_rng word is not 16 hex digits");
      s.data_rng[i] = std::stoull(w, nullptr, 16);
    }
    s.run_config = j.at("run_config");
    if (j.contains("ranks")) {  // (absent: written before MPI support, by one process)
      const auto& ranks = j["ranks"];
      if (!ranks.is_number_integer() || ranks.get<long long>() < 1 || ranks.get<long long>() > (1 << 24))
        throw std::runtime_error("ranks is not a positive integer");
      s.ranks = int(ranks.get<long long>());
    }
    if (j.contains("plateau")) {
      const auto& p = j["plateau"];
      s.plateau.reference = p.at("reference").get<double>();
      s.plateau.since = p.at("since").get<int>();
      s.plateau.lowest = p.at("lowest").get<double>();
      s.plateau.lowest_step = p.at("lowest_step").get<long>();
      if (!std::isfinite(s.plateau.reference) || !std::isfinite(s.plateau.lowest) || s.plateau.since < 0 ||
          s.plateau.lowest_step < 0)
        throw std::runtime_error("bad plateau values");
    }
    if (!s.run_config.is_object() || s.step < 0 || s.next_row < 0) throw std::runtime_error("bad values");
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: metadata \"resume\" is malformed ({})", path, e.what()));
  }
  if (const auto step = metadata.find("step"); step == metadata.end() || step->second != std::to_string(s.step))
    throw Error(fmt::format("{}: metadata \"resume\" disagrees with the checkpoint's step", path));
  return s;
}

void save_run_checkpoint(const fs::path& dir, const Model<float>& model, AdamW& optimizer, const ResumeState& state,
                         int keep) {
  std::error_code ec;
  fs::create_directories(dir / kStepDir, ec);
  if (ec) throw Error(fmt::format("cannot create '{}' ({})", (dir / kStepDir).string(), ec.message()));
  const fs::path file = step_path(dir, state.step);
  save_checkpoint(file.string(), model, &optimizer, state.step, true, {{kResumeMetadataKey, resume_state_to_text(state)}});
  replace_by_link(dir / "checkpoint.safetensors", file);
  const auto files = step_files(dir);
  for (size_t i = 0; i + size_t(std::max(1, keep)) < files.size(); i++)
    if (files[i].second != file) fs::remove(files[i].second, ec);
}

std::optional<std::string> newest_checkpoint(const fs::path& dir) {
  const auto files = step_files(dir);
  if (!files.empty()) return files.back().second.string();
  std::error_code ec;
  if (fs::is_regular_file(dir / "checkpoint.safetensors", ec)) return (dir / "checkpoint.safetensors").string();
  return std::nullopt;
}

void remove_step_checkpoints(const fs::path& dir) {
  std::error_code ec;
  for (const auto& [step, path] : step_files(dir)) fs::remove(path, ec);
}

// Whether process `pid` may still write a file: it exists and is not a zombie (a process that has
// exited and not yet been reaped by its parent, which kill(pid, 0) still finds: ranks ended by
// mpirun linger so for a while). Without /proc, existence alone.
static bool may_still_write(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');  // "<pid> (<name>) <state> ...": the name may hold anything
  return !(paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z');
}

int remove_stale_temporaries(const fs::path& dir) {
  static const std::regex name(
      R"((checkpoint\.safetensors|metrics\.jsonl|config\.json|step-[0-9]+\.safetensors)\.tmp\.([0-9]{1,9}))");
  int removed = 0;
  for (const fs::path& d : {dir, dir / kStepDir}) {
    std::error_code ec;
    std::vector<fs::path> stale;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      std::smatch m;
      const std::string file = it->path().filename().string();
      if (!std::regex_match(file, m, name) || !it->is_regular_file(ec)) continue;
      const pid_t pid = pid_t(std::stol(m[2]));
      // a live process of that id may be writing it: leave it (pid reuse errs on the safe side)
      if (pid == ::getpid() || !may_still_write(pid)) stale.push_back(it->path());
    }
    for (const auto& p : stale)
      if (fs::remove(p, ec)) removed++;
  }
  return removed;
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  write_file_atomic(path.string(), text);  // util/files.h: "<path>.tmp.<pid>", every step checked
}

KeptMetrics truncate_metrics(const fs::path& path, long step) {
  KeptMetrics kept{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  std::error_code ec;
  if (!fs::exists(path, ec)) return kept;  // no metrics yet: the continued run starts the file
  const std::string text = read_file(path.string(), "metrics file");  // (a FIFO or directory: refused)
  std::string out;
  size_t begin = 0;
  for (long line_no = 1; begin < text.size(); line_no++) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // unterminated: a write cut short by a kill
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    const auto j = parse_json_or_discarded(line);
    if (j.is_discarded() || !j.is_object())
      throw Error(fmt::format("'{}' line {} is not a JSON record; not resuming (the file is left as it was)",
                              path.string(), line_no));
    const std::string type = j.value("type", "");
    if (type == "summary" || type == "bleu") continue;
    if (j.contains("step") && (!j["step"].is_number_integer() || j["step"].get<long>() > step)) continue;
    if (type == "train" && j.contains("loss") && j["loss"].is_number()) kept.last_train_loss = j["loss"].get<double>();
    if (type == "val" && j.contains("loss") && j["loss"].is_number()) kept.last_val_loss = j["loss"].get<double>();
    out += line;
    out += '\n';
  }
  write_text_atomically(path, out);
  return kept;
}

std::vector<std::string> resume_config_differences(const nlohmann::json& saved, const nlohmann::json& wanted) {
  static const std::vector<std::string> may_change = {"train.steps", "train.log_every", "train.checkpoint_every",
                                                      "train.keep_checkpoints", "train.out_dir"};
  std::map<std::string, nlohmann::json> a, b;
  flatten(saved, "", a);
  flatten(wanted, "", b);
  std::vector<std::string> diffs;
  // a key newer than the checkpoint (model.qk_norm in a run made before it existed) at its default
  // value is what the older run did
  static const std::map<std::string, nlohmann::json> defaults = [] {
    std::map<std::string, nlohmann::json> d;
    flatten(run_config_to_json(RunConfig{}), "", d);
    return d;
  }();
  // a model key the checkpoint does not state because its writer left it out at the value its config
  // implies (model.head_dim = d_model / n_heads, say) is that value: the saved model config, read and
  // written again, states it
  std::map<std::string, nlohmann::json> implied;
  try {
    if (saved.is_object() && saved.contains("model")) {
      const ModelConfig model = model_config_from_json(saved["model"], "the checkpoint's model config");
      flatten(nlohmann::json{{"model", model_config_to_json(model)}}, "", implied);
    }
  } catch (const std::exception&) {  // not a config this normlab reads: compared key by key as it is
  }
  for (const auto& [key, value] : b) {
    if (std::find(may_change.begin(), may_change.end(), key) != may_change.end()) continue;
    auto it = a.find(key);
    if (it == a.end() && defaults.count(key) && defaults.at(key) == value) continue;
    if (it == a.end() && implied.count(key) && implied.at(key) == value) continue;
    if (it == a.end())
      diffs.push_back(fmt::format("{}: not in the checkpoint's config, now {}", key, json_text(value)));
    else if (it->second != value)
      diffs.push_back(fmt::format("{}: checkpoint {}, now {}", key, json_text(it->second), json_text(value)));
  }
  for (const auto& [key, value] : a)
    if (!b.count(key) && std::find(may_change.begin(), may_change.end(), key) == may_change.end())
      diffs.push_back(fmt::format("{}: checkpoint {}, now absent", key, json_text(value)));
  return diffs;
}

nlohmann::json resume_run_config(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw Error(fmt::format("--resume '{}': no such directory", dir));
  if (!fs::is_directory(dir, ec))
    throw Error(fmt::format("--resume '{}': not a directory (give the run directory, train.out_dir of the run)", dir));
  const auto ckpt = newest_checkpoint(dir);
  if (!ckpt) {
    if (fs::exists(fs::path(dir) / "metrics.jsonl", ec) || fs::exists(fs::path(dir) / "config.json", ec))
      throw Error(fmt::format("--resume '{}': the run has no checkpoint yet (it stopped before its first one): "
                              "nothing to resume; start it again with --force",
                              dir));
    throw Error(fmt::format("--resume '{}': not a normlab run directory (no checkpoint.safetensors, "
                            "checkpoints/ or metrics.jsonl)",
                            dir));
  }
  return resume_state_from_metadata(safetensors::read_index(*ckpt).metadata, *ckpt).run_config;
}

}  // namespace normlab
