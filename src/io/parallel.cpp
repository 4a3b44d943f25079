// parallel.cpp: strict line reading and the aligned-pair loader (see parallel.h).
#include "io/parallel.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/unicode.h"
#include "util/error.h"
#include "util/files.h"
#include "util/hints.h"

namespace normlab {

namespace fs = std::filesystem;

std::vector<std::string> read_text_lines(const std::string& path, EmptyLines empty) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(fmt::format("'{}': no such file", path));
  require_not_directory(path, "text file");
  const std::string text = read_file(path, "text file");

  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r' && nl < text.size()) line.pop_back();
    const size_t line_no = lines.size() + 1;
    unicode::check_utf8(line, fmt::format("'{}' line {}", path, line_no));
    if (empty == EmptyLines::reject && line.empty())
      throw Error(
          fmt::format("'{}' line {} is empty (every line must hold a sentence)", path, line_no));
    lines.push_back(std::move(line));
    start = nl + 1;
  }
  if (lines.empty()) throw Error(fmt::format("'{}' is empty: no lines", path));
  return lines;
}

ParallelCorpus load_parallel(const std::string& src_path, const std::string& tgt_path) {
  ParallelCorpus c;
  c.src_path = src_path, c.tgt_path = tgt_path;
  c.src = read_text_lines(src_path);
  c.tgt = read_text_lines(tgt_path);
  if (c.src.size() != c.tgt.size())
    throw Error(
        fmt::format("parallel corpus sides differ in length: '{}' has {} lines, '{}' has {}",
                    src_path, c.src.size(), tgt_path, c.tgt.size()));
  return c;
}

ParallelCorpus load_parallel_split(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "valid" && split != "test")
    throw Error(fmt::format("split '{}' is not one of train, valid, test", split));
  if (!fs::is_directory(dir))
    throw Error(
        fmt::format("parallel corpus directory '{}' does not exist (the Bible corpus is built by "
                    "`normlab corpus bible`)",
                    dir));
  const fs::path d(dir);
  return load_parallel((d / (split + ".src")).string(), (d / (split + ".tgt")).string());
}

}  // namespace normlab
