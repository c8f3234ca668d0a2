#!/usr/bin/env python3
"""The PyTorch side of psgraph's zoo models wide-deep, two-tower and
multi-hot (examples/*.yaml): the same model, data and optimizers written in
torch, for the benchmarks of bench/history-2026-12.md and the references of
exec/job's TestWideDeepMatchesTorch, TestMultiHotMatchesTorch and
TestTwoTowerMatchesTorch (testdata/zoo-sparse/gen_reference.py).

    /usr/bin/python3 bench/zoo_sparse_torch.py init MODEL.yaml OUT.safetensors [--seed S]
    /usr/bin/python3 bench/zoo_sparse_torch.py bench MODEL.yaml --init INIT.safetensors
        [--data TRAIN.tsv] [--eval EVAL.tsv] [--steps N] [--threads T] [--predict OUT.txt]
        [--no-eval]
    /usr/bin/python3 bench/zoo_sparse_torch.py auc PREDICTIONS.csv DATA.tsv
    /usr/bin/python3 bench/zoo_sparse_torch.py popularity MODEL.yaml [--cache F]

The model file gives the sizes, columns, batch and optimizers (read with
PyYAML); the forward pass of each model is written here by hand, by the
model's name. `auc` prints the AUC of
the last column of a prediction file (psgraph predict's, after its header
line) against the labels, column 0, of a data file: the AUC the `bench`
command computes for torch. `popularity` prints the held-out recall@k of a two-tower model's
data scored by item popularity alone: each item's count among the
training rows' items, ranked as `bench` ranks the model's scores. `init` writes initial parameters (numpy, seeded), which
psgraph reads with --init-from, so both sides start from the same values.
`bench` trains on the data file by psgraph's data stream rule (batch k =
rows [kB, (k+1)B), wrapping; no shuffle) for --steps steps (default: one
pass), times the steps after 20 warm-up steps, then scores the held-out
file: the AUC over its rows of a CTR model's logit, or a two-tower model's
recall@k over chunks of 1024 rows in file order (each row's item ranked
against the items of its chunk, as psgraph's evaluation in chunks does).
It prints one JSON line. PyTorch at its best on this machine: run it with
OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset,
on 1 and on 2 threads (bench/history-2026-12.md).

The data is read as psgraph reads it (docs/dsl.md): missing counts are 0,
counts v > 0 become ln(1+v), then each column is standardized with the
mean and (population) standard deviation of the training rows; ids are
hashed with psgraph's documented hashes (a space per column, or the shared
space) and crosses with hash_cross's. Everything is read and hashed before
the timed steps; psgraph parses the file as it trains.

Optimizers: torch.optim.Adagrad, Adam and SparseAdam where torch has them
(a table's gradient is sparse: nn.functional.embedding(sparse=True)), and
FTRL-proximal (TensorFlow's sparse form) and row-wise adagrad (FBGEMM's)
written below in torch, on the rows of the coalesced sparse gradient.
"""
import argparse
import json
import math
import os
import pickle
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import yaml

# ---------------------------------------------------------------- files


def write_safetensors(path, tensors, meta=None):
    header, offset, blobs = ({"__metadata__": meta} if meta else {}), 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            b.tofile(f)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        lo, hi = d["data_offsets"]
        dt = {"F32": "<f4", "I32": "<i4"}[d["dtype"]]
        out[name] = np.frombuffer(body[lo:hi], dtype=dt).reshape(d["shape"]).copy()
    return out


# ---------------------------------------------------------------- hashes (docs/dsl.md)

M64 = (1 << 64) - 1
FNV_OFFSET, FNV_PRIME = 14695981039346656037, 1099511628211
GAMMA = 0x9E3779B97F4A7C15


