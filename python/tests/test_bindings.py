"""The runtime half of the bindings: Runtime, Snapshot, Plan, Variant, Pool."""

import gc
import json
import random
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import gearbox
from conftest import batch_config

TWO_DIMS = {
    "dims": [
        {"name": "BATCHSIZE", "gears": [1, 2, 4, 8], "splittable": True},
        {"name": "SEQLEN", "gears": [16, 32, 64], "eager_fallback": True},
    ]
}


# ---------------------------------------------------------------- creation


def test_create_from_json_dict_and_path(tmp_path):
    text = json.dumps(TWO_DIMS)
    path = tmp_path / "config.json"
    path.write_text(text)
    for config in (text, "  \n" + text, TWO_DIMS, str(path), path):
        with gearbox.Runtime(config) as rt:
            assert rt.dims == ["BATCHSIZE", "SEQLEN"]
            snap = rt.snapshot()
            assert snap.gears == [[1, 2, 4, 8], [16, 32, 64]]
            assert snap.version == 1
            assert snap.dims == ["BATCHSIZE", "SEQLEN"]
            assert snap.scheme == "independent"
            assert snap.combinations == []


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match=r"dims\[0\]\.gears"):
        gearbox.Runtime({"dims": [{"name": "BATCHSIZE", "gears": [0, 4]}]})
    with pytest.raises(ValueError, match=r"adaptive\.window_secs"):
        gearbox.Runtime({"dims": [{"name": "B", "gears": [4]}], "adaptive": {"window_secs": 1}})
    with pytest.raises(ValueError, match="no_such_config.json"):
        gearbox.Runtime("no_such_config.json")
    with pytest.raises(ValueError, match="line"):
        gearbox.Runtime('{"dims": [')


def test_bad_arguments_raise_not_crash():
    with pytest.raises(TypeError):
        gearbox.Runtime(None)
    with pytest.raises(TypeError):
        gearbox.Runtime(42)
    with pytest.raises(ValueError, match="policy"):
        gearbox.Runtime(TWO_DIMS, policy="bogus")
    with pytest.raises(ValueError, match="clock"):
        gearbox.Runtime(TWO_DIMS, clock="sundial")
    with pytest.raises(ValueError, match="event_buffer_events"):
        gearbox.Runtime(TWO_DIMS, event_buffer_events=0)
    with pytest.raises(TypeError):
        gearbox.Runtime(TWO_DIMS, policy=None)
    with gearbox.Runtime(TWO_DIMS) as rt:
        for bad in (None, "12", 3, [1.5, 16], ["a", 16], [object(), 16]):
            with pytest.raises(TypeError):
                rt.plan(bad)
        with pytest.raises(TypeError):
            rt.record(None)
        with pytest.raises(TypeError):
            rt.commit_update(None)
        with pytest.raises(TypeError):
            rt.add_release_listener(None)
        with pytest.raises(TypeError):
            rt.add_release_listener(42)
        with pytest.raises(TypeError):
            rt.pool.register(None)
        with pytest.raises(RuntimeError, match="manual"):
            rt.set_time(5.0)
        with pytest.raises(ValueError, match="trigger"):
            rt.run_once(trigger="sometimes")


# ---------------------------------------------------------------- plans


@pytest.fixture
def rt():
    with gearbox.Runtime(TWO_DIMS, clock="manual") as runtime:
        yield runtime


def check_arrays_match_variants(plan):
    gear, extent, offset = plan.variant_arrays()
    n = plan.num_variants
    for a in (gear, extent, offset):
        assert a.dtype == np.int64 and a.shape == (n, 2)
    assert [tuple(r) for r in gear.tolist()] == [v.gear for v in plan.variants]
    assert [tuple(r) for r in extent.tolist()] == [v.extent for v in plan.variants]
    assert [tuple(r) for r in offset.tolist()] == [v.offset for v in plan.variants]


