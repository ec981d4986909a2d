"""Shared by the tests: a small model's parameters in groups, deterministic gradients, bit comparisons,
and libcollage driven directly through ctypes (the oracle the package's C path is held to)."""

import ctypes

import numpy as np
import torch

import collage
from collage import _lib
from collage.torch import _lines

# Tensors in three param groups; the largest spans two of the optimizer's 2^14-element blocks only in
# BLOCK_SHAPES (the 1024-row Σg² loop of the torch path costs time, so the 100-step tests stay small).
SHAPES = [[(40, 50), (50,)], [(30, 20), (20,)], [(7,), (3, 5)]]
BLOCK_SHAPES = [[(170, 100), (100,)], [(16384,)], [(5,)]]
GROUP_HP = [dict(weight_decay=0.1), dict(weight_decay=0.0, lr=3e-3), dict(weight_decay=0.01, lr=2e-2, eps=1e-6)]
LR, BETAS, EPS, CLIP, SEED = 1e-2, (0.9, 0.95), 1e-8, 0.5, 7


def weights_dtype(strategy):
    return torch.float32 if collage.strategy(strategy).weights.format == "fp32" else torch.bfloat16


def make_params(strategy, shapes=SHAPES, seed=1):
    dt = weights_dtype(strategy)
    g = torch.Generator().manual_seed(seed)
    return [[torch.nn.Parameter((torch.randn(sh, generator=g) * 0.5).to(dt)) for sh in grp] for grp in shapes]


def make_grads(step, shapes, dtype, nonfinite=False):
    """Gradients of step `step`: normal, scaled by 10^(k-2) for the k-th tensor (tiny to large), some
    exact zeros; one NaN when nonfinite."""
    g = torch.Generator().manual_seed(1000 + step)
    out, k = [], 0
    for grp in shapes:
        row = []
        for sh in grp:
            x = torch.randn(sh, generator=g) * (10.0 ** (k % 5 - 2))
            x[torch.rand(sh, generator=g) < 0.05] = 0.0
            row.append(x.to(dtype))
            k += 1
        out.append(row)
    if nonfinite:
        out[-1][-1].view(-1)[0] = float("nan")
    return out


def make_opt(params, strategy, backend, **kw):
    groups = [dict(params=ps, **hp) for ps, hp in zip(params, GROUP_HP)]
    args = dict(precision=strategy, lr=LR, betas=BETAS, eps=EPS, max_grad_norm=CLIP, edq=True, seed=SEED,
                backend=backend)
    args.update(kw)
    return collage.torch.AdamW(groups, **args)


def run(opt, params, steps, start=0, shapes=SHAPES):
    dt = params[0][0].dtype
    for t in range(start, start + steps):
        for ps, gs in zip(params, make_grads(t, shapes, dt)):
            for p, g in zip(ps, gs):
                p.grad = g.to(p.device)
        opt.step()


def bits(t):
    """A tensor's bits, comparable with torch.equal whatever its dtype (NaN payloads included)."""
    t = t.detach().cpu().contiguous()
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32) if t.element_size() == 4 else t


def same_bits(a, b):
    return torch.equal(bits(a), bits(b))


def flat(params):
    return [p for grp in params for p in grp]


