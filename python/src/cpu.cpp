// cpu.cpp: normlab._cpu, the one thing the Python module must know before its extension normlab._core
// loads OpenBLAS: which OpenBLAS kernels suit this CPU (ops::openblas_coretype; why: ops/isa.h).
// It is built from ops/isa.cpp alone, so importing it loads no BLAS; normlab/__init__.py sets
// OPENBLAS_CORETYPE from it, as the command does, and only then imports _core.
#include <pybind11/pybind11.h>

#include "ops/isa.h"
#include "util/error.h"

PYBIND11_MODULE(_cpu, mod) {
  mod.doc() = "the OpenBLAS kernels for this CPU, asked before normlab._core loads OpenBLAS";
  mod.def("openblas_coretype", []() -> pybind11::object {
    try {
      return pybind11::str(normlab::ops::openblas_coretype(normlab::ops::active_isa()));
    } catch (const normlab::Error&) {  // a bad NORMLAB_ISA: normlab._core reports it
      return pybind11::none();
    }
  });
}
