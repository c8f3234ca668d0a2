#!/usr/bin/env python3
"""A torch.distributed.rpc parameter server for the digits MLP: the reference
of psgraph's 2x2 sync digits job (docs/performance.md, docs/wire.md).

    /usr/bin/python3 bench/digits_rpc_torch.py examples/data/digits.csv [--steps N] [--trainers 2] [--pservers 2]

The model is examples/digits-mlp.yaml (64-128-10, relu, softmax cross
entropy, sgd lr 0.1, batch 64 per trainer, features standardized), placed
as `psgraph split --trainers 2 --pservers 2` places it: W1 on pserver 0;
W2, b1 and b2 on pserver 1 (with one pserver all four on it). A step is
synchronous, as psgraph's sync mode: each trainer computes its gradients
on its own batch and sends each pserver the gradients of its parameters
in one RPC (rpc_async of an @rpc.functions.async_execution function,
PyTorch's batch-updating parameter server pattern); a pserver answers
both trainers' RPCs of a step once it has both, with its parameters
updated by the mean of their gradients, and the answers are the
parameters of the next step. Trainer t's batch k is rows
[(2k+t)B, (2k+t+1)B) of the file, wrapping.

Every process runs torch on one thread (torch.set_num_threads(1)) over the
TensorPipe backend on loopback. Prints one JSON line: trainer 0's steps/s
over N steps after 50 warm-up steps, and the final loss.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn.functional as F

LR, BATCH, WARMUP = 0.1, 64, 50


def placement(pservers):
    """Which pserver holds each parameter (psgraph's 2x2 plan)."""
    if pservers == 1:
        return {"W1": 0, "b1": 0, "W2": 0, "b2": 0}
    return {"W1": 0, "W2": 1, "b1": 1, "b2": 1}


def initial():
    g = torch.Generator().manual_seed(1)
    return {
        "W1": torch.randn(64, 128, generator=g) * (2.0 / 64) ** 0.5,
        "b1": torch.zeros(128),
        "W2": torch.randn(128, 10, generator=g) * (2.0 / 128) ** 0.5,
        "b2": torch.zeros(10),
    }


class PServer:
    """One pserver's parameters; a step's update waits for every trainer."""

    def __init__(self, names, trainers):
        init = initial()
        self.params = {n: init[n].clone() for n in names}
        self.trainers = trainers
        self.lock = threading.Lock()
        self.acc = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.got = 0
        self.fut = torch.futures.Future()

    def fetch(self):
        return {n: p.clone() for n, p in self.params.items()}

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch(ps_rref, grads):
        self = ps_rref.local_value()
        with self.lock:
            for n, g in grads.items():
                self.acc[n] += g
            self.got += 1
            fut = self.fut
            if self.got == self.trainers:
                for n, p in self.params.items():
                    p -= LR * self.acc[n] / self.trainers
                    self.acc[n].zero_()
                self.got = 0
                fut.set_result({n: p.clone() for n, p in self.params.items()})
                self.fut = torch.futures.Future()
        return fut

    @staticmethod
    def get(ps_rref):
        return ps_rref.local_value().fetch()


def load(path):
    d = np.loadtxt(path, delimiter=",", dtype=np.float32)
    x, y = d[:, :64], d[:, 64].astype(np.int64)
    mu, sd = x.mean(0), x.std(0)
    sd[sd == 0] = 1
    return torch.from_numpy((x - mu) / sd), torch.from_numpy(y)


def trainer(rank, args, rrefs, where):
    x, y = load(args.data)
    n = x.shape[0]
    params = {}
    for i, r in enumerate(rrefs):
        params.update(rpc.rpc_sync(r.owner(), PServer.get, args=(r,)))
    loss = None
    start = None
    for k in range(WARMUP + args.steps):
        if k == WARMUP:
            start = time.perf_counter()
        lo = ((2 * k + rank) * BATCH) % n
        idx = torch.arange(lo, lo + BATCH) % n
        xb, yb = x[idx], y[idx]
        p = {name: t.requires_grad_() for name, t in params.items()}
        h = torch.relu(xb @ p["W1"] + p["b1"])
        loss = F.cross_entropy(h @ p["W2"] + p["b2"], yb)
        loss.backward()
        futs = []
        for i, r in enumerate(rrefs):
            grads = {name: p[name].grad for name in p if where[name] == i}
            futs.append(rpc.rpc_async(r.owner(), PServer.update_and_fetch, args=(r, grads)))
        params = {}
        for f in futs:
            params.update(f.wait())
    secs = time.perf_counter() - start
    return {"steps": args.steps, "steps_per_s": args.steps / secs, "loss": float(loss)}


def run(rank, world, args):
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(init_method="tcp://127.0.0.1:%d" % args.port, num_worker_threads=4)
    name = "trainer%d" % rank if rank < args.trainers else "ps%d" % (rank - args.trainers)
    rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 0:
        where = placement(args.pservers)
        rrefs = [rpc.remote("ps%d" % i, PServer, args=([n for n, j in where.items() if j == i], args.trainers))
                 for i in range(args.pservers)]
        others = [rpc.rpc_async("trainer%d" % t, trainer, args=(t, args, rrefs, where)) for t in range(1, args.trainers)]
        res = trainer(0, args, rrefs, where)
        for f in others:
            f.wait()
        res.update({"role": "torch-rpc-ps", "trainers": args.trainers, "pservers": args.pservers})
        print(json.dumps(res), flush=True)
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--pservers", type=int, default=2)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        args.port = s.getsockname()[1]
    world = args.trainers + args.pservers
    print("digits_rpc_torch: %d trainers x %d pservers, %d steps ..." % (args.trainers, args.pservers, args.steps), file=sys.stderr)
    mp.spawn(run, args=(world, args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
