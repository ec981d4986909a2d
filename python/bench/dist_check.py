"""On a machine with CUDA GPUs: collage.torch.AdamW across ranks, bit for bit against one optimizer.

1. NCCL, one rank per GPU (two where there are two GPUs or more, else one):
   - DistributedDataParallel over a bf16 model (NCCL averages the bf16 gradients itself): every rank's
     weights equal, after every step, those of one optimizer stepping the averaged gradient the rank
     received, and equal the other ranks';
   - FullyShardedDataParallel (flat parameters, each rank an equal part of each: FSDP's split, ends
     inside the Σg² chunks): the optimizer steps each rank's local shard (shards=(r·n, w·n),
     all_reduce=torch.distributed.all_reduce), and equals the unsharded step over the gathered flat
     parameter and gradient, words and gradient norm.
2. gloo, two ranks (on GPU rank mod the GPUs' count: both on one GPU where there is one): tensors in
   FSDP's even split and on chunk boundaries, stepped through libcollage_cuda with every chunk's Σg² and
   shared chunks' elements all-reduced: equal to the unsharded step (python/tests/sharding.py).

With --cpu (no GPU needed, for the tests): gloo on the CPU, DDP over an fp32 model with precision "fp32"
(gloo moves no bf16) and the sharded part; FSDP where this torch has it.
Prints one line per check (--json FILE: the results as JSON); exits 1 on a difference, 0 when everything
is equal, 77 (automake's skip) without a CUDA device: nothing was checked.

    COLLAGE_LIB=build/libcollage.so COLLAGE_CUDA_LIB=build/libcollage_cuda.so python3 python/bench/dist_check.py
        [--steps 20] [--cpu] [--json FILE]
"""

import argparse
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests")]
import collage.torch as ct  # noqa: E402
from helpers import same_bits as same  # noqa: E402
from sharding import check_sharded, chunk_split, even_split  # noqa: E402

KW = dict(lr=1e-3, weight_decay=0.1, max_grad_norm=0.5, seed=11)


class Net(torch.nn.Module):
    """A small transformer-shaped stack: 1.1M parameters, sizes that are no multiple of the chunks."""

    def __init__(self, d=384, ff=1000):
        super().__init__()
        self.inp = torch.nn.Linear(64, d)
        self.up = torch.nn.Linear(d, ff)
        self.down = torch.nn.Linear(ff, d)
        self.norm = torch.nn.LayerNorm(d)
        self.out = torch.nn.Linear(d, 10)

    def forward(self, x):
        h = self.inp(x)
        h = h + self.down(torch.nn.functional.gelu(self.up(self.norm(h))))
        return self.out(h)


def batch(rank, step, dev, dtype):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(32, 64, generator=g).to(dev, dtype), torch.randint(0, 10, (32,), generator=g).to(dev)


def loss_of(model, rank, step, dev, dtype):
    x, y = batch(rank, step, dev, dtype)
    return torch.nn.functional.cross_entropy(model(x).float(), y)


def gathered(t, world):
    """t from every rank, concatenated in rank order (bytes moved as they are)."""
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def check_ddp(rank, world, dev, dtype, precision, steps):
    """DDP: each step the rank's averaged gradients are stepped by a second optimizer over a copy of the
    weights; both copies equal at every step, and the weights equal across ranks at the end."""
    torch.manual_seed(rank)  # different starts: DDP's broadcast makes them one
    net = Net().to(dev, dtype)
    model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[dev.index] if dev.type == "cuda" else None)
    ref = [torch.nn.Parameter(p.detach().clone()) for p in net.parameters()]
    opt = ct.AdamW(model.parameters(), precision=precision, **KW)
    ropt = ct.AdamW(ref, precision=precision, **KW)
    for t in range(steps):
        loss_of(model, rank, t, dev, dtype).backward()
        for p, q in zip(net.parameters(), ref):
            q.grad = p.grad.clone()
        opt.step()
        ropt.step()
        opt.zero_grad()
        if opt.last_stats["grad_norm"] != ropt.last_stats["grad_norm"]:
            return f"step {t}: grad norm {opt.last_stats['grad_norm']!r} vs one optimizer's {ropt.last_stats['grad_norm']!r}"
        bad = [i for i, (p, q) in enumerate(zip(net.parameters(), ref)) if not same(p, q)]
        if bad:
            return f"step {t}: parameters {bad[:5]} differ from one optimizer stepping the averaged gradient"
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    every = gathered(flat, world).view(world, -1)
    if not all(same(every[r], flat) for r in range(world)):
        return "the ranks' weights differ"
    clipped = ropt.last_stats["clip_coef"] < 1.0
    return f"ok ({steps} steps, {sum(p.numel() for p in ref)} parameters, clipping {'on' if clipped else 'off'} at the end)"


