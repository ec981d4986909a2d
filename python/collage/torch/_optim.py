"""collage.torch.AdamW: a torch.optim.Optimizer over libcollage's precision strategies.

Each parameter tensor is a slice of one virtual slab (the parameters in group order; its offset keys
bf16-sr's random stream, as a shard's index0 does in the library). Its state holds the strategy's words
besides θ as tensors (the strategy table says which: exp_avg, exp_avg_sq, compensation, ...), plus the
steps taken and whether the kept value's words are set (synced).

- CPU tensors: one libcollage optimizer per tensor, built over the tensor's memory and its state words
  (collage_adamw_config.params / .words: no copy), all stepped by one collage_adamw_step_many with the
  Σg² of every tensor's gradient summed block by block in slab order. It is rebuilt when a tensor or a word
  moves (load_state_dict, a new tensor) or a hyperparameter it holds changes.
- Other devices (or backend="torch"): the same operations in torch (_lines.py), which give the C bits.

One step with clipping equals a single libcollage optimizer over the concatenated slab with one group per
tensor, stepped once per parameter group (each with its lr) with the slab's Σg²: tests/test_optimizer.py.
"""

import ctypes
import math

import numpy as np
import torch

from .. import _lib
from .. import strategy as _strategy
from . import _lines

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int16": torch.int16}


def _supported_or_raise(strategy):
    """The package steps the bf16 and fp32 strategies of the table; the fp16 ones train with loss scaling
    (numerics.md §12), which lives in libcollage's training run and not here."""
    if strategy.weights.format == "fp16":
        raise NotImplementedError(f"'{strategy.name}' is an fp16 strategy (fp16 weights): collage.torch steps the bf16 and fp32 "
                                  "strategies (fp16 training needs the loss scaling of `collage train`)")


def _dtype_of(fmt, strategy):
    if fmt not in _DTYPES:
        raise NotImplementedError(f"'{strategy.name}' stores a word in {fmt}, which the Python package cannot hold")
    return _DTYPES[fmt]


class _Native:
    """A libcollage optimizer over one tensor and its state words."""

    def __init__(self, strategy, p, st, hp, index0, total):
        words = (ctypes.c_void_p * _lib.ROLE_COUNT)()
        for w in strategy.state_words:
            words[w.role] = st[w.key].data_ptr()
        cfg = _lib.AdamWConfig(strategy=strategy.index, n=p.numel(), beta1=hp["betas"][0], beta2=hp["betas"][1],
                               eps=hp["eps"], weight_decay=hp["weight_decay"], clip=hp["clip"],
                               skip_nonfinite=int(hp["skip_nonfinite"]), edq=0, seed=hp["seed"],
                               params=p.data_ptr(), index0=index0, total=total, words=words)
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib.collage_adamw_create(ctypes.byref(cfg), ctypes.byref(handle)), "collage_adamw_create")
        self.handle, self._free = handle, _lib.lib.collage_adamw_free  # kept: at exit _lib may be gone first
        # the scalars' tie proof (adamw.c tie_free) pays off from 2^16 elements on; the library's default
        # threshold is for one optimizer over a whole slab
        _lib.lib.collage_adamw_set_tie_proof(handle, 1 << 16)
        _lib.lib.collage_adamw_set_steps(handle, st["step"], int(st["synced"]))
        self.key = self.key_of(p, st, strategy, hp, index0, total)

    @staticmethod
    def key_of(p, st, strategy, hp, index0, total):
        return (p.data_ptr(), p.numel(), tuple(st[w.key].data_ptr() for w in strategy.state_words),
                tuple(hp["betas"]), hp["eps"], hp["weight_decay"], hp["clip"], hp["skip_nonfinite"], hp["seed"],
                index0, total)

    def __del__(self):
        if getattr(self, "handle", None):
            self._free(self.handle)
            self.handle = None