def test_plan_exact(rt):
    plan = rt.plan([4, 32])
    assert plan.exact and plan.num_variants == 1
    assert not plan.any_split and not plan.any_eager
    assert plan.snapshot_version == 1
    (v,) = plan.variants
    assert (v.gear, v.extent, v.offset, v.eager) == ((4, 32), (4, 32), (0, 0), False)
    assert plan.padded_volume == plan.raw_volume == 128
    check_arrays_match_variants(plan)


def test_plan_padded(rt):
    plan = rt.plan(np.array([3, 20]))  # numpy integers work as sizes too
    assert not plan.exact and plan.num_variants == 1
    (v,) = plan.variants
    assert (v.gear, v.extent, v.offset) == ((4, 32), (3, 20), (0, 0))
    assert plan.padded_volume == 128 and plan.raw_volume == 60
    assert plan.dimensions[0] == {
        "raw": 3, "max_gear": 8, "split": False, "eager": False,
        "groups": [{"gear": 4, "extent": 3, "count": 1, "offset": 0}],
    }


def test_plan_split(rt):
    plan = rt.plan((19, 16))
    assert plan.any_split and plan.num_variants == 3
    assert plan.dimensions[0]["split"]
    assert plan.dimensions[0]["groups"] == [
        {"gear": 8, "extent": 8, "count": 2, "offset": 0},
        {"gear": 4, "extent": 3, "count": 1, "offset": 16},
    ]
    assert [(v.gear, v.extent, v.offset) for v in plan.variants] == [
        ((8, 16), (8, 16), (0, 0)),
        ((8, 16), (8, 16), (8, 0)),
        ((4, 16), (3, 16), (16, 0)),
    ]
    check_arrays_match_variants(plan)


def test_plan_eager(rt):
    plan = rt.plan([2, 100])
    assert plan.any_eager and plan.any_uncompiled and plan.num_variants == 1
    (v,) = plan.variants
    assert v.eager and v.gear == (2, 100) and v.extent == (2, 100)
    assert plan.dimensions[1]["eager"]


def test_plan_errors_carry_the_cpp_message(rt):
    with pytest.raises(ValueError, match="size"):
        rt.plan([0, 16])
    with pytest.raises(ValueError):
        rt.plan([1])
    with gearbox.Runtime(batch_config([4, 8], splittable=False)) as strict:
        with pytest.raises(ValueError, match="9"):
            strict.plan([9])


def test_snapshot_is_a_value_that_plans(rt):
    snap = rt.snapshot()
    rt.commit_update([[2, 8], [32, 64]], now=10.0)
    assert snap.gears == [[1, 2, 4, 8], [16, 32, 64]]  # unchanged copy
    assert snap.plan([3, 20]).variants[0].gear == (4, 32)
    assert rt.snapshot().version == 2
    assert rt.plan([3, 20]).variants[0].gear == (8, 32)
    rt.record(snap.plan([3, 20]), now=11.0)  # a plan on an older snapshot records fine


def test_record_rejects_another_runtimes_plan(rt):
    with gearbox.Runtime(TWO_DIMS) as other:
        with pytest.raises(ValueError, match="another runtime"):
            rt.record(other.plan([1, 16]))


# ---------------------------------------------------------------- updates


def test_record_and_run_once_reproduce_an_adaptive_addition():
    # tests/seed_conformance_test.cc, FivePaddedRequestsAddTheirMedian: gears
    # [128]; five requests of 64 inside the window pad 0.5 >= 0.35: adds 64.
    with gearbox.Runtime(batch_config([128]), policy="adaptive", clock="manual") as rt:
        for i in range(5):
            rt.set_time(200.0 + i)
            rt.record(rt.plan([64]))
        assert rt.counters()["events_recorded"] == 5
        stats = rt.stats(now=300.0)
        (g,) = stats["dimensions"][0]["gears"]
        assert g["gear"] == 128 and g["samples"] == 5 and g["avg_pad_ratio"] == 0.5
        record = rt.run_once(now=300.0)
        assert record["added"] == {"BATCHSIZE": [64]}
        assert record["policy"] == "adaptive" and record["changed"]
        assert rt.snapshot().gears == [[64, 128]]
        assert rt.last_update() == record
        assert rt.counters()["updates_changed"] == 1


