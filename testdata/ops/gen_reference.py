#!/usr/bin/env python3
"""Writes the torch references of the recommender ops' tests.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/ops/gen_reference.py
Each <op>.safetensors holds the inputs of a few cases, a random upstream
gradient G per case, and what torch computes from them: the output and the
gradient of sum(output * G) with respect to every float input. The tests
(exec/kernels/torch_test.go) read these files; they do not need torch.

- embedding_bag: torch.nn.functional.embedding_bag in its offsets form
  (each bag's real ids, padding dropped), mode sum and mean; sqrtn is sum
  divided by sqrt(count), TensorFlow's combiner "sqrtn". A bag with no real
  id is empty: zeros in every mode.
- batch_matmul: torch.bmm of the operands, transposed where a case says.
- dot_interaction: facebookresearch/dlrm's "dot" interaction (its
  interact_features): Z = bmm(T, T^T), then Z[:, li, lj] with
  li, lj = [(i, j) for i in range(F) for j in range(i + offset)], offset 0
  (strict lower triangle, row-major) or 1 (arch_interaction_itself).
- stack: torch.stack along an axis.
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, torch.Tensor):
            t = t.detach().numpy()
        if t.dtype.kind in "iu":
            a, dt = np.ascontiguousarray(t, dtype="<i4"), "I32"
        else:
            a, dt = np.ascontiguousarray(t, dtype="<f4"), "F32"
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def f32(rng, *shape):
    return torch.tensor(rng.standard_normal(shape).astype(np.float32))


def embedding_bag(rng):
    V, D = 12, 5
    ids = np.array([
        [3, -1, 7, 3],     # a repeated id and padding in the middle
        [-1, -1, -1, -1],  # no real id: zeros
        [0, 11, 5, 2],     # a full bag
        [7, -1, -1, -1],   # one id
        [5, 3, 5, 5],      # an id three times
        [-1, 2, -1, 11],   # padding first
    ], dtype=np.int32)
    out = {"ids": ids}
    table = f32(rng, V, D)
    out["table"] = table
    flat, offsets = [], []
    for row in ids:
        offsets.append(len(flat))
        flat.extend(int(i) for i in row if i >= 0)
    flat, offsets = torch.tensor(flat), torch.tensor(offsets)
    counts = torch.tensor([(row >= 0).sum() for row in ids], dtype=torch.float32)
    G = f32(rng, len(ids), D)
    out["G"] = G
    for mode in ["sum", "mean", "sqrtn"]:
        w = table.clone().requires_grad_(True)
        y = torch.nn.functional.embedding_bag(flat, w, offsets, mode="sum" if mode == "sqrtn" else mode)
        if mode == "sqrtn":
            y = y / torch.sqrt(torch.clamp(counts, min=1)).unsqueeze(1)
        (y * G).sum().backward()
        out["y." + mode] = y
        out["dtable." + mode] = w.grad
    return out


def batch_matmul(rng):
    B, M, K, N = 3, 4, 5, 2
    out = {}
    for ta in (False, True):
        for tb in (False, True):
            name = f"{int(ta)}{int(tb)}"
            x = f32(rng, *((B, K, M) if ta else (B, M, K))).requires_grad_(True)
            y = f32(rng, *((B, N, K) if tb else (B, K, N))).requires_grad_(True)
            z = torch.bmm(x.transpose(1, 2) if ta else x, y.transpose(1, 2) if tb else y)
            G = f32(rng, B, M, N)
            (z * G).sum().backward()
            out.update({"x." + name: x, "y." + name: y, "G." + name: G, "z." + name: z,
                        "dx." + name: x.grad, "dy." + name: y.grad})
    return out


def dlrm_dot(T, itself):
    # facebookresearch/dlrm, dlrm_s_pytorch.py, DLRM_Net.interact_features ("dot").
    Z = torch.bmm(T, torch.transpose(T, 1, 2))
    _, ni, nj = Z.shape
    offset = 1 if itself else 0
    li = torch.tensor([i for i in range(ni) for j in range(i + offset)])
    lj = torch.tensor([j for i in range(nj) for j in range(i + offset)])
    return Z[:, li, lj]


def dot_interaction(rng):
    out = {}
    # a small case, DLRM's shape (27 vectors of 16) and one with F above a block
    for name, (B, F, D) in {"small": (3, 5, 4), "dlrm": (4, 27, 16), "wide": (2, 40, 7)}.items():
        for itself in (False, True):
            key = name + (".self" if itself else "")
            x = f32(rng, B, F, D).requires_grad_(True)
            z = dlrm_dot(x, itself)
            G = f32(rng, *z.shape)
            (z * G).sum().backward()
            out.update({"x." + key: x, "G." + key: G, "z." + key: z, "dx." + key: x.grad})
    return out


def stack(rng):
    out = {}
    xs = [f32(rng, 3, 4).requires_grad_(True) for _ in range(5)]
    for axis in (0, 1, 2):
        y = torch.stack(xs, dim=axis)
        out[f"y.{axis}"] = y
    for i, x in enumerate(xs):
        out[f"x{i}"] = x
    return out


def main():
    rng = np.random.default_rng(22)
    for name, make in [("embedding_bag", embedding_bag), ("batch_matmul", batch_matmul),
                       ("dot_interaction", dot_interaction), ("stack", stack)]:
        write_safetensors(os.path.join(HERE, name + ".safetensors"), make(rng))
        print("wrote", name)


if __name__ == "__main__":
    main()
