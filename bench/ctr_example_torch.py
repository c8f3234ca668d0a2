#!/usr/bin/env python3
"""The PyTorch side of the CTR-example benchmark (bench/history-2026-12.md).

    /usr/bin/python3 bench/ctr_example_torch.py DATA.tsv STEPS BUCKETS [THREADS,...]

The model is psgraph's examples/ctr.yaml with a table of BUCKETS rows: the
26 categorical columns of a `psgraph gen criteo` file hashed by psgraph's
documented hash (docs/dsl.md, exec/data/hash.go) into one BUCKETS x 16 table,
nn.Embedding(sparse=True), concatenated (416 wide); the 13 integer columns
(empty = 0, ln(1+v) for v > 0, standardized over the file) through a
bottom MLP 13-64-16; both concatenated into a top MLP 432-128-64-2, relu
between; softmax cross entropy; batch 256; adagrad lr 0.02 on every
parameter; batch k = rows [kB, (k+1)B) of the file, wrapping (psgraph's
data stream rule). The file is parsed before the clock starts (psgraph
parses it inside its steps). PyTorch eager on each of THREADS threads
(default 1,2: PyTorch at its best is the better of the two), the model
drawn afresh for each; run with OPENBLAS_NUM_THREADS=1 and
OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE unset, as .ci/bench does. Prints one
JSON line per thread count with steps_per_s, measured after 20 warm-up
steps, then one with the best.
"""
import json
import math
import sys
import time

import numpy as np
import torch

D, B, LR = 16, 256, 0.02
FNV_OFFSET, FNV_PRIME, MASK = 14695981039346656037, 1099511628211, (1 << 64) - 1


def hash_id(col, field, buckets):
    """The id of hash_buckets (docs/dsl.md): FNV-1a 64 over the column's 4 bytes then the field's, murmur3's finalizer, high 64 bits of h x buckets."""
    h = FNV_OFFSET
    for b in col.to_bytes(4, "little") + field:
        h = ((h ^ b) * FNV_PRIME) & MASK
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    h ^= h >> 33
    return (h * buckets) >> 64


def load(path, buckets):
    """The file's dense features, hashed ids and labels, cached beside it
    (PATH.BUCKETS.npz) so that later runs skip the parse."""
    cache = f"{path}.{buckets}.npz"
    try:
        z = np.load(cache)
        return torch.from_numpy(z["dense"]), torch.from_numpy(z["ids"]), torch.from_numpy(z["label"])
    except (OSError, KeyError, ValueError):
        pass
    dense, ids, label = parse(path, buckets)
    np.savez(cache, dense=dense, ids=ids, label=label)
    return torch.from_numpy(dense), torch.from_numpy(ids), torch.from_numpy(label)


def parse(path, buckets):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    rows = [ln.split(b"\t") for ln in lines if ln.strip()]
    n = len(rows)
    label = np.array([int(r[0]) for r in rows], dtype=np.int64)
    dense = np.array([[float(v) if v else 0.0 for v in r[1:14]] for r in rows], dtype=np.float32)
    dense = np.where(dense > 0, np.log1p(np.maximum(dense, 0)), dense).astype(np.float32)
    std = dense.std(axis=0)
    dense = (dense - dense.mean(axis=0)) / np.where(std == 0, 1, std)
    ids = np.empty((n, 26), dtype=np.int64)
    for c in range(26):
        col = np.array([r[14 + c] for r in rows], dtype="S8")
        uniq, inv = np.unique(col, return_inverse=True)
        ids[:, c] = np.array([hash_id(14 + c, u, buckets) for u in uniq], dtype=np.int64)[inv]
    return dense.astype(np.float32), ids, label


def he_normal(fan_in, fan_out):
    return torch.nn.Parameter(torch.randn(fan_in, fan_out) * math.sqrt(2 / fan_in))


def main():
    path, steps, buckets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    counts = [int(t) for t in (sys.argv[4] if len(sys.argv) > 4 else "1,2").split(",")]
    data = load(path, buckets)
    best = None
    for threads in counts:
        r = run(data, steps, buckets, threads)
        print(json.dumps(r), flush=True)
        if best is None or r["steps_per_s"] > best["steps_per_s"]:
            best = r
    print(json.dumps(dict(best, role="torch-best")))


def run(data, steps, buckets, threads):
    torch.set_num_threads(threads)
    dense, ids, label = data
    n = len(label)
    torch.manual_seed(1)
    emb = torch.nn.Embedding(buckets, D, sparse=True)
    torch.nn.init.normal_(emb.weight, std=0.01)
    wb0, bb0 = he_normal(13, 64), torch.nn.Parameter(torch.zeros(64))
    wb1, bb1 = he_normal(64, 16), torch.nn.Parameter(torch.zeros(16))
    wt0, bt0 = he_normal(432, 128), torch.nn.Parameter(torch.zeros(128))
    wt1, bt1 = he_normal(128, 64), torch.nn.Parameter(torch.zeros(64))
    wt2, bt2 = torch.nn.Parameter(torch.empty(64, 2)), torch.nn.Parameter(torch.zeros(2))
    torch.nn.init.xavier_uniform_(wt2)
    params = [emb.weight, wb0, bb0, wb1, bb1, wt0, bt0, wt1, bt1, wt2, bt2]
    opt = torch.optim.Adagrad(params, lr=LR)
    relu = torch.relu

    def step(k):
        lo = (k * B) % n
        rows = torch.arange(lo, lo + B) % n
        e = emb(ids[rows]).reshape(B, 26 * D)
        d = relu(relu(dense[rows] @ wb0 + bb0) @ wb1 + bb1)
        x = torch.cat([e, d], dim=1)
        logits = relu(relu(x @ wt0 + bt0) @ wt1 + bt1) @ wt2 + bt2
        loss = torch.nn.functional.cross_entropy(logits, label[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for k in range(20):
        step(k)
    t0 = time.perf_counter()
    for k in range(20, 20 + steps):
        loss = step(k)
    dt = time.perf_counter() - t0
    return {"role": "torch", "threads": threads, "buckets": buckets, "steps": steps, "seconds": round(dt, 4),
            "steps_per_s": round(steps / dt, 1), "loss": float(loss)}


if __name__ == "__main__":
    main()
