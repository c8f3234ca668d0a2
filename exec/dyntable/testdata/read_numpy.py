#!/usr/bin/env python3
"""Reads psgraph's dynamic-table files with numpy alone, as a user would.

Run from exec/dyntable with Debian's python3 (numpy):
    /usr/bin/python3 testdata/read_numpy.py
It parses testdata/checkpoint.safetensors and testdata/model.safetensors
(written by TestFilesReadByNumpy; go test -update rewrites them) following
the safetensors format only: an 8-byte little-endian header length, a JSON
header of {name: {dtype, shape, data_offsets}} and "__metadata__", then the
data. It writes what it read to testdata/numpy_read.json, which the test
compares with the table.
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"F32": "<f4", "I64": "<i8", "U64": "<u8", "U8": "u1"}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n :]
    tensors = {}
    for name, e in header.items():
        start, end = e["data_offsets"]
        a = np.frombuffer(body[start:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        tensors[name] = (e["dtype"], a)
    return meta, tensors


def as_json(a):
    if a.dtype.kind == "f":
        return [as_json(x) for x in a] if a.ndim > 1 else [float(x) for x in a]
    return [as_json(x) for x in a] if a.ndim > 1 else [int(x) for x in a]


out = {}
for name in ["checkpoint.safetensors", "model.safetensors"]:
    meta, tensors = read_safetensors(os.path.join(HERE, name))
    # The table as a dict: key -> value row, the way a user looks rows up.
    table = dict(zip(tensors["emb.keys"][1].tolist(), tensors["emb"][1]))
    assert len(table) == len(tensors["emb.keys"][1]), "keys repeat"
    out[name] = {
        "metadata": meta,
        "tensors": {n: {"dtype": dt, "shape": list(a.shape), "data": as_json(a)} for n, (dt, a) in tensors.items()},
    }
with open(os.path.join(HERE, "numpy_read.json"), "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
