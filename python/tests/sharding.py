"""Sharded steps checked against the unsharded step, shared by python/tests/test_distributed.py and
python/bench/dist_check.py (the GPU's check): SIZES' tensors split among ranks on chunk boundaries or as
FSDP splits a flat parameter, and ranks as threads of one process."""

import threading

import torch
import torch.distributed as dist

import collage.torch as ct
from collage.torch import _lines

SIZES = [40000, 2 * _lines.BLOCK + 5, 700]
STEPS = 4


def grads_of(step, sizes, dtype):
    g = torch.Generator().manual_seed(500 + step)
    return [(torch.randn(n, generator=g) * 0.03).to(dtype) for n in sizes]


def chunk_split(rank, world, n):
    """Shards on chunk boundaries: rank 0 the first chunk-aligned half (at least one chunk when the tensor
    has two), rank 1 the rest (two ranks)."""
    cut = min(n, max(_lines.BLOCK, (n // 2) // _lines.BLOCK * _lines.BLOCK))
    return ((0, cut) if rank == 0 else (cut, n)), n


def even_split(rank, world, n):
    """FSDP's split of a flat parameter: padded with zeros to a multiple of the ranks, each rank an equal part
    (its ends anywhere in the Σg² chunks). Returns the shard and the padded size."""
    s = -(-n // world)
    return (rank * s, (rank + 1) * s), world * s


def check_sharded(rank, precision, split=chunk_split, world=2, all_reduce=None, path=None, device="cpu"):
    """Rank `rank` of `world` steps its shards (split) of SIZES' tensors on device, STEPS steps with clipping
    that triggers, against the unsharded step in this process alone: "ok", or what differs. all_reduce:
    torch.distributed's unless given; path: the sharded optimizer's path forced ("cuda" for the CUDA path's
    stand-in in the tests)."""
    g0 = torch.Generator().manual_seed(3)
    sized = [split(rank, world, n) for n in SIZES]
    full = [(torch.randn(n, generator=g0) * 0.5).to(torch.bfloat16) for n in SIZES]
    full = [torch.cat([w, torch.zeros(m - w.numel(), dtype=w.dtype)]).to(device) for w, (_, m) in zip(full, sized)]
    ref = [torch.nn.Parameter(w.clone()) for w in full]
    mine, shards = [], {}
    for w, ((a, b), m) in zip(full, sized):
        p = torch.nn.Parameter(w[a:b].clone())
        mine.append(p)
        shards[p] = (a, m)
    kw = dict(precision=precision, lr=1e-3, weight_decay=0.1, max_grad_norm=0.5, seed=11)
    opt = ct.AdamW(mine, shards=shards, all_reduce=all_reduce or dist.all_reduce, **kw)
    one = ct.AdamW(ref, **kw)
    if path:
        opt._path = lambda p: path
    for t in range(STEPS):
        gs = grads_of(t, SIZES, torch.bfloat16)
        gs = [torch.cat([g, torch.zeros(w.numel() - g.numel(), dtype=g.dtype)]).to(device) for g, w in zip(gs, full)]
        for p, q, g in zip(mine, ref, gs):
            a = shards[p][0]
            p.grad, q.grad = g[a:a + p.numel()].clone(), g.clone()
        opt.step()
        one.step()
        if opt.last_stats["grad_norm"] != one.last_stats["grad_norm"] or opt.last_stats["clip_coef"] >= 1.0:
            return f"step {t}: norm {opt.last_stats['grad_norm']!r}, unsharded {one.last_stats['grad_norm']!r}"
    for i, (p, q) in enumerate(zip(mine, ref)):
        a, b = shards[p][0], shards[p][0] + p.numel()
        if not torch.equal(p.detach().view(torch.int16), q.detach()[a:b].view(torch.int16)):
            return f"tensor {i}: θ differs from the unsharded step's"
        for k, v in opt.state[p].items():
            if torch.is_tensor(v) and not torch.equal(v, one.state[q][k][a:b]):
                return f"tensor {i}: {k} differs from the unsharded step's"
    return "ok"


class ThreadRanks:
    """world ranks as threads of this process: all_reduce(rank) sums a tensor across them (in rank order)."""

    def __init__(self, world):
        self.world, self.barrier, self.bufs = world, threading.Barrier(world, timeout=120), [None] * world

    def all_reduce(self, rank):
        def reduce(t):
            self.bufs[rank] = t.clone()
            self.barrier.wait()
            total = self.bufs[0].clone()
            for b in self.bufs[1:]:
                total += b
            self.barrier.wait()  # every rank has read the buffers before any is written again
            t.copy_(total)
        return reduce
