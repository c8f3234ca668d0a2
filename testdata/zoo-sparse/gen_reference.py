#!/usr/bin/env python3
"""Writes the torch references of exec/job's TestWideDeepMatchesTorch,
TestMultiHotMatchesTorch and TestTwoTowerMatchesTorch.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/zoo-sparse/gen_reference.py
It reads zoo.tsv, 200 rows written by
    psgraph gen criteo -o testdata/zoo-sparse/zoo.tsv --rows 200 --seed 3 --vocab 60 --truth fm --history 4
and for each of examples/wide-deep.yaml, multi-hot.yaml and two-tower.yaml
writes:
  - <model>.yaml: the example at a small size (tables of 512 rows of 4,
    narrower MLPs, batch 32, 50 steps, zoo.tsv without held-out data),
    its ops and optimizers otherwise the example's (the Go test checks);
  - <model>-init.safetensors: initial parameters (numpy, seeded);
  - <model>-local.safetensors: the parameters after 50 steps of torch
    with batch 32 (bench/zoo_sparse_torch.py's model, data reading and
    optimizers);
    For two-tower its metadata holds the loss and recall@10 of those
    parameters over zoo.tsv in one chunk (psgraph eval's chunks are 1024
    rows): eval_loss and eval_recall10;
  - <model>-2x2.safetensors: the same with 2 trainers of batch 16 each
    computing its own loss on its half, the gradients averaged, as a sync
    job (and DistributedDataParallel) computes. For the CTR models the mean
    of the halves' losses is the loss of the whole batch, so this equals
    the local reference (checked here); for two-tower, whose in-batch
    negatives come from each trainer's half, it does not (checked too).
The 512-row tables over ids hashed from a vocabulary of 60 per column
(and crosses of two) make duplicate ids in every batch.

It also checks bench/zoo_sparse_torch.py's FTRL and row-wise adagrad
against testdata/optim/numpy_optim.py's independent implementations, on
sparse gradients with repeated rows.
"""
import copy
import os
import sys

import numpy as np
import torch
import yaml

sys.dont_write_bytecode = True  # no __pycache__ beside the test data
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "testdata", "optim"))
import zoo_sparse_torch as zoo  # noqa: E402
from numpy_optim import Ftrl, RowwiseAdagrad  # noqa: E402

STEPS, BATCH, ROWS_TABLE, DIM = 50, 32, 512, 4
# Each model's example widths and the small ones.
WIDTHS = {
    "wide-deep": {16: 4, 429: 117, 416: 104, 256: 16, 128: 8},
    "multi-hot": {16: 4, 64: 8, 394: 382, 256: 16, 128: 8},
    "two-tower": {16: 4, 112: 28, 141: 45, 128: 16, 64: 8, 32: 8},
}


def small(model):
    """The example at a small size."""
    m = copy.deepcopy(model)
    w = WIDTHS[m["name"]]
    d = m["data"]
    d["csv"] = "zoo.tsv"
    del d["eval"]
    for s in zoo.specs(d.get("ids")):
        s["hash_buckets"] = ROWS_TABLE
        if "max_len" in s:
            s["max_len"] = 4
    for decl in m["params"].values():
        decl["shape"] = [ROWS_TABLE if x == 1_000_000 else w.get(x, x) for x in decl["shape"]]
    for op in m["ops"]:
        a = op.get("attrs", {})
        if op["type"] == "reshape":
            a["shape"] = [w.get(x, x) for x in a["shape"]]
        if op["type"] == "hash_cross":
            a["buckets"] = ROWS_TABLE
    m["train"]["batch"], m["train"]["steps"] = BATCH, STEPS
    return m


def check_optimizers():
    rng = np.random.default_rng(5)
    for make_t, make_n in [
        (lambda p: zoo.Ftrl(p, lr=0.3, l1=0.01, l2=0.02, beta=0.1), lambda s: Ftrl(s, lr=0.3, l1=0.01, l2=0.02, beta=0.1)),
        (lambda p: zoo.RowwiseAdagrad(p, lr=0.2), lambda s: RowwiseAdagrad(s, lr=0.2)),
    ]:
        w0 = rng.normal(size=(10, 3)).astype(np.float32)
        p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
        wt, wn = make_t(p), make_n(w0.shape)
        w = w0.copy()
        for _ in range(20):
            rows = rng.integers(0, 10, size=8)  # repeats: coalesced by torch, summed here
            vals = rng.normal(size=(8, 3)).astype(np.float32)
            p.grad = torch.sparse_coo_tensor(torch.from_numpy(rows)[None], torch.from_numpy(vals), (10, 3))
            wt.step()
            uniq = np.unique(rows)
            g = np.stack([vals[rows == r].sum(axis=0) for r in uniq])
            wn.apply(w, g, uniq)
        d = np.abs(p.detach().numpy() - w).max() / np.abs(w).max()
        assert d < 1e-5, (type(wt).__name__, d)


def train(model, init, data, trainers):
    tr = zoo.Trainer(model, init)
    tr.net.prepare(data)
    for k in range(STEPS):
        tr.step(data, k, BATCH // trainers, trainers)
    return tr


@torch.no_grad()
def evaluate_two_tower(tr, data):
    """The loss and recall@10 of the whole file as one chunk."""
    rows = np.arange(data.n)
    loss = float(tr.net.loss(tr.net.batch(data, rows), data, rows))
    return {"eval_loss": repr(loss), "eval_recall10": repr(zoo.evaluate(tr, data, 10)["recall10"])}


def rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)


def main():
    torch.set_num_threads(1)
    check_optimizers()
    for seed, name in enumerate(["wide-deep", "multi-hot", "two-tower"], start=11):
        model = small(zoo.load_model(os.path.join(ROOT, "examples", name + ".yaml")))
        with open(os.path.join(HERE, name + ".yaml"), "w") as f:
            f.write(f"# examples/{name}.yaml at a small size, written by testdata/zoo-sparse/gen_reference.py\n")
            yaml.safe_dump(model, f, sort_keys=False, default_flow_style=None, width=200)
        init = zoo.init_params(model, seed)
        zoo.write_safetensors(os.path.join(HERE, name + "-init.safetensors"), init)
        data = zoo.Data(model, os.path.join(HERE, "zoo.tsv"))
        tr = train(model, init, data, 1)
        local, halves = tr.params(), train(model, init, data, 2).params()
        meta = evaluate_two_tower(tr, data) if name == "two-tower" else None
        zoo.write_safetensors(os.path.join(HERE, name + "-local.safetensors"), local, meta)
        zoo.write_safetensors(os.path.join(HERE, name + "-2x2.safetensors"), halves)
        apart = max(rel(halves[p], local[p]) for p in local)
        moved = min(rel(init[p], local[p]) for p in local)
        print(f"{name}: halves against local {apart:.2e}, least moved param {moved:.2e}", meta or "")
        if name == "two-tower":
            assert apart > 1e-2, "the halves' in-batch negatives should train another model"
        else:
            assert apart < 1e-5, "for a CTR model the halves are the whole batch"
        assert moved > 1e-2


if __name__ == "__main__":
    main()
