#!/usr/bin/env python3
"""Writes the torch references of psgraph's reductions (sum and mean with
keepdims, reduce_max, logsumexp) for exec/kernels' TestOpsMatchTorch.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/reduce/gen_reference.py
It writes testdata/reduce/reference.safetensors: per case <case>.in<i> (the
inputs), <case>.out<i> (torch's outputs) and, for the float inputs that are
psgraph params, <case>.R (the weights of loss = sum(out0 * R)) and
<case>.grad<i> (torch's d loss / d in<i>). The metadata key "cases" lists
each case's op, attributes (a YAML flow mapping), input kinds and mode.
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def write_safetensors(path, tensors, meta, wide=frozenset()):
    """Integer tensors are written as I32, except those named in wide
    (int64 keys), written as I64."""
    header, offset, blobs = {"__metadata__": meta}, 0, []
    for name in sorted(tensors):
        t = tensors[name]
        kind = "F32"
        if t.dtype.kind == "i":
            kind = "I64" if name in wide else "I32"
        a = np.ascontiguousarray(t, dtype={"F32": "<f4", "I32": "<i4", "I64": "<i8"}[kind])
        header[name] = {"dtype": kind, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Cases:
    """Collects cases: run(name, op, attrs, inputs, fn) evaluates fn on the
    inputs with torch and records the outputs and the params' gradients."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.tensors, self.meta = {}, []
        self.wide = set()  # the names of int64 tensors

    def run(self, name, op, attrs, inputs, fn, mode="train", batch=0):
        """An input array of dtype int64, and an int64 output of torch,
        is an int64 tensor (I64); other integers are int32."""
        ts, kinds = [], []
        for i, (kind, a) in enumerate(inputs):
            self.tensors[f"{name}.in{i}"] = a
            if a.dtype == np.int64:
                self.wide.add(f"{name}.in{i}")
            t = torch.tensor(a)
            if kind == "param":
                t.requires_grad_(True)
            ts.append(t)
            kinds.append(kind)
        outs = fn(*ts)
        if not isinstance(outs, tuple):
            outs = (outs,)
        for i, o in enumerate(outs):
            self.tensors[f"{name}.out{i}"] = o.detach().numpy()
            if o.dtype == torch.int64:
                self.wide.add(f"{name}.out{i}")
        if "param" in kinds:
            r = self.rng.uniform(-1, 1, size=outs[0].shape).astype(np.float32)
            self.tensors[f"{name}.R"] = r
            (outs[0] * torch.tensor(r)).sum().backward()
            for i, t in enumerate(ts):
                if kinds[i] == "param":
                    self.tensors[f"{name}.grad{i}"] = t.grad.numpy()
        self.meta.append({"name": name, "op": op, "attrs": attrs, "inputs": kinds,
                          "outputs": len(outs), "mode": mode, "batch": batch})

    def write(self, path):
        write_safetensors(path, self.tensors, {"cases": json.dumps(self.meta)}, self.wide)


def first_max(x, dim, keepdim=False):
    """torch.max along dim: the values, and the gradient to the first largest."""
    if dim is None:
        return x.flatten().max(dim=0).values
    return x.max(dim=dim, keepdim=keepdim).values


def main():
    c = Cases(3)
    f = lambda *shape: c.rng.uniform(-2, 2, size=shape).astype(np.float32)
    p = lambda a: ("param", a)
    c.run("sum_keep_axis1", "sum", "{axis: 1, keepdims: true}", [p(f(3, 4))], lambda x: x.sum(dim=1, keepdim=True))
    c.run("sum_keep_all", "sum", "{keepdims: true}", [p(f(2, 3))], lambda x: x.sum().reshape(1, 1))
    c.run("mean_keep_last", "mean", "{axis: -1, keepdims: true}", [p(f(2, 3, 4))], lambda x: x.mean(dim=-1, keepdim=True))
    c.run("mean_keep_axis0", "mean", "{axis: 0, keepdims: true}", [p(f(5, 3))], lambda x: x.mean(dim=0, keepdim=True))
    c.run("mean_axis1", "mean", "{axis: 1}", [p(f(2, 3, 4))], lambda x: x.mean(dim=1))

    # Ties: the gradient goes to the first largest, as torch.max(dim)'s
    # index; rows of equal values and a repeated maximum.
    ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-1, -5, -1, -2]], dtype=np.float32)
    c.run("max_ties_axis1", "reduce_max", "{axis: 1}", [p(ties)], lambda x: first_max(x, 1))
    c.run("max_ties_axis0", "reduce_max", "{axis: 0, keepdims: true}", [p(ties)], lambda x: first_max(x, 0, True))
    c.run("max_ties_all", "reduce_max", "", [p(ties)], lambda x: first_max(x, None))
    c.run("max_axis_mid", "reduce_max", "{axis: 1}", [p(f(2, 5, 3))], lambda x: first_max(x, 1))
    c.run("max_keep_last", "reduce_max", "{axis: -1, keepdims: true}", [p(f(4, 6))], lambda x: first_max(x, -1, True))

    # logsumexp: large values that overflow exp without the shift, and
    # very negative ones that underflow.
    big = f(3, 5)
    big[0] += 1000
    big[1] -= 1000
    c.run("lse_big_axis1", "logsumexp", "{axis: 1}", [p(big)], lambda x: torch.logsumexp(x, dim=1))
    c.run("lse_keep_axis0", "logsumexp", "{axis: 0, keepdims: true}", [p(f(4, 3))], lambda x: torch.logsumexp(x, dim=0, keepdim=True))
    c.run("lse_all", "logsumexp", "", [p(f(3, 4))], lambda x: torch.logsumexp(x.flatten(), dim=0))
    c.run("lse_mid_keep", "logsumexp", "{axis: 1, keepdims: true}", [p(f(2, 4, 3))], lambda x: torch.logsumexp(x, dim=1, keepdim=True))
    # Two-tower's in-batch softmax: logsumexp of each row of the [B, B]
    # scores minus the diagonal, the labels arange_like gives.
    c.run("lse_scores", "logsumexp", "{axis: 1}", [p(f(6, 6) * 5)], lambda x: torch.logsumexp(x, dim=1))
    c.write(os.path.join(HERE, "reference.safetensors"))

    # The tie-breaking claim itself: torch routes max(dim)'s gradient to
    # the first largest.
    x = torch.tensor(ties, requires_grad=True)
    x.max(dim=1).values.sum().backward()
    assert x.grad[0].tolist() == [0, 1, 0, 0] and x.grad[1].tolist() == [1, 0, 0, 0], x.grad


if __name__ == "__main__":
    main()
