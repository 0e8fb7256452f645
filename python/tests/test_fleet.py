"""The fleet's stores from Python, and gearbox.torch sharing its TorchScript
modules through them (docs/FLEET.md, "The Python integration"): a second
replica loads what the first traced, a corrupt or unloadable artifact is
refused and rebuilt, a store that is down is a miss, one replica waits on
another's compile lease, and two processes share through a real redis-server."""

import json
import math
import logging
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

import gearbox

torch = pytest.importorskip("torch")
gtorch = pytest.importorskip("gearbox.torch")
from gearbox.torch import GearedModule, model_fingerprint  # noqa: E402
from tiny_models import TinyEncoder  # noqa: E402

torch.set_num_threads(1)
ROOT = pathlib.Path(__file__).resolve().parents[2]


class PixelConv(torch.nn.Module):
    """A 1x1 convolution (per pixel: padding-invariant); optimize_for_inference
    prepacks it with oneDNN, which torch.jit.load cannot read back."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.conv = torch.nn.Conv2d(3, 5, 1)

    def forward(self, x):
        return torch.relu(self.conv(x))


DIMS = {"batch": {"gears": [1, 2, 4], "splittable": True}, "seq": {"gears": [4, 8]}}
CELLS = 6  # 3 x 2 gear combinations


def encoder(artifact_store, model=None, dims=DIMS, **kw):
    args = dict(inputs={"ids": {"axes": ["batch", "seq"], "pad": 0, "dtype": torch.long},
                        "mask": {"axes": ["batch", "seq"], "pad": True, "dtype": torch.bool}},
                outputs=["batch", "seq", 40], start_worker=False, prewarm=False,
                calibrate=False, artifact_store=artifact_store)
    args.update(kw)
    return GearedModule(model if model is not None else TinyEncoder().eval(), dims, **args)


def inputs(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 40, (b, s), generator=g)
    mask = torch.zeros(b, s, dtype=torch.bool)
    mask[:, s - 1:] = s > 2  # some key padding
    return ids, mask


SIZES = [(1, 3), (2, 8), (3, 5), (4, 4), (6, 7)]  # the last one is split


def outputs(gm):
    return [gm(*inputs(b, s, i)) for i, (b, s) in enumerate(SIZES)]


@pytest.fixture
def traces(monkeypatch):
    """Counts the traces gearbox.torch runs (what a shared artifact saves)."""
    count = [0]
    real = gtorch._trace_torchscript

    def counted(module, examples):
        count[0] += 1
        return real(module, examples)

    monkeypatch.setattr(gtorch, "_trace_torchscript", counted)
    return count


def artifact_store(store, model, replica, **kw):
    return gearbox.FleetArtifactStore(store, model_fingerprint(model), replica_id=replica, **kw)


# ------------------------------------------------------------ the bindings


def test_fingerprint_from_the_module_follows_code_and_weights():
    a, b = TinyEncoder().eval(), TinyEncoder().eval()
    fa, fb = model_fingerprint(a), model_fingerprint(b)
    assert fa.model_id == fb.model_id and fa.model_id.startswith("sha256:")
    assert fa.prefix == fb.prefix == gearbox.fleet_key_prefix(fa)
    assert fa.backend == "torchscript" and fa.backend_version == torch.__version__
    assert fa.dtype == "float32"
    with torch.no_grad():
        b.head.bias[0] += 1.0
    assert model_fingerprint(b).model_id != fa.model_id
    assert model_fingerprint(TinyEncoder(seed=1)).prefix != fa.prefix
    assert model_fingerprint(a, model_id="my-model@3").model_id == "my-model@3"
    with pytest.raises(ValueError, match="model_id"):
        gearbox.FleetFingerprint("")


def test_put_get_obtain_through_the_bindings():
    store = gearbox.open_fleet_store("in-process")
    assert isinstance(store, gearbox.InProcessFleetStore) and store.describe() == "in-process"
    fp = gearbox.FleetFingerprint("m", backend="test")
    art = gearbox.FleetArtifactStore(store, fp, replica_id="r1", chunk_bytes=1024)
    data = bytes(range(256)) * 20  # 5 chunks
    digest = art.put("4x8", "tuning", data)
    assert digest == gearbox.fleet_sha256_hex(data)
    got = art.get("4x8", "tuning")
    assert (got.kind, got.digest, got.bytes) == ("tuning", digest, data)
    assert art.get("4x8", "other") is None and art.get("2x8", "tuning") is None
    assert art.prefix == fp.prefix and art.store is store

    calls = []
    first = art.obtain("1x1", "tuning", lambda: calls.append(1) or b"built once")
    second = art.obtain("1x1", "tuning", lambda: calls.append(1) or b"built twice")
    assert (first.source, second.source, len(calls)) == ("built", "loaded", 1)
    assert second.artifact.bytes == b"built once" and not second.waited

    class Boom(Exception):
        pass

    def fails():
        raise Boom("no")

    with pytest.raises(Boom):
        art.obtain("2x2", "tuning", fails)
    assert art.get("2x2", "tuning") is None  # a failure is never stored
    with pytest.raises(TypeError, match="bytes"):
        art.obtain("3x3", "tuning", lambda: "text")
    with pytest.raises(ValueError, match="kind"):
        art.put("4x8", "Bad Kind", b"x")
    with pytest.raises(ValueError, match="replica_id"):
        gearbox.FleetArtifactStore(store, fp, replica_id="")
    c = art.counters()
    assert (c["puts"], c["builds"], c["loads"]) == (2, 1, 2)


# ---------------------------------------------------- gearbox.torch, in process


def test_a_second_replica_loads_the_first_ones_modules_instead_of_tracing(traces):
    store = gearbox.InProcessFleetStore()
    first = encoder(artifact_store(store, TinyEncoder(), "replica-1"))
    first.warm()
    assert traces[0] == CELLS
    s1 = first.summary()
    assert (s1["compiles"], s1["artifact_loads"], s1["artifact_store"]["puts"]) == (CELLS, 0, CELLS)

    art2 = artifact_store(store, TinyEncoder(), "replica-2")
    second = encoder(art2)
    second.warm()
    assert traces[0] == CELLS  # nothing traced again
    s2 = second.summary()
    assert (s2["compiles"], s2["artifact_loads"]) == (0, CELLS)
    assert all(g["source"] == "loaded" for g in s2["per_gear"].values())
    assert art2.counters()["loads"] == CELLS and art2.counters()["corrupt"] == 0
    for a, b in zip(outputs(first), outputs(second)):
        assert torch.equal(a, b)
    eager = TinyEncoder().eval()
    for i, (b, s) in enumerate(SIZES):
        with torch.no_grad():
            want = eager(*inputs(b, s, i))
        assert torch.allclose(second(*inputs(b, s, i)), want, atol=1e-5)
    first.close()
    second.close()


def test_another_model_or_signature_shares_nothing(traces):
    store = gearbox.InProcessFleetStore()
    encoder(artifact_store(store, TinyEncoder(), "a")).warm()
    other = encoder(artifact_store(store, TinyEncoder(seed=5), "b"), model=TinyEncoder(seed=5).eval())
    other.warm()
    assert other.summary()["artifact_loads"] == 0  # other weights: another prefix
    assert traces[0] == 2 * CELLS
    # The same model with another input fill value traces differently: another gear key.
    same = TinyEncoder().eval()
    spec = {"ids": {"axes": ["batch", "seq"], "pad": 0, "dtype": torch.long, "example": 1},
            "mask": {"axes": ["batch", "seq"], "pad": True, "dtype": torch.bool}}
    third = encoder(artifact_store(store, same, "c"), model=same, inputs=spec)
    assert third.artifact_key((1, 4)) != encoder(None).artifact_key((1, 4))
    third.warm()
    assert third.summary()["artifact_loads"] == 0
    with pytest.raises(ValueError, match=r"gear: \(1,\) has 1 sizes; one per dimension"):
        third.artifact_key((1,))
    untyped = GearedModule(TinyEncoder().eval(), DIMS, inputs={"ids": ["batch", "seq"],
                                                              "mask": ["batch", "seq"]},
                           outputs=["batch", "seq", 40], start_worker=False, prewarm=False)
    with pytest.raises(RuntimeError, match="artifact_key: the input dtypes"):
        untyped.artifact_key((1, 4))


def test_a_corrupt_artifact_is_rejected_logged_and_rebuilt(traces, caplog):
    store = gearbox.InProcessFleetStore()
    art1 = artifact_store(store, TinyEncoder(), "replica-1", chunk_bytes=4096)
    first = encoder(art1)
    first.warm()
    gear = (2, 8)
    key = first.artifact_key(gear)
    digest = art1.get(key, "torchscript").digest
    chunk = f"{art1.prefix}:art:{digest}:c1"
    raw = bytearray(store.get_raw_string(chunk))
    raw[100] ^= 0x40  # one flipped bit
    store.put_raw_string(chunk, bytes(raw))

    art2 = artifact_store(store, TinyEncoder(), "replica-2", chunk_bytes=4096)
    second = encoder(art2)
    with caplog.at_level(logging.ERROR, logger="gearbox.fleet"):
        second.warm()
    assert any(digest in r.getMessage() and "SHA-256" in r.getMessage()
               and r.levelno >= logging.ERROR for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    assert art2.counters()["corrupt"] >= 1  # the lookup, and the look again under the lease
    s2 = second.summary()
    assert (s2["compiles"], s2["artifact_loads"]) == (1, CELLS - 1)
    assert s2["per_gear"]["2x8"]["source"] == "built"
    assert traces[0] == CELLS + 1
    for a, b in zip(outputs(first), outputs(second)):
        assert torch.equal(a, b)
    third = encoder(artifact_store(store, TinyEncoder(), "replica-3", chunk_bytes=4096))
    third.warm()  # the rebuilt artifact replaced the corrupt one
    assert third.summary()["artifact_loads"] == CELLS


def test_an_artifact_torch_cannot_load_is_refused_and_replaced(traces):
    store = gearbox.InProcessFleetStore()
    art = artifact_store(store, TinyEncoder(), "replica-1")
    gm = encoder(art)
    key = gm.artifact_key((4, 8))
    art.put(key, "torchscript", b"verified bytes, but no TorchScript module")
    with pytest.warns(RuntimeWarning, match=f"gear {key}: artifact [0-9a-f]{{64}} refused"):
        gm.warm()
    s = gm.summary()
    assert (s["artifact_rejects"], s["artifact_loads"], s["compiles"]) == (1, 0, CELLS)
    assert s["compile_failures"] == 0
    replaced = art.get(key, "torchscript")
    assert replaced.digest != gearbox.fleet_sha256_hex(b"verified bytes, but no TorchScript module")
    again = encoder(artifact_store(store, TinyEncoder(), "replica-2"))
    again.warm()
    assert again.summary()["artifact_loads"] == CELLS
    for a, b in zip(outputs(gm), outputs(again)):
        assert torch.equal(a, b)


def test_a_module_optimize_for_inference_makes_unloadable_is_shared_traced(traces):
    # torch 1.13 cannot torch.jit.load an optimized module with prepacked
    # convolutions: the store holds the traced module, each replica optimizes it.
    store = gearbox.InProcessFleetStore()
    dims = {"batch": {"gears": [1, 2]}, "h": {"gears": [4, 8]}}
    kw = dict(inputs={"x": {"axes": ["batch", 3, "h", "h"], "dtype": torch.float32}},
              outputs=["batch", 5, "h", "h"], dims=dims)
    a = encoder(artifact_store(store, PixelConv(), "a"), model=PixelConv().eval(), **kw)
    a.warm()
    b = encoder(artifact_store(store, PixelConv(), "b"), model=PixelConv().eval(), **kw)
    b.warm()
    assert (b.summary()["artifact_loads"], b.summary()["compiles"], traces[0]) == (4, 0, 4)
    x = torch.randn(2, 3, 7, 7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a(x), b(x))


@pytest.mark.parametrize("down", ["in-process", "redis"])
def test_a_store_that_is_down_is_a_miss_with_a_warning(traces, down):
    if down == "in-process":
        store = gearbox.InProcessFleetStore()
        store.set_available(False)
    else:  # nobody listens on the port
        store = gearbox.RedisFleetStore(f"redis://127.0.0.1:{free_port()}", log=lambda *a: None)
    gm = encoder(artifact_store(store, TinyEncoder(), "r", log=lambda *a: None))
    with pytest.warns(RuntimeWarning, match="store call"):
        gm.warm()
    s = gm.summary()
    assert (s["compiles"], s["artifact_loads"], traces[0]) == (CELLS, 0, CELLS)
    assert s["artifact_store_errors"] >= 1 and s["artifact_store"]["store_failures"] >= 1
    eager = TinyEncoder().eval()
    with torch.no_grad():
        assert torch.allclose(gm(*inputs(3, 5, 0)), eager(*inputs(3, 5, 0)), atol=1e-5)


def test_a_requests_miss_traces_without_the_store_and_stores_it_later(traces):
    store = gearbox.InProcessFleetStore()
    art = artifact_store(store, TinyEncoder(), "r1")
    gm = encoder(art)
    gate = threading.Event()
    gm._put_executor.submit(gate.wait, 120)  # holds the put thread: the put queues behind it
    calls = store.counters()["calls"]
    gm(*inputs(2, 8, 0))  # compiles gear (2, 8) on this thread
    assert store.counters()["calls"] == calls  # the request made no store call
    gate.set()
    assert gm.wait_artifact_puts(timeout=60)
    assert store.counters()["calls"] > calls
    s = gm.summary()
    assert (s["compiles"], s["artifact_deferred_puts"]) == (1, 1)
    assert art.get(gm.artifact_key((2, 8)), "torchscript") is not None
    other = encoder(artifact_store(store, TinyEncoder(), "r2"))
    other.warm()
    assert other.summary()["artifact_loads"] == 1 and traces[0] == CELLS


def wait_until(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def hold_lease(art, key, data_fn):
    """Another replica takes the compile lease of `key` (its build blocks until
    released); returns (thread, started, release)."""
    started, release = threading.Event(), threading.Event()

    def build():
        started.set()
        release.wait(timeout=120)
        return data_fn()

    t = threading.Thread(target=lambda: art.obtain(key, "torchscript", build))
    t.start()
    assert started.wait(timeout=60)
    return t, release


ONE_GEAR = {"batch": {"gears": [2]}, "seq": {"gears": [8]}}


def traced_bytes(gear):
    gm = encoder(None, dims=ONE_GEAR)
    return gtorch._save_torchscript(gtorch._trace_torchscript(gm.module, gm._example_inputs(gear)))


def test_a_replica_that_finds_the_lease_held_waits_for_the_holders_artifact(traces):
    store = gearbox.InProcessFleetStore()
    holder = artifact_store(store, TinyEncoder(), "holder", lease_ms=600000)
    waiter = artifact_store(store, TinyEncoder(), "waiter", wait_ms=600000, poll_ms=10)
    gm = encoder(waiter, dims=ONE_GEAR)
    key = gm.artifact_key((2, 8))
    t, release = hold_lease(holder, key, lambda: traced_bytes((2, 8)))
    w = threading.Thread(target=gm.warm)
    w.start()
    wait_until(lambda: waiter.counters()["lease_waits"] == 1, "the waiter to find the lease")
    release.set()
    t.join(timeout=120)
    w.join(timeout=120)
    s = gm.summary()
    assert (s["artifact_loads"], s["compiles"]) == (1, 0)
    assert traces[0] == 1  # the holder's trace only
    assert waiter.counters()["builds"] == 0


def test_a_replica_builds_itself_when_the_lease_holder_does_not_deliver(traces):
    store = gearbox.InProcessFleetStore()
    holder = artifact_store(store, TinyEncoder(), "holder", lease_ms=600000)
    waiter = artifact_store(store, TinyEncoder(), "waiter", wait_ms=50, poll_ms=10)
    gm = encoder(waiter, dims=ONE_GEAR)
    t, release = hold_lease(holder, gm.artifact_key((2, 8)), lambda: traced_bytes((2, 8)))
    try:
        gm.warm()  # waits up to wait_ms, then traces itself
    finally:
        release.set()
        t.join(timeout=120)
    c = waiter.counters()
    assert (c["lease_waits"], c["builds_after_wait"]) == (1, 1)
    assert gm.summary()["compiles"] == 1
    with torch.no_grad():
        assert torch.allclose(gm(*inputs(2, 8, 1)), TinyEncoder().eval()(*inputs(2, 8, 1)),
                              atol=1e-5)


def test_artifact_store_is_refused_for_non_portable_compilers():
    store = gearbox.InProcessFleetStore()
    art = artifact_store(store, TinyEncoder(), "r")
    with pytest.raises(ValueError, match="artifact_store: compiler 'eager'.*only 'torchscript'"):
        encoder(art, compiler="eager")
    with pytest.raises(TypeError, match="artifact_store: expected a gearbox.FleetArtifactStore"):
        encoder(store)


# --------------------------------------------------------------- real Redis


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url():
    """A private redis-server on a free 127.0.0.1 port in a temporary
    directory, persistence off (as tests/redis_fixture.h starts one)."""
    binary = os.environ.get("GEARBOX_REDIS_SERVER") or shutil.which("redis-server") \
        or ("/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None)
    if not binary:
        pytest.skip("redis-server not found (apt-get install redis-server; scripts/install-deps.sh "
                    "installs it)")
    tmp = tempfile.mkdtemp(prefix="gearbox-redis-")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", tmp, "--daemonize", "no",
                             "--logfile", os.path.join(tmp, "redis.log")])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "redis-server exited"
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


REPLICA = textwrap.dedent("""
    import json, sys
    import torch
    import gearbox
    sys.path.insert(0, {tests!r})
    from test_fleet import TinyEncoder, encoder, inputs, SIZES
    from gearbox.torch import model_fingerprint
    torch.set_num_threads(1)
    url, replica, out = sys.argv[1:4]
    store = gearbox.RedisFleetStore(url)
    art = gearbox.FleetArtifactStore(store, model_fingerprint(TinyEncoder()), replica_id=replica)
    gm = encoder(art)
    gm.warm()
    torch.save([gm(*inputs(b, s, i)) for i, (b, s) in enumerate(SIZES)], out)
    s = gm.summary()
    print(json.dumps({{"compiles": s["compiles"], "loads": s["artifact_loads"],
                      "store": s["artifact_store"]}}))
