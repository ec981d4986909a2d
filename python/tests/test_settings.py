"""Every setting of a param group is applied per group or refused by name: SGD's momentum, dampening and
nesterov, Lion's betas, every optimizer's lr and weight_decay. With precision "fp32" collage's SGD and
AdamW follow torch.optim.SGD and torch.optim.AdamW per group and under torch's schedulers that cycle
momentum (OneCycleLR, CyclicLR), to fp32 rounding; a setting an optimizer does not use is refused, in
the constructor and in a group, with the class's name."""

import copy

import pytest
import torch

import collage.torch as ct
from helpers import make_grads, make_params, run

SHAPES = [[(6, 5), (5,)], [(4, 3)], [(7,)]]
STEPS = 12
# fp32 rounding apart: torch's CPU kernels fuse a multiply-add (add_ with alpha, addcdiv_) that collage
# rounds twice, and AdamW's eps enters after the bias correction of v in torch, before it in collage.
RTOL, ATOL = 1e-5, 1e-6


def params_pair(shapes=SHAPES):
    """Two copies of the same fp32 parameters: collage's and torch's."""
    a = make_params("fp32", shapes)
    return a, [[torch.nn.Parameter(p.detach().clone()) for p in ps] for ps in a]


def groups_of(params, settings):
    return [dict(params=ps, **hp) for ps, hp in zip(params, settings)]


def step_both(ours, theirs, pa, pb, steps=STEPS, scheds=()):
    """Both optimizers stepped with the same gradients (helpers.make_grads), schedulers after each step."""
    for t in range(steps):
        run(ours, pa, 1, start=t, shapes=SHAPES)
        for ps, qs in zip(pa, pb):
            for p, q in zip(ps, qs):
                q.grad = p.grad.clone()
        theirs.step()
        for s in scheds:
            s.step()


def assert_close(pa, pb, what):
    for i, (a, b) in enumerate(zip([p for ps in pa for p in ps], [p for ps in pb for p in ps])):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"{what}: tensor {i}: {m}")


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_sgd_momentum_per_group(backend):
    """A group's momentum 0.5 is the step's, not the constructor's 0.9; the group without one takes 0.9."""
    pa, pb = params_pair()
    settings = [dict(momentum=0.5), dict(), dict(momentum=0.0, lr=0.05)]
    ours = ct.SGD(groups_of(pa, settings), precision="fp32", lr=0.1, momentum=0.9, backend=backend)
    theirs = torch.optim.SGD(groups_of(pb, settings), lr=0.1, momentum=0.9)
    step_both(ours, theirs, pa, pb)
    assert_close(pa, pb, f"SGD per-group momentum ({backend})")
    assert [g["momentum"] for g in ours.param_groups] == [0.5, 0.9, 0.0]


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_sgd_nesterov_dampening_weight_decay_per_group(backend):
    pa, pb = params_pair()
    settings = [dict(nesterov=True, weight_decay=0.1), dict(dampening=0.3, momentum=0.8), dict(weight_decay=0.02)]
    ours = ct.SGD(groups_of(pa, settings), precision="fp32", lr=0.05, momentum=0.9, backend=backend)
    theirs = torch.optim.SGD(groups_of(pb, settings), lr=0.05, momentum=0.9)
    step_both(ours, theirs, pa, pb)
    assert_close(pa, pb, f"SGD per-group nesterov, dampening, weight_decay ({backend})")


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_sgd_decoupled_per_group(backend):
    """decoupled=True in one group: its decay is subtracted beside the update (lr·wd·θ), which equals
    torch.optim.SGD with no decay there and the parameter scaled by (1 − lr·wd) first; the other group
    keeps L2."""
    pa, pb = params_pair()
    ours = ct.SGD(groups_of(pa, [dict(decoupled=True, weight_decay=0.1), dict(weight_decay=0.1), dict()]),
                  precision="fp32", lr=0.05, momentum=0.9, backend=backend)
    theirs = torch.optim.SGD(groups_of(pb, [dict(weight_decay=0.0), dict(weight_decay=0.1), dict()]), lr=0.05,
                             momentum=0.9)
    for t in range(STEPS):
        run(ours, pa, 1, start=t, shapes=SHAPES)
        with torch.no_grad():
            for ps, qs, k in zip(pa, pb, range(3)):
                for p, q in zip(ps, qs):
                    q.grad = p.grad.clone()
                    if k == 0:
                        q.mul_(1 - 0.05 * 0.1)
        theirs.step()
    assert_close(pa, pb, f"SGD per-group decoupled decay ({backend})")


