"""gearbox.torch: serve any ``torch.nn.Module`` through shape-specialized gears.

A :class:`GearedModule` wraps a module whose inputs have dynamic dimensions
(batch, sequence length, ...). Each call is planned by the C++ core
(``gearbox.Runtime``): the inputs are padded up to a *gear* (one compiled
module per gear combination), split into chunks above the largest gear of a
splittable dimension, run, and every declared output is sliced back to the
real extents (chunks are written into one output). The runtime's update
worker moves the gears with the traffic; new gears are compiled in the
background before they are needed (prewarm), evicted gears' modules are
released once no call uses them.

Padding-invariance contract: the wrapped module must compute the valid part
of each output from the valid part of the inputs only. Padding with the
declared pad values (e.g. pad token id, attention mask 0 / key padding mask
True) must not change it: masked attention is fine; a mean, a norm or an
unmasked attention over a padded axis is not. ``check="debug"`` (or
``"warn"``) compares sampled calls against the eager module and names the
gear that differs.

Thread-safety: ``forward`` may be called from any number of threads. Each
gear combination is compiled once however many calls miss it at once
(waiters share the compile's future); compiles run outside the module's
lock (one compile at a time, ``serialize_compiles``); a failed compile is
reported to every waiter and never cached. See docs/PYTHON.md.
"""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import hashlib
import inspect
import io
import itertools
import json
import math
import os
import platform
import re
import statistics
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

import gearbox as _gb

__all__ = [
    "GearedModule",
    "InputSpec",
    "OutputSpec",
    "PaddingInvarianceError",
    "COMPILERS",
    "compile_torchscript",
    "compile_eager",
    "CudaGraphCompiler",
    "model_fingerprint",
    "ARTIFACT_KIND",
    "TUNING_KIND",
    "Autotune",
    "encode_tuning",
    "decode_tuning",
    "fit_run_cost",
    "median_run_seconds",
]

Gear = Tuple[int, ...]


class PaddingInvarianceError(ValueError):
    """The geared output differs from the eager module's (debug check)."""


# --------------------------------------------------------------------------
# Shape signature (seeds/001 §17.2-17.3 in practice)
# --------------------------------------------------------------------------


class InputSpec:
    """One input: its axes (a dimension name, a static int, or None for any
    size that then must not change), the value written into padding, the dtype
    (None: learned from the first call, then fixed) and the value the
    synthetic example inputs of a prewarm compile are filled with."""

    def __init__(self, axes: Sequence[Any], pad: Any = 0, dtype: Optional[torch.dtype] = None,
                 example: Any = 0):
        self.axes = list(axes)
        self.pad = pad
        self.dtype = dtype
        self.example = example

    def __repr__(self) -> str:
        return f"InputSpec(axes={self.axes!r}, pad={self.pad!r}, dtype={self.dtype!r})"


class OutputSpec:
    """One output: its axes (a dimension name: sliced back to the request's
    extent; an int: checked; None: any size, kept as computed)."""

    def __init__(self, axes: Sequence[Any]):
        self.axes = list(axes)

    def __repr__(self) -> str:
        return f"OutputSpec(axes={self.axes!r})"


def _as_input_spec(name: str, spec: Any) -> InputSpec:
    if isinstance(spec, InputSpec):
        return spec
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"axes", "pad", "dtype", "example"}
        if unknown:
            raise ValueError(f"input '{name}': unknown key(s) {sorted(unknown)}; "
                             "allowed: axes, pad, dtype, example")
        if "axes" not in spec:
            raise ValueError(f"input '{name}': missing 'axes'")
        return InputSpec(spec["axes"], spec.get("pad", 0), spec.get("dtype"),
                         spec.get("example", 0))
    if isinstance(spec, (list, tuple)):
        return InputSpec(spec)
    raise TypeError(f"input '{name}': spec must be an InputSpec, a dict or a list of axes, "
                    f"got {type(spec).__name__}")


def _is_axes_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(a is None or isinstance(a, (str, int)) for a in x)


def _as_output_specs(outputs: Any) -> Tuple[str, List[str], List[OutputSpec]]:
    """Returns (kind, names, specs); kind is 'single', 'sequence' or 'mapping'."""
    if isinstance(outputs, OutputSpec):
        return "single", ["output"], [outputs]
    if isinstance(outputs, Mapping):
        names = [str(k) for k in outputs]
        specs = [o if isinstance(o, OutputSpec) else OutputSpec(_check_axes_list(f"output '{n}'", o))
                 for n, o in zip(names, outputs.values())]
        return "mapping", names, specs
    if _is_axes_list(outputs):
        return "single", ["output"], [OutputSpec(outputs)]
    if isinstance(outputs, (list, tuple)):
        names = [f"output[{i}]" for i in range(len(outputs))]
        specs = [o if isinstance(o, OutputSpec) else OutputSpec(_check_axes_list(n, o))
                 for n, o in zip(names, outputs)]
        return "sequence", names, specs
    raise TypeError("outputs must be a list of axes, a list of such lists, a dict name -> axes "
                    f"or OutputSpec(s), got {type(outputs).__name__}")


def _check_axes_list(what: str, axes: Any) -> List[Any]:
    if not _is_axes_list(axes):
        raise TypeError(f"{what}: axes must be a list of dimension names, ints or None, got {axes!r}")
    return list(axes)


class _Signature:
    """Binds tensor axes to the runtime's dimensions and checks every call."""

    def __init__(self, dims: List[str], inputs: Dict[str, InputSpec], out_names: List[str],
                 out_specs: List[OutputSpec]):
        self.dims = dims
        self.inputs = inputs
        self.out_names = out_names
        self.out_specs = out_specs
        self.dim_index = {d: i for i, d in enumerate(dims)}
        # (input name, axis) that first binds each dimension: sizes are read there.
        self.first_binding: Dict[int, Tuple[str, int]] = {}
        self.learned_dtypes: Dict[str, torch.dtype] = {}
        self.learned_static: Dict[Tuple[str, int], int] = {}
        self._validate()

    def _validate(self) -> None:
        if not self.inputs:
            raise ValueError("inputs: at least one input is needed")
        for name, spec in self.inputs.items():
            if not isinstance(name, str):
                raise TypeError(f"input names must be str, got {name!r}")
            for axis, a in enumerate(spec.axes):
                self._validate_axis(f"input '{name}'", axis, a)
                if isinstance(a, str):
                    self.first_binding.setdefault(self.dim_index[a], (name, axis))
            if spec.dtype is not None and not isinstance(spec.dtype, torch.dtype):
                raise TypeError(f"input '{name}': dtype must be a torch.dtype, got {spec.dtype!r}")
        unbound = [d for i, d in enumerate(self.dims) if i not in self.first_binding]
        if unbound:
            raise ValueError(f"dimension(s) {unbound} are bound by no input axis; every dimension "
                             "must appear in at least one input")
        for name, spec in zip(self.out_names, self.out_specs):
            for axis, a in enumerate(spec.axes):
                self._validate_axis(f"output '{name}'", axis, a)

    def _validate_axis(self, what: str, axis: int, a: Any) -> None:
        if isinstance(a, bool) or not (a is None or isinstance(a, (str, int))):
            raise TypeError(f"{what} axis {axis}: {a!r} is not a dimension name, an int or None")
        if isinstance(a, str) and a not in self.dim_index:
            raise ValueError(f"{what} axis {axis}: unknown dimension '{a}'; dimensions are {self.dims}")
        if isinstance(a, int) and a < 0:
            raise ValueError(f"{what} axis {axis}: static size {a} must be >= 0")

    def dtype_of(self, name: str) -> Optional[torch.dtype]:
        return self.inputs[name].dtype or self.learned_dtypes.get(name)

    def dtypes_known(self) -> bool:
        return all(self.dtype_of(n) is not None for n in self.inputs)

    def check(self, tensors: Dict[str, torch.Tensor]) -> List[int]:
        """Returns the size of every dimension; raises ValueError naming the
        input, axis, value and the violated constraint."""
        sizes: List[Optional[int]] = [None] * len(self.dims)
        device = None
        for name, spec in self.inputs.items():
            t = tensors[name]
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input '{name}': expected a torch.Tensor, got {type(t).__name__}")
            if t.dim() != len(spec.axes):
                raise ValueError(f"input '{name}': rank {t.dim()} (shape {list(t.shape)}), expected "
                                 f"rank {len(spec.axes)} (axes {spec.axes})")
            want = self.dtype_of(name)
            if want is not None and t.dtype != want:
                raise ValueError(f"input '{name}': dtype {t.dtype}, expected {want}")
            if device is None:
                device = t.device
            elif t.device != device:
                raise ValueError(f"input '{name}': device {t.device}, but the other inputs are on "
                                 f"{device}; all inputs must be on one device")
            for axis, a in enumerate(spec.axes):
                n = int(t.shape[axis])
                if isinstance(a, str):
                    d = self.dim_index[a]
                    if n < 1:
                        raise ValueError(f"input '{name}' axis {axis} ({a}): size {n}; a dynamic "
                                         "dimension must be >= 1")
                    if sizes[d] is None:
                        sizes[d] = n
                    elif sizes[d] != n:
                        first, faxis = self.first_binding[d]
                        raise ValueError(
                            f"input '{name}' axis {axis} ({a}): size {n}, but input '{first}' axis "
                            f"{faxis} gave {a} = {sizes[d]}; a shared dimension must agree")
                elif isinstance(a, int):
                    if n != a:
                        raise ValueError(f"input '{name}' axis {axis}: size {n}, expected the static "
                                         f"size {a}")
                else:
                    seen = self.learned_static.get((name, axis))
                    if seen is not None and seen != n:
                        raise ValueError(f"input '{name}' axis {axis}: size {n}, but it was {seen} on "
                                         "earlier calls; an axis declared None is static (compiled "
                                         "modules are specialized to it)")
        return [int(s) for s in sizes]  # every dimension is bound (validated)

    def learn(self, tensors: Dict[str, torch.Tensor]) -> bool:
        """Fixes undeclared dtypes and None axes at their first call's values.
        Returns True when something new was learned."""
        new = False
        for name, spec in self.inputs.items():
            t = tensors[name]
            if spec.dtype is None and name not in self.learned_dtypes:
                self.learned_dtypes[name] = t.dtype
                new = True
            for axis, a in enumerate(spec.axes):
                if a is None and (name, axis) not in self.learned_static:
                    self.learned_static[(name, axis)] = int(t.shape[axis])
                    new = True
        return new

    def example_shapes_known(self) -> bool:
        return self.dtypes_known() and all(
            (n, ax) in self.learned_static
            for n, s in self.inputs.items() for ax, a in enumerate(s.axes) if a is None)

    def input_shape(self, name: str, gear: Sequence[int]) -> List[int]:
        out = []
        for axis, a in enumerate(self.inputs[name].axes):
            if isinstance(a, str):
                out.append(int(gear[self.dim_index[a]]))
            elif isinstance(a, int):
                out.append(a)
            else:
                out.append(self.learned_static[(name, axis)])
        return out

    def check_output(self, i: int, t: Any, gear: Sequence[int]) -> None:
        name, spec = self.out_names[i], self.out_specs[i]
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"output '{name}': the module returned {type(t).__name__}, "
                             "expected a torch.Tensor")
        if t.dim() != len(spec.axes):
            raise ValueError(f"output '{name}': rank {t.dim()} (shape {list(t.shape)}), expected rank "
                             f"{len(spec.axes)} (axes {spec.axes})")
        for axis, a in enumerate(spec.axes):
            n = int(t.shape[axis])
            if isinstance(a, str):
                want = int(gear[self.dim_index[a]])
                if n != want:
                    raise ValueError(f"output '{name}' axis {axis} ({a}): size {n} at gear "
                                     f"{tuple(gear)}, expected {want} (the gear's {a})")
            elif isinstance(a, int) and n != a:
                raise ValueError(f"output '{name}' axis {axis}: size {n}, expected the static size {a}")


