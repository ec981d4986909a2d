"""collage.torch never corrupts a tensor: every entry point (AdamW(), add_param_group, step,
load_state_dict, to_collage, the precision's name) checks what it is given before it changes anything,
as torch.optim does. Each refusal is asserted three ways: the exception, a message naming the parameter
(or group, or argument) and the problem, and every tensor's bytes, the groups and the state unchanged."""

import copy
import io
import math
import subprocess
import os

import pytest
import torch

import collage
import collage.torch as ct
from helpers import same_bits

BAD_HPARAMS = [  # (hyperparameter, value, exception, what the message says)
    ("lr", math.inf, ValueError, r"lr is inf; it must be a finite number"),
    ("lr", math.nan, ValueError, r"lr is nan; it must be a finite number"),
    ("lr", -1e-3, ValueError, r"lr -0.001 must be >= 0"),
    ("lr", "fast", TypeError, r"lr must be a real number, not 'fast'"),
    ("eps", math.inf, ValueError, r"eps is inf; it must be a finite number"),
    ("eps", 0.0, ValueError, r"eps 0.0 must be > 0"),
    ("weight_decay", math.inf, ValueError, r"weight_decay is inf; it must be a finite number"),
    ("weight_decay", -0.1, ValueError, r"weight_decay -0.1 must be >= 0"),
    ("betas", (0.9, 1.0), ValueError, r"betas \(0.9, 1.0\) must be two numbers in \(0, 1\)"),
    ("betas", (math.nan, 0.9), ValueError, r"betas \(nan, 0.9\) must be two numbers in \(0, 1\)"),
    ("betas", (0.9, math.inf), ValueError, r"betas \(0.9, inf\) must be two numbers in \(0, 1\)"),
    ("betas", (0.9, "x"), TypeError, r"betas must be a pair \(beta1, beta2\) of numbers, not \(0.9, 'x'\)"),
    ("betas", (0.9,), ValueError, r"betas \(0.9,\) must be two numbers in \(0, 1\)"),
    ("betas", 0.9, TypeError, r"betas must be a pair \(beta1, beta2\) of numbers, not 0.9"),
]


def bf16_params(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(torch.bfloat16)) for s in shapes]


def give_grads(params, seed=1):
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(p.dtype)


def snapshot(opt, tensors):
    """Everything a refusal must leave as it was: the tensors' bits, the groups, the state's words."""
    groups = [{k: (list(map(id, v)) if k == "params" else v) for k, v in g.items()} for g in opt.param_groups]
    state = {id(p): {k: (v.clone() if torch.is_tensor(v) else v) for k, v in st.items()} for p, st in opt.state.items()}
    return [t.detach().clone() for t in tensors], groups, state


def assert_unchanged(opt, tensors, snap):
    before, groups, state = snap
    for i, (t, b) in enumerate(zip(tensors, before)):
        assert t.dtype == b.dtype and same_bits(t, b), f"tensor {i} changed"
    assert [{k: (list(map(id, v)) if k == "params" else v) for k, v in g.items()} for g in opt.param_groups] == groups
    assert {id(p) for p in opt.state} == set(state), "the state gained or lost a parameter"
    for p, st in opt.state.items():
        for k, v in st.items():
            assert (same_bits(v, state[id(p)][k]) if torch.is_tensor(v) else v == state[id(p)][k]), f"state {k} changed"


def stepped_optimizer():
    """An optimizer over two bf16 tensors that has taken a step, with its tensors."""
    params = bf16_params((5, 3), (7,))
    opt = ct.AdamW([("a", params[0]), ("b", params[1])], precision="collage-light", lr=1e-2)
    give_grads(params)
    opt.step()
    return opt, params


# ---------------------------------------------------------------- add_param_group
def test_refused_fp32_group_is_not_added_and_never_stepped():
    opt, params = stepped_optimizer()
    ref_opt, ref_params = stepped_optimizer()
    w32 = torch.nn.Parameter(torch.randn(32))
    w32.grad = torch.randn(32)
    snap = snapshot(opt, params + [w32])
    with pytest.raises(TypeError, match=r"parameter 'w32' is torch.float32, but 'collage-light' steps torch.bfloat16"):
        opt.add_param_group({"params": [("w32", w32)]})
    assert_unchanged(opt, params + [w32], snap)
    assert len(opt.param_groups) == 1
    # the next step leaves the fp32 memory alone and steps the rest as if nothing had been tried
    for o, ps in ((opt, params), (ref_opt, ref_params)):
        give_grads(ps, seed=2)
        o.step()
    assert same_bits(w32, snap[0][-1]), "the refused fp32 tensor was stepped"
    for a, b in zip(params, ref_params):
        assert same_bits(a, b)


