"""collage.torch's optimizers over FSDP2's DTensor parameters (torch.distributed.fsdp.fully_shard, gloo, the
ranks as processes) and torch.distributed.checkpoint:

- fully_shard over 2 ranks (every bf16 and fp32 strategy of collage.strategies() and a composed 8-bit
  one; uneven rows) and over 3 (a strategy with each kind of word; a bias smaller than the world: an
  empty local shard), HSDP on (2, 1) and (1, 2) meshes, AdamW, Lion and SGD, 20 steps with clipping that
  triggers: the model and every word equal one process stepping the full gradients FSDP reduced
  (gathered), bit for bit; the 16-bit and 32-bit words are DTensors placed as their parameter; a full
  state dict loads sharded and whole; an 8-bit strategy is refused by name where FSDP2's rows break its
  blocks of 256, and DTensors of two shard groups in one optimizer;
- DCP: 20 steps on 2 ranks saved with get_optimizer_state_dict and dcp.save, loaded on 1 rank and on 3
  (and a save on 1 loaded on 3), then 10 steps: the bits of an unbroken run.

One spawn of processes per world size runs all its checks; the 1-rank run is this process."""

import os
import tempfile
import traceback

import pytest
import torch

import collage
import collage.torch as ct

# PyTorch 1.13 has none of these (and its torch.distributed.fsdp fails to import under Python 3.11)
pytest.importorskip("torch.distributed.tensor", reason="needs DTensor (torch.distributed.tensor, PyTorch 2.4 and later)")
if not hasattr(pytest.importorskip("torch.distributed.fsdp"), "fully_shard"):
    pytest.skip("needs FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch 2.6 and later)", allow_module_level=True)
pytest.importorskip("torch.distributed.checkpoint.state_dict", reason="needs torch.distributed.checkpoint.state_dict")

import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,  # noqa: E402
                                                     get_optimizer_state_dict, set_model_state_dict,
                                                     set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

Q8 = "collage-light+m=int8,v=int8"
STRATEGIES = [s.name for s in collage.strategies() if s.weights.format != "fp16"] + [Q8]
UNEVEN = ["bf16-sr", "collage-plus", "bf16-master", "bf16-c8", Q8]  # on 3 ranks: a word of each kind
# a word of each kind: bf16 (collage-plus), fp32 beside bf16 weights (bf16-master, bf16-fp32-states), int16
# remainders, int8 correction bytes, 8-bit codes and scales, fp32 weights; and stochastic rounding
DCP_STRATEGIES = ["bf16-sr", "collage-plus", "bf16-master", "bf16-fp32-states", "bf16-c8", "bf16-remainder", "fp32",
                  Q8]
STEPS, MORE = 20, 10
KW = dict(lr=1e-2, weight_decay=0.1, max_grad_norm=1e-3, seed=11)  # the norm clips every step


def net():
    """5 rows on 2 or 3 ranks: uneven; a bias of 2 on 3 ranks: one rank holds none of it."""
    return torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))


def net8():
    """Shapes whose FSDP2 shards start blocks of 256 elements on 1, 2 and 3 ranks (8-bit words)."""
    return torch.nn.Sequential(torch.nn.Linear(256, 6, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(6, 768, bias=False))


def build(precision, seed=0):
    torch.manual_seed(seed)
    m = net8() if "int8" in precision else net()
    return m.to(torch.float32 if precision == "fp32" else torch.bfloat16)


def shard(model, mesh):
    mpp = MixedPrecisionPolicy(reduce_dtype=torch.float32)  # gloo reduces no bf16
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=mpp)
    fully_shard(model, mesh=mesh, mp_policy=mpp)
    return model


def rows(n, world, rank):
    """rank's rows of n under torch.chunk, the oracle of the split."""
    parts = torch.arange(n).chunk(world)
    idx = parts[rank] if rank < len(parts) else torch.arange(0)
    return (int(idx[0]), int(idx[-1]) + 1) if len(idx) else (n, n)