# --------------------------------------------------------------------------
# Padding, splitting, slicing (pure functions of a variant)
# --------------------------------------------------------------------------


def pad_to(t: torch.Tensor, axes: Sequence[Tuple[int, int, int, int]], pad: Any) -> torch.Tensor:
    """Cuts and pads `t`: for each (axis, offset, extent, gear), takes
    [offset, offset + extent) along axis and pads it with `pad` up to gear.
    Returns a view of `t` (no copy) when nothing needs padding."""
    for axis, offset, extent, _ in axes:
        if offset != 0 or extent != t.shape[axis]:
            t = t.narrow(axis, offset, extent)
    if all(extent == gear for _, _, extent, gear in axes):
        return t
    shape = list(t.shape)
    for axis, _, _, gear in axes:
        shape[axis] = gear
    out = torch.full(shape, pad, dtype=t.dtype, device=t.device)
    view = out
    for axis, _, extent, _ in axes:
        view = view.narrow(axis, 0, extent)
    view.copy_(t)
    return out


def slice_to(t: torch.Tensor, axes: Sequence[Tuple[int, int]]) -> torch.Tensor:
    """Narrows each (axis, extent) to [0, extent): a view."""
    for axis, extent in axes:
        if extent != t.shape[axis]:
            t = t.narrow(axis, 0, extent)
    return t


# --------------------------------------------------------------------------
# Compilers: compile_fn(module, example_inputs: tuple) -> callable
# --------------------------------------------------------------------------


def compile_eager(module: torch.nn.Module, example_inputs: Tuple[torch.Tensor, ...]) -> Callable:
    """No compile: the gear only shapes the work."""
    del example_inputs
    return module


def compile_torchscript(module: torch.nn.Module, example_inputs: Tuple[torch.Tensor, ...]) -> Callable:
    """Traces at the gear's shape, freezes, and optimizes for inference (CPU default)."""
    return _finish_torchscript(_trace_torchscript(module, example_inputs))


def _trace_torchscript(module: torch.nn.Module, example_inputs: Tuple[torch.Tensor, ...]) -> Any:
    """The portable half of compile_torchscript: the traced module (what a fleet shares)."""
    with torch.no_grad():
        return torch.jit.trace(module, example_inputs, check_trace=False)


def _finish_torchscript(traced: Any) -> Callable:
    """The local half: freezing and optimize_for_inference, whose result is not
    portable (torch 1.13 cannot torch.jit.load a module with oneDNN-prepacked
    convolutions), so every replica runs it on the traced module, built or loaded."""
    with torch.no_grad():
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))


def _save_torchscript(traced: Any) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(traced, buf)
    return buf.getvalue()


def _load_torchscript(data: bytes) -> Any:
    return torch.jit.load(io.BytesIO(data), map_location="cpu")


# The kind of the artifacts gearbox.torch stores in a FleetArtifactStore.
ARTIFACT_KIND = "torchscript"


def model_fingerprint(module: torch.nn.Module, *, model_id: Optional[str] = None,
                      dtype: Optional[str] = None) -> Any:
    """A gearbox.FleetFingerprint for ``module``'s TorchScript artifacts.

    model_id: the user's hash or name of the model; None: computed here as
    ``"sha256:" +`` the SHA-256 of every submodule's class (qualified name and
    source, when inspect finds it) and every state_dict entry (name, dtype,
    shape, bytes), so replicas of the same code and weights agree and any
    change of either is another prefix (a miss). backend is "torchscript",
    backend_version torch's version, arch the machine's, dtype the
    parameters' dtypes (or ``dtype``)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    if model_id is None:
        h = hashlib.sha256(b"gearbox.torch model 1\0")
        for name, sub in module.named_modules():
            cls = type(sub)
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                source = ""
            for part in (name, f"{cls.__module__}.{cls.__qualname__}", source):
                data = part.encode()
                h.update(len(data).to_bytes(8, "little") + data)
        for name, t in module.state_dict().items():
            t = t.detach().to("cpu").contiguous()
            head = f"{name}|{t.dtype}|{list(t.shape)}".encode()
            h.update(len(head).to_bytes(8, "little") + head)
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            h.update(len(raw).to_bytes(8, "little") + raw)
        model_id = "sha256:" + h.hexdigest()
    if dtype is None:
        dtypes = sorted({str(t.dtype).replace("torch.", "") for t in module.state_dict().values()})
        dtype = ",".join(dtypes)
    return _gb.FleetFingerprint(model_id, backend="torchscript", backend_version=torch.__version__,
                                arch=platform.machine(), dtype=dtype)


class CudaGraphCompiler:
    """Captures each gear with ``torch.cuda.CUDAGraph`` into one memory pool
    shared by all gears of a GearedModule (capture the largest gear first:
    the prewarm does). The warmup runs before each capture use one side
    stream per device for all gears of every GearedModule in the process:
    PyTorch keeps a cuBLAS workspace for each stream a matmul ran on (32 MiB
    on Hopper) until the process ends, so a fresh stream per gear held one
    more workspace per gear (33 MiB a gear on an H200, docs/PERFORMANCE.md).

    Replays are serialized across all gears of the pool, on the GPU as well
    as on the host: a gear's graph may use as scratch the memory where
    another gear's graph keeps its output (the pool is shared), so each call
    copies its inputs in, replays and clones the outputs out under one lock,
    on the caller's current stream, after the previous call's work on
    whatever stream it ran (a CUDA event). Two requests on two streams thus
    never run two graphs of the pool at once.

    The capture is thread-local (``capture_error_mode="thread_local"``): the
    prewarm captures in the background while requests run, and a request's
    thread may synchronize its own stream (``.item()``, ``.cpu()``,
    ``torch.cuda.current_stream().synchronize()``) during a capture; in
    CUDA's default, global mode such a call from any thread fails the capture
    and the request. A device-wide ``torch.cuda.synchronize()`` during a
    capture is refused in either mode."""

    def __init__(self, warmup_runs: int = 3):
        if not torch.cuda.is_available():
            raise RuntimeError("compiler 'cuda_graph' needs a CUDA build of torch with a GPU: "
                               "torch.cuda.is_available() is False (use 'torchscript' or 'eager')")
        self.warmup_runs = warmup_runs
        self.pool = torch.cuda.graph_pool_handle()
        self.replays = _PoolReplays()

    def __call__(self, module: torch.nn.Module, example_inputs: Tuple[torch.Tensor, ...]) -> Callable:
        static_in = tuple(x.to("cuda").clone() for x in example_inputs)
        stream = _warmup_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(stream):
            for _ in range(self.warmup_runs):
                module(*static_in)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph, pool=self.pool,
                                               capture_error_mode="thread_local"):
            static_out = module(*static_in)
        return _GraphRunner(graph, static_in, static_out, self.replays)


_WARMUP_STREAMS: Dict[int, Any] = {}
_WARMUP_STREAMS_LOCK = threading.Lock()


def _warmup_stream() -> Any:
    """The current device's stream for the warmup runs before a capture,
    one per device for the process (see CudaGraphCompiler)."""
    device = torch.cuda.current_device()
    with _WARMUP_STREAMS_LOCK:
        if device not in _WARMUP_STREAMS:
            _WARMUP_STREAMS[device] = torch.cuda.Stream(device)
        return _WARMUP_STREAMS[device]


class _PoolReplays:
    """The order of the replays of one memory pool's graphs: a lock, and the
    event that the last call's work (copy in, replay, clone out) completes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.done: Optional[Any] = None