def check_fsdp(rank, world, dev, dtype, precision, steps):
    """FSDP's flat parameters: each rank steps its shard; the unsharded step runs over the gathered flat
    parameter and gradient in every rank (the same numbers), and the rank's part of it must equal the shard."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except Exception as e:  # torch 1.13 on Python 3.11 cannot import it
        return f"skip: FSDP cannot be imported here ({type(e).__name__}: {e})"
    torch.manual_seed(0)  # the same start on every rank, so no broadcast is needed (on the CPU PyTorch 2 has none)
    net = Net().to(dev, dtype)
    model = FSDP(net, device_id=dev, use_orig_params=False, sync_module_states=dev.type == "cuda")
    mine = list(model.parameters())
    shards = {p: (rank * p.numel(), world * p.numel()) for p in mine}
    ref = [torch.nn.Parameter(gathered(p.detach(), world)) for p in mine]
    opt = ct.AdamW(mine, precision=precision, shards=shards, all_reduce=dist.all_reduce, **KW)
    ropt = ct.AdamW(ref, precision=precision, **KW)
    for t in range(steps):
        loss_of(model, rank, t, dev, dtype).backward()
        for p, q in zip(mine, ref):
            q.grad = gathered(p.grad, world)
        opt.step()
        ropt.step()
        opt.zero_grad()
        if opt.last_stats["grad_norm"] != ropt.last_stats["grad_norm"]:
            return f"step {t}: grad norm {opt.last_stats['grad_norm']!r} vs unsharded {ropt.last_stats['grad_norm']!r}"
        for i, (p, q) in enumerate(zip(mine, ref)):
            a, n = shards[p][0], p.numel()
            if not same(p, q[a:a + n]):
                return f"step {t}: flat parameter {i}: the shard differs from the unsharded step's"
            for k, v in opt.state[p].items():
                if torch.is_tensor(v) and not same(v, ropt.state[q][k][a:a + n]):
                    return f"step {t}: flat parameter {i}: {k} differs from the unsharded step's"
    sizes = ", ".join(f"{p.numel()} of {world * p.numel()}" for p in mine)
    return f"ok ({steps} steps, shards of {sizes} elements)"


def worker(rank, world, backend, cpu, steps, init, out):
    ngpu = 0 if cpu else torch.cuda.device_count()
    dev = torch.device("cpu") if cpu else torch.device("cuda", rank % ngpu)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    jobs = []
    if backend == "nccl" or cpu:
        dtype, precision = (torch.float32, "fp32") if cpu else (torch.bfloat16, "collage-light")
        jobs += [("ddp", precision, lambda: check_ddp(rank, world, dev, dtype, precision, steps)),
                 ("fsdp", precision, lambda: check_fsdp(rank, world, dev, dtype, precision, steps))]
    if backend == "gloo":
        for split in (even_split, chunk_split):
            for precision in ("bf16-sr", "collage-plus"):
                jobs.append((f"sharded, {split.__name__.replace('_', ' ')}", precision,
                             lambda s=split, p=precision: check_sharded(rank, p, s, world, device=dev)))
    try:
        for what, precision, job in jobs:
            try:
                got = job()
            except Exception as e:  # reported by the parent, naming the rank and the job
                got = f"{type(e).__name__}: {e}"
            out.put((rank, f"{backend} {what}", precision, got))
    finally:
        dist.destroy_process_group()
    out.put((rank, None, None, None))


def launch(world, backend, cpu, steps):
    """world ranks of worker; their results as {(job, precision): [each rank's result]}."""
    with tempfile.TemporaryDirectory() as d:
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, world, backend, cpu, steps, f"file://{d}/init", out))
                 for r in range(world)]
        for p in procs:
            p.start()
        res, done = {}, 0
        while done < world:
            try:
                rank, what, precision, got = out.get(timeout=240)
            except Exception:
                res[(f"{backend}", "")] = ["no answer from a rank within 240 s"]
                break
            if what is None:
                done += 1
            else:
                res.setdefault((what, precision), [None] * world)[rank] = got
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU (no GPU needed)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if not a.cpu and not torch.cuda.is_available():
        print("skip: no CUDA device is visible (torch.cuda.is_available() is False): nothing was checked")
        return 77
    ngpu = 0 if a.cpu else torch.cuda.device_count()
    runs = [(2, "gloo")] if a.cpu else [(min(2, ngpu), "nccl"), (2, "gloo")]
    print(f"torch {torch.__version__}, {ngpu} GPU(s){': ' + torch.cuda.get_device_name(0) if ngpu else ''}")
    results, ok = [], True
    for world, backend in runs:
        for (what, precision), got in launch(world, backend, a.cpu, a.steps).items():
            good = all(g is not None and (g.startswith("ok") or g.startswith("skip")) for g in got)
            skipped = all(g is not None and g.startswith("skip") for g in got)
            ok &= good
            print(f"{'DIFF' if not good else 'skip' if skipped else 'ok  '} {what} ({world} rank{'s' if world > 1 else ''}, {precision}): "
                  + "; ".join(f"rank {r}: {g}" for r, g in enumerate(got)))
            results.append({"check": what, "ranks": world, "precision": precision, "results": got, "equal": good})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "gpus": ngpu, "checks": results, "all_equal": ok}, f, indent=1)
    print("all equal" if ok else "a difference: see DIFF above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
