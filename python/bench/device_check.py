"""On a machine with a CUDA GPU: collage.torch.AdamW on the GPU against libcollage's step on the CPU, bit
for bit, for every strategy (100 steps, three param groups, clipping, weight decay), through
libcollage_cuda (--backend auto, `make CUDA=1`) or the torch lines (--backend torch); a state saved on the
GPU resumed on the CPU; and the step's time on GPT-2 124M's tensors on the GPU beside torch.optim.AdamW
(fp32 fused; bf16 foreach and fused) and the torch lines. Prints one line per check (and with --json FILE
the figures as JSON) and exits 1 on a difference, 0 when everything is equal, and 77 (the skip status of
automake's test drivers) when there is no CUDA device: nothing was checked, neither a pass nor a failure.

    COLLAGE_LIB=build/libcollage.so python3 python/bench/device_check.py [--steps 100] [--backend auto|torch]
        [--no-timing] [--json FILE]
"""

import argparse
import io
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests")]
import collage  # noqa: E402
import collage.torch as ct  # noqa: E402
from helpers import flat, make_opt, make_params, run, same_bits  # noqa: E402


def on(params, device):
    return [[torch.nn.Parameter(p.detach().to(device)) for p in grp] for grp in params]


def compare(name, pa, oa, pb, ob):
    bad = []
    for i, (a, b) in enumerate(zip(flat(pa), flat(pb))):
        if not same_bits(a, b):
            bad.append(f"θ{i}")
        for k, v in oa.state[a].items():
            w = ob.state[b][k]
            if (torch.is_tensor(v) and not same_bits(v, w)) or (not torch.is_tensor(v) and v != w):
                bad.append(f"{k}{i}")
    return bad


def check_strategy(name, steps, dev, backend):
    cpu = make_params(name)
    gpu = on(cpu, dev)
    oc = make_opt(cpu, name, "c")
    og = make_opt(gpu, name, backend)
    run(oc, cpu, steps)
    run(og, gpu, steps)
    bad = compare(name, cpu, oc, gpu, og)
    same_norm = oc.last_stats["grad_norm"] == og.last_stats["grad_norm"]
    e1, e2 = oc.last_stats["edq"], og.last_stats["edq"]
    norms = "equal" if same_norm else f"{oc.last_stats['grad_norm']!r} vs {og.last_stats['grad_norm']!r}"
    words = "every word equal" if not bad else "differ: " + ", ".join(bad[:8])
    print(f"{'ok  ' if not bad and same_norm else 'DIFF'} {name:18s} C on CPU vs {backend} on {dev}, {steps} steps: "
          f"{words}; grad norm {norms}; lost {e1['lost']:.4f} / {e2['lost']:.4f}")
    return not bad and same_norm


def check_resume(name, dev, backend, first=30, rest=20):
    ref = make_params(name)
    oref = make_opt(ref, name, "c")
    run(oref, ref, first + rest)
    gpu = on(make_params(name), dev)
    og = make_opt(gpu, name, backend)
    run(og, gpu, first)
    buf = io.BytesIO()
    torch.save({"w": [p.detach().cpu() for p in flat(gpu)], "opt": og.state_dict()}, buf)
    buf.seek(0)
    try:  # torch 2.6 and later load tensors only by default
        saved = torch.load(buf, map_location="cpu", weights_only=False)
    except TypeError:
        saved = torch.load(buf, map_location="cpu")
    cpu = make_params(name, seed=5)
    with torch.no_grad():
        for p, v in zip(flat(cpu), saved["w"]):
            p.copy_(v)
    oc = make_opt(cpu, name, "c")
    oc.load_state_dict(saved["opt"])
    run(oc, cpu, rest, start=first)
    bad = compare(name, ref, oref, cpu, oc)
    print(f"{'ok  ' if not bad else 'DIFF'} {name:18s} {first} steps on {dev}, saved, {rest} more on the CPU: "
          f"{'as an unbroken CPU run' if not bad else ', '.join(bad[:8])}")
    return not bad