def test_commit_update_validates_first(rt):
    with pytest.raises(ValueError, match=r"dims\[0\]\.gears\[0\]: 0 is not allowed"):
        rt.commit_update([[0, 4], [16]])
    assert rt.snapshot().version == 1
    record = rt.commit_update([[1, 8], [64]])
    assert record["gears"] == {"BATCHSIZE": [1, 8], "SEQLEN": [64]}
    assert rt.last_update()["removed"] == {"BATCHSIZE": [2, 4], "SEQLEN": [16, 32]}


def test_a_look_at_the_combinations_moves_no_gear():
    # Sparse, only (8, 64) compiled; 200 requests of cell (4, 32) run uncompiled.
    config = dict(TWO_DIMS, scheme="sparse", combinations=[[8, 64]])
    with gearbox.Runtime(config, policy="replan", clock="manual") as rt:
        before = rt.snapshot().gears
        for i in range(200):
            rt.set_time(i * 0.05)
            rt.record(rt.plan([4, 32]))
        record = rt.run_once(now=10.0, trigger="combinations")
        assert record["trigger"] == "combinations"
        assert rt.snapshot().gears == before
        assert record["combinations_added"] == [[4, 32]]
        assert rt.snapshot().combinations == [(4, 32), (8, 64)]
        with pytest.raises(ValueError, match=r'trigger: "sometimes" is not allowed.*"combinations"'):
            rt.run_once(trigger="sometimes")


def test_stats_mark_a_gear_that_came_back_after_its_eviction(rt):
    rt.commit_update([[1, 2, 4, 8, 6], [16, 32, 64]])
    rt.set_time(10.0)
    rt.commit_update([[1, 2, 4, 8], [16, 32, 64]])  # 6 evicted
    rt.set_time(20.0)
    rt.commit_update([[1, 2, 4, 6, 8], [16, 32, 64]])  # ... and back
    gears = {g["gear"]: g for g in rt.stats(now=20.0)["dimensions"][0]["gears"]}
    assert gears[6]["readded"] and gears[6]["created_ts"] == 20.0
    assert not gears[6]["initial"] and not gears[6]["fleet_traffic"]
    assert not gears[8]["readded"] and gears[8]["initial"]


def test_manual_clock(rt):
    assert rt.now() == 0.0
    rt.set_time(10.0)
    rt.advance(2.5)
    assert rt.now() == 12.5
    with gearbox.Runtime(TWO_DIMS, clock="manual", start_time=100.0) as later:
        assert later.now() == 100.0
    with gearbox.Runtime(TWO_DIMS) as system:
        assert system.now() > 1.6e9  # Unix seconds


# ---------------------------------------------------------------- pool


def test_pool_keeps_the_object_until_its_gear_is_evicted():
    class Graph:
        pass

    with gearbox.Runtime(batch_config([64, 128]), clock="manual") as rt:
        released = []
        rt.add_release_listener(released.append)
        graph = Graph()
        alive = weakref.ref(graph)
        key = rt.pool.register(graph, bytes=1000)
        assert key != 0
        assert rt.pool.consume_recent_keys() == [key]
        assert rt.pool.consume_recent_keys() == []
        assert rt.attach_cleanup_keys([64], [key])
        del graph
        gc.collect()
        assert alive() is not None  # the pool holds it
        assert rt.pool.acquire(key) is alive()
        assert (rt.pool.size, rt.pool.bytes, rt.pool.registered) == (1, 1000, 1)

        rt.commit_update([[128]], now=1.0)  # evicts 64: its key goes to the pool
        gc.collect()
        assert alive() is None
        assert released[-1] == [key]
        assert rt.pool.acquire(key) is None
        assert (rt.pool.size, rt.pool.released) == (0, 1)
        assert rt.counters()["keys_released"] == 1


