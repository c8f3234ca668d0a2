#!/usr/bin/env python3
"""The PyTorch side of psgraph's sparse-table benchmark (bench/history-2026-12.md).

    /usr/bin/python3 bench/ctr_torch.py DATA.csv STEPS [adagrad|sgd|adam]

DATA.csv holds 26 int id columns and a 0/1 label (what `.ci/bench` writes).
The model is psgraph's bench/ctr-bench.yaml: the 26 ids into one
1,000,000 x 16 table, the embeddings concatenated (416 wide), a 416 x 2
matmul, softmax cross entropy, batch 256, adagrad lr 0.05; PyTorch eager on
one thread with nn.Embedding(sparse=True), fed by psgraph's data stream
rule (batch k = rows [kB, (k+1)B), wrapping). Prints one JSON line with
steps_per_s, measured after 20 warm-up steps.
"""
import json
import sys
import time

import numpy as np
import torch

V, D, C, B = 1_000_000, 16, 26, 256


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    opt_name = sys.argv[3] if len(sys.argv) > 3 else "adagrad"
    torch.set_num_threads(1)
    raw = np.loadtxt(path, delimiter=",", dtype=np.int64)
    ids, label = torch.from_numpy(raw[:, :C].copy()), torch.from_numpy(raw[:, C].copy())
    n = len(raw)
    torch.manual_seed(1)
    emb = torch.nn.Embedding(V, D, sparse=True)
    torch.nn.init.normal_(emb.weight, std=0.01)
    w = torch.nn.Parameter(torch.empty(C * D, 2))
    torch.nn.init.xavier_uniform_(w)
    if opt_name == "adagrad":
        opts = [torch.optim.Adagrad([emb.weight, w], lr=0.05)]
    elif opt_name == "sgd":
        opts = [torch.optim.SGD([emb.weight, w], lr=0.05)]
    else:
        opts = [torch.optim.SparseAdam([emb.weight], lr=0.001), torch.optim.Adam([w], lr=0.001)]

    def step(k):
        rows = torch.arange(k * B, (k + 1) * B) % n
        h = emb(ids[rows]).reshape(B, C * D)
        loss = torch.nn.functional.cross_entropy(h @ w, label[rows])
        for o in opts:
            o.zero_grad()
        loss.backward()
        for o in opts:
            o.step()
        return loss

    for k in range(20):
        step(k)
    t0 = time.perf_counter()
    for k in range(20, 20 + steps):
        loss = step(k)
    dt = time.perf_counter() - t0
    print(json.dumps({"role": "torch", "optimizer": opt_name, "steps": steps, "seconds": round(dt, 4),
                      "steps_per_s": round(steps / dt, 1), "loss": float(loss)}))


if __name__ == "__main__":
    main()
