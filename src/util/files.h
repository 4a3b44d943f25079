// files.h: the one way normlab opens what it is given and writes what it makes.
//   require_regular_file: every reader calls it before opening a path (a FIFO would block open()
//     forever, a directory reads as garbage or as nothing, a device never ends);
//   read_file: the whole of a regular file, every read checked;
//   AtomicFile / write_file_atomic: every output file is written to "<path>.tmp.<pid>" beside it,
//     each write checked, fsync'ed, closed and renamed over the target; on any failure the
//     temporary file is removed and the Error names the path and the errno text, so a full disk
//     never leaves a 0-byte or half file, nor a report of success;
//   StagedFiles: several output files that belong together (a model directory's weights and config)
//     replace their namesakes all at once or not at all.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace normlab {

// Error "<what> '<path>': ..." when the path names a directory (with directory_hint) or anything
// that is not a regular file after following symlinks (a FIFO, socket, character or block device).
// A missing path is left to the reader, which names it ("cannot open file").
void require_regular_file(const std::string& path, const std::string& what);

// The whole file (require_regular_file first). Error "<what> '<path>': cannot open file (...)" /
// "read error (...)" naming the errno text.
std::string read_file(const std::string& path, const std::string& what);

class AtomicFile {
 public:
  // Creates "<path>.tmp.<pid>" in the target's directory; Error "cannot write '<path>': ..."
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temporary file unless committed

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, close, then rename over the target (overwrite) or create it only if absent (Error
  // "'<path>' already exists" otherwise). Any failure: Error, temporary file removed, target untouched.
  void commit(bool overwrite = true);
  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& doing, int err);
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomic(const std::string& path, std::string_view content, bool overwrite = true);

// A path as a shell would read it: "~" and "~/..." start at $HOME (unchanged without one); any other
// path as it is. Every path a user gives (a command-line argument, a config value, the Python
// module's arguments) passes through it, so "~/.cache/normlab/x" works where the shell did not expand it
// (a quoted argument, --out=~/x, a TOML value).
std::string expand_home(const std::string& path);
// The same on a command line: each argument that is a path starting with "~", or "name=~/..." (an
// option's --out=~/x, an override's data.corpus=~/x), with the part after '=' expanded.
std::vector<std::string> expand_home_in_arguments(int argc, const char* const* argv);

// Where normlab keeps what it fetches or computes once: $NORMLAB_CACHE, else ~/.cache/normlab
// (/tmp/.cache/normlab without a home).
std::string normlab_cache_dir();

// Files written into a fresh hidden directory inside `dir` (".normlab-stage.<pid>": the same file
// system, so every move is a rename), then moved into `dir` by commit(): the old files of those names
// are moved aside first, the new ones in, and on any failure everything moved is moved back, so the
// directory holds either all old or all new files. A name that exists in `dir` and is not a regular
// file (a directory, a FIFO) is refused before anything is written. Uncommitted, the stage is removed.
class StagedFiles {
 public:
  // Creates `dir` if missing, then the stage; Error naming `dir` when it cannot. `names` are the files
  // commit() will move (plain names, no '/').
  StagedFiles(std::string dir, std::vector<std::string> names);
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;
  ~StagedFiles();
  // Where to write file `name` before commit().
  std::string path(const std::string& name) const { return stage_ + "/" + name; }
  void commit();

 private:
  std::string dir_, stage_;
  std::vector<std::string> names_;
};

}  // namespace normlab