def test_idle_graphs_are_released_and_their_gears_kept():
    # replan.idle_graph_release_seconds: a graph no request ran on for that
    # long goes at an update; its gear stays.
    config = {"dims": [{"name": "SEQLEN", "gears": [32, 1024]}],
              "replan": {"idle_graph_release_seconds": 600}}

    class Graph:
        pass

    with gearbox.Runtime(config, clock="manual") as rt:
        graph = Graph()
        alive = weakref.ref(graph)
        key = rt.pool.register(graph, bytes=1000)
        rt.pool.consume_recent_keys()
        assert rt.attach_cleanup_keys([1024], [key])
        del graph
        rt.record(rt.plan([1000]))
        for i in range(141):
            rt.set_time(5.0 * i)
            rt.record(rt.plan([32]))
        record = rt.run_once(now=700.0)
        gc.collect()
        assert record["graphs_released_idle"] == {"SEQLEN": [1024]}
        assert 1024 in record["gears"]["SEQLEN"]
        assert alive() is None
        assert rt.counters()["idle_keys_released"] == 1


def test_pool_object_in_use_outlives_its_release():
    class Graph:
        pass

    pool = gearbox.Pool()
    graph = Graph()
    alive = weakref.ref(graph)
    key = pool.register(graph)
    held = pool.acquire(key)  # a Python reference, as a request would hold
    del graph
    assert pool.remove_by_keys([key, 12345]) == 1
    assert alive() is held
    del held
    gc.collect()
    assert alive() is None
    assert pool.released == 1 and len(pool) == 0


def test_attach_to_an_evicted_gear_releases_at_once(rt):
    class Graph:
        pass

    graph = Graph()
    alive = weakref.ref(graph)
    key = rt.pool.register(graph)
    del graph
    rt.commit_update([[8], [64]])
    assert not rt.attach_cleanup_keys([2, 16], [key])
    gc.collect()
    assert alive() is None
    with pytest.raises(ValueError, match="one per dimension"):
        rt.attach_cleanup_keys([2], [key])


# ---------------------------------------------------------------- listeners and the worker


def test_listener_exceptions_are_reported_not_raised(monkeypatch, rt):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)

    def bad_listener(keys):
        raise KeyError("boom")

    calls = []
    id_bad = rt.add_release_listener(bad_listener)
    rt.add_release_listener(calls.append)
    rt.commit_update([[8], [64]])  # returns normally
    assert calls == [[]]
    assert len(seen) == 1 and isinstance(seen[0].exc_value, KeyError)
    rt.remove_release_listener(id_bad)
    rt.commit_update([[4, 8], [64]])
    assert len(seen) == 1 and len(calls) == 2


def test_worker_start_stop_restart():
    with gearbox.Runtime(batch_config([128]), clock="manual") as rt:
        assert not rt.worker_running
        rt.start_worker()
        assert rt.worker_running
        rt.stop_worker()
        assert not rt.worker_running
        rt.start_worker()
        assert rt.worker_running
    with gearbox.Runtime(batch_config([128]), clock="manual", start_worker=True) as rt:
        assert rt.worker_running


def run_worker_until(rt, event):
    """Moves the manual clock a check interval at a time until `event` is set
    (the worker reads the clock when its thread starts, which may be after a
    first move)."""
    for _ in range(600):
        rt.advance(60.0)
        if event.wait(timeout=0.1):
            return True
    return False


STOP_WHILE_LISTENER_RUNS = """
import threading, time, gearbox
from conftest import batch_config
from test_bindings import run_worker_until
config = batch_config([128], check_interval_seconds=60, update_interval_seconds=300)
with gearbox.Runtime(config, policy="adaptive", clock="manual", start_worker=True) as rt:
    entered, release = threading.Event(), threading.Event()
    on_worker = []

    def listener(keys):
        on_worker.append(threading.get_ident())
        entered.set()
        release.wait(timeout=60)

    rt.add_release_listener(listener)
    assert run_worker_until(rt, entered), "the worker ran no update"
    stopper = threading.Thread(target=rt.stop_worker, daemon=True)
    stopper.start()
    time.sleep(0.2)  # let stop_worker reach its wait (not an assertion)
    release.set()
    stopper.join()
    assert not rt.worker_running
    assert on_worker[0] != threading.get_ident()
    assert rt.counters()["updates"] >= 1
print("stopped")
"""


