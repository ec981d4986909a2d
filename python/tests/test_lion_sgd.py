"""collage.torch.Lion and collage.torch.SGD (numerics.md §14): the C path and the torch path give the same
bits on CPU for every strategy with torch lines, both keep m only, state dicts resume bit for bit, and a
strategy whose v is a pair is refused."""

import pytest
import torch

import collage
import collage.torch as ct
from helpers import GROUP_HP, SHAPES, flat, make_params, run, same_bits

STEPS = 25
NAMES = ["fp32", "bf16", "collage-light", "bf16-fp32-states", "bf16-master", "bf16-kahan", "bf16-sr", "bf16-remainder",
         "bf16-c8"]
KINDS = {
    "lion": lambda groups, name, backend: ct.Lion(groups, precision=name, lr=3e-3, weight_decay=0.1,
                                                  max_grad_norm=1.0, edq=True, seed=5, backend=backend),
    "sgd": lambda groups, name, backend: ct.SGD(groups, precision=name, lr=1e-2, momentum=0.9, weight_decay=0.05,
                                                max_grad_norm=1.0, edq=True, seed=5, backend=backend),
    "sgd-nesterov-decoupled": lambda groups, name, backend: ct.SGD(groups, precision=name, lr=1e-2, momentum=0.8,
                                                                   nesterov=True, decoupled=True, weight_decay=0.05,
                                                                   edq=True, seed=5, backend=backend),
}


def make(kind, name, backend, params):
    groups = [dict(params=ps, **{k: v for k, v in hp.items() if k != "eps"}) for ps, hp in zip(params, GROUP_HP)]
    return KINDS[kind](groups, name, backend)


# eco (numerics.md §6): heavy-ball SGD only
ECO_CASES = [("eco", kind) for kind in sorted(KINDS) if kind == "sgd"]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", NAMES)
def test_c_and_torch_paths_bit_identical(kind, name):
    _c_and_torch(kind, name)


@pytest.mark.parametrize("name,kind", ECO_CASES)
def test_eco_c_and_torch_paths_bit_identical(name, kind):
    _c_and_torch(kind, name)


def test_eco_refusals():
    ps = [p for ps in make_params("eco") for p in ps]
    with pytest.raises(ValueError, match="sign"):
        ct.Lion(ps, precision="eco")
    with pytest.raises(ValueError, match="heavy-ball"):
        ct.SGD(ps, precision="eco", momentum=0.0)
    with pytest.raises(ValueError, match="heavy-ball"):
        ct.SGD(ps, precision="eco", momentum=0.9, nesterov=True)


def _c_and_torch(kind, name):
    runs = {}
    for backend in ("c", "torch"):
        params = make_params(name)
        opt = make(kind, name, backend, params)
        run(opt, params, STEPS)
        runs[backend] = (params, opt)
    (pc, oc), (pt, ot) = runs["c"], runs["torch"]
    keep = {w.key for w in collage.strategy(name).state_words if w.role_name != "v"}
    for i, (a, b) in enumerate(zip(flat(pc), flat(pt))):
        assert same_bits(a, b), f"{kind} {name}: tensor {i} differs after {STEPS} steps"
        sa = {k: v for k, v in oc.state[a].items() if torch.is_tensor(v)}
        sb = {k: v for k, v in ot.state[b].items() if torch.is_tensor(v)}
        assert sa.keys() == sb.keys() == keep, f"{kind} {name}: words {sorted(sa)} {sorted(sb)}, want {sorted(keep)}"
        for k in sa:
            assert same_bits(sa[k], sb[k]), f"{kind} {name}: tensor {i}'s {k} differs"
    ec, et = oc.last_stats["edq"], ot.last_stats["edq"]
    assert ec["updates"] == et["updates"] and ec["lost_count"] == et["lost_count"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_state_dict_resumes_bit_for_bit(kind, tmp_path):
    name = "collage-light"
    params = make_params(name)
    opt = make(kind, name, "c", params)
    run(opt, params, 10)
    torch.save({"p": [[p.detach().clone() for p in ps] for ps in params], "o": opt.state_dict()}, tmp_path / "s.pt")
    run(opt, params, 10, start=10)
    saved = torch.load(tmp_path / "s.pt")
    params2 = [[torch.nn.Parameter(p) for p in ps] for ps in saved["p"]]
    for backend in ("c", "torch"):
        p2 = [[torch.nn.Parameter(p.detach().clone()) for p in ps] for ps in params2]
        opt2 = make(kind, name, backend, p2)
        opt2.load_state_dict(saved["o"])
        run(opt2, p2, 10, start=10)
        for a, b in zip(flat(params), flat(p2)):
            assert same_bits(a, b), f"{kind} resumed on {backend} differs"
    other = ct.AdamW([p for ps in make_params(name) for p in ps], precision=name)
    with pytest.raises(ValueError, match="optimizer"):
        other.load_state_dict(saved["o"])


def test_pair_v_refused():
    for cls in (ct.Lion, ct.SGD):
        with pytest.raises(ValueError, match="second moment"):
            cls([p for ps in make_params("collage-plus") for p in ps], precision="collage-plus")


def test_8bit_momentum_on_the_c_path():
    name = "collage-light+m=int8,v=int8"
    params = make_params(name, shapes=[[(300,)]])
    opt = ct.Lion([p for ps in params for p in ps], precision=name, lr=1e-3, backend="c")
    run(opt, params, 5, shapes=[[(300,)]])
    st = opt.state[params[0][0]]
    assert "exp_avg_sq" not in st and st["exp_avg"].dtype == torch.uint8
