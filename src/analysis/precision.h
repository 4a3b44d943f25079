// precision.h: the one rule by which `analyze attention | dynamics | sinks` and the Python module's
// instruments choose their arithmetic. float64 reads a float64 copy of the model (16 bytes a parameter
// with its gradients, 8 without); float32 reads the model's own float32 parameters with no copy (every
// reading still summed in float64; the two agree to float32 rounding). auto takes float64 while that
// copy needs at most a quarter of the machine's physical memory (about 375 M parameters on 24 GB), and
// float32 above, so that a 0.5-2 B model's readings fit where its copy would not.
#pragma once

#include <cstddef>
#include <string>

namespace normlab::analysis {

// True for float32. precision: "auto", "float64" or "float32" (Error otherwise); gradients: the
// instrument runs a backward pass (dynamics, sinks). why, when given: how auto chose, as the
// "precision:" line's tail (empty for an explicit choice).
bool instruments_in_float32(const std::string& precision, size_t n_params, bool gradients, std::string* why = nullptr);

}  // namespace normlab::analysis