def test_worker_update_calls_listener_and_stop_waits_without_deadlock():
    # The worker runs an update (manual clock past update_interval_seconds)
    # and calls a Python listener, which holds on until released. stop_worker
    # from another thread must release the GIL while it waits, or the
    # listener could never finish: a deadlock that freezes every Python
    # thread, so the scenario runs in a child process with a timeout.
    import os
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + sys.path))
    try:
        result = subprocess.run([sys.executable, "-c", STOP_WHILE_LISTENER_RUNS], env=env,
                                capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("stop_worker deadlocked with a listener running on the worker")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "stopped"


def test_close_with_a_listener_running_on_the_worker():
    config = batch_config([128], check_interval_seconds=60, update_interval_seconds=300)
    rt = gearbox.Runtime(config, policy="adaptive", clock="manual", start_worker=True)
    entered = threading.Event()

    def listener(keys):
        entered.set()
        time.sleep(0.2)

    rt.add_release_listener(listener)
    assert run_worker_until(rt, entered)
    rt.close()
    assert rt.closed


# ---------------------------------------------------------------- closing


def test_calls_after_close_raise_runtime_error():
    rt = gearbox.Runtime(TWO_DIMS, start_worker=True)
    pool = rt.pool
    rt.close()
    rt.close()  # idempotent
    assert rt.closed
    for call in (
        lambda: rt.plan([1, 16]),
        rt.snapshot,
        lambda: rt.run_once(),
        rt.start_worker,
        rt.stop_worker,
        rt.counters,
        lambda: rt.dims,
        lambda: rt.worker_running,
    ):
        with pytest.raises(RuntimeError, match="runtime is closed"):
            call()
    with pytest.raises(RuntimeError, match=r"Runtime\.plan"):
        rt.plan([1, 16])
    assert pool.register(object()) != 0  # the pool outlives its runtime


def test_context_manager_and_garbage_collection_close():
    with gearbox.Runtime(TWO_DIMS, start_worker=True) as rt:
        pass
    assert rt.closed
    for _ in range(3):  # dropped with a worker running: collected, the worker stopped
        gearbox.Runtime(TWO_DIMS, start_worker=True)
        gc.collect()


# ---------------------------------------------------------------- threads


def test_four_threads_plan_and_record_with_the_worker_running():
    config = batch_config([1, 2, 4, 8, 16, 32, 64], check_interval_seconds=1,
                          update_interval_seconds=1, recent_use_protect_seconds=0)
    rows = 300
    with gearbox.Runtime(config, policy="adaptive", clock="manual", start_worker=True) as rt:
        errors = []
        barrier = threading.Barrier(5)

        def requester(seed):
            rng = random.Random(seed)
            try:
                barrier.wait()
                for _ in range(rows):
                    plan = rt.plan([rng.randint(1, 60)])
                    rt.record(plan)
                    assert rt.snapshot().version >= plan.snapshot_version
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def clock():
            barrier.wait()
            for _ in range(50):
                rt.advance(1.0)

        threads = [threading.Thread(target=requester, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=clock))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        rt.stop_worker()
        c = rt.counters()
        assert c["events_recorded"] + c["events_dropped"] == 4 * rows
        rt.run_once()  # everything recorded folds on the way in
        assert rt.counters()["events_pending"] == 0


def test_classes_without_constructors_raise_type_error():
    for cls in (gearbox.Plan, gearbox.Snapshot, gearbox.Variant):
        with pytest.raises(TypeError):
            cls()


def test_interpreter_exit_with_everything_still_open():
    # Runtimes with workers running and listeners, pooled objects with
    # __del__, a daemon thread recording: exit must neither crash nor hang.
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        import threading, gearbox
        config = {"dims": [{"name": "BATCHSIZE", "gears": [4, 8]}],
                  "adaptive": {"check_interval_seconds": 60, "update_interval_seconds": 60}}
        class Graph:
            def __del__(self):
                pass
        runtimes = []
        for i in range(3):
            rt = gearbox.Runtime(config, policy="adaptive", clock="manual", start_worker=True)
            rt.add_release_listener(lambda keys: None)
            key = rt.pool.register(Graph())
            rt.attach_cleanup_keys([4], [key])
            runtimes.append(rt)
        loose = gearbox.Pool()
        loose.register(Graph())
        def spin(rt):
            while True:
                rt.record(rt.plan([3]))
                rt.advance(30.0)
        threading.Thread(target=spin, args=(runtimes[0],), daemon=True).start()
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env={**__import__("os").environ})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    # The daemon thread's calls after the exit hook raise nothing (a traceback
    # written while the interpreter finalizes can abort it).
    assert result.stderr == ""


