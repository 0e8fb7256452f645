#!/usr/bin/python3
"""Replays the bundled Azure LLM conversation trace (prefill view: one request
of ContextTokens tokens each) through a small real PyTorch transformer, six
ways, and prints them side by side (docs/PERFORMANCE.md, "gearbox.torch"):

  eager        the module as is, at every exact shape
  trace_once   TorchScript traced once (at --trace-once-len), frozen, run at every shape
               (checked against eager first: tracing this model generalizes)
  per_shape    TorchScript traced + frozen + optimized per exact length (cache unbounded)
  static_pow2  gearbox.torch, static powers-of-two ladder 1, 2, 4, ..., --max-len
  replan       gearbox.torch, the replan policy (starting from the same ladder)
  adaptive     gearbox.torch, the seed's adaptive policy (same start)
  replan_autotune  replan with compiler="autotune": each gear times TorchScript against eager
               and serves with the faster (not in the default --modes)
  replan_fitted_cost  replan with calibrate_run_cost=True: the cost model's run cost is the
               line through this model's timed gears instead of its default (seconds_per_unit
               2e-5, seconds_per_run 0) (not in the default --modes)

Each mode runs in its own process (for its own peak RSS). The trace is scaled
to fit a few minutes on 2 cores: every --every'th row, lengths divided by
--size-scale and capped at --max-len. The gearbox modes drive the runtime's
manual clock with the trace's timestamps and run an update every
--update-seconds of trace time; new gears compile in the background (prewarm)
and every compile is counted in the total time. Not a test: timings vary.

With --device cuda everything runs on the GPU: the model and the requests'
tensors live there, TorchScript traces there, the gearbox modes compile with
compiler="cuda_graph" (one torch.cuda.CUDAGraph per gear, one memory pool)
(replan_autotune too) and every request's time ends at a synchronize of the
current stream; the peak column is then torch.cuda.max_memory_allocated(),
not RSS.

  OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/python/torch_replay.py
"""

import argparse
import csv
import datetime
import json
import os
import resource
import subprocess
import sys
import time

MODES = ("eager", "trace_once", "per_shape", "static_pow2", "replan", "adaptive")
EXTRA_MODES = ("replan_autotune", "replan_fitted_cost")