def bits(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def compare(model, opt, ref, ropt, world, rank, where):
    """Every parameter and word of this rank against its rows of the unsharded run's: None or what differs."""
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        r0, r1 = rows(q.shape[0], world, rank)
        per_row = q[0].numel() if q.shape[0] else 0
        if not torch.equal(bits(p.to_local() if isinstance(p, DTensor) else p), bits(q[r0:r1])):
            return f"{where}: {name} differs from the unsharded step's"
        st, rst = opt.state[p], ropt.state[q]
        if set(st) != set(rst):
            return f"{where}: {name}: state keys {sorted(st)}, unsharded {sorted(rst)}"
        for k, v in st.items():
            rv = rst[k]
            if not torch.is_tensor(v):
                if v != rv:
                    return f"{where}: {name}: {k} {v!r}, unsharded {rv!r}"
            elif isinstance(v, DTensor):
                if tuple(v.placements) != tuple(p.placements) or v.shape != q.shape:
                    return f"{where}: {name}: {k} placed {v.placements} shaped {tuple(v.shape)}"
                if not torch.equal(bits(v.to_local()), bits(rv[r0:r1])):
                    return f"{where}: {name}: {k} differs from the unsharded step's"
            elif v.shape == q[r0:r1].shape:  # a word of a plain parameter
                if v.dtype != rv.dtype or not torch.equal(bits(v), bits(rv[r0:r1])):
                    return f"{where}: {name}: {k} differs from the unsharded step's"
            else:  # an 8-bit word: this rank's codes padded to 64 bytes, then its blocks' scales
                n, a, full = (r1 - r0) * per_row, r0 * per_row, q.numel()
                pad, rpad = (n + 63) // 64 * 64, (full + 63) // 64 * 64
                nb = -(-n // 256)
                if not (torch.equal(v[:n], rv[a:a + n]) and v.numel() == pad + 4 * nb
                        and torch.equal(v[pad:], rv[rpad + a // 256 * 4:rpad + (a // 256 + nb) * 4])):
                    return f"{where}: {name}: {k} (8-bit) differs from the unsharded step's"
    return None


def batch(rank, t, model):
    g = torch.Generator().manual_seed(100 * t + rank)
    first, last = model[0], model[2]
    dt = torch.float32 if first.weight.dtype == torch.float32 else torch.bfloat16
    return (torch.randn(4, first.in_features, generator=g).to(dt),
            torch.randn(4, last.out_features, generator=g))


def check_steps(mesh, world, rank, precision, cls=ct.AdamW, kw=KW, data=None, full=False):
    """STEPS steps of fully_shard's model against one process stepping the gathered full gradients; rank:
    the coordinate on the shard dimension of the mesh; data: the rank whose batches this process takes.
    full: then a full state dict (get_optimizer_state_dict's full_state_dict) loaded by a fresh optimizer
    of the sharded model and by one of the unsharded model gives each its words."""
    ref = build(precision)
    model = shard(build(precision), mesh)
    opt = cls(model.named_parameters(), precision=precision, **kw)
    ropt = cls(ref.named_parameters(), precision=precision, **kw)
    for t in range(STEPS):
        x, y = batch(rank if data is None else data, t, ref)
        ((model(x).float() - y) ** 2).mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            q.grad = p.grad.float().full_tensor().to(q.dtype)
        opt.step()
        ropt.step()
        a, b = opt.last_stats, ropt.last_stats
        if a["grad_norm"] != b["grad_norm"] or a["clip_coef"] != b["clip_coef"] or a["clip_coef"] >= 1:
            return f"step {t}: norm {a['grad_norm']!r} coef {a['clip_coef']!r}, unsharded {b['grad_norm']!r}"
        opt.zero_grad()
        ropt.zero_grad()
    for v in opt.state[next(model.parameters())].values():
        if torch.is_tensor(v) and v.dtype != torch.uint8 and not isinstance(v, DTensor):
            return "a 16-bit or 32-bit word is not a DTensor"
    bad = compare(model, opt, ref, ropt, world, rank, f"after {STEPS} steps")
    if bad or not full:
        return bad or "ok"
    whole = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    opt2 = cls(model.named_parameters(), precision=precision, **kw)
    opt2.load_state_dict(whole)
    ropt2 = cls(ref.named_parameters(), precision=precision, **kw)
    ropt2.load_state_dict(whole)
    return (compare(model, opt2, ref, ropt, world, rank, "a full state dict loaded sharded")
            or compare(ref, ropt2, ref, ropt, 1, 0, "a full state dict loaded whole") or "ok")


def check_two_groups_refused(mesh):
    """DTensors of two shard groups (the world's, and a (2, 1) mesh's second dimension) in one optimizer."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    w = torch.zeros(4, 6)
    a = torch.nn.Parameter(distribute_tensor(w, mesh, [Shard(0)]))
    b = torch.nn.Parameter(distribute_tensor(w, hsdp_mesh((2, 1)), [Replicate(), Shard(0)]))
    try:
        ct.AdamW([("a", a), ("b", b)], precision="fp32")
    except ValueError as e:
        return "ok" if "parameter 'b' is sharded over another process group than parameter 'a'" in str(e) else str(e)
    return "not refused"


def check_q8_refused(mesh, world, rank):
    model = shard(build("bf16"), mesh)
    try:
        ct.AdamW(model.named_parameters(), precision=Q8)
    except ValueError as e:
        return "ok" if "parameter '0.weight'" in str(e) and "multiple of 256" in str(e) else f"message: {e}"
    return "not refused"


def synthetic_grad(t, i, q):
    g = torch.Generator().manual_seed(1000 * t + i)
    return (torch.randn(q.shape, generator=g) * 0.05).to(q.dtype)


def unbroken(precision, steps):
    ref = build(precision)
    ropt = ct.AdamW(ref.named_parameters(), precision=precision, **KW)
    for t in range(steps):
        for i, q in enumerate(ref.parameters()):
            q.grad = synthetic_grad(t, i, q)
        ropt.step()
    return ref, ropt


def run_dcp(mesh, world, rank, precision, first, last, load=None, save=None, seed=0):
    """fully_shard's model stepped from step `first` to `last` with full gradients that do not depend on the
    world, after a load (DCP), and saved (DCP) at step `first` where it has loaded one, else at `last`; then
    compared with the unbroken run."""
    model = shard(build(precision, seed), mesh)
    opt = ct.AdamW(model.named_parameters(), precision=precision, **KW)

    def sd():
        return {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    if load:
        got = sd()
        dcp.load(got, checkpoint_id=load)
        set_model_state_dict(model, got["model"])
        set_optimizer_state_dict(model, opt, got["optim"])
    if save and load:
        dcp.save(sd(), checkpoint_id=save)
    for t in range(first, last):
        for i, p in enumerate(model.parameters()):
            r0, r1 = rows(p.shape[0], world, rank)
            g = synthetic_grad(t, i, p)[r0:r1].contiguous()
            p.grad = DTensor.from_local(g, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                        stride=p.stride())
        opt.step()
    if save and not load:
        dcp.save(sd(), checkpoint_id=save)
    ref, ropt = unbroken(precision, last)
    return compare(model, opt, ref, ropt, world, rank, f"step {last}") or "ok"


def jobs(world, ckdir):
    """This world size's checks: (name, function of (mesh, rank))."""
    out = []
    if world == 2:
        out += [(f"fsdp2 {s}", lambda m, r, s=s: check_steps(m, 2, r, s)) for s in STRATEGIES]
        out += [("fsdp2 Lion collage-light", lambda m, r: check_steps(m, 2, r, "collage-light", ct.Lion,
                                                                          dict(KW, lr=1e-3))),
                ("fsdp2 SGD bf16-sr", lambda m, r: check_steps(m, 2, r, "bf16-sr", ct.SGD, dict(KW, lr=1e-2)))]
        out += [(f"hsdp (2, 1) {s}", lambda m, r, s=s: check_steps(hsdp_mesh((2, 1)), 1, 0, s, data=r))
                for s in ("bf16-sr", "collage-plus")]
        out += [("hsdp (1, 2) bf16-sr", lambda m, r: check_steps(hsdp_mesh((1, 2)), 2, r, "bf16-sr"))]
        out += [("two shard groups refused", lambda m, r: check_two_groups_refused(m))]
        out += [(f"dcp save on 2 {s}", lambda m, r, s=s: run_dcp(m, 2, r, s, 0, STEPS, save=f"{ckdir}/2/{s}"))
                for s in DCP_STRATEGIES]
    elif world == 1:
        out += [(f"dcp 2 -> 1 {s}", lambda m, r, s=s: run_dcp(m, 1, r, s, STEPS, STEPS + MORE, load=f"{ckdir}/2/{s}",
                                                               save=f"{ckdir}/1/{s}", seed=1))
                for s in DCP_STRATEGIES]
    else:
        out += [(f"fsdp2 {s}", lambda m, r, s=s: check_steps(m, world, r, s, full=True)) for s in UNEVEN]
        out += [("8-bit refused", lambda m, r: check_q8_refused(m, world, r))]
        out += [(f"dcp {n} -> {world} {s}", lambda m, r, s=s, n=n: run_dcp(m, world, r, s, STEPS, STEPS + MORE,
                                                                             load=f"{ckdir}/{n}/{s}", seed=2))
                for s in DCP_STRATEGIES for n in (2, 1)]
    return out


def hsdp_mesh(shape):
    """HSDP's mesh (replicas, shards). (2, 1): the gradient norm is summed over the shard group only, not
    over the replicas; (1, 2): a rank's rows come from its coordinate on the mesh's second dimension."""
    return init_device_mesh("cpu", shape, mesh_dim_names=("replicate", "shard"))


def run_jobs(rank, world, ckdir):
    mesh = init_device_mesh("cpu", (world,))
    got = []
    for name, fn in jobs(world, ckdir):
        try:
            res = fn(mesh, rank)
        except Exception as e:  # reported by the test, naming the rank and the check
            res = f"{type(e).__name__}: {e} at {traceback.extract_tb(e.__traceback__)[-1]}"
        got.append((rank, name, res))
    return got


def worker(rank, world, init, ckdir, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        for g in run_jobs(rank, world, ckdir):
            out.put(g)
    finally:
        out.put((rank, "done", "ok"))
        dist.destroy_process_group()


def spawn(world, ckdir):
    """world processes running this world's jobs: their results. Each runs one thread (torch's and
    libcollage's OpenMP teams): more ranks than cores would otherwise spin in each other's barriers."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=worker, args=(r, world, f"file://{d}/init", ckdir, out)) for r in range(world)]
        was = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # read by the children's OpenMP when they load it
        try:
            for p in procs:
                p.start()
        finally:
            if was is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = was
        got, done = [], 0
        while done < world:
            g = out.get(timeout=300)
            done += g[1] == "done"
            got.append(g)
        for p in procs:
            p.join(timeout=60)
    return [g for g in got if g[1] != "done"]


@pytest.fixture(scope="module")
def ckdir():
    with tempfile.TemporaryDirectory() as d:
        yield d


def verdict(got, world, ckdir):
    names = [n for n, _ in jobs(world, ckdir)]
    bad = [g for g in got if g[2] != "ok"]
    assert not bad and len(got) == world * len(names), bad or f"{len(got)} results of {world * len(names)}"


def test_two_ranks(ckdir):
    """fully_shard on 2 ranks and HSDP (2, 1) and (1, 2): every strategy's bits; the DCP checkpoints of
    step 20."""
    verdict(spawn(2, ckdir), 2, ckdir)


def test_dcp_two_ranks_to_one(ckdir):
    """The checkpoints of 2 ranks loaded on 1 (this process), saved again, then 10 steps."""
    if not os.path.isdir(f"{ckdir}/2"):
        pytest.skip("test_two_ranks wrote no checkpoints")
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=f"file://{d}/init", rank=0, world_size=1)
        try:
            got = run_jobs(0, 1, ckdir)
        finally:
            dist.destroy_process_group()
    verdict(got, 1, ckdir)


def test_three_ranks(ckdir):
    """fully_shard on 3 ranks (uneven rows, empty shards), the 8-bit refusal, and the checkpoints of 2 ranks
    and of 1 loaded on 3."""
    if not os.path.isdir(f"{ckdir}/1"):
        pytest.skip("test_dcp_two_ranks_to_one wrote no checkpoints")
    verdict(spawn(3, ckdir), 3, ckdir)


def test_one_rank_refusals_and_first_state():
    """On one rank: a DTensor placed otherwise than Shard(0) / Replicate (Shard(1), Partial, two shard
    dimensions), a plain tensor beside DTensors, all_reduce= or shards= with
    DTensors, and a gradient placed otherwise than its parameter: each a ValueError or TypeError naming
    the parameter, before anything is stepped. get_optimizer_state_dict on an optimizer that has not
    stepped makes its state by a step with zero gradients and lr 0: θ as it was, one step counted."""
    from torch.distributed.tensor import Partial, Shard, distribute_tensor
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=f"file://{d}/init", rank=0, world_size=1)
        try:
            mesh, mesh2 = init_device_mesh("cpu", (1,)), init_device_mesh("cpu", (1, 1), mesh_dim_names=("r", "s"))
            w = torch.randn(4, 6).to(torch.bfloat16)
            rows_ = torch.nn.Parameter(distribute_tensor(w, mesh, [Shard(0)]))
            cols = torch.nn.Parameter(distribute_tensor(w, mesh, [Shard(1)]))
            partial = torch.nn.Parameter(DTensor.from_local(w.clone(), mesh, [Partial()]))
            twice = torch.nn.Parameter(distribute_tensor(w, mesh2, [Shard(0), Shard(0)]))
            plain = torch.nn.Parameter(w.clone())
            for name, p in (("c", cols), ("q", partial), ("t", twice)):
                with pytest.raises(ValueError, match=rf"parameter '{name}' is a DTensor placed .*collage.torch steps "
                                                     r"DTensors placed Shard\(0\) on one mesh dimension"):
                    ct.AdamW([(name, p)])
            with pytest.raises(ValueError, match="parameter 'p' is a plain tensor, and parameter 'r' a DTensor"):
                ct.AdamW([("r", rows_), ("p", plain)])
            with pytest.raises(ValueError, match="all_reduce is for shards= of plain tensors"):
                ct.AdamW([rows_], all_reduce=dist.all_reduce)
            with pytest.raises(ValueError, match="shards names parameter 0 .*a DTensor"):
                ct.AdamW([rows_], shards={rows_: (0, 24)})
            opt = ct.AdamW([("r", rows_)])
            rows_.grad = w.clone()
            with pytest.raises(TypeError, match="parameter 'r' is a DTensor .* its gradient is a plain tensor"):
                opt.step()
            assert not opt.state
            rows_.grad = None
            model = torch.nn.Linear(6, 4, bias=False).to(torch.bfloat16)
            fully_shard(model, mesh=mesh)
            before = model.weight.to_local().clone()
            opt = ct.AdamW(model.parameters(), precision="bf16-master", lr=0.5, weight_decay=0.5)
            get_optimizer_state_dict(model, opt)
            st = opt.state[model.weight]
            assert torch.equal(bits(model.weight.to_local()), bits(before)) and st["step"] == 1
            assert opt.param_groups[0]["lr"] == 0.5
        finally:
            dist.destroy_process_group()