def fnv(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & M64
    return h


def finalize(h):
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def hash_id(field, buckets, col=None):
    """The hash_buckets id (docs/dsl.md): a column's space or, with col None, shared_space."""
    h = FNV_OFFSET if col is None else fnv(FNV_OFFSET, struct.pack("<I", col))
    return (finalize(fnv(h, field.encode())) * buckets) >> 64


def hash_strings(strings, buckets, col=None):
    """hash_id of each string of an array, hashing each distinct one once."""
    uniq, inv = np.unique(np.asarray(strings, dtype=object).astype(str), return_inverse=True)
    ids = np.array([hash_id(s, buckets, col) for s in uniq], dtype=np.int64)
    return ids[inv]


def _mix(z):
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash_cross(cols, buckets, salt=0):
    """hash_cross (docs/dsl.md) of each row of the int arrays cols, in
    numpy uint64: h = mix(salt + GAMMA), h = mix(h + GAMMA + v) per value,
    id = the high 64 bits of h * buckets."""
    with np.errstate(over="ignore"):
        h = _mix(np.full(len(cols[0]), (salt + GAMMA) & M64, dtype=np.uint64))
        for c in cols:
            h = _mix(h + np.uint64(GAMMA) + c.astype(np.int64).astype(np.uint64))
        lo, hi = h & np.uint64(0xFFFFFFFF), h >> np.uint64(32)
        b = np.uint64(buckets)
        out = (hi * b + ((lo * b) >> np.uint64(32))) >> np.uint64(32)
    return out.astype(np.int64)


def cross_id(values, buckets, salt=0):
    """hash_cross of one row in Python integers, to check hash_cross."""
    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)
    h = mix((salt + GAMMA) & M64)
    for v in values:
        h = mix((h + GAMMA + (v & M64)) & M64)
    return (h * buckets) >> 64


# ---------------------------------------------------------------- model files and data


def specs(x):
    return [] if x is None else x if isinstance(x, list) else [x]


def cols_of(s):
    if "column" in s:
        return s["column"], s["column"] + 1
    return s["columns"][0], s["columns"][1]


class Data:
    """A data file read by a model's data specs: dense features (float32,
    standardized with stats, the training rows' unless given), the label,
    and per ids spec an int64 [rows, width] array (-1 padding)."""

    def __init__(self, model, path, stats=None):
        d = model["data"]
        delim = {"tab": "\t", "comma": ","}.get(d.get("delimiter", ","), d.get("delimiter", ","))
        with open(path) as f:
            rows = [line.rstrip("\n").split(delim) for line in f if line.strip()]
        self.n = len(rows)
        colsT = list(zip(*rows))
        self.features = {}
        for s in specs(d.get("features")):
            lo, hi = cols_of(s)
            a = np.zeros((self.n, hi - lo), dtype=np.float32)
            for j in range(lo, hi):
                v = np.array([float(x) if x.strip() != "" else float(s.get("fill", 0)) for x in colsT[j]])
                if s.get("transform") == "log":
                    v = np.where(v > 0, np.log1p(np.maximum(v, 0)), v)
                a[:, j - lo] = v.astype(np.float32)
            self.features[s["name"]] = a
        if d.get("normalize", "none") == "standard":
            if stats is None:
                stats = {}
                for name, a in self.features.items():
                    x = a.astype(np.float64)
                    mean = x.mean(axis=0)
                    std = np.sqrt(np.maximum((x * x).mean(axis=0) - mean * mean, 0))
                    stats[name] = (mean, np.where(std < 1e-12, 1.0, std))
            for name, (mean, std) in stats.items():
                self.features[name] = ((self.features[name].astype(np.float64) - mean) / std).astype(np.float32)
        self.stats = stats
        self.label = None
        if d.get("label"):
            lo, hi = cols_of(d["label"])
            self.label = np.array([[float(x) for x in r[lo:hi]] for r in rows], dtype=np.float32)
            self.label_name = d["label"]["name"]
        self.ids = {}
        for s in specs(d.get("ids")):
            lo, hi = cols_of(s)
            n = s.get("hash_buckets")
            shared = s.get("shared_space", False)
            if "separator" in s:
                L = s["max_len"]
                a = np.full((self.n, L), -1, dtype=np.int64)
                pieces = [[p.strip() for p in x.split(s["separator"]) if p.strip()][:L] for x in colsT[lo]]
                flat = [p for ps in pieces for p in ps]
                hashed = hash_strings(flat, n, None if shared else lo) if flat else []
                k = 0
                for r, ps in enumerate(pieces):
                    a[r, :len(ps)] = hashed[k:k + len(ps)]
                    k += len(ps)
            else:
                a = np.zeros((self.n, hi - lo), dtype=np.int64)
                for j in range(lo, hi):
                    a[:, j - lo] = hash_strings(colsT[j], n, None if shared else j)
            self.ids[s["name"]] = a

    def rows(self, start, count):
        return np.arange(start, start + count) % self.n


