#ifndef LOOM_PYTHON_CAPTURE_BINDINGS_H_
#define LOOM_PYTHON_CAPTURE_BINDINGS_H_

#include <pybind11/pybind11.h>

#include "absl/status/status.h"

namespace loom::python {

// Defines parse_step, parse_plan, signature, evaluate and run_plan in `m`
// (python/capture_bindings.cc). `throw_status` raises the Python exception of a
// status that is not OK, as the rest of the module does; it never returns.
void DefineCaptureFunctions(pybind11::module_& m, void (*throw_status)(const absl::Status&));

}  // namespace loom::python

#endif  // LOOM_PYTHON_CAPTURE_BINDINGS_H_
