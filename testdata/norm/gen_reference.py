#!/usr/bin/env python3
"""Writes the torch references of psgraph's layer_norm and batch_norm.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/norm/gen_reference.py
It writes, in testdata/norm:
- reference.safetensors: op cases for exec/kernels' TestOpsMatchTorch
  (the format of testdata/reduce/gen_reference.py): layer_norm, batch_norm
  in training (outputs, next running statistics, gradients) and in
  evaluation, and the internal standardize.
- bn.csv: 64 rows of 4 features (means and scales far from 0 and 1) and a
  0/1 label.
- init.safetensors and bn-mlp.safetensors: the parameters of bn-mlp.yaml
  before and after 30 steps of torch (nn.BatchNorm1d in model.train(),
  SGD lr 0.1, batch 16 by psgraph's data stream rule), with the running
  statistics bn_mean and bn_var; bn-mlp-eval.safetensors: "prob", the
  model.eval() probabilities of bn.csv's first 3 rows after training, and
  "loss", the model.eval() loss over all of bn.csv.
- bn-input-trainer0.safetensors: the running statistics of bn-input.yaml's
  batch_norm (on the features, momentum 0.2) in trainer 0 of a 2-trainer
  job with batch 8 after 20 steps: trainer 0 reads rows [16k, 16k+8) at
  step k; and bn-input-trainer1.safetensors, trainer 1's (rows
  [16k+8, 16k+16)).
"""
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reduce"))
from gen_reference import Cases, write_safetensors  # noqa: E402


def op_cases():
    c = Cases(5)
    f = lambda *shape: c.rng.uniform(-2, 2, size=shape).astype(np.float32)
    pos = lambda *shape: c.rng.uniform(0.5, 2, size=shape).astype(np.float32)
    p = lambda a: ("param", a)
    s = lambda a: ("state", a)
    c.run("layer_norm", "layer_norm", "", [p(f(4, 6)), p(pos(6)), p(f(6))],
          lambda x, g, b: torch.nn.functional.layer_norm(x, (6,), g, b, eps=1e-5))
    c.run("layer_norm_3d_eps", "layer_norm", "{eps: 0.001}", [p(f(2, 3, 5) * 3 + 5), p(pos(5)), p(f(5))],
          lambda x, g, b: torch.nn.functional.layer_norm(x, (5,), g, b, eps=1e-3))

    def bn(momentum, eps, training):
        def run(x, g, b, rm, rv):
            rm, rv = rm.clone(), rv.clone()
            y = torch.nn.functional.batch_norm(x, rm, rv, g, b, training=training, momentum=momentum, eps=eps)
            return y, rm, rv
        return run
    c.run("batch_norm_train", "batch_norm", "", [p(f(8, 5)), p(pos(5)), p(f(5)), s(f(5)), s(pos(5))],
          bn(0.1, 1e-5, True), batch=8)
    c.run("batch_norm_train_shifted", "batch_norm", "{eps: 0.001, momentum: 0.3}",
          [p(f(6, 3) * 4 + 10), p(pos(3)), p(f(3)), s(f(3)), s(pos(3))], bn(0.3, 1e-3, True), batch=6)
    c.run("batch_norm_eval", "batch_norm", "", [s(f(3, 5)), s(pos(5)), s(f(5)), s(f(5)), s(pos(5))],
          bn(0.1, 1e-5, False), mode="eval", batch=3)

    def standardize(dim):
        def run(x):
            m = x.mean(dim=dim, keepdim=True)
            v = ((x - m) ** 2).mean(dim=dim, keepdim=True)
            return (x - m) / torch.sqrt(v + 1e-5)
        return run
    c.run("standardize_axis0", "standardize", "{axis: 0}", [p(f(5, 3))], standardize(0), batch=5)
    c.run("standardize_axis1", "standardize", "{axis: 1}", [p(f(2, 4, 3))], standardize(1))
    c.write(os.path.join(HERE, "reference.safetensors"))


ROWS = 64