def numpy_of(t):
    """A CPU tensor's memory as numpy (bf16 as uint16 bits)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


class DirectC:
    """libcollage driven directly: the parameters concatenated into one slab in group order, one
    optimizer per param group over its range of the slab (a shard: index0, total) with one library group
    per tensor (its weight decay), and a whole-slab optimizer with the same per-tensor groups that gives
    the slab's Σg² (collage_adamw_grad_sumsq); each step, every group's optimizer is stepped with its lr
    and that Σg² (collage_adamw_step_sumsq)."""

    def __init__(self, strategy, params, group_hp, lr, betas, eps, clip, seed, edq=True):
        s = collage.strategy(strategy)
        self.s, self.lr = s, lr
        self.np_dtype = np.float32 if s.weights.format == "fp32" else np.uint16
        tensors = [(gi, p) for gi, grp in enumerate(params) for p in grp]
        self.total = sum(p.numel() for _, p in tensors)
        self.layout, at = [], 0
        for gi, p in tensors:
            self.layout.append((gi, at, p.numel()))
            at += p.numel()
        self._keep = []
        self.whole = self._create(s, 0, self.total, self._groups(range(len(tensors)), group_hp), betas, eps, clip,
                                  seed, edq)
        self.opts = []
        for gi in range(len(params)):
            ids = [i for i, (g, _, _) in enumerate(self.layout) if g == gi]
            a = self.layout[ids[0]][1]
            n = sum(self.layout[i][2] for i in ids)
            o = self._create(s, a, n, self._groups(ids, group_hp), betas, group_hp[gi].get("eps", eps), clip, seed, edq)
            w = np.concatenate([numpy_of(tensors[i][1]).reshape(-1) for i in ids])
            ctypes.memmove(_lib.lib.collage_adamw_params(o), w.ctypes.data, w.nbytes)
            self.opts.append((o, a, n, group_hp[gi].get("lr", lr)))

    def _groups(self, ids, group_hp):
        arr = (_lib.ParamGroup * len(ids))()
        for k, i in enumerate(ids):
            gi, off, n = self.layout[i]
            arr[k] = _lib.ParamGroup(name=f"t{i}".encode(), offset=off, count=n,
                                     weight_decay=group_hp[gi].get("weight_decay", 0.0))
        self._keep.append(arr)
        return arr

    def _create(self, s, index0, n, groups, betas, eps, clip, seed, edq):
        cfg = _lib.AdamWConfig(strategy=s.index, n=n, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=0.0,
                               groups=groups, n_groups=len(groups), clip=clip, edq=int(edq), seed=seed,
                               index0=index0, total=self.total)
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.collage_adamw_create(ctypes.byref(cfg), ctypes.byref(h)), "create")
        self._keep.append(h)
        return h

    def step(self, grads):
        g = np.concatenate([numpy_of(x).reshape(-1) for grp in grads for x in grp]).astype(self.np_dtype)
        s = ctypes.c_double()
        _lib.check(_lib.lib.collage_adamw_grad_sumsq(self.whole, g.ctypes.data, ctypes.byref(s)), "grad_sumsq")
        self.edq = []  # each group optimizer's EDQ of this step
        for o, a, n, lr in self.opts:
            st = _lib.StepStats()
            _lib.check(_lib.lib.collage_adamw_step_sumsq(o, g[a:].ctypes.data, lr, s.value, ctypes.byref(st)), "step")
            self.edq.append(st.edq)
        return s.value

    def word(self, role, index):
        """Tensor `index` (slab order) of the word of role `role` (None: θ), as numpy."""
        gi, off, n = self.layout[index]
        o, a, _, _ = self.opts[gi]
        fmt = self.s.weights.format if role is None else next(w.format for w in self.s.words if w.role == role)
        dt = {"fp32": np.float32, "bf16": np.uint16, "int16": np.int16, "byte": np.int8}[fmt]
        ptr = _lib.lib.collage_adamw_params(o) if role is None else _lib.lib.collage_adamw_word(o, role)
        buf = (ctypes.c_char * (n * np.dtype(dt).itemsize)).from_address(ptr + (off - a) * np.dtype(dt).itemsize)
        return np.frombuffer(buf, dtype=dt).copy()

    def close(self):
        for o in [self.whole] + [o for o, _, _, _ in self.opts]:
            _lib.lib.collage_adamw_free(o)


# the strategies collage.torch steps: all but the fp16 ones (test_bad_input checks their refusal)
STRATEGIES = [s.name for s in collage.strategies() if s.weights.format != "fp16"]


def torch_lines_or_skip(name):
    import pytest
    if name not in _lines.STRATEGY_LINES:
        pytest.skip(f"'{name}' has no torch lines (python/collage/torch/_lines.py): CPU only, through libcollage")