def load_trace(path, every, scale, max_len):
    rows = []
    with open(path) as f:
        for i, r in enumerate(csv.DictReader(f)):
            if i % every:
                continue
            ts = datetime.datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
            n = max(1, min(max_len, -(-int(r["ContextTokens"]) // scale)))
            rows.append((ts.timestamp(), n))
    t0 = rows[0][0]
    return [(t - t0, n) for t, n in rows]


def make_model(torch, vocab, d, heads, layers, max_len):
    class TinyLM(torch.nn.Module):
        """Embedding + masked TransformerEncoder + LM head: padding-invariant."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb = torch.nn.Embedding(vocab, d)
            self.pos = torch.nn.Parameter(torch.randn(max_len, d) * 0.02)
            layer = torch.nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True)
            self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = torch.nn.Linear(d, vocab)

        def forward(self, ids, mask):
            x = self.emb(ids) + self.pos[: ids.shape[1]]
            return self.head(self.enc(x, src_key_padding_mask=mask))

    return TinyLM().eval()


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def jit_compile(torch, model, n, device):
    ex = (torch.zeros(1, n, dtype=torch.long, device=device),
          torch.zeros(1, n, dtype=torch.bool, device=device))
    traced = torch.jit.trace(model, ex, check_trace=False)
    return torch.jit.optimize_for_inference(torch.jit.freeze(traced))


def run_mode(args):
    import torch

    torch.set_num_threads(1)
    trace = load_trace(args.trace, args.every, args.size_scale, args.max_len)
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch.cuda.is_available() is False")
    model = make_model(torch, args.vocab, args.hidden, args.heads, args.layers, args.max_len).to(dev)
    gen = torch.Generator().manual_seed(1)
    requests = [(t, torch.randint(0, args.vocab, (1, n), generator=gen).to(dev)) for t, n in trace]

    def done():  # a request's time ends when its kernels have run (a stream sync: a
        if dev == "cuda":  # device-wide one is refused while the prewarm captures)
            torch.cuda.current_stream().synchronize()
    lat, compiles, compile_s, waste, extra = [], 0, 0.0, 0.0, {}
    start = time.perf_counter()
    with torch.no_grad():
        if args.mode == "eager":
            fn = model
        elif args.mode == "trace_once":
            c0 = time.perf_counter()
            fn = jit_compile(torch, model, args.trace_once_len, dev)
            compile_s, compiles = time.perf_counter() - c0, 1
            for n in (1, args.trace_once_len // 2 + 1, args.max_len):  # it generalizes?
                ids = torch.randint(0, args.vocab, (1, n), device=dev)
                mask = torch.zeros(1, n, dtype=torch.bool, device=dev)
                diff = (fn(ids, mask) - model(ids, mask)).abs().max().item()
                if diff > 1e-4:
                    sys.exit(f"trace_once: tracing at {args.trace_once_len} does not generalize "
                             f"to length {n} (max diff {diff}); use torch.jit.script")
        elif args.mode == "per_shape":
            cache = {}

            def fn(ids, mask):
                nonlocal compiles, compile_s
                n = ids.shape[1]
                f = cache.get(n)
                if f is None:
                    c0 = time.perf_counter()
                    f = cache[n] = jit_compile(torch, model, n, dev)
                    compile_s += time.perf_counter() - c0
                    compiles += 1
                return f(ids, mask)
        if args.mode in ("eager", "trace_once", "per_shape"):
            for _, ids in requests:
                mask = torch.zeros_like(ids, dtype=torch.bool)
                t0 = time.perf_counter()
                fn(ids, mask)
                done()
                lat.append(time.perf_counter() - t0)
    if args.mode in ("static_pow2", "replan", "adaptive") + EXTRA_MODES:
        from gearbox.torch import GearedModule

        policy = {"static_pow2": "static", "replan_autotune": "replan",
                  "replan_fitted_cost": "replan"}.get(args.mode, args.mode)
        cfg = {"dims": [{"name": "seq", "policy": "TIMES", "min": 1, "max": args.max_len}]}
        compiler = "autotune" if args.mode == "replan_autotune" else "torchscript"
        if dev == "cuda":
            compiler = "cuda_graph"
        gm = GearedModule(model, cfg, policy=policy, clock="manual", start_time=0.0,
                          compiler=compiler,
                          calibrate_run_cost=args.mode == "replan_fitted_cost",
                          start_worker=False, prewarm=True,
                          inputs={"ids": {"axes": [1, "seq"], "pad": 0, "dtype": torch.long},
                                  "mask": {"axes": [1, "seq"], "pad": True, "dtype": torch.bool}},
                          outputs=[1, "seq", args.vocab])
        last_update = 0.0
        for t, ids in requests:
            gm.runtime.set_time(t)
            if policy != "static" and t - last_update >= args.update_seconds:
                gm.update(t)
                last_update = t
            mask = torch.zeros_like(ids, dtype=torch.bool)
            t0 = time.perf_counter()
            gm(ids, mask)
            done()
            lat.append(time.perf_counter() - t0)
        gm.wait_prewarm(600)
        s = gm.summary()
        compiles, compile_s, waste = s["compiles"], s["compile_seconds"], s["padding_waste"]
        extra = {"final_gears": s["gears"]["seq"], "updates": len(gm.decisions()),
                 "released_modules": s["released_modules"],
                 "calibrated_compile_seconds": s["calibrated_compile_seconds"],
                 "calibrated_run_cost": s["calibrated_run_cost"]}
        if compiler == "autotune":  # the final gears' choices and candidates' medians, ms
            extra["choices"] = {
                str(g[0]): [c.choice, {k: v * 1e3 for k, v in c.median_seconds.items()}]
                for g in gm.compiled_gears() for c in [gm.compiled(g)]}
        gm.close()
    done()
    total = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated() if dev == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**20
    out = {"mode": args.mode, "requests": len(requests), "total_s": total,
           "p50_ms": percentile(lat, 0.5) * 1e3, "p99_ms": percentile(lat, 0.99) * 1e3,
           "compiles": compiles, "compile_s": compile_s,
           "peak_mib": peak,
           "padding_waste": waste, **extra}
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--trace", default=os.path.join(here, "..", "..", "data",
                                                   "AzureLLMInferenceTrace_conv.csv"))
    p.add_argument("--every", type=int, default=20, help="keep every Nth row")
    p.add_argument("--size-scale", type=int, default=8, help="divide lengths by this")
    p.add_argument("--max-len", type=int, default=256, help="cap lengths (and the ladder) here")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--trace-once-len", type=int, default=128)
    p.add_argument("--update-seconds", type=float, default=300.0,
                   help="trace seconds between updates (replan, adaptive)")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated, of {list(MODES + EXTRA_MODES)}")
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cuda: model, tensors and CUDA graphs on the GPU (gearbox modes: "
                        "compiler cuda_graph)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.mode:
        return run_mode(args)
    results = []
    for mode in args.modes.split(","):
        if mode not in MODES + EXTRA_MODES:
            sys.exit(f"--modes: '{mode}' is not one of {MODES + EXTRA_MODES}")
        cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode]
        for key, value in vars(args).items():
            if key not in ("mode", "modes", "json"):
                cmd += ["--" + key.replace("_", "-"), str(value)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{mode} failed:\n{r.stderr}")
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"{mode}: done", file=sys.stderr)
    n = results[0]["requests"]
    print(f"{n} requests (every {args.every}th row of the Azure conv trace, lengths / "
          f"{args.size_scale} capped at {args.max_len}); model: {args.layers}-layer transformer, "
          f"hidden {args.hidden}, {args.heads} heads, vocab {args.vocab}; 1 thread; "
          f"device {args.device}")
    peak = "peak GPU MiB" if args.device == "cuda" else "peak RSS MiB"
    print(f"| mode | total s | p50 ms | p99 ms | compiles | compile s | {peak} | padding waste |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['mode']} | {r['total_s']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['compiles']} | {r['compile_s']:.2f} | {r['peak_mib']:.0f} | "
              f"{100 * r['padding_waste']:.1f} % |")
    for r in results:
        if "final_gears" in r:
            cal, run = r["calibrated_compile_seconds"], r["calibrated_run_cost"]
            print(f"{r['mode']}: final gears {r['final_gears']}, {r['updates']} updates, "
                  f"{r['released_modules']} modules released"
                  + (f", calibrated compile {cal:.3f} s" if cal is not None else "")
                  + (f", fitted run {run['seconds_per_run'] * 1e3:.3f} ms + "
                     f"{run['seconds_per_unit'] * 1e6:.3f} us per token "
                     f"({run['gears_timed']} gears timed)" if run else ""))
        if "choices" in r:
            picks = sorted(r["choices"].items(), key=lambda kv: int(kv[0]))
            print(f"{r['mode']}: per final gear, the choice (median ms per candidate): " +
                  "; ".join(f"{g}: {c} (" + ", ".join(f"{k} {v:.2f}" for k, v in sorted(m.items()))
                            + ")" for g, (c, m) in picks))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
