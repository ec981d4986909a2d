"""state_dict / load_state_dict: every word, the step and the random stream survive torch.save and
torch.load bit for bit, across the two paths; a dict that does not fit is refused by name."""

import io

import pytest
import torch

import collage
from helpers import STRATEGIES, bits, flat, make_opt, make_params, run, same_bits, torch_lines_or_skip

FIRST, REST = 30, 20


def _resume(name, first_backend, second_backend):
    """FIRST steps on one path, torch.save / torch.load of model and optimizer, REST on the other."""
    params = make_params(name)
    opt = make_opt(params, name, first_backend)
    run(opt, params, FIRST)
    buf = io.BytesIO()
    torch.save({"model": [p.detach() for p in flat(params)], "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf)
    params2 = make_params(name, seed=99)  # other values: everything must come from the file
    with torch.no_grad():
        for p, v in zip(flat(params2), saved["model"]):
            p.copy_(v)
    opt2 = make_opt(params2, name, second_backend, seed=12345, max_grad_norm=3.0)  # the dict restores these
    opt2.load_state_dict(saved["opt"])
    run(opt2, params2, REST, start=FIRST)
    return params2, opt2


@pytest.mark.parametrize("name", STRATEGIES)
def test_resume_bit_for_bit(name):
    torch_lines_or_skip(name)
    ref = make_params(name)
    ref_opt = make_opt(ref, name, "c")
    run(ref_opt, ref, FIRST + REST)
    for first, second in (("c", "c"), ("torch", "c"), ("c", "torch")):
        params, opt = _resume(name, first, second)
        for i, (a, b) in enumerate(zip(flat(ref), flat(params))):
            assert same_bits(a, b), f"{name}: {first} then {second}: tensor {i} differs from an unbroken run"
            for k, v in ref_opt.state[a].items():
                w = opt.state[b][k]
                assert same_bits(v, w) if torch.is_tensor(v) else v == w, f"{name}: {first}/{second}: {k}"


def stepped(name, steps):
    params = make_params(name)
    opt = make_opt(params, name, "c")
    run(opt, params, steps)
    return params, opt


def test_state_dict_holds_every_word():
    name = "collage-plus"
    _, opt = stepped(name, 2)
    sd = opt.state_dict()
    assert sd["collage"]["precision"] == name and sd["collage"]["seed"] == 7
    st = sd["state"][0]
    assert set(st) == {"step", "synced", "exp_avg", "exp_avg_sq", "compensation", "exp_avg_sq_lo"}
    assert st["step"] == 2 and st["synced"] is True
    assert all(st[k].dtype == torch.bfloat16 for k in ("exp_avg", "exp_avg_sq", "compensation", "exp_avg_sq_lo"))


def test_state_dict_of_another_strategy_is_refused():
    _, opt = stepped("collage-light", 1)
    other = make_opt(make_params("bf16-kahan"), "bf16-kahan", "c")
    with pytest.raises(ValueError, match="'collage-light' state, but this optimizer is 'bf16-kahan'"):
        other.load_state_dict(opt.state_dict())


def test_state_dict_with_a_wrong_word_is_refused():
    name = "bf16-master"
    _, opt = stepped(name, 1)
    sd = opt.state_dict()
    sd["state"][1]["master"] = sd["state"][1]["master"].to(torch.bfloat16)
    fresh = make_opt(make_params(name), name, "c")
    with pytest.raises(ValueError, match=r"'master' of parameter 1 of param group 0 .* torch.bfloat16"):
        fresh.load_state_dict(sd)
    del sd["state"][1]["master"]
    with pytest.raises(ValueError, match="has no 'master'"):
        fresh.load_state_dict(sd)
    assert not fresh.state  # nothing was loaded


def test_words_are_not_copied_in_a_step():
    """The C path steps the state tensors' own memory: the tensors keep their storage across steps."""
    name = "collage-light"
    params, opt = stepped(name, 1)
    p = params[0][0]
    ptrs = (p.data_ptr(), *(opt.state[p][k].data_ptr() for k in ("exp_avg", "exp_avg_sq", "compensation")))
    before = [bits(opt.state[p][k]).clone() for k in ("exp_avg", "exp_avg_sq", "compensation")]
    run(opt, params, 1, start=1)
    assert ptrs == (p.data_ptr(), *(opt.state[p][k].data_ptr() for k in ("exp_avg", "exp_avg_sq", "compensation")))
    assert any(not torch.equal(b, bits(opt.state[p][k])) for b, k in zip(before, ("exp_avg", "exp_avg_sq", "compensation")))
    assert collage.strategy(name).bytes_per_param == 10


ROUND_TRIP = STRATEGIES + ["collage-light+m=int8,v=int8", "bf16-master+m=e4m3,v=int8", "bf16-c8+m=int8,v=int8",
                           "collage-plus+m=int8,v=e4m3,q=sr"]


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip_keeps_every_words_dtype_and_bits(name):
    """state_dict, torch.save, torch.load, load_state_dict into a fresh optimizer: every word of every
    parameter keeps its dtype, size and bits (8-bit codes and scales, int8 correction bytes, fp32 masters
    beside bf16 parameters), and the step count and the synced flag come back."""
    params, opt = stepped(name, 3)
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    other = make_params(name, seed=99)
    fresh = make_opt(other, name, "c")
    fresh.load_state_dict(torch.load(buf))
    for p, q in zip(flat(params), flat(other)):
        assert set(opt.state[p]) == set(fresh.state[q])
        for k, v in opt.state[p].items():
            w = fresh.state[q][k]
            if torch.is_tensor(v):
                assert w.dtype == v.dtype and w.shape == v.shape and same_bits(v, w), f"{name}: {k}"
            else:
                assert v == w, f"{name}: {k}"


def test_torch_loader_would_cast_the_master():
    """What the override guards against: torch.optim.Optimizer.load_state_dict casts floating state to the
    parameter's dtype (an fp32 master to bf16, losing its low bits); collage's keeps fp32."""
    name = "bf16-master"
    _, opt = stepped(name, 3)
    sd = opt.state_dict()
    cast = make_opt(make_params(name), name, "c")
    torch.optim.Optimizer.load_state_dict(cast, sd)
    assert next(iter(cast.state.values()))["master"].dtype == torch.bfloat16
    kept = make_opt(make_params(name), name, "c")
    kept.load_state_dict(sd)
    assert next(iter(kept.state.values()))["master"].dtype == torch.float32
