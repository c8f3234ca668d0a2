#!/usr/bin/env python3
"""Writes the torch references of psgraph's recall_at_k for exec/kernels'
TestRecallAtKMatchesTorch.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/retrieval/gen_reference.py
It writes testdata/retrieval/reference.safetensors in the format of
testdata/reduce/gen_reference.py. Without ties the reference is torch.topk:
a row is a hit when its label column is among the indices topk returns.
With ties (torch.topk breaks them in no documented order) it is the
documented rule computed with torch: fewer than k other columns score at
least as high as the label column (a tie counts against it), a NaN at the
label is a miss and a NaN elsewhere is not as high. With candidate ids, the
columns of the label column's id are the positive itself and the others
count once per distinct id (torch.unique of the ids of the columns scoring
at least as high).
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ beside the test data
sys.path.insert(0, os.path.join(HERE, "..", "reduce"))
from gen_reference import Cases  # noqa: E402


def by_topk(k):
    def run(scores, label):
        top = torch.topk(scores, min(k, scores.shape[1]), dim=1).indices
        return (top == label.long()[:, None]).any(dim=1).float().mean()
    return run


def by_rule(k):
    def run(scores, label):
        s = scores.gather(1, label.long()[:, None])
        other = torch.ones_like(scores, dtype=torch.bool).scatter_(1, label.long()[:, None], False)
        higher = ((scores >= s) & other).sum(dim=1)  # a NaN compares false either way
        return ((higher < k) & ~torch.isnan(s[:, 0])).float().mean()
    return run


def by_distinct_ids(k):
    def run(scores, label, ids):
        ids = ids.reshape(-1)
        hits = 0
        for r in range(scores.shape[0]):
            pos = ids[label[r]]
            s = scores[r, label[r]]
            mask = (scores[r] >= s) & (ids != pos)
            hits += int(not torch.isnan(s) and len(torch.unique(ids[mask])) < k)
        return torch.tensor(hits / scores.shape[0])
    return run


def main():
    c = Cases(22)
    st = lambda a: ("state", a)
    ids = lambda a: ("ids", np.asarray(a, dtype=np.int32))
    # In-batch negatives: [B, B] scores, the label of row i is column i.
    sc = c.rng.normal(size=(16, 16)).astype(np.float32)
    sc[np.arange(16), np.arange(16)] += 1.0  # some rows hit, some miss
    for k in (1, 3, 5):
        c.run(f"recall_inbatch_k{k}", "recall_at_k", f"{{k: {k}}}", [st(sc), ids(np.arange(16))], by_topk(k), batch=16)
    # Other candidates than rows, and labels anywhere; k beyond the columns.
    sc2 = c.rng.normal(size=(7, 11)).astype(np.float32)
    lab2 = c.rng.integers(0, 11, size=7)
    c.run("recall_rect_k4", "recall_at_k", "{k: 4}", [st(sc2), ids(lab2)], by_topk(4), batch=7)
    c.run("recall_k_past_columns", "recall_at_k", "{k: 20}", [st(sc2), ids(lab2)], by_topk(20), batch=7)
    # Ties count against the label; a NaN at the label misses, a NaN
    # elsewhere is not as high.
    ties = np.array([[1, 2, 2, 0], [3, 3, 3, 3], [0, 5, 1, 1], [np.nan, 1, 0, 2], [2, np.nan, 1, 0]], dtype=np.float32)
    lab3 = np.array([1, 2, 3, 0, 2])
    c.run("recall_ties_k1", "recall_at_k", "{k: 1}", [st(ties), ids(lab3)], by_rule(1), batch=5)
    c.run("recall_ties_k2", "recall_at_k", "{k: 2}", [st(ties), ids(lab3)], by_rule(2), batch=5)
    # Candidate ids: in-batch items with duplicates (the same item scores
    # the same in every column it has), and a tie of two different items.
    items = np.array([3, 7, 3, 9, 7, 3, 1, 4, 9, 3, 5, 2], dtype=np.int32)
    emb = {i: c.rng.normal(size=4) for i in set(items.tolist())}
    users = c.rng.normal(size=(12, 4))
    sc3 = (users @ np.stack([emb[i] for i in items]).T).astype(np.float32)
    sc3[0, 10] = sc3[0, 0]  # item 5 ties row 0's positive, item 3
    for k in (1, 2, 4):
        c.run(f"recall_ids_k{k}", "recall_at_k", f"{{k: {k}}}", [st(sc3), ids(np.arange(12)), ids(items)], by_distinct_ids(k), batch=12)
    c.run("recall_ids_column", "recall_at_k", "{k: 2}", [st(sc3), ids(np.arange(12)), ids(items[:, None])], by_distinct_ids(2), batch=12)
    c.write(os.path.join(HERE, "reference.safetensors"))

    # The rule and topk agree where there are no ties, and so does the
    # rule with ids when every column is its own candidate; with the
    # duplicates, counting each id once is not counting columns.
    for k in (1, 3, 5):
        a = by_topk(k)(torch.tensor(sc), torch.arange(16))
        b = by_rule(k)(torch.tensor(sc), torch.arange(16))
        d = by_distinct_ids(k)(torch.tensor(sc), torch.arange(16), torch.arange(16, dtype=torch.int32))
        assert a == b == d, (k, a, b, d)
    assert by_distinct_ids(4)(torch.tensor(sc3), torch.arange(12), torch.tensor(items)) != by_rule(4)(torch.tensor(sc3), torch.arange(12))
    print("recall_at_k cases:", [m["name"] for m in c.meta])


if __name__ == "__main__":
    main()