def bag_input(ids):
    """A padded [B, L] id array as embedding_bag's flat ids and offsets."""
    mask = ids >= 0
    counts = mask.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return torch.from_numpy(ids[mask]), torch.from_numpy(offsets)


# ---------------------------------------------------------------- optimizers


class Ftrl:
    """FTRL-proximal as TensorFlow's SparseApplyFtrlV2 (l2_shrinkage 0) and
    psgraph's ftrl: on the rows of the gradient,
        n' = n + g²;  z += g - (n'^-p - n^-p) / lr * w
        w = (sign(z) l1 - z) / ((n'^-p + beta) / lr + 2 l2) where |z| > l1, else 0."""

    def __init__(self, param, lr, lr_power=-0.5, initial_accumulator_value=0.1, l1=0.0, l2=0.0, beta=0.0):
        self.p, self.lr, self.power, self.l1, self.l2, self.beta = param, lr, -lr_power, l1, l2, beta
        self.n = torch.full_like(param, initial_accumulator_value)
        self.z = torch.zeros_like(param)

    @torch.no_grad()
    def step(self):
        g = self.p.grad
        if g.is_sparse:
            g = g.coalesce()
            rows, g = g.indices()[0], g.values()
        else:
            rows = None
        sel = (lambda t: t.index_select(0, rows)) if rows is not None else (lambda t: t)
        w, n, z = sel(self.p.data), sel(self.n), sel(self.z)
        n_new = n + g * g
        pn = n_new.pow(self.power)
        z = z + g - (pn - n.pow(self.power)) / self.lr * w
        w = torch.where(z.abs() > self.l1, (torch.sign(z) * self.l1 - z) / ((pn + self.beta) / self.lr + 2 * self.l2), torch.zeros_like(z))
        if rows is None:
            self.p.data.copy_(w), self.n.copy_(n_new), self.z.copy_(z)
        else:
            self.p.data.index_copy_(0, rows, w), self.n.index_copy_(0, rows, n_new), self.z.index_copy_(0, rows, z)

    def zero_grad(self):
        self.p.grad = None


class RowwiseAdagrad:
    """Row-wise adagrad as FBGEMM's EXACT_ROWWISE_ADAGRAD and psgraph's
    rowwise_adagrad, on the rows of the (sparse) gradient:
        s[r] += mean(g[r]²);  w[r] -= lr * g[r] / (sqrt(s[r]) + eps)."""

    def __init__(self, param, lr, eps=1e-8):
        self.p, self.lr, self.eps = param, lr, eps
        self.s = torch.zeros(param.shape[0], 1)

    @torch.no_grad()
    def step(self):
        g = self.p.grad.coalesce()
        rows, g = g.indices()[0], g.values()
        s = self.s.index_select(0, rows) + (g * g).mean(dim=1, keepdim=True)
        self.s.index_copy_(0, rows, s)
        self.p.data.index_add_(0, rows, -self.lr * g / (s.sqrt() + self.eps))

    def zero_grad(self):
        self.p.grad = None


TABLE_OPS = {"lookup_table", "embedding_bag"}


def optimizers(model, params):
    """One optimizer per group, by each param's own optimizer or
    train.optimizer; tables (params read by lookups) get the sparse form."""
    tables = {op["inputs"][0] for op in model["ops"] if op["type"] in TABLE_OPS}
    groups = {}
    for name, decl in model["params"].items():
        o = decl.get("optimizer", model["train"]["optimizer"])
        key = json.dumps(o, sort_keys=True), name in tables
        groups.setdefault(key, []).append(name)
    out = []
    for (o, table), names in groups.items():
        o = json.loads(o)
        kind, hyper = o["type"], {k: v for k, v in o.items() if k != "type"}
        ps = [params[n] for n in names]
        if kind == "adagrad":
            out.append(torch.optim.Adagrad(ps, lr=hyper.get("lr", 0.01), eps=hyper.get("eps", 1e-10)))
        elif kind == "adam":
            betas = (hyper.get("beta1", 0.9), hyper.get("beta2", 0.999))
            cls = torch.optim.SparseAdam if table else torch.optim.Adam
            out.append(cls(ps, lr=hyper.get("lr", 0.001), betas=betas, eps=hyper.get("eps", 1e-8)))
        elif kind == "ftrl":
            out.extend(Ftrl(p, **hyper) for p in ps)
        elif kind == "rowwise_adagrad":
            out.extend(RowwiseAdagrad(p, **hyper) for p in ps)
        elif kind == "sgd":
            out.append(torch.optim.SGD(ps, lr=hyper.get("lr", 0.001)))
        else:
            raise SystemExit(f"zoo_sparse_torch: optimizer {kind} is not written here")
    return out


