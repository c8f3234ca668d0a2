#!/usr/bin/env python3
"""Writes the torch references of the model zoo's numerics test
(TestZooMatchesTorch in exec/job).

Run from the repository root with Debian's python3-torch and Go:
    /usr/bin/python3 testdata/zoo/gen_reference.py

For each of examples/dlrm.yaml, dcn-v2.yaml and deepfm.yaml it writes
testdata/zoo/<model>.safetensors: the parameters after 50 steps of batch
128 of the model written in torch (bench/zoo_torch.py, one table per
field, torch.optim's sparse updates, float32) on the data the test
generates, `psgraph gen criteo --rows 2000 --truth fm --seed S`, read as
psgraph reads it (per-column hashing, log transform, standardization)
with every hash_buckets and table of 100,000 rows made 100 (the test
rewrites the model files the same way), so ids of a column repeat within
a batch and their gradients add up. The seed and the file's sha256 are
in each reference's metadata; the test generates the same file and
checks it.

Training these models in float32 is chaotic on some data: a ReLU whose
input lies within rounding of 0 takes one side or the other depending on
the order of a sum, a batch row's gradient changes with it, and adagrad
and adam turn any change of a gradient's sign into a step of lr. On seed
4, torch's own float32 DeepFM ends 8% (relative 2-norm) from the same
run in float64: no float32 implementation can be held to 1e-3 of another
on such data. So each
model's seed is the first, from 1, on which three float32 runs of torch
that round differently (the batch at once; its two halves' losses
averaged, as two trainers do; the 26 tables of a kind fused into one)
all end within a tenth of the test's tolerance of the float64 run:
data on which float32 rounding alone does not move the result. The
reference is the first of them; the metadata records the seed and the
three distances.

The initial parameters are not stored: both sides compute them from the
names (init_value below, zooInit in the test): element i of parameter P is
scale * (2u - 1), u = splitmix64(fnv1a64(P) + i) >> 11 over 2^53, scale
sqrt(6 / (rows + columns)) for a matrix or table and 0.1 for a vector.
"""
import hashlib
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.dont_write_bytecode = True  # no __pycache__ beside the bench script
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import zoo_torch as zoo  # noqa: E402  (bench/zoo_torch.py)

ROWS, STEPS, BATCH, BUCKETS = 2000, 50, 128, 100
U64 = np.uint64


def fnv1a64(s):
    h = 14695981039346656037
    for b in s.encode():
        h = ((h ^ b) * 1099511628211) & zoo.MASK
    return h


def init_value(name, shape):
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        z = U64(fnv1a64(name)) + np.arange(n, dtype=U64) + U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        z = z ^ (z >> U64(31))
    u = (z >> U64(11)).astype(np.float64) / 2.0 ** 53
    scale = math.sqrt(6 / (shape[0] + shape[1])) if len(shape) == 2 else 0.1
    return (scale * (2 * u - 1)).astype(np.float32).reshape(shape)


def dist(a, b):
    """The largest relative 2-norm difference of a parameter of a from b."""
    return max(float(np.linalg.norm(a[n].astype(np.float64) - b[n]) / np.linalg.norm(b[n])) for n in b)


def train(model, data, dtype=torch.float32, halves=False, fused=False):
    label, dense, ids = data
    npdt = np.float64 if dtype == torch.float64 else np.float32
    torch.set_default_dtype(dtype)
    try:
        init = {n: torch.from_numpy(init_value(n, s)).to(dtype) for n, s in zoo.shapes(model, BUCKETS).items()}
        tr = zoo.Trainer(model, init, label.astype(npdt), dense.astype(npdt), ids, batch=BATCH, fused=fused)
        for k in range(STEPS):
            loss = tr.step(k, halves=halves)
        return {n: t.numpy() for n, t in tr.params().items()}, float(loss)
    finally:
        torch.set_default_dtype(torch.float32)


def main():
    torch.set_num_threads(1)
    for model, tol in [("dlrm", 1e-4), ("dcn-v2", 1e-3), ("deepfm", 1e-3)]:
        for seed in range(1, 30):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "zoo.tsv")
                subprocess.run(["go", "run", ".", "gen", "criteo", "-o", path, "--rows", str(ROWS), "--truth", "fm",
                                "--seed", str(seed)], cwd=ROOT, check=True, stderr=subprocess.DEVNULL)
                with open(path, "rb") as f:
                    sha = hashlib.sha256(f.read()).hexdigest()
                label, dense, ids = zoo.read_criteo(path, BUCKETS)
            data = (label, zoo.standardize(dense, zoo.scaling(dense)), ids)
            exact, _ = train(model, data, torch.float64)
            ref, loss = train(model, data)
            d = [dist(ref, exact), dist(train(model, data, halves=True)[0], exact), dist(train(model, data, fused=True)[0], exact)]
            print(f"{model} seed {seed}: float32 runs end {', '.join(f'{x:.2g}' for x in d)} from float64", flush=True)
            if max(d) <= tol / 10:
                break
        else:
            raise SystemExit(f"{model}: no seed on which float32 rounding stays below {tol / 10:g}")
        meta = {"seed": str(seed), "data_sha256": sha, "steps": str(STEPS), "batch": str(BATCH), "rows": str(ROWS),
                "buckets": str(BUCKETS), "float32_runs_from_float64": ", ".join(f"{x:.3g}" for x in d)}
        zoo.write_safetensors(os.path.join(HERE, model + ".safetensors"), ref, meta)
        print(f"{model}: seed {seed}, loss after {STEPS} steps {loss:.4f}")


if __name__ == "__main__":
    main()
