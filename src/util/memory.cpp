// memory.cpp: the free memory of this machine and this process (memory.h).
#include "util/memory.h"

#include "util/error.h"

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace normlab {

// The value of `key` (in kB) in a /proc file of "Key: value kB" lines, in bytes.
static std::optional<uint64_t> proc_kib(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, unit;
    uint64_t kib = 0;
    if (fields >> name >> kib >> unit && name == key && unit == "kB") return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> available_memory_bytes() {
  std::optional<uint64_t> free = proc_kib("/proc/meminfo", "MemAvailable:");
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    if (const std::optional<uint64_t> used = proc_kib("/proc/self/status", "VmSize:")) {
      const uint64_t room = uint64_t(limit.rlim_cur) > *used ? uint64_t(limit.rlim_cur) - *used : 0;
      free = free ? std::min(*free, room) : room;
    }
  return free;
}

double physical_memory_bytes() { return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)); }

std::string memory_text(double bytes) {
  if (bytes >= double(1ull << 30)) return fmt::format("{:.1f} GiB", bytes / double(1ull << 30));
  return fmt::format("{:.0f} MiB", bytes / double(1ull << 20));
}

std::string memory_shortfall(double bytes, const std::string& what, const std::string& hint) {
  const std::optional<uint64_t> free = available_memory_bytes();
  if (!free || bytes <= double(*free)) return "";
  return fmt::format("{} needs {} of memory; this machine has {} available{}", what, memory_text(bytes),
                     memory_text(double(*free)), hint);
}

void require_memory(double bytes, const std::string& what, const std::string& hint) {
  if (std::string message = memory_shortfall(bytes, what, hint); !message.empty()) throw Error(message);
}

}  // namespace normlab