# ---------------------------------------------------------------- models


def mlp(x, P, layers, last_linear=True):
    for i, (w, b) in enumerate(layers):
        x = torch.addmm(P[b], x, P[w])
        if i < len(layers) - 1 or not last_linear:
            x = torch.relu(x)
    return x


class WideDeep:
    """examples/wide-deep.yaml: logit = deep + wide over the raw ids + wide
    over the crosses of every pair of C1..C8."""

    pairs = [(i, j) for i in range(8) for j in range(i + 1, 8)]

    def __init__(self, model, P):
        self.P = P
        self.cross_buckets = next(op["attrs"]["buckets"] for op in model["ops"] if op["type"] == "hash_cross")

    def prepare(self, data):
        cat = data.ids["cat"]
        data.crosses = np.stack([hash_cross([cat[:, i], cat[:, j]], self.cross_buckets) for i, j in self.pairs], axis=1)

    def batch(self, data, rows):
        return {"cat": torch.from_numpy(data.ids["cat"][rows]), "xs": torch.from_numpy(data.crosses[rows]),
                "dense": torch.from_numpy(data.features["dense"][rows])}

    def forward(self, b):
        P = self.P
        n = b["cat"].shape[0]
        wide = F.embedding(b["cat"], P["wide"], sparse=True).reshape(n, -1).sum(1, keepdim=True)
        cross = F.embedding(b["xs"], P["cross"], sparse=True).reshape(n, -1).sum(1, keepdim=True)
        e = F.embedding(b["cat"], P["emb"], sparse=True).reshape(n, -1)
        h = torch.cat([e, b["dense"]], dim=1)
        deep = mlp(h, P, [("W0", "b0"), ("W1", "b1"), ("W2", "b2")])
        return deep + wide + cross


class MultiHot:
    """examples/multi-hot.yaml: DLRM's dot interaction over the bottom MLP's
    output, C1's embedding, the mean of the history's embeddings (C1's
    table: one item, one row) and the embeddings of C2..C26."""

    def __init__(self, model, P):
        self.P = P
        F_ = 28
        self.li = torch.tensor([i for i in range(F_) for j in range(i)])
        self.lj = torch.tensor([j for i in range(F_) for j in range(i)])

    def prepare(self, data):
        pass

    def batch(self, data, rows):
        flat, offsets = bag_input(data.ids["hist"][rows])
        return {"item": torch.from_numpy(data.ids["item"][rows]), "cat": torch.from_numpy(data.ids["cat"][rows]),
                "hist": flat, "offsets": offsets, "dense": torch.from_numpy(data.features["dense"][rows])}

    def forward(self, b):
        P = self.P
        n = b["cat"].shape[0]
        d = mlp(b["dense"], P, [("Wb0", "bb0"), ("Wb1", "bb1")], last_linear=False)
        item = F.embedding(b["item"], P["items"], sparse=True)  # [n, 1, D]
        hist = F.embedding_bag(b["hist"], P["items"], b["offsets"], mode="mean", sparse=True)
        cat = F.embedding(b["cat"], P["emb"], sparse=True)
        T = torch.cat([d[:, None], item, hist[:, None], cat], dim=1)
        Z = torch.bmm(T, T.transpose(1, 2))[:, self.li, self.lj]
        return mlp(torch.cat([d, Z], dim=1), P, [("Wt0", "bt0"), ("Wt1", "bt1"), ("Wt2", "bt2")])