def test_runtime_after_the_exit_hook_serves_without_a_worker():
    # An atexit function registered before gearbox's runs after its hook: the
    # runtime stays open, its worker stopped; start_worker is refused.
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        import atexit
        def after_the_hook():
            plan = rt.plan([3])
            rt.record(plan)
            print("closed", rt.closed, "worker", rt.worker_running, "gear", plan.variants[0].gear)
            try:
                rt.start_worker()
            except RuntimeError as e:
                print("start_worker:", e)
            print("worker", rt.worker_running)
        atexit.register(after_the_hook)
        import gearbox
        rt = gearbox.Runtime({"dims": [{"name": "BATCHSIZE", "gears": [4, 8]}]},
                             policy="adaptive", clock="manual", start_worker=True)
        print("worker", rt.worker_running)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env={**__import__("os").environ})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "worker True",
        "closed False worker False gear (4,)",
        "start_worker: Runtime.start_worker: the interpreter is exiting (its atexit hook stopped "
        "the worker)",
        "worker False",
    ], result.stdout + result.stderr


def test_memory_probe_from_python():
    config = batch_config([32, 128], device_memory_usage_threshold_ratio=0.9)
    usage = [0.95]
    with gearbox.Runtime(config, policy="adaptive", clock="manual",
                         memory_probe=lambda: usage[0]) as rt:
        record = rt.run_once(now=10.0)
        assert record["memory"]["usage"] == 0.95 and record["memory"]["high"]
        usage[0] = 0.5
        assert not rt.run_once(now=20.0)["memory"]["high"]

    def broken():
        raise OSError("no device")

    with gearbox.Runtime(config, policy="adaptive", clock="manual", memory_probe=broken) as rt:
        memory = rt.run_once(now=10.0)["memory"]
        assert memory["usage"] is None and "no device" in memory["error"]
    with gearbox.Runtime(config, clock="manual", memory_probe=lambda: "full") as rt:
        assert "not a number" in rt.run_once(now=10.0)["memory"]["error"]
    with pytest.raises(TypeError, match="memory_probe"):
        gearbox.Runtime(config, memory_probe=0.5)


def test_host_memory_probe():
    config = batch_config([32, 128], device_memory_usage_threshold_ratio=0.9)
    with gearbox.Runtime(config, policy="adaptive", clock="manual", memory_probe="host") as rt:
        memory = rt.run_once(now=10.0)["memory"]
        assert "error" not in memory or not memory["error"], memory
        assert 0.0 <= memory["usage"] <= 2.0
    with pytest.raises(ValueError, match="memory_probe: \"gpu\" is not allowed"):
        gearbox.Runtime(config, memory_probe="gpu")