class _GraphRunner:
    def __init__(self, graph: Any, static_in: Tuple[torch.Tensor, ...], static_out: Any,
                 replays: _PoolReplays):
        self.graph, self.static_in, self.static_out = graph, static_in, static_out
        self.replays = replays

    def __call__(self, *inputs: torch.Tensor) -> Any:
        r = self.replays
        with r.lock:
            stream = torch.cuda.current_stream()
            if r.done is not None:
                stream.wait_event(r.done)
            for s, x in zip(self.static_in, inputs):
                s.copy_(x)
            self.graph.replay()
            out = _map_tensors(self.static_out, lambda t: t.clone())
            r.done = torch.cuda.Event()
            r.done.record(stream)
            return out


def _map_tensors(x: Any, fn: Callable) -> Any:
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple):
        return tuple(_map_tensors(v, fn) for v in x)
    if isinstance(x, list):
        return [_map_tensors(v, fn) for v in x]
    if isinstance(x, dict):
        return {k: _map_tensors(v, fn) for k, v in x.items()}
    return x


COMPILERS = ("torchscript", "eager", "cuda_graph", "autotune")

# The kind of the per-gear tuning choices gearbox.torch stores in a FleetArtifactStore.
TUNING_KIND = "tuning"
_TUNING_FORMAT = "gearbox.torch tuning 1"
_TUNING_MAX_BYTES = 4096
_AUTOTUNE_CANDIDATES = {"torchscript": compile_torchscript, "eager": compile_eager}
_CANDIDATE_NAME = re.compile(r"[a-z0-9_.-]{1,32}")
_MAX_CANDIDATES = 16  # so a record (names of 32 characters) stays far below _TUNING_MAX_BYTES


class Autotune:
    """``compiler=Autotune(...)`` (or ``"autotune"``, the defaults): per gear, builds every
    candidate compiler at the gear's shape, times ``runs`` calls of each on the gear's example
    inputs after ``warmup_runs`` untimed ones, and serves the gear with the fastest (the lowest
    median). The gear's compile seconds include the tuning (what the cost model should see).

    candidates: names from ``("torchscript", "eager")`` or a dict name -> ``compile_fn(module,
      example_inputs) -> callable`` (names: 1..32 of ``[a-z0-9_.-]``), 1..16 of them.
    runs: timed calls per candidate, 1..1000. warmup_runs: untimed calls first, 0..100.

    With an ``artifact_store`` the choice is shared (kind :data:`TUNING_KIND`, one per gear and
    machine class: :meth:`GearedModule.tuning_key`): a replica that finds it builds only the
    chosen candidate and times nothing; the first one measures under the store's compile lease.
    A torchscript candidate's traced module is shared as with ``compiler="torchscript"``."""

    def __init__(self, candidates: Any = ("torchscript", "eager"), runs: int = 5,
                 warmup_runs: int = 2):
        if isinstance(candidates, Mapping):
            fns = dict(candidates)
        elif isinstance(candidates, (list, tuple)):
            for c in candidates:
                if c not in _AUTOTUNE_CANDIDATES:
                    raise ValueError(f"Autotune candidates: {c!r} is not one of {list(_AUTOTUNE_CANDIDATES)} "
                                     "(or pass a dict name -> compile_fn)")
            fns = {c: _AUTOTUNE_CANDIDATES[c] for c in candidates}
            if len(fns) != len(candidates):
                raise ValueError(f"Autotune candidates: {list(candidates)} names one twice")
        else:
            raise TypeError("Autotune candidates: expected a list of names or a dict name -> "
                            f"compile_fn, got {type(candidates).__name__}")
        if not fns:
            raise ValueError("Autotune candidates: empty; at least one compiler")
        if len(fns) > _MAX_CANDIDATES:
            raise ValueError(f"Autotune candidates: {len(fns)} compilers, at most "
                             f"{_MAX_CANDIDATES} (each is built and timed per gear)")
        for name, fn in fns.items():
            if not isinstance(name, str) or not _CANDIDATE_NAME.fullmatch(name):
                raise ValueError(f"Autotune candidates: name {name!r} is not 1..32 characters of "
                                 "[a-z0-9_.-]")
            if not callable(fn):
                raise TypeError(f"Autotune candidates: {name!r} maps to "
                                f"{type(fn).__name__}, expected a compile_fn")
        for field, value, low, high in (("runs", runs, 1, 1000),
                                        ("warmup_runs", warmup_runs, 0, 100)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"Autotune {field}: {value!r}, expected an int in [{low}, {high}]")
        self.candidates: Dict[str, Callable] = fns
        self.runs, self.warmup_runs = runs, warmup_runs

    def __repr__(self) -> str:
        return (f"Autotune(candidates={list(self.candidates)}, runs={self.runs}, "
                f"warmup_runs={self.warmup_runs})")

    def median_call_seconds(self, fn: Callable, examples: Tuple[torch.Tensor, ...]) -> float:
        """The median wall seconds of one call of ``fn`` on ``examples`` (after the warm-up)."""
        return median_run_seconds(fn, examples, "cpu", calls=self.runs,
                                  warmup_calls=self.warmup_runs)


def encode_tuning(choice: str, median_seconds: Mapping[str, float], runs: int) -> bytes:
    """A tuning record: canonical JSON, what :func:`decode_tuning` reads."""
    return json.dumps({"format": _TUNING_FORMAT, "choice": choice, "runs": runs,
                       "median_seconds": dict(sorted(median_seconds.items()))},
                      sort_keys=True, separators=(",", ":")).encode()


def decode_tuning(data: bytes, candidates: Sequence[str]) -> Dict[str, Any]:
    """Validates a stored tuning record against these ``candidates``: at most 4096 bytes of a
    JSON object with exactly ``format`` ("gearbox.torch tuning 1"), ``choice`` (one of the
    candidates), ``runs`` (an int in [1, 1000]) and ``median_seconds`` (each candidate -> finite
    seconds >= 0, no other). Raises ValueError naming the field; returns the dict."""
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"tuning record: expected bytes, got {type(data).__name__}")
    if len(data) > _TUNING_MAX_BYTES:
        raise ValueError(f"tuning record: {len(data)} bytes, at most {_TUNING_MAX_BYTES}")
    try:
        record = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # deep nesting: RecursionError
        raise ValueError(f"tuning record: not JSON ({type(e).__name__}: {e})") from None
    if not isinstance(record, dict):
        raise ValueError(f"tuning record: a JSON {type(record).__name__}, expected an object")
    want = {"format", "choice", "runs", "median_seconds"}
    if set(record) != want:
        raise ValueError(f"tuning record: fields {sorted(record)}, expected {sorted(want)}")
    if record["format"] != _TUNING_FORMAT:
        raise ValueError(f"tuning record: format {record['format']!r}, expected {_TUNING_FORMAT!r}")
    if record["choice"] not in candidates:
        raise ValueError(f"tuning record: choice {record['choice']!r} is not one of "
                         f"{list(candidates)}")
    runs = record["runs"]
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= 1000:
        raise ValueError(f"tuning record: runs {runs!r}, expected an int in [1, 1000]")
    medians = record["median_seconds"]
    if not isinstance(medians, dict) or set(medians) != set(candidates):
        raise ValueError(f"tuning record: median_seconds names "
                         f"{sorted(medians) if isinstance(medians, dict) else medians!r}, expected "
                         f"{sorted(candidates)}")
    for name, v in medians.items():
        try:  # an int too large for a float raises OverflowError
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and \
                math.isfinite(float(v)) and v >= 0
        except OverflowError:
            ok = False
        if not ok:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "..."
            raise ValueError(f"tuning record: median_seconds[{name!r}] {shown}, expected finite "
                             "seconds >= 0")
    return record


