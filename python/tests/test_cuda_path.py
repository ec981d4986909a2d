"""collage.torch.AdamW's CUDA path without a GPU: which path a CUDA tensor takes (libcollage_cuda where it is
there; an exception naming what is missing where it is not, unless backend="torch" asks for the slow torch
lines), and the table of tensors the package hands collage_cuda_adamw_step: here a stand-in runs that table
through libcollage on the CPU (each entry as a collage_adamw over the entry's pointers, stepped with the Σg²
passed), which must give the C path's bits, so every pointer, slab index, step number and hyperparameter
of the table is the right one. scripts/gpu_check.sh runs the real library on a GPU."""

import ctypes
import os
import types

import pytest
import torch

import collage
from collage import _cuda, _lib
from helpers import SHAPES, flat, make_grads, make_opt, make_params, run, same_bits


def fake_cuda_param(shape=(3, 4)):
    return types.SimpleNamespace(device=torch.device("cuda", 0), shape=shape)


def test_cuda_tensor_without_the_library_names_it(monkeypatch):
    monkeypatch.setattr(_cuda, "available", lambda: False)
    monkeypatch.setattr(_cuda, "missing", lambda: "/x/libcollage_cuda.so (no such file)")
    opt = make_opt(make_params("collage-light"), "collage-light", "auto")
    with pytest.raises(RuntimeError) as e:
        opt._path(fake_cuda_param())
    msg = str(e.value)
    assert "libcollage_cuda.so" in msg and "make CUDA=1" in msg and "backend='torch'" in msg and "/x/" in msg
    assert "COLLAGE_CUDA_LIB" in msg and "slow" in msg
    opt.backend = "torch"  # the opt-in: the torch lines
    assert opt._path(fake_cuda_param()) == "torch"


def test_cuda_tensor_with_the_library_takes_it(monkeypatch):
    monkeypatch.setattr(_cuda, "available", lambda: True)
    opt = make_opt(make_params("bf16-sr"), "bf16-sr", "auto")
    assert opt._path(fake_cuda_param()) == "cuda"
    assert opt._path(torch.zeros(2, dtype=torch.bfloat16)) == "c"
    opt.backend = "torch"
    assert opt._path(fake_cuda_param()) == "torch"


def test_lion_and_sgd_on_cuda_take_the_torch_lines(monkeypatch):
    """libcollage_cuda steps AdamW only: Lion and SGD on CUDA tensors take their torch lines, whether or not
    the library is there, and never the AdamW kernels."""
    for there in (True, False):
        monkeypatch.setattr(_cuda, "available", lambda there=there: there)
        for cls in (collage.torch.Lion, collage.torch.SGD):
            opt = cls(make_params("collage-light")[0], precision="collage-light")
            assert opt._path(fake_cuda_param()) == "torch"
            assert opt._path(torch.zeros(2, dtype=torch.bfloat16)) == "c"


