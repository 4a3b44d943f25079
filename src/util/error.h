// error.h: the one error type for everything that comes from outside (config, CLI, files, shapes at
// the API boundary). The CLI catches it and prints one clear message with a non-zero exit.
// Kernel invariants use NL_ASSERT (debug builds only).
#pragma once

#include <cassert>
#include <stdexcept>
#include <string>

namespace normlab {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A run that stopped because a loss or gradient became non-finite (a result, not a bug).
struct DivergenceError : Error {
  using Error::Error;
};

}  // namespace normlab

#define NL_ASSERT(cond) assert(cond)
