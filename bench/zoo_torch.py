#!/usr/bin/env python3
"""The PyTorch side of psgraph's model zoo (bench/history-2026-12.md, "The model zoo").

    /usr/bin/python3 bench/zoo_torch.py speed MODEL TRAIN.tsv [--steps N] [--threads T] [--rows R] [--cache]
    /usr/bin/python3 bench/zoo_torch.py auc MODEL TRAIN.tsv EVAL.tsv [--threads T] [--pred-in F] [--cache]
    /usr/bin/python3 bench/zoo_torch.py init MODEL INIT.safetensors

MODEL is dlrm, dcn-v2 or deepfm: examples/<MODEL>.yaml written in PyTorch
1.13 eager, op for op, with the parameters named as in the YAML file (a
matrix W [in, out] used as x @ W + b). The tables take torch's sparse path
(F.embedding(sparse=True)) and torch.optim's sparse updates (SGD for DLRM,
Adagrad for DCN-v2 and DeepFM), or with --fused one table of the 26
tables' rows per kind of table (the same values and updates, fewer ops;
the speed of PyTorch at its best is the better layout). The interaction
of DLRM is facebookresearch/dlrm's: bmm(T, Tᵀ) and the strict lower
triangle, gathered from the flattened product with one index_select (the
faster of DLRM's two forms, bench/dot_interaction_torch.py).

The data is read as psgraph reads it (docs/dsl.md): label, 13 integer
columns (empty 0, ln(1+v) for v > 0, standardized with the training rows'
mean and population std), 26 categorical columns each hashed into its own
space of hash_buckets ids (docs/dsl.md: FNV-1a 64 over the column's 4
bytes and the field, murmur3's finalizer, the high 64 bits of h * N).
Batch k is rows [kB, (k+1)B) of the file, wrapping (psgraph's data stream
rule).

speed: steps/s of N training steps after 20 warm-up steps, on T threads
(run it with OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE
unset: PyTorch at its best on this machine). One JSON line.

auc: one pass over TRAIN (ceil(rows / 128) steps, as psgraph's epochs: 1),
then the held-out AUC (ties 1/2) and log loss over EVAL, and the mean of
1024-row chunks' AUCs (what psgraph's streamed eval_auc reports). It
starts from the parameters `init` writes (drawn as the YAML file's
initializers draw them, from torch's generator with seed 1), which
`psgraph run --init-from` reads, so both train from one start; with
--pred-in (psgraph predict's CSV of EVAL) it also reports that file's AUC.

testdata/zoo/gen_reference.py imports the models and data reader from here.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

FIELDS, DENSE, BATCH = 26, 13, 128
MASK = (1 << 64) - 1


# ---- data, as psgraph reads it ----

def column_hash(col):
    h = 14695981039346656037
    for b in struct.pack("<I", col):
        h = ((h ^ b) * 1099511628211) & MASK
    return h


def hash_id(col, field, buckets):
    """The hash_buckets id of a field of column col (docs/dsl.md, exec/data/hash.go)."""
    h = column_hash(col)
    for b in field:
        h = ((h ^ b) * 1099511628211) & MASK
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    h ^= h >> 33
    return (h * buckets) >> 64


def read_criteo(path, buckets, limit=0):
    """label float32 [N, 1], dense float32 [N, 13] (log-transformed, not
    standardized), ids int64 [N, 26]: the file's first `limit` rows (0:
    all)."""
    label, dense, ids = [], [], []
    cache = [dict() for _ in range(FIELDS)]
    with open(path, "rb") as f:
        for line in f:
            if limit and len(label) == limit:
                break
            fs = line.rstrip(b"\n").split(b"\t")
            label.append(float(fs[0]))
            dense.append([float(v) if v.strip() else 0.0 for v in fs[1:1 + DENSE]])
            row = []
            for i in range(FIELDS):
                v = fs[1 + DENSE + i].strip()
                c = cache[i]
                if v not in c:
                    c[v] = hash_id(1 + DENSE + i, v, buckets)
                row.append(c[v])
            ids.append(row)
    d = np.array(dense, dtype=np.float32).astype(np.float64)
    d = np.where(d > 0, np.log1p(np.maximum(d, 0)), d).astype(np.float32)
    return (np.array(label, dtype=np.float32).reshape(-1, 1), d, np.array(ids, dtype=np.int64))


def read_cached(path, buckets, limit=0, cache=False):
    """read_criteo, kept with cache in PATH.b<buckets>.r<limit>.npz beside
    the file and read from there when present (a bench reads one file
    for several models)."""
    if not cache:
        return read_criteo(path, buckets, limit)
    c = f"{path}.b{buckets}.r{limit}.npz"
    if os.path.exists(c):
        z = np.load(c)
        return z["label"], z["dense"], z["ids"]
    label, dense, ids = read_criteo(path, buckets, limit)
    np.savez(c, label=label, dense=dense, ids=ids)
    return label, dense, ids


def scaling(dense):
    """psgraph's normalize: standard: the mean and population std in float64."""
    x = dense.astype(np.float64)
    n = len(x)
    mean = x.sum(0) / n
    std = np.sqrt(np.maximum((x * x).sum(0) / n - mean * mean, 0))
    std[std < 1e-12] = 1
    return mean, std


