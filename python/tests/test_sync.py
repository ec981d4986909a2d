"""An in-place edit of a parameter (pruning, clamping) and optimizer.sync_from_params(): for every strategy,
optimizer and path, the step after the sync starts from the edited θ (a step with lr 0 leaves it as
edited, and a step equals the library's own sync from θ alone: a state loaded with synced False);
the moments are kept. Without the sync, a strategy that keeps more than θ steps from its kept value:
a master puts back the value before the edit, δθ or c is added to the edited θ, and a remainder or
correction byte continues its bits (a pruned element whose word is negative stays 0)."""

import copy

import pytest
import torch

import collage
import collage.torch as ct
from helpers import STRATEGIES, make_params, run, same_bits, torch_lines_or_skip

SHAPES = [[(6, 5), (5,)], [(4, 3)], [(7,)]]
KEEPS_MORE = ("master", "δθ", "c", "remainder", "e")  # roles of a kept value beyond θ
KINDS = {
    "adamw": lambda ps, name, backend: ct.AdamW(ps, precision=name, lr=1e-2, weight_decay=0.1, backend=backend),
    "lion": lambda ps, name, backend: ct.Lion(ps, precision=name, lr=3e-3, weight_decay=0.1, backend=backend),
    "sgd": lambda ps, name, backend: ct.SGD(ps, precision=name, lr=5e-2, momentum=0.9, weight_decay=0.05,
                                            backend=backend),
}
CASES = [(kind, name, backend) for kind in KINDS for name in STRATEGIES for backend in ("c", "torch")
         if (kind == "adamw" or not collage.strategy(name).has("δv")) and not (kind == "lion" and name == "eco")]


def keeps_more(name):
    return any(w.role_name in KEEPS_MORE for w in collage.strategy(name).state_words)