@pytest.mark.parametrize("key,value,exc,msg", BAD_HPARAMS)
def test_bad_hyperparameter_in_a_new_group(key, value, exc, msg):
    opt, params = stepped_optimizer()
    extra = bf16_params((4,), seed=5)
    snap = snapshot(opt, params + extra)
    with pytest.raises(exc, match=r"param group 1: " + msg):
        opt.add_param_group({"params": extra, key: value})
    assert_unchanged(opt, params + extra, snap)


@pytest.mark.parametrize("key,value,exc,msg", BAD_HPARAMS)
def test_bad_hyperparameter_at_construction(key, value, exc, msg):
    params = bf16_params((3,))
    before = params[0].detach().clone()
    with pytest.raises(exc, match=r"param group 0: " + msg):
        ct.AdamW(params, **{key: value})
    assert same_bits(params[0], before)


def test_parameter_twice_in_a_group():
    opt, params = stepped_optimizer()
    p = bf16_params((6,), seed=3)[0]
    snap = snapshot(opt, params + [p])
    with pytest.raises(ValueError, match=r"parameter 'x' appears twice in param group 1 \(also as parameter 0\)"):
        opt.add_param_group({"params": [("x", p), ("x", p)]})
    assert_unchanged(opt, params + [p], snap)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        opt.add_param_group({"params": [params[0]]})  # torch's own check, before the group is added
    assert_unchanged(opt, params + [p], snap)


# ---------------------------------------------------------------- step
@pytest.mark.parametrize("key,value,exc,msg", [c for c in BAD_HPARAMS if c[2] is ValueError])
def test_hyperparameter_changed_after_construction(key, value, exc, msg):
    """A scheduler (or anyone) may write into param_groups: step checks every group before it changes
    anything, so a refused step leaves the tensors and the state as they were."""
    opt, params = stepped_optimizer()
    extra = bf16_params((4,), seed=5)
    opt.add_param_group({"params": extra, "lr": 1e-3})
    give_grads(params + extra, seed=4)
    opt.step()
    opt.param_groups[1][key] = value
    give_grads(params + extra, seed=5)
    snap = snapshot(opt, params + extra)
    with pytest.raises(exc, match=r"param group 1: " + msg):
        opt.step()
    assert_unchanged(opt, params + extra, snap)


def test_bad_gradient_in_a_later_group_changes_nothing():
    a, b = bf16_params((5,), (4, 6))
    opt = ct.AdamW([{"params": [("a", a)]}, {"params": [("b", b)]}])
    a.grad = torch.ones(5, dtype=torch.bfloat16)
    b.grad = torch.ones(6, 4, dtype=torch.bfloat16).t()
    snap = snapshot(opt, [a, b])
    with pytest.raises(ValueError, match=r"parameter 'b': its gradient is not contiguous"):
        opt.step()
    assert_unchanged(opt, [a, b], snap)
    assert not opt.state, "a refused step created state"


def test_zero_size_parameter_is_skipped():
    """torch accepts a parameter with no elements; there is nothing to step, and the others step as
    they would without it."""
    empty = torch.nn.Parameter(torch.zeros(0, 3, dtype=torch.bfloat16))
    params = bf16_params((5, 3), (7,))
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for precision in ("collage-light", "collage-light+m=int8,v=int8"):
        opt = ct.AdamW([params[0], empty, params[1]], precision=precision, max_grad_norm=1.0, edq=True)
        ref_opt = ct.AdamW(ref, precision=precision, max_grad_norm=1.0, edq=True)
        for t in range(3):
            give_grads(params, seed=t)
            give_grads(ref, seed=t)
            empty.grad = torch.zeros(0, 3, dtype=torch.bfloat16)
            opt.step()
            ref_opt.step()
        assert empty.shape == (0, 3) and opt.state[empty]["step"] == 3
        for a, b in zip(params, ref):
            assert same_bits(a, b), precision
        assert opt.last_stats["grad_norm"] == ref_opt.last_stats["grad_norm"]
        sd = opt.state_dict()
        opt2 = ct.AdamW([params[0], empty, params[1]], precision=precision, max_grad_norm=1.0, edq=True)
        opt2.load_state_dict(sd)
        assert opt2.state[empty]["step"] == 3


