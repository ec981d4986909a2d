"""python -m collage.compare: `collage compare`'s grid (strategy × β2 × seed) through PyTorch, on a Hugging
Face transformers model trained with collage.torch.AdamW: GPT2LMHeadModel of collage's `tiny` sizes (2
layers, width 128, 4 heads, 64 positions, 256 byte tokens) by next-token prediction, or BertForMaskedLM of
`bert-tiny`'s (2 layers, width 128, 2 heads, 128 positions, the 256 bytes and a mask token) by masked LM,
on the bytes of the English fortunes with the last 10% held out. Writes results.csv with `collage
compare`'s columns and report.md with its tables and per-β2 paragraphs, so the two grids can be put side
by side. Each run is a process of its own (its peak memory is its own); rerunning skips finished runs.

    python -m collage.compare [--model gpt2|bert] [--precision LIST] [--beta2 LIST] [--seeds N] [--steps N]
        [--out DIR] [--batch B] [--seq T] [--lr LR] [--threads T] [--seed N]
"""

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

CSV_HEADER = ("strategy,beta2,seed,steps,train_loss,val_loss,edq_ratio,lost,bytes_per_param,tokens_per_s,ms_per_step,"
              "peak_rss_mb,val_accuracy")  # cli/compare.h's CMP_CSV_HEADER
MATCH_FLOOR, REF_NOISE = 0.005, 0.01  # cli/compare.h: a paired difference below these is a match
FORTUNES = "/usr/share/games/fortunes"
VAL_BATCHES, MASK_ID = 8, 256


def fortunes():
    """The default corpus as collage reads it: the English fortune files (no '.' in the name, no links) in
    name order, each line that is only '%' an empty line, joined with nothing between files."""
    names = sorted((f for f in os.listdir(FORTUNES) if "." not in f), key=os.fsencode)
    out = []
    for f in names:
        p = os.path.join(FORTUNES, f)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        raw = open(p, "rb").read()
        out.append(b"".join(b"\n" if ln in (b"%\n", b"%") else ln for ln in raw.splitlines(keepends=True)))
    return b"".join(out)


def make_model(kind, T):
    import transformers
    if kind == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=256, n_positions=T, n_embd=128, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0))
    return transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=257, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
        max_position_embeddings=T, type_vocab_size=1, hidden_act="gelu_new", layer_norm_eps=1e-5,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def mlm_mask(torch, x, g):
    """RoBERTa's dynamic masking: each position chosen with probability 15%; of those 80% the mask token,
    10% a random byte, 10% kept. Returns (inputs, chosen)."""
    chosen = torch.rand(x.shape, generator=g) < 0.15
    r = torch.rand(x.shape, generator=g)
    inp = torch.where(chosen & (r < 0.8), torch.full_like(x, MASK_ID), x)
    rnd = torch.randint(0, 256, x.shape, generator=g)
    return torch.where(chosen & (r >= 0.8) & (r < 0.9), rnd, inp), chosen


def loss_of(torch, model, kind, w, g):
    """The loss (fp32 cross-entropy of the logits) of windows w (B, T+1), and for masked LM the count of
    chosen tokens predicted right and of chosen tokens."""
    F = torch.nn.functional
    if kind == "gpt2":
        logits = model(input_ids=w[:, :-1]).logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)), 0, 0
    x = w[:, :-1]
    inp, chosen = mlm_mask(torch, x, g)
    logits = model(input_ids=inp).logits.float()[chosen]
    return F.cross_entropy(logits, x[chosen]), int((logits.argmax(-1) == x[chosen]).sum()), int(chosen.sum())


def peak_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return math.nan


