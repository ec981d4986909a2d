#!/usr/bin/env python3
"""memfit.py — the largest GPT-2-shaped model each precision strategy can train in a given memory.

The prediction is the library's own memory report (what `collage train` prints before its first step:
weights, optimizer state, gradients, activations, scratch) plus the process's fixed overhead:
  peak = n·(weight + state bytes per parameter of the strategy)      (the strategy table)
       + gradients(L, C) + activations(L, C) + scratch(C)            (the model's report)
       + overhead                                                     (libraries, tokenizer, corpus)
The model's part is affine in the depth L at a fixed width C (a slab per layer plus the embeddings and
the logits), so `probe` reads the report at L = 1 and L = 2 of each width and extrapolates; `measure`
trains 2 steps under /usr/bin/time and compares the peak resident memory with the prediction.

  scripts/memfit.py probe [--kinds K,..]     the report at L = 1, 2 of each width, each model kind
                                             (fp32, bf16, fp8: the fp8 model at its default recipe,
                                             delayed scaling); the cache keeps the other kinds' readings
  scripts/memfit.py predict --limit-gib 22   the largest fitting shape per strategy and compute
  scripts/memfit.py measure S COMPUTE L C    2 steps of strategy S (COMPUTE bf16 or fp8; fp32 for the
                                             fp32 strategy) at L layers × C

Shapes keep GPT-2's head size 64 (heads = C / 64), its vocabulary (gpt2 tokenizer, 50257 → 50304) and
context 1024; the batch is --batch 1 --seq 1024. The probe's cache is build/memfit-probe.json; the
training text, build/memfit-data.txt, is made from the fortunes unless --data names another.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import collage  # noqa: E402  (the strategy table through libcollage)
from collage import _lib  # noqa: E402

COLLAGE = os.path.join(ROOT, "build", "collage")
CACHE = os.path.join(ROOT, "build", "memfit-probe.json")
# a small corpus (16384 training tokens), so that the evaluation after the last step reads one batch
DATA = os.path.join(ROOT, "build", "memfit-data.txt")
FORTUNES = ["/usr/share/games/fortunes/" + f for f in ("fortunes", "computers", "cookie")]
MIB = 1 << 20
GIB = 1 << 30
WIDTHS = [768, 1024, 1280, 1600, 2048, 2560]
# GPT-2's published sizes (124M, 350M, 774M, 1.5B), then wider at depth 48
FAMILY = [(12, 768), (24, 1024), (36, 1280), (48, 1600), (48, 2048), (48, 2560)]
STRATEGIES = ["fp32", "bf16-master", "collage-plus", "collage-light", "bf16-sr", "bf16", "bf16-c8",
              "bf16-sr+m=int8,v=int8,q=sr", "bf16-c8+m=int8,v=int8", "collage-light+m=int8,v=int8,q=sr"]
# the process besides the report (code, OpenMP, oneDNN, OpenBLAS, tokenizer, corpus): measured, see docs
OVERHEAD_MIB = 40
HEADER = re.compile(r"memory \(MiB\): weights ([\d.]+), optimizer state ([\d.]+), gradients ([\d.]+), "
                    r"activations ([\d.]+), scratch ([\d.]+)")


def train_args(strategy, compute, layers, width, data, steps=2):
    a = [COLLAGE, "train", "--model", "gpt2", "--tokenizer", "gpt2", "--layers", str(layers), "--heads",
         str(width // 64), "--dim", str(width), "--batch", "1", "--seq", "1024", "--steps", str(steps),
         "--precision", strategy, "--data", data]
    return a + (["--compute", "fp8"] if compute == "fp8" else [])


def model_kind(strategy, compute):
    """Which model a strategy trains: the fp32 model, or the bf16 model with bf16 or fp8 products."""
    return "fp32" if strategy == "fp32" else compute


def parse_report(text):
    """The parameter count and the report's five figures in bytes (0.1 MiB resolution)."""
    n = int(re.search(r"(\d+) parameters", text).group(1))
    w, s, g, a, x = (float(v) * MIB for v in HEADER.search(text).groups())
    return {"params": n, "weights": w, "state": s, "gradients": g, "activations": a, "scratch": x}


def report(kind, layers, width, data):
    """The memory report of a model of this kind and shape: the header of a run stopped before its first
    step (its weights are made, its activations' slab is allocated but not touched)."""
    strategy = "fp32" if kind == "fp32" else "collage-light"
    args = ["stdbuf", "-oL", "nice", "-n", "19"] + train_args(strategy, kind, layers, width, data)
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text = ""
    for line in p.stdout:
        text += line
        if "memory (MiB)" in line:
            break
    p.terminate()
    p.wait()
    return parse_report(text)


def probe(data, kinds):
    """The readings of these model kinds, put into the cache beside those it holds of the others."""
    cache = {}
    if os.path.exists(CACHE):
        with open(CACHE) as f:
            cache = json.load(f)
    for kind in kinds:
        for c in WIDTHS:
            r1, r2 = report(kind, 1, c, data), report(kind, 2, c, data)
            cache[f"{kind}/{c}"] = {"L1": r1, "L2": r2}
            print(kind, c, r1, r2, flush=True)
    with open(CACHE + ".tmp", "w") as f:
        json.dump(cache, f, indent=1)
    os.replace(CACHE + ".tmp", CACHE)


def strategy_bytes(strategy):
    """Weight and optimizer-state bytes per parameter (the gradient is the model's), and the table's total
    with the gradient."""
    m = _lib.lib.collage_strategy_memory(collage.strategy(strategy).index)
    return m.weights, m.compensation + m.m + m.v + m.master, m.total