def timing(dev, names, backend):
    sys.path.insert(0, HERE)
    from adamw import gpt2_shapes, groups, params_of
    shapes = gpt2_shapes()
    n = sum(int(torch.Size(sh).numel()) for sh, _ in shapes)

    def on_dev(ps):
        ps = [torch.nn.Parameter(p.detach().to(dev)) for p in ps]
        for p in ps:
            p.grad = torch.randn_like(p, dtype=torch.float32).mul_(1e-3).to(p.dtype)
        return ps

    def clock(step, reps=10, rounds=3):
        """(wall, gpu) ms a step. wall: reps steps back to back, the median of rounds: the host's work
        and the device's, whichever is longer. gpu: the device's time alone: each step queued behind a
        25 ms device sleep (the host has queued all of it when the device reaches it), between two events;
        the median of rounds × 2 steps."""
        step()
        torch.cuda.synchronize()
        walls, gpus = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(reps):
                step()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) / reps * 1e3)
        for _ in range(2 * rounds if hasattr(torch.cuda, "_sleep") else 0):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(50_000_000)
            e0.record()
            step()
            e1.record()
            torch.cuda.synchronize()
            gpus.append(e0.elapsed_time(e1))
        return sorted(walls)[len(walls) // 2], sorted(gpus)[len(gpus) // 2] if gpus else float("nan")

    res, gpu = {}, {}
    for label, dt, make in (
            ("torch.optim.AdamW fp32 fused", torch.float32, lambda ps: torch.optim.AdamW(groups(ps, shapes), lr=6e-4,
                                                                                        fused=True)),
            ("torch.optim.AdamW bf16 foreach", torch.bfloat16, lambda ps: torch.optim.AdamW(groups(ps, shapes), lr=6e-4,
                                                                                           foreach=True)),
            ("torch.optim.AdamW bf16 fused", torch.bfloat16, lambda ps: torch.optim.AdamW(groups(ps, shapes), lr=6e-4,
                                                                                         fused=True))):
        ps = on_dev(params_of(shapes, dt))
        o = make(ps)

        def step(o=o, ps=ps):
            torch.nn.utils.clip_grad_norm_(ps, 1.0)
            o.step()
        res[label], gpu[label] = clock(step)
        del o, ps
    for name in names:
        s = collage.strategy(name)
        ps = on_dev(params_of(shapes, torch.float32 if s.weights.format == "fp32" else torch.bfloat16))
        # the torch lines once, for collage-light (a launch per operation per tensor: seconds a step)
        for be in dict.fromkeys((backend, "torch") if name == "collage-light" else (backend,)):
            o = ct.AdamW(groups(ps, shapes), precision=name, lr=6e-4, max_grad_norm=1.0, backend=be)
            label = f"collage.torch.AdamW {name} ({be})"
            if be == "torch":  # seconds of host work a step: its wall time only
                res[label] = clock(o.step, reps=2, rounds=1)[0]
            else:
                res[label], gpu[label] = clock(o.step, reps=5)
            if name == "collage-light" and be != "torch":
                host_profile(o.step, f"collage.torch.AdamW {name} ({be})")
            del o
        if name == "collage-light":  # the step without clipping (no Σg² round trip through the host)
            o = ct.AdamW(groups(ps, shapes), precision=name, lr=6e-4, max_grad_norm=None, backend=backend)
            label = f"collage.torch.AdamW {name} ({backend}, no clipping)"
            res[label], gpu[label] = clock(o.step, reps=5)
            del o
        del ps
    print(f"GPT-2 124M ({n:,} parameters, 148 tensors) on {torch.cuda.get_device_name()}, torch {torch.__version__}:")
    print(f"  {'':48s} {'wall':>9s} {'device':>9s}  (ms a step; wall: steps back to back, device: its own time)")
    for k, v in res.items():
        print(f"  {k:48s} {v:9.2f} {gpu[k] if k in gpu else float('nan'):9.3f}")
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "parameters": n, "tensors": len(shapes),
            "ms_per_step": res, "device_ms_per_step": gpu}


def host_profile(step, what, reps=5):
    """Where a step's time goes on the host: cProfile over reps steps, the 14 largest by own time."""
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(reps):
        step()
    torch.cuda.synchronize()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(14)
    print(f"host profile of {reps} steps of {what}:")
    print(buf.getvalue())


SKIP = 77


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--backend", choices=("auto", "torch"), default="auto",
                    help="auto: libcollage_cuda (make CUDA=1); torch: the torch lines")
    ap.add_argument("--json", help="write the results here as JSON")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(f"skip: no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False): nothing was checked")
        return SKIP
    dev = torch.device("cuda")
    ok, out = True, {"backend": a.backend, "checks": {}}
    for s in collage.strategies():
        if s.weights.format != "fp16" and (a.backend != "torch" or s.name in ct._lines.STRATEGY_LINES):
            out["checks"][s.name] = bool(check_strategy(s.name, a.steps, dev, a.backend))
            ok &= out["checks"][s.name]
    for name in ("collage-plus", "bf16-sr", "bf16-remainder", "bf16-master"):
        out["checks"][f"resume {name}"] = bool(check_resume(name, dev, a.backend))
        ok &= out["checks"][f"resume {name}"]
    if not a.no_timing:
        out["timing"] = timing(dev, ["bf16", "collage-light", "bf16-sr", "collage-plus", "bf16-master"], a.backend)
    out["all_equal"] = bool(ok)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    print("all equal" if ok else "DIFFERENCES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