def _machine_class(candidates: Sequence[str]) -> str:
    """What a timing depends on besides the model and the gear: the CPU model, torch's thread
    count and the candidates (a digest)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    text = json.dumps([cpu, os.cpu_count(), torch.get_num_threads(), list(candidates)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _resolve_compiler(compiler: Any, module: torch.nn.Module) -> Tuple[str, Callable]:
    if compiler == "autotune":
        compiler = Autotune()
    if isinstance(compiler, Autotune):
        if compile_torchscript in compiler.candidates.values() and module.training:
            raise ValueError("compiler 'autotune': its 'torchscript' candidate needs eval mode; "
                             "call module.eval() first")
        return "autotune", compiler
    if callable(compiler):
        return getattr(compiler, "__name__", type(compiler).__name__), compiler
    if compiler == "torchscript":
        if module.training:
            raise ValueError("compiler 'torchscript': the module is in training mode; call "
                             "module.eval() first (freezing needs eval mode; gears serve inference)")
        return "torchscript", compile_torchscript
    if compiler == "eager":
        return "eager", compile_eager
    if compiler == "cuda_graph":
        return "cuda_graph", CudaGraphCompiler()
    raise ValueError(f"compiler: {compiler!r} is not one of {list(COMPILERS)}, an Autotune or a "
                     "callable compile_fn(module, example_inputs) -> callable")


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _memory_now(device_type: str) -> int:
    if device_type == "cuda":
        return int(torch.cuda.memory_allocated())
    return _rss_bytes()


# --------------------------------------------------------------------------
# Compiled gears
# --------------------------------------------------------------------------


def fit_run_cost(points: Sequence[Tuple[float, float]],
                 min_seconds_per_unit: float = 1e-12) -> Optional[Tuple[float, float]]:
    """The replan cost model's run time, ``seconds_per_run + seconds_per_unit * units``, fitted
    by least squares to ``points`` of (units, seconds): a compiled gear's units (the product of
    its gears, to the cost model's ``runtime_exponent``) and its measured seconds per call.
    Returns (seconds_per_run, seconds_per_unit), or None with fewer than two distinct units.
    A slope at or below 0 (calls take as long whatever the size: a launch-bound model) becomes
    ``min_seconds_per_unit``: padding then costs next to nothing, and the policy keeps few
    gears; the intercept is at least 0."""
    pts = [(float(u), float(t)) for u, t in points if math.isfinite(u) and math.isfinite(t)]
    if len({u for u, _ in pts}) < 2:
        return None
    mu = sum(u for u, _ in pts) / len(pts)
    mt = sum(t for _, t in pts) / len(pts)
    var = sum((u - mu) ** 2 for u, _ in pts)
    slope = max(sum((u - mu) * (t - mt) for u, t in pts) / var, min_seconds_per_unit)
    return max(mt - slope * mu, 0.0), slope


def median_run_seconds(fn: Callable, examples: Tuple[torch.Tensor, ...], device_type: str,
                       calls: int = 3, warmup_calls: int = 1) -> float:
    """The median wall seconds of one call of ``fn`` on ``examples``, after ``warmup_calls``
    untimed ones; on CUDA each call ends when the calling thread's stream has run it (a stream
    sync: a device-wide one is refused while another thread captures a graph)."""
    sync = torch.cuda.current_stream().synchronize if device_type == "cuda" else (lambda: None)
    with torch.no_grad():
        for _ in range(warmup_calls):
            fn(*examples)
        sync()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn(*examples)
            sync()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


class CompiledGear:
    """One gear combination's compiled callable and what it cost. The
    runtime's pool holds it (released when the gear is evicted); a call holds
    it while it runs."""

    __slots__ = ("gear", "fn", "key", "compile_seconds", "bytes", "source", "choice", "tuning",
                 "median_seconds", "run_seconds", "__weakref__")

    def __init__(self, gear: Gear, fn: Callable, compile_seconds: float, nbytes: int,
                 source: str = "built", choice: Optional[str] = None,
                 tuning: Optional[str] = None,
                 median_seconds: Optional[Dict[str, float]] = None):
        self.gear = gear
        self.fn = fn
        self.key = 0
        self.compile_seconds = compile_seconds  # building it (and tuning), or loading and finishing it
        self.bytes = nbytes
        self.source = source  # "built" here, or "loaded" from the artifact store
        # compiler "autotune": the candidate chosen, whether the choice was "measured" here or
        # "loaded" from the artifact store, and the candidates' median call seconds.
        self.choice = choice
        self.tuning = tuning
        self.median_seconds = median_seconds
        # The median seconds of one call at the gear's shape, timed after the compile (off the
        # request path, when the run cost is calibrated); None when not timed.
        self.run_seconds: Optional[float] = None


class _GearStats:
    __slots__ = ("hits", "padded", "raw")

    def __init__(self) -> None:
        self.hits = 0
        self.padded = 0.0
        self.raw = 0.0


def _config_from(dims: Any, config: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    if isinstance(dims, (str, os.PathLike)):
        text = str(dims) if isinstance(dims, str) and dims.lstrip().startswith("{") else None
        if text is None:
            with open(dims) as f:
                text = f.read()
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"dims: not valid JSON config ({e})") from None
    elif isinstance(dims, Mapping) and "dims" in dims:
        cfg = copy.deepcopy(dict(dims))
    elif isinstance(dims, Mapping):
        if not dims:
            raise ValueError("dims: at least one dimension is needed")
        entries = []
        for name, spec in dims.items():
            if isinstance(spec, Mapping):
                entry = {"name": name, **spec}
            elif isinstance(spec, (list, tuple)):
                entry = {"name": name, "gears": list(spec)}
            else:
                raise TypeError(f"dims['{name}']: expected a dict (gears | policy/min/max, "
                                f"splittable) or a list of gears, got {type(spec).__name__}")
            entries.append(entry)
        cfg = {"dims": entries}
    else:
        raise TypeError("dims: expected a dict name -> spec, a config dict with 'dims', JSON text "
                        f"or a config path, got {type(dims).__name__}")
    if not isinstance(cfg, dict):
        raise ValueError("dims: the config must be a JSON object")
    for key, value in (config or {}).items():
        if isinstance(value, Mapping) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = copy.deepcopy(value)
    return cfg


class _Shared:
    """State the background thread and the finalizer share with the module
    without keeping it alive."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.closed = False
        self.pending = False
        self.busy = False


def _prewarm_loop(ref: "weakref.ref[GearedModule]", shared: _Shared) -> None:
    while True:
        with shared.cond:
            while not shared.pending and not shared.closed:
                shared.cond.wait(timeout=1.0)
                if ref() is None:
                    return
            if shared.closed:
                return
            shared.pending = False
            shared.busy = True
        try:
            gm = ref()
            if gm is None:
                return
            gm._prewarm_once()
            del gm
        finally:
            with shared.cond:
                shared.busy = False
                shared.cond.notify_all()


def _shutdown(shared: _Shared, rt: Any, threads: List[threading.Thread],
              executors: List[concurrent.futures.ThreadPoolExecutor]) -> None:
    with shared.cond:
        shared.closed = True
        shared.cond.notify_all()
    for t in threads:  # a compile in progress finishes first
        if t.is_alive() and t is not threading.current_thread():
            t.join(timeout=120)
    for e in executors:  # deferred artifact puts in progress finish
        try:
            e.shutdown(wait=True)
        except RuntimeError:  # collected on the put thread itself: it cannot join itself
            e.shutdown(wait=False)
    try:
        # close() drops the listener with the runtime, and works even when this
        # finalizer runs inside that listener (garbage collected on the updating
        # thread), where remove_release_listener would wait on itself.
        rt.close()
    except Exception:  # already closed
        pass


