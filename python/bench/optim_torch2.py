"""collage.torch.AdamW against PyTorch 2's fastest CPU AdamW, on GPT-2 124M's parameters (148 tensors),
in one process, taken in interleaved rounds (median of the rounds), on the threads the process has.

Part 1 (default): the optimizer step alone (clipping to 1.0 included: collage's Σg² in its step,
torch's clip_grad_norm_ before its step), random gradients. collage.torch.AdamW for each --precision,
beside torch.optim.AdamW with fused=True and with foreach=True on fp32 and on bf16 parameters. Each
step's memory bound: the bytes it reads and writes per parameter (collage: every word of the strategy
read and written, the bf16 gradient read by the step and by Σg²; torch: p, exp_avg, exp_avg_sq read and
written, the gradient read by the step and by the norm, and read and written by the clipping) at the
rate of two streams measured in the same rounds: torch's copy_ of a 256 MiB fp32 tensor into another,
and the in-place a.add_(b, alpha=s) over two of them (read a and b, write a: 12 bytes an element, the
pattern of an optimizer's step, which writes its words where it read them, and of `collage bench
optimizer`'s bound). The copy's destination is read into the cache before it is written, bytes that
its rate does not count; "x bound" is against the in-place stream's rate, "x copy" against the copy's.

Part 2 (--train): a whole training step of a GPT-2 124M in torch (python/bench/e2e_gpt2.py's model,
pure bf16, or fp32 for torch's fp32 rows) at batch B and sequence T, with each optimizer: the forward
and backward, the optimizer (clipping and step) and their sum.

    PY=/work/cache/torch2/venv/bin/python
    COLLAGE_LIB=build/libcollage.so $PY python/bench/optim_torch2.py [--rounds 7] [--precision LIST] [--json]
    COLLAGE_LIB=build/libcollage.so $PY python/bench/optim_torch2.py --train [--batch 4] [--seq 64] [--rounds 5]
"""

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import collage  # noqa: E402
import collage.torch as ct  # noqa: E402
from collage import _lib  # noqa: E402
from adamw import BETAS, CLIP, LR, WD, cpu_name, gpt2_shapes, grads_for, groups, params_of  # noqa: E402

PRECISIONS = "bf16,collage-light,bf16-sr,bf16-master"
TORCH_FORMS = (("fp32", torch.float32, "fused"), ("fp32", torch.float32, "foreach"),
               ("bf16", torch.bfloat16, "fused"), ("bf16", torch.bfloat16, "foreach"))


def collage_bytes(name):
    """Bytes one clipped step reads and writes per parameter: each word besides the gradient read and
    written, the gradient read twice (Σg², the step)."""
    s = collage.strategy(name)
    grad = 4 if s.weights.format == "fp32" else 2
    return 2 * (s.bytes_per_param - grad) + 2 * grad


def torch_bytes(dtype):
    """torch.optim.AdamW after clip_grad_norm_: p, exp_avg, exp_avg_sq read and written, the gradient read
    by the norm, read and written by the clipping, read by the step."""
    e = torch.finfo(dtype).bits // 8
    return 3 * 2 * e + 4 * e


def torch_opt(params_or_groups, form):
    return torch.optim.AdamW(params_or_groups, lr=LR, betas=BETAS, weight_decay=WD,
                             fused=form == "fused", foreach=form == "foreach")


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_bench(a, head):
    shapes = gpt2_shapes()
    n = sum(math.prod(sh) for sh, _ in shapes)
    cands, bytes_of = {}, {}
    shared = None  # the collage steps read their gradients only: one set serves them all
    for name in a.precision.split(","):
        ps = params_of(shapes, torch.bfloat16)
        if shared is None:
            grads_for(ps)
            shared = [p.grad for p in ps]
        for p, g in zip(ps, shared):
            p.grad = g
        o = ct.AdamW(groups(ps, shapes), precision=name, lr=LR, betas=BETAS, weight_decay=WD, max_grad_norm=CLIP)
        cands[f"collage {name}"], bytes_of[f"collage {name}"] = o.step, collage_bytes(name)
    for label, dt, form in TORCH_FORMS:
        ps = params_of(shapes, dt)
        grads_for(ps)  # clip_grad_norm_ scales them in place: each torch step has its own
        o = torch_opt(groups(ps, shapes), form)

        def step(o=o, ps=ps, form=form):
            torch.nn.utils.clip_grad_norm_(ps, CLIP, foreach=True)
            o.step()
        cands[f"torch {label} {form}"], bytes_of[f"torch {label} {form}"] = step, torch_bytes(dt)
    src = torch.ones(64 << 20, dtype=torch.float32)  # 256 MiB
    dst = torch.empty_like(src)
    cands["copy"] = lambda: dst.copy_(src)
    cands["stream"] = lambda: dst.add_(src, alpha=0.5)
    times = {k: [] for k in cands}
    for fn in cands.values():  # warm-up: the state's first touch
        fn()
    for _ in range(a.rounds):
        for k, fn in cands.items():
            times[k].append(timed(fn))
    copy_gbps = 2 * src.numel() * 4 / statistics.median(times["copy"]) * 1e-9
    stream_gbps = 3 * src.numel() * 4 / statistics.median(times["stream"]) * 1e-9
    rows = []
    for k, ts in times.items():
        if k in ("copy", "stream"):
            continue
        med = statistics.median(ts)
        bound = bytes_of[k] * n / (stream_gbps * 1e9)
        rows.append({"what": k, "ms": med * 1e3, "ns_per_param": med / n * 1e9, "bytes_per_param": bytes_of[k],
                     "bound_ms": bound * 1e3, "x_bound": med / bound,
                     "x_copy": med / (bytes_of[k] * n / (copy_gbps * 1e9)), "rounds_ms": [round(t * 1e3, 1) for t in ts]})
    if a.json:
        print(json.dumps({**head, "part": "step", "params": n, "tensors": len(shapes), "copy_gbps": copy_gbps,
                          "stream_gbps": stream_gbps, "copy_rounds_ms": [round(t * 1e3, 1) for t in times["copy"]],
                          "stream_rounds_ms": [round(t * 1e3, 1) for t in times["stream"]], "rows": rows}))
        return
    print(f"optimizer step, GPT-2 124M ({n:,} parameters, {len(shapes)} tensors), clipping {CLIP}; {head['date']}; "
          f"{head['cpu']}; {head['threads']} threads; torch {head['torch']}; median of {a.rounds} rounds")
    print(f"in-place stream (a.add_(b), 2 x 256 MiB): {stream_gbps:.1f} GB/s; copy (copy_, 256 MiB): "
          f"{copy_gbps:.1f} GB/s; read + written\n")
    print(f"  {'':28s} {'ms/step':>9s} {'ns/param':>9s} {'B/param':>8s} {'bound ms':>9s} {'x bound':>8s} {'x copy':>7s}")
    for r in rows:
        print(f"  {r['what']:28s} {r['ms']:9.1f} {r['ns_per_param']:9.2f} {r['bytes_per_param']:8g} "
              f"{r['bound_ms']:9.1f} {r['x_bound']:8.2f} {r['x_copy']:7.2f}")


