// memory.h: how much memory this machine has free, for the checks that refuse an input before a
// computation on it would allocate more than there is (a clear message instead of std::bad_alloc
// after minutes of work).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace normlab {

// Linux's MemAvailable (/proc/meminfo), the memory a new allocation can have without swapping, or
// less when the process has an address-space limit (ulimit -v): what that limit leaves beyond the
// process's present size. Empty where neither is known (then the callers skip their check).
std::optional<uint64_t> available_memory_bytes();

// The machine's physical memory (sysconf), for choices that must not depend on the moment's load
// (analyze's and theory's auto precision: the same machine gives the same output).
double physical_memory_bytes();

// "1.5 GiB", "320 MiB": a byte count as the messages print it.
std::string memory_text(double bytes);

// Throws Error "<what> needs <bytes> of memory; this machine has <free> available<hint>" when the
// available memory is known and smaller than `bytes`: a clear refusal before an allocation that would
// fail (or bring the machine to swap) instead of after it.
void require_memory(double bytes, const std::string& what, const std::string& hint = "");
// The same message when `bytes` is not available, empty when it is (or the available memory is unknown):
// for a caller that skips an optional part instead of refusing.
std::string memory_shortfall(double bytes, const std::string& what, const std::string& hint = "");

}  // namespace normlab