class CpuStandIn:
    """collage._cuda.Step's stand-in: the table run through libcollage (one collage_adamw per entry over the
    entry's own pointers), the Σg² read from the pointer given; the chunk sums from collage_sumsq_chunks."""
    made = []
    own_sums = 0  # steps that summed their own Σg² (the one-device path)

    def __init__(self, strategy_index, device_index, clip, skip_nonfinite, edq, seed, max_tensors, max_elements):
        self.key = (strategy_index, device_index, clip, skip_nonfinite, edq, seed)
        self.max_tensors, self.max_elements = max_tensors, max_elements
        CpuStandIn.made.append(self)

    def fits(self, key, k, elements):
        return key == self.key and k <= self.max_tensors and elements <= self.max_elements

    def sumsq_chunks(self, table, out_ptr, stream):
        assert stream == 4242
        kind = 0 if self.key[0] == collage.strategy("fp32").index else 1
        at = 0
        for t in table:
            nb = -(-t.n // 16384)
            _lib.check(_lib.lib.collage_sumsq_chunks(t.grad, kind, t.n, 16384, out_ptr + 8 * at), "chunks")
            at += nb

    def step(self, table, sumsq_ptr, stream):
        self.launch(table, sumsq_ptr, stream)
        return self.stats(len(table))

    def stats(self, k):
        assert len(self.last[1]) == k
        return self.last

    def launch(self, table, sumsq_ptr, stream):
        assert stream == 4242
        strategy, _, clip, skip, edq, seed = self.key
        if sumsq_ptr is None:  # the table's own Σg²: its gradients' chunk sums added in order
            CpuStandIn.own_sums += 1
            nb = sum(-(-t.n // 16384) for t in table)
            chunks = (ctypes.c_double * max(nb, 1))()
            self.sumsq_chunks(table, ctypes.addressof(chunks), stream)
            sumsq = 0.0
            for c in chunks[:nb]:
                sumsq += c
        else:
            sumsq = ctypes.c_double.from_address(sumsq_ptr).value
        out, got = [], None
        for t in table:
            words = (ctypes.c_void_p * _lib.ROLE_COUNT)(*[t.words[r] for r in range(_lib.ROLE_COUNT)])
            cfg = _lib.AdamWConfig(strategy=strategy, n=t.n, beta1=t.beta1, beta2=t.beta2, eps=t.eps,
                                   weight_decay=t.weight_decay, clip=clip, skip_nonfinite=int(skip), edq=int(edq),
                                   seed=seed, params=t.words[0], index0=t.index0, total=t.index0 + t.n, words=words)
            h = ctypes.c_void_p()
            _lib.check(_lib.lib.collage_adamw_create(ctypes.byref(cfg), ctypes.byref(h)), "create")
            _lib.lib.collage_adamw_set_steps(h, t.step - 1, 1)
            st = _lib.StepStats()
            rc = _lib.lib.collage_adamw_step_sumsq(h, t.grad, t.lr, sumsq, ctypes.byref(st))
            if rc != _lib.ERR_NONFINITE:
                _lib.check(rc, "step")
            got = (bool(st.skipped), st.grad_norm, st.clip_coef)
            out.append((st.edq.sum_dot, st.edq.sum_dot_state, st.edq.sum_nn, st.edq.lost_count, st.edq.updates))
            _lib.lib.collage_adamw_free(h)
        self.last = (got, out)

    def close(self):
        pass


@pytest.mark.parametrize("one_device,edq", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("strategy", ["collage-light", "bf16-sr", "collage-plus", "bf16-master", "fp32"])
def test_the_table_drives_the_c_step(monkeypatch, strategy, one_device, edq):
    """one_device: every tensor on one device, the library sums Σg² itself (without EDQ or skip_nonfinite
    the step is not waited for, its statistics read when asked for); else (an all_reduce, here of one rank)
    the package sums the chunks and hands the library the total."""
    ref = make_params(strategy)
    mine = [[torch.nn.Parameter(p.detach().clone()) for p in grp] for grp in ref]
    oref = make_opt(ref, strategy, "c", edq=edq)
    omine = make_opt(mine, strategy, "auto", edq=edq, **({} if one_device else {"all_reduce": lambda t: t}))
    monkeypatch.setattr(_cuda, "Step", CpuStandIn)
    monkeypatch.setattr(omine, "_path", lambda p: "cuda")  # this optimizer only: oref takes the C path
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: types.SimpleNamespace(cuda_stream=4242))
    CpuStandIn.made.clear()
    CpuStandIn.own_sums = 0
    for start in (0, 3):  # the table kept from step to step sees a group's new lr and betas
        run(oref, ref, 3, start=start)
        run(omine, mine, 3, start=start)
        for opt in (oref, omine):
            opt.param_groups[1]["lr"] *= 0.5
            opt.param_groups[2]["betas"] = (0.8, 0.99)
    assert CpuStandIn.made, "the CUDA path was not taken"
    assert CpuStandIn.own_sums == (6 if one_device else 0)
    assert all(p not in oref._cuda_steps for p in flat(ref)) and oref._native, "the reference took the C path"
    for a, b in zip(flat(ref), flat(mine)):
        assert same_bits(a, b)
        for k, v in oref.state[a].items():
            w = omine.state[b][k]
            assert (same_bits(v, w) if torch.is_tensor(v) else v == w), k
    assert omine.last_stats["grad_norm"] == oref.last_stats["grad_norm"]
    assert omine.last_stats["clip_coef"] == oref.last_stats["clip_coef"] < 1.0
    assert omine.last_stats["step"] == oref.last_stats["step"] == 6
    if edq:
        assert omine.last_stats["edq"] == oref.last_stats["edq"]


def test_the_library_refuses_a_machine_without_a_gpu():
    """Where make CUDA=1 built libcollage_cuda.so beside libcollage.so: the declarations load and creating
    the step on a machine without a CUDA device is refused with a message (not a crash)."""
    if not _cuda.available():
        pytest.skip(f"libcollage_cuda.so not built (make CUDA=1): {_cuda.missing()}")
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) != "" and torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: scripts/gpu_check.sh runs the library there")
    with pytest.raises(_lib.CollageError, match="collage_cuda_adamw_create"):
        _cuda.Step(collage.strategy("collage-light").index, 0, 1.0, False, False, 0, 4, 1000)


@pytest.mark.parametrize("one_device", [True, False])
def test_a_nonfinite_gradient_skips_on_the_cuda_path(monkeypatch, one_device):
    """skip_nonfinite on the CUDA path: a step with a NaN gradient changes nothing and counts no step,
    with the library's own Σg² (one device) as with the package's; the run then goes on as the C path's."""
    name = "collage-light"
    ref = make_params(name)
    mine = [[torch.nn.Parameter(p.detach().clone()) for p in grp] for grp in ref]
    oref = make_opt(ref, name, "c", skip_nonfinite=True)
    omine = make_opt(mine, name, "auto", skip_nonfinite=True, **({} if one_device else {"all_reduce": lambda t: t}))
    monkeypatch.setattr(_cuda, "Step", CpuStandIn)
    monkeypatch.setattr(omine, "_path", lambda p: "cuda")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: types.SimpleNamespace(cuda_stream=4242))
    CpuStandIn.own_sums = 0
    for t in range(5):
        for opt, params in ((oref, ref), (omine, mine)):
            for ps, gs in zip(params, make_grads(t, SHAPES, params[0][0].dtype, nonfinite=t == 2)):
                for p, g in zip(ps, gs):
                    p.grad = g
            opt.step()
        assert omine.last_stats["skipped"] == oref.last_stats["skipped"] == (t == 2)
        assert omine.last_stats["step"] == oref.last_stats["step"] == (t + 1 if t < 2 else t)
    assert CpuStandIn.own_sums == (5 if one_device else 0)
    for a, b in zip(flat(ref), flat(mine)):
        assert same_bits(a, b)
        for k, v in oref.state[a].items():
            w = omine.state[b][k]
            assert (same_bits(v, w) if torch.is_tensor(v) else v == w), k
