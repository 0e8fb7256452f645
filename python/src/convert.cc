#include "convert.h"

#include <string>
#include <utility>

namespace gearbox::python {

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      throw py::value_error(message);
    default:
      throw std::runtime_error(message);  // pybind11: RuntimeError
  }
}

RuntimeConfig ConfigFromPython(const py::handle& config) {
  if (config.is_none()) {
    throw py::type_error("config: None is not allowed; JSON text, a dict or a path to a file");
  }
  if (py::isinstance<py::dict>(config)) {
    const std::string text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
    GilRelease release;
    return ValueOrThrow(ParseConfig(text));
  }
  const py::object os = py::module_::import("os");
  if (py::isinstance<py::str>(config)) {
    const std::string text = config.cast<std::string>();
    const size_t first = text.find_first_not_of(" \t\r\n");
    GilRelease release;
    if (first != std::string::npos && text[first] == '{') return ValueOrThrow(ParseConfig(text));
    return ValueOrThrow(LoadConfigFile(text));
  }
  if (py::isinstance(config, os.attr("PathLike"))) {
    const std::string path = os.attr("fspath")(config).cast<std::string>();
    GilRelease release;
    return ValueOrThrow(LoadConfigFile(path));
  }
  throw py::type_error(
      "config: " + std::string(py::str(py::type::handle_of(config).attr("__name__"))) +
      " is not allowed; JSON text, a dict or a path to a file");
}

RuntimeOptions RuntimeOptionsFromConfig(const RuntimeConfig& config, UpdatePolicy policy) {
  RuntimeOptions options;
  options.adaptive = config.adaptive;
  options.policy = policy;
  options.replan = config.replan;
  options.combination_spec = config.combination_spec;
  return options;
}

py::object JsonToPython(const std::string& json_text) {
  return py::module_::import("json").attr("loads")(json_text);
}

std::vector<int64_t> SizesFromPython(const py::handle& sizes, std::string_view what) {
  if (sizes.is_none() || py::isinstance<py::str>(sizes) || !py::isinstance<py::iterable>(sizes)) {
    throw py::type_error(std::string(what) + ": " +
                         std::string(py::str(py::type::handle_of(sizes).attr("__name__"))) +
                         " is not allowed; a sequence of ints");
  }
  std::vector<int64_t> out;
  for (const py::handle item : sizes) {
    PyObject* index = PyNumber_Index(item.ptr());  // ints and numpy integers; not floats
    if (index == nullptr) {
      PyErr_Clear();
      throw py::type_error(std::string(what) + ": " +
                           std::string(py::str(py::type::handle_of(item).attr("__name__"))) +
                           " is not allowed; every size is an int");
    }
    const py::object owned = py::reinterpret_steal<py::object>(index);
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(owned.ptr(), &overflow);
    if (overflow != 0) {
      throw py::value_error(std::string(what) + ": " + std::string(py::str(owned)) +
                            " is not allowed; sizes fit in 64 bits");
    }
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

py::array_t<int64_t, py::array::c_style | py::array::forcecast> IntArrayFromPython(
    const py::handle& sizes, std::string_view what) {
  using IntArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
  if (py::isinstance<py::array>(sizes)) {
    const py::array array = py::reinterpret_borrow<py::array>(sizes);
    const char kind = array.dtype().kind();
    if (kind != 'i' && kind != 'u') {
      throw py::type_error(std::string(what) + ": a numpy array of dtype " +
                           std::string(py::str(array.dtype())) +
                           " is not allowed; an integer array");
    }
    if (array.ndim() != 1) {
      throw py::value_error(std::string(what) + ": an array of " + std::to_string(array.ndim()) +
                            " dimensions is not allowed; one dimension");
    }
    return IntArray::ensure(array);  // no copy when already int64 and contiguous
  }
  const std::vector<int64_t> values = SizesFromPython(sizes, what);
  IntArray out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

bool PythonAlive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() != 0 && Py_IsFinalizing() == 0;
#else
  return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0;
#endif
}

GilSafeObject::~GilSafeObject() { Reset(); }

void GilSafeObject::Reset() {
  if (object_ == nullptr) return;
  if (!PythonAlive()) {
    object_ = nullptr;  // leaked: the interpreter is going away
    return;
  }
  py::gil_scoped_acquire gil;
  PyObject* object = std::exchange(object_, nullptr);
  Py_XDECREF(object);
}

}  // namespace gearbox::python