def one_run(a, strategy, b2, k, path):
    """One (strategy, β2, seed k) run in this process; its summary written to path."""
    import torch
    import collage
    import collage.torch as ct
    from collage import _lib
    torch.set_num_threads(a.threads)
    _lib.lib.collage_set_threads(a.threads)
    data = torch.tensor(bytearray(fortunes()), dtype=torch.long)
    split = len(data) * 9 // 10
    train, val = data[:split], data[split:]
    s = collage.strategy(strategy)
    torch.manual_seed(a.seed + k)  # the same initial weights for every strategy and β2 of seed k
    model = make_model(a.model, a.seq)
    if s.weights.format != "fp32":
        model = model.to(torch.bfloat16)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = ct.AdamW([dict(params=decay, weight_decay=0.1), dict(params=rest, weight_decay=0.0)], precision=strategy,
                   lr=a.lr, betas=(0.9, b2), eps=1e-8, max_grad_norm=1.0, edq=True)
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (t + 1) / warm if t < warm else 0.1 + 0.45 * (
        1 + math.cos(math.pi * (t - warm) / max(1, a.steps - warm))))  # warm-up, cosine to a tenth
    g = torch.Generator().manual_seed(a.seed + k)  # the same batches (and masks) for every strategy and β2
    losses, edq, lost = [], [], []
    t0 = time.perf_counter()
    for _ in range(a.steps):
        ix = torch.randint(0, len(train) - a.seq - 1, (a.batch,), generator=g)
        w = torch.stack([train[i:i + a.seq + 1] for i in ix])
        loss = loss_of(torch, model, a.model, w, g)[0]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        losses.append(loss.item())
        e = opt.last_stats.get("edq")
        if e:
            edq.append(e["edq_ratio"])
            lost.append(e["lost"])
    secs = time.perf_counter() - t0
    vg = torch.Generator().manual_seed(12345)  # a fixed validation mask, the same for every run
    vl, right, chosen = [], 0, 0
    with torch.no_grad():
        for b in range(VAL_BATCHES):
            w = torch.stack([val[(b * a.batch + i) * a.seq:(b * a.batch + i + 1) * a.seq + 1] for i in range(a.batch)])
            loss, r, c = loss_of(torch, model, a.model, w, vg)
            vl.append(loss.item())
            right, chosen = right + r, chosen + c
    tail = max(1, a.steps // 20)
    summary = {"strategy": strategy, "beta2": b2, "seed": a.seed + k, "steps": a.steps,
               "train_loss": statistics.fmean(losses[-tail:]), "val_loss": statistics.fmean(vl),
               "edq_ratio": statistics.fmean(edq) if edq else math.nan, "lost": statistics.fmean(lost) if lost else math.nan,
               "bytes_per_param": s.bytes_per_param, "tokens_per_s": a.steps * a.batch * a.seq / secs,
               "ms_per_step": 1e3 * secs / a.steps, "peak_rss_mb": peak_mib(),
               "val_accuracy": right / chosen if chosen else math.nan, "losses": losses}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(summary, f)
    os.replace(path + ".tmp", path)


def stat(xs):
    xs = [x for x in xs if math.isfinite(x)]
    if not xs:
        return None
    return (statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0, len(xs))


def fmt(st, f, scale=1.0):
    """cmp_fmt_stat: "mean ± sd" over seeds, the mean alone for one, a dash for none."""
    if not st:
        return "—"
    m = f % (st[0] * scale)
    return m if st[2] < 2 else f"{m} ± {f.replace('+', '') % (st[1] * scale)}"


def reference(strategies):
    return "bf16-master" if "bf16-master" in strategies else "fp32" if "fp32" in strategies else strategies[0]


def paired(runs, s, ref, b2):
    """The final validation loss of s minus the reference's, paired by seed."""
    by = {(r["strategy"], r["seed"]): r["val_loss"] for r in runs if r["beta2"] == b2}
    return stat([by[(s, seed)] - by[(ref, seed)] for (x, seed) in by if x == s and (ref, seed) in by])


def report(a, runs, cmdline):
    import collage
    ref, mlm = reference(a.precision), a.model == "bert"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"# python -m collage.compare: report\n\nMade {date} by `{cmdline}`. {len(runs)} runs: {len(a.precision)} "
           f"strategies × {len(a.beta2)} values of β2 × {a.seeds} seed{'s' if a.seeds > 1 else ''}, {a.steps} steps each, "
           f"on a transformers {'BertForMaskedLM' if mlm else 'GPT2LMHeadModel'} of collage's "
           f"{'bert-tiny' if mlm else 'tiny'} sizes trained with collage.torch.AdamW (batch {a.batch}, sequence "
           f"{a.seq}, lr {a.lr:g} with warm-up steps/20 and cosine decay to a tenth, weight decay 0.1 on matrices, "
           f"clipping 1.0); every run of a seed starts from the same weights and sees the same batches, so the runs "
           f"of one seed differ only in precision. Each run's summary is in `runs/`.\n",
           "Columns as `collage compare` writes them: validation loss after the last step (8 held-out batches, the "
           "same for every run); train loss as the mean of the last 5% of steps; EDQ ratio ⟨Δ_eff, Δ⟩/‖Δ‖² averaged "
           "over steps; lost = the fraction of nonzero intended updates that left the stored weight unchanged; Δ val = "
           "the validation loss minus the reference's in the run of the same seed; bytes of training state per "
           f"parameter; tokens/s and peak MiB of one run (one process, {a.threads} thread{'s' if a.threads > 1 else ''})."
           " Values are mean ± standard deviation over seeds when there is more than one.\n"]
    if mlm:
        out.append("The model is trained by masked language modelling: its losses are over the masked tokens, and val "
                   "acc is the fraction of the validation's masked tokens (a fixed mask) predicted right.\n")
    for b2 in a.beta2:
        rows = [r for r in runs if r["beta2"] == b2]
        out.append(f"## β2 = {b2:g}\n\n| strategy | val loss | {'val acc | ' if mlm else ''}Δ val vs {ref} | train loss | "
                   f"EDQ ratio | lost | bytes/param | tokens/s | peak MiB |\n|---|---|{'---|' if mlm else ''}---|---|---|---|"
                   "---|---|---|")
        for s in a.precision:
            rs = [r for r in rows if r["strategy"] == s]
            col = lambda k: stat([r[k] for r in rs])  # noqa: E731
            d = "(reference)" if s == ref else fmt(paired(runs, s, ref, b2), "%+.4f")
            acc = f"{fmt(col('val_accuracy'), '%.2f%%', 100)} | " if mlm else ""
            out.append(f"| {s} | {fmt(col('val_loss'), '%.4f')} | {acc}{d} | {fmt(col('train_loss'), '%.4f')} | "
                       f"{fmt(col('edq_ratio'), '%.4f')} | {fmt(col('lost'), '%.1f%%', 100)} | "
                       f"{fmt(col('bytes_per_param'), '%.4g')} | {fmt(col('tokens_per_s'), '%.0f')} | "
                       f"{fmt(col('peak_rss_mb'), '%.0f')} |")
        r = stat([x["val_loss"] for x in rows if x["strategy"] == ref])
        if not r:
            out.append(f"\nNo finished run of {ref} at β2 = {b2:g} to compare against.\n")
            continue
        p = [f"\nAt β2 = {b2:g} the reference, {ref}, ends at a validation loss of {r[0]:.4f}. "]
        p.append(f"Each difference below is paired by seed; it counts when it exceeds both twice its standard error over "
                 f"the {a.seeds} seeds and {MATCH_FLOOR:.3f}. " if a.seeds > 1 else
                 f"With one seed the noise is not measured: a difference below {REF_NOISE:.2f} is called a match (rerun "
                 "with --seeds 3 to measure it). ")
        for s in a.precision:
            d = paired(runs, s, ref, b2)
            if s == ref or not d:
                continue
            noise = max(2 * d[1] / math.sqrt(d[2]), MATCH_FLOOR) if a.seeds > 1 else REF_NOISE
            verdict = "matches it" if abs(d[0]) <= noise else "ends worse" if d[0] > 0 else "ends better"
            bpp = [x["bytes_per_param"] for x in rows if x["strategy"] == s][0]
            p.append(f"**{s}** {verdict} ({d[0]:+.4f}{f' ± {d[1]:.4f}' if d[2] > 1 else ''}) at {bpp:.4g} bytes per "
                     "parameter")
            lost, e = (stat([x[k] for x in rows if x["strategy"] == s]) for k in ("lost", "edq_ratio"))
            if lost and lost[0] > 0.001:
                kept = collage.strategy(s).keeps_update_in  # None: the update is lost
                p.append(f"; its bf16 weights stayed put on {100 * lost[0]:.1f}% of nonzero updates, which {kept} "
                         "carried instead" if kept else f"; {100 * lost[0]:.1f}% of its nonzero weight updates were "
                         f"lost to rounding (EDQ ratio {e[0]:.3f})")
            p.append(". ")
        out.append("".join(p) + "\n")
    out.append("The β2, frontier and EDQ paragraphs and the plots of `collage compare` are not written by this "
               "command; results.csv holds what they are computed from.\n")
    return "\n".join(out)


