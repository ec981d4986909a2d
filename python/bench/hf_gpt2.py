"""A transformers GPT-2 124M (GPT2LMHeadModel of GPT2Config's defaults: 12 layers, 768 wide, 50257 tokens,
lm_head tied) trained on the CPU in two precisions: collage-light in pure bf16 (the model built in bf16,
collage.torch.AdamW, no autocast, no fp32 copy) against the usual mixed precision, what Trainer's
bf16=True does (fp32 weights, the forward under torch.autocast(bf16), torch.optim.AdamW fused or
foreach, clip_grad_norm_ before its step). Random tokens, batch B, sequence T, on --threads threads.

Each configuration runs in a process of its own, so that its peak resident memory (VmHWM) is its own:
"peak" is the whole process's (the interpreter, torch and transformers included), "above imports" the
peak less the process's peak before the model is built. Step times: the median over --steps steps after
--warmup steps; --rounds runs every configuration that many times, interleaved, and takes the median of
the rounds. Ratios are collage-light's figure over each mixed-precision configuration's. The children
inherit the environment: glibc's MALLOC_MMAP_THRESHOLD_=65536, for one, has freed large blocks returned
to the system at once instead of reused in place, which changes the peaks (not the arithmetic).

    COLLAGE_LIB=build/libcollage.so $PY python/bench/hf_gpt2.py [--batch 4] [--seq 64] [--threads 2]
        [--steps 4] [--warmup 1] [--rounds 1] [--json FILE]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ("collage-light", "mixed, fused", "mixed, foreach")
LR, BETAS, WD, CLIP = 6e-4, (0.9, 0.95), 0.1, 1.0


def peak_kib():
    """This process's peak resident set (VmHWM) in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(a):
    """One configuration in this process: returns its step times and peaks as a dict."""
    import torch
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers
    sys.path.insert(0, os.path.join(HERE, ".."))
    import collage.torch as ct
    from collage import _lib
    torch.set_num_threads(a.threads)
    _lib.lib.collage_set_threads(a.threads)
    base = peak_kib()
    torch.manual_seed(0)
    pure = a.child == "collage-light"
    cfg = transformers.GPT2Config()  # the 124M model
    # built in its training dtype, so that no fp32 copy of a bf16 model ever exists
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16 if pure else torch.float32)
    model.train()
    stages = {"model": peak_kib() / 1024}
    if pure:
        opt = ct.AdamW(model.named_parameters(), precision="collage-light", lr=LR, betas=BETAS, weight_decay=WD,
                       max_grad_norm=CLIP)
    else:
        fused = a.child.endswith("fused")
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD, fused=fused,
                                foreach=not fused)
    stages["optimizer"] = peak_kib() / 1024
    n = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    fb, op, losses = [], [], []
    for step in range(a.warmup + a.steps):
        x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g)
        t0 = time.perf_counter()
        if pure:
            loss = model(input_ids=x, labels=x).loss
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
        loss.backward()
        t1 = time.perf_counter()
        if not pure:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)  # collage's clipping is inside its step
        opt.step()
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        losses.append(loss.item())
        if step == 0:
            stages["first step"] = peak_kib() / 1024
        if step >= a.warmup:
            fb.append(t1 - t0)
            op.append(t2 - t1)
    return {"config": a.child, "params": n, "dtype": str(next(model.parameters()).dtype),
            "fwd_bwd_ms": 1e3 * statistics.median(fb), "opt_ms": 1e3 * statistics.median(op),
            "step_ms": 1e3 * statistics.median(f + o for f, o in zip(fb, op)),
            "steps_ms": [round(1e3 * (f + o), 1) for f, o in zip(fb, op)], "losses": losses,
            "peak_mib": peak_kib() / 1024, "imports_mib": base / 1024, "stages_mib": stages}


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def run_child(a, config):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config] + [
        f"--{k}={getattr(a, k)}" for k in ("batch", "seq", "threads", "steps", "warmup")]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"hf_gpt2: the {config} process failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="timed steps, after the warm-up")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a)))
        return
    import torch
    import transformers
    head = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu_name(),
            "cores": os.cpu_count(), "threads": a.threads, "torch": torch.__version__,
            "transformers": transformers.__version__, "batch": a.batch, "seq": a.seq, "steps": a.steps,
            "warmup": a.warmup, "rounds": a.rounds, "load_before": os.getloadavg()}
    runs = {c: [] for c in CONFIGS}
    for _ in range(a.rounds):
        for c in CONFIGS:
            runs[c].append(run_child(a, c))
    head["load_after"] = os.getloadavg()
    rows = []
    for c in CONFIGS:
        rs = runs[c]
        rows.append({"config": c, "params": rs[0]["params"], "dtype": rs[0]["dtype"],
                     **{k: statistics.median(r[k] for r in rs)
                        for k in ("step_ms", "fwd_bwd_ms", "opt_ms", "peak_mib", "imports_mib")},
                     "rounds_step_ms": [round(r["step_ms"], 1) for r in rs],
                     "rounds_peak_mib": [round(r["peak_mib"], 1) for r in rs],
                     "rounds_steps_ms": [r["steps_ms"] for r in rs], "rounds_stages_mib": [r["stages_mib"] for r in rs],
                     "losses": rs[0]["losses"]})
    for r in rows:
        r["above_imports_mib"] = r["peak_mib"] - r["imports_mib"]
    print(f"transformers GPT-2 ({rows[0]['params']:,} parameters), B {a.batch}, T {a.seq}, random tokens; "
          f"{head['date']}; {head['cpu']}; {head['cores']} cores, {a.threads} threads; torch {head['torch']}, "
          f"transformers {head['transformers']}; medians of {a.steps} steps after {a.warmup}, {a.rounds} rounds; "
          f"load average {head['load_before'][0]:.2f} before, {head['load_after'][0]:.2f} after")
    print(f"| {'configuration':16s} | weights | fwd+bwd ms | optimizer ms | step ms | peak MiB | above imports MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']:16s} | {r['dtype'].replace('torch.', ''):8s} | {r['fwd_bwd_ms']:10.1f} | "
              f"{r['opt_ms']:12.1f} | {r['step_ms']:7.1f} | {r['peak_mib']:8.1f} | {r['above_imports_mib']:17.1f} |")
    c = rows[0]
    print("\n| collage-light against | step time | peak | peak above imports |")
    print("|---|---|---|---|")
    for r in rows[1:]:
        print(f"| {r['config']:16s} | {c['step_ms'] / r['step_ms']:.2f}× | {c['peak_mib'] / r['peak_mib']:.2f}× | "
              f"{c['above_imports_mib'] / r['above_imports_mib']:.2f}× |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"head": head, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
