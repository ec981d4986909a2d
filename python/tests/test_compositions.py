"""collage.torch.AdamW with the compositions docs/python.md promises, 8-bit moments included: the C path
gives the bits of libcollage driven directly (one optimizer per tensor at the tensor's place in the
virtual slab, each tensor starting a block of 256), the 8-bit words held as the library lays them out
(codes padded to 64 bytes, then the fp32 block scales), and a state dict resumes bit for bit."""

import ctypes
import io

import numpy as np
import pytest
import torch

import collage
import collage.torch as ct
from collage import _lib
from helpers import bits, same_bits

COMPOSITIONS = ["collage-light+m=int8,v=int8", "bf16-sr+m=int8,v=int8,q=sr", "bf16-master+m=int8,v=int8",
                "bf16+m=e4m3,v=int8", "collage-plus+m=int8", "bf16-kahan+m=e4m3,v=e4m3,q=sr",
                "collage-light+m=fp32,v=bf16", "bf16-c8+m=int8,v=int8"]
SHAPES = [(300,), (5, 7), (1000,), (256,)]  # a partial block, a tiny tensor, several blocks, one whole block
HP = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
STEPS = 12


def params_of(name, seed=1):
    dt = torch.float32 if collage.strategy(name).weights.format == "fp32" else torch.bfloat16
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter((torch.randn(s, generator=g) * 0.5).to(dt)) for s in SHAPES]


def grads(t, params):
    g = torch.Generator().manual_seed(100 + t)
    return [(torch.randn(p.shape, generator=g) * 10.0 ** (i % 3 - 2)).to(p.dtype) for i, p in enumerate(params)]


class PerTensorC:
    """libcollage driven directly: one optimizer per tensor owning its words, at index0 = the tensor's
    offset in the slab rounded up to a multiple of 256 for 8-bit strategies."""

    def __init__(self, name, params):
        s = collage.strategy(name)
        self.s, self.handles, at = s, [], 0
        q8 = any(w.block for w in s.words)
        for p in params:
            at = -(-at // 256) * 256 if q8 else at
            cfg = _lib.AdamWConfig(strategy=s.index, n=p.numel(), beta1=HP["betas"][0], beta2=HP["betas"][1],
                                   eps=HP["eps"], weight_decay=HP["weight_decay"], seed=0, index0=at,
                                   total=at + p.numel())
            h = ctypes.c_void_p()
            _lib.check(_lib.lib.collage_adamw_create(ctypes.byref(cfg), ctypes.byref(h)), "create")
            w = bits(p).numpy()
            ctypes.memmove(_lib.lib.collage_adamw_params(h), w.ctypes.data, w.nbytes)
            self.handles.append(h)
            at += p.numel()

    def step(self, gs):
        for h, g in zip(self.handles, gs):
            g = bits(g).numpy()
            _lib.check(_lib.lib.collage_adamw_step(h, g.ctypes.data, HP["lr"], None), "step")

    def word_bytes(self, k, role, nbytes):
        ptr = _lib.lib.collage_adamw_params(self.handles[k]) if role is None else \
            _lib.lib.collage_adamw_word(self.handles[k], role)
        return bytes((ctypes.c_char * nbytes).from_address(ptr))

    def close(self):
        for h in self.handles:
            _lib.lib.collage_adamw_free(h)


def tensor_bytes(t):
    return bits(t).numpy().tobytes()


@pytest.mark.parametrize("name", COMPOSITIONS)
def test_composition_equals_the_library(name):
    params = params_of(name)
    opt = ct.AdamW(params, precision=name, **HP)
    direct = PerTensorC(name, params)
    try:
        for t in range(STEPS):
            gs = grads(t, params)
            for p, g in zip(params, gs):
                p.grad = g
            opt.step()
            direct.step(gs)
        for k, p in enumerate(params):
            b = tensor_bytes(p)
            assert b == direct.word_bytes(k, None, len(b)), f"{name}: θ of tensor {k}"
            for w in opt.strategy.state_words:
                word = opt.state[p][w.key]
                if w.block:
                    n = p.numel()
                    assert word.dtype == torch.uint8 and word.shape == ((n + 63) // 64 * 64 + -(-n // 256) * 4,)
                b = tensor_bytes(word)
                assert b == direct.word_bytes(k, w.role, len(b)), f"{name}: {w.key} of tensor {k}"
    finally:
        direct.close()


@pytest.mark.parametrize("name", COMPOSITIONS[:3])
def test_composition_resumes_bit_for_bit(name):
    ref = params_of(name)
    ref_opt = ct.AdamW(ref, precision=name, **HP)
    params = params_of(name)
    opt = ct.AdamW(params, precision=name, **HP)
    for t in range(STEPS):
        for p, q, g in zip(ref, params, grads(t, ref)):
            p.grad, q.grad = g, g.clone()
        ref_opt.step()
        if t < STEPS // 2:
            opt.step()
        elif t == STEPS // 2:
            buf = io.BytesIO()
            torch.save({"w": [p.detach() for p in params], "opt": opt.state_dict()}, buf)
            buf.seek(0)
            saved = torch.load(buf)
            params = params_of(name, seed=9)
            with torch.no_grad():
                for p, v in zip(params, saved["w"]):
                    p.copy_(v)
            opt = ct.AdamW(params, precision=name, **HP)
            opt.load_state_dict(saved["opt"])
            for p, g in zip(params, grads(t, params)):
                p.grad = g
            opt.step()
        else:
            opt.step()
    for a, b in zip(ref, params):
        assert same_bits(a, b)
        for k, v in ref_opt.state[a].items():
            assert (same_bits(v, opt.state[b][k]) if torch.is_tensor(v) else v == opt.state[b][k]), k


def test_8bit_word_of_the_wrong_size_refused():
    name = COMPOSITIONS[0]
    params = params_of(name)
    opt = ct.AdamW(params, precision=name, **HP)
    for p, g in zip(params, grads(0, params)):
        p.grad = g
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["exp_avg"] = torch.zeros(300, dtype=torch.uint8)  # the codes without their scales
    opt2 = ct.AdamW(params_of(name), precision=name, **HP)
    with pytest.raises(ValueError, match=r"the state dict's 'exp_avg' of parameter 0 of param group 0 \(shape "
                                         r"\(300,\)\) is torch.uint8 with 300 elements; .* keeps it as torch.uint8 "
                                         r"with 328 elements \(the 300 codes padded to a multiple of 64, then 2 fp32 "
                                         r"block scales\)"):
        opt2.load_state_dict(sd)
    assert not opt2.state
