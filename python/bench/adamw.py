"""The optimizer step on the parameters of GPT-2 124M (Hugging Face's 148 tensors, 124.4M parameters) on
CPU: collage.torch.AdamW beside libcollage's own step over one slab of the same sizes (one library
group per tensor, the same clipping and weight decay), and torch.optim.AdamW on fp32 and on bf16
parameters (a loop over the tensors, and foreach: each operation over all tensors at once), taken in
alternating rounds in one run; the median of the rounds, and each one's ratio to the library's step.

    /usr/bin/python3 python/bench/adamw.py [--strategy collage-light,collage-plus] [--rounds 5] [--json]
        [--threads T] [--torch-path]   also the torch path of collage.torch.AdamW on CPU (slow: one kernel per line)
"""

import argparse
import ctypes
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import collage  # noqa: E402
import collage.torch as ct  # noqa: E402
from collage import _lib  # noqa: E402

LR, WD, CLIP, BETAS = 6e-4, 0.1, 1.0, (0.9, 0.95)


def gpt2_shapes(V=50257, T=1024, C=768, L=12):
    """GPT2LMHeadModel's parameters (lm_head tied), and whether each takes weight decay."""
    s = [((V, C), 1), ((T, C), 1)]
    for _ in range(L):
        s += [((C,), 0), ((C,), 0), ((C, 3 * C), 1), ((3 * C,), 0), ((C, C), 1), ((C,), 0), ((C,), 0), ((C,), 0),
              ((C, 4 * C), 1), ((4 * C,), 0), ((4 * C, C), 1), ((C,), 0)]
    return s + [((C,), 0), ((C,), 0)]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def params_of(shapes, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter((torch.randn(sh, generator=g) * 0.02).to(dtype)) for sh, _ in shapes]


def grads_for(params, seed=2):
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=g) * 1e-3).to(p.dtype)


def groups(params, shapes):
    return [{"params": [p for p, (_, d) in zip(params, shapes) if d], "weight_decay": WD},
            {"params": [p for p, (_, d) in zip(params, shapes) if not d], "weight_decay": 0.0}]


class LibraryStep:
    """libcollage's step over one slab of the same tensors: one library group per tensor."""

    def __init__(self, strategy, shapes):
        s = collage.strategy(strategy)
        self.n = sum(math.prod(sh) for sh, _ in shapes)
        arr, at = (_lib.ParamGroup * len(shapes))(), 0
        for k, (sh, d) in enumerate(shapes):
            arr[k] = _lib.ParamGroup(name=b"t", offset=at, count=math.prod(sh), weight_decay=WD if d else 0.0)
            at += math.prod(sh)
        self._groups = arr
        cfg = _lib.AdamWConfig(strategy=s.index, n=self.n, beta1=BETAS[0], beta2=BETAS[1], eps=1e-8, groups=arr,
                               n_groups=len(shapes), clip=CLIP, seed=1)
        self.h = ctypes.c_void_p()
        _lib.check(_lib.lib.collage_adamw_create(ctypes.byref(cfg), ctypes.byref(self.h)), "create")
        es = 4 if s.weights.format == "fp32" else 2
        self.g = (np.random.default_rng(2).standard_normal(self.n).astype(np.float32) * 1e-3)
        if es == 2:
            self.g = torch.from_numpy(self.g).to(torch.bfloat16).view(torch.int16).numpy()
        w = torch.from_numpy(np.random.default_rng(1).standard_normal(self.n).astype(np.float32) * 0.02)
        _lib.lib.collage_adamw_set_weights_f32(self.h, w.numpy().ctypes.data, self.n)

    def step(self):
        _lib.check(_lib.lib.collage_adamw_step(self.h, self.g.ctypes.data, LR, None), "step")

    def close(self):
        _lib.lib.collage_adamw_free(self.h)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strategy", default="collage-light")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--torch-path", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="for libcollage and torch alike")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    _lib.lib.collage_set_threads(a.threads)
    shapes = gpt2_shapes()
    n = sum(math.prod(sh) for sh, _ in shapes)
    head = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu_name(),
            "cores": os.cpu_count(), "threads": a.threads, "torch": torch.__version__,
            "collage": collage.__version__, "params": n, "tensors": len(shapes)}
    if not a.json:
        print(f"optimizer step, GPT-2 124M ({n:,} parameters in {len(shapes)} tensors), clipping {CLIP}, "
              f"weight decay {WD} on matrices; {head['date']}; {head['cpu']}; {head['cores']} cores; {a.threads} "
              f"threads for libcollage and torch {head['torch']}; median of {a.rounds} rounds")
    for name in a.strategy.split(","):
        s = collage.strategy(name)
        wdt = torch.float32 if s.weights.format == "fp32" else torch.bfloat16
        cands = {}
        lib = LibraryStep(name, shapes)
        cands["libcollage step (one slab)"] = lib.step
        pc = params_of(shapes, wdt)
        grads_for(pc)
        oc = ct.AdamW(groups(pc, shapes), precision=name, lr=LR, betas=BETAS, weight_decay=WD, max_grad_norm=CLIP)
        cands["collage.torch.AdamW"] = oc.step
        if a.torch_path:
            pt = params_of(shapes, wdt)
            grads_for(pt)
            ot = ct.AdamW(groups(pt, shapes), precision=name, lr=LR, betas=BETAS, weight_decay=WD, max_grad_norm=CLIP,
                          backend="torch")
            cands["collage.torch.AdamW, torch path"] = ot.step
        for label, dt, fe in (("torch.optim.AdamW fp32", torch.float32, False),
                              ("torch.optim.AdamW fp32, foreach", torch.float32, True),
                              ("torch.optim.AdamW bf16", torch.bfloat16, False),
                              ("torch.optim.AdamW bf16, foreach", torch.bfloat16, True)):
            ps = params_of(shapes, dt)
            grads_for(ps)
            o = torch.optim.AdamW(groups(ps, shapes), lr=LR, betas=BETAS, weight_decay=WD, foreach=fe)

            def step(o=o, ps=ps):
                torch.nn.utils.clip_grad_norm_(ps, CLIP)
                o.step()
            cands[label] = step
        times = {k: [] for k in cands}
        for k, fn in cands.items():  # warm-up: first-touch of the state
            fn()
        for _ in range(a.rounds):
            for k, fn in cands.items():
                times[k].append(timed(fn))
        lib.close()
        ref = statistics.median(times["libcollage step (one slab)"])
        rows = []
        for k, ts in times.items():
            med = statistics.median(ts)
            rows.append({"strategy": name, "what": k, "ms": med * 1e3, "ns_per_param": med / n * 1e9,
                         "vs_library": med / ref, "rounds_ms": [round(t * 1e3, 1) for t in ts]})
        if a.json:
            for r in rows:
                print(json.dumps({**head, **r}))
        else:
            print(f"\n{name} ({s.bytes_per_param:g} bytes/param of training state)")
            print(f"  {'':36s} {'ms/step':>9s} {'ns/param':>9s} {'vs library':>11s}")
            for r in rows:
                print(f"  {r['what']:36s} {r['ms']:9.1f} {r['ns_per_param']:9.2f} {r['vs_library']:10.3f}x")
        del cands, oc, pc


if __name__ == "__main__":
    main()