def train_bench(a, head):
    from e2e_gpt2 import GPT
    V = 50257
    torch.manual_seed(0)
    start = GPT().state_dict()
    models = {}
    for dt in (torch.bfloat16, torch.float32):
        m = GPT()
        m.load_state_dict(start)
        models[dt] = m.to(dt)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (a.batch, a.seq), generator=g)
    y = torch.randint(0, V, (a.batch, a.seq), generator=g)

    def param_groups(m):
        return [dict(params=[p for p in m.parameters() if p.dim() > 1], weight_decay=WD),
                dict(params=[p for p in m.parameters() if p.dim() <= 1], weight_decay=0.0)]

    cands = {}  # each: (model, optimizer, clips itself); every optimizer of a dtype steps that model's weights
    for name in a.precision.split(","):
        m = models[torch.bfloat16]
        cands[f"collage {name}"] = (m, ct.AdamW(param_groups(m), precision=name, lr=LR, betas=BETAS,
                                                  max_grad_norm=CLIP), True)
    for label, dt, form in TORCH_FORMS:
        m = models[dt]
        cands[f"torch {label} {form}"] = (m, torch_opt(param_groups(m), form), False)

    def one(m, opt, clips):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x).view(-1, V), y.view(-1))
        loss.backward()
        t1 = time.perf_counter()
        if not clips:
            torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP, foreach=True)
        opt.step()
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    times = {k: [] for k in cands}
    for c in cands.values():
        one(*c)
    for _ in range(a.rounds):
        for k, c in cands.items():
            times[k].append(one(*c))
    rows = []
    for k, ts in times.items():
        fb, op, tot = (statistics.median(v) for v in ([t[0] for t in ts], [t[1] for t in ts], [sum(t) for t in ts]))
        rows.append({"what": k, "fwd_bwd_ms": fb * 1e3, "optimizer_ms": op * 1e3, "step_ms": tot * 1e3,
                     "optimizer_share": op / tot})
    n = sum(p.numel() for p in models[torch.bfloat16].parameters())
    if a.json:
        print(json.dumps({**head, "part": "train", "batch": a.batch, "seq": a.seq, "params": n, "rows": rows}))
        return
    print(f"training step, GPT-2 124M in torch ({n:,} parameters, lm_head tied), B {a.batch}, T {a.seq}; "
          f"{head['date']}; {head['cpu']}; {head['threads']} threads; torch {head['torch']}; median of {a.rounds} "
          "rounds\n")
    print(f"  {'':28s} {'fwd+bwd ms':>11s} {'optimizer ms':>13s} {'step ms':>9s} {'optimizer share':>16s}")
    for r in rows:
        print(f"  {r['what']:28s} {r['fwd_bwd_ms']:11.1f} {r['optimizer_ms']:13.1f} {r['step_ms']:9.1f} "
              f"{100 * r['optimizer_share']:15.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", default=PRECISIONS)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)
    _lib.lib.collage_set_threads(threads)
    head = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu_name(),
            "threads": threads, "torch": torch.__version__, "collage": collage.__version__}
    (train_bench if a.train else step_bench)(a, head)


if __name__ == "__main__":
    main()
