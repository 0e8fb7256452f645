#!/usr/bin/python3
"""GPU memory per captured gear with gearbox.torch's compiler "cuda_graph":
the transformer of torch_replay.py (hidden 256, 4 layers, 4 heads, vocab 256)
captured at the sequence gears 1024, 512, ..., 1 (largest first, as the
prewarm does), then again smallest first in a second GearedModule. Prints,
after each gear's first call (its capture), the compile's metered bytes
(CompiledGear.bytes: torch.cuda.memory_allocated growth), the memory
allocated beyond the model's weights and torch.cuda.memory_reserved(); then
what is still allocated after close(). Needs a CUDA build of torch and a GPU.
Not a test: it measures.

  PYTHONPATH=build/python python3 bench/python/torch_graph_memory.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_replay import make_model  # noqa: E402

from gearbox.torch import GearedModule  # noqa: E402

MiB = 2**20


def main():
    if not torch.cuda.is_available():
        sys.exit("torch_graph_memory: needs a CUDA build of torch and a GPU")
    for order in ("descending", "ascending"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        model = make_model(torch, 256, 256, 4, 4, 1024).cuda()
        base = torch.cuda.memory_allocated()
        gears = [1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1]
        if order == "ascending":
            gears = gears[::-1]
        gm = GearedModule(model, {"seq": {"gears": gears}}, compiler="cuda_graph",
                          start_worker=False, prewarm=False, calibrate=False,
                          inputs={"ids": {"axes": [1, "seq"], "pad": 0, "dtype": torch.long},
                                  "mask": {"axes": [1, "seq"], "pad": True, "dtype": torch.bool}},
                          outputs=[1, "seq", 256])
        for g in gears:
            gm(torch.zeros(1, g, dtype=torch.long, device="cuda"),
               torch.zeros(1, g, dtype=torch.bool, device="cuda"))
            c = gm.compiled((g,))
            print(f"{order} gear {g}: metered {c.bytes / MiB:.1f} MiB, allocated "
                  f"{(torch.cuda.memory_allocated() - base) / MiB:.1f} MiB, reserved "
                  f"{torch.cuda.memory_reserved() / MiB:.1f} MiB")
        print(f"{order}: peak allocated {(torch.cuda.max_memory_allocated() - base) / MiB:.1f} "
              "MiB over the model's weights")
        gm.close()
        del gm, c
        torch.cuda.synchronize()
        print(f"{order} after close: allocated {(torch.cuda.memory_allocated() - base) / MiB:.1f} "
              f"MiB, reserved {torch.cuda.memory_reserved() / MiB:.1f} MiB")


if __name__ == "__main__":
    main()
