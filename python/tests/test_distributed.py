"""collage.torch.AdamW across processes (torch.distributed, gloo, 2 ranks on the CPU):

- sharded parameters (FSDP's local shards): each rank steps its shard of every tensor with the whole
  model's Σg² from one all-reduce of the chunk sums and of the shared chunks' elements; the shards' words
  equal the unsharded step's, bit for bit, stochastic rounding included, and the gradient norm is the
  unsharded one: shards on chunk boundaries and FSDP's even split (a flat tensor padded to a multiple of
  the ranks, each rank an equal part: chunks shared by two ranks or more), over two gloo processes and
  over 3-5 ranks as threads of one process;
- DistributedDataParallel over a bf16 model: gloo cannot move bf16 tensors ("Invalid scalar type"), so the
  gradients are averaged widened to fp32 in a communication hook (and the start-up broadcast of the
  weights is made in fp32 too); both ranks end with the weights of one process stepping the averaged
  gradients. NCCL on GPUs moves bf16 itself (scripts/gpu_check.sh)."""

import tempfile
import threading
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import collage.torch as ct
from collage import _cuda
from sharding import STEPS, ThreadRanks, check_sharded, chunk_split, even_split
from test_cuda_path import CpuStandIn

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def fp32_mean_hook(state, bucket):
    """Average a bucket of bf16 gradients across ranks, widened to fp32 (gloo moves no bf16)."""
    buf = bucket.buffer()
    wide = buf.float()
    fut = dist.all_reduce(wide, async_op=True).get_future()

    def done(f):
        buf.copy_((f.value()[0] / dist.get_world_size()).to(buf.dtype))
        return buf
    return fut.then(done)


def sync_states_fp32(module, process_group, broadcast_bucket_size, src, params_and_buffers_to_ignore,
                     broadcast_buffers=True):
    """DDP's start-up broadcast of the weights, widened to fp32 (gloo moves no bf16); PyTorch 2 passes
    broadcast_buffers as well."""
    tensors = list(module.named_parameters()) + (list(module.named_buffers()) if broadcast_buffers else [])
    for name, t in tensors:
        if name not in params_and_buffers_to_ignore:
            w = t.detach().float()
            dist.broadcast(w, src, group=process_group)
            t.detach().copy_(w.to(t.dtype))


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 16, generator=g).to(torch.bfloat16), torch.randn(8, 4, generator=g).to(torch.bfloat16)


def run_ddp(rank, precision, out):
    import torch.nn.parallel.distributed as ddp_mod
    ddp_mod._sync_module_states = sync_states_fp32
    torch.manual_seed(rank)  # different start: DDP's broadcast must make them equal
    net = Net().to(torch.bfloat16)
    model = torch.nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(None, fp32_mean_hook)
    opt = ct.AdamW(model.parameters(), precision=precision, lr=1e-2, max_grad_norm=1.0, seed=5)
    ref = Net().to(torch.bfloat16)  # one process: the same start, the two ranks' gradients averaged
    ref.load_state_dict(net.state_dict())
    ropt = ct.AdamW(ref.parameters(), precision=precision, lr=1e-2, max_grad_norm=1.0, seed=5)
    for t in range(STEPS):
        x, y = batch(rank, t)
        ((model(x).float() - y.float()) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        gs = []
        for r in range(2):
            ref.zero_grad()
            xr, yr = batch(r, t)
            ((ref(xr).float() - yr.float()) ** 2).mean().backward()
            gs.append([p.grad.float() for p in ref.parameters()])
        for p, g0, g1 in zip(ref.parameters(), *gs):
            p.grad = ((g0 + g1) / 2).to(p.dtype)
        ropt.step()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        if not torch.equal(p.detach().view(torch.int16), q.detach().view(torch.int16)):
            out.put((rank, f"{name} differs from one process stepping the averaged gradients"))
            return
    out.put((rank, "ok"))


JOBS = [("sharded", "bf16-sr"), ("even", "bf16-sr"), ("even", "collage-plus"), ("ddp", "collage-light")]


def worker(rank, init, out):
    """Every job of JOBS on this rank (one start-up of the two processes for all of them)."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        for what, precision in JOBS:
            q = []
            try:
                if what == "ddp":
                    run_ddp(rank, precision, _Put(q))
                else:
                    q.append((rank, check_sharded(rank, precision, chunk_split if what == "sharded" else even_split)))
            except Exception as e:  # reported by the parent, naming the rank and the job
                q.append((rank, f"{type(e).__name__}: {e}"))
            out.put((rank, what, precision, q[0][1] if q else "no result"))
    finally:
        dist.destroy_process_group()


class _Put:
    def __init__(self, q):
        self.q = q

    def put(self, x):
        self.q.append(x)


def test_sharded_and_ddp_steps():
    """Two gloo ranks: the sharded steps equal the unsharded one (bf16-sr, collage-light), and DDP with the
    fp32 averaging hook equals one process stepping the averaged gradients."""
    with tempfile.TemporaryDirectory() as d:
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, f"file://{d}/init", out)) for r in range(2)]
        for p in procs:
            p.start()
        got = [out.get(timeout=180) for _ in range(2 * len(JOBS))]
        for p in procs:
            p.join(timeout=60)
    bad = [g for g in got if g[3] != "ok"]
    assert not bad and len(got) == 2 * len(JOBS), bad


@pytest.mark.parametrize("world,precision,path", [(3, "bf16-sr", "c"), (5, "collage-light", "c"),
                                                  (3, "collage-plus", "cuda"), (4, "bf16-sr", "cuda")])
def test_even_shards_many_ranks(monkeypatch, world, precision, path):
    """FSDP's even split over 3 to 5 ranks (threads): 700 elements in parts of 234 to 140, a chunk shared by
    every rank; 40000 elements with parts ending inside chunks: every rank's words equal the unsharded
    step's and its gradient norm is the unsharded one. "cuda": the CUDA path, its library's chunk sums and
    step played by test_cuda_path's CPU stand-in (the table's gradient columns on the whole chunks)."""
    if path == "cuda":
        monkeypatch.setattr(_cuda, "Step", CpuStandIn)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: types.SimpleNamespace(cuda_stream=4242))
    ranks, q = ThreadRanks(world), []

    def rank(r):
        q.append((r, check_sharded(r, precision, even_split, world, ranks.all_reduce(r), path)))
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(q) == [(r, "ok") for r in range(world)], q


def test_shards_refused_off_their_tensor():
    p = torch.nn.Parameter(torch.zeros(100, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="multiple of 256"):
        ct.AdamW([p], precision="collage-light+m=int8,v=int8", shards={p: (5, 200)})
    ct.AdamW([p], precision="collage-light+m=int8,v=int8", shards={p: (256, 356)})  # the tensor's end: a part block of scales
    ct.AdamW([p], shards={p: (5, 200)})  # 16-bit words: anywhere
    with pytest.raises(ValueError, match="do not fit"):
        ct.AdamW([p], shards={p: (0, 50)})
    q = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="not a parameter of this optimizer"):
        ct.AdamW([p], shards={q: (0, 3)})