def standardize(dense, sc):
    return ((dense.astype(np.float64) - sc[0]) / sc[1]).astype(np.float32)


# ---- models: parameters named as in examples/<model>.yaml ----

def shapes(model, buckets):
    s = {}
    if model == "dlrm":
        for i in range(FIELDS):
            s[f"emb{i}"] = [buckets, 16]
        dims = [13, 512, 256, 64, 16]
        for k in range(4):
            s[f"Wb{k}"], s[f"bb{k}"] = [dims[k], dims[k + 1]], [dims[k + 1]]
        dims = [367, 512, 256, 1]
        for k in range(3):
            s[f"Wt{k}"], s[f"bt{k}"] = [dims[k], dims[k + 1]], [dims[k + 1]]
    elif model == "dcn-v2":
        for i in range(FIELDS):
            s[f"emb{i}"] = [buckets, 8]
        for k in range(3):
            s[f"Wc{k}"], s[f"bc{k}"] = [221, 221], [221]
        s.update(Wd0=[221, 256], bd0=[256], Wd1=[256, 128], bd1=[128], Wo=[128, 1], bo=[1])
    elif model == "deepfm":
        for i in range(FIELDS):
            s[f"emb{i}"] = [buckets, 8]
        for i in range(FIELDS):
            s[f"w{i}"] = [buckets, 1]
        s.update(Wl=[13, 1], bl=[1], Wd0=[221, 256], bd0=[256], Wd1=[256, 128], bd1=[128], Wo=[128, 1], bo=[1])
    else:
        raise SystemExit(f"unknown model {model!r}: dlrm, dcn-v2 or deepfm")
    return s


