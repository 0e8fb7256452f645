#!/usr/bin/python3
"""gearbox.torch's own cost per call: a GearedModule (compiler "eager") around
nn.Identity, one [1, n, 3] input, against calling nn.Identity directly; on an
exact gear (n = 8: no copy) and a padded one (n = 5 -> 8: pad, slice).
Planning, the signature check, padding, slicing and recording are all that
differ. Not a test: timings vary.

  OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/python/torch_overhead.py
"""

import time

import torch

from gearbox.torch import GearedModule


def per_call(fn, x, calls):
    for _ in range(calls // 10):
        fn(x)
    t = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - t) / calls


def main(calls=5000):
    torch.set_num_threads(1)
    model = torch.nn.Identity()
    with GearedModule(model, {"seq": [8, 16]},
                      inputs={"x": {"axes": [1, "seq", 3], "dtype": torch.float32}},
                      outputs=[1, "seq", 3], compiler="eager", start_worker=False,
                      prewarm=False) as gm:
        for n, what in ((8, "exact gear"), (5, "padded 5 -> 8")):
            x = torch.randn(1, n, 3)
            geared, direct = per_call(gm, x, calls), per_call(model, x, calls)
            print(f"{what}: geared {geared * 1e6:.1f} us/call, direct {direct * 1e6:.1f} us/call, "
                  f"gearbox.torch adds {(geared - direct) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