def write_data(rng):
    x = rng.normal(loc=[3, -2, 0.5, 10], scale=[2, 0.5, 1, 4], size=(ROWS, 4)).astype(np.float32)
    z = (x - [3, -2, 0.5, 10]) / [2, 0.5, 1, 4] @ np.array([1.5, -1, 0.5, 1]) + 0.3
    y = (rng.uniform(size=ROWS) < 1 / (1 + np.exp(-z))).astype(np.float32)
    with open(os.path.join(HERE, "bn.csv"), "w") as f:
        for r in range(ROWS):
            f.write(",".join(f"{v:.6g}" for v in x[r]) + f",{int(y[r])}\n")
    # what psgraph reads: the file's decimal values
    raw = np.loadtxt(os.path.join(HERE, "bn.csv"), delimiter=",", dtype=np.float32)
    return raw[:, :4], raw[:, 4:5]


class BNMLP(torch.nn.Module):
    def __init__(self, init):
        super().__init__()
        self.W1 = torch.nn.Parameter(torch.tensor(init["W1"]))
        self.bn = torch.nn.BatchNorm1d(8)  # momentum 0.1, eps 1e-5
        self.bn.weight.data = torch.tensor(init["gamma"])
        self.bn.bias.data = torch.tensor(init["beta"])
        self.W2 = torch.nn.Parameter(torch.tensor(init["W2"]))
        self.b2 = torch.nn.Parameter(torch.tensor(init["b2"]))

    def forward(self, x):
        return torch.relu(self.bn(x @ self.W1)) @ self.W2 + self.b2


def train_bn_mlp(x, y, rng):
    init = {
        "W1": (0.5 * rng.standard_normal((4, 8))).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.5, 8).astype(np.float32),
        "beta": (0.1 * rng.standard_normal(8)).astype(np.float32),
        "W2": (0.5 * rng.standard_normal((8, 1))).astype(np.float32),
        "b2": np.zeros(1, dtype=np.float32),
    }
    write_safetensors(os.path.join(HERE, "init.safetensors"), init, {})
    m = BNMLP(init)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m.train()
    batch = 16
    for k in range(30):
        rows = [(k * batch + i) % ROWS for i in range(batch)]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(m(torch.tensor(x[rows])), torch.tensor(y[rows]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = {"W1": m.W1, "gamma": m.bn.weight, "beta": m.bn.bias, "W2": m.W2, "b2": m.b2,
           "bn_mean": m.bn.running_mean, "bn_var": m.bn.running_var}
    write_safetensors(os.path.join(HERE, "bn-mlp.safetensors"), {k: v.detach().numpy() for k, v in out.items()}, {})
    m.eval()
    with torch.no_grad():
        prob = torch.sigmoid(m(torch.tensor(x[:3]))).reshape(3)
        whole = torch.nn.functional.binary_cross_entropy_with_logits(m(torch.tensor(x)), torch.tensor(y))
    write_safetensors(os.path.join(HERE, "bn-mlp-eval.safetensors"),
                      {"prob": prob.numpy(), "loss": whole.reshape(1).numpy()}, {})
    print("bn-mlp final batch loss", float(loss), "eval loss", float(whole), "eval probabilities", prob.tolist())


def trainer_stats(x, trainer, trainers=2, batch=8, steps=20, momentum=0.2):
    rm, rv = torch.zeros(4), torch.ones(4)
    for k in range(steps):
        rows = [(k * trainers * batch + trainer * batch + i) % ROWS for i in range(batch)]
        torch.nn.functional.batch_norm(torch.tensor(x[rows]), rm, rv, training=True, momentum=momentum)
    return {"bn_mean": rm.numpy(), "bn_var": rv.numpy()}


def main():
    op_cases()
    rng = np.random.default_rng(11)
    x, y = write_data(rng)
    train_bn_mlp(x, y, rng)
    for t in range(2):
        write_safetensors(os.path.join(HERE, f"bn-input-trainer{t}.safetensors"), trainer_stats(x, t), {})


if __name__ == "__main__":
    main()