""")


def test_two_processes_share_modules_through_redis(redis_url, tmp_path):
    from gearbox import _gearbox
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(_gearbox.__file__).resolve().parent.parent),
               OMP_NUM_THREADS="1")
    script = REPLICA.format(tests=str(pathlib.Path(__file__).resolve().parent))
    results = []
    for replica in ("p1", "p2"):
        out = tmp_path / f"{replica}.pt"
        r = subprocess.run([sys.executable, "-c", script, redis_url, replica, str(out)], env=env,
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        results.append((json.loads(r.stdout.strip().splitlines()[-1]), torch.load(out)))
    (first, out1), (second, out2) = results
    assert (first["compiles"], first["loads"], first["store"]["puts"]) == (CELLS, 0, CELLS)
    assert (second["compiles"], second["loads"]) == (0, CELLS)
    assert second["store"]["corrupt"] == 0 and second["store"]["store_failures"] == 0
    for a, b in zip(out1, out2):
        assert torch.equal(a, b)


def test_two_objects_share_through_redis(redis_url, traces):
    store_a, store_b = gearbox.RedisFleetStore(redis_url), gearbox.open_fleet_store(redis_url)
    assert isinstance(store_b, gearbox.RedisFleetStore) and store_b.describe() == redis_url
    a = encoder(artifact_store(store_a, TinyEncoder(), "a"))
    a.warm()
    b = encoder(artifact_store(store_b, TinyEncoder(), "b"))
    b.warm()
    assert (b.summary()["compiles"], b.summary()["artifact_loads"], traces[0]) == (0, CELLS, CELLS)
    assert store_b.counters()["bytes_received"] > 0
    for x, y in zip(outputs(a), outputs(b)):
        assert torch.equal(x, y)


# ------------------------------------------------- autotune: shared choices


class Counted:
    """A compile_fn whose modules count their calls and sleep `delay` seconds in each."""

    def __init__(self, delay):
        self.delay, self.calls, self.builds = delay, 0, 0

    def __call__(self, module, examples):
        self.builds += 1

        def run(*args):
            self.calls += 1
            time.sleep(self.delay)
            return module(*args)
        return run


def tuned(artifact_store, slow, fast, **kw):
    tuner = gtorch.Autotune({"slow": slow, "fast": fast}, runs=3, warmup_runs=1)
    return encoder(artifact_store, compiler=tuner, **kw)


def test_autotune_serves_each_gear_with_its_fastest_candidate():
    slow, fast = Counted(0.02), Counted(0.0)
    gm = tuned(None, slow, fast)
    gm.warm()
    s = gm.summary()
    assert s["compiler"] == "autotune" and s["tunings"] == CELLS and s["tuning_loads"] == 0
    for g in s["per_gear"].values():
        assert (g["choice"], g["tuning"]) == ("fast", "measured")
    c = gm.compiled((2, 8))
    assert c.median_seconds["slow"] > c.median_seconds["fast"]
    assert c.compile_seconds >= 4 * 0.02  # the tuning is part of the gear's cost
    assert (slow.calls, fast.calls) == (CELLS * 4, CELLS * 4)  # warm-up + runs, each candidate
    calls = slow.calls
    eager = TinyEncoder().eval()
    for i, (b, s_) in enumerate(SIZES):
        with torch.no_grad():
            assert torch.allclose(gm(*inputs(b, s_, i)), eager(*inputs(b, s_, i)), atol=1e-5)
    assert slow.calls == calls  # requests run the chosen candidate only
    gm.close()


def test_autotune_with_the_default_candidates_chooses_torchscript_or_eager(traces):
    gm = encoder(None, compiler="autotune", dims={"batch": {"gears": [2]}, "seq": {"gears": [8]}})
    gm.warm()
    c = gm.compiled((2, 8))
    assert c.choice in ("torchscript", "eager") and set(c.median_seconds) == {"torchscript", "eager"}
    assert c.choice == min(c.median_seconds, key=c.median_seconds.get)
    with torch.no_grad():
        assert torch.allclose(gm(*inputs(2, 8, 0)), TinyEncoder().eval()(*inputs(2, 8, 0)), atol=1e-5)
    gm.close()


def test_a_second_replica_loads_the_tuning_choices_and_times_nothing(traces):
    store = gearbox.InProcessFleetStore()
    slow, fast = Counted(0.02), Counted(0.0)
    first = tuned(artifact_store(store, TinyEncoder(), "replica-1"), slow, fast)
    first.warm()
    assert first.summary()["tunings"] == CELLS
    slow2, fast2 = Counted(0.02), Counted(0.0)
    art2 = artifact_store(store, TinyEncoder(), "replica-2")
    second = tuned(art2, slow2, fast2)
    second.warm()
    s2 = second.summary()
    assert (s2["tunings"], s2["tuning_loads"]) == (0, CELLS)
    assert all((g["choice"], g["tuning"]) == ("fast", "loaded") for g in s2["per_gear"].values())
    assert (slow2.builds, slow2.calls, fast2.builds, fast2.calls) == (0, 0, CELLS, 0)
    assert second.compiled((4, 8)).median_seconds == first.compiled((4, 8)).median_seconds
    assert art2.counters()["loads"] == CELLS
    key = second.tuning_key((4, 8))
    assert key.startswith(second.artifact_key((4, 8)) + ".")
    record = gtorch.decode_tuning(art2.get(key, gtorch.TUNING_KIND).bytes, ["slow", "fast"])
    assert record["choice"] == "fast" and record["runs"] == 3
    # Other candidates are another machine class: nothing shared.
    other = encoder(artifact_store(store, TinyEncoder(), "replica-3"),
                    compiler=gtorch.Autotune({"fast": Counted(0.0)}, runs=1))
    other.warm()
    assert other.summary()["tuning_loads"] == 0 and other.tuning_key((4, 8)) != key
    with pytest.raises(RuntimeError, match="tuning_key: compiler 'torchscript' does not tune"):
        encoder(None).tuning_key((4, 8))
    for gm in (first, second, other):
        gm.close()


def test_a_torchscript_candidate_shares_its_traced_module_too(traces):
    store = gearbox.InProcessFleetStore()
    dims = {"batch": {"gears": [2, 4]}, "seq": {"gears": [8]}}
    for replica in ("a", "b"):
        gm = encoder(artifact_store(store, TinyEncoder(), replica), dims=dims,
                     compiler=gtorch.Autotune(["torchscript"], runs=1, warmup_runs=0))
        gm.warm()
        s = gm.summary()
        gm.close()
    assert traces[0] == 2  # traced once per gear, by the first replica
    assert (s["tuning_loads"], s["artifact_loads"]) == (2, 2)
    assert all(g["choice"] == "torchscript" and g["source"] == "loaded"
               for g in s["per_gear"].values())


@pytest.mark.parametrize("bad, field", [
    (b"not json", "not JSON"),
    (b"[1]", "a JSON list"),
    (b'{"choice":"fast"}', "fields"),
    (b'{"format":"x","choice":"fast","runs":3,"median_seconds":{"slow":1,"fast":0}}', "format"),
    (b'{"format":"gearbox.torch tuning 1","choice":"rm -rf","runs":3,'
     b'"median_seconds":{"slow":1,"fast":0}}', "choice 'rm -rf'"),
    (b'{"format":"gearbox.torch tuning 1","choice":"fast","runs":0,'
     b'"median_seconds":{"slow":1,"fast":0}}', "runs 0"),
    (b'{"format":"gearbox.torch tuning 1","choice":"fast","runs":true,'
     b'"median_seconds":{"slow":1,"fast":0}}', "runs True"),
    (b'{"format":"gearbox.torch tuning 1","choice":"fast","runs":3,'
     b'"median_seconds":{"fast":0}}', "median_seconds names"),
    (b'{"format":"gearbox.torch tuning 1","choice":"fast","runs":3,'
     b'"median_seconds":{"slow":-1,"fast":0}}', r"median_seconds\['slow'\] -1"),
    (b'{"format":"gearbox.torch tuning 1","choice":"fast","runs":3,'
     b'"median_seconds":{"slow":1e999,"fast":0}}', r"median_seconds\['slow'\] inf"),
    (b" " * 5000, "5000 bytes, at most 4096"),
    (b"\xff\xfe", "not JSON"),
    (b"[" * 2000, "not JSON.*RecursionError"),  # deep nesting within the size limit
    (b'{"format":"gearbox.torch tuning 1","choice":"fast","runs":3,'
     b'"median_seconds":{"slow":' + b"9" * 400 + b',"fast":0}}', r"median_seconds\['slow'\] 9+\.\.\."),
])
def test_decode_tuning_rejects_what_is_not_a_record(bad, field):
    with pytest.raises(ValueError, match=field):
        gtorch.decode_tuning(bad, ["slow", "fast"])


def test_decode_tuning_on_mutated_records_accepts_only_valid_ones():
    import random
    rng = random.Random(7)
    valid = gtorch.encode_tuning("fast", {"slow": 0.002, "fast": 0.001}, 3)
    assert gtorch.decode_tuning(valid, ["slow", "fast"])["choice"] == "fast"
    accepted = 0
    for _ in range(3000):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            at = rng.randrange(len(data) + 1)
            if op == 0 and data:
                del data[min(at, len(data) - 1)]
            elif op == 1:
                data.insert(at, rng.randrange(256))
            elif data:
                data[min(at, len(data) - 1)] = rng.randrange(256)
        try:
            record = gtorch.decode_tuning(bytes(data), ["slow", "fast"])
        except ValueError:
            continue
        accepted += 1  # whatever passed is a well-formed record
        assert record["choice"] in ("slow", "fast") and 1 <= record["runs"] <= 1000
        assert set(record["median_seconds"]) == {"slow", "fast"}
        assert all(math.isfinite(v) and v >= 0 for v in record["median_seconds"].values())
    assert 0 < accepted < 3000  # both paths taken: some edits keep a valid record (a digit)


def test_a_corrupt_tuning_choice_is_refused_measured_again_and_replaced():
    store = gearbox.InProcessFleetStore()
    art = artifact_store(store, TinyEncoder(), "replica-1")
    slow, fast = Counted(0.02), Counted(0.0)
    gm = tuned(art, slow, fast, dims={"batch": {"gears": [2]}, "seq": {"gears": [8]}})
    hostile = (b'{"format":"gearbox.torch tuning 1","choice":"slower","runs":3,'
               b'"median_seconds":{"slow":1,"fast":0}}')
    art.put(gm.tuning_key((2, 8)), gtorch.TUNING_KIND, hostile)
    with pytest.warns(RuntimeWarning, match=r"choice 'slower' is not one of.*measuring it here"):
        gm.warm()
    s = gm.summary()
    assert (s["tunings"], s["artifact_rejects"], s["per_gear"]["2x8"]["choice"]) == (1, 1, "fast")
    assert gm.wait_artifact_puts(30)
    got = gtorch.decode_tuning(art.get(gm.tuning_key((2, 8)), gtorch.TUNING_KIND).bytes,
                               ["slow", "fast"])
    assert got["choice"] == "fast"  # replaced by this replica's measurement
    gm.close()


def test_a_record_that_would_crash_a_decoder_is_refused_and_replaced():
    store = gearbox.InProcessFleetStore()
    art = artifact_store(store, TinyEncoder(), "replica-1")
    gm = tuned(art, Counted(0.02), Counted(0.0), dims={"batch": {"gears": [2]}, "seq": {"gears": [8]}})
    art.put(gm.tuning_key((2, 8)), gtorch.TUNING_KIND, b"[" * 2000)
    with pytest.warns(RuntimeWarning, match=r"refused \(tuning record: not JSON"):
        gm.warm()
    s = gm.summary()
    assert (s["tunings"], s["artifact_rejects"], s["per_gear"]["2x8"]["choice"]) == (1, 1, "fast")
    assert gm.wait_artifact_puts(30)
    assert gtorch.decode_tuning(art.get(gm.tuning_key((2, 8)), gtorch.TUNING_KIND).bytes,
                                ["slow", "fast"])["choice"] == "fast"
    gm.close()


def test_a_store_that_is_down_tunes_here_with_one_warning_per_gear():
    down = gearbox.InProcessFleetStore()
    down.set_available(False)
    slow, fast = Counted(0.02), Counted(0.0)
    gm = tuned(artifact_store(down, TinyEncoder(), "r", log=lambda *a: None), slow, fast,
               dims={"batch": {"gears": [2]}, "seq": {"gears": [8]}})
    with pytest.warns(RuntimeWarning, match="down"):
        gm.warm()
    s = gm.summary()
    assert s["tunings"] == 1 and s["per_gear"]["2x8"]["choice"] == "fast"
    gm.close()
    # With a torchscript candidate, whose own obtain warns of the store: one warning, not two.
    ts = encoder(artifact_store(down, TinyEncoder(), "r2", log=lambda *a: None),
                 dims={"batch": {"gears": [2]}, "seq": {"gears": [8]}},
                 compiler=gtorch.Autotune(["torchscript", "eager"], runs=1, warmup_runs=0))
    with pytest.warns(RuntimeWarning) as caught:
        ts.warm()
    assert ts.summary()["artifact_store_errors"] == 1, [str(w.message) for w in caught]
    ts.close()


def test_autotune_arguments_are_checked():
    with pytest.raises(ValueError, match="Autotune candidates: 'tvm' is not one of"):
        gtorch.Autotune(["tvm"])
    with pytest.raises(ValueError, match="names one twice"):
        gtorch.Autotune(["eager", "eager"])
    with pytest.raises(ValueError, match="empty"):
        gtorch.Autotune({})
    with pytest.raises(ValueError, match="17 compilers, at most 16"):
        gtorch.Autotune({f"c{i}": gtorch.compile_eager for i in range(17)})
    many = gtorch.Autotune({f"{i:02d}" + "x" * 30: gtorch.compile_eager for i in range(16)})
    longest = gtorch.encode_tuning(next(iter(many.candidates)),
                                   {n: 1e300 for n in many.candidates}, 1000)
    assert gtorch.decode_tuning(longest, list(many.candidates))["runs"] == 1000  # fits
    with pytest.raises(ValueError, match="name 'Bad Name'"):
        gtorch.Autotune({"Bad Name": gtorch.compile_eager})
    with pytest.raises(TypeError, match="'x' maps to int"):
        gtorch.Autotune({"x": 3})
    with pytest.raises(TypeError, match="expected a list of names or a dict"):
        gtorch.Autotune("eager")
    with pytest.raises(ValueError, match=r"Autotune runs: 0, expected an int in \[1, 1000\]"):
        gtorch.Autotune(runs=0)
    with pytest.raises(ValueError, match=r"warmup_runs: -1"):
        gtorch.Autotune(warmup_runs=-1)
    with pytest.raises(ValueError, match="'torchscript' candidate needs eval mode"):
        encoder(None, model=TinyEncoder().train(), compiler="autotune")


def test_a_requests_miss_tunes_without_the_store_and_stores_the_choice_later():
    store = gearbox.InProcessFleetStore()
    art = artifact_store(store, TinyEncoder(), "r1")
    slow, fast = Counted(0.02), Counted(0.0)
    gm = tuned(art, slow, fast)
    with torch.no_grad():
        want = TinyEncoder().eval()(*inputs(2, 8, 0))
    assert torch.allclose(gm(*inputs(2, 8, 0)), want, atol=1e-5)  # a miss: tuned here
    c = art.counters()
    assert (c["misses"], c["loads"], c["builds"]) == (0, 0, 0)  # the request looked up nothing
    assert gm.wait_artifact_puts(30)
    s = gm.summary()
    assert (s["tunings"], s["artifact_deferred_puts"]) == (1, 1)
    record = gtorch.decode_tuning(art.get(gm.tuning_key((2, 8)), gtorch.TUNING_KIND).bytes,
                                  ["slow", "fast"])
    assert record["choice"] == "fast"
    gm.close()


def test_two_objects_share_tuning_choices_through_redis(redis_url):
    store_a, store_b = gearbox.RedisFleetStore(redis_url), gearbox.RedisFleetStore(redis_url)
    a = tuned(artifact_store(store_a, TinyEncoder(), "a"), Counted(0.02), Counted(0.0))
    a.warm()
    slow_b, fast_b = Counted(0.02), Counted(0.0)
    b = tuned(artifact_store(store_b, TinyEncoder(), "b"), slow_b, fast_b)
    b.warm()
    assert (a.summary()["tunings"], b.summary()["tunings"], b.summary()["tuning_loads"]) == \
        (CELLS, 0, CELLS)
    assert (slow_b.builds, slow_b.calls) == (0, 0)
    for x, y in zip(outputs(a), outputs(b)):
        assert torch.equal(x, y)
    a.close()
    b.close()