class TwoTower:
    """examples/two-tower.yaml: scores = U Iᵀ over the batch, the user
    tower over the history (mean of C1's table), the context C2..C8 and the
    counts; the item tower over C1's embedding."""

    def __init__(self, model, P):
        self.P = P

    def prepare(self, data):
        pass

    def batch(self, data, rows):
        flat, offsets = bag_input(data.ids["hist"][rows])
        return {"item": torch.from_numpy(data.ids["item"][rows]), "ctx": torch.from_numpy(data.ids["ctx"][rows]),
                "hist": flat, "offsets": offsets, "dense": torch.from_numpy(data.features["dense"][rows])}

    def towers(self, b):
        P = self.P
        n = b["ctx"].shape[0]
        hist = F.embedding_bag(b["hist"], P["items"], b["offsets"], mode="mean", sparse=True)
        ctx = F.embedding(b["ctx"], P["ctx_emb"], sparse=True).reshape(n, -1)
        u = mlp(torch.cat([hist, ctx, b["dense"]], dim=1), P, [("U0", "ub0"), ("U1", "ub1")])
        item = F.embedding(b["item"], P["items"], sparse=True).reshape(n, -1)
        v = torch.relu(torch.addmm(P["ib0"], item, P["I0"])) @ P["I1"]
        return u, v

    def forward(self, b):
        u, v = self.towers(b)
        return u @ v.t()

    def loss(self, b, data, rows):
        """In-batch negatives, row i's positive column i; an item in c
        columns has log c taken off its scores (each item counts once)."""
        scores = self.forward(b)
        item = b["item"].reshape(-1)
        count = (item[:, None] == item[None, :]).float().sum(dim=0, keepdim=True)
        return F.cross_entropy(scores - count.log(), torch.arange(scores.shape[0]))


def ctr_loss(net, b, data, rows):
    return F.binary_cross_entropy_with_logits(net.forward(b), torch.from_numpy(data.label[rows]))


WideDeep.loss = MultiHot.loss = lambda self, b, data, rows: ctr_loss(self, b, data, rows)
MODELS = {"wide-deep": WideDeep, "multi-hot": MultiHot, "two-tower": TwoTower}


# ---------------------------------------------------------------- init, training, evaluation


def init_params(model, seed):
    """Initial values by each param's init (the distribution, not psgraph's
    draws): normal, he_normal, xavier_uniform, zeros, constant."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, decl in model["params"].items():
        shape = decl["shape"]
        init = decl.get("init", {"type": "zeros"})
        init = {"type": init} if isinstance(init, str) else init
        fan_in = shape[0] * int(np.prod(shape[2:])) if len(shape) >= 2 else shape[0] if shape else 1
        fan_out = shape[1] * int(np.prod(shape[2:])) if len(shape) >= 2 else fan_in
        t = init["type"]
        if t == "zeros":
            a = np.zeros(shape)
        elif t == "constant":
            a = np.full(shape, init["value"])
        elif t == "normal":
            a = rng.normal(init.get("mean", 0), init.get("std", 0.01), size=shape)
        elif t == "he_normal":
            a = rng.normal(0, math.sqrt(2 / fan_in), size=shape)
        elif t == "xavier_uniform":
            r = math.sqrt(6 / (fan_in + fan_out))
            a = rng.uniform(-r, r, size=shape)
        elif t == "uniform":
            a = rng.uniform(init.get("min", -0.05), init.get("max", 0.05), size=shape)
        else:
            raise SystemExit(f"zoo_sparse_torch: init {t} is not written here")
        out[name] = a.astype(np.float32)
    return out


class Trainer:
    def __init__(self, model, init):
        self.model, self.name = model, model["name"]
        self.P = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in init.items()}
        self.net = MODELS[self.name](model, self.P)
        self.opts = optimizers(model, self.P)

    def step(self, data, k, batch, trainers=1):
        """Step k: trainers trainers each take batch rows of the global batch
        (trainer t rows [k*N*b + t*b, ...)), each computes its own loss, and
        the gradients are averaged, as a sync job (and DDP) does; with one
        trainer, local training."""
        for o in self.opts:
            o.zero_grad()
        total = 0.0
        for t in range(trainers):
            rows = data.rows((k * trainers + t) * batch, batch)
            loss = self.net.loss(self.net.batch(data, rows), data, rows)
            (loss / trainers).backward()
            total += float(loss) / trainers
        for o in self.opts:
            o.step()
        return total

    def params(self):
        return {k: v.detach().numpy().copy() for k, v in self.P.items()}


@torch.no_grad()
def evaluate(tr, data, k=10, chunk=1024):
    """A CTR model's logits over the file and their AUC; a two-tower
    model's recall@k over chunks of the file: a row is a hit when fewer
    than k distinct other items of its chunk score at least as high as
    its own item."""
    if tr.name == "two-tower":
        hits = 0
        for lo in range(0, data.n, chunk):
            rows = np.arange(lo, min(lo + chunk, data.n))
            b = tr.net.batch(data, rows)
            s, item = tr.net.forward(b), b["item"].reshape(-1)
            for r in range(len(rows)):
                above = (s[r] >= s[r, r]) & (item != item[r])
                hits += int(torch.unique(item[above]).numel() < k)
        return {f"recall{k}": hits / data.n}
    logits = np.concatenate([tr.net.forward(tr.net.batch(data, np.arange(lo, min(lo + 8192, data.n)))).numpy()[:, 0]
                             for lo in range(0, data.n, 8192)])
    return {"auc": auc(logits, data.label[:, 0]), "logits": logits}


def auc(scores, labels):
    """The Mann-Whitney AUC, ties counting 1/2."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        ranks[i:j] = (i + j + 1) / 2
        i = j
    pos = y == 1
    p, n = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - p * (p + 1) / 2) / (p * n))


