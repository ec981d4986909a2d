"""python -m collage.compare: `collage compare`'s grid (strategy × β2 × seed) through PyTorch, on a Hugging
Face transformers model trained with collage.torch.AdamW: GPT2LMHeadModel of collage's `tiny` sizes (2
layers, width 128, 4 heads, 64 positions, 256 byte tokens) by next-token prediction, or BertForMaskedLM of
`bert-tiny`'s (2 layers, width 128, 2 heads, 128 positions, the 256 bytes and a mask token) by masked LM,
on the bytes of the English fortunes with the last 10% held out. Each run is a process of its own (its
peak memory is its own) and leaves its folder as `collage compare`'s runs do (runs/NAME-bBETA2-sK with
summary.json and log.jsonl); rerunning skips the runs finished with the same arguments. Then `collage
compare --report-only` makes results.csv, report.md and the plots from those runs, so the two grids are
read by one report (the collage command: $COLLAGE_BIN, else the one beside libcollage.so, else on PATH).

    python -m collage.compare [--model gpt2|bert] [--precision LIST] [--beta2 LIST] [--seeds N] [--steps N]
        [--out DIR] [--batch B] [--seq T] [--lr LR] [--threads T] [--seed N] [--eval-every N]
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

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


def validate(torch, model, kind, val, a):
    """The validation loss over VAL_BATCHES fixed windows of the held-out bytes (for masked LM a fixed
    mask: the same at every evaluation of every run), and the masked tokens predicted right and chosen."""
    vg = torch.Generator().manual_seed(12345)
    vl, right, chosen = [], 0, 0
    was = model.training
    model.eval()
    with torch.no_grad():
        for b in range(VAL_BATCHES):
            w = torch.stack([val[(b * a.batch + i) * a.seq:(b * a.batch + i + 1) * a.seq + 1] for i in range(a.batch)])
            loss, r, c = loss_of(torch, model, kind, w, vg)
            vl.append(loss.item())
            right, chosen = right + r, chosen + c
    model.train(was)
    return statistics.fmean(vl), right, chosen


def one_run(a, strategy, b2, k, folder, args):
    """One (strategy, β2, seed k) run in this process, into folder as `collage train --log --summary` writes
    a compare run's: log.jsonl (a line per step with its loss and EDQ ratio, and the validation loss every
    --eval-every steps) and summary.json (the keys `collage compare` reads; args: the run's arguments)."""
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
    os.makedirs(folder, exist_ok=True)
    losses, edq, lost, secs = [], [], [], 0.0
    with open(os.path.join(folder, "log.jsonl"), "w") as log:
        for t in range(1, a.steps + 1):
            t0 = time.perf_counter()
            ix = torch.randint(0, len(train) - a.seq - 1, (a.batch,), generator=g)
            w = torch.stack([train[i:i + a.seq + 1] for i in ix])
            loss = loss_of(torch, model, a.model, w, g)[0]
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            losses.append(loss.item())
            secs += time.perf_counter() - t0
            line = {"step": t, "loss": losses[-1]}
            e = opt.last_stats.get("edq")
            if e:
                edq.append(e["edq_ratio"])
                lost.append(e["lost"])
                line.update(edq_ratio=e["edq_ratio"], lost=e["lost"])
            log.write(json.dumps(line) + "\n")
            if t % a.eval_every == 0 or t == a.steps:
                vloss, right, chosen = validate(torch, model, a.model, val, a)
                log.write(json.dumps({"step": t, "val_loss": vloss}) + "\n")
            log.flush()
    tail = max(1, a.steps // 20)
    summary = {"strategy": strategy, "beta2": b2, "seed": a.seed + k, "args": args, "steps_run": a.steps,
               "tail_loss": statistics.fmean(losses[-tail:]), "val_loss": vloss,
               "val_accuracy": right / chosen if chosen else None,
               "edq_ratio": statistics.fmean(edq) if edq else None, "lost": statistics.fmean(lost) if lost else None,
               "bytes_per_param": s.bytes_per_param, "tokens_per_s": a.steps * a.batch * a.seq / secs,
               "ms_per_step": 1e3 * secs / a.steps, "peak_rss_mb": peak_mib(), "losses": losses}
    path = os.path.join(folder, "summary.json")
    with open(path + ".tmp", "w") as f:
        json.dump(summary, f)
    os.replace(path + ".tmp", path)


def file_name(strategy):
    """cli/compare_opts.c cmp_file_name: a composition's '+', ',' and '=' become '_', '_' and '-'."""
    return strategy.replace("+", "_").replace(",", "_").replace("=", "-")


def collage_cli():
    """The collage command that writes the report: $COLLAGE_BIN, else the one beside the library this
    package loaded (a build folder holds both), else `collage` on PATH; None when there is none."""
    from collage import _lib
    for c in (os.environ.get("COLLAGE_BIN"), os.path.join(os.path.dirname(_lib.library_path), "collage"),
              shutil.which("collage")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def about(a):
    """about.md: how these runs were made, which `collage compare --report-only` puts under its heading."""
    mlm = a.model == "bert"
    return (f"The runs were made by `python -m collage.compare`: a transformers {'BertForMaskedLM' if mlm else 'GPT2LMHeadModel'} "
            f"of collage's {'bert-tiny' if mlm else 'tiny'} sizes trained with collage.torch.AdamW, its parameters in "
            f"bf16 (fp32 for the fp32 strategies) with no autocast, on the fortunes' bytes with the last 10% held out (batch {a.batch}, "
            f"sequence {a.seq}, lr {a.lr:g} with warm-up steps/20 and cosine decay to a tenth, weight decay 0.1 on "
            f"matrices, clipping 1.0, eps 1e-8, {a.threads} thread{'s' if a.threads > 1 else ''}, one run at a time). "
            f"Seed k starts every strategy and β2 from the weights of torch.manual_seed({a.seed}+k) and draws the "
            f"same batches{' and masks' if mlm else ''}, so the runs of one seed differ only in precision; the "
            f"validation windows{' and their mask' if mlm else ''} are the same for every run.\n")


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
    ap.add_argument("--eval-every", type=int, help="validation interval (default steps/20)")
    ap.add_argument("--run", help=argparse.SUPPRESS)  # STRATEGY@BETA2@K: one run, in this process
    a = ap.parse_args(argv)
    a.precision = a.precision.split(",")
    a.beta2 = [float(b) for b in a.beta2.split(",")]
    a.eval_every = a.eval_every or max(1, a.steps // 20)
    if a.model == "bert" and a.seq > 128 or a.model == "gpt2" and a.seq > 64:
        ap.error(f"--seq {a.seq}: the {a.model} model of this grid has {128 if a.model == 'bert' else 64} positions")
    if a.steps < 1 or a.seeds < 1 or a.eval_every < 1:
        ap.error("--steps, --seeds and --eval-every take a positive number")
    import collage
    for s in a.precision:
        collage.strategy(s)  # an unknown name is refused here, before any run
    if not os.path.isdir(FORTUNES):
        sys.exit(f"python -m collage.compare: the corpus {FORTUNES} is missing (Debian's package 'fortunes')")
    cli = collage_cli()
    if not cli:
        sys.exit("python -m collage.compare: the report is made by the collage command, which was not found\nhint: "
                 "COLLAGE_BIN=/path/to/collage, or `make cli` in the collage checkout (build/collage beside build/"
                 "libcollage.so), or collage on PATH")
    folder = lambda s, b2, k: os.path.join(a.out, "runs", f"{file_name(s)}-b{b2:g}-s{k + 1}")  # noqa: E731
    # what a finished run must have been made with to be kept (the grid's other flags name the run)
    args = f"--model {a.model} --batch {a.batch} --seq {a.seq} --lr {a.lr!r} --eval-every {a.eval_every} --steps {a.steps}"
    if a.run:
        s, b2, k = a.run.split("@")
        one_run(a, s, float(b2), int(k), folder(s, float(b2), int(k)), args)
        return 0
    base = list(argv if argv is not None else sys.argv[1:])
    for k in range(a.seeds):
        for b2 in a.beta2:
            for s in a.precision:
                path = os.path.join(folder(s, b2, k), "summary.json")
                try:
                    with open(path) as f:
                        if json.load(f).get("args") == args:
                            continue
                except (OSError, ValueError):
                    pass
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, "-m", "collage.compare", *base, "--run", f"{s}@{b2!r}@{k}"],
                                   env={"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1", **os.environ,
                                        "OMP_NUM_THREADS": str(a.threads)})
                if r.returncode:
                    sys.exit(f"python -m collage.compare: the run {s}, β2 {b2:g}, seed {a.seed + k} failed "
                             f"(exit {r.returncode})")
                print(f"{s} β2 {b2:g} seed {a.seed + k}: {time.perf_counter() - t0:.1f} s", flush=True)
    path = os.path.join(a.out, "about.md")
    with open(path + ".tmp", "w") as f:
        f.write(about(a))
    os.replace(path + ".tmp", path)
    r = subprocess.run([cli, "compare", "--report-only", "--precision", ",".join(a.precision), "--beta2",
                        ",".join(f"{b:g}" for b in a.beta2), "--seeds", str(a.seeds), "--steps", str(a.steps), "--seed",
                        str(a.seed), "--threads", str(a.threads), "--eval-every", str(a.eval_every), "--out", a.out])
    if r.returncode:
        sys.exit(f"python -m collage.compare: `{cli} compare --report-only` failed (exit {r.returncode}); the runs are "
                 f"kept in {a.out}/runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
