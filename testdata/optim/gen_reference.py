#!/usr/bin/env python3
"""Writes the torch.optim reference values psgraph's optimizer tests compare against.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/optim/gen_reference.py
It writes testdata/optim/init.safetensors (the shared initial parameters) and
testdata/optim/<optimizer>.safetensors (parameters after STEPS steps of
torch.optim on the model of mlp-<optimizer>.yaml, fed by psgraph's data
stream rule: batch 30, no shuffle, iris standardized per column).
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, BATCH = 50, 30
NAMES = ["W1", "b1", "W2", "b2"]


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


def load_iris():
    raw = np.loadtxt(os.path.join(HERE, "../../examples/data/iris.csv"), delimiter=",")
    x = raw[:, :4].astype(np.float32).astype(np.float64)
    mean = x.mean(axis=0)
    std = np.sqrt(np.maximum((x * x).mean(axis=0) - mean * mean, 0))
    std[std < 1e-12] = 1
    x = ((x - mean) / std).astype(np.float32)
    return x, raw[:, 4].astype(np.int64)


def main():
    rng = np.random.default_rng(0)
    init = {
        "W1": (0.5 * rng.standard_normal((4, 16))).astype(np.float32),
        "b1": (0.1 * rng.standard_normal(16)).astype(np.float32),
        "W2": (0.5 * rng.standard_normal((16, 3))).astype(np.float32),
        "b2": (0.1 * rng.standard_normal(3)).astype(np.float32),
    }
    write_safetensors(os.path.join(HERE, "init.safetensors"), init)
    x, y = load_iris()
    configs = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    }
    for name, make in configs.items():
        params = {n: torch.tensor(init[n], requires_grad=True) for n in NAMES}
        opt = make([params[n] for n in NAMES])
        for k in range(STEPS):
            rows = [(k * BATCH + i) % len(x) for i in range(BATCH)]
            xb, yb = torch.tensor(x[rows]), torch.tensor(y[rows])
            h = torch.tanh(xb @ params["W1"] + params["b1"])
            loss = torch.nn.functional.cross_entropy(h @ params["W2"] + params["b2"], yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        write_safetensors(os.path.join(HERE, name + ".safetensors"), {n: params[n].detach().numpy() for n in NAMES})
        print(name, "final batch loss", float(loss))


if __name__ == "__main__":
    main()