def load_model(path):
    with open(path) as f:
        return yaml.safe_load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["init", "bench", "auc", "popularity"])
    ap.add_argument("model")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init")
    ap.add_argument("--data")
    ap.add_argument("--eval")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--predict")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--cache", help="keep the read and hashed data in this file (pickle) and read it from there when it exists")
    a = ap.parse_args()
    if a.cmd == "auc":
        with open(a.model) as f:
            next(f)
            scores = np.array([float(line.rsplit(",", 1)[-1]) for line in f])
        with open(a.out) as f:
            labels = np.array([float(line.split("\t", 1)[0]) for line in f if line.strip()])
        print(json.dumps({"rows": len(labels), "auc": round(auc(scores, labels), 6)}))
        return
    model = load_model(a.model)
    if a.cmd == "init":
        write_safetensors(a.out, init_params(model, a.seed))
        return
    if a.cmd == "popularity":
        here = os.path.dirname(os.path.abspath(a.model))
        if a.cache and os.path.exists(a.cache):
            with open(a.cache, "rb") as f:
                data, held = pickle.load(f)
        else:
            data = Data(model, os.path.join(here, model["data"]["csv"]))
            held = Data(model, os.path.join(here, model["data"]["eval"]["csv"]), stats=data.stats)
        ids, counts = np.unique(data.ids["item"][:, 0], return_counts=True)
        freq = dict(zip(ids.tolist(), counts.tolist()))
        item = torch.from_numpy(held.ids["item"][:, 0])
        score = torch.tensor([float(freq.get(i, 0)) for i in item.tolist()])
        hits = 0
        for lo in range(0, held.n, 1024):
            it, sc = item[lo:lo + 1024], score[lo:lo + 1024]
            for r in range(len(it)):
                above = (sc >= sc[r]) & (it != it[r])
                hits += int(torch.unique(it[above]).numel() < a.k)
        print(json.dumps({"rows": held.n, f"recall{a.k}": round(hits / held.n, 6)}))
        return
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    here = os.path.dirname(os.path.abspath(a.model))
    train_path = a.data or os.path.join(here, model["data"]["csv"])
    eval_path = a.eval or os.path.join(here, model["data"]["eval"]["csv"])
    t0 = time.perf_counter()
    tr = Trainer(model, read_safetensors(a.init))
    if a.cache and os.path.exists(a.cache):
        with open(a.cache, "rb") as f:
            data, held = pickle.load(f)
    else:
        data = Data(model, train_path)
        held = Data(model, eval_path, stats=data.stats)
        tr.net.prepare(data)
        tr.net.prepare(held)
        if a.cache:
            with open(a.cache, "wb") as f:
                pickle.dump((data, held), f)
    prep = time.perf_counter() - t0
    batch = model["train"]["batch"]
    steps = a.steps or -(-data.n // batch)
    warm = min(20, steps // 4)
    for k in range(warm):
        tr.step(data, k, batch)
    t0 = time.perf_counter()
    for k in range(warm, steps):
        loss = tr.step(data, k, batch)
    dt = time.perf_counter() - t0
    res = {} if a.no_eval else evaluate(tr, held, a.k)
    if a.predict and "logits" in res:
        np.savetxt(a.predict, res["logits"], fmt="%.7g")
    res.pop("logits", None)
    print(json.dumps({"role": "torch", "model": tr.name, "threads": a.threads, "steps": steps, "seconds": round(dt, 3),
                      "steps_per_s": round((steps - warm) / dt, 1), "loss": loss, "prep_seconds": round(prep, 1),
                      "eval_rows": held.n, **{k: round(v, 6) for k, v in res.items()}}))


if __name__ == "__main__":
    sys.exit(main())