@pytest.mark.parametrize("backend", ["c", "torch"])
@pytest.mark.parametrize("sched", ["onecycle", "cyclic"])
def test_sgd_under_momentum_cycling_schedulers(backend, sched):
    """OneCycleLR and CyclicLR with cycle_momentum cycle the groups' 'momentum' (SGD's groups carry no
    betas), and the step uses it: the same weights as torch.optim.SGD under the same scheduler."""
    pa, pb = params_pair()
    ours = ct.SGD(groups_of(pa, [dict(), dict(momentum=0.8), dict()]), precision="fp32", lr=0.1, momentum=0.9,
                  backend=backend)
    theirs = torch.optim.SGD(groups_of(pb, [dict(), dict(momentum=0.8), dict()]), lr=0.1, momentum=0.9)
    assert "betas" not in ours.defaults and all("betas" not in g and "eps" not in g for g in ours.param_groups)

    def make(o):
        if sched == "onecycle":
            return torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=STEPS, cycle_momentum=True,
                                                       base_momentum=0.5, max_momentum=0.95)
        return torch.optim.lr_scheduler.CyclicLR(o, base_lr=0.01, max_lr=0.2, step_size_up=3, cycle_momentum=True,
                                                 base_momentum=0.5, max_momentum=0.95)
    s1, s2 = make(ours), make(theirs)
    seen = set()
    for t in range(STEPS):
        step_both(ours, theirs, pa, pb, steps=1, scheds=())
        assert [g["momentum"] for g in ours.param_groups] == [g["momentum"] for g in theirs.param_groups]
        seen.add(ours.param_groups[0]["momentum"])
        s1.step()
        s2.step()
    assert len(seen) > 3, "the scheduler means to change the momentum"
    assert_close(pa, pb, f"SGD under {sched} ({backend})")


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_adamw_under_onecycle(backend):
    """OneCycleLR cycles AdamW's betas[0] and lr per group: collage's fp32 AdamW follows torch.optim.AdamW."""
    pa, pb = params_pair()
    # eps small: torch adds it to √v / √(1 − β2^t), collage to √v, which differ by more than RTOL for eps
    # near √v (the first tensor's gradients are 1e-2)
    settings = [dict(), dict(betas=(0.8, 0.99), weight_decay=0.0), dict(eps=1e-10)]
    ours = ct.AdamW(groups_of(pa, settings), precision="fp32", lr=1e-2, betas=(0.9, 0.999), eps=1e-12,
                    weight_decay=0.01, backend=backend)
    theirs = torch.optim.AdamW(groups_of(pb, settings), lr=1e-2, betas=(0.9, 0.999), eps=1e-12, weight_decay=0.01)
    scheds = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=2e-2, total_steps=STEPS, cycle_momentum=True)
              for o in (ours, theirs)]
    step_both(ours, theirs, pa, pb, scheds=scheds)
    assert [g["betas"] for g in ours.param_groups] == [g["betas"] for g in theirs.param_groups]
    assert_close(pa, pb, f"AdamW under OneCycleLR ({backend})")


@pytest.mark.parametrize("backend", ["c", "torch"])
def test_lion_betas_and_lr_per_group(backend):
    """Each Lion group steps with its own betas, lr and weight decay: the same bits as a Lion per group."""
    name = "collage-light"
    settings = [dict(betas=(0.5, 0.9), lr=1e-3), dict(weight_decay=0.1), dict(betas=(0.95, 0.98))]
    params = make_params(name, SHAPES)
    opt = ct.Lion(groups_of(params, settings), precision=name, lr=3e-3, betas=(0.9, 0.99), backend=backend)
    run(opt, params, STEPS, shapes=SHAPES)
    alone = make_params(name, SHAPES)
    opts = [ct.Lion(ps, precision=name, **{"lr": 3e-3, "betas": (0.9, 0.99), "weight_decay": 0.0, **hp},
                    backend=backend) for ps, hp in zip(alone, settings)]
    # the slab offsets key bf16-sr only: collage-light's bits do not depend on them
    for t in range(STEPS):
        for ps, gs, o in zip(alone, make_grads(t, SHAPES, torch.bfloat16), opts):
            for p, g in zip(ps, gs):
                p.grad = g
            o.step()
    for ps, qs in zip(params, alone):
        for p, q in zip(ps, qs):
            assert torch.equal(p.view(torch.int16), q.view(torch.int16))


REFUSED = [  # (class, constructor keywords or a group's settings, the class named, the setting named)
    (ct.Lion, dict(eps=1e-8)), (ct.Lion, dict(momentum=0.9)), (ct.Lion, dict(nesterov=True)),
    (ct.SGD, dict(betas=(0.9, 0.99))), (ct.SGD, dict(eps=1e-8)),
    (ct.AdamW, dict(momentum=0.9)), (ct.AdamW, dict(dampening=0.1)), (ct.AdamW, dict(nesterov=False)),
    (ct.AdamW, dict(decoupled=True)), (ct.Lion, dict(decoupled=True)),
]


