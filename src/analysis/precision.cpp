// precision.cpp: the instruments' choice of float32 or float64 (precision.h).
#include "analysis/precision.h"

#include <fmt/format.h>

#include "util/error.h"
#include "util/memory.h"

namespace normlab::analysis {

bool instruments_in_float32(const std::string& precision, size_t n_params, bool gradients, std::string* why) {
  if (precision != "auto" && precision != "float64" && precision != "float32")
    throw Error(fmt::format("precision '{}' must be auto, float64 or float32", precision));
  const double memory = physical_memory_bytes();
  const double copy = (gradients ? 16.0 : 8.0) * double(n_params);
  if (why && precision == "auto")
    *why = fmt::format(" (auto: a float64 copy{} needs {:.1f} GB, {} a quarter of this machine's {:.1f} GB)",
                       gradients ? " with gradients" : "", copy / 1e9, copy > memory / 4 ? "over" : "within",
                       memory / 1e9);
  return precision == "float32" || (precision == "auto" && copy > memory / 4);
}

}  // namespace normlab::analysis
