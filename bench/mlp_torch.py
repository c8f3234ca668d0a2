#!/usr/bin/env python3
"""The PyTorch side of the local MLP benchmarks (docs/performance.md).

    /usr/bin/python3 bench/mlp_torch.py digits|wide STEPS [THREADS,...]

The models of exec/program's BenchmarkDigitsStep and BenchmarkWideStep:
examples/digits-mlp.yaml (64-128-10, batch 64) and its 2048-wide twin
(64-2048-10, batch 256), on examples/data/digits.csv with its 64 feature
columns standardized over the file (normalize: standard); matmul, bias,
relu, matmul, bias, softmax cross entropy and the accuracy metric each
step; sgd lr 0.1; he_normal weights, zero biases; batch k = rows
[kB, (k+1)B) of the file, wrapping (psgraph's data stream rule). The file
is loaded before the clock starts. PyTorch eager on each of THREADS
threads (default 1,2: PyTorch at its best is the better of the two), the
model drawn afresh for each, after 50 warm-up steps; run with
OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE unset, as
.ci/bench does. Prints one JSON line per thread count with steps_per_s,
then one with the best (role torch-best).
"""
import json
import math
import os
import sys
import time

import numpy as np
import torch

MODELS = {"digits": (128, 64), "wide": (2048, 256)}  # hidden width, batch
LR = 0.1


def load():
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "data", "digits.csv")
    a = np.loadtxt(path, delimiter=",", dtype=np.float64)
    x, y = a[:, :64], a[:, 64].astype(np.int64)
    sd = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


def run(data, model, steps, threads):
    torch.set_num_threads(threads)
    x, y = data
    n = len(y)
    hidden, batch = MODELS[model]
    torch.manual_seed(1)
    w1 = torch.nn.Parameter(torch.randn(64, hidden) * math.sqrt(2 / 64))
    b1 = torch.nn.Parameter(torch.zeros(hidden))
    w2 = torch.nn.Parameter(torch.randn(hidden, 10) * math.sqrt(2 / hidden))
    b2 = torch.nn.Parameter(torch.zeros(10))
    opt = torch.optim.SGD([w1, b1, w2, b2], lr=LR)

    def step(k):
        lo = (k * batch) % n
        rows = torch.arange(lo, lo + batch) % n
        xb, yb = x[rows], y[rows]
        logits = torch.relu(xb @ w1 + b1) @ w2 + b2
        loss = torch.nn.functional.cross_entropy(logits, yb)
        acc = (logits.argmax(1) == yb).float().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, acc

    for k in range(50):
        step(k)
    t0 = time.perf_counter()
    for k in range(50, 50 + steps):
        loss, acc = step(k)
    dt = time.perf_counter() - t0
    return {"role": "torch", "model": model, "threads": threads, "steps": steps, "seconds": round(dt, 4),
            "steps_per_s": round(steps / dt, 1), "loss": float(loss), "acc": float(acc)}


def main():
    model, steps = sys.argv[1], int(sys.argv[2])
    if model not in MODELS:
        sys.exit(f"mlp_torch.py: model {model!r}: want digits or wide")
    counts = [int(t) for t in (sys.argv[3] if len(sys.argv) > 3 else "1,2").split(",")]
    data = load()
    best = None
    for threads in counts:
        r = run(data, model, steps, threads)
        print(json.dumps(r), flush=True)
        if best is None or r["steps_per_s"] > best["steps_per_s"]:
            best = r
    print(json.dumps(dict(best, role="torch-best")))


if __name__ == "__main__":
    main()
