#!/usr/bin/env python3
"""Writes the torch references psgraph's sparse-table tests compare against.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/sparse/gen_reference.py
It writes testdata/sparse/ids.csv (3 id columns over a 40-row vocabulary and
a class label), init.safetensors (the shared initial parameters) and
<optimizer>.safetensors: the parameters after STEPS steps of torch on the
model of emb-<optimizer>.yaml, fed by psgraph's data stream rule (batch 16,
no shuffle). The table takes torch's sparse path: nn.functional.embedding
with sparse=True, so SGD and Adagrad apply row gradients and adam's table
uses torch.optim.SparseAdam (the dense matrix W uses torch.optim.Adam).
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, BATCH, ROWS, VOCAB, COLS, DIM, CLASSES = 50, 16, 200, 40, 3, 4, 3


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    rng = np.random.default_rng(7)
    # Zipf-like ids: a few rows are hit by most batches, many by none.
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.2
    p /= p.sum()
    ids = rng.choice(VOCAB, size=(ROWS, COLS), p=p)
    label = (ids.sum(axis=1) + ids[:, 0]) % CLASSES
    with open(os.path.join(HERE, "ids.csv"), "w") as f:
        for r in range(ROWS):
            f.write(",".join(str(v) for v in ids[r]) + f",{label[r]}\n")
    init = {
        "emb": (0.5 * rng.standard_normal((VOCAB, DIM))).astype(np.float32),
        "W": (0.5 * rng.standard_normal((COLS * DIM, CLASSES))).astype(np.float32),
    }
    write_safetensors(os.path.join(HERE, "init.safetensors"), init)
    configs = {
        "sgd": lambda e, w: [torch.optim.SGD([e, w], lr=0.5)],
        "adagrad": lambda e, w: [torch.optim.Adagrad([e, w], lr=0.1)],
        "adam": lambda e, w: [torch.optim.SparseAdam([e], lr=0.01), torch.optim.Adam([w], lr=0.01)],
    }
    for name, make in configs.items():
        emb = torch.tensor(init["emb"], requires_grad=True)
        w = torch.tensor(init["W"], requires_grad=True)
        opts = make(emb, w)
        for k in range(STEPS):
            rows = [(k * BATCH + i) % ROWS for i in range(BATCH)]
            xb, yb = torch.tensor(ids[rows]), torch.tensor(label[rows])
            h = torch.nn.functional.embedding(xb, emb, sparse=True).reshape(BATCH, COLS * DIM)
            loss = torch.nn.functional.cross_entropy(h @ w, yb)
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
        write_safetensors(os.path.join(HERE, name + ".safetensors"), {"emb": emb.detach().numpy(), "W": w.detach().numpy()})
        print(name, "final batch loss", float(loss))


if __name__ == "__main__":
    main()
