"""gearbox.torch: geared modules equal eager, split, slice, compile once,
adapt, release evicted modules, and name every error (docs/PYTHON.md)."""

import collections
import gc
import json
import threading
import time
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")
gtorch = pytest.importorskip("gearbox.torch")
from gearbox.torch import GearedModule, PaddingInvarianceError, pad_to, slice_to  # noqa: E402
from tiny_models import TinyEncoder  # noqa: E402

torch.set_num_threads(1)


# ---------------------------------------------------------------- models


class TinyConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                       torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(),
                                       torch.nn.Linear(16, 5))

    def forward(self, x):
        return self.net(x)


class TwoOutputs(torch.nn.Module):
    """[batch, seq, 8] -> (per token [batch, seq, 4], per sequence [batch, 4])."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x, mask):
        tok = self.proj(x)
        m = mask.unsqueeze(-1).to(tok.dtype)
        pooled = (tok * m).sum(1) / m.sum(1).clamp(min=1.0)  # masked mean: padding-invariant
        return tok, pooled


class UnmaskedMean(torch.nn.Module):
    """Not padding-invariant: a mean over the padded seq axis."""

    def forward(self, x):
        return x - x.mean(dim=1, keepdim=True)


def encoder_module(**kw):
    args = dict(inputs={"ids": {"axes": ["batch", "seq"], "pad": 0, "dtype": torch.long},
                        "mask": {"axes": ["batch", "seq"], "pad": True, "dtype": torch.bool}},
                outputs=["batch", "seq", 40], start_worker=False)
    args.update(kw)
    dims = args.pop("dims", {"batch": {"gears": [1, 2, 4], "splittable": True},
                             "seq": {"gears": [4, 8, 16]}})
    return GearedModule(TinyEncoder().eval(), dims, **args)


def conv_module(**kw):
    args = dict(inputs={"x": {"axes": ["batch", 3, 8, 8], "dtype": torch.float32}},
                outputs=["batch", 5], start_worker=False)
    args.update(kw)
    return GearedModule(TinyConv().eval(), {"batch": {"gears": [1, 2, 4], "splittable": True}},
                        **args)


def seq_module(model, gears=(4, 8), **kw):
    args = dict(inputs={"x": {"axes": [1, "seq", 3], "dtype": torch.float32}},
                outputs=[1, "seq", 3], start_worker=False, compiler="eager")
    args.update(kw)
    return GearedModule(model, {"seq": {"gears": list(gears)}}, **args)


def random_batch(gen, b, s, vocab=40):
    ids = torch.randint(1, vocab, (b, s), generator=gen)
    lengths = torch.randint(1, s + 1, (b,), generator=gen)
    mask = torch.arange(s).unsqueeze(0) >= lengths.unsqueeze(1)  # True = padding
    return ids, mask


def eager(model, *args):
    with torch.no_grad():
        return model(*args)


# ------------------------------------------------------- equal eager (evidence 1-3)


def test_transformer_encoder_equals_eager_on_random_shapes():
    with encoder_module(check="debug") as gm:
        gen = torch.Generator().manual_seed(5)
        for _ in range(12):
            b = int(torch.randint(1, 10, (1,), generator=gen))  # above 4: split
            s = int(torch.randint(1, 17, (1,), generator=gen))
            ids, mask = random_batch(gen, b, s)
            out = gm(ids, mask)
            ref = eager(gm.module, ids, mask)
            assert out.shape == (b, s, 40)
            valid = ~mask
            torch.testing.assert_close(out[valid], ref[valid], rtol=1e-4, atol=1e-5)
        s = gm.summary()
        assert s["calls"] == 12 and s["check_failures"] == 0 and s["checks"] == 12
        assert s["compiler"] == "torchscript"


def test_conv_net_splits_above_the_largest_gear_and_concatenates():
    with conv_module(prewarm=False) as gm:
        gen = torch.Generator().manual_seed(7)
        for b in (1, 3, 4, 9, 11):
            x = torch.randn(b, 3, 8, 8, generator=gen)
            out = gm(x)
            torch.testing.assert_close(out, eager(gm.module, x), rtol=1e-4, atol=1e-5)
        s = gm.summary()
        # 9 = 4 + 4 + 1, 11 = 4 + 4 + 3 (padded to 4): two split calls.
        assert s["split_calls"] == 2
        assert s["per_gear"]["4"]["hits"] == 1 + 1 + 2 + 3  # b=3, b=4, two chunks of 9, three of 11
        assert sorted(gm.compiled_gears()) == [(1,), (4,)]  # first use only: no 2 needed


def test_two_outputs_of_different_ranks():
    dims = {"batch": {"gears": [2, 4], "splittable": True}, "seq": {"gears": [4, 8]}}
    with GearedModule(TwoOutputs().eval(), dims,
                      inputs={"x": {"axes": ["batch", "seq", 8], "dtype": torch.float32},
                              "mask": {"axes": ["batch", "seq"], "pad": False,
                                       "dtype": torch.bool}},
                      outputs={"tokens": ["batch", "seq", 4], "pooled": ["batch", 4]},
                      start_worker=False, check="debug") as gm:
        gen = torch.Generator().manual_seed(9)
        for b, s in ((1, 3), (3, 8), (5, 6), (2, 1)):
            x = torch.randn(b, s, 8, generator=gen)
            mask = torch.ones(b, s, dtype=torch.bool)
            mask[0, s // 2:] = s == 1
            tok, pooled = gm(x, mask)
            rtok, rpooled = eager(gm.module, x, mask)
            assert tok.shape == (b, s, 4) and pooled.shape == (b, 4)
            torch.testing.assert_close(tok, rtok, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(pooled, rpooled, rtol=1e-4, atol=1e-5)


def test_dict_outputs_are_returned_as_a_dict():
    class DictOut(torch.nn.Module):
        def forward(self, x):
            return {"y": x * 2, "s": x.sum(-1)}

    with seq_module(DictOut(), outputs={"y": [1, "seq", 3], "s": [1, "seq"]}) as gm:
        x = torch.randn(1, 5, 3)
        out = gm(x)
        assert set(out) == {"y", "s"}
        torch.testing.assert_close(out["y"], x * 2)
        torch.testing.assert_close(out["s"], x.sum(-1))


def test_keyword_inputs_bind_by_name():
    with encoder_module(compiler="eager") as gm:
        ids, mask = random_batch(torch.Generator().manual_seed(1), 2, 5)
        torch.testing.assert_close(gm(mask=mask, ids=ids)[~mask], eager(gm.module, ids, mask)[~mask])


# ------------------------------------------------------------- padding and slicing


def test_pad_to_copies_nothing_when_the_shape_is_a_gear():
    t = torch.arange(12).reshape(3, 4)
    assert pad_to(t, [(0, 0, 3, 3), (1, 0, 4, 4)], -1) is t
    p = pad_to(t, [(0, 1, 2, 4), (1, 0, 4, 4)], -1)  # rows 1..2, padded to 4 rows
    assert p.tolist() == [[4, 5, 6, 7], [8, 9, 10, 11], [-1] * 4, [-1] * 4]
    assert slice_to(p, [(0, 2)]).tolist() == t[1:].tolist()
    assert slice_to(t, [(0, 3)]) is t


def test_a_call_on_an_exact_gear_hands_the_callers_tensors_to_the_module():
    seen = []

    def compile_fn(module, examples):
        def run(*args):
            seen.append([a.data_ptr() for a in args])
            return module(*args)
        return run

    with encoder_module(compiler=compile_fn, prewarm=False) as gm:
        ids, mask = random_batch(torch.Generator().manual_seed(2), 2, 8)
        gm(ids, mask)
        assert seen[-1] == [ids.data_ptr(), mask.data_ptr()]
        gm(ids[:, :6].contiguous(), mask[:, :6].contiguous())  # padded: new tensors
        assert seen[-1][0] != ids.data_ptr()
        assert gm.summary()["exact_calls"] == 1


# -------------------------------------------------------------------- compilers


def test_user_compile_fn_gets_example_inputs_at_the_gear_shape():
    shapes = []

    def compile_fn(module, examples):
        shapes.append(tuple(tuple(e.shape) for e in examples))
        assert examples[0].dtype == torch.long and examples[1].dtype == torch.bool
        return module

    with encoder_module(compiler=compile_fn, prewarm=False) as gm:
        ids, mask = random_batch(torch.Generator().manual_seed(3), 3, 5)
        gm(ids, mask)
    assert ((4, 8), (4, 8)) in shapes


def test_eager_compiler_and_compile_times_are_reported():
    with conv_module(compiler="eager") as gm:
        assert gm.wait_prewarm(60)
        assert sorted(gm.compiled_gears()) == [(1,), (2,), (4,)]
        assert set(gm.compile_times()) == {"1", "2", "4"}
        s = gm.summary()
        assert s["compiles"] == 3 and s["compile_seconds"] >= 0.0


def test_torchscript_compiles_a_frozen_script_module_and_calibrates_the_cost_model():
    with conv_module(prewarm=False) as gm:
        assert gm.calibrated_compile_seconds is not None and gm.calibrated_compile_seconds > 0
        c = gm.compiled((1,))  # the calibration compiled the smallest gear
        assert isinstance(c.fn, torch.jit.ScriptModule)
        assert gm.summary()["per_gear"]["1"]["compile_seconds"] == c.compile_seconds


def test_cuda_graph_is_skipped_cleanly_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA present: covered by the GPU run")
    with pytest.raises(RuntimeError, match="cuda_graph.*torch.cuda.is_available"):
        conv_module(compiler="cuda_graph")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build of torch and a GPU")
def test_cuda_graph_equals_eager_on_gpu():
    model = TinyConv().eval().cuda()
    with GearedModule(model, {"batch": {"gears": [1, 2, 4], "splittable": True}},
                      inputs={"x": {"axes": ["batch", 3, 8, 8], "dtype": torch.float32}},
                      outputs=["batch", 5], compiler="cuda_graph", start_worker=False) as gm:
        assert gm.wait_prewarm(120)
        for b in (1, 3, 6):
            x = torch.randn(b, 3, 8, 8, device="cuda")
            torch.testing.assert_close(gm(x), eager(model, x), rtol=1e-4, atol=1e-4)


class PausesInCapture(torch.nn.Module):
    """Doubles its input; while a CUDA graph captures it, says so and waits
    until the test has made its call from another thread."""

    def __init__(self):
        super().__init__()
        self.capturing, self.go = threading.Event(), threading.Event()

    def forward(self, x):
        if torch.cuda.is_current_stream_capturing():
            self.capturing.set()
            assert self.go.wait(60), "the test never let the capture go on"
        return x * 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build of torch and a GPU")
def test_a_request_thread_may_synchronize_while_the_prewarm_captures():
    model = PausesInCapture()
    with GearedModule(model, {"batch": {"gears": [4], "splittable": True}},
                      inputs={"x": {"axes": ["batch", 3], "dtype": torch.float32}},
                      outputs=["batch", 3], compiler="cuda_graph", start_worker=False,
                      calibrate=False) as gm:
        assert model.capturing.wait(60), "the prewarm never captured"
        try:  # in CUDA's global capture mode these fail, and so does the capture
            x = torch.ones(2, 3, device="cuda")
            doubled = (x * 2).sum().item()
            torch.cuda.current_stream().synchronize()
        finally:
            model.go.set()
        assert doubled == 12.0
        assert gm.wait_prewarm(120)
        torch.testing.assert_close(gm(torch.ones(3, 3, device="cuda")),
                                   torch.full((3, 3), 2.0, device="cuda"))


class ElementwiseChain(torch.nn.Module):
    """Forty elementwise steps over large rows: each step's intermediate is
    freed and reused, so two gears captured in one pool share scratch memory,
    and a replay runs long enough for two of them to overlap."""

    def forward(self, x):
        y = x
        for _ in range(40):
            y = torch.sin(y) + 0.5 * x
        return y


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build of torch and a GPU")
def test_gears_replayed_from_two_streams_at_once_keep_their_outputs():
    model = ElementwiseChain()
    width = 1 << 20
    with GearedModule(model, {"batch": {"gears": [2, 4], "splittable": True}},
                      inputs={"x": {"axes": ["batch", width], "dtype": torch.float32}},
                      outputs=["batch", width], compiler="cuda_graph", start_worker=False,
                      calibrate=False) as gm:
        assert gm.wait_prewarm(120)
        streams = [torch.cuda.Stream() for _ in range(3)]
        for trial in range(5):
            xs = [torch.randn(4, width, device="cuda"), torch.randn(2, width, device="cuda")]
            torch.cuda.synchronize()
            gate = torch.cuda.Event()
            with torch.cuda.stream(streams[0]):
                torch.cuda._sleep(20_000_000)  # both calls queue behind it, then start together
                gate.record(streams[0])
            ys = []
            for stream, x in zip(streams[1:], xs):
                stream.wait_event(gate)
                with torch.cuda.stream(stream):
                    ys.append(gm(x))
            torch.cuda.synchronize()
            for x, y in zip(xs, ys):
                torch.testing.assert_close(y, eager(model, x), rtol=1e-5, atol=1e-5,
                                           msg=lambda m: f"trial {trial}, {x.shape[0]} rows: {m}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build of torch and a GPU")
def test_a_captured_gear_holds_no_cublas_workspace_of_its_own():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64)).cuda().eval()

    def metered_bytes(gears):
        with GearedModule(model, {"batch": {"gears": gears, "splittable": True}},
                          inputs={"x": {"axes": ["batch", 64], "dtype": torch.float32}},
                          outputs=["batch", 64], compiler="cuda_graph", start_worker=False,
                          prewarm=False, calibrate=False) as gm:
            for g in gears:
                x = torch.randn(g, 64, device="cuda")
                torch.testing.assert_close(gm(x), eager(model, x), rtol=1e-4, atol=1e-4)
            return {g: gm.compiled((g,)).bytes for g in gears}

    # Activations here are a few KiB; a cuBLAS workspace is MiBs (32 on Hopper).
    # The first capture of the process may create the workspaces; no later one.
    first = metered_bytes([32, 16, 8, 4, 2, 1])
    later = sum(b for g, b in first.items() if g != 32)
    assert later < 8 * 2**20, f"gears after the first hold {later} bytes: {first}"
    second = metered_bytes([32])  # another GearedModule: the same warmup stream
    assert second[32] < 8 * 2**20, f"a second module's first gear holds {second[32]} bytes"


def test_close_drops_the_compiled_modules_at_once():
    class Compiled:
        def __init__(self, module):
            self.module = module

        def __call__(self, *xs):
            return self.module(*xs)

    made = []

    def compiler(module, examples):
        made.append(Compiled(module))
        return made[-1]

    gm = conv_module(compiler=compiler, prewarm=False, calibrate=False)
    gm(torch.randn(3, 3, 8, 8))
    alive = [weakref.ref(c) for c in made]
    made.clear()
    assert alive and all(r() is not None for r in alive)
    gm.close()  # gm itself stays referenced: close() alone must free them
    assert all(r() is None for r in alive)
    assert gm.compiled_gears() == []


def test_a_failed_compile_is_reported_to_the_caller_and_not_cached():
    calls = []

    def flaky(module, examples):
        calls.append(examples[0].shape[0])
        if len(calls) == 1:
            raise RuntimeError("out of graph memory")
        return module

    with conv_module(compiler=flaky, prewarm=False, calibrate=False) as gm:
        x = torch.randn(3, 3, 8, 8)
        with pytest.raises(RuntimeError, match=r"compiling gear \{'batch': 4\} with 'flaky' failed.*out of graph memory"):
            gm(x)
        assert gm.compiled((4,)) is None
        torch.testing.assert_close(gm(x), eager(gm.module, x))  # compiled again, now cached
        assert calls == [4, 4] and gm.summary()["compile_failures"] == 1


# ------------------------------------------------------------------- concurrency


def test_concurrent_callers_get_eager_results_and_one_compile_per_gear():
    compiles = []
    lock = threading.Lock()

    def slow(module, examples):
        with lock:
            compiles.append(tuple(examples[0].shape))
        time.sleep(0.05)  # widen the window for concurrent misses
        return module

    with encoder_module(compiler=slow, prewarm=False, calibrate=False) as gm:
        errors = []

        def worker(seed):
            gen = torch.Generator().manual_seed(seed)
            try:
                for _ in range(8):
                    b = int(torch.randint(1, 7, (1,), generator=gen))
                    s = int(torch.randint(1, 17, (1,), generator=gen))
                    ids, mask = random_batch(gen, b, s)
                    out = gm(ids, mask)
                    ref = eager(gm.module, ids, mask)
                    torch.testing.assert_close(out[~mask], ref[~mask], rtol=1e-4, atol=1e-5)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(compiles) == len(set(compiles))  # never twice for one gear
        assert gm.summary()["calls"] == 48


# --------------------------------------------- update path: prewarm, release, adapt


def test_prewarm_compiles_a_new_gear_before_it_is_first_used():
    with conv_module(compiler="eager") as gm:
        assert gm.wait_prewarm(60)
        gm.runtime.commit_update([[1, 2, 4, 8]])
        assert gm.wait_prewarm(60)
        assert (8,) in gm.compiled_gears()
        assert gm.summary()["per_gear"]["8"]["hits"] == 0


def test_without_prewarm_a_new_gear_compiles_on_first_use():
    with conv_module(compiler="eager", prewarm=False, calibrate=False) as gm:
        gm.runtime.commit_update([[1, 2, 4, 8]])
        assert gm.compiled_gears() == []
        gm(torch.randn(7, 3, 8, 8))
        assert gm.compiled_gears() == [(8,)]


class _Runner:
    """A compiled callable that can be held inside a call."""

    def __init__(self, module, gate):
        self.module, self.gate = module, gate
        self.entered = threading.Event()

    def __call__(self, *args):
        self.entered.set()
        assert self.gate.wait(30)
        return self.module(*args)


def test_an_evicted_gears_module_is_released_only_after_in_flight_calls_finish():
    gate = threading.Event()
    gate.set()
    runners = {}

    def compile_fn(module, examples):
        runners[examples[0].shape[0]] = r = _Runner(module, gate)
        return r

    with conv_module(compiler=compile_fn, prewarm=False, calibrate=False) as gm:
        gm(torch.randn(2, 3, 8, 8))
        runner = runners.pop(2)
        ref = weakref.ref(runner)
        gate.clear()
        runner.entered.clear()
        result = []
        t = threading.Thread(target=lambda: result.append(gm(torch.randn(2, 3, 8, 8))))
        t.start()
        assert runner.entered.wait(30)  # the call is now inside gear 2's module
        del runner
        gm.runtime.commit_update([[1, 4]])  # evicts gear 2
        gc.collect()
        assert gm.compiled((2,)) is None
        assert ref() is not None  # still held by the in-flight call
        gate.set()
        t.join()
        gc.collect()
        assert ref() is None  # released once the call finished
        assert result[0].shape == (2, 5)
        assert gm.summary()["released_modules"] == 1


def seq_identity_module(cfg, policy, on_compile):
    """An identity over [1, seq, 3] on a manual clock, no worker; each compile
    (an open _Runner) is handed to on_compile(seq, runner)."""
    def compile_fn(module, examples):
        r = _Runner(module, threading.Event())
        r.gate.set()
        on_compile(examples[0].shape[1], r)
        return r

    return GearedModule(torch.nn.Identity(), cfg,
                        inputs={"x": {"axes": [1, "seq", 3], "dtype": torch.float32}},
                        outputs=[1, "seq", 3], compiler=compile_fn, policy=policy,
                        clock="manual", start_worker=False, calibrate=False)


def test_adaptation_on_a_synthetic_stream_moves_gears_and_frees_old_modules():
    cfg = {"dims": [{"name": "seq", "gears": [4, 8, 64]}]}
    made = {}
    with seq_identity_module(cfg, "adaptive", made.__setitem__) as gm:
        assert gm.wait_prewarm(60)
        assert sorted(made) == [4, 8, 64]
        old = {g: weakref.ref(r) for g, r in made.items()}
        made.clear()
        history = [gm.gears["seq"]]
        for _ in range(3):  # every request is 30 long: gear 64 pads 53 %, 4 and 8 idle
            for _ in range(40):
                gm.runtime.advance(5.0)
                x = torch.randn(1, 30, 3)
                torch.testing.assert_close(gm(x), x)
            gm.update()
            assert gm.wait_prewarm(60)
            history.append(gm.gears["seq"])
        # The seed's policy adds 30 (padding), then evicts the idle gears one per update
        # once their protection (300 s) has passed.
        assert history == [[4, 8, 64], [4, 8, 30, 64], [8, 30, 64], [30, 64]]
        assert sorted(made) == [30]  # compiled ahead of its first use
        assert gm.compiled_gears() == [(30,), (64,)]
        gc.collect()
        assert old[4]() is None and old[8]() is None  # evicted gears' modules are freed
        assert old[64]() is not None
        decisions = gm.decisions()
        assert [d["added"] for d in decisions] == [{"seq": [30]}, {}, {}]
        assert [d["removed"] for d in decisions] == [{}, {"seq": [4]}, {"seq": [8]}]
        s = gm.summary()
        assert s["released_modules"] == 2 and s["per_gear"]["30"]["hits"] == 80
        assert s["decisions"] == 3


def test_an_idle_gears_module_is_released_and_not_prewarmed_again():
    # replan.idle_graph_release_seconds: gear 64 (kept: the largest of a
    # dimension that is not splittable) is prewarmed and never called.
    cfg = {"dims": [{"name": "seq", "gears": [8, 64], "splittable": False}],
           "replan": {"idle_graph_release_seconds": 600}}
    made = collections.Counter()
    with seq_identity_module(cfg, "replan", lambda seq, _: made.update([seq])) as gm:
        assert gm.wait_prewarm(60)
        assert made[64] == 1
        for _ in range(141):
            gm.runtime.advance(5.0)
            x = torch.randn(1, 8, 3)
            torch.testing.assert_close(gm(x), x)
        rec = gm.update()
        assert rec["graphs_released_idle"] == {"seq": [64]}
        assert 64 in gm.gears["seq"]
        assert gm.wait_prewarm(60)
        assert gm.compiled((64,)) is None and made[64] == 1  # the prewarm left it
        s = gm.summary()
        assert s["idle_released_modules"] == 1 and s["released_modules"] == 1
        x = torch.randn(1, 40, 3)
        torch.testing.assert_close(gm(x), x)  # its next call compiles it again
        assert gm.compiled((64,)) is not None and made[64] == 2


# -------------------------------------------------------------- save / load plan


def test_save_plan_and_load_plan_restart_warm(tmp_path):
    path = tmp_path / "plan.json"
    with conv_module(compiler="eager") as gm:
        gm.runtime.commit_update([[1, 3, 6]])
        saved = gm.save_plan(path)
    assert json.loads(path.read_text())["gears"] == [[1, 3, 6]] == saved["gears"]
    with conv_module(compiler="eager", prewarm=False, calibrate=False) as gm2:
        gm2.load_plan(path)
        assert gm2.gears == {"batch": [1, 3, 6]}
        assert gm2.compiled_gears() == [(1,), (3,), (6,)]  # warm before the first call
        x = torch.randn(5, 3, 8, 8)
        torch.testing.assert_close(gm2(x), eager(gm2.module, x))
        assert gm2.summary()["compiles"] == 3


def test_load_plan_rejects_a_plan_for_other_dims(tmp_path):
    path = tmp_path / "plan.json"
    with encoder_module(compiler="eager") as gm:
        gm.save_plan(path)
    with conv_module(compiler="eager") as gm2:
        with pytest.raises(ValueError, match=r"dims \['batch', 'seq'\] differ from this module's \['batch'\]"):
            gm2.load_plan(path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"gears": []}')
    with conv_module(compiler="eager") as gm3:
        with pytest.raises(ValueError, match="'format' is not 'gearbox.torch plan'"):
            gm3.load_plan(bad)
        no_gears = tmp_path / "no_gears.json"
        no_gears.write_text('{"format": "gearbox.torch plan", "dims": ["batch"]}')
        with pytest.raises(ValueError, match="'gears' is None; a list of gear lists"):
            gm3.load_plan(no_gears)


# ------------------------------------------------------------- debug check mode


def test_debug_check_names_the_gear_of_a_model_that_is_not_padding_invariant():
    with seq_module(UnmaskedMean(), check="debug") as gm:
        gm(torch.randn(1, 8, 3))  # exact gear: no padding, equal
        with pytest.raises(PaddingInvarianceError, match=r"gear \{'seq': 8\} \(extents \{'seq': 6\}\).*'output'.*not padding-invariant"):
            gm(torch.randn(1, 6, 3))


def test_warn_check_warns_and_returns_and_check_every_samples():
    with seq_module(UnmaskedMean(), check="warn", check_every=2) as gm:
        with pytest.warns(RuntimeWarning, match="padding-invariance check"):
            gm(torch.randn(1, 6, 3))  # call 1: checked
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            gm(torch.randn(1, 6, 3))  # call 2: not sampled
        s = gm.summary()
        assert s["checks"] == 1 and s["check_failures"] == 1


# -------------------------------------------------------------------- error cases


@pytest.fixture
def enc():
    gm = encoder_module(compiler="eager", prewarm=False, calibrate=False)
    yield gm
    gm.close()


def test_error_rank(enc):
    with pytest.raises(ValueError, match=r"input 'mask': rank 3 \(shape \[2, 4, 1\]\), expected rank 2"):
        enc(torch.ones(2, 4, dtype=torch.long), torch.zeros(2, 4, 1, dtype=torch.bool))


def test_error_dtype(enc):
    with pytest.raises(ValueError, match="input 'ids': dtype torch.int32, expected torch.int64"):
        enc(torch.ones(2, 4, dtype=torch.int32), torch.zeros(2, 4, dtype=torch.bool))


def test_error_shared_dimension_disagrees(enc):
    with pytest.raises(ValueError, match=r"input 'mask' axis 1 \(seq\): size 5, but input 'ids' axis 1 gave seq = 4; a shared dimension must agree"):
        enc(torch.ones(2, 4, dtype=torch.long), torch.zeros(2, 5, dtype=torch.bool))


def test_error_static_dimension():
    with conv_module(compiler="eager", prewarm=False, calibrate=False) as gm:
        with pytest.raises(ValueError, match="input 'x' axis 1: size 4, expected the static size 3"):
            gm(torch.randn(2, 4, 8, 8))


def test_error_none_axis_is_static_after_the_first_call():
    with GearedModule(torch.nn.Identity(), {"seq": [4, 8]},
                      inputs={"x": {"axes": ["seq", None]}}, outputs=["seq", None],
                      compiler="eager", start_worker=False) as gm:
        gm(torch.randn(3, 5))
        with pytest.raises(ValueError, match="input 'x' axis 1: size 6, but it was 5 on earlier calls"):
            gm(torch.randn(3, 6))
        with pytest.raises(ValueError, match="input 'x': dtype torch.float64, expected torch.float32"):
            gm(torch.randn(3, 5, dtype=torch.float64))  # learned from the first call


def test_error_empty_dynamic_dimension(enc):
    with pytest.raises(ValueError, match=r"input 'ids' axis 0 \(batch\): size 0; a dynamic dimension must be >= 1"):
        enc(torch.ones(0, 4, dtype=torch.long), torch.zeros(0, 4, dtype=torch.bool))


def test_error_above_the_largest_gear_of_a_dimension_that_does_not_split(enc):
    with pytest.raises(ValueError, match=r"sizes \{'batch': 2, 'seq': 17\}: .*seq"):
        enc(torch.ones(2, 17, dtype=torch.long), torch.zeros(2, 17, dtype=torch.bool))


def test_error_bad_arguments(enc):
    ids, mask = torch.ones(2, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.bool)
    with pytest.raises(TypeError, match=r"missing input\(s\) \['mask'\]"):
        enc(ids)
    with pytest.raises(TypeError, match="unexpected input 'labels'"):
        enc(ids, mask, labels=ids)
    with pytest.raises(TypeError, match="input 'ids' given twice"):
        enc(ids, mask, ids=ids)
    with pytest.raises(TypeError, match="takes 2 inputs"):
        enc(ids, mask, mask)
    with pytest.raises(TypeError, match="input 'ids': expected a torch.Tensor, got list"):
        enc([[1, 2]], mask)


def test_error_output_shape_and_count():
    with seq_module(torch.nn.Identity(), outputs=[1, "seq", 4]) as gm:
        with pytest.raises(ValueError, match="output 'output' axis 2: size 3, expected the static size 4"):
            gm(torch.randn(1, 5, 3))

    class Cut(torch.nn.Module):
        def forward(self, x):
            return x[:, :2]

    with seq_module(Cut()) as gm:
        with pytest.raises(ValueError, match=r"output 'output' axis 1 \(seq\): size 2 at gear \(8,\), expected 8"):
            gm(torch.randn(1, 5, 3))
    with seq_module(torch.nn.Identity(), outputs={"a": [1, "seq", 3], "b": [1, "seq", 3]}) as gm:
        with pytest.raises(ValueError, match="returned a Tensor, 2 outputs declared"):
            gm(torch.randn(1, 5, 3))


def test_construction_errors():
    m = TinyConv().eval()
    inputs = {"x": {"axes": ["batch", 3, 8, 8]}}
    dims = {"batch": [1, 2]}
    with pytest.raises(ValueError, match=r"input 'x' axis 0: unknown dimension 'bach'; dimensions are \['batch'\]"):
        GearedModule(m, dims, inputs={"x": ["bach", 3, 8, 8]}, outputs=["batch", 5])
    with pytest.raises(ValueError, match=r"dimension\(s\) \['seq'\] are bound by no input"):
        GearedModule(m, {"batch": [1], "seq": [4]}, inputs=inputs, outputs=["batch", 5])
    with pytest.raises(ValueError, match="output 'output' axis 0: unknown dimension 'b'"):
        GearedModule(m, dims, inputs=inputs, outputs=["b", 5])
    with pytest.raises(ValueError, match=r"compiler: 'tvm' is not one of \['torchscript', 'eager', 'cuda_graph', 'autotune'\]"):
        GearedModule(m, dims, inputs=inputs, outputs=["batch", 5], compiler="tvm")
    with pytest.raises(ValueError, match="training mode; call module.eval"):
        GearedModule(TinyConv(), dims, inputs=inputs, outputs=["batch", 5])
    with pytest.raises(ValueError, match=r"check: 'on' is not one of"):
        GearedModule(m, dims, inputs=inputs, outputs=["batch", 5], check="on")
    with pytest.raises(ValueError, match=r"input 'x': unknown key\(s\) \['pad_value'\]"):
        GearedModule(m, dims, inputs={"x": {"axes": ["batch"], "pad_value": 0}}, outputs=["batch"])
    with pytest.raises(TypeError, match="module: expected a torch.nn.Module"):
        GearedModule(lambda x: x, dims, inputs=inputs, outputs=["batch", 5])
    with pytest.raises(TypeError, match="dims\\['batch'\\]: expected a dict"):
        GearedModule(m, {"batch": 4}, inputs=inputs, outputs=["batch", 5])
    with pytest.raises(ValueError):  # the core names the bad field
        GearedModule(m, {"batch": {"gears": [0, 2]}}, inputs=inputs, outputs=["batch", 5])


def test_a_closed_module_refuses_calls():
    gm = conv_module(compiler="eager", prewarm=False, calibrate=False)
    gm.close()
    with pytest.raises(RuntimeError, match="closed"):
        gm(torch.randn(1, 3, 8, 8))


def test_summary_has_per_gear_hits_and_padding():
    with conv_module(compiler="eager", prewarm=False, calibrate=False) as gm:
        gm(torch.randn(3, 3, 8, 8))
        gm(torch.randn(4, 3, 8, 8))
        s = gm.summary()
        assert s["per_gear"]["4"]["hits"] == 2
        assert s["per_gear"]["4"]["padding"] == pytest.approx(1 - 7 / 8)
        assert s["padding_waste"] == pytest.approx(8 / 7 - 1)
        assert s["gears"] == {"batch": [1, 2, 4]} and s["dims"] == ["batch"]
        for key in ("compiles", "compile_seconds", "decisions", "runtime", "released_modules"):
            assert key in s


def test_an_unclosed_module_is_collected_and_its_runtime_closed():
    gm = conv_module(compiler="eager")
    assert gm.wait_prewarm(60)
    rt, thread = gm.runtime, gm._thread
    ref = weakref.ref(gm)
    del gm
    gc.collect()
    assert ref() is None  # the listener and the prewarm thread hold no strong reference
    thread.join(30)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        rt.plan([1])


def _wait_until(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_runtime_worker_adds_a_gear_that_prewarm_compiles_before_its_first_use():
    cfg = {"dims": [{"name": "seq", "gears": [4, 8, 64]}]}
    with GearedModule(torch.nn.Identity(), cfg,
                      inputs={"x": {"axes": [1, "seq", 3], "dtype": torch.float32}},
                      outputs=[1, "seq", 3], compiler="eager", policy="adaptive",
                      clock="manual", start_worker=True) as gm:
        assert gm.runtime.worker_running
        for _ in range(50):
            gm.runtime.advance(5.0)  # wakes the worker at its checks
            gm(torch.randn(1, 30, 3))
        # The worker checks every 60 s of clock time from when its thread started (late on a
        # loaded machine), and updates 300 s after the start: move the clock on without traffic
        # until it has (the window still holds most of the stream up to t = 500).
        for _ in range(25):
            gm.runtime.advance(10.0)
            if _wait_until(lambda: 30 in gm.gears["seq"], timeout=0.5):
                break
        assert 30 in gm.gears["seq"], (gm.gears, gm.runtime.now())
        assert _wait_until(lambda: gm.compiled((30,)) is not None)
        assert gm.summary()["per_gear"]["30"]["hits"] == 0  # compiled ahead of its first use
        gm(torch.randn(1, 30, 3))
        assert gm.summary()["per_gear"]["30"]["hits"] == 1
        assert any(d["added"] == {"seq": [30]} for d in gm.decisions())


def test_calibration_puts_the_measured_compile_seconds_into_the_replan_cost_model():
    with conv_module(compiler="eager", policy="replan") as gm:
        assert gm.config["replan"]["compile_seconds"] == max(gm.calibrated_compile_seconds, 1e-3)
        # Every compile since feeds the mean measured seconds to the running policy.
        gm(torch.randn(3, 3, 8, 8))
        log = gm.summary()["per_gear"]
        measured = [g["compile_seconds"] for g in log.values() if g["compile_seconds"] is not None]
        assert gm.runtime.replan_cost()["compile_seconds"] == pytest.approx(
            max(sum(measured) / len(measured), 1e-3))
    with conv_module(compiler="eager", policy="replan",
                     config={"replan": {"compile_seconds": 3.0}}) as gm:
        assert gm.calibrated_compile_seconds is None  # the user's figure stands
        assert gm.config["replan"]["compile_seconds"] == 3.0
        gm(torch.randn(3, 3, 8, 8))
        assert gm.runtime.replan_cost()["compile_seconds"] == 3.0
    with conv_module(compiler="eager", policy="adaptive") as gm:
        assert gm.calibrated_compile_seconds is None and "replan" not in gm.config


def test_fit_run_cost_is_the_least_squares_line_clamped_at_zero():
    from gearbox.torch import fit_run_cost

    assert fit_run_cost([(1, 0.002), (3, 0.004), (5, 0.006)]) == pytest.approx((0.001, 0.001))
    assert fit_run_cost([(8, 0.01), (8, 0.02)]) is None  # one size: no slope to fit
    assert fit_run_cost([]) is None
    # Calls as fast at every size (a launch-bound model): padding costs next to nothing.
    assert fit_run_cost([(1, 0.003), (100, 0.003), (50, 0.0031)]) == pytest.approx(
        (0.0031 / 3 + 0.002, 1e-12), rel=1e-6)
    assert fit_run_cost([(1, 0.003), (100, 0.002)], min_seconds_per_unit=1e-9)[1] == 1e-9
    # A line whose intercept would be negative (-0.001 s): it stays at 0.
    spr, spu = fit_run_cost([(10, 0.001), (20, 0.003)])
    assert spr == 0.0 and spu == pytest.approx(0.0002)
    assert fit_run_cost([(1, float("nan")), (2, 0.1), (4, 0.2)]) == pytest.approx((0.0, 0.05))


class SleepsBySize(torch.nn.Module):
    """Returns its input; a call sleeps 1 ms plus 50 us per row: the run cost to recover."""

    def forward(self, x):
        time.sleep(0.001 + 5e-5 * x.shape[0])
        return x


def sleeps_by_size(gears, **args):
    return GearedModule(SleepsBySize(), {"batch": {"gears": gears, "splittable": True}},
                        inputs={"x": {"axes": ["batch", 3], "dtype": torch.float32}},
                        outputs=["batch", 3], compiler="eager", start_worker=False, **args)


def test_the_run_cost_is_fitted_to_the_timed_gears_and_given_to_the_policy():
    with sleeps_by_size([8, 16, 32, 64], calibrate_run_cost=True) as gm:
        assert gm.wait_prewarm(60)
        s = gm.summary()
        timed = {g: v["run_seconds"] for g, v in s["per_gear"].items()}
        assert all(t is not None and t >= 0.0014 for t in timed.values()), timed
        fit = s["calibrated_run_cost"]
        assert fit["gears_timed"] == 4
        assert 2.5e-5 <= fit["seconds_per_unit"] <= 1e-4, fit
        assert 0.0 <= fit["seconds_per_run"] <= 0.003, fit
        cost = gm.runtime.replan_cost()
        assert cost["seconds_per_unit"] == pytest.approx(fit["seconds_per_unit"])
        assert cost["seconds_per_run"] == pytest.approx(fit["seconds_per_run"])
        # The timing is part of the gear's cost.
        assert all(v["compile_seconds"] >= v["run_seconds"] * 2 for v in s["per_gear"].values())
    # Not asked for (the default), or a figure in the config: nothing is timed, the figure stands.
    for args, spu in (({}, 2e-5), ({"calibrate_run_cost": True,
                                    "config": {"replan": {"seconds_per_unit": 3e-6}}}, 3e-6)):
        with sleeps_by_size([8, 16], **args) as gm:
            assert gm.wait_prewarm(60)
            s = gm.summary()
            assert s["calibrated_run_cost"] is None
            assert all(v["run_seconds"] is None for v in s["per_gear"].values())
            assert gm.runtime.replan_cost()["seconds_per_unit"] == spu
    # A request's own compile is not timed (it would wait for it).
    with sleeps_by_size([8, 16], prewarm=False, calibrate_run_cost=True) as gm:
        gm(torch.randn(16, 3))
        assert gm.summary()["per_gear"]["16"]["run_seconds"] is None


def test_an_eager_fallback_variant_runs_the_module_uncompiled_at_its_exact_size():
    compiled_shapes = []

    def compile_fn(module, examples):
        compiled_shapes.append(examples[0].shape[1])
        return module

    cfg = {"seq": {"gears": [4, 8], "eager_fallback": True}}
    with GearedModule(torch.nn.Identity(), cfg,
                      inputs={"x": {"axes": [1, "seq", 3], "dtype": torch.float32}},
                      outputs=[1, "seq", 3], compiler=compile_fn, start_worker=False,
                      prewarm=False, calibrate=False) as gm:
        x = torch.randn(1, 11, 3)  # above the largest gear, not splittable: eager at 11
        torch.testing.assert_close(gm(x), x)
        assert compiled_shapes == []
        s = gm.summary()
        assert s["eager_variants"] == 1 and s["per_gear"] == {}


def test_a_joint_gear_set_compiles_only_its_combinations():
    cfg = {"dims": [{"name": "batch", "gears": [1, 2, 4], "splittable": True},
                    {"name": "seq", "gears": [4, 8, 16]}],
           "scheme": "joint", "combinations": [[1, 16], [4, 8], [4, 16]]}
    with encoder_module(dims=cfg, compiler="eager", calibrate=False) as gm:
        assert gm.wait_prewarm(60)
        assert gm.compiled_gears() == [(1, 16), (4, 8), (4, 16)]
        gen = torch.Generator().manual_seed(4)
        for b, s in ((1, 3), (3, 7), (2, 12), (6, 5)):
            ids, mask = random_batch(gen, b, s)
            out = gm(ids, mask)
            torch.testing.assert_close(out[~mask], eager(gm.module, ids, mask)[~mask],
                                       rtol=1e-4, atol=1e-5)
        assert gm.compiled_gears() == [(1, 16), (4, 8), (4, 16)]  # nothing else compiled
