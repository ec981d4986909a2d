"""to_collage: a float model cast to bf16 keeps its values in θ and the words beside it (δθ or c, the
master, the remainder), as collage_adamw_set_weights_f32 keeps them, and the optimizer takes them over."""

import copy
import ctypes

import numpy as np
import pytest
import torch

import collage
import collage.torch as ct
from collage import _lib
from collage.torch import _lines
from helpers import STRATEGIES, bits, same_bits, torch_lines_or_skip

TWO_WORDS = ("δθ", "c")  # the kept value is θ + that word: 16 significant bits


def model_f32(seed=3, sixteen_bits=False):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    if sixteen_bits:  # every value the exact sum of two bf16 values: hi + a remainder of 8 bits
        with torch.no_grad():
            for p in m.parameters():
                hi = p.to(torch.bfloat16).float()
                lo = ((p - hi) * 0.999).to(torch.bfloat16).float()
                p.copy_(hi + lo)
    return m


def kept(strategy, p):
    """The value the strategy keeps for p after to_collage, in float64."""
    words = p._collage_seed[1]
    th = p.detach().double()
    for w in strategy.state_words:
        if w.key not in words:
            continue
        if w.role_name in TWO_WORDS:
            return th + words[w.key].double()
        if w.role_name == "master":
            return words[w.key].double()
        if w.role_name == "remainder":
            return _lines.rem_join(p.detach(), words[w.key]).double()
        if w.role_name == "e":
            return _lines.c8_join(p.detach(), words[w.key]).double()
    return th


def library_kept(strategy, w):
    """collage_adamw_set_weights_f32 then collage_adamw_kept_f64, and θ's bits."""
    w = w.detach().float().contiguous().reshape(-1).numpy()
    cfg = _lib.AdamWConfig(strategy=strategy.index, n=w.size)
    h = ctypes.c_void_p()
    _lib.check(_lib.lib.collage_adamw_create(ctypes.byref(cfg), ctypes.byref(h)), "create")
    try:
        _lib.lib.collage_adamw_set_weights_f32(h, w.ctypes.data, w.size)
        out = np.empty(w.size)
        _lib.lib.collage_adamw_kept_f64(h, out.ctypes.data, w.size)
        es = 4 if strategy.weights.format == "fp32" else 2
        theta = np.frombuffer((ctypes.c_char * (w.size * es)).from_address(_lib.lib.collage_adamw_params(h)),
                              dtype=np.float32 if es == 4 else np.uint16).copy()
        return out, theta
    finally:
        _lib.lib.collage_adamw_free(h)


@pytest.mark.parametrize("name", STRATEGIES)
def test_kept_values_as_the_library_keeps_them(name):
    s = collage.strategy(name)
    ref = model_f32()
    m = ct.to_collage(copy.deepcopy(ref), name)
    for p, w in zip(m.parameters(), ref.parameters()):
        assert p.dtype == (torch.float32 if s.weights.format == "fp32" else torch.bfloat16)
        want, theta = library_kept(s, w)
        assert np.array_equal(kept(s, p).reshape(-1).numpy(), want), f"{name}: kept value"
        got_theta = p.detach().reshape(-1).contiguous()
        got_theta = got_theta.numpy() if s.weights.format == "fp32" else got_theta.view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(got_theta, theta), f"{name}: θ"
        w64 = w.detach().double()
        if s.weights.format == "fp32" or s.has("master") or s.has("remainder"):
            assert torch.equal(kept(s, p), w64), f"{name}: the float value is kept exactly"
        elif s.has("e"):  # bf16-c8: w to 16 significant bits, to nearest
            assert bool(((kept(s, p) - w64).abs() <= w64.abs() * 2.0 ** -16).all()), f"{name}: 16 bits"
        elif any(s.has(r) for r in TWO_WORDS):
            assert bool(((kept(s, p) - w64).abs() <= w64.abs() * 2.0 ** -16).all()), f"{name}: 16 bits"
        else:
            assert torch.equal(kept(s, p), w.detach().to(torch.bfloat16).double()), f"{name}: RN(w)"


# the bf16 strategies that keep a word beside θ (the others keep RN(w): test_kept_values_...)
KEEPING = [s.name for s in collage.strategies()
           if s.weights.format == "bf16" and any(s.has(r) for r in TWO_WORDS + ("master", "remainder"))]


@pytest.mark.parametrize("name", KEEPING)
@pytest.mark.parametrize("backend", ["c", "torch"])
def test_values_of_sixteen_bits_kept_exactly_through_a_step(name, backend):
    """Values that two bf16 words hold: θ + δθ (or c, the master, the remainder) equals the float model's
    values exactly, and still does after the optimizer took the words over and stepped with lr = 0."""
    s = collage.strategy(name)
    if backend == "torch":
        torch_lines_or_skip(name)
    ref = model_f32(sixteen_bits=True)
    m = ct.to_collage(copy.deepcopy(ref), name)
    for p, w in zip(m.parameters(), ref.parameters()):
        assert torch.equal(kept(s, p), w.detach().double()), f"{name}: not exact after the cast"
    seeds = {id(p): {k: v.clone() for k, v in p._collage_seed[1].items()} for p in m.parameters()}
    opt = ct.AdamW(m.named_parameters(), precision=name, lr=0.0, weight_decay=0.0, backend=backend)
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for p in m.parameters():
        assert not hasattr(p, "_collage_seed"), "the optimizer takes the words over"
        for k, v in seeds[id(p)].items():
            assert same_bits(opt.state[p][k], v), f"{name}: {k} changed in a step with lr 0"


def test_precision_of_the_cast_must_match_the_optimizer():
    m = ct.to_collage(model_f32(), "collage-plus")
    with pytest.raises(ValueError, match=r"parameter '0.weight' was cast by to_collage for 'collage-plus'.*'bf16-master'"):
        ct.AdamW(m.named_parameters(), precision="bf16-master")


def test_buffers_follow_the_weights():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    ct.to_collage(m, "collage-light")
    assert m[1].running_mean.dtype == torch.bfloat16 and m[1].num_batches_tracked.dtype == torch.int64
    assert bits(m[0].weight).dtype == torch.int16
