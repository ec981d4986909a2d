"""collage.torch's optimizers under torch.compile (PyTorch 2): a small GPT-style model in pure bf16
(embedding, causal attention, MLP, tied LM head) compiled and trained with each optimizer, against the
same model in eager mode; and a training step with the optimizer inside a compiled function, whose step
runs outside Dynamo's graph (one graph break, no recompilation as the step count grows).

Inductor's CPU kernels keep a fused chain of bf16 operations in fp32 where eager rounds each result to
bf16, so an inductor-compiled model's losses and gradients are not eager's bits; TorchDynamo's graphs run
by eager kernels (AOT autograd's "aot_eager" backend, or the graph as captured) are, and give every
optimizer eager's gradients, hence eager's words. Compilation is slow on a small machine: the inductor
cache (TORCHINDUCTOR_CACHE_DIR, set here to a folder in the temporary directory unless set) makes a
second run fast."""

import math
import os
import tempfile

import pytest
import torch
import torch.nn.functional as F

if hasattr(torch, "compile"):
    import torch._dynamo
    import torch._inductor.config

import collage.torch as ct

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"),
                                reason=f"torch.compile is PyTorch 2's; this is PyTorch {torch.__version__}")

V, C, T, H, B, STEPS = 64, 32, 16, 2, 2, 20
OPTIMIZERS = {"AdamW": dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1),
              "Lion": dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1),
              "SGD": dict(lr=0.1, momentum=0.9)}
# Inductor's difference from eager on this model, measured by test_inductor_trains_and_the_step_takes_its_gradients
# (run with -s, it prints it): docs/benchmarks.md §21. A mistake in the optimizer's path (a gradient
# dropped or applied twice, wrong words) moves the losses by far more.
MAX_LOSS_ULPS = 4


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.c_attn, self.c_proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.c_fc, self.mlp_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
        self.h, self.ln_f = Block(), torch.nn.LayerNorm(C)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        logits = self.ln_f(self.h(x)) @ self.wte.weight.t()  # the LM head tied to the embedding
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))


@pytest.fixture(autouse=True)
def inductor_cache(monkeypatch):
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        uid = os.getuid() if hasattr(os, "getuid") else 0
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"collage-inductor-{uid}"))
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)  # compile in this process: no pool to start
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is tiny: a second thread only waits, for whole seconds on a busy machine
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    torch.set_num_threads(threads)


def model():
    torch.manual_seed(0)
    return GPT().to(torch.bfloat16)


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)) for _ in range(STEPS)]


def make_opt(m, name, precision):
    return getattr(ct, name)(m.named_parameters(), precision=precision, max_grad_norm=1.0,
                             **OPTIMIZERS[name])


def words(m, opt):
    """Every parameter and state word, as int16 / uint8 bit patterns."""
    out = []
    for p in m.parameters():
        out.append(p.detach().view(torch.int16).clone())
        for k, v in sorted(opt.state[p].items()):
            if isinstance(v, torch.Tensor):
                out.append(v.view(torch.uint8).clone())
    return out


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def train(forward, m, opt, data, also=None):
    """STEPS steps; returns the losses. also(step): called after each backward, before the step."""
    losses = []
    for t, (x, y) in enumerate(data):
        loss = forward(x, y)
        loss.backward()
        if also is not None:
            also(t)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("name,precision", [("AdamW", "collage-light"), ("AdamW", "bf16-sr"),
                                            ("Lion", "collage-light"), ("SGD", "collage-light")])
def test_graphs_of_eager_kernels_train_as_eager(name, precision):
    """torch.compile with AOT autograd's eager backend: Dynamo's graphs, the parameters as their inputs and
    the gradients from AOT autograd's backward, each kernel eager's: every loss, gradient and word of 20
    steps is eager's bit for bit."""
    data = batches()
    me, mc = model(), model()
    oe, oc = make_opt(me, name, precision), make_opt(mc, name, precision)
    grads_e = []
    le = train(me, me, oe, data, lambda t: grads_e.append([p.grad.clone() for p in me.parameters()]))
    grads_c = []
    lc = train(torch.compile(mc, backend="aot_eager"), mc, oc, data,
               lambda t: grads_c.append([p.grad.clone() for p in mc.parameters()]))
    assert lc == le
    assert all(same(a, b) for a, b in zip(grads_c, grads_e))
    assert same(words(mc, oc), words(me, oe))


