// The fleet store and the artifact store for Python: thin wrappers over
// include/gearbox/fleet.h and include/gearbox/fleet_artifacts.h, one Python
// name per C++ name (FleetFingerprint, FleetStore, InProcessFleetStore,
// RedisFleetStore, open_fleet_store, FleetArtifactStore, FleetArtifact,
// ObtainedArtifact, fleet_key_prefix, fleet_sha256_hex).
//
// GIL contract: every call that talks to a store runs with the GIL released
// (a Redis round trip, or Obtain's wait on another replica's lease, must not
// stop the other Python threads); the build callback of obtain() and the log
// sink take the GIL, and do nothing once the interpreter is finalizing.
#include "gearbox/fleet.h"

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "convert.h"
#include "gearbox/fleet_artifacts.h"
#include "runtime.h"

namespace gearbox::python {
namespace {

// Messages go to the Python logger `gearbox.fleet` (warning for kWarning,
// error for kError, info for kInfo), or to `log(level, message)` when given.
LogSink PythonLogSink(const py::object& log) {
  py::object target =
      log.is_none() ? py::module_::import("logging").attr("getLogger")("gearbox.fleet") : log;
  const bool is_logger = log.is_none();
  auto ref = std::make_shared<GilSafeObject>(target);
  return [ref, is_logger](LogLevel level, std::string_view message) {
    if (!PythonAlive()) return;
    py::gil_scoped_acquire gil;
    const char* name = level == LogLevel::kError     ? "error"
                       : level == LogLevel::kWarning ? "warning"
                                                     : "info";
    try {
      if (is_logger) {
        ref->get().attr(name)("%s", py::str(std::string(message)));
      } else {
        ref->get()(name, py::str(std::string(message)));
      }
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("gearbox fleet log sink");
    }
  };
}

py::dict StoreCountersDict(const FleetStoreCounters& c) {
  py::dict d;
  d["calls"] = c.calls;
  d["failures"] = c.failures;
  d["skipped"] = c.skipped;
  d["connects"] = c.connects;
  d["bytes_sent"] = c.bytes_sent;
  d["bytes_received"] = c.bytes_received;
  d["rejected_values"] = c.rejected_values;
  return d;
}

py::dict ArtifactCountersDict(const FleetArtifactCounters& c) {
  py::dict d;
  d["loads"] = c.loads;
  d["builds"] = c.builds;
  d["builds_after_wait"] = c.builds_after_wait;
  d["lease_waits"] = c.lease_waits;
  d["misses"] = c.misses;
  d["corrupt"] = c.corrupt;
  d["puts"] = c.puts;
  d["too_large"] = c.too_large;
  d["store_failures"] = c.store_failures;
  d["bytes_loaded"] = c.bytes_loaded;
  d["bytes_put"] = c.bytes_put;
  return d;
}

std::string BytesOf(const py::handle& value, std::string_view what) {
  if (!py::isinstance<py::bytes>(value) && !py::isinstance<py::bytearray>(value) &&
      !py::isinstance<py::memoryview>(value)) {
    throw py::type_error(std::string(what) + ": expected bytes, bytearray or memoryview, got " +
                         std::string(py::str(py::type::handle_of(value).attr("__name__"))));
  }
  if (py::isinstance<py::bytes>(value)) return py::cast<std::string>(value);
  return py::cast<std::string>(py::bytes(py::reinterpret_borrow<py::object>(value)));
}

// A FleetArtifactStore and the store it uses (kept alive with it).
struct PyArtifactStore {
  std::shared_ptr<FleetStore> store;
  std::unique_ptr<FleetArtifactStore> artifacts;
};

}  // namespace

void BindFleet(py::module_& m) {
  py::class_<FleetFingerprint>(
      m, "FleetFingerprint",
      "What makes artifacts and statistics compatible between replicas "
      "(gearbox::FleetFingerprint). "
      "model_id is required; gearbox.torch.model_fingerprint computes one from a module.")
      .def(py::init([](std::string model_id, std::string backend, std::string backend_version,
                       std::string arch, std::string dtype, int format_version) {
             FleetFingerprint f;
             f.model_id = std::move(model_id);
             f.backend = std::move(backend);
             f.backend_version = std::move(backend_version);
             f.arch = std::move(arch);
             f.dtype = std::move(dtype);
             f.format_version = format_version;
             ThrowIfError(ValidateFleetFingerprint(f));
             return f;
           }),
           py::arg("model_id"), py::kw_only(), py::arg("backend") = "",
           py::arg("backend_version") = "", py::arg("arch") = "", py::arg("dtype") = "",
           py::arg("format_version") = kFleetFormatVersion)
      .def_readonly("model_id", &FleetFingerprint::model_id,
                    "A hash or name of the model (required)")
      .def_readonly("backend", &FleetFingerprint::backend, "e.g. 'torchscript', 'onednn', 'cuda'")
      .def_readonly("backend_version", &FleetFingerprint::backend_version, "e.g. torch.__version__")
      .def_readonly("arch", &FleetFingerprint::arch, "CPU/GPU architecture, e.g. 'x86_64'")
      .def_readonly("dtype", &FleetFingerprint::dtype, "e.g. 'float32'")
      .def_readonly("format_version", &FleetFingerprint::format_version,
                    "gearbox's fleet format version (kFleetFormatVersion)")
      .def_property_readonly(
          "prefix", [](const FleetFingerprint& f) { return FleetKeyPrefix(f); },
          "The key prefix gearbox:f<format>:<32 hex digits> (fleet_key_prefix)")
      .def("__repr__", [](const FleetFingerprint& f) {
        return "FleetFingerprint(model_id=" + std::string(py::repr(py::str(f.model_id))) +
               ", backend=" + std::string(py::repr(py::str(f.backend))) +
               ", backend_version=" + std::string(py::repr(py::str(f.backend_version))) +
               ", arch=" + std::string(py::repr(py::str(f.arch))) +
               ", dtype=" + std::string(py::repr(py::str(f.dtype))) + ")";
      });
  m.def("fleet_key_prefix", &FleetKeyPrefix, py::arg("fingerprint"),
        "The key prefix of a fingerprint: gearbox:f<format>:<32 hex digits>.");
  m.def(
      "fleet_sha256_hex",
      [](const py::object& data) {
        const std::string bytes = BytesOf(data, "data");
        py::gil_scoped_release nogil;
        return FleetSha256Hex(bytes);
      },
      py::arg("data"), "SHA-256 of the bytes as 64 lowercase hex digits (gearbox's own).");

  py::class_<FleetStore, std::shared_ptr<FleetStore>>(
      m, "FleetStore",
      "What replicas share through (gearbox::FleetStore): open_fleet_store(url), "
      "InProcessFleetStore() or RedisFleetStore(url). Only the update path may use it.")
      .def(
          "counters", [](const FleetStore& s) { return StoreCountersDict(s.counters()); },
          "Calls and bytes exchanged: calls, failures, skipped, connects, bytes_sent, "
          "bytes_received, rejected_values.")
      .def("describe", &FleetStore::Describe,
           "'in-process' or 'redis://HOST:PORT' (never credentials)")
      .def("__repr__",
           [](const FleetStore& s) { return "<gearbox.FleetStore " + s.Describe() + ">"; });

  py::class_<InProcessFleetStore, FleetStore, std::shared_ptr<InProcessFleetStore>>(
      m, "InProcessFleetStore",
      "The in-process stand-in with Redis's semantics (tests, one process with several "
      "replicas), expiry on the system clock.")
      .def(py::init([]() { return std::make_shared<InProcessFleetStore>(); }))
      .def("set_available", &InProcessFleetStore::SetAvailable, py::arg("available"),
           "False: every call fails (kUnavailable) as a dead server's would.")
      .def(
          "put_raw_string",
          [](InProcessFleetStore& s, std::string_view key, const py::object& value) {
            s.PutRawString(key, BytesOf(value, "value"));
          },
          py::arg("key"), py::arg("value"),
          "Test hook: writes a string as a hostile or broken writer could.")
      .def(
          "get_raw_string",
          [](InProcessFleetStore& s, const std::string& key) -> std::optional<py::bytes> {
            const std::string keys[] = {key};
            auto got = ValueOrThrow(s.GetStrings(keys));
            if (!got[0]) return std::nullopt;
            return py::bytes(*got[0]);
          },
          py::arg("key"), "The string at key as bytes, or None.")
      .def("live_keys", &InProcessFleetStore::live_keys, "Keys not expired now");

  py::class_<RedisFleetStore, FleetStore, std::shared_ptr<RedisFleetStore>>(
      m, "RedisFleetStore",
      "A FleetStore on one Redis server (hiredis, short timeouts, a circuit breaker). Connects "
      "lazily: creating it does not need the server up.")
      .def(py::init([](std::string url, int connect_timeout_ms, int command_timeout_ms,
                       int breaker_initial_backoff_ms, int breaker_max_backoff_ms,
                       const py::object& log) {
             RedisFleetStoreOptions o;
             o.url = std::move(url);
             o.connect_timeout_ms = connect_timeout_ms;
             o.command_timeout_ms = command_timeout_ms;
             o.breaker_initial_backoff_ms = breaker_initial_backoff_ms;
             o.breaker_max_backoff_ms = breaker_max_backoff_ms;
             o.log = PythonLogSink(log);
             std::unique_ptr<RedisFleetStore> store =
                 ValueOrThrow(RedisFleetStore::Create(std::move(o)));
             return std::shared_ptr<RedisFleetStore>(std::move(store));
           }),
           py::arg("url"), py::kw_only(), py::arg("connect_timeout_ms") = 200,
           py::arg("command_timeout_ms") = 200, py::arg("breaker_initial_backoff_ms") = 500,
           py::arg("breaker_max_backoff_ms") = 30000, py::arg("log") = py::none())
      .def("breaker_open", &RedisFleetStore::breaker_open,
           "Whether the circuit breaker refuses calls now");

  m.def(
      "open_fleet_store",
      [](std::string_view url, const py::object& log) {
        std::unique_ptr<FleetStore> store =
            ValueOrThrow(OpenFleetStore(url, nullptr, PythonLogSink(log)));
        return std::shared_ptr<FleetStore>(std::move(store));
      },
      py::arg("url") = "in-process", py::kw_only(), py::arg("log") = py::none(),
      "'redis://HOST:PORT' -> RedisFleetStore (default timeouts); '' or 'in-process' -> "
      "InProcessFleetStore (gearbox::OpenFleetStore).");

  py::class_<FleetArtifact>(m, "FleetArtifact", "A verified artifact: kind, digest, bytes.")
      .def_readonly("kind", &FleetArtifact::kind, "The artifact's kind, e.g. 'torchscript'")
      .def_readonly("digest", &FleetArtifact::digest,
                    "SHA-256 of the bytes, 64 lowercase hex digits")
      .def_property_readonly(
          "bytes", [](const FleetArtifact& a) { return py::bytes(a.bytes); },
          "The artifact's bytes")
      .def("__repr__", [](const FleetArtifact& a) {
        return "FleetArtifact(kind='" + a.kind + "', digest='" + a.digest +
               "', size=" + std::to_string(a.bytes.size()) + ")";
      });

  py::class_<ObtainedArtifact>(m, "ObtainedArtifact",
                               "What obtain() returns: the artifact, its source ('loaded': read "
                               "from the store and verified; 'built': built here) and whether "
                               "another replica held the compile lease.")
      .def_readonly("artifact", &ObtainedArtifact::artifact,
                    "The FleetArtifact (verified when loaded)")
      .def_property_readonly(
          "source",
          [](const ObtainedArtifact& o) {
            return o.source == ArtifactSource::kLoaded ? "loaded" : "built";
          },
          "'loaded' (read from the store, verified) or 'built' (here)")
      .def_readonly("waited", &ObtainedArtifact::waited,
                    "Another replica held the compile lease when this one asked");

  py::class_<PyArtifactStore>(
      m, "FleetArtifactStore",
      "Single-flight compiles and a content-addressed store of portable artifacts "
      "(gearbox::FleetArtifactStore): SHA-256 verified on every read, chunked, with a TTL. "
      "Calls block (up to wait_ms in obtain) with the GIL released: the update path only.")
      .def(py::init([](std::shared_ptr<FleetStore> store, const FleetFingerprint& fingerprint,
                       std::string replica_id, int64_t chunk_bytes, int max_chunks, int64_t ttl_ms,
                       int64_t lease_ms, int64_t wait_ms, int64_t poll_ms, int chunks_per_read,
                       const py::object& log) {
             if (store == nullptr) throw py::type_error("store: a FleetStore is required");
             FleetArtifactOptions o;
             o.replica_id = std::move(replica_id);
             o.chunk_bytes = chunk_bytes;
             o.max_chunks = max_chunks;
             o.ttl_ms = ttl_ms;
             o.lease_ms = lease_ms;
             o.wait_ms = wait_ms;
             o.poll_ms = poll_ms;
             o.chunks_per_read = chunks_per_read;
             auto out = std::make_unique<PyArtifactStore>();
             out->artifacts = ValueOrThrow(FleetArtifactStore::Create(
                 store.get(), fingerprint, std::move(o), PythonLogSink(log)));
             out->store = std::move(store);
             return out;
           }),
           py::arg("store"), py::arg("fingerprint"), py::kw_only(), py::arg("replica_id"),
           py::arg("chunk_bytes") = FleetArtifactOptions{}.chunk_bytes,
           py::arg("max_chunks") = FleetArtifactOptions{}.max_chunks,
           py::arg("ttl_ms") = FleetArtifactOptions{}.ttl_ms,
           py::arg("lease_ms") = FleetArtifactOptions{}.lease_ms,
           py::arg("wait_ms") = FleetArtifactOptions{}.wait_ms,
           py::arg("poll_ms") = FleetArtifactOptions{}.poll_ms,
           py::arg("chunks_per_read") = FleetArtifactOptions{}.chunks_per_read,
           py::arg("log") = py::none())
      .def(
          "put",
          [](PyArtifactStore& a, std::string_view gear_key, std::string_view kind,
             const py::object& data) {
            const std::string bytes = BytesOf(data, "data");
            GilRelease nogil;
            return ValueOrThrow(a.artifacts->Put(gear_key, kind, bytes));
          },
          py::arg("gear_key"), py::arg("kind"), py::arg("data"),
          "Stores the bytes under their digest and indexes them under (kind, gear_key); returns "
          "the digest. RuntimeError when the store is down or the artifact is too large.")
      .def(
          "get",
          [](PyArtifactStore& a, std::string_view gear_key, std::string_view kind) {
            absl::StatusOr<std::optional<FleetArtifact>> got;
            {
              GilRelease nogil;
              got = a.artifacts->Get(gear_key, kind);
            }
            return ValueOrThrow(std::move(got));
          },
          py::arg("gear_key"), py::arg("kind"),
          "The verified artifact of (kind, gear_key), or None (absent, expired, incomplete or "
          "corrupt: the last two logged and counted). RuntimeError when the store is down.")
      .def(
          "obtain",
          [](PyArtifactStore& a, std::string_view gear_key, std::string_view kind,
             const py::function& build) {
            // The build's Python exception, rethrown as is after Obtain returns.
            std::optional<py::error_already_set> build_error;
            auto call_build = [&]() -> absl::StatusOr<std::string> {
              if (!PythonAlive())
                return absl::UnavailableError("the Python interpreter is finalizing");
              py::gil_scoped_acquire gil;
              try {
                py::object out = build();
                return BytesOf(out, "obtain: build()'s result");
              } catch (py::error_already_set& e) {
                build_error.emplace(std::move(e));
              } catch (py::builtin_exception& e) {  // e.g. the type_error of BytesOf
                e.set_error();
                build_error.emplace();
              } catch (const std::exception& e) {
                PyErr_SetString(PyExc_RuntimeError, e.what());
                build_error.emplace();
              }
              return absl::AbortedError("obtain: build() raised");
            };
            absl::StatusOr<ObtainedArtifact> got;
            {
              GilRelease nogil;
              got = a.artifacts->Obtain(gear_key, kind, call_build);
            }
            if (build_error) throw std::move(*build_error);
            return ValueOrThrow(std::move(got));
          },
          py::arg("gear_key"), py::arg("kind"), py::arg("build"),
          "Single flight: the stored artifact if there is one; else takes the compile lease, "
          "calls build() -> bytes, puts its result and releases the lease; else waits for the "
          "lease holder's artifact up to wait_ms and builds itself at the end of the wait. With "
          "the store down it builds at once. An exception from build() propagates as is.")
      .def(
          "counters",
          [](const PyArtifactStore& a) { return ArtifactCountersDict(a.artifacts->counters()); },
          "loads, builds, builds_after_wait, lease_waits, misses, corrupt, puts, too_large, "
          "store_failures, bytes_loaded, bytes_put.")
      .def_property_readonly(
          "prefix", [](const PyArtifactStore& a) { return a.artifacts->prefix(); },
          "The fingerprint's key prefix every key of this store starts with")
      .def_property_readonly(
          "store", [](const PyArtifactStore& a) { return a.store; }, "The FleetStore it uses");
}

}  // namespace gearbox::python
