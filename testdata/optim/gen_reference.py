#!/usr/bin/env python3
"""Writes the torch.optim reference values psgraph's optimizer tests compare against.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 testdata/optim/gen_reference.py
It writes testdata/optim/init.safetensors (the shared initial parameters) and
testdata/optim/<config>.safetensors (parameters after STEPS steps of
torch.optim, with the config's torch.optim.lr_scheduler and
torch.nn.utils.clip_grad_* where it has them, on the model of
mlp-<config>.yaml, fed by psgraph's data
stream rule: batch 30, no shuffle, iris standardized per column).
torch 1.13 has no FTRL and no row-wise adagrad: for ftrl*, rowwise_adagrad
and mixed (FTRL on W1 and W2, Adam on the biases) the update is the numpy
one of numpy_optim.py (TensorFlow's FTRL, FBGEMM's row-wise adagrad) on
torch's gradients.
"""
import json
import math
import os
import struct

import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # no __pycache__ beside the test data
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_optim import Ftrl, RowwiseAdagrad  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, BATCH = 50, 30
NAMES = ["W1", "b1", "W2", "b2"]


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


def load_iris():
    raw = np.loadtxt(os.path.join(HERE, "../../examples/data/iris.csv"), delimiter=",")
    x = raw[:, :4].astype(np.float32).astype(np.float64)
    mean = x.mean(axis=0)
    std = np.sqrt(np.maximum((x * x).mean(axis=0) - mean * mean, 0))
    std[std < 1e-12] = 1
    x = ((x - mean) / std).astype(np.float32)
    return x, raw[:, 4].astype(np.int64)


def main():
    rng = np.random.default_rng(0)
    init = {
        "W1": (0.5 * rng.standard_normal((4, 16))).astype(np.float32),
        "b1": (0.1 * rng.standard_normal(16)).astype(np.float32),
        "W2": (0.5 * rng.standard_normal((16, 3))).astype(np.float32),
        "b2": (0.1 * rng.standard_normal(3)).astype(np.float32),
    }
    write_safetensors(os.path.join(HERE, "init.safetensors"), init)
    x, y = load_iris()
    configs = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01),
        # weight decay (coupled, torch's weight_decay) and AdamW (decoupled)
        "sgd-wd": lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.05),
        "momentum-wd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.05),
        "adagrad-wd": lambda p: torch.optim.Adagrad(p, lr=0.1, weight_decay=0.05),
        "adam-wd": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.05),
        "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
        # learning-rate schedules, stepped after every optimizer step
        "sgd-cosine": lambda p: torch.optim.SGD(p, lr=0.1),
        "momentum-step": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adagrad-exponential": lambda p: torch.optim.Adagrad(p, lr=0.1),
        "adam-warmup-cosine": lambda p: torch.optim.Adam(p, lr=0.01),
        "sgd-warmup": lambda p: torch.optim.SGD(p, lr=0.1),
        # gradient clipping before the step (and its weight decay)
        "sgd-clip-value": lambda p: torch.optim.SGD(p, lr=0.1),
        "adam-clip-norm": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.05),
    }
    warmup, span = 10, STEPS - 10

    def warmup_cosine(t):  # t: steps done (torch's last_epoch)
        return min(1.0, (t + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(max(t - warmup, 0), span) / span))

    schedules = {
        "sgd-cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=STEPS, eta_min=0.01),
        "momentum-step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=10, gamma=0.5),
        "adagrad-exponential": lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.95),
        "adam-warmup-cosine": lambda o: torch.optim.lr_scheduler.LambdaLR(o, warmup_cosine),
        # LinearLR from 1/warmup over warmup-1 steps is min(1, (t+1)/warmup)
        "sgd-warmup": lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=1 / warmup, total_iters=warmup - 1),
    }
    clips = {
        "sgd-clip-value": lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.05),
        "adam-clip-norm": lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.5),
    }
    for name, make in configs.items():
        params = {n: torch.tensor(init[n], requires_grad=True) for n in NAMES}
        opt = make([params[n] for n in NAMES])
        sched = schedules[name](opt) if name in schedules else None
        for k in range(STEPS):
            rows = [(k * BATCH + i) % len(x) for i in range(BATCH)]
            xb, yb = torch.tensor(x[rows]), torch.tensor(y[rows])
            h = torch.tanh(xb @ params["W1"] + params["b1"])
            loss = torch.nn.functional.cross_entropy(h @ params["W2"] + params["b2"], yb)
            opt.zero_grad()
            loss.backward()
            if name in clips:
                clips[name]([params[n] for n in NAMES])
            opt.step()
            if sched is not None:
                sched.step()
        write_safetensors(os.path.join(HERE, name + ".safetensors"), {n: params[n].detach().numpy() for n in NAMES})
        print(name, "final batch loss", float(loss))
    # numpy updates on torch's gradients: name -> per parameter an
    # optimizer (numpy's, or None for the torch one given), a torch
    # optimizer for the others, and the schedule of the rate (a factor of
    # steps done).
    ftrl = dict(lr=0.5, l1=0.001, l2=0.01, beta=0.1)
    ftrl_power = dict(lr=0.5, lr_power=-0.7, initial_accumulator_value=0.05, l2=0.02)
    numpy_configs = {
        "ftrl": (lambda shape: Ftrl(shape, **ftrl), NAMES, lambda t: 1.0),
        "ftrl-power": (lambda shape: Ftrl(shape, **ftrl_power), NAMES, lambda t: 1.0),
        "ftrl-exponential": (lambda shape: Ftrl(shape, **ftrl), NAMES, lambda t: 0.95 ** t),
        "rowwise_adagrad": (lambda shape: RowwiseAdagrad(shape, lr=0.1), NAMES, lambda t: 1.0),
        "rowwise_adagrad-wd": (lambda shape: RowwiseAdagrad(shape, lr=0.1, weight_decay=0.05), NAMES, lambda t: 1.0),
        "mixed": (lambda shape: Ftrl(shape, **ftrl), ["W1", "W2"], lambda t: 1.0),
    }
    for name, (make, own, rate) in numpy_configs.items():
        params = {n: torch.tensor(init[n], requires_grad=True) for n in NAMES}
        mine = {n: make(init[n].shape) for n in own}
        rest = [params[n] for n in NAMES if n not in own]
        opt = torch.optim.Adam(rest, lr=0.01) if rest else None
        for k in range(STEPS):
            rows = [(k * BATCH + i) % len(x) for i in range(BATCH)]
            xb, yb = torch.tensor(x[rows]), torch.tensor(y[rows])
            h = torch.tanh(xb @ params["W1"] + params["b1"])
            loss = torch.nn.functional.cross_entropy(h @ params["W2"] + params["b2"], yb)
            for p in params.values():
                p.grad = None
            loss.backward()
            if opt is not None:
                opt.step()
            with torch.no_grad():
                for n, o in mine.items():
                    w = params[n].detach().numpy().copy()
                    kw = {"lr": o.lr * rate(k)} if isinstance(o, Ftrl) else {}
                    o.apply(w, params[n].grad.numpy(), **kw)
                    params[n].copy_(torch.tensor(w))
        write_safetensors(os.path.join(HERE, name + ".safetensors"), {n: params[n].detach().numpy() for n in NAMES})
        print(name, "final batch loss", float(loss))


if __name__ == "__main__":
    main()