def csv_line(r):
    f = lambda x, spec: "" if not math.isfinite(x) else spec % x  # noqa: E731
    name = f'"{r["strategy"]}"' if "," in r["strategy"] else r["strategy"]
    return (f"{name},{r['beta2']:g},{r['seed']},{r['steps']},{r['train_loss']:.6f},{r['val_loss']:.6f},"
            f"{r['edq_ratio']:.6f},{r['lost']:.6f},{r['bytes_per_param']:.2f},{r['tokens_per_s']:.1f},"
            f"{r['ms_per_step']:.3f},{r['peak_rss_mb']:.0f},{f(r['val_accuracy'], '%.6f')}")


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m collage.compare", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("gpt2", "bert"), default="gpt2")
    ap.add_argument("--precision", default="fp32,bf16,collage-light,collage-plus,bf16-master",
                    help="comma-separated strategies (collage.strategies() names them)")
    ap.add_argument("--beta2", default="0.95,0.999", help="comma-separated")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default="compare-torch")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--run", help=argparse.SUPPRESS)  # STRATEGY@BETA2@K: one run, in this process
    a = ap.parse_args(argv)
    a.precision = a.precision.split(",")
    a.beta2 = [float(b) for b in a.beta2.split(",")]
    if a.model == "bert" and a.seq > 128 or a.model == "gpt2" and a.seq > 64:
        ap.error(f"--seq {a.seq}: the {a.model} model of this grid has {128 if a.model == 'bert' else 64} positions")
    import collage
    for s in a.precision:
        collage.strategy(s)  # an unknown name is refused here, before any run
    if not os.path.isdir(FORTUNES):
        sys.exit(f"python -m collage.compare: the corpus {FORTUNES} is missing (Debian's package 'fortunes')")
    name = lambda s, b2, k: os.path.join(a.out, "runs", f"{s}_b2-{b2:g}_seed-{a.seed + k}", "summary.json")  # noqa: E731
    if a.run:
        s, b2, k = a.run.split("@")
        one_run(a, s, float(b2), int(k), name(s, float(b2), int(k)))
        return 0
    base = list(argv if argv is not None else sys.argv[1:])
    runs = []
    for k in range(a.seeds):
        for b2 in a.beta2:
            for s in a.precision:
                path = name(s, b2, k)
                if not os.path.exists(path):
                    t0 = time.perf_counter()
                    r = subprocess.run([sys.executable, "-m", "collage.compare", *base, "--run", f"{s}@{b2!r}@{k}"],
                                       env={"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1", **os.environ,
                                            "OMP_NUM_THREADS": str(a.threads)})
                    if r.returncode:
                        sys.exit(f"python -m collage.compare: the run {s}, β2 {b2:g}, seed {a.seed + k} failed "
                                 f"(exit {r.returncode})")
                    print(f"{s} β2 {b2:g} seed {a.seed + k}: {time.perf_counter() - t0:.1f} s", flush=True)
                with open(path) as f:
                    runs.append(json.load(f))
    os.makedirs(a.out, exist_ok=True)
    write(os.path.join(a.out, "results.csv"), CSV_HEADER + "\n" + "".join(csv_line(r) + "\n" for r in runs))
    write(os.path.join(a.out, "report.md"), report(a, runs, "python -m collage.compare " + " ".join(base)))
    print(f"python -m collage.compare: {len(runs)} runs; {a.out}/report.md and {a.out}/results.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