def test_close_and_stop_from_a_listener_on_the_worker():
    # A listener on the worker thread cannot join that thread: stop_worker
    # there raises, close() hands the join to another thread.
    config = batch_config([128], check_interval_seconds=60, update_interval_seconds=60)
    rt = gearbox.Runtime(config, policy="adaptive", clock="manual", start_worker=True)
    done, errors = threading.Event(), []

    def listener(keys):
        if done.is_set():
            return
        try:
            rt.stop_worker()
        except RuntimeError as e:
            errors.append(str(e))
        rt.close()
        done.set()

    rt.add_release_listener(listener)
    assert run_worker_until(rt, done)
    assert rt.closed
    assert len(errors) == 1 and "another thread" in errors[0]
    with pytest.raises(RuntimeError, match="runtime is closed"):
        rt.plan([1])


# ---------------------------------------------------------------- replan cost model


def test_replan_cost_model_is_replaced_by_measured_values():
    with gearbox.Runtime(batch_config([1, 2, 4, 8]), clock="manual") as rt:
        before = rt.replan_cost()
        assert before["compile_seconds"] > 0
        rt.set_replan_cost(compile_seconds=0.25, seconds_per_unit=3e-5)
        after = rt.replan_cost()
        assert after["compile_seconds"] == 0.25 and after["seconds_per_unit"] == 3e-5
        assert after["alpha"] == before["alpha"]  # the other fields keep their values


def test_replan_cost_model_errors_name_the_field_and_change_nothing():
    with gearbox.Runtime(batch_config([1, 2, 4, 8]), clock="manual") as rt:
        before = rt.replan_cost()
        with pytest.raises(ValueError, match="compile_seconds"):
            rt.set_replan_cost(compile_seconds=-1.0)
        with pytest.raises(ValueError, match="compile_secs.*not allowed.*compile_seconds"):
            rt.set_replan_cost(compile_secs=1.0)
        with pytest.raises(TypeError, match="compile_seconds must be a number"):
            rt.set_replan_cost(compile_seconds="fast")
        assert rt.replan_cost() == before


def test_release_listener_sees_its_update_in_last_update():
    seen = []
    with gearbox.Runtime(batch_config([1, 2, 4, 8]), clock="manual") as rt:
        rt.add_release_listener(lambda keys: seen.append(rt.last_update()["sequence"]))
        record = rt.commit_update([[2, 4, 8]], now=1.0)
        assert seen == [record["sequence"]]


def test_update_path_calls_inside_a_listener_raise_instead_of_waiting_on_themselves(monkeypatch):
    # The runtime holds its listener lock while a listener runs: a listener
    # that changed the listeners or ran an update would wait on itself.
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    with gearbox.Runtime(batch_config([1, 2, 4, 8]), clock="manual") as rt:
        ids = []

        def listener(keys):
            for call in (lambda: rt.remove_release_listener(ids[0]),
                         lambda: rt.add_release_listener(print),
                         lambda: rt.run_once(now=5.0),
                         lambda: rt.commit_update([[1, 8]], now=5.0),
                         lambda: rt.replan_cost(),
                         lambda: rt.set_replan_cost(compile_seconds=1.0)):
                with pytest.raises(RuntimeError, match="release listener or memory probe"):
                    call()
            ids.append(-1)  # every call above raised

        ids.append(rt.add_release_listener(listener))
        rt.commit_update([[2, 4, 8]], now=1.0)  # returns: no self-wait
        assert ids[-1] == -1 and not seen


def test_replan_cost_waits_for_an_update_without_holding_the_gil():
    # run_once holds the update lock while it reads a Python memory probe
    # (which needs the GIL); replan_cost from another thread needs that lock.
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        import threading, time, gearbox
        config = {"dims": [{"name": "BATCHSIZE", "gears": [1, 2, 4, 8]}],
                  "adaptive": {"device_memory_usage_threshold_ratio": 0.9}}
        def probe():
            time.sleep(0.5)  # releases the GIL inside the update
            return 0.1
        rt = gearbox.Runtime(config, clock="manual", memory_probe=probe)
        t = threading.Thread(target=lambda: rt.run_once(now=1.0))
        t.start()
        time.sleep(0.1)
        rt.replan_cost()
        rt.set_replan_cost(compile_seconds=1.0)
        t.join()
        rt.close()
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
