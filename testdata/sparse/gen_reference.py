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

It also writes the cancelling data set: cancel.csv, cancel-init.safetensors
and cancel-<config>.safetensors, for the models of cancel-<config>.yaml. In
that model an id read in columns 0 and 1 of one row gets two gradients
that nearly cancel (column 1 enters as -(1 - 2^-17) times its embedding),
and every fourth row reads a pair id (50 - 10 ... 49) in both columns, so
those rows only ever see summed gradients of about 1e-7: where Adam's two
forms part (sqrt(v) near eps). The references there: torch.optim.SparseAdam
(and for adamw SparseAdam with the decoupled decay of the touched rows,
TensorFlow Addons' AdamW on IndexedSlices), and independent numpy
implementations of FTRL-proximal (TF's ApplyFtrlV2 / SparseApplyFtrlV2,
see ftrl below) and row-wise adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD), fed
with torch's gradients.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # no __pycache__ beside the test data
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))
from numpy_optim import Ftrl, RowwiseAdagrad  # noqa: E402  (testdata/optim/numpy_optim.py)

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


# The cancelling data set.
CANCEL_VOCAB, PAIRS, CANCEL_DIM = 40, 10, 4
DELTA = 2.0 ** -17  # column 1 enters as -(1 - DELTA) times its embedding