def predict_one(cache, strategy, compute, layers, width):
    """Predicted bytes by part at depth `layers`: the model's parts extrapolated from L = 1, 2."""
    key = f"{model_kind(strategy, compute)}/{width}"
    if key not in cache:
        sys.exit(f"memfit: {CACHE} has no reading of {key}; run `scripts/memfit.py probe --kinds "
                 f"{model_kind(strategy, compute)}`")
    r = cache[key]
    at = {k: r["L1"][k] + (layers - 1) * (r["L2"][k] - r["L1"][k])
          for k in ("params", "gradients", "activations", "scratch")}
    wb, sb, _ = strategy_bytes(strategy)
    n = at["params"]
    parts = {"params": n, "weights": n * wb, "state": n * sb, "gradients": at["gradients"],
             "activations": at["activations"], "scratch": at["scratch"], "overhead": OVERHEAD_MIB * MIB}
    parts["total"] = sum(v for k, v in parts.items() if k != "params")
    return parts


def largest(cache, strategy, compute, limit, shapes):
    fits = [s for s in shapes if predict_one(cache, strategy, compute, *s)["total"] <= limit]
    return max(fits, key=lambda s: predict_one(cache, strategy, compute, *s)["params"]) if fits else None


def deepest(cache, strategy, compute, limit, width):
    """The most layers at this width that fit (0: none)."""
    lo = 0
    while predict_one(cache, strategy, compute, lo + 1, width)["total"] <= limit and lo < 1024:
        lo += 1
    return lo


def load_cache():
    """The probe's readings; exits naming the file and the command that makes it where it is not there."""
    try:
        with open(CACHE) as f:
            return json.load(f)
    except FileNotFoundError:
        sys.exit(f"memfit: {CACHE}: no such file; run `scripts/memfit.py probe` first (the model's memory report "
                 "at 1 and 2 layers of each width)")
    except json.JSONDecodeError as e:
        sys.exit(f"memfit: {CACHE}: not JSON ({e}); run `scripts/memfit.py probe` again")


def predict(limit_gib):
    cache = load_cache()
    limit = limit_gib * GIB
    print(f"limit {limit_gib} GiB; --batch 1 --seq 1024; overhead {OVERHEAD_MIB} MiB")
    print("| strategy | compute | state bytes/param | largest of the family | params | predicted GiB | bytes/param "
          "all told | layers at 1600 | layers at 2048 | layers at 2560 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in STRATEGIES:
        for comp in (["fp32"] if s == "fp32" else ["bf16", "fp8"]):
            bpp = strategy_bytes(s)[2]
            best = largest(cache, s, comp, limit, FAMILY)
            if not best:
                print(f"| {s} | {comp} | {bpp:.4g} | none |")
                continue
            p = predict_one(cache, s, comp, *best)
            deep = " | ".join(str(deepest(cache, s, comp, limit, c)) for c in (1600, 2048, 2560))
            print(f"| {s} | {comp} | {bpp:.4g} | {best[0]} × {best[1]} | {p['params'] / 1e9:.3f}B | "
                  f"{p['total'] / GIB:.2f} | {p['total'] / p['params']:.2f} | {deep} |")


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(strategy, compute, layers, width, data):
    cache = load_cache()
    p = predict_one(cache, strategy, compute, layers, width)
    avail = mem_available()
    if p["total"] > avail - 3 * GIB:
        sys.exit(f"memfit: predicted {p['total'] / GIB:.2f} GiB is above MemAvailable {avail / GIB:.2f} GiB less 3 GiB: "
                 "not started")
    args = ["nice", "-n", "19", "/usr/bin/time", "-f", "maxrss_kb %M"] + train_args(strategy, compute, layers, width,
                                                                                     data)
    out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    rss = int(re.search(r"maxrss_kb (\d+)", out).group(1)) * 1024
    rep = parse_report(out)
    ms = re.search(r"([\d.]+) ms/step", out)
    print(json.dumps({"strategy": strategy, "compute": compute, "layers": layers, "width": width,
                      "params": p["params"], "predicted_gib": round(p["total"] / GIB, 3),
                      "measured_gib": round(rss / GIB, 3), "diff_mib": round((rss - p["total"]) / MIB, 1),
                      "report_mib": {k: round(v / MIB, 1) for k, v in rep.items() if k != "params"},
                      "ms_per_step": float(ms.group(1)) if ms else None, "command": " ".join(args[6:])}),
          flush=True)


def default_data():
    """DATA, made from the first 70000 bytes of three of Debian's fortune files if it is not there."""
    if not os.path.exists(DATA):
        text = b"".join(open(f, "rb").read() for f in FORTUNES)[:70000]
        with open(DATA + ".tmp", "wb") as f:
            f.write(text)
        os.replace(DATA + ".tmp", DATA)
    return DATA


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["probe", "predict", "measure"])
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--limit-gib", type=float, default=22.0)
    ap.add_argument("--kinds", default="fp32,bf16,fp8", help="probe: the model kinds to read (default: all three)")
    ap.add_argument("--data", help="the training text (default: build/memfit-data.txt, made from the fortunes)")
    a = ap.parse_args()
    a.data = a.data or default_data()
    if a.what == "probe":
        kinds = a.kinds.split(",")
        if any(k not in ("fp32", "bf16", "fp8") for k in kinds):
            ap.error(f"--kinds {a.kinds}: each one of fp32, bf16, fp8")
        probe(a.data, kinds)
    elif a.what == "predict":
        predict(a.limit_gib)
    else:
        s, comp, layers, width = a.rest
        measure(s, comp, int(layers), int(width), a.data)


if __name__ == "__main__":
    main()
