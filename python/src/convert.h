// Conversions shared by the extension's files: Status -> Python exceptions,
// Python configs -> RuntimeConfig, the config -> RuntimeOptions mapping,
// JSON text -> Python objects, Python sequences -> sizes, and references to
// Python objects that C++ threads may drop.
#ifndef GEARBOX_PYTHON_SRC_CONVERT_H_
#define GEARBOX_PYTHON_SRC_CONVERT_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gearbox/config.h"
#include "gearbox/runtime.h"

namespace gearbox::python {

namespace py = pybind11;

// Releases the GIL for its scope, as py::gil_scoped_release, but lets a
// thread that the interpreter ends on re-entry (a daemon thread, while the
// interpreter finalizes: PyEval_RestoreThread exits the thread by forced
// unwinding) unwind: pybind11's gil_scoped_release has an implicitly
// noexcept destructor, through which that unwind calls std::terminate.
// pybind11's dispatcher rethrows the unwind, so the thread ends cleanly.
class GilRelease {
 public:
  // get_internals() first, as pybind11 does: it sets up what a later
  // py::gil_scoped_acquire on another thread reads.
  GilRelease() : state_((py::detail::get_internals(), PyEval_SaveThread())) {}
  ~GilRelease() noexcept(false) { PyEval_RestoreThread(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// Bad input (InvalidArgument, OutOfRange, NotFound, AlreadyExists,
// FailedPrecondition) -> ValueError; anything else -> RuntimeError; the
// message is the status's, verbatim. OK: nothing.
void ThrowIfError(const absl::Status& status);
template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

// A config as JSON text (a str starting with "{"), a dict (the file's keys),
// or a path (str or os.PathLike) to a config file.
RuntimeConfig ConfigFromPython(const py::handle& config);

// The one place a RuntimeConfig and a policy become RuntimeOptions (the
// fields replays copy: adaptive, replan, gear scheme and combinations).
RuntimeOptions RuntimeOptionsFromConfig(const RuntimeConfig& config, UpdatePolicy policy);

// Parses JSON text into Python objects (json.loads).
py::object JsonToPython(const std::string& json_text);

// Sizes given as a sequence of ints (or numpy integers); `what` names the
// argument in errors. TypeError for a non-sequence or a non-integer item.
std::vector<int64_t> SizesFromPython(const py::handle& sizes, std::string_view what);

// An integer numpy view of `sizes` (a numpy integer array, read without a
// copy when it is int64 and C-contiguous, or a sequence of ints).
py::array_t<int64_t, py::array::c_style | py::array::forcecast> IntArrayFromPython(
    const py::handle& sizes, std::string_view what);

// True while Python can run code: initialized and not finalizing.
bool PythonAlive();

// An owned reference to a Python object that any thread may drop: the
// destructor takes the GIL, or leaks the reference when the interpreter is
// finalizing (dropping it then could crash).
class GilSafeObject {
 public:
  explicit GilSafeObject(py::object object) : object_(object.release().ptr()) {}
  ~GilSafeObject();
  GilSafeObject(const GilSafeObject&) = delete;
  GilSafeObject& operator=(const GilSafeObject&) = delete;
  // Borrowed; call with the GIL held.
  py::handle get() const { return object_; }
  // Drops the reference now (idempotent); call with or without the GIL.
  void Reset();

 private:
  PyObject* object_;
};

}  // namespace gearbox::python

#endif  // GEARBOX_PYTHON_SRC_CONVERT_H_