def trained_and_edited(kind, name, backend):
    """Three steps, then the first tensor's first half pruned (set to zero) and the third tensor clamped
    to [-0.1, 0.1], in place: (params, optimizer, the values before the edit, the edited values)."""
    if backend == "torch":
        torch_lines_or_skip(name)
    params = make_params(name, SHAPES)
    opt = KINDS[kind]([dict(params=ps) for ps in params], name, backend)
    run(opt, params, 3, shapes=SHAPES)
    before = [p.detach().clone() for ps in params for p in ps]
    with torch.no_grad():
        w = params[0][0].view(-1)
        w[:w.numel() // 2] = 0
        params[1][0].clamp_(-0.1, 0.1)
    return params, opt, before, [p.detach().clone() for ps in params for p in ps]


def step_with_lr_zero(opt, params):
    for g in opt.param_groups:
        g["lr"], g["weight_decay"] = 0.0, 0.0
    run(opt, params, 1, start=3, shapes=SHAPES)


def values(ps):
    return [p.detach().float() for grp in ps for p in grp]


@pytest.mark.parametrize("kind,name,backend", CASES)
def test_step_after_sync_starts_from_the_edit(kind, name, backend):
    params, opt, _, edited = trained_and_edited(kind, name, backend)
    moments = {(id(p), k): v.clone() for p, st in opt.state.items() for k, v in st.items() if k.startswith("exp_avg")}
    opt.sync_from_params()
    for p in opt.state:
        for k, v in opt.state[p].items():
            if (id(p), k) in moments:
                assert same_bits(v, moments[(id(p), k)]), f"{kind} {name}: sync_from_params changed {k}"
    step_with_lr_zero(opt, params)
    for i, (a, b) in enumerate(zip(values(params), edited)):
        assert torch.equal(a, b.float()), f"{kind} {name} ({backend}): tensor {i} left its edited value"


@pytest.mark.parametrize("kind,name,backend", CASES)
def test_sync_equals_the_library_sync_from_theta(kind, name, backend):
    """After sync_from_params a step gives the bits of an optimizer given the same moments with synced
    False, which sets its kept value from θ alone at its first step (on the C path: libcollage's
    sync_from_weights)."""
    params, opt, _, _ = trained_and_edited(kind, name, backend)
    opt.sync_from_params()
    sd = copy.deepcopy(opt.state_dict())
    for st in sd["state"].values():
        st["synced"] = False
    params2 = [[torch.nn.Parameter(p.detach().clone()) for p in ps] for ps in params]
    opt2 = KINDS[kind]([dict(params=ps) for ps in params2], name, backend)
    opt2.load_state_dict(sd)
    run(opt, params, 2, start=3, shapes=SHAPES)
    run(opt2, params2, 2, start=3, shapes=SHAPES)
    for i, (a, b) in enumerate(zip([p for ps in params for p in ps], [p for ps in params2 for p in ps])):
        assert same_bits(a, b), f"{kind} {name} ({backend}): tensor {i} differs from the library's sync"
        for k, v in opt.state[a].items():
            if torch.is_tensor(v):
                assert same_bits(v, opt2.state[b][k]), f"{kind} {name} ({backend}): tensor {i}'s {k} differs"


LOW_WORD = {"remainder": "remainder", "e": "correction"}  # words that continue θ's bits


@pytest.mark.parametrize("name", [n for n in STRATEGIES if keeps_more(n)])
@pytest.mark.parametrize("backend", ["c", "torch"])
def test_without_sync_the_kept_value_steps(name, backend):
    """What docs/python.md says of an edit without sync_from_params. A master puts θ from before the edit
    back (a step with lr 0 shows it); a compensation δθ or Kahan's c is added to the edited θ (a pruned
    element becomes its old δθ or c). A remainder or correction byte continues the bits of the edited θ:
    a pruned element whose low word is negative has a kept value whose bits are a NaN pattern, which
    splits back to θ = 0 at every step: it stays 0 whatever its gradient; the other pruned elements move."""
    params, opt, before, edited = trained_and_edited("adamw", name, backend)
    pruned = params[0][0]
    n = pruned.numel() // 2
    s = collage.strategy(name)
    low = next((LOW_WORD[w.role_name] for w in s.state_words if w.role_name in LOW_WORD), None)
    if low is not None:
        negative = opt.state[pruned][low].view(-1)[:n] < 0
        assert 0 < int(negative.sum()) < n, "the test means to have low words of both signs"
        run(opt, params, 5, start=3, shapes=SHAPES)
        stays = pruned.detach().view(-1)[:n] == 0
        assert torch.equal(stays, negative), f"{name}: the pruned elements that stay 0 are not those with a negative {low}"
        return
    comp = next((w.key for w in s.state_words if w.role_name in ("δθ", "c")), None)
    old = opt.state[pruned][comp].clone() if comp else None
    step_with_lr_zero(opt, params)
    now = values(params)
    assert not torch.equal(now[0], edited[0].float()), f"{name}: the pruned tensor kept its edit without a sync"
    if s.has("master"):
        for i, (x, y) in enumerate(zip(now, before)):
            assert torch.equal(x, y.float()), f"{name}: tensor {i} is not θ from before the edit"
    else:
        assert torch.equal(now[0].view(-1)[:n], old.float().view(-1)[:n]), f"{name}: a pruned θ is not its old {comp}"


@pytest.mark.parametrize("name", STRATEGIES)
def test_sync_after_to_collage(name):
    """to_collage leaves the words of the float weights on each parameter for the first step; after an
    edit, sync_from_params makes the steps those of the edited bf16 weights alone (an optimizer over
    copies of them, which starts from θ); without it a strategy that keeps more than θ steps from the
    float weights' kept value."""
    for sync in (True, False):
        torch.manual_seed(3)
        model = torch.nn.Linear(8, 4)
        ct.to_collage(model, name)
        with torch.no_grad():
            model.weight[:2] = 0
        copies = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
        opt = ct.AdamW(model.parameters(), precision=name, lr=1e-2, weight_decay=0.0)
        ref = ct.AdamW(copies, precision=name, lr=1e-2, weight_decay=0.0)
        if sync:
            opt.sync_from_params()
        g = torch.Generator().manual_seed(4)
        for _ in range(3):
            for p, q in zip(model.parameters(), copies):
                p.grad = torch.randn(p.shape, generator=g).to(p.dtype)
                q.grad = p.grad.clone()
            opt.step()
            ref.step()
        same = all(same_bits(p, q) for p, q in zip(model.parameters(), copies))
        if sync or not keeps_more(name):
            assert same, f"{name}: the steps after the sync are not those of the edited weights"
        else:
            assert not same, f"{name}: to_collage's words did not step (the test means to show them)"


def test_sync_a_subset_and_refuse_a_stranger():
    name = "bf16-master"
    params, opt, _, _ = trained_and_edited("adamw", name, "c")
    masters = [opt.state[p]["master"].clone() for ps in params for p in ps]
    opt.sync_from_params(params[0][0])  # a tensor, or an iterable of them
    flat = [p for ps in params for p in ps]
    assert torch.equal(opt.state[flat[0]]["master"], flat[0].detach().float())
    for p, m in zip(flat[1:], masters[1:]):
        assert same_bits(opt.state[p]["master"], m), "a tensor not named was synced"
    with pytest.raises(ValueError, match=r"AdamW.sync_from_params: a parameter of shape \(3,\) is not a parameter"):
        opt.sync_from_params([torch.zeros(3, dtype=torch.bfloat16)])