def cancel_data(rng):
    p = 1.0 / np.arange(1, CANCEL_VOCAB + 1) ** 1.2
    p /= p.sum()
    ids = rng.choice(CANCEL_VOCAB, size=(ROWS, COLS), p=p)
    # Every fourth row reads one pair id in columns 0 and 1; the 4 pair
    # rows of any 16 consecutive rows (a batch, wrapping around the file)
    # read 4 different pair ids.
    for r in range(0, ROWS, 4):
        ids[r, 0] = ids[r, 1] = CANCEL_VOCAB + (r // 4) % PAIRS
    label = (ids[:, 2] + 2 * (ids[:, 0] % 5)) % CLASSES
    return ids, label


def cancel_forward(emb, w, xb):
    e = torch.nn.functional.embedding(xb, emb, sparse=True)
    h = e[:, 0] - (1 - DELTA) * e[:, 1] + e[:, 2]
    return h @ w


def run_cancel(name, init, ids, label):
    """Trains the cancel model for STEPS steps with config name; returns the
    parameters and the smallest |summed gradient| a touched row had."""
    emb = torch.tensor(init["emb"], requires_grad=True)
    w = torch.tensor(init["W"], requires_grad=True)
    lr, wd = 0.01, 0.1
    opts, numpy_opt = [], {}
    if name == "sgd":
        opts = [torch.optim.SGD([emb, w], lr=0.5)]
    elif name == "adagrad":
        opts = [torch.optim.Adagrad([emb, w], lr=0.1)]
    elif name in ("adam", "adam-dense-form"):
        opts = [torch.optim.SparseAdam([emb], lr=lr), torch.optim.Adam([w], lr=lr)]
    elif name == "adamw":
        opts = [torch.optim.SparseAdam([emb], lr=lr), torch.optim.AdamW([w], lr=lr, weight_decay=wd)]
    elif name == "ftrl":
        hp = dict(lr=0.2, l1=0.001, l2=0.01, beta=0.5)
        numpy_opt = {"emb": Ftrl(init["emb"].shape, **hp), "W": Ftrl(init["W"].shape, **hp)}
    elif name == "ftrl-power":
        hp = dict(lr=0.2, lr_power=-0.7, initial_accumulator_value=0.05, l2=0.02)
        numpy_opt = {"emb": Ftrl(init["emb"].shape, **hp), "W": Ftrl(init["W"].shape, **hp)}
    elif name == "rowwise_adagrad":
        numpy_opt = {"emb": RowwiseAdagrad(init["emb"].shape, lr=0.1), "W": RowwiseAdagrad(init["W"].shape, lr=0.1)}
    elif name == "mixed":  # FTRL on the table, Adam on the dense layer
        numpy_opt = {"emb": Ftrl(init["emb"].shape, lr=0.2, l1=0.001, l2=0.01, beta=0.5)}
        opts = [torch.optim.Adam([w], lr=lr)]
    else:
        raise ValueError(name)
    # adam-dense-form: SparseAdam's lazy moments with torch.optim.Adam's
    # denominator sqrt(v_hat) + eps (what psgraph's tables used before): the
    # form the data must tell apart from SparseAdam's.
    dense_form = {} if name != "adam-dense-form" else {"m": np.zeros_like(init["emb"], dtype=np.float64), "v": np.zeros_like(init["emb"], dtype=np.float64)}
    smallest = math.inf
    for k in range(STEPS):
        rows = [(k * BATCH + i) % ROWS for i in range(BATCH)]
        xb, yb = torch.tensor(ids[rows]), torch.tensor(label[rows])
        loss = torch.nn.functional.cross_entropy(cancel_forward(emb, w, xb), yb)
        for o in opts:
            o.zero_grad()
        emb.grad, w.grad = None, None
        loss.backward()
        g = emb.grad.coalesce()
        idx, val = g.indices()[0].numpy(), g.values().numpy()
        smallest = min(smallest, float(np.abs(val).max(axis=1).min()))
        if name == "adamw":  # decoupled decay of the touched rows, then SparseAdam
            with torch.no_grad():
                emb[idx] *= 1 - lr * wd
        if name == "adam-dense-form":
            b1, b2, eps, t = 0.9, 0.999, 1e-8, k + 1
            m, v = dense_form["m"], dense_form["v"]
            gv = val.astype(np.float64)
            m[idx] = b1 * m[idx] + (1 - b1) * gv
            v[idx] = b2 * v[idx] + (1 - b2) * gv * gv
            upd = lr * (m[idx] / (1 - b1 ** t)) / (np.sqrt(v[idx]) / math.sqrt(1 - b2 ** t) + eps)
            with torch.no_grad():
                emb[idx] -= torch.tensor(upd.astype(np.float32))
            opts[1].step()
            continue
        for o in opts:
            o.step()
        with torch.no_grad():
            if "emb" in numpy_opt:
                e = emb.detach().numpy().copy()
                numpy_opt["emb"].apply(e, val, idx)
                emb.copy_(torch.tensor(e))
            if "W" in numpy_opt:
                wn = w.detach().numpy().copy()
                numpy_opt["W"].apply(wn, w.grad.numpy())
                w.copy_(torch.tensor(wn))
    return {"emb": emb.detach().numpy(), "W": w.detach().numpy()}, smallest, float(loss)


def write_cancel(rng):
    ids, label = cancel_data(rng)
    with open(os.path.join(HERE, "cancel.csv"), "w") as f:
        for r in range(ROWS):
            f.write(",".join(str(v) for v in ids[r]) + f",{label[r]}\n")
    init = {
        "emb": (0.5 * rng.standard_normal((CANCEL_VOCAB + PAIRS, CANCEL_DIM))).astype(np.float32),
        "W": (0.5 * rng.standard_normal((CANCEL_DIM, CLASSES))).astype(np.float32),
    }
    write_safetensors(os.path.join(HERE, "cancel-init.safetensors"), init)
    results = {}
    for name in ["sgd", "adagrad", "adam", "adamw", "ftrl", "ftrl-power", "rowwise_adagrad", "mixed", "adam-dense-form"]:
        params, smallest, loss = run_cancel(name, init, ids, label)
        results[name] = params
        if name != "adam-dense-form":
            write_safetensors(os.path.join(HERE, "cancel-" + name + ".safetensors"), params)
        print("cancel", name, "final batch loss", loss, "smallest |summed row gradient|", smallest)
    a, b = results["adam"]["emb"], results["adam-dense-form"]["emb"]
    print("cancel: SparseAdam against the dense form on the table after", STEPS, "steps:",
          "max |difference| / max |value| =", float(np.abs(a - b).max() / np.abs(a).max()))


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
    write_cancel(np.random.default_rng(11))


if __name__ == "__main__":
    main()
