// The runtime half of the extension: Runtime, Snapshot, Plan, Variant, Pool.
#ifndef GEARBOX_PYTHON_SRC_RUNTIME_H_
#define GEARBOX_PYTHON_SRC_RUNTIME_H_

#include <pybind11/pybind11.h>

namespace gearbox::python {

void BindRuntime(pybind11::module_& m);
void BindTools(pybind11::module_& m);
void BindFleet(pybind11::module_& m);

}  // namespace gearbox::python

#endif  // GEARBOX_PYTHON_SRC_RUNTIME_H_
