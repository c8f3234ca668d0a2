"""The held-out keys a dynamic table's model file lacks, and what they
could read instead of zeros (bench/dyn_auc_seeds.sh).

    python3 dyn_unseen_default.py MODEL HELDOUT_KEYS

MODEL is a saved model with a dynamic table `emb` (emb.keys, emb);
HELDOUT_KEYS a file of the same table holding the held-out file's keys
with their initial rows. Prints how many held-out keys the model lacks
and how many of them a 10,000,000-bucket fixed table would have read
from a bucket some trained key also reads (the bucket of a key's hash:
docs/dsl.md, "64-bit keys"); writes unseen-init.safetensors (the model
with the lacking keys at their initial rows) and unseen-mean.safetensors
(at the mean of the model's rows).
"""
import json
import struct
import sys

import numpy as np

DT = {"F32": "<f4", "I64": "<i8", "U64": "<u8", "I32": "<i4", "U8": "u1"}


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    out = {}
    for k, e in header.items():
        a, b = e["data_offsets"]
        out[k] = (e["dtype"], np.frombuffer(raw[8 + n + a:8 + n + b], DT[e["dtype"]]).reshape(e["shape"]))
    return out, meta


def save(path, tensors, meta):
    header, off, blobs = {}, 0, []
    for k, (dt, x) in tensors.items():
        b = np.ascontiguousarray(x.astype(DT[dt])).tobytes()
        header[k] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def bucket(keys, n=10_000_000):
    """(h * n) >> 64 of each key's hash h: its hash_buckets id."""
    h = keys.view(np.uint64)
    hi, lo = h >> np.uint64(32), h & np.uint64(0xFFFFFFFF)
    return (hi * np.uint64(n) + ((lo * np.uint64(n)) >> np.uint64(32))) >> np.uint64(32)


def main():
    model, meta = load(sys.argv[1])
    held, _ = load(sys.argv[2])
    keys, rows = model["emb.keys"][1], model["emb"][1]
    hkeys, hrows = held["emb.keys"][1], held["emb"][1]
    unseen = ~np.isin(hkeys, keys)
    ukeys, urows = hkeys[unseen], hrows[unseen]
    used = np.unique(bucket(keys))
    print("%s: %d trained keys, held-out %d keys of which %d (%.3f) unseen; 10M buckets: %.3f of trained keys share one, "
          "%.3f of the unseen keys read a trained key's bucket; trained rows: mean norm %.4f, norm of their mean %.4f"
          % (sys.argv[1], len(keys), len(hkeys), len(ukeys), len(ukeys) / len(hkeys), 1 - len(used) / len(keys),
             np.isin(bucket(ukeys), used).mean(), np.linalg.norm(rows, axis=1).mean(), np.linalg.norm(rows.mean(0))))
    for name, extra in (("init", urows), ("mean", np.tile(rows.mean(0), (len(ukeys), 1)))):
        k = np.concatenate([keys, ukeys])
        r = np.concatenate([rows, extra.astype(np.float32)])
        order = np.argsort(k)
        t = dict(model)
        t["emb.keys"], t["emb"] = ("I64", k[order]), ("F32", r[order])
        save("unseen-%s.safetensors" % name, t, meta)


main()