def test_inductor_trains_and_the_step_takes_its_gradients():
    """The default compiler (inductor): 20 steps of collage-light AdamW. Its bf16 kernels are not eager's, so
    the losses are within MAX_LOSS_ULPS of eager's (and the first, where both models hold the same weights,
    differs by at most one ulp). The optimizer's side, bit for bit: a second optimizer over a copy of the
    weights, given at each step a contiguous copy of the compiled model's gradients, holds the same words
    as the one that stepped the compiled model's own gradients."""
    data = batches()
    me, mc, mtwin = model(), model(), model()
    oe, oc, otwin = make_opt(me, "AdamW", "collage-light"), make_opt(mc, "AdamW", "collage-light"), \
        make_opt(mtwin, "AdamW", "collage-light")
    first = {}
    le = train(me, me, oe, data, lambda t: first.setdefault("eager", [p.grad.float() for p in me.parameters()]))

    def twin(t):
        first.setdefault("compiled", [p.grad.float() for p in mc.parameters()])
        for p, q in zip(mc.parameters(), mtwin.parameters()):
            q.grad = p.grad.contiguous().clone()
        otwin.step()
        otwin.zero_grad(set_to_none=True)

    lc = train(torch.compile(mc), mc, oc, data, twin)
    assert same(words(mc, oc), words(mtwin, otwin))

    def ulps(a, b):
        return abs(a - b) / 2.0 ** (math.frexp(max(abs(a), abs(b)))[1] - 8)  # bf16: 8 significant bits

    d = [round(ulps(a, b), 2) for a, b in zip(lc, le)]
    rel = [float((a - b).abs().max() / a.abs().max()) for a, b in zip(first["eager"], first["compiled"])]
    eq = [float((a == b).float().mean()) for a, b in zip(first["eager"], first["compiled"])]
    print(f"\ninductor against eager, torch {torch.__version__}: the losses' difference in bf16 ulps at each step "
          f"{d}; the first gradients: largest difference {min(rel):.3g} to {max(rel):.3g} of each tensor's largest "
          f"element, {min(eq):.0%} to {max(eq):.0%} of the elements equal")
    assert ulps(lc[0], le[0]) <= 1
    assert max(ulps(a, b) for a, b in zip(lc, le)) <= MAX_LOSS_ULPS, (lc, le)
    assert le[-1] < le[0] and lc[-1] < lc[0]


@pytest.mark.parametrize("backend", ["graphs", "inductor"])
def test_compiled_training_step_with_the_optimizer_inside(backend):
    """A whole training step (forward, backward, opt.step(), zero_grad) in one compiled function: Dynamo
    compiles the forward once and runs the step outside its graph, so the step count, which changes at
    every step, causes no recompilation. With Dynamo's graphs as captured ("graphs": a backend that
    returns the graph module) the 20 steps are eager's bit for bit; with inductor, they train."""
    data = batches()
    me, mc = model(), model()
    oe, oc = make_opt(me, "AdamW", "collage-light"), make_opt(mc, "AdamW", "collage-light")
    le = train(me, me, oe, data)
    compiles = []

    def graphs(gm, example_inputs):
        compiles.append(gm)
        return gm.forward

    @torch.compile(backend=graphs if backend == "graphs" else "inductor")
    def train_step(x, y):
        loss = mc(x, y)
        loss.backward()
        oc.step()
        oc.zero_grad(set_to_none=True)
        return loss.detach()

    frames = torch._dynamo.utils.counters["frames"]  # every frame Dynamo compiles, graph or not
    lc = []
    for t, (x, y) in enumerate(data):
        lc.append(float(train_step(x, y)))
        if t == 1:
            after_two = dict(frames)
    assert dict(frames) == after_two, "Dynamo compiled again after the second step"
    if backend == "graphs":
        assert compiles
        assert lc == le
        assert same(words(mc, oc), words(me, oe))
    else:
        assert lc[-1] < lc[0] and all(math.isfinite(v) for v in lc)
        assert oc.state[next(mc.parameters())]["step"] == STEPS
