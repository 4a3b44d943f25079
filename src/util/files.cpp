// files.cpp: regular-file checks, whole-file reads and the atomic writer (files.h).
#include "util/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "util/error.h"
#include "util/hints.h"

namespace normlab {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

struct Fd {  // closed when it goes out of scope
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  const std::string hint = directory_hint(path);
  if (!hint.empty()) throw Error(fmt::format("{} '{}': expected a file; {}", what, path, hint));
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return;  // missing: the reader names it
  if (!S_ISREG(info.st_mode))
    throw Error(fmt::format("{} '{}' is {}, not a regular file (normlab reads only files: reading it could block "
                            "or never end)",
                            what, path, file_kind(info.st_mode)));
}

void require_not_directory(const std::string& path, const std::string& what) { require_regular_file(path, what); }

std::string read_file(const std::string& path, const std::string& what) {
  require_regular_file(path, what);
  // O_NONBLOCK: should the path become a FIFO after the check, open() still returns at once
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) throw Error(fmt::format("{} '{}': cannot open file ({})", what, path, std::strerror(errno)));
  struct stat info;
  if (::fstat(fd.fd, &info) != 0 || !S_ISREG(info.st_mode))
    throw Error(fmt::format("{} '{}' is not a regular file", what, path));
  std::string text;
  text.reserve(size_t(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd.fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(fmt::format("{} '{}': read error ({})", what, path, std::strerror(errno)));
    if (got == 0) break;
    text.append(buffer, size_t(got));
  }
  return text;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create temporary file '" + tmp_ + "'", errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& doing, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  committed_ = true;  // nothing left to remove
  throw Error(fmt::format("cannot write '{}': {}: {}", path_, doing, std::strerror(err)));
}

void AtomicFile::write(const void* data, size_t size) {
  const auto* cursor = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t put = ::write(fd_, cursor, size);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail("write to '" + tmp_ + "' failed", errno);
    cursor += put;
    size -= size_t(put);
  }
}

void AtomicFile::commit(bool overwrite) {
  if (::fsync(fd_) != 0) fail("fsync of '" + tmp_ + "' failed", errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail("close of '" + tmp_ + "' failed", errno);
  struct stat info;
  if (overwrite) {
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename of '" + tmp_ + "' over it failed", errno);
  } else if (::link(tmp_.c_str(), path_.c_str()) == 0) {  // atomic "create unless exists"
    ::unlink(tmp_.c_str());
  } else if (errno == EEXIST) {
    ::unlink(tmp_.c_str());
    committed_ = true;
    throw Error(fmt::format("'{}' already exists (and overwrite is off)", path_));
  } else if (::lstat(path_.c_str(), &info) == 0) {  // no hard links here: check, then rename
    ::unlink(tmp_.c_str());
    committed_ = true;
    throw Error(fmt::format("'{}' already exists (and overwrite is off)", path_));
  } else if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    fail("rename of '" + tmp_ + "' failed", errno);
  }
  committed_ = true;
  // best effort: make the rename durable (nothing written is lost if this fails)
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  Fd dfd{::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dfd.fd >= 0) ::fsync(dfd.fd);
}

void write_file_atomic(const std::string& path, std::string_view content, bool overwrite) {
  AtomicFile file(path);
  file.write(content);
  file.commit(overwrite);
}

StagedFiles::StagedFiles(std::string dir, std::vector<std::string> names) : dir_(std::move(dir)), names_(std::move(names)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& name : names_) {
    const fs::path target = fs::path(dir_) / name;
    if (fs::exists(fs::symlink_status(target, ec)) && !fs::is_regular_file(fs::status(target, ec)))
      throw Error(fmt::format("cannot write '{}': it exists and is not a regular file (nothing was written)",
                              target.string()));
  }
  fs::create_directories(dir_, ec);
  if (ec) throw Error(fmt::format("cannot create the directory '{}' ({})", dir_, ec.message()));
  stage_ = (fs::path(dir_) / (".normlab-stage." + std::to_string(::getpid()))).string();
  fs::remove_all(stage_, ec);  // a stage a killed run of this pid left
  if (!fs::create_directory(stage_, ec) || ec)
    throw Error(fmt::format("cannot write into '{}' ({})", dir_, ec ? ec.message() : "cannot create a directory there"));
  fs::create_directory(stage_ + "/old", ec);
  if (ec) throw Error(fmt::format("cannot write into '{}' ({})", dir_, ec.message()));
}

StagedFiles::~StagedFiles() {
  std::error_code ec;
  std::filesystem::remove_all(stage_, ec);
}

void StagedFiles::commit() {
  for (const std::string& name : names_)
    if (::access(path(name).c_str(), F_OK) != 0)
      throw Error(fmt::format("'{}' was not written (a bug): nothing in '{}' was replaced", name, dir_));
  std::vector<std::string> moved_aside, moved_in;
  auto roll_back = [&] {
    for (const std::string& name : moved_in) ::rename((dir_ + "/" + name).c_str(), path(name).c_str());
    for (const std::string& name : moved_aside) ::rename((stage_ + "/old/" + name).c_str(), (dir_ + "/" + name).c_str());
  };
  for (const std::string& name : names_) {
    const std::string target = dir_ + "/" + name;
    if (::access(target.c_str(), F_OK) != 0) continue;
    if (::rename(target.c_str(), (stage_ + "/old/" + name).c_str()) != 0) {
      const int err = errno;
      roll_back();
      throw Error(fmt::format("cannot replace '{}' ({}): nothing in '{}' was changed", target, std::strerror(err), dir_));
    }
    moved_aside.push_back(name);
  }
  for (const std::string& name : names_) {
    if (::rename(path(name).c_str(), (dir_ + "/" + name).c_str()) != 0) {
      const int err = errno;
      roll_back();
      throw Error(fmt::format("cannot move '{}' into '{}' ({}): nothing in it was changed", name, dir_, std::strerror(err)));
    }
    moved_in.push_back(name);
  }
  // best effort: make the renames durable
  if (const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string expand_home(const std::string& path) {
  const char* home = std::getenv("HOME");
  if (!home || !*home || path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  return std::string(home) + path.substr(1);
}

std::vector<std::string> expand_home_in_arguments(int argc, const char* const* argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; i++) {
    std::string a = argv[i];
    if (const size_t eq = a.find("=~"); i > 0 && eq != std::string::npos && a.find('=') == eq)
      a = a.substr(0, eq + 1) + expand_home(a.substr(eq + 1));
    else if (i > 0)
      a = expand_home(a);
    out.push_back(a);
  }
  return out;
}

std::string normlab_cache_dir() {
  if (const char* c = std::getenv("NORMLAB_CACHE"); c && *c) return c;
  const char* home = std::getenv("HOME");
  return (std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "normlab").string();
}

}  // namespace normlab