@pytest.mark.parametrize("cls,setting", REFUSED, ids=lambda x: getattr(x, "__name__", None) or ",".join(x))
def test_unused_setting_refused_by_name(cls, setting):
    key = next(iter(setting))
    ps = make_params("collage-light", [[(3,)]])[0]
    with pytest.raises(TypeError, match=rf"{cls.__name__}.*'{key}'|{cls.__name__}.*{key}"):
        cls(ps, **setting)
    with pytest.raises(TypeError, match=rf"param group 0: {cls.__name__} got an unexpected setting '{key}'"):
        cls([dict(params=ps, **setting)])
    opt = cls(ps)
    more = make_params("collage-light", [[(2,)]])[0]
    with pytest.raises(TypeError, match=rf"param group 1: {cls.__name__} got an unexpected setting '{key}'"):
        opt.add_param_group(dict(params=more, **setting))
    assert len(opt.param_groups) == 1
    opt.param_groups[0].update(setting)  # written later (a scheduler, a user): the step refuses it
    for p in ps:
        p.grad = torch.ones_like(p)
    before = [p.clone() for p in ps]
    with pytest.raises(TypeError, match=rf"{cls.__name__} got an unexpected setting '{key}'"):
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(ps, before)) and not opt.state


def test_torch_flags_refused_where_set():
    ps = make_params("collage-light", [[(3,)]])[0]
    with pytest.raises(ValueError, match="collage's AdamW does not implement torch.optim's amsgrad"):
        ct.AdamW([dict(params=ps, amsgrad=True)])
    with pytest.raises(ValueError, match="collage's SGD does not implement torch.optim's maximize"):
        ct.SGD([dict(params=ps, maximize=True)])
    ct.SGD([dict(params=ps, maximize=False, foreach=None, name="the weights")])  # unset flags and other keys pass


def test_sgd_group_settings_checked():
    ps = make_params("collage-light", [[(3,)]])[0]
    with pytest.raises(ValueError, match=r"param group 1: nesterov needs momentum > 0 and dampening 0"):
        ct.SGD([dict(params=ps[:0]), dict(params=ps, nesterov=True, dampening=0.1)])
    with pytest.raises(ValueError, match=r"param group 0: momentum 1.5 must be in \[0, 1\)"):
        ct.SGD([dict(params=ps, momentum=1.5)])
    with pytest.raises(TypeError, match=r"param group 0: nesterov must be True or False"):
        ct.SGD([dict(params=ps, nesterov="yes")])
    with pytest.raises(ValueError, match=r"SGD's defaults|param group 0: momentum"):
        ct.SGD(ps, momentum=-0.1)
    with pytest.raises(ValueError, match=r"param group 0: betas \(0.9, 1.0\) must be two numbers in \(0, 1\)"):
        ct.Lion([dict(params=ps, betas=(0.9, 1.0))])


def test_sgd_state_dict_carries_group_settings(tmp_path):
    """The groups' momentum is in the state dict and comes back with it (torch's rule for a group's
    settings); a state dict of the previous layout (version 1: SGD's settings for every group in the
    'collage' entry, betas and eps in the groups) loads into the groups' settings."""
    name = "collage-light"
    settings = [dict(momentum=0.5), dict(nesterov=True), dict(dampening=0.2)]
    params = make_params(name, SHAPES)
    opt = ct.SGD(groups_of(params, settings), precision=name, lr=0.05, backend="c")
    run(opt, params, 4, shapes=SHAPES)
    sd = copy.deepcopy(opt.state_dict())
    assert [g["momentum"] for g in sd["param_groups"]] == [0.5, 0.9, 0.9]
    saved = [[p.detach().clone() for p in ps] for ps in params]
    run(opt, params, 4, start=4, shapes=SHAPES)

    old = {**sd, "collage": {**sd["collage"], "version": 1,
                             "optimizer": {"name": "sgd", "momentum": 0.5, "dampening": 0.0, "nesterov": False,
                                           "decoupled": False}},
           "param_groups": [{**{k: v for k, v in g.items() if k not in ("momentum", "nesterov", "dampening",
                                                                         "decoupled")},
                             "betas": (0.9, 0.999), "eps": 1e-8} for g in sd["param_groups"]]}
    for k, d in enumerate((sd, old)):
        p2 = [[torch.nn.Parameter(p.clone()) for p in ps] for ps in saved]
        o2 = ct.SGD(groups_of(p2, [dict(), dict(), dict()]), precision=name, lr=0.05, momentum=0.7, backend="c")
        o2.load_state_dict(d)
        assert all("betas" not in g and "eps" not in g for g in o2.param_groups)
        run(o2, p2, 4, start=4, shapes=SHAPES)
        if k == 0:
            assert [g["momentum"] for g in o2.param_groups] == [0.5, 0.9, 0.9]
            for ps, qs in zip(params, p2):
                for p, q in zip(ps, qs):
                    assert torch.equal(p.view(torch.int16), q.view(torch.int16)), "resumed SGD differs"
        else:
            assert [g["momentum"] for g in o2.param_groups] == [0.5, 0.5, 0.5]
