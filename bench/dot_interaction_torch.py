#!/usr/bin/env python3
"""The PyTorch side of BenchmarkDotInteraction (exec/kernels/bench_test.go).

    /usr/bin/python3 bench/dot_interaction_torch.py [STEPS]

DLRM's dot interaction, forward and backward, in the canonical Criteo shape:
batch 128, 27 vectors of 16. Each step runs the forward and the backward of
sum(z * G) for a fixed G. Two forms, each timed on 1 and on 2 threads after
100 warm-up steps: "dlrm", as facebookresearch/dlrm writes it
(interact_features: Z = bmm(T, Tᵀ), then Z[:, li, lj] over the strict lower
triangle), and "index_select", the same pairs gathered from the flattened Z
with one index (faster on this machine). Prints one JSON line: us_per_step
of each form and thread count, and the best. PyTorch at its best on this
machine: run it with OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset (bench/history-2026-12.md).
"""
import json
import sys
import time

import torch

B, F, D = 128, 27, 16


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    torch.manual_seed(1)
    li = torch.tensor([i for i in range(F) for j in range(i)])
    lj = torch.tensor([j for i in range(F) for j in range(i)])
    flat = li * F + lj
    forms = {
        "dlrm": lambda x: torch.bmm(x, torch.transpose(x, 1, 2))[:, li, lj],
        "index_select": lambda x: torch.bmm(x, torch.transpose(x, 1, 2)).view(B, -1).index_select(1, flat),
    }
    out = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, form in forms.items():
            x = torch.randn(B, F, D, requires_grad=True)
            g = torch.randn(B, len(li))

            def step():
                z = form(x)
                x.grad = None
                z.backward(g)

            for _ in range(100):
                step()
            t = time.perf_counter()
            for _ in range(steps):
                step()
            out[f"us_per_step_{name}_{threads}_threads"] = (time.perf_counter() - t) / steps * 1e6
    out["us_per_step"] = min(out.values())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