def test_meta_device_is_named():
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16, device="meta"))
    q = bf16_params((4,))[0]
    opt = ct.AdamW([{"params": [("q", q)]}, {"params": [("m", p)]}])
    p.grad = torch.zeros(3, dtype=torch.bfloat16, device="meta")
    q.grad = torch.ones(4, dtype=torch.bfloat16)
    snap = snapshot(opt, [q])
    with pytest.raises(ValueError, match=r"parameter 'm' is on the meta device, which holds no values: there is "
                                         r"nothing to step \(materialise the model first"):
        opt.step()
    assert_unchanged(opt, [q], snap)
    assert not opt.state


def test_strategy_without_torch_lines_refused_before_any_change():
    params = bf16_params((5,), (300,))
    opt = ct.AdamW(params, precision="collage-light+m=int8,v=int8", backend="torch")
    give_grads(params)
    snap = snapshot(opt, params)
    with pytest.raises(NotImplementedError, match=r"'collage-light\+m=int8,v=int8' has no torch lines yet: parameter 0 "
                                                  r"of param group 0 \(shape \(5,\)\) on cpu cannot be stepped"):
        opt.step()
    assert_unchanged(opt, params, snap)


# ---------------------------------------------------------------- load_state_dict
def test_state_dict_with_a_bad_hyperparameter():
    opt, params = stepped_optimizer()
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][0]["eps"] = math.inf
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    snap = snapshot(opt, params)
    with pytest.raises(ValueError, match=r"the state dict's param group 0: eps is inf; it must be a finite number"):
        opt.load_state_dict(torch.load(buf))
    assert_unchanged(opt, params, snap)


# ---------------------------------------------------------------- to_collage
def float_model(seed=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))


def test_to_collage_twice_keeps_the_rounding_error():
    m = ct.to_collage(float_model(), "collage-light")
    seeds = {n: {k: v.clone() for k, v in p._collage_seed[1].items()} for n, p in m.named_parameters()}
    weights = {n: p.detach().clone() for n, p in m.named_parameters()}
    assert any(bool(v["compensation"].any()) for v in seeds.values()), "the test needs a nonzero rounding error"
    assert ct.to_collage(m, "collage-light") is m
    for n, p in m.named_parameters():
        assert same_bits(p, weights[n]) and p._collage_seed[0] == "collage-light"
        for k, v in p._collage_seed[1].items():
            assert same_bits(v, seeds[n][k]), f"{n}: the second cast changed its {k}"


def test_to_collage_for_another_precision_refused():
    m = ct.to_collage(float_model(), "collage-light")
    weights = {n: p.detach().clone() for n, p in m.named_parameters()}
    with pytest.raises(ValueError, match=r"parameter '0.weight' was cast by to_collage for 'collage-light' already: "
                                         r"casting it for 'bf16-master' would drop the rounding error"):
        ct.to_collage(m, "bf16-master")
    for n, p in m.named_parameters():
        assert same_bits(p, weights[n]) and p._collage_seed[0] == "collage-light"


def test_to_collage_on_the_meta_device_refused_before_any_cast():
    m = float_model()
    m.append(torch.nn.Linear(4, 2, device="meta"))
    weights = {n: p.detach().clone() for n, p in m.named_parameters() if p.device.type != "meta"}
    with pytest.raises(ValueError, match=r"parameter '2.weight' is on the meta device, which holds no values to cast"):
        ct.to_collage(m, "collage-light")
    for n, w in weights.items():
        p = dict(m.named_parameters())[n]
        assert p.dtype == torch.float32 and same_bits(p, w) and not hasattr(p, "_collage_seed")


# ---------------------------------------------------------------- the precision's name
MALFORMED = ["collage-max", "collage-light+m=int9", "collage-light+m=mcf", "collage-light+v=int8,v=int8",
             "collage-light+q=sr", "collage-light+", "bf16+x=1", ""]


def cli_reason(name):
    """What `collage train --precision NAME` says is wrong with NAME (the text after the name)."""
    out = subprocess.run([os.environ["COLLAGE_BIN"], "train", "--precision", name, "--steps", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out.stderr
    first = out.stderr.splitlines()[0]
    return first.split(f"'{name}': ", 1)[1]


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_precision_says_what_the_cli_says(name):
    reason = cli_reason(name)
    assert reason, "the CLI gives a reason"
    p = bf16_params((3,))[0]
    before = p.detach().clone()
    with pytest.raises(ValueError) as e:
        ct.AdamW([p], precision=name)
    assert f"precision {name!r}: {reason}" in str(e.value)
    assert "PRESET+m=F,v=F[,q=sr]" in str(e.value)
    with pytest.raises(ValueError, match=r"precision .*: " + r"\S"):
        ct.to_collage(float_model(), name)
    assert same_bits(p, before)
