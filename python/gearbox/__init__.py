"""gearbox: shape-specialized compiled graphs for dynamic-shape models, from Python.

The C++ core is the extension ``gearbox._gearbox`` (see docs/PYTHON.md):

* :class:`Runtime` -- the adaptive gear runtime: plan a request on the current
  gears, record what ran, update the gears (``run_once`` or the worker thread).
* :class:`Snapshot`, :class:`Plan`, :class:`Variant` -- gear sets and plans as values.
* :class:`Pool` -- compiled graphs (any Python object) released when their gear is evicted.
* :func:`replay`, :func:`plan_gears`, :func:`convert_trace`, :func:`emit_server_config` -- the
  command-line tools as functions.
* :class:`FleetStore` (:func:`open_fleet_store`, :class:`InProcessFleetStore`,
  :class:`RedisFleetStore`), :class:`FleetFingerprint`, :class:`FleetArtifactStore` -- what the
  replicas of a model share (docs/FLEET.md): ``gearbox.torch`` stores its TorchScript modules there.

``gearbox.torch`` (imported on its own) wraps any ``torch.nn.Module``.
"""

from ._gearbox import (
    FleetArtifact,
    FleetArtifactStore,
    FleetFingerprint,
    FleetStore,
    InProcessFleetStore,
    ObtainedArtifact,
    Plan,
    Pool,
    Runtime,
    Snapshot,
    RedisFleetStore,
    Variant,
    convert_trace,
    emit_server_config,
    fleet_key_prefix,
    fleet_sha256_hex,
    open_fleet_store,
    plan_gears,
    replay,
)

__version__ = "0.1.0"

__all__ = [
    "FleetArtifact",
    "FleetArtifactStore",
    "FleetFingerprint",
    "FleetStore",
    "InProcessFleetStore",
    "ObtainedArtifact",
    "Plan",
    "Pool",
    "Runtime",
    "Snapshot",
    "RedisFleetStore",
    "Variant",
    "convert_trace",
    "emit_server_config",
    "fleet_key_prefix",
    "fleet_sha256_hex",
    "open_fleet_store",
    "plan_gears",
    "replay",
]
