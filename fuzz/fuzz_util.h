// fuzz_util.h: what every harness shares. A harness feeds its input to a normlab reader exactly as
// the command line does; the one outcome allowed besides success is a normlab::Error (the message a
// user sees). Anything else -- another exception type (a library's message naming no file), a
// crash, a sanitizer report, a hang, an allocation beyond libFuzzer's -malloc_limit_mb -- ends the
// run with the input saved.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace normlab::fuzz {

// A directory of this process's own under $TMPDIR (or /tmp), created once and removed at exit, for
// the readers that take a path.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/normlab-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      std::perror("normlab fuzz: mkdtemp");
      std::abort();
    }
    static std::string to_remove = pattern;
    std::atexit([] { std::system(("rm -rf '" + to_remove + "'").c_str()); });
    return pattern;
  }();
  return dir;
}

// Writes bytes to <scratch>/<name> (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "normlab fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// The input cut at every NUL byte: how a harness that needs several texts (a TOML file and its --set
// overrides, the two sides of a parallel corpus) gets them from one input.
inline std::vector<std::string> split_at_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; i++) {
    if (data[i] == 0) parts.emplace_back();
    else parts.back() += char(data[i]);
  }
  return parts;
}

// Runs fn(); a normlab::Error is the clean refusal of bad input, everything else propagates.
template <class F>
void expect_clean(F&& fn) {
  try {
    fn();
  } catch (const normlab::Error&) {
  }
}

}  // namespace normlab::fuzz
