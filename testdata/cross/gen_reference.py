#!/usr/bin/env python3
"""Writes the references of psgraph's integer ops (cast, hash_cross,
arange_like, and the ops that rearrange int64 keys) for exec/kernels'
TestOpsMatchTorch.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/cross/gen_reference.py
It writes testdata/cross/reference.safetensors in the format of
testdata/reduce/gen_reference.py. cast and arange_like are torch's
(Tensor.to, torch.arange); hash_cross has no torch counterpart, so its ids
come from cross_id below, the hash docs/dsl.md documents, written from that
text in plain Python integers.
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reduce"))
from gen_reference import Cases  # noqa: E402

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def cross_id(values, buckets, salt=0):
    """hash_cross of one row: its values in order, as 64-bit integers."""
    h = mix((salt + GAMMA) & M64)
    for v in values:
        h = mix((h + GAMMA + (v & M64)) & M64)
    return (h * buckets) >> 64


def key_of(h):
    """The int64 key of a 64-bit hash (docs/dsl.md, "64-bit keys"): its
    bits as a two's-complement int64, 2^63 (the padding key's bits) moved
    to -2^63 + 1."""
    k = h - (1 << 64) if h >= 1 << 63 else h
    return k + 1 if k == -(1 << 63) else k


def cross_key(values, salt=0):
    """hash_cross with dtype: int64: the whole hash as a key."""
    h = mix((salt + GAMMA) & M64)
    for v in values:
        h = mix((h + GAMMA + (v & M64)) & M64)
    return key_of(h)


def cross(buckets, salt=0, keys=False):
    def run(*cols):
        rows = cols[0].shape[0]
        out = []
        for r in range(rows):
            vals = []
            for c in cols:
                row = c[r].reshape(-1).tolist()
                vals.extend(int(v) for v in row)
            out.append(cross_key(vals, salt) if keys else cross_id(vals, buckets, salt))
        return torch.tensor(out, dtype=torch.int64 if keys else torch.int32)
    return run


def main():
    c = Cases(9)
    ids = lambda *shape: c.rng.integers(0, 50, size=shape).astype(np.int32)
    s = lambda a: ("ids", a) if a.dtype.kind == "i" else ("state", a)
    c.run("cast_to_int32", "cast", "{to: int32}",
          [s(np.array([[-2.7, 3.9, 0.0, -0.5], [1e9, -2147483648.0, 2147483520.0, 7.0]], dtype=np.float32))],
          lambda x: x.to(torch.int32))
    c.run("cast_to_float32", "cast", "{to: float32}",
          [s(np.array([0, -3, 16777217, 2147483647, -2147483648, 42], dtype=np.int32))],
          lambda x: x.to(torch.float32))
    a, b = ids(6), ids(6, 2)
    a[1] = -1  # a negative id is hashed as its 64-bit two's complement
    b[2] = [2147483647, 0]
    c.run("cross_two_columns", "hash_cross", "{buckets: 1000}", [s(a), s(b)], cross(1000))
    c.run("cross_salted", "hash_cross", "{buckets: 1000, salt: 7}", [s(a), s(b)], cross(1000, 7))
    c.run("cross_order_matters", "hash_cross", "{buckets: 1000}", [s(b), s(a)], cross(1000))
    c.run("cross_one_input_wide", "hash_cross", "{buckets: 2147483647}", [s(ids(5, 3))], cross(2147483647))
    c.run("cross_three", "hash_cross", "{buckets: 97}", [s(ids(4)), s(ids(4)), s(ids(4, 1))], cross(97))
    c.run("arange_batch", "arange_like", "", [("state", c.rng.uniform(size=(5, 3)).astype(np.float32))],
          lambda x: torch.arange(x.shape[0], dtype=torch.int32))
    c.run("arange_axis1", "arange_like", "{axis: -1}", [s(ids(2, 4))],
          lambda x: torch.arange(x.shape[-1], dtype=torch.int32))
    # int64 keys (docs/dsl.md, "64-bit keys"): casts to and from int64,
    # crosses of int64 keys (alone, mixed with int32 ids, into buckets and
    # into keys) and the ops that rearrange ids, on keys of both signs, the
    # extremes and the padding key.
    big = np.array([[-(1 << 63), (1 << 63) - 1, -1, 0], [1 << 40, -(1 << 33) + 7, 123456789012345, 3]], dtype=np.int64)
    c.run("cast_int64_to_float32", "cast", "{to: float32}",
          [s(np.array([0, -3, 16777217, (1 << 53) + 1, -(1 << 63), (1 << 63) - 1], dtype=np.int64))],
          lambda x: x.to(torch.float32))
    c.run("cast_float32_to_int64", "cast", "{to: int64}",
          [s(np.array([[-2.7, 3.9, 0.0, -0.5], [1e18, -9.223372e18, 3e9, -7.0]], dtype=np.float32))],
          lambda x: x.to(torch.int64))
    c.run("cast_int32_to_int64", "cast", "{to: int64}",
          [s(np.array([0, -1, 2147483647, -2147483648], dtype=np.int32))], lambda x: x.to(torch.int64))
    c.run("cast_int64_to_int32", "cast", "{to: int32}",
          [s(np.array([0, -1, 2147483647, -2147483648], dtype=np.int64))], lambda x: x.to(torch.int32))
    keys = lambda *shape: c.rng.integers(-(1 << 63), (1 << 63) - 1, size=shape, dtype=np.int64)
    k1, k2 = keys(6), keys(6, 2)
    k1[0], k2[1] = -(1 << 63), [-1, 0]  # the padding key is absorbed as a value
    c.run("cross_keys_into_buckets", "hash_cross", "{buckets: 1000}", [s(k1), s(k2)], cross(1000))
    c.run("cross_keys_into_key", "hash_cross", "{dtype: int64}", [s(k1), s(k2)], cross(0, keys=True))
    c.run("cross_mixed_into_key_salted", "hash_cross", "{dtype: int64, salt: -5}", [s(a), s(k2)], cross(0, -5, keys=True))
    # An int32 id and the int64 key of the same value cross alike.
    c.run("cross_int32_ids_into_key", "hash_cross", "{dtype: int64}", [s(a), s(b)], cross(0, keys=True))
    c.run("cross_widened_ids_into_key", "hash_cross", "{dtype: int64}", [s(a.astype(np.int64)), s(b.astype(np.int64))], cross(0, keys=True))
    c.run("keys_reshape", "reshape", "{shape: [4, 2]}", [s(big)], lambda x: x.reshape(4, 2))
    c.run("keys_transpose", "transpose", "", [s(big)], lambda x: x.t().contiguous())
    c.run("keys_slice_rows", "slice_rows", "{start: 1, end: 3, axis: 1}", [s(big)], lambda x: x[:, 1:3].contiguous())
    c.run("keys_concat", "concat", "{axis: 1}", [s(big), s(keys(2, 3))], lambda x, y: torch.cat([x, y], dim=1))
    c.run("keys_stack", "stack", "{axis: 1}", [s(big), s(keys(2, 4))], lambda x, y: torch.stack([x, y], dim=1))
    c.run("keys_identity", "identity", "", [s(big)], lambda x: x.clone())
    c.run("ids_identity", "identity", "", [s(ids(3, 2))], lambda x: x.clone())
    c.write(os.path.join(HERE, "reference.safetensors"))
    # The documented example (docs/dsl.md): the cross of ids 3 and 5.
    print("cross of [3, 5] into 1000 buckets:", cross_id([3, 5], 1000), "salt 7:", cross_id([3, 5], 1000, 7))


if __name__ == "__main__":
    main()
