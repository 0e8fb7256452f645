// gearbox._gearbox: the C++ core of the gearbox Python package.
#include <pybind11/pybind11.h>

#include "runtime.h"

PYBIND11_MODULE(_gearbox, m) {
  m.doc() =
      "gearbox's C++ core: the adaptive gear runtime (Runtime, Snapshot, Plan, Variant, Pool), "
      "the tools as functions (replay, plan_gears, convert_trace), and the fleet's stores "
      "(FleetStore, FleetArtifactStore). See docs/PYTHON.md.";
  gearbox::python::BindRuntime(m);
  gearbox::python::BindTools(m);
  gearbox::python::BindFleet(m);
}