def _edq_figures(dot, dot_state, nn, lost, updates):
    """numerics.md §7 from the sums (collage_edq's edq_finish)."""
    norm = math.sqrt(nn)
    return {"edq": dot / norm if nn > 0 else 0.0, "edq_ratio": dot / nn if nn > 0 else 1.0,
            "lost": lost / updates if updates else 0.0, "edq_state": dot_state / norm if nn > 0 else 0.0,
            "edq_state_ratio": dot_state / nn if nn > 0 else 1.0, "update_norm": norm, "updates": updates,
            "sum_dot": dot, "sum_dot_state": dot_state, "sum_nn": nn, "lost_count": lost}


def _combine(parts):
    """collage_edq_combine: the parts' sums added in order, the figures recomputed."""
    s = [0.0, 0.0, 0.0, 0, 0]
    for q in parts:
        for i in range(5):
            s[i] += q[i]
    return _edq_figures(*s)


class AdamW(torch.optim.Optimizer):
    """AdamW with one of libcollage's precision strategies (``collage.strategies()``).

    params: tensors, (name, tensor) pairs such as ``model.named_parameters()`` (names then appear in
    messages), or param groups (dicts with "params" and any of lr, betas, eps, weight_decay). Parameters
    are the model's bf16 tensors (fp32 ones for ``precision="fp32"``), contiguous, one device per group.
    The compensation words, moments and masters live in ``optimizer.state[p]``.

    max_grad_norm: clip the gradient of all parameters together to this L2 norm (None: no clipping).
    skip_nonfinite: a NaN or Inf anywhere in the gradient skips the step (nothing changes).
    edq: measure the effective descent quality each step (numerics.md §7). seed: bf16-sr's random stream.
    backend: "auto" (libcollage for CPU tensors, torch elsewhere), "torch" (torch everywhere) or "c".

    After each step ``optimizer.last_stats`` holds: step, skipped, grad_norm (NaN unless clipping or
    skip_nonfinite), clip_coef, and with edq: "edq" (the whole step) and "groups" (per param group),
    each a dict of edq, edq_ratio, lost, edq_state, edq_state_ratio, update_norm, updates.
    """

    def __init__(self, params, precision="collage-light", lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 max_grad_norm=None, edq=False, seed=0, skip_nonfinite=False, backend="auto"):
        self.strategy = _strategy(precision)
        _supported_or_raise(self.strategy)
        for w in self.strategy.words:
            _dtype_of(w.format, self.strategy)
        if backend not in ("auto", "torch", "c"):
            raise ValueError(f"backend must be 'auto', 'torch' or 'c', not {backend!r}")
        if max_grad_norm is not None and not (math.isfinite(max_grad_norm) and max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be a positive finite number or None, not {max_grad_norm!r}")
        self.max_grad_norm, self.edq, self.seed = max_grad_norm, bool(edq), int(seed)
        self.skip_nonfinite, self.backend = bool(skip_nonfinite), backend
        self.last_stats = None
        self._names = {}
        self._native = {}
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(self._strip_names(params), defaults)

    # ------------------------------------------------------------ parameters and their checks
    def _strip_names(self, params):
        """(name, tensor) pairs to tensors, remembering the names for messages."""
        if isinstance(params, torch.Tensor):
            raise TypeError("params must be an iterable of tensors, (name, tensor) pairs or dicts, not a tensor")
        out = []
        for item in list(params):
            if isinstance(item, dict):
                item = dict(item)
                item["params"] = self._strip_names(item["params"]) if not isinstance(item["params"], torch.Tensor) \
                    else [item["params"]]
                out.append(item)
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                self._names[id(item[1])] = item[0]
                out.append(item[1])
            else:
                out.append(item)
        return out

    def _name(self, p):
        if id(p) in self._names:
            return f"parameter '{self._names[id(p)]}'"
        for gi, g in enumerate(self.param_groups):
            for pi, q in enumerate(g["params"]):
                if q is p:
                    return f"parameter {pi} of param group {gi} (shape {tuple(p.shape)})"
        return f"a parameter of shape {tuple(p.shape)}"

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        g = self.param_groups[-1]
        b = g["betas"]
        if not (0.0 < b[0] < 1.0 and 0.0 < b[1] < 1.0):
            raise ValueError(f"param group {len(self.param_groups) - 1}: betas {tuple(b)} must lie in (0, 1)")
        if not (g["eps"] > 0 and g["weight_decay"] >= 0 and g["lr"] >= 0):
            raise ValueError(f"param group {len(self.param_groups) - 1}: lr, weight_decay must be >= 0 and eps > 0")
        want = _DTYPES[self.strategy.weights.format]
        devices = set()
        for p in g["params"]:
            if p.dtype != want:
                raise TypeError(f"{self._name(p)} is {p.dtype}, but '{self.strategy.name}' steps {want} weights "
                                f"(collage.torch.to_collage(model, '{self.strategy.name}') casts a float model)")
            if not p.is_contiguous():
                raise ValueError(f"{self._name(p)} is not contiguous; the step updates its memory in place "
                                 "(make it contiguous before building the optimizer)")
            devices.add(p.device)
            seed = getattr(p, "_collage_seed", None)
            if seed is not None and seed[0] != self.strategy.name:
                raise ValueError(f"{self._name(p)} was cast by to_collage for '{seed[0]}', but this optimizer is "
                                 f"'{self.strategy.name}': cast the float model for '{self.strategy.name}'")
        if len(devices) > 1:
            raise ValueError(f"param group {len(self.param_groups) - 1} mixes devices "
                             f"({', '.join(sorted(str(d) for d in devices))}); put each device's parameters in a "
                             "group of its own")

    def _slab(self):
        """Each parameter's offset in the virtual slab, and the slab's size."""
        off, at = {}, 0
        for g in self.param_groups:
            for p in g["params"]:
                off[p] = at
                at += p.numel()
        return off, at

    # ------------------------------------------------------------ state
    def _init_state(self, p):
        """The strategy's words besides θ for p: zero, or what to_collage left on p (then synced)."""
        st = self.state[p]
        if st:
            return st
        st["step"], st["synced"] = 0, False
        seed = getattr(p, "_collage_seed", None)
        for w in self.strategy.state_words:
            st[w.key] = torch.zeros(p.shape, dtype=_dtype_of(w.format, self.strategy), device=p.device)
        if seed is not None:
            for key, v in seed[1].items():
                st[key].copy_(v)
            st["synced"] = True
            del p._collage_seed
        return st

    def _sync_from_weights(self, p, st):
        """The kept value from θ alone (zero compensation, master = θ), as the C step's first step does."""
        for w in self.strategy.state_words:
            if w.role_name == "master":
                st[w.key].copy_(p.float())
            elif w.role_name in ("δθ", "c", "remainder"):
                st[w.key].zero_()
        st["synced"] = True

    def _check_grad(self, p):
        g = p.grad
        if g.is_sparse:
            raise TypeError(f"{self._name(p)} has a sparse gradient, which AdamW does not take")
        if g.dtype != p.dtype or g.device != p.device or g.shape != p.shape:
            raise TypeError(f"{self._name(p)}: its gradient is {g.dtype} {tuple(g.shape)} on {g.device}, but the "
                            f"parameter is {p.dtype} {tuple(p.shape)} on {p.device}")
        if not g.is_contiguous():
            raise ValueError(f"{self._name(p)}: its gradient is not contiguous")
        return g

    def _hparams(self, group):
        return {"betas": tuple(float(b) for b in group["betas"]), "eps": float(group["eps"]),
                "weight_decay": float(group["weight_decay"]), "clip": float(self.max_grad_norm or 0.0),
                "skip_nonfinite": self.skip_nonfinite, "seed": self.seed}

    def _uses_c(self, p):
        if self.backend == "torch":
            return False
        if p.device.type != "cpu":
            if self.backend == "c":
                raise ValueError(f"{self._name(p)} is on {p.device}; backend='c' steps CPU tensors only")
            return False
        return True

    # ------------------------------------------------------------ the step
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        items = []  # (group index, p, grad, state, uses C)
        for gi, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = self._check_grad(p)
                items.append((gi, p, g, self._init_state(p), self._uses_c(p)))
        if not items:
            return loss
        sumsq = self._grad_sumsq(items) if (self.max_grad_norm or self.skip_nonfinite) else math.nan
        gnorm = math.sqrt(sumsq) if not math.isnan(sumsq) else math.nan
        stats = {"step": None, "skipped": False, "grad_norm": gnorm, "clip_coef": 1.0}
        if self.skip_nonfinite and not math.isfinite(sumsq):
            stats.update(skipped=True, step=max(st["step"] for _, _, _, st, _ in items))
            self.last_stats = stats
            return loss
        coef = 1.0
        if self.max_grad_norm and gnorm > self.max_grad_norm:
            coef = self.max_grad_norm / (gnorm + 1e-6)
        stats["clip_coef"] = coef
        offsets, total = self._slab()
        self._scalars = {}
        c_parts = self._step_c([it for it in items if it[4]], sumsq, offsets, total)
        parts = []
        for gi, p, g, st, use_c in items:
            part = c_parts[p] if use_c else self._step_torch(p, g, st, self.param_groups[gi], coef, offsets[p])
            st["step"] += 1
            st["synced"] = True
            parts.append((gi, part))
        stats["step"] = max(st["step"] for _, _, _, st, _ in items)
        if self.edq:
            stats["edq"] = _combine([q for _, q in parts])
            stats["groups"] = [_combine([q for gi, q in parts if gi == k]) for k in range(len(self.param_groups))]
        self.last_stats = stats
        return loss

    def _grad_sumsq(self, items):
        """Σ g² of every gradient, block by block in slab order (the C step's blocks and order)."""
        sums = {}  # each gradient's block sums: libcollage's for the C path, the torch path's per device
        by_device = {}
        for _, p, g, _, c in items:
            by_device.setdefault("c" if c else g.device, []).append((p, g))
        cpu = by_device.pop("c", [])
        if cpu:  # every CPU gradient's blocks in one parallel loop
            k = len(cpu)
            ptrs = (ctypes.c_void_p * k)(*(g.data_ptr() for _, g in cpu))
            ns = (ctypes.c_size_t * k)(*(g.numel() for _, g in cpu))
            nbs = [-(-g.numel() // _lines.BLOCK) for _, g in cpu]
            out = np.empty(sum(nbs), dtype=np.float64)
            bf16 = int(cpu[0][1].dtype != torch.float32)
            _lib.check(_lib.lib.collage_sumsq_chunks_many(ptrs, ns, k, bf16, _lines.BLOCK, out.ctypes.data),
                       "collage_sumsq_chunks_many")
            flat_sums, at = out.tolist(), 0
            for (p, _), nb in zip(cpu, nbs):
                sums[p], at = flat_sums[at:at + nb], at + nb
        for pgs in by_device.values():
            flat_sums, at = _lines.block_sumsq([g for _, g in pgs]), 0
            for p, g in pgs:
                nb = -(-g.numel() // _lines.BLOCK)
                sums[p], at = flat_sums[at:at + nb], at + nb
        return _lines.add_in_order(b for _, p, _, _, _ in items for b in sums[p])  # slab order

    def _step_c(self, items, sumsq, offsets, total):
        """The CPU tensors' step: one libcollage optimizer each (built or rebuilt where needed), all
        stepped by one collage_adamw_step_many, so one team of threads takes every tensor's blocks.
        Returns each parameter's EDQ sums."""
        if not items:
            return {}
        k = len(items)
        handles, grads, lrs = (ctypes.c_void_p * k)(), (ctypes.c_void_p * k)(), (ctypes.c_double * k)()
        for j, (gi, p, g, st, _) in enumerate(items):
            group = self.param_groups[gi]
            hp = self._hparams(group)
            nat = self._native.get(p)
            if nat is None or nat.key != _Native.key_of(p, st, self.strategy, hp, offsets[p], total):
                nat = self._native[p] = _Native(self.strategy, p, st, hp, offsets[p], total)
            _lib.lib.collage_adamw_set_edq(nat.handle, int(self.edq))
            handles[j], grads[j], lrs[j] = nat.handle, g.data_ptr(), float(group["lr"])
        stats = (_lib.StepStats * k)()
        code = _lib.lib.collage_adamw_step_many(handles, grads, lrs, k, sumsq, stats)
        if code != _lib.OK:
            bad = next((j for j in range(k) if _lib.lib.collage_adamw_error(handles[j])), 0)
            _lib.check(code, f"collage_adamw_step_many ({self._name(items[bad][1])})",
                       _lib.lib.collage_adamw_error(handles[bad]).decode(errors="replace"))
        return {p: (s.edq.sum_dot, s.edq.sum_dot_state, s.edq.sum_nn, s.edq.lost_count, s.edq.updates)
                for (_, p, _, _, _), s in zip(items, stats)}

    def _step_torch(self, p, g, st, group, coef, index0):
        if self.strategy.name not in _lines.STRATEGY_LINES:
            raise NotImplementedError(f"'{self.strategy.name}' has no torch lines yet: {self._name(p)} on {p.device} "
                                      "cannot be stepped (on CPU, libcollage steps it: backend='auto')")
        if not st["synced"]:
            self._sync_from_weights(p, st)
        b1, b2 = group["betas"]
        key = (p.device, st["step"] + 1, float(group["lr"]), float(b1), float(b2), float(group["eps"]))
        k = self._scalars.get(key)  # one set per device and group a step: each is a copy to the device
        if k is None:
            k = self._scalars[key] = _lines.Scalars(*key, coef, self.seed)
        return _lines.step_tensor(self.strategy.name, p, g, st, k, k.lrwd(float(group["weight_decay"])), self.edq,
                                  index0)

    # ------------------------------------------------------------ state dicts
    def state_dict(self):
        sd = super().state_dict()
        sd["collage"] = {"precision": self.strategy.name, "seed": self.seed, "max_grad_norm": self.max_grad_norm,
                         "edq": self.edq, "skip_nonfinite": self.skip_nonfinite, "version": 1}
        return sd

    def load_state_dict(self, state_dict):
        """Every word back bit for bit, onto each parameter's device, after checking that the dict is of
        this strategy and its groups and words fit the parameters (a ValueError naming what differs)."""
        meta = state_dict.get("collage")
        if meta is None:
            raise ValueError("the state dict is not a collage.torch.AdamW state dict (no 'collage' entry)")
        if meta["precision"] != self.strategy.name:
            raise ValueError(f"the state dict holds '{meta['precision']}' state, but this optimizer is "
                             f"'{self.strategy.name}'")
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"the state dict has {len(groups)} param groups, this optimizer {len(self.param_groups)}")
        params, saved_ids = [], []
        for k, (g, sg) in enumerate(zip(self.param_groups, groups)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(f"param group {k} has {len(g['params'])} parameters, the state dict's "
                                 f"{len(sg['params'])}")
            params += g["params"]
            saved_ids += sg["params"]
        new_state = {}
        for p, sid in zip(params, saved_ids):
            if sid in state_dict["state"]:
                new_state[p] = self._load_param_state(p, state_dict["state"][sid])
        for g, sg in zip(self.param_groups, groups):
            for key, v in sg.items():
                if key != "params":
                    g[key] = tuple(v) if key == "betas" else v
        self.state.clear()
        self.state.update(new_state)
        self.seed = int(meta["seed"])
        self.max_grad_norm, self.edq = meta["max_grad_norm"], bool(meta["edq"])
        self.skip_nonfinite = bool(meta["skip_nonfinite"])
        self._native.clear()

    def _load_param_state(self, p, saved):
        out = {"step": int(saved["step"]), "synced": bool(saved["synced"])}
        for w in self.strategy.state_words:
            if w.key not in saved:
                raise ValueError(f"the state dict's entry for {self._name(p)} has no '{w.key}' ({w.role_name})")
            v, want = saved[w.key], _dtype_of(w.format, self.strategy)
            if not isinstance(v, torch.Tensor) or v.dtype != want or v.numel() != p.numel():
                got = f"{v.dtype} with {v.numel()} elements" if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(f"the state dict's '{w.key}' of {self._name(p)} is {got}; '{self.strategy.name}' "
                                 f"keeps it as {want} with {p.numel()} elements")
            out[w.key] = v.detach().to(device=p.device, copy=True).reshape(p.shape).contiguous()
        return out