class GearedModule(torch.nn.Module):
    """A module served through gears. See the module docstring and docs/PYTHON.md.

    Args:
      module: the model (inference; ``torchscript`` needs ``module.eval()``).
      dims: the dynamic dimensions, in order: a dict name -> spec (``{"gears": [...]}`` or
        ``{"policy": "TIMES", "min": 1, "max": 64}``, plus ``"splittable": True`` to split above
        the largest gear; or a plain list of gears), or a whole gearbox config (dict with
        ``"dims"``, JSON text, or a path).
      inputs: name -> axes list, dict(axes=, pad=, dtype=, example=) or InputSpec, in the
        module's positional order. Axes: a dimension name, a static int, or None.
      outputs: the axes of the single output, a list of them (tuple outputs), or a dict
        name -> axes (tuple outputs in that order, or a dict output by key).
      compiler: "torchscript" (default), "eager", "cuda_graph", "autotune" (or an
        :class:`Autotune`: each gear timed on every candidate, served by the fastest), or a
        ``compile_fn(module, example_inputs: tuple) -> callable``.
      policy: "replan" (default), "adaptive" or "static".
      config: extra config sections merged into the config (e.g. ``{"adaptive": {...},
        "replan": {...}}``).
      start_worker: run the runtime's update worker thread.
      prewarm: compile the gears of each new gear set in a background thread before they are
        first needed (largest first); False compiles on first use.
      calibrate: with the replan policy and no ``replan.compile_seconds`` in the config, compile
        the smallest initial gear first and give the measured seconds to the cost model; after
        every compile the mean measured seconds (and bytes per gear, as ``memory_fixed_bytes``,
        priced when the config's replan cost sets ``gamma`` > 0) replace it
        (``Runtime.set_replan_cost``).
      calibrate_run_cost: with the replan policy and neither ``replan.seconds_per_unit`` nor
        ``replan.seconds_per_run`` in the config, time each gear compiled off the request path
        (the timing counts in its compile seconds) and give the policy the line through the
        timed gears as those two figures (:func:`fit_run_cost`;
        ``summary()["calibrated_run_cost"]``). Off by default: docs/PYTHON.md says what it
        did on the one replay it was measured on.
      check: "off", "debug" (raise PaddingInvarianceError) or "warn" on a mismatch with eager.
      check_every: compare every Nth call (check mode). check_rtol/check_atol: tolerances.
      clock / start_time: "system" or "manual" (tests and replays drive it).
      serialize_compiles: run one compile at a time (tracing is memory- and CPU-heavy).
      artifact_store: a ``gearbox.FleetArtifactStore`` shared by the replicas of this model
        (compilers "torchscript" and "autotune", whose per-gear choices it shares too; its
        fingerprint from :func:`model_fingerprint`): a gear
        compiled off the request path (prewarm, warm(), load_plan, calibration) is looked up
        first and loaded instead of traced, or traced under the compile lease and stored; a gear
        compiled by a request's miss is traced here and stored later by a background thread.
        A store that is down, a corrupt artifact or one torch.jit.load refuses is a miss with a
        warning: the gear is traced here. See docs/FLEET.md, "The Python integration".
    """

    def __init__(self, module: torch.nn.Module, dims: Any, *, inputs: Mapping[str, Any],
                 outputs: Any, compiler: Any = "torchscript", policy: str = "replan",
                 config: Optional[Mapping[str, Any]] = None, start_worker: bool = True,
                 prewarm: bool = True, calibrate: bool = True,
                 calibrate_run_cost: bool = False, check: str = "off",
                 check_every: int = 1, check_rtol: float = 1e-4, check_atol: float = 1e-5,
                 clock: str = "system", start_time: float = 0.0,
                 serialize_compiles: bool = True, max_decisions: int = 1000,
                 artifact_store: Any = None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
        if check not in ("off", "debug", "warn"):
            raise ValueError(f"check: {check!r} is not one of ['off', 'debug', 'warn']")
        if not isinstance(check_every, int) or check_every < 1:
            raise ValueError(f"check_every: {check_every!r}, expected an int >= 1")
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs: expected a dict name -> spec, got {type(inputs).__name__}")
        self.module = module
        self.compiler_name, self._compile_fn = _resolve_compiler(compiler, module)
        # Autotune: the machine class its tuning keys name, read once (not on a request's miss).
        self._machine_class = (_machine_class(list(self._compile_fn.candidates))
                               if isinstance(self._compile_fn, Autotune) else None)
        if artifact_store is not None:
            if not isinstance(artifact_store, _gb.FleetArtifactStore):
                raise TypeError("artifact_store: expected a gearbox.FleetArtifactStore, got "
                                f"{type(artifact_store).__name__}")
            if self.compiler_name not in ("torchscript", "autotune"):
                raise ValueError(f"artifact_store: compiler {self.compiler_name!r} builds modules "
                                 "that are not portable between processes (captured CUDA graphs, "
                                 "arbitrary callables); only 'torchscript' (its modules) and "
                                 "'autotune' (its choices) share artifacts")
        self._artifacts = artifact_store
        self._put_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pending_puts: List[concurrent.futures.Future] = []
        self._device_type = "cuda" if self.compiler_name == "cuda_graph" else "cpu"
        self._check, self._check_every = check, check_every
        self._check_rtol, self._check_atol = check_rtol, check_atol
        self._policy = policy
        self._prewarm_enabled = bool(prewarm)
        self._config = _config_from(dims, config)
        self._rt_kwargs = dict(policy=policy, clock=clock, start_time=start_time)
        in_specs = {n: _as_input_spec(n, s) for n, s in inputs.items()}
        self._out_kind, out_names, out_specs = _as_output_specs(outputs)

        probe = _gb.Runtime(self._config, start_worker=False, **self._rt_kwargs)
        try:
            dim_names = list(probe.dims)
            initial = [list(g) for g in probe.snapshot().gears]
        finally:
            probe.close()
        self._sig = _Signature(dim_names, in_specs, out_names, out_specs)

        # Mutable state. _lock guards _table, _by_key, _inflight, stats; never held while
        # compiling or running a module.
        self._lock = threading.Lock()
        self._compile_lock = threading.Lock() if serialize_compiles else None
        self._table: Dict[Gear, CompiledGear] = {}
        self._by_key: Dict[int, Gear] = {}
        self._inflight: Dict[Gear, concurrent.futures.Future] = {}
        self._gear_stats: Dict[Gear, _GearStats] = collections.defaultdict(_GearStats)
        self._compile_log: List[Dict[str, Any]] = []
        self._decisions: collections.deque = collections.deque(maxlen=max_decisions)
        self._counts = collections.Counter()
        self._padded_volume = 0.0
        self._raw_volume = 0.0
        self._released_modules = 0
        # Cells whose modules the runtime released idle (replan.
        # idle_graph_release_seconds) while they stay cells of the gear set:
        # the prewarm leaves them to their next request.
        self._idle_cells: set = set()
        self._idle_released_modules = 0

        calibrated = None
        # Measured compile seconds feed the replan cost model (the mean so far,
        # after every compile) unless the user's config gives the figure.
        self._measure_cost = (calibrate and policy == "replan"
                              and "compile_seconds" not in self._config.get("replan", {}))
        # Asked for, and unless the config gives either figure, the run time per unit of size
        # too: each gear compiled off the request path is timed, and the cost model's
        # seconds_per_run and seconds_per_unit become the line through those times.
        replan_cfg = self._config.get("replan", {})
        self._measure_run_cost = (calibrate_run_cost and policy == "replan"
                                  and "seconds_per_unit" not in replan_cfg
                                  and "seconds_per_run" not in replan_cfg)
        self.calibrated_run_cost: Optional[Dict[str, float]] = None
        if self._measure_cost and self._sig.example_shapes_known():
            smallest = tuple(min(g) for g in initial)
            first = self._compile(smallest)
            calibrated = (smallest, first)
            self._config.setdefault("replan", {})["compile_seconds"] = max(first.compile_seconds, 1e-3)
        self.calibrated_compile_seconds = calibrated[1].compile_seconds if calibrated else None

        self.runtime = _gb.Runtime(self._config, start_worker=False, **self._rt_kwargs)
        self._shared = _Shared()
        me = weakref.ref(self)
        self._listener_id = self.runtime.add_release_listener(
            lambda keys: (lambda gm: gm is not None and gm._on_release(keys))(me()))
        self._thread = None
        threads: List[threading.Thread] = []
        executors: List[concurrent.futures.ThreadPoolExecutor] = []
        if self._artifacts is not None:
            self._put_executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="gearbox-artifact-put")
            executors.append(self._put_executor)
        self._finalizer = weakref.finalize(self, _shutdown, self._shared, self.runtime, threads,
                                           executors)
        if calibrated is not None:
            self._publish(calibrated[1])
        if self._prewarm_enabled:
            self._thread = threading.Thread(target=_prewarm_loop, args=(me, self._shared),
                                            name="gearbox-prewarm", daemon=True)
            threads.append(self._thread)
            self._thread.start()
            self._request_prewarm()
        if start_worker:
            self.runtime.start_worker()

    # ---------------------------------------------------------------- calls

    def _bind(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        names = list(self._sig.inputs)
        if len(args) > len(names):
            raise TypeError(f"GearedModule takes {len(names)} inputs {names}, got {len(args)} "
                            "positional arguments")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in self._sig.inputs:
                raise TypeError(f"unexpected input '{k}'; inputs are {names}")
            if k in bound:
                raise TypeError(f"input '{k}' given twice")
            bound[k] = v
        missing = [n for n in names if n not in bound]
        if missing:
            raise TypeError(f"missing input(s) {missing}; inputs are {names}")
        return {n: bound[n] for n in names}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._shared.closed:
            raise RuntimeError("GearedModule is closed (close() stopped its runtime)")
        tensors = self._bind(args, kwargs)
        if self._sig.example_shapes_known():
            sizes = self._sig.check(tensors)  # nothing left to learn: no lock
        else:
            # Until every dtype and None axis is fixed, check and learn as one
            # step: two first calls that disagree cannot both pass.
            with self._lock:
                sizes = self._sig.check(tensors)
                learned = self._sig.learn(tensors)
            if learned:
                self._request_prewarm()
        try:
            plan = self.runtime.plan(sizes)
        except ValueError as e:
            raise ValueError(f"sizes {dict(zip(self._sig.dims, sizes))}: {e}") from None
        with torch.no_grad():
            outs = self._execute(plan, tensors, sizes)
        self.runtime.record(plan)
        self._account(plan)
        if self._check != "off":
            self._maybe_check(plan, tensors, outs)
        return self._pack(outs)

    def _variant_inputs(self, gear: Sequence[int], extent: Sequence[int], offset: Sequence[int],
                        tensors: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, ...]:
        out = []
        for name, spec in self._sig.inputs.items():
            axes = [(ax, offset[self._sig.dim_index[a]], extent[self._sig.dim_index[a]],
                     gear[self._sig.dim_index[a]])
                    for ax, a in enumerate(spec.axes) if isinstance(a, str)]
            out.append(pad_to(tensors[name], axes, spec.pad))
        return tuple(out)

    def _flatten(self, result: Any) -> List[Any]:
        n = len(self._sig.out_names)
        if self._out_kind == "single":
            return [result]
        if isinstance(result, Mapping):
            missing = [k for k in self._sig.out_names if k not in result]
            if missing:
                raise ValueError(f"outputs: the module returned a dict without {missing}")
            return [result[k] for k in self._sig.out_names]
        if isinstance(result, (tuple, list)):
            if len(result) != n:
                raise ValueError(f"outputs: the module returned {len(result)} outputs, "
                                 f"{n} declared ({self._sig.out_names})")
            return list(result)
        raise ValueError(f"outputs: the module returned a {type(result).__name__}, {n} outputs "
                         f"declared ({self._sig.out_names})")

    def _pack(self, outs: List[torch.Tensor]) -> Any:
        if self._out_kind == "single":
            return outs[0]
        if self._out_kind == "mapping" and self._returns_dict:
            return dict(zip(self._sig.out_names, outs))
        return tuple(outs)

    _returns_dict = False

    def _run_variant(self, v: Any, tensors: Dict[str, torch.Tensor]) -> List[torch.Tensor]:
        gear = tuple(int(g) for g in v.gear)
        args = self._variant_inputs(gear, v.extent, v.offset, tensors)
        if v.eager:
            result = self.module(*args)
        else:
            # This call's reference keeps it alive while it runs. A miss compiles
            # here, without the artifact store (a request never talks to it).
            compiled = self._get(gear, from_request=True)
            result = compiled.fn(*args)
        if isinstance(result, Mapping):
            self._returns_dict = True
        outs = self._flatten(result)
        sliced = []
        for i, t in enumerate(outs):
            self._sig.check_output(i, t, gear)
            axes = [(ax, int(v.extent[self._sig.dim_index[a]]))
                    for ax, a in enumerate(self._sig.out_specs[i].axes) if isinstance(a, str)]
            sliced.append(slice_to(t, axes))
        return sliced

    def _execute(self, plan: Any, tensors: Dict[str, torch.Tensor], sizes: List[int]) -> List[Any]:
        variants = plan.variants
        if len(variants) == 1:
            return self._run_variant(variants[0], tensors)
        full: Optional[List[torch.Tensor]] = None
        for v in variants:
            pieces = self._run_variant(v, tensors)
            if full is None:
                full = []
                for i, p in enumerate(pieces):
                    shape = list(p.shape)
                    for ax, a in enumerate(self._sig.out_specs[i].axes):
                        if isinstance(a, str):
                            shape[ax] = sizes[self._sig.dim_index[a]]
                    full.append(torch.empty(shape, dtype=p.dtype, device=p.device))
            for i, p in enumerate(pieces):
                dst = full[i]
                for ax, a in enumerate(self._sig.out_specs[i].axes):
                    if isinstance(a, str):
                        d = self._sig.dim_index[a]
                        dst = dst.narrow(ax, int(v.offset[d]), int(v.extent[d]))
                if dst.shape != p.shape:
                    raise ValueError(f"output '{self._sig.out_names[i]}': chunk shape "
                                     f"{list(p.shape)} does not fit {list(dst.shape)}; axes not "
                                     "bound to a dimension must not change between gears")
                dst.copy_(p)
        return full

    def _account(self, plan: Any) -> None:
        with self._lock:
            self._counts["calls"] += 1
            self._counts["variants"] += plan.num_variants
            if plan.any_split:
                self._counts["split_calls"] += 1
            if plan.exact:
                self._counts["exact_calls"] += 1
            self._padded_volume += plan.padded_volume
            self._raw_volume += plan.raw_volume
            for v in plan.variants:
                if v.eager:
                    self._counts["eager_variants"] += 1
                    continue
                s = self._gear_stats[tuple(int(g) for g in v.gear)]
                s.hits += 1
                s.padded += math.prod(int(g) for g in v.gear)
                s.raw += math.prod(int(e) for e in v.extent)

    # ------------------------------------------------------------- compiles

    def _example_inputs(self, gear: Gear) -> Tuple[torch.Tensor, ...]:
        device = "cuda" if self._device_type == "cuda" else "cpu"
        return tuple(torch.full(self._sig.input_shape(n, gear), s.example,
                                dtype=self._sig.dtype_of(n), device=device)
                     for n, s in self._sig.inputs.items())

    def _compile(self, gear: Gear, from_request: bool = False) -> CompiledGear:
        """One compile of one gear, measured; nothing cached. With an artifact
        store, off the request path: obtained from the store (or built under
        its compile lease); from a request: built here, stored later."""
        if not self._sig.example_shapes_known():
            raise RuntimeError("cannot compile before the input dtypes (and None axes) are known: "
                               "declare dtype= per input or call the module once")
        examples = self._example_inputs(gear)
        meter = [0.0, 0]  # seconds and bytes of the steps run under the compile lock
        if isinstance(self._compile_fn, Autotune):
            compiled = self._tune(gear, examples, meter, from_request)
            if self._measure_run_cost and compiled.choice in (compiled.median_seconds or {}):
                compiled.run_seconds = compiled.median_seconds[compiled.choice]
            return compiled
        fn, source = self._build(self._compile_fn, gear, examples, meter, from_request)
        compiled = CompiledGear(gear, fn, meter[0], meter[1], source)
        if self._measure_run_cost and not from_request:  # a request does not wait for this
            with self._compile_lock or _NULL_LOCK:
                t0 = time.perf_counter()
                try:
                    compiled.run_seconds = median_run_seconds(fn, examples, self._device_type)
                except Exception:  # the module's own error reaches its first request
                    compiled.run_seconds = None
                # The timing is part of what a gear costs to make: the cost model sees it.
                compiled.compile_seconds += time.perf_counter() - t0
        return compiled

    def _build(self, compile_fn: Callable, gear: Gear, examples: Tuple[torch.Tensor, ...],
               meter: List[Any], from_request: bool) -> Tuple[Callable, str]:
        """One compiler's module for the gear: a torchscript one through the artifact store
        when there is one, any other here. Returns it and "built" or "loaded"."""
        if self._artifacts is None or compile_fn is not compile_torchscript:
            fn = self._step(meter, gear, "compiling", lambda: compile_fn(self.module, examples))
            source = "built"
        elif from_request:
            traced = self._step(meter, gear, "compiling",
                                lambda: _trace_torchscript(self.module, examples))
            fn = self._step(meter, gear, "compiling", lambda: _finish_torchscript(traced))
            self._defer_put(gear, traced)
            source = "built"
        else:
            fn, source = self._obtain(gear, examples, meter)
        if not callable(fn):
            with self._lock:
                self._counts["compile_failures"] += 1
            raise RuntimeError(f"compiler '{getattr(compile_fn, '__name__', self.compiler_name)}' "
                               f"returned {type(fn).__name__} for gear {gear}, expected a callable")
        return fn, source

    # ------------------------------------------------------------- autotune

    def tuning_key(self, gear: Sequence[int]) -> str:
        """The gear key of this gear's tuning choice in the store: :meth:`artifact_key` and a
        digest of the machine class (CPU model, CPU count, torch threads, as at construction)
        and the candidates, so only a replica whose timings would agree reads the choice
        (compiler "autotune")."""
        if not isinstance(self._compile_fn, Autotune):
            raise RuntimeError(f"tuning_key: compiler {self.compiler_name!r} does not tune; "
                               "only 'autotune' does")
        return f"{self.artifact_key(gear)}.{self._machine_class}"

    def _tune(self, gear: Gear, examples: Tuple[torch.Tensor, ...], meter: List[Any],
              from_request: bool) -> CompiledGear:
        """Compiler "autotune": the gear's choice loaded from the store, or measured here (under
        the store's compile lease off the request path; stored later from a request); then the
        chosen candidate's module. Its loser modules are dropped."""
        tuner: Autotune = self._compile_fn
        names = list(tuner.candidates)
        built: Dict[str, Tuple[Callable, str]] = {}

        def candidate(name: str) -> Tuple[Callable, str]:
            if name not in built:
                built[name] = self._build(tuner.candidates[name], gear, examples, meter,
                                          from_request)
            return built[name]

        def measure() -> bytes:
            medians = {}
            for name in names:
                fn = candidate(name)[0]
                medians[name] = self._step(meter, gear, "tuning",
                                           lambda fn=fn: tuner.median_call_seconds(fn, examples))
            with self._lock:
                self._counts["tunings"] += 1
            return encode_tuning(min(names, key=lambda n: medians[n]), medians, tuner.runs)

        record, tuning = None, "measured"
        if self._artifacts is not None and not from_request:
            record, tuning = self._obtain_tuning(gear, names, measure)
        if record is None:
            data = measure()
            record = decode_tuning(data, names)
            if self._artifacts is not None:
                self._defer_put_tuning(gear, data)
        choice = record["choice"]
        fn, source = candidate(choice)
        built.clear()  # the losers' modules go now
        return CompiledGear(gear, fn, meter[0], meter[1], source, choice=choice, tuning=tuning,
                            median_seconds=dict(record["median_seconds"]))

    def _obtain_tuning(self, gear: Gear, names: List[str],
                       measure: Callable[[], bytes]) -> Tuple[Optional[Dict[str, Any]], str]:
        """Single flight through the store for the gear's tuning choice. Returns the record
        and "loaded" or "measured"; (None, "measured") when nothing usable came back (a store
        error or a refused record, warned): the caller measures and stores it again."""
        key = self.tuning_key(gear)
        measured: Dict[str, bytes] = {}

        def build() -> bytes:  # called by obtain() with the GIL, at most once
            try:
                measured["data"] = measure()
            except BaseException as e:
                measured["error"] = e
                raise
            return measured["data"]

        failures = self._artifacts.counters()["store_failures"]
        with self._lock:  # a torchscript candidate's own obtain warns of its store calls
            warned = self._counts["artifact_store_errors"]
        try:
            got = self._artifacts.obtain(key, TUNING_KIND, build)
        except Exception as e:
            if measured.get("error") is e:
                raise  # a candidate's compile or run failed: reported, never stored
            if "data" not in measured:
                self._warn_artifact("artifact_store_errors",
                                    f"tuning {key}: {type(e).__name__}: {e}; measuring it here")
                return None, "measured"
            got = None
        with self._lock:
            warned_inside = self._counts["artifact_store_errors"] != warned
        if self._artifacts.counters()["store_failures"] - failures and not warned_inside:
            self._warn_artifact("artifact_store_errors",
                                f"tuning {key}: store calls failed "
                                f"({self._artifacts.store.describe()} down?)")
        if "data" in measured:
            return decode_tuning(measured["data"], names), "measured"
        try:
            record = decode_tuning(got.artifact.bytes, names)
        except ValueError as e:
            self._warn_artifact("artifact_rejects", f"tuning {key}: artifact "
                                f"{got.artifact.digest} refused ({e}); measuring it here and "
                                "storing it again")
            return None, "measured"
        with self._lock:
            self._counts["tuning_loads"] += 1
        return record, "loaded"

    def _defer_put_tuning(self, gear: Gear, data: bytes) -> None:
        """A choice measured without the store (a request's miss, a refused record): stored
        from the background thread."""
        key = self.tuning_key(gear)

        def put() -> None:
            try:
                self._artifacts.put(key, TUNING_KIND, data)
            except Exception as e:
                self._warn_artifact("artifact_store_errors",
                                    f"tuning {key}: storing it failed ({type(e).__name__}: {e})")
        if self._put_executor is None:  # the calibration compile, before the thread: off the
            put()                          # request path, so stored at once
            return
        try:
            fut = self._put_executor.submit(put)
        except RuntimeError:  # closed meanwhile: nothing to share any more
            return
        with self._lock:
            self._counts["artifact_deferred_puts"] += 1
            self._pending_puts = [f for f in self._pending_puts if not f.done()] + [fut]

    def _step(self, meter: List[Any], gear: Gear, what: str, work: Callable[[], Any],
              count_failure: bool = True) -> Any:
        """Runs one compile step under the compile lock, adds its seconds and
        bytes to meter; a failure is named (and counted as a compile failure)."""
        with self._compile_lock or _NULL_LOCK:
            before = _memory_now(self._device_type)
            t0 = time.perf_counter()
            try:
                out = work()
            except Exception as e:
                if count_failure:
                    with self._lock:
                        self._counts["compile_failures"] += 1
                raise RuntimeError(f"{what} gear {dict(zip(self._sig.dims, gear))} with "
                                   f"'{self.compiler_name}' failed: {type(e).__name__}: {e}") from e
            meter[0] += time.perf_counter() - t0
            meter[1] += max(0, _memory_now(self._device_type) - before)
        return out

    # ------------------------------------------------ shared artifacts (fleet)

    def artifact_key(self, gear: Sequence[int]) -> str:
        """The gear key of this gear's artifact in the store: the gear ("4x16")
        and a digest of what the trace depends on besides the module (the
        example inputs' shapes, dtypes and fill values at this gear)."""
        gear = tuple(int(g) for g in gear)
        if len(gear) != len(self._sig.dims):
            raise ValueError(f"gear: {gear} has {len(gear)} sizes; one per dimension "
                             f"{self._sig.dims}")
        if not self._sig.example_shapes_known():
            raise RuntimeError("artifact_key: the input dtypes (and None axes) are not known yet: "
                               "declare dtype= per input or call the module once")
        sig = [list(self._sig.dims)] + [
            [n, self._sig.input_shape(n, gear), str(self._sig.dtype_of(n)), repr(s.example)]
            for n, s in self._sig.inputs.items()]
        digest = hashlib.sha256(json.dumps(sig).encode()).hexdigest()[:16]
        return f"{_gear_name(gear)}.{digest}"

    def _warn_artifact(self, counter: str, message: str) -> None:
        with self._lock:
            self._counts[counter] += 1
        warnings.warn(f"gearbox.torch artifact store: {message}", RuntimeWarning)

    def _obtain(self, gear: Gear, examples: Tuple[torch.Tensor, ...],
                meter: List[Any]) -> Tuple[Callable, str]:
        """Single flight through the store: load the gear's traced module, or
        trace it under the compile lease and put it; then freeze and optimize
        it here. Any store or artifact problem is a miss (warned): trace here."""
        key = self.artifact_key(gear)
        built: Dict[str, Any] = {}

        def build() -> bytes:  # called by obtain() with the GIL, at most once
            try:
                built["traced"] = self._step(meter, gear, "compiling",
                                             lambda: _trace_torchscript(self.module, examples))
            except BaseException as e:
                built["error"] = e
                raise
            try:
                return _save_torchscript(built["traced"])
            except Exception as e:
                built["unsaved"] = e
                raise

        failures = self._artifacts.counters()["store_failures"]
        try:
            got = self._artifacts.obtain(key, ARTIFACT_KIND, build)
            failed = self._artifacts.counters()["store_failures"] - failures
            if failed:
                self._warn_artifact("artifact_store_errors",
                                    f"gear {key}: {failed} store call(s) failed "
                                    f"({self._artifacts.store.describe()} down?); "
                                    f"the gear was {got.source} without it")
        except Exception as e:
            if built.get("error") is e:
                raise  # the compile itself failed: reported, never stored
            if built.get("unsaved") is e:
                self._warn_artifact("artifact_store_errors",
                                    f"gear {key}: torch.jit.save failed ({type(e).__name__}: {e}); "
                                    "the traced module serves this replica only")
            elif "traced" not in built:
                self._warn_artifact("artifact_store_errors",
                                    f"gear {key}: {type(e).__name__}: {e}; tracing it here")
            got = None
        if got is not None and got.source == "loaded":
            try:
                def load() -> Callable:
                    return _finish_torchscript(_load_torchscript(got.artifact.bytes))
                fn = self._step(meter, gear, "loading", load, count_failure=False)
                with self._lock:
                    self._counts["artifact_loads"] += 1
                return fn, "loaded"
            except RuntimeError as e:  # the artifact's fault, not a compile failure
                self._warn_artifact("artifact_rejects",
                                    f"gear {key}: artifact {got.artifact.digest} refused "
                                    f"({e.__cause__ or e}); tracing it here and storing it again")
        if "traced" not in built:
            built["traced"] = self._step(meter, gear, "compiling",
                                         lambda: _trace_torchscript(self.module, examples))
            if got is not None:  # the artifact was refused: replace it in the store
                self._put_traced(key, built["traced"])
        return self._step(meter, gear, "compiling",
                          lambda: _finish_torchscript(built["traced"])), "built"

    def _put_traced(self, key: str, traced: Any) -> None:
        try:
            self._artifacts.put(key, ARTIFACT_KIND, _save_torchscript(traced))
        except Exception as e:
            self._warn_artifact("artifact_store_errors",
                                f"gear {key}: storing it failed ({type(e).__name__}: {e})")

    def _defer_put(self, gear: Gear, traced: Any) -> None:
        """A request traced this gear: store it from the background thread."""
        key = self.artifact_key(gear)
        try:
            fut = self._put_executor.submit(self._put_traced, key, traced)
        except RuntimeError:  # closed meanwhile: nothing to share any more
            return
        with self._lock:
            self._counts["artifact_deferred_puts"] += 1
            self._pending_puts = [f for f in self._pending_puts if not f.done()] + [fut]

    def wait_artifact_puts(self, timeout: float = 60.0) -> bool:
        """Waits until the artifacts of gears traced by requests are stored
        (or failed, with a warning). Returns False on timeout."""
        with self._lock:
            pending = list(self._pending_puts)
        done, not_done = concurrent.futures.wait(pending, timeout=timeout)
        return not not_done

    def _publish(self, compiled: CompiledGear) -> bool:
        """Registers the compiled gear in the runtime's pool under a cleanup key
        attached to its gears. Returns False when a gear was evicted meanwhile
        (then it is not cached; the caller may still use it once)."""
        rt = self.runtime
        key = rt.pool.register(compiled, compiled.bytes)
        rt.pool.consume_recent_keys()
        compiled.key = key
        now = rt.now()
        with self._lock:
            self._table[compiled.gear] = compiled
            self._by_key[key] = compiled.gear
            self._counts["compiles"] += 1
            self._compile_log.append({"gear": list(compiled.gear), "seconds": compiled.compile_seconds,
                                      "bytes": compiled.bytes, "time": now,
                                      "source": compiled.source,
                                      "run_seconds": compiled.run_seconds})
        attached = rt.attach_cleanup_keys(list(compiled.gear), [key])
        if not attached:
            self._drop_keys([key])
        self._feed_cost_model()
        return attached

    def _feed_cost_model(self) -> None:
        if not (self._measure_cost or self._measure_run_cost):
            return
        with self._lock:
            secs = [c["seconds"] for c in self._compile_log]
            sizes = [c["bytes"] for c in self._compile_log if c["bytes"]]
            runs = [(c["gear"], c["run_seconds"]) for c in self._compile_log
                    if c["run_seconds"] is not None]
        fields: Dict[str, float] = {}
        if self._measure_cost and secs:
            fields["compile_seconds"] = max(sum(secs) / len(secs), 1e-3)
            if sizes:  # priced when the config's replan cost has gamma > 0
                fields["memory_fixed_bytes"] = float(sum(sizes) / len(sizes))
        fit = None
        if self._measure_run_cost and runs:  # units as the policy counts them
            exponent = self.runtime.replan_cost()["runtime_exponent"]
            fit = fit_run_cost([(math.prod(g) ** exponent, t) for g, t in runs])
        if fit is not None:
            fields["seconds_per_run"], fields["seconds_per_unit"] = fit
            with self._lock:
                self.calibrated_run_cost = {"seconds_per_run": fit[0], "seconds_per_unit": fit[1],
                                            "gears_timed": len(runs)}
        if fields:
            self.runtime.set_replan_cost(**fields)

    def _get(self, gear: Gear, from_request: bool = False) -> CompiledGear:
        """The gear's compiled module; compiles it once on a miss however many
        threads miss at once; a failure reaches every waiter and is not cached.
        A request that misses a gear being obtained from the artifact store
        (prewarm) waits for that, as for a compile (at most the store's
        wait_ms longer)."""
        hit = self._table.get(gear)  # dict reads are atomic
        if hit is not None:
            return hit
        with self._lock:
            hit = self._table.get(gear)
            if hit is not None:
                return hit
            fut = self._inflight.get(gear)
            owner = fut is None
            if owner:
                fut = concurrent.futures.Future()
                self._inflight[gear] = fut
                self._idle_cells.discard(gear)  # wanted again: the prewarm may keep it
        if not owner:
            return fut.result()
        try:
            compiled = self._compile(gear, from_request)
            self._publish(compiled)
        except BaseException as e:
            with self._lock:
                self._inflight.pop(gear, None)
            fut.set_exception(e)
            raise
        with self._lock:
            self._inflight.pop(gear, None)
        fut.set_result(compiled)
        return compiled

    def _drop_keys(self, keys: Sequence[int]) -> None:
        if not keys:
            return
        # The runtime publishes the next gear set before it releases: a
        # released cell still in it was released idle, not evicted.
        cells = set(self._cells())
        with self._lock:
            for k in keys:
                gear = self._by_key.pop(int(k), None)
                if gear is not None:
                    c = self._table.get(gear)
                    if c is not None and c.key == int(k):
                        del self._table[gear]
                        self._released_modules += 1
                        if gear in cells:
                            self._idle_cells.add(gear)
                            self._idle_released_modules += 1

    def _on_release(self, keys: Sequence[int]) -> None:
        # On the updating thread, after every update: the pool has dropped the
        # evicted gears' modules; drop ours (in-flight calls keep theirs).
        self._drop_keys(list(keys))
        self._request_prewarm()  # the prewarm thread also notes the update's record

    def _note_decision(self, rec: Optional[Dict[str, Any]]) -> None:
        # A look at the combinations that changed nothing (up to one a second
        # on a joint or sparse set) would crowd the updates out of the history.
        if rec is None or (rec.get("trigger") == "combinations" and not rec.get("changed")):
            return
        with self._lock:
            if self._decisions and self._decisions[-1].get("sequence") == rec.get("sequence"):
                return
            self._decisions.append(rec)

    # -------------------------------------------------------------- prewarm

    def _request_prewarm(self) -> None:
        if self._thread is None:
            return
        with self._shared.cond:
            self._shared.pending = True
            self._shared.cond.notify_all()

    def _cells(self) -> List[Gear]:
        snap = self.runtime.snapshot()
        combos = [tuple(int(g) for g in c) for c in snap.combinations]
        if not combos:
            combos = [tuple(int(g) for g in c) for c in itertools.product(*snap.gears)]
        return sorted(combos, key=lambda c: (-math.prod(c), c))

    def _prewarm_once(self) -> None:
        # Woken by the release listener (kept short: it runs on the updating
        # thread); the update's record is read here, on the prewarm thread.
        self._note_decision(self.runtime.last_update())
        if not self._sig.example_shapes_known():
            return
        version = self.runtime.snapshot().version
        for gear in self._cells():
            if self._shared.closed or self.runtime.snapshot().version != version:
                self._request_prewarm()  # a newer gear set: start over
                return
            if gear in self._table or gear in self._idle_cells:
                continue
            try:
                self._get(gear)
            except Exception as e:  # reported; the gear compiles again on first use
                if self._shared.closed:
                    return
                with self._lock:
                    self._counts["prewarm_failures"] += 1
                warnings.warn(f"gearbox.torch prewarm: {e}", RuntimeWarning)

    def wait_prewarm(self, timeout: float = 60.0) -> bool:
        """Waits until the prewarm thread has compiled the current gear set.
        Returns False on timeout (or when prewarm is off)."""
        if self._thread is None:
            return False
        deadline = time.monotonic() + timeout
        with self._shared.cond:
            while self._shared.pending or self._shared.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._shared.cond.wait(timeout=left)
        return True

    def warm(self) -> None:
        """Compiles every gear combination of the current gear set now, on this thread."""
        for gear in self._cells():
            self._get(gear)

    # ---------------------------------------------------------- update path

    def update(self, now: Optional[float] = None) -> Dict[str, Any]:
        """One update of the gear set (the runtime's run_once); returns its record."""
        rec = self.runtime.run_once(now)
        self._note_decision(rec)
        return rec

    # -------------------------------------------------------- introspection

    @property
    def config(self) -> Dict[str, Any]:
        """The config the runtime was created from (with calibrated compile seconds)."""
        return copy.deepcopy(self._config)

    @property
    def dims(self) -> List[str]:
        return list(self._sig.dims)

    @property
    def gears(self) -> Dict[str, List[int]]:
        """The current gears per dimension."""
        snap = self.runtime.snapshot()
        return {d: [int(g) for g in gs] for d, gs in zip(self._sig.dims, snap.gears)}

    def compiled_gears(self) -> List[Gear]:
        with self._lock:
            return sorted(self._table)

    def compiled(self, gear: Sequence[int]) -> Optional[CompiledGear]:
        return self._table.get(tuple(int(g) for g in gear))

    def decisions(self) -> List[Dict[str, Any]]:
        """The update records seen (by update(), the prewarm thread, or now), oldest first."""
        self._note_decision(self.runtime.last_update())
        with self._lock:
            return list(self._decisions)

    def compile_times(self) -> Dict[str, float]:
        with self._lock:
            return {_gear_name(c.gear): c.compile_seconds for c in self._table.values()}

    def summary(self) -> Dict[str, Any]:
        with self._lock:
            per_gear = {}
            for gear in sorted(set(self._gear_stats) | set(self._table)):
                s = self._gear_stats.get(gear)
                c = self._table.get(gear)
                per_gear[_gear_name(gear)] = {
                    "gear": list(gear),
                    "hits": s.hits if s else 0,
                    "padding": (1.0 - s.raw / s.padded) if s and s.padded else 0.0,
                    "compiled": c is not None,
                    "source": c.source if c else None,
                    "choice": c.choice if c else None,
                    "tuning": c.tuning if c else None,
                    "compile_seconds": c.compile_seconds if c else None,
                    "run_seconds": c.run_seconds if c else None,
                    "bytes": c.bytes if c else None,
                }
            log = list(self._compile_log)
            counts = dict(self._counts)
            padded, raw = self._padded_volume, self._raw_volume
            released = self._released_modules
            idle_released = self._idle_released_modules
        decisions = len(self.decisions())
        secs = [c["seconds"] for c in log]
        return {
            "dims": list(self._sig.dims),
            "gears": self.gears,
            "snapshot_version": self.runtime.snapshot().version,
            "policy": self._policy,
            "compiler": self.compiler_name,
            "calls": counts.get("calls", 0),
            "variants": counts.get("variants", 0),
            "split_calls": counts.get("split_calls", 0),
            "exact_calls": counts.get("exact_calls", 0),
            "eager_variants": counts.get("eager_variants", 0),
            "padding_waste": (padded / raw - 1.0) if raw else 0.0,
            "compiles": sum(1 for c in log if c["source"] == "built"),
            "artifact_loads": counts.get("artifact_loads", 0),
            "artifact_rejects": counts.get("artifact_rejects", 0),
            "artifact_store_errors": counts.get("artifact_store_errors", 0),
            "artifact_deferred_puts": counts.get("artifact_deferred_puts", 0),
            "tunings": counts.get("tunings", 0),
            "tuning_loads": counts.get("tuning_loads", 0),
            "artifact_store": self._artifacts.counters() if self._artifacts is not None else None,
            "compile_seconds": sum(secs),
            "compile_seconds_mean": (sum(secs) / len(secs)) if secs else None,
            "calibrated_compile_seconds": self.calibrated_compile_seconds,
            "calibrated_run_cost": (dict(self.calibrated_run_cost)
                                    if self.calibrated_run_cost else None),
            "compile_failures": counts.get("compile_failures", 0),
            "prewarm_failures": counts.get("prewarm_failures", 0),
            "cached_modules": sum(1 for g in per_gear.values() if g["compiled"]),
            "released_modules": released,
            "idle_released_modules": idle_released,
            "decisions": decisions,
            "per_gear": per_gear,
            "runtime": self.runtime.counters(),
            "checks": counts.get("checks", 0),
            "check_failures": counts.get("check_failures", 0),
        }

    def save_plan(self, path: str | os.PathLike) -> Dict[str, Any]:
        """Writes the current gear set (and, for reading, its combinations and
        measured compile costs) as JSON; load_plan restores the gear lists."""
        snap = self.runtime.snapshot()
        with self._lock:
            secs = {_gear_name(c.gear): c.compile_seconds for c in self._table.values()}
        plan = {"format": "gearbox.torch plan", "version": 1, "dims": list(self._sig.dims),
                "gears": [[int(g) for g in gs] for gs in snap.gears],
                "combinations": [[int(g) for g in c] for c in snap.combinations],
                "policy": self._policy, "compiler": self.compiler_name, "compile_seconds": secs}
        with open(path, "w") as f:
            json.dump(plan, f, indent=1)
        return plan

    def load_plan(self, path: str | os.PathLike, compile: bool = True) -> Dict[str, Any]:
        """Sets the gear lists saved by save_plan (commit_update) and, with
        compile=True, compiles all of them now (a warm restart). A joint or
        sparse set's combinations and the saved compile seconds are not
        restored: the policy chooses combinations again, compiles are timed again."""
        with open(path) as f:
            try:
                plan = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"plan file {os.fspath(path)}: not JSON ({e})") from None
        if not isinstance(plan, dict) or plan.get("format") != "gearbox.torch plan":
            raise ValueError(f"plan file {os.fspath(path)}: 'format' is not 'gearbox.torch plan'")
        if plan.get("dims") != list(self._sig.dims):
            raise ValueError(f"plan file {os.fspath(path)}: dims {plan.get('dims')} differ from "
                             f"this module's {self._sig.dims}")
        if not isinstance(plan.get("gears"), list):
            raise ValueError(f"plan file {os.fspath(path)}: 'gears' is {plan.get('gears')!r}; "
                             "a list of gear lists, one per dimension")
        record = self.runtime.commit_update(plan["gears"])
        if compile:
            self.warm()
        return record

    def close(self) -> None:
        """Stops the prewarm thread (after the compile in progress) and the
        runtime's worker, and drops the compiled modules (a CUDA graph's
        memory goes back to its pool now, not when this object is collected,
        unless something else holds the module: a call still running, a
        CompiledGear kept from compiled()); later calls raise RuntimeError.
        Idempotent."""
        self._finalizer()
        with self._lock:
            self._table.clear()
            self._by_key.clear()
            self._idle_cells.clear()

    def __enter__(self) -> "GearedModule":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------- checking

    def _maybe_check(self, plan: Any, tensors: Dict[str, torch.Tensor], outs: List[Any]) -> None:
        with self._lock:
            n = self._counts["calls"]
        if (n - 1) % self._check_every:
            return
        with torch.no_grad():
            ref = self._flatten(self.module(*tensors.values()))
        with self._lock:
            self._counts["checks"] += 1
        for v in plan.variants:
            for i, (got, want) in enumerate(zip(outs, ref)):
                region_got, region_want = got, want
                for ax, a in enumerate(self._sig.out_specs[i].axes):
                    if isinstance(a, str):
                        d = self._sig.dim_index[a]
                        region_got = region_got.narrow(ax, int(v.offset[d]), int(v.extent[d]))
                        region_want = region_want.narrow(ax, int(v.offset[d]), int(v.extent[d]))
                if region_got.shape != region_want.shape or not torch.allclose(
                        region_got.float(), region_want.float(), rtol=self._check_rtol,
                        atol=self._check_atol, equal_nan=True):
                    diff = ((region_got.float() - region_want.float()).abs().max().item()
                            if region_got.shape == region_want.shape else float("nan"))
                    with self._lock:
                        self._counts["check_failures"] += 1
                    msg = (f"padding-invariance check: gear {dict(zip(self._sig.dims, v.gear))} "
                           f"(extents {dict(zip(self._sig.dims, v.extent))}): output "
                           f"'{self._sig.out_names[i]}' differs from the eager module by {diff:.3g} "
                           f"(rtol {self._check_rtol}, atol {self._check_atol}); the module is not "
                           "padding-invariant on its valid part (mask the padding: attention "
                           "without a key padding mask, a mean or a norm over a padded axis), or "
                           f"the compiler '{self.compiler_name}' changed its result")
                    if self._check == "debug":
                        raise PaddingInvarianceError(msg)
                    warnings.warn(msg, RuntimeWarning)
                    return


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NULL_LOCK = _NullLock()


def _gear_name(gear: Sequence[int]) -> str:
    return "x".join(str(int(g)) for g in gear)