def example_init(model, buckets, seed=1):
    """Initial parameters drawn as examples/<model>.yaml's initializers
    draw them (the same distributions, torch's generator)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes(model, buckets).items():
        t = torch.zeros(shape)
        if name.startswith("emb"):
            t.uniform_(-0.05, 0.05, generator=g)
        elif len(shape) == 2 and not is_table(name):
            fan_in, fan_out = shape
            if shape[1] == 1 or name.startswith("Wc"):  # xavier_uniform
                a = math.sqrt(6 / (fan_in + fan_out))
                t.uniform_(-a, a, generator=g)
            elif name != "Wl":  # he_normal
                t.normal_(0, math.sqrt(2 / fan_in), generator=g)
        out[name] = t
    return out


def make_embed(P, prefix, fused):
    """The lookup of the 26 fields' rows of tables <prefix>0..25, [B, 26, D]:
    26 lookups of their own tables, or (fused) one lookup in their rows
    stacked into one table, each field's ids offset by its first row."""
    if fused:
        table = P[prefix]
        off = torch.arange(FIELDS) * (len(table) // FIELDS)
        return lambda ids: F.embedding(ids + off, table, sparse=True)
    ts = [P[f"{prefix}{i}"] for i in range(FIELDS)]
    return lambda ids: torch.stack([F.embedding(ids[:, i], ts[i], sparse=True) for i in range(FIELDS)], 1)


def make_forward(model, P, fused=False):
    """The model's forward. P holds every matrix W [in, out] of the YAML
    file as torch.nn.Linear does, transposed ([out, in], F.linear)."""
    relu = torch.relu

    def linear(x, w, b):
        return F.linear(x, P[w], P[b])
    emb = make_embed(P, "emb", fused)
    if model == "dlrm":
        li = torch.tensor([i for i in range(FIELDS + 1) for j in range(i)])
        lj = torch.tensor([j for i in range(FIELDS + 1) for j in range(i)])
        flat = li * (FIELDS + 1) + lj

        def forward(dense, ids):
            x = dense
            for k in range(4):
                x = relu(linear(x, f"Wb{k}", f"bb{k}"))
            t = torch.cat([x.unsqueeze(1), emb(ids)], 1)
            z = torch.bmm(t, t.transpose(1, 2)).view(len(x), -1).index_select(1, flat)
            h = torch.cat([x, z], 1)
            h = relu(linear(h, "Wt0", "bt0"))
            h = relu(linear(h, "Wt1", "bt1"))
            return linear(h, "Wt2", "bt2")
    elif model == "dcn-v2":
        def forward(dense, ids):
            x0 = torch.cat([dense, emb(ids).flatten(1)], 1)
            x = x0
            for k in range(3):
                x = x0 * linear(x, f"Wc{k}", f"bc{k}") + x
            h = relu(linear(x, "Wd0", "bd0"))
            h = relu(linear(h, "Wd1", "bd1"))
            return linear(h, "Wo", "bo")
    else:  # deepfm
        first_order = make_embed(P, "w", fused)

        def forward(dense, ids):
            e = emb(ids)
            first = first_order(ids).sum((1, 2)).unsqueeze(1) + linear(dense, "Wl", "bl")
            s = e.sum(1)
            second = 0.5 * (s * s - (e * e).sum(1)).sum(1, keepdim=True)
            h = torch.cat([dense, e.flatten(1)], 1)
            h = relu(linear(h, "Wd0", "bd0"))
            h = relu(linear(h, "Wd1", "bd1"))
            return (first + second) + linear(h, "Wo", "bo")
    return forward


def optimizers(model, P):
    tables = [p for n, p in P.items() if is_table(n)]
    dense = [p for n, p in P.items() if not is_table(n)]
    if model == "dlrm":
        return [torch.optim.SGD(tables + dense, lr=0.1)]
    if model == "dcn-v2":
        return [torch.optim.Adagrad(tables + dense, lr=0.02)]
    return [torch.optim.Adagrad(tables + dense, lr=0.05)]


def is_table(name):
    return name.startswith("emb") or name[0] == "w" and name[1:].isdigit() or name == "w"


def is_matrix(name, t):
    return t.dim() == 2 and not is_table(name)


class Trainer:
    """Model, optimizers and psgraph's data stream rule over one file.
    With fused, each kind of table (emb<i>, w<i>) is one table of the 26
    tables' rows: the same values and updates, fewer ops."""

    def __init__(self, model, init, label, dense, ids, batch=BATCH, fused=False):
        P = {}
        for n, t in init.items():
            if fused and is_table(n):
                prefix = n.rstrip("0123456789")
                if prefix not in P:
                    P[prefix] = torch.cat([init[f"{prefix}{i}"] for i in range(FIELDS)])
                continue
            P[n] = t.t().contiguous().clone() if is_matrix(n, t) else t.clone()
        self.P = {n: torch.nn.Parameter(t) for n, t in P.items()}
        self.fused = fused
        self.forward = make_forward(model, self.P, fused)
        self.opts = optimizers(model, self.P)
        self.label, self.dense, self.ids = torch.from_numpy(label), torch.from_numpy(dense), torch.from_numpy(ids)
        self.n, self.batch = len(label), batch

    def params(self):
        """The parameters as in the YAML file."""
        out = {}
        for n, p in self.P.items():
            p = p.detach()
            if self.fused and is_table(n):
                for i, part in enumerate(p.chunk(FIELDS)):
                    out[f"{n}{i}"] = part.clone()
            else:
                out[n] = p.t().contiguous() if is_matrix(n, p) else p.clone()
        return out

    def rows(self, k):
        a = (k * self.batch) % self.n
        if a + self.batch <= self.n:
            return slice(a, a + self.batch)
        return torch.arange(k * self.batch, (k + 1) * self.batch) % self.n

    def step(self, k, halves=False):
        """Step k; with halves the batch's loss is the mean of its two
        halves' losses, as two trainers of a sync job compute it (the same
        value, rounded otherwise)."""
        r = self.rows(k)
        if halves:
            r = torch.arange(k * self.batch, (k + 1) * self.batch) % self.n
            h = self.batch // 2
            loss = 0.5 * sum(F.binary_cross_entropy_with_logits(self.forward(self.dense[q], self.ids[q]), self.label[q])
                             for q in (r[:h], r[h:]))
        else:
            loss = F.binary_cross_entropy_with_logits(self.forward(self.dense[r], self.ids[r]), self.label[r])
        for o in self.opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in self.opts:
            o.step()
        return loss


def auc(scores, labels):
    """ROC AUC, ties counting 1/2 (psgraph's auc op)."""
    s, y = np.asarray(scores, np.float64).ravel(), np.asarray(labels).ravel() > 0.5
    order = np.argsort(s, kind="mergesort")
    s, y = s[order], y[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    p, n = y.sum(), (~y).sum()
    return float((ranks[y].sum() - p * (p + 1) / 2) / (p * n))


def write_safetensors(path, tensors, meta=None):
    header, offset, blobs = {}, 0, []
    if meta:
        header["__metadata__"] = meta
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
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["speed", "auc", "init"])
    ap.add_argument("model")
    ap.add_argument("train", help="the training file (init: the safetensors file to write)")
    ap.add_argument("eval", nargs="?")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=0, help="speed: read only the first R rows")
    ap.add_argument("--buckets", type=int, default=100000)
    ap.add_argument("--fused", action="store_true", help="one table per kind of table (see Trainer)")
    ap.add_argument("--pred-in")
    ap.add_argument("--cache", action="store_true", help="keep the parsed files beside them (FILE.b<buckets>.r<rows>.npz) and read them from there")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.mode == "init":
        write_safetensors(a.train, {n: t.numpy() for n, t in example_init(a.model, a.buckets).items()})
        return
    label, dense, ids = read_cached(a.train, a.buckets, a.rows, a.cache)
    sc = scaling(dense)
    init = example_init(a.model, a.buckets)
    tr = Trainer(a.model, init, label, standardize(dense, sc), ids, fused=a.fused)
    out = {"role": "torch", "model": a.model, "threads": a.threads, "tables": "fused" if a.fused else "per field"}
    if a.mode == "speed":
        for k in range(20):
            tr.step(k)
        t0 = time.perf_counter()
        for k in range(20, 20 + a.steps):
            loss = tr.step(k)
        dt = time.perf_counter() - t0
        out.update(steps=a.steps, seconds=round(dt, 4), steps_per_s=round(a.steps / dt, 1), loss=float(loss))
    else:
        steps = -(-tr.n // BATCH)
        t0 = time.perf_counter()
        for k in range(steps):
            tr.step(k)
        dt = time.perf_counter() - t0
        el, ed, ei = read_cached(a.eval, a.buckets, 0, a.cache)
        with torch.no_grad():
            logit = torch.cat([tr.forward(torch.from_numpy(standardize(ed[i:i + 4096], sc)), torch.from_numpy(ei[i:i + 4096]))
                               for i in range(0, len(el), 4096)]).numpy().ravel()
        p = 1 / (1 + np.exp(-logit.astype(np.float64)))
        ll = float(-np.mean(el.ravel() * np.log(np.maximum(p, 1e-12)) + (1 - el.ravel()) * np.log(np.maximum(1 - p, 1e-12))))
        chunks = [(min(1024, len(el) - i), auc(logit[i:i + 1024], el[i:i + 1024])) for i in range(0, len(el), 1024)]
        out.update(steps=steps, seconds=round(dt, 2), steps_per_s=round(steps / dt, 1), eval_rows=len(el),
                   eval_auc=round(auc(logit, el), 5), eval_loss=round(ll, 5),
                   eval_auc_chunks=round(sum(n * v for n, v in chunks) / len(el), 5))
        if a.pred_in:
            pred = np.loadtxt(a.pred_in, delimiter=",", skiprows=1, ndmin=2)[:, -1]
            out["psgraph_eval_auc"] = round(auc(pred, el), 5)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
