"""collage.torch.AdamW, Lion and SGD: torch.optim.Optimizers over libcollage's precision strategies.

Each parameter tensor is a slice of one virtual slab (the parameters in group order; its offset keys
bf16-sr's random stream, as a shard's index0 does in the library). Its state holds the strategy's words
besides θ as tensors (the strategy table says which: exp_avg, exp_avg_sq, compensation, ...), plus the
steps taken and whether the kept value's words are set (synced).

- CPU tensors: one libcollage optimizer per tensor, built over the tensor's memory and its state words
  (collage_adamw_config.params / .words: no copy), all stepped by one collage_adamw_step_many with the
  Σg² of every tensor's gradient summed block by block in slab order. It is rebuilt when a tensor or a word
  moves (load_state_dict, a new tensor) or a hyperparameter it holds changes.
- CUDA tensors: libcollage_cuda's step (collage_cuda.h, `make CUDA=1`), every tensor of a device in one
  launch on PyTorch's current stream, with the Σg² summed here as for the CPU tensors: the C bits. Where
  the library is missing, a step on CUDA tensors raises, naming it (backend="torch" takes the torch lines
  instead, which are slow: one kernel launch per operation per tensor).
- Other devices (or backend="torch"): the same operations in torch (_lines.py), which give the C bits.
- Sharded parameters (FSDP's local shards, `shards=`): each holds part of a tensor; the Σg² of the whole
  model comes from one all-reduce (`all_reduce=`) of the vector of every tensor's chunk sums and of the
  elements of the chunks that ranks share, each rank filling in its own: x + 0 = x, so every rank sums
  the shared chunks itself and adds the unsharded step's numbers in its order.
- DTensor parameters (FSDP2's fully_shard, HSDP: Shard(0) on one mesh dimension, Replicate on the others,
  _dtensor.py): each rank steps its local rows, whose place in the full tensor the placement gives (as
  shards= would), and the Σg² vector is all-reduced over the mesh's shard dimension (HSDP's replicas hold
  the same gradients). The state words are DTensors placed as the parameter, but for the 8-bit words,
  which are each rank's own layout of its shard; every rank's shard must then start a block of 256.
  state_dict() gives such a word as codes and per-element scales placed as the parameter, which
  torch.distributed.checkpoint reshards, and puts the "collage" entry in each param group too (its
  get_optimizer_state_dict keeps the groups only).

One step with clipping equals a single libcollage optimizer over the concatenated slab with one group per
tensor, stepped once per parameter group (each with its lr) with the slab's Σg²: tests/test_optimizer.py.
"""

import ctypes
import math

import numpy as np
import torch

from .. import _cuda
from . import _dtensor
from .. import _lib
from .. import strategy as _strategy
from . import _lines

# collage_cuda_tensor (collage_cuda.h, _cuda.CudaTensor) as numpy sees it: every field 8 bytes, no padding.
_TABLE_DTYPE = np.dtype([("words", np.uint64, (_lib.ROLE_COUNT,)), ("grad", np.uint64), ("n", np.uint64),
                         ("index0", np.uint64), ("step", np.uint64), ("lr", np.float64), ("weight_decay", np.float64),
                         ("beta1", np.float64), ("beta2", np.float64), ("eps", np.float64)])
assert _TABLE_DTYPE.itemsize == ctypes.sizeof(_cuda.CudaTensor)

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int16": torch.int16,
           "int8": torch.uint8, "e4m3": torch.uint8, "byte": torch.int8}
QBLOCK = 256  # COLLAGE_QBLOCK: an 8-bit word's elements per fp32 scale
_local = _dtensor.local


def _eager_only(fn):
    """fn run by Python as written, also when called from a function torch.compile compiles: TorchDynamo
    stops its graph before the call and resumes after it (one graph break). The step's checks, its state
    and its ctypes calls are not things Dynamo can trace: left to it, it traces the checks, guards on the
    step count (a recompilation at every step) and breaks its graph at the first ctypes call. PyTorch 1.13
    has no torch.compile, and fn is returned as it is."""
    compiler = getattr(torch, "compiler", None)
    disable = getattr(compiler, "disable", None)
    return disable(fn) if disable is not None else fn


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


def _has_q8(strategy):
    return any(w.block for w in strategy.words)


def _word_shape(w, p):
    """The shape of word w's tensor for parameter p: p's shape, or for an 8-bit word one uint8 tensor laid
    out as the library keeps it (collage_adamw_config.words): the n codes padded to a multiple of 64
    bytes, then the ceil(n / 256) fp32 block scales."""
    if not w.block:
        return p.shape
    n = p.numel()
    return (_codes_bytes(n) + -(-n // w.block) * 4,)


def _codes_bytes(n):
    """Where an 8-bit word's block scales start: after its n codes padded to a multiple of 64 bytes."""
    return (n + 63) // 64 * 64


_ZERO_CODES = {}


def _zero_word(w, strategy, p):
    """Word w of a fresh state: zeros, or for an 8-bit word the code of 0 (the library's, read from an
    optimizer it builds) and zero scales."""
    t = torch.zeros(_word_shape(w, p), dtype=_dtype_of(w.format, strategy), device=p.device)
    if w.block:
        key = (strategy.index, w.role)
        if key not in _ZERO_CODES:
            cfg = _lib.AdamWConfig(strategy=strategy.index, n=1)
            h = ctypes.c_void_p()
            _lib.check(_lib.lib.collage_adamw_create(ctypes.byref(cfg), ctypes.byref(h)), "collage_adamw_create")
            _ZERO_CODES[key] = ctypes.c_uint8.from_address(_lib.lib.collage_adamw_word(h, w.role)).value
            _lib.lib.collage_adamw_free(h)
        t[:p.numel()] = _ZERO_CODES[key]
    return t


class _Native:
    """A libcollage optimizer over one tensor and its state words."""

    def __init__(self, strategy, p, st, hp, index0, total):
        """p: the tensor stepped here (a DTensor's local shard), st: its state (DTensor words: their local ones)."""
        words = (ctypes.c_void_p * _lib.ROLE_COUNT)()
        for w in _state_words(strategy, hp["opt"]["name"]):
            words[w.role] = _local(st[w.key]).data_ptr()
        o = hp["opt"]
        cfg = _lib.AdamWConfig(strategy=strategy.index, n=p.numel(), beta1=hp["betas"][0], beta2=hp["betas"][1],
                               eps=hp["eps"], weight_decay=hp["weight_decay"], clip=hp["clip"],
                               skip_nonfinite=int(hp["skip_nonfinite"]), edq=0, seed=hp["seed"],
                               params=p.data_ptr(), index0=index0, total=total, words=words,
                               optimizer=_OPTIMIZERS.index(o["name"]), momentum=o.get("momentum", 0.0),
                               dampening=o.get("dampening", 0.0), nesterov=int(o.get("nesterov", False)),
                               decoupled=int(o.get("decoupled", False)))
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
        return (p.data_ptr(), p.numel(), tuple(_local(st[w.key]).data_ptr() for w in _state_words(strategy, hp["opt"]["name"])),
                tuple(hp["betas"]), hp["eps"], hp["weight_decay"], hp["clip"], hp["skip_nonfinite"], hp["seed"],
                index0, total, tuple(sorted(hp["opt"].items())))

    def __del__(self):
        if getattr(self, "handle", None):
            self._free(self.handle)
            self.handle = None


_OPTIMIZERS = ("adamw", "lion", "sgd")  # collage_optimizer's order


def _state_words(strategy, opt):
    """The words besides θ that optimizer opt keeps: the strategy's, less v for Lion and SGD (numerics.md §14)."""
    return tuple(w for w in strategy.state_words if opt == "adamw" or w.role_name != "v")


def _edq_figures(dot, dot_state, nn, lost, updates):
    """numerics.md §7 from the sums (collage_edq's edq_finish)."""
    norm = math.sqrt(nn)
    return {"edq": dot / norm if nn > 0 else 0.0, "edq_ratio": dot / nn if nn > 0 else 1.0,
            "lost": lost / updates if updates else 0.0, "edq_state": dot_state / norm if nn > 0 else 0.0,
            "edq_state_ratio": dot_state / nn if nn > 0 else 1.0, "update_norm": norm, "updates": updates,
            "sum_dot": dot, "sum_dot_state": dot_state, "sum_nn": nn, "lost_count": lost}


def _chunk_counts(xs):
    """The Σg² chunks (of _lines.BLOCK elements) of each tensor of xs."""
    return [-(-x.numel() // _lines.BLOCK) for x in xs]


def _split(flat, counts):
    """flat cut into consecutive lists of the given lengths."""
    res, at = [], 0
    for n in counts:
        res.append(flat[at:at + n])
        at += n
    return res


def _host_chunk_sums(xs):
    """Each CPU tensor's Σx² chunk sums (collage_sumsq_chunks_many: its chunks of 2^14 from element 0, in one
    parallel loop): a list of lists. The tensors are contiguous and of one dtype (bf16 or fp32)."""
    if not xs:
        return []
    k = len(xs)
    ptrs = (ctypes.c_void_p * k)(*(x.data_ptr() for x in xs))
    ns = (ctypes.c_size_t * k)(*(x.numel() for x in xs))
    nbs = _chunk_counts(xs)
    out = np.empty(max(sum(nbs), 1), dtype=np.float64)
    _lib.check(_lib.lib.collage_sumsq_chunks_many(ptrs, ns, k, int(xs[0].dtype != torch.float32), _lines.BLOCK,
                                                  out.ctypes.data), "collage_sumsq_chunks_many")
    return _split(out.tolist(), nbs)


def _combine(parts):
    """collage_edq_combine: the parts' sums added in order, the figures recomputed."""
    s = [0.0, 0.0, 0.0, 0, 0]
    for q in parts:
        for i in range(5):
            s[i] += q[i]
    return _edq_figures(*s)


# Every setting a param group of one of the three optimizers may carry; a group of one optimizer that
# carries another's is refused by name, so that no setting is silently ignored.
_SETTINGS = ("lr", "betas", "eps", "weight_decay", "momentum", "dampening", "nesterov", "decoupled")
# torch.optim's flags that collage's optimizers do not implement: refused where set (not None or False).
_TORCH_FLAGS = ("amsgrad", "maximize", "foreach", "fused", "capturable", "differentiable")
_NOT_USED = {("lion", "eps"): " (Lion's update is a sign: nothing is divided)",
             ("sgd", "betas"): " (SGD's momentum is 'momentum', and its dampening 'dampening')",
             ("sgd", "eps"): " (SGD divides by nothing)",
             ("lion", "momentum"): " (Lion's momentum is betas[1], its interpolation betas[0])"}


class _Optimizer(torch.optim.Optimizer):
    """What AdamW, Lion and SGD share: parameters, groups and their checks, the virtual slab, the three
    paths of the step, state dicts. A subclass names its update rule (_opt_name), the settings its
    groups carry (_settings) and its defaults."""

    _opt_name = None
    _settings = ()

    def __init__(self, params, precision, defaults, max_grad_norm, edq, seed, skip_nonfinite, backend, shards,
                 all_reduce):
        cls = type(self).__name__
        self.strategy = _strategy(precision)
        _supported_or_raise(self.strategy)
        self._words = _state_words(self.strategy, self._opt_name)
        if self._opt_name != "adamw" and self.strategy.has("δv"):
            raise ValueError(f"'{self.strategy.name}' keeps the second moment v as a pair (v, δv), and {cls} has "
                             "no second moment; take its weight scheme alone (e.g. collage-light)")
        why = ctypes.create_string_buffer(256)  # the library's refusals (eco with Lion)
        if _lib.lib.collage_optimizer_check(_OPTIMIZERS.index(self._opt_name), self.strategy.index, why, 256) != _lib.OK:
            raise ValueError(f"{cls}: {why.value.decode(errors='replace')}")
        for w in self.strategy.words:
            _dtype_of(w.format, self.strategy)
        if backend not in ("auto", "torch", "c"):
            raise ValueError(f"{cls}: backend must be 'auto', 'torch' or 'c', not {backend!r}")
        if max_grad_norm is not None and not (isinstance(max_grad_norm, (int, float)) and math.isfinite(max_grad_norm)
                                              and max_grad_norm > 0):
            raise ValueError(f"{cls}: max_grad_norm must be a positive finite number or None, not {max_grad_norm!r}")
        self.max_grad_norm, self.edq, self.seed = max_grad_norm, bool(edq), int(seed)
        self.skip_nonfinite, self.backend = bool(skip_nonfinite), backend
        if all_reduce is not None and not callable(all_reduce):
            raise TypeError(f"{cls}: all_reduce must be a function that sums a tensor across ranks, not {all_reduce!r}")
        self.all_reduce = None
        self.last_stats = None
        self._native = {}
        self._cuda_steps = {}
        self._cuda_tables = {}
        self._layout = None  # the all-reduced vector's layout (_chunk_layout)
        self._dt = {}  # DTensor parameters' layouts (_dtensor.Layout)
        params, self._names = self._strip_names(params)
        self.shards = {}
        super().__init__(params, defaults)
        if all_reduce is not None and self._reduce() is not None:
            raise ValueError(f"{cls}: all_reduce is for shards= of plain tensors; DTensor parameters sum the gradient "
                             "norm over their mesh's shard group (leave all_reduce out)")
        self.all_reduce = all_reduce
        self.shards = self._check_shards(shards)

    # ------------------------------------------------------------ parameters and their checks
    def _strip_names(self, params):
        """(name, tensor) pairs to tensors: (the list, {id(tensor): name}). Changes nothing."""
        if isinstance(params, torch.Tensor):
            raise TypeError("params must be an iterable of tensors, (name, tensor) pairs or dicts, not a tensor")
        out, names = [], {}
        for item in list(params):
            if isinstance(item, dict):
                item = dict(item)
                if isinstance(item.get("params"), torch.Tensor):
                    item["params"] = [item["params"]]
                item["params"], more = self._strip_names(item.get("params", ()))
                names.update(more)
                out.append(item)
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                names[id(item[1])] = item[0]
                out.append(item[1])
            else:
                out.append(item)
        return out, names

    def _name(self, p, names=None, at=None):
        """How messages call p: its name, else its place (at: (group, index)) and shape."""
        names = self._names if names is None else names
        if id(p) in names:
            return f"parameter '{names[id(p)]}'"
        if at is None:
            at = next(((gi, pi) for gi, g in enumerate(self.param_groups) for pi, q in enumerate(g["params"]) if q is p),
                      None)
        if at is not None:
            return f"parameter {at[1]} of param group {at[0]} (shape {tuple(p.shape)})"
        return f"a parameter of shape {tuple(p.shape)}"

    def _check_hparams(self, group, where):
        """A group's settings: exactly this optimizer's (_settings; a setting of another optimizer, e.g.
        eps for Lion or betas for SGD, is a TypeError naming this class), and torch.optim's flags that
        collage does not implement (amsgrad, maximize, foreach, ...) unset. Then lr ≥ 0, β1 and β2 in (0, 1),
        eps > 0, weight_decay ≥ 0, momentum in [0, 1), dampening in [0, 1], each a finite real number;
        nesterov and decoupled True or False, nesterov with momentum > 0 and dampening 0 (as
        torch.optim.SGD). A ValueError (TypeError for what is not a number) naming the group, the setting
        and its value. Other keys (a scheduler's initial_lr, a user's name) are left alone."""
        cls = type(self).__name__
        for key in group:
            if key in _SETTINGS and key not in self._settings:
                raise TypeError(f"{where}: {cls} got an unexpected setting {key!r}, which it does not use"
                                f"{_NOT_USED.get((self._opt_name, key), '')}; {cls}'s settings are "
                                f"{', '.join(self._settings)}")
            if key in _TORCH_FLAGS and group[key] not in (None, False):
                raise ValueError(f"{where}: {key}={group[key]!r}: collage's {cls} does not implement torch.optim's "
                                 f"{key}")
        for key in self._settings:
            if key not in group:
                raise ValueError(f"{where} has no {key!r}; {cls}'s groups carry {', '.join(self._settings)}")

        def real(key, v):
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise TypeError(f"{where}: {key} must be a real number, not {v!r}") from None
            if not math.isfinite(x):
                raise ValueError(f"{where}: {key} is {v!r}; it must be a finite number")
            return x

        def flag(key):
            if group[key] not in (True, False):  # 0 and 1 pass, as they do in torch.optim.SGD
                raise TypeError(f"{where}: {key} must be True or False, not {group[key]!r}")
            return bool(group[key])
        if real("lr", group["lr"]) < 0:
            raise ValueError(f"{where}: lr {group['lr']!r} must be >= 0")
        if "betas" in self._settings:
            try:
                betas = tuple(group["betas"])
                ok = len(betas) == 2 and all(0.0 < float(b) < 1.0 for b in betas)
            except (TypeError, ValueError):
                raise TypeError(f"{where}: betas must be a pair (beta1, beta2) of numbers, not {group['betas']!r}") \
                    from None
            if not ok:
                raise ValueError(f"{where}: betas {betas} must be two numbers in (0, 1)")
        if "eps" in self._settings and not real("eps", group["eps"]) > 0:
            raise ValueError(f"{where}: eps {group['eps']!r} must be > 0")
        if real("weight_decay", group["weight_decay"]) < 0:
            raise ValueError(f"{where}: weight_decay {group['weight_decay']!r} must be >= 0")
        if "momentum" in self._settings:
            mu, damp = real("momentum", group["momentum"]), real("dampening", group["dampening"])
            if not (0.0 <= mu < 1.0 and 0.0 <= damp <= 1.0):
                raise ValueError(f"{where}: momentum {group['momentum']!r} must be in [0, 1) and dampening "
                                 f"{group['dampening']!r} in [0, 1]")
            if flag("nesterov") and (mu <= 0 or damp != 0):
                raise ValueError(f"{where}: nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD), not "
                                 f"momentum {group['momentum']!r} and dampening {group['dampening']!r}")
            if self.strategy.name.split("+")[0] == "eco" and (mu <= 0 or flag("nesterov")):
                raise ValueError(f"{where}: '{self.strategy.name}' feeds θ's rounding error into the momentum buffer, "
                                 "which needs momentum > 0 without nesterov (heavy-ball SGD)")
        if "decoupled" in self._settings:
            flag("decoupled")

    def _check_param(self, p, names, at):
        """What a parameter must be for this strategy: the weights' dtype, contiguous, not cast for another."""
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"param group {at[0]}: parameter {at[1]} is a {type(p).__name__}, not a tensor")
        want = _DTYPES[self.strategy.weights.format]
        if p.dtype != want:
            raise TypeError(f"{self._name(p, names, at)} is {p.dtype}, but '{self.strategy.name}' steps {want} weights "
                            f"(collage.torch.to_collage(model, '{self.strategy.name}') casts a float model)")
        if not _local(p).is_contiguous():
            raise ValueError(f"{self._name(p, names, at)} is not contiguous; the step updates its memory in place "
                             "(make it contiguous before building the optimizer)")
        if _dtensor.is_dtensor(p) and p not in self._dt:  # its mesh, placement and shape are its own for good
            self._check_dtensor(p, self._name(p, names, at))
        seed = getattr(p, "_collage_seed", None)
        if seed is not None and seed[0] != self.strategy.name:
            raise ValueError(f"{self._name(p, names, at)} was cast by to_collage for '{seed[0]}', but this optimizer is "
                             f"'{self.strategy.name}': cast the float model for '{self.strategy.name}'")

    def _check_dtensor(self, p, name):
        """A DTensor parameter's layout (Shard(0) on one mesh dimension, torch.chunk's rows), checked and
        kept; with 8-bit words every rank's shard, not this rank's alone, starts a block of 256 elements
        and ends on one or at the tensor's end, so that every rank refuses the same parameters."""
        lay = _dtensor.Layout(p, name)
        if _has_q8(self.strategy):
            for r in range(lay.world):
                start, n = lay.span(r)
                if n and (start % QBLOCK or (start + n != lay.full and n % QBLOCK)):
                    r0, r1 = lay.rows(r)
                    raise ValueError(
                        f"{name} is a DTensor of shape {lay.shape} sharded over {lay.world} ranks; rank {r} holds rows "
                        f"[{r0}, {r1}), elements [{start}, {start + n}) of {lay.full}, but '{self.strategy.name}' keeps "
                        f"8-bit words with a scale per {QBLOCK} elements, so each shard must start at a multiple of "
                        f"{QBLOCK} elements and end on one or at the tensor's end (FSDP2 gives each rank "
                        f"ceil(rows / ranks) rows); step it with a 16-bit strategy in an optimizer of its own, or "
                        f"shape it so that ceil({lay.shape[0]} / {lay.world}) rows hold a multiple of {QBLOCK} elements")
        self._dt[p] = lay

    def _shard(self, p):
        """(start, numel): p's elements in the tensor it is part of (a shard given in shards=, a DTensor's
        local rows, or the whole of a plain tensor)."""
        if p in self.shards:
            return self.shards[p]
        lay = self._dt.get(p)
        if lay is not None:
            return lay.start, lay.full
        return 0, p.numel()

    def _reduce(self):
        """The function that sums the Σg² vector across the ranks: all_reduce=, or over the shard
        dimension's process group of the DTensor parameters (HSDP's replicas hold the same gradients
        after FSDP's reduction, so the replicate dimension is left out); None where nothing is sharded."""
        if self.all_reduce is not None:
            return self.all_reduce
        lay = next((self._dt[p] for g in self.param_groups for p in g["params"] if p in self._dt), None)
        if lay is not None:
            return lambda t: torch.distributed.all_reduce(t, group=lay.group)
        return None

    def add_param_group(self, param_group):
        """torch's add_param_group, with every check made before the group is added: a refused group
        leaves the optimizer as it was."""
        if not isinstance(param_group, dict):
            raise TypeError(f"a param group must be a dict with 'params', not {type(param_group).__name__}")
        (group,), names = self._strip_names([param_group])
        names = {**self._names, **names}
        gi = len(self.param_groups)
        for key, v in self.defaults.items():
            group.setdefault(key, v)
        self._check_hparams(group, f"param group {gi}")
        seen = {}
        for pi, p in enumerate(group["params"]):
            self._check_param(p, names, (gi, pi))
            if id(p) in seen:
                raise ValueError(f"{self._name(p, names, (gi, pi))} appears twice in param group {gi} (also as "
                                 f"parameter {seen[id(p)]}): it would be stepped twice")
            seen[id(p)] = pi
        devices = {p.device for p in group["params"]}
        if len(devices) > 1:
            raise ValueError(f"param group {gi} mixes devices ({', '.join(sorted(str(d) for d in devices))}); put each "
                             "device's parameters in a group of its own")
        self._check_kinds([q for g in self.param_groups for q in g["params"]] + list(group["params"]), names)
        if "betas" in group:
            group["betas"] = tuple(group["betas"])
        super().add_param_group(group)  # torch's own checks (leaf tensors, a parameter in two groups) come first
        self._names = names

    def _check_kinds(self, params, names):
        """DTensor parameters are all of one shard group and come alone: a plain tensor beside them would be
        a replica on every rank, its Σg² counted once per rank."""
        dts = [p for p in params if _dtensor.is_dtensor(p)]
        if not dts:
            return
        plain = next((p for p in params if not _dtensor.is_dtensor(p)), None)
        if plain is not None:
            raise ValueError(f"{self._name(plain, names)} is a plain tensor, and {self._name(dts[0], names)} a DTensor: "
                             "an optimizer steps DTensor parameters (FSDP2) or plain ones, not both (a plain tensor is "
                             "whole on every rank, and its share of the gradient norm would be counted once per rank); "
                             "give the plain ones an optimizer of their own")
        for p in dts:
            if p not in self._dt:
                self._check_dtensor(p, self._name(p, names))
        group = self._dt[dts[0]].group
        other = next((p for p in dts if self._dt[p].group is not group), None)
        if other is not None:
            raise ValueError(f"{self._name(other, names)} is sharded over another process group than "
                             f"{self._name(dts[0], names)}: the gradient norm is summed over one group; give each "
                             "mesh's parameters an optimizer of their own")

    def _slab(self):
        """Each parameter's place in the virtual slab: {p: (index0, total)}. A strategy with 8-bit words
        starts each tensor at a multiple of 256 (its blocks of scales are its own) and gives it total =
        index0 + n, a shard that ends the slab (collage_adamw_config: the library's rule for 8-bit shards)."""
        off, at, q8 = {}, 0, _has_q8(self.strategy)
        for g in self.param_groups:
            for p in g["params"]:
                if q8:
                    at = -(-at // QBLOCK) * QBLOCK
                start, full = self._shard(p)
                off[p] = at + start
                at += full
        return {p: (a, a + _local(p).numel() if q8 else at) for p, a in off.items()}

    def _check_shards(self, shards):
        """{p: (start, numel)} checked: a parameter of this optimizer and 0 <= start, start + p.numel() <= numel.
        A strategy with 8-bit words takes shards that start at a multiple of 256 and end on one or at the
        tensor's end (the blocks of scales are the tensor's). A ValueError naming the parameter otherwise."""
        out = {}
        mine = {id(p) for g in self.param_groups for p in g["params"]}
        for p, sh in dict(shards or {}).items():
            if id(p) not in mine:
                raise ValueError(f"shards names {self._name(p)}, which is not a parameter of this optimizer")
            if _dtensor.is_dtensor(p):
                raise ValueError(f"shards names {self._name(p)}, a DTensor: its placement says which part of the tensor "
                                 "it holds (leave it out of shards=)")
            try:
                start, full = (int(x) for x in sh)
            except (TypeError, ValueError):
                raise TypeError(f"shards[{self._name(p)}] must be (start, numel), not {sh!r}") from None
            n = p.numel()
            if start < 0 or start + n > full:
                raise ValueError(f"shards[{self._name(p)}] = ({start}, {full}): its {n} elements do not fit the tensor")
            if n and _has_q8(self.strategy) and (start % QBLOCK or (start + n != full and n % QBLOCK)):
                raise ValueError(f"shards[{self._name(p)}] = ({start}, {full}): '{self.strategy.name}' keeps 8-bit words "
                                 f"with a scale per {QBLOCK} elements, so a shard must start at a multiple of {QBLOCK} "
                                 "and end on one or at the tensor's end")
            out[p] = (start, full)
        return out

    # ------------------------------------------------------------ state
    def _init_state(self, p):
        """The strategy's words besides θ for p: zero, or what to_collage left on p (then synced)."""
        st = self.state[p]
        if st:
            return st
        st["step"], st["synced"] = 0, False
        seed = getattr(p, "_collage_seed", None)
        for w in self._words:
            st[w.key] = self._word_like(_zero_word(w, self.strategy, _local(p)), w, p)
        if seed is not None:
            for key, v in seed[1].items():
                st[key].copy_(v)
            st["synced"] = True
            del p._collage_seed
        return st

    @staticmethod
    def _word_like(t, w, p):
        """A word of p's state from this rank's part t: for a DTensor parameter a DTensor placed as p, except
        an 8-bit word, which is this rank's own tensor (the library's layout of its shard: its codes, then
        its blocks' scales); state_dict() gives it as two DTensors (_q8_split)."""
        return _dtensor.like(t, p) if _dtensor.is_dtensor(p) and not w.block else t

    def _sync_from_weights(self, p, st):
        """The kept value from θ alone, as the C step's first step does (adamw.c sync_from_weights): the
        master = θ widened, the compensation, Kahan's c, the remainder and bf16-c8's correction byte zero.
        The moments are left as they are."""
        for w in self._words:
            if w.role_name == "master":
                _local(st[w.key]).copy_(_local(p).float())
            elif w.role_name in ("δθ", "c", "remainder", "e"):
                _local(st[w.key]).zero_()
        st["synced"] = True

    @torch.no_grad()
    def sync_from_params(self, params=None):
        """Set the kept value of each parameter to its θ as it is now, so that the next step starts from
        an in-place edit (pruning, clamping, weights copied in): the fp32 master becomes θ, and the
        compensation δθ, Kahan's c, the remainder and bf16-c8's correction byte become zero, as a fresh
        state's first step sets them. The moments and the step count are kept.

        params: the tensors to sync (default: every parameter of the optimizer). A synced tensor's kept
        value is θ for all its elements, so the bits below θ's precision that its untouched elements kept
        are dropped: name only the edited tensors where that matters. Strategies that keep θ alone
        (fp32, bf16, bf16-sr, bf16-fp32-states) have nothing to sync. Without it the step starts from
        the old words (see the class's docstring)."""
        mine = {id(p): p for g in self.param_groups for p in g["params"]}
        if isinstance(params, torch.Tensor):
            params = [params]
        targets = list(mine.values()) if params is None else list(params)
        for p in targets:
            if id(p) not in mine:
                raise ValueError(f"{type(self).__name__}.sync_from_params: {self._name(p)} is not a parameter of "
                                 "this optimizer")
        for p in targets:
            if p in self.state and self.state[p]:
                self._sync_from_weights(p, self.state[p])
            elif getattr(p, "_collage_seed", None) is not None:
                del p._collage_seed  # to_collage's words hold the value before the edit; the first step syncs

    def _check_grad(self, p):
        """p's gradient, checked; for a DTensor parameter its local tensor (placed as p)."""
        g = p.grad
        if _dtensor.is_dtensor(p):
            if not _dtensor.is_dtensor(g) or tuple(g.placements) != tuple(p.placements) or g.shape != p.shape:
                got = f"a DTensor placed {tuple(g.placements)}" if _dtensor.is_dtensor(g) else "a plain tensor"
                raise TypeError(f"{self._name(p)} is a DTensor placed {tuple(p.placements)}, and its gradient is {got} "
                                f"of shape {tuple(g.shape)}: it must be placed as the parameter")
            g, p = g.to_local(), p.to_local()
        if g.is_sparse:
            raise TypeError(f"{self._name(p)} has a sparse gradient, which {type(self).__name__} does not take")
        if g.dtype != p.dtype or g.device != p.device or g.shape != p.shape:
            raise TypeError(f"{self._name(p)}: its gradient is {g.dtype} {tuple(g.shape)} on {g.device}, but the "
                            f"parameter is {p.dtype} {tuple(p.shape)} on {p.device}")
        if not g.is_contiguous():
            raise ValueError(f"{self._name(p)}: its gradient is not contiguous")
        return g

    def _hparams(self, group):
        """The settings of a group's step as the C optimizer takes them; β and eps 0 where the update rule
        has none (the library's defaults then fill them, unused)."""
        return {"betas": tuple(float(b) for b in group["betas"]) if "betas" in self._settings else (0.0, 0.0),
                "eps": float(group["eps"]) if "eps" in self._settings else 0.0,
                "weight_decay": float(group["weight_decay"]), "clip": float(self.max_grad_norm or 0.0),
                "skip_nonfinite": self.skip_nonfinite, "seed": self.seed, "opt": self._opt_settings(group)}

    def _opt_settings(self, group):
        """The update rule and the group's settings of it (Lion, SGD: numerics.md §14)."""
        return {"name": self._opt_name}

    def _path(self, p):
        """Which steps p: "c" (libcollage, CPU tensors), "cuda" (libcollage_cuda: AdamW on CUDA tensors) or "torch"
        (the torch lines); raises where none can, naming what is missing."""
        if self.backend != "torch" and p.device.type == "cpu":
            return "c"
        if self.backend == "c":
            raise ValueError(f"{self._name(p)} is on {p.device}; backend='c' steps CPU tensors only")
        if p.device.type == "meta":
            raise ValueError(f"{self._name(p)} is on the meta device, which holds no values: there is nothing to step "
                             "(materialise the model first, e.g. model.to_empty(device='cpu') and load its weights)")
        if self.backend == "auto" and p.device.type == "cuda" and self._opt_name == "adamw":
            if _cuda.available():
                return "cuda"
            raise RuntimeError(f"{self._name(p)} is on {p.device}, but libcollage_cuda.so, the CUDA step, is not there "
                               f"(looked for: {_cuda.missing()}). Build it with `make CUDA=1` beside libcollage.so or "
                               "set COLLAGE_CUDA_LIB to it; or pass backend='torch' to step CUDA tensors with the torch "
                               "lines (the same bits, slow: one kernel launch per operation per tensor)")
        if self.strategy.name not in _lines.STRATEGY_LINES:
            raise NotImplementedError(f"'{self.strategy.name}' has no torch lines yet: {self._name(p)} on {p.device} "
                                      "cannot be stepped (on CPU, libcollage steps it: backend='auto')")
        return "torch"

    def _checked_items(self):
        """Every parameter with a gradient, checked before anything changes: (group index, p, grad, uses C).
        Hyperparameters, parameters and gradients may have been changed since the groups were added."""
        for gi, group in enumerate(self.param_groups):
            self._check_hparams(group, f"param group {gi}")
        items = []
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                self._check_param(p, self._names, (gi, pi))
                items.append((gi, p, self._check_grad(p), self._path(p)))
        self._check_kinds([p for g in self.param_groups for p in g["params"]], self._names)
        return items

    # ------------------------------------------------------------ the step
    @_eager_only
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        checked = self._checked_items()
        if not checked:
            return loss
        every = [(gi, p, g, self._init_state(p), c) for gi, p, g, c in checked]
        items = [it for it in every if _local(it[1]).numel()]  # a zero-size tensor (or shard) has nothing to step
        one = self._one_device(items)
        wait = not one or self.skip_nonfinite or self.edq  # else nothing needs the step's result now
        slab = self._slab()
        if one:  # Σg², clipping and the skip on the device, in the step's one launch
            c_parts, (skipped, gnorm, coef) = self._step_cuda(items, None, slab, wait=wait)
            stats = {"step": None, "skipped": skipped, "grad_norm": gnorm, "clip_coef": coef}
            if skipped:
                stats["step"] = max(st["step"] for _, _, _, st, _ in every)
                self.last_stats = stats
                return loss
        else:
            sumsq = self._grad_sumsq(items) if (self.max_grad_norm or self.skip_nonfinite) else math.nan
            gnorm = math.sqrt(sumsq) if not math.isnan(sumsq) else math.nan
            stats = {"step": None, "skipped": False, "grad_norm": gnorm, "clip_coef": 1.0}
            if self.skip_nonfinite and not math.isfinite(sumsq):
                stats.update(skipped=True, step=max(st["step"] for _, _, _, st, _ in every))
                self.last_stats = stats
                return loss
            coef = 1.0
            if self.max_grad_norm and gnorm > self.max_grad_norm:
                coef = self.max_grad_norm / (gnorm + 1e-6)
            stats["clip_coef"] = coef
            self._scalars = {}
            c_parts = self._step_c([it for it in items if it[4] == "c"], sumsq, slab)
            c_parts.update(self._step_cuda([it for it in items if it[4] == "cuda"], sumsq, slab)[0])
        parts = []
        for gi, p, g, st, path in every:
            if _local(p).numel():
                part = c_parts.get(p) if path != "torch" else self._step_torch(p, g, st, self.param_groups[gi], coef,
                                                                                slab[p][0])
                parts.append((gi, part))
            st["step"] += 1
            st["synced"] = True
        stats["step"] = max(st["step"] for _, _, _, st, _ in every)
        if self.edq:
            stats["edq"] = _combine([q for _, q in parts])
            stats["groups"] = [_combine([q for gi, q in parts if gi == k]) for k in range(len(self.param_groups))]
        self.last_stats = stats
        if not wait:  # grad_norm and clip_coef read from the device when last_stats is first asked for
            self._pending_stats = self._cuda_steps[items[0][2].device], len(items), stats
        return loss

    def _grad_sumsq(self, items):
        """Σ g² of every gradient, chunk by chunk in slab order (the C step's chunks and order); with
        all_reduce, the whole model's (_all_chunks). A shard's own chunk sums are those of the whole chunks
        of its tensor that it holds (_whole_span)."""
        views = {}  # each gradient's elements that make up whole chunks of its tensor
        for _, p, g, _, _ in items:
            lo, hi = self._whole_span(p)
            views[p] = g.reshape(-1)[lo:hi]
        sums, by_device, cuda = {}, {}, {}
        for it in items:
            if it[4] == "cuda":
                cuda.setdefault(it[2].device, []).append(it)
            else:
                by_device.setdefault("c" if it[4] == "c" else it[2].device, []).append(it[1])
        for its in cuda.values():  # each device's gradients in one launch of libcollage_cuda's Σg² kernel
            sums.update(self._cuda_block_sums(its, views))
        cpu = by_device.pop("c", [])
        sums.update(zip(cpu, _host_chunk_sums([views[p] for p in cpu])))  # in one parallel loop
        for ps in by_device.values():
            vs = [views[p] for p in ps]
            sums.update(zip(ps, _split(_lines.block_sumsq(vs), _chunk_counts(vs))))
        if self._reduce() is not None:
            return self._all_chunks(items, sums)
        return _lines.add_in_order(b for _, p, _, _, _ in items for b in sums[p])  # slab order

    def _whole_span(self, p):
        """The elements [lo, hi) of p (offsets in p) that make up whole Σg² chunks of its tensor: all of p,
        unless p is a shard with an end inside a chunk; that chunk is shared with another rank (_all_chunks)."""
        start, full = self._shard(p)
        a, b, B = start, start + _local(p).numel(), _lines.BLOCK
        lo = min(-(-a // B) * B, b)
        hi = b if b == full else max(b // B * B, lo)
        return lo - a, hi - a

    def _shared_pieces(self, p):
        """p's elements in chunks it shares with other ranks: [(offset in p, length, chunk of its tensor)]."""
        start, n = self._shard(p)[0], _local(p).numel()
        lo, hi = self._whole_span(p)
        return [(x, y - x, (start + x) // _lines.BLOCK) for x, y in ((0, lo), (hi, n)) if y > x]

    def _chunk_layout(self, dev):
        """The layout of the all-reduced vector: every tensor's chunk sums in slab order (base[p]: the first
        chunk of p's tensor; n_chunks in all), then the elements of each chunk that ranks share, widened
        to float64 (shared: [(chunk, offset in the vector, length, bf16)]). Which chunks are shared is
        learnt by one all_reduce of markers, each rank marking the chunks it holds part of, when the
        tensors are first seen (every rank adds and shards the same tensors)."""
        base, at, ps = {}, 0, []
        for g in self.param_groups:
            for p in g["params"]:
                full = self._shard(p)[1]
                base[p], at = at, at + -(-full // _lines.BLOCK)
                ps.append((p, full))
        key = tuple(full for _, full in ps)
        if self._layout is None or self._layout[0] != key:
            marks = torch.zeros(at, dtype=torch.float64)
            for p, _ in ps:
                for _, _, c in self._shared_pieces(p):
                    marks[base[p] + c] = 1.0
            marks = marks.to(dev)
            self._reduce()(marks)
            marked, shared, size = set(torch.nonzero(marks.cpu()).flatten().tolist()), [], at
            for p, full in ps:
                for c in range(-(-full // _lines.BLOCK)):
                    if base[p] + c in marked:
                        length = min(_lines.BLOCK, full - c * _lines.BLOCK)
                        shared.append((base[p] + c, size, length, int(p.dtype != torch.float32)))
                        size += length
            self._layout = (key, shared, size)
        return base, at, self._layout[1], self._layout[2]

    def _all_chunks(self, items, sums):
        """The whole model's Σg² from one all_reduce of a vector (_chunk_layout) where this rank fills in
        its whole chunks' sums and its elements of shared chunks, zeros elsewhere: the sum is exact in any
        order (x + 0 = x). Each rank then sums every shared chunk itself (the elements in their order, as
        the unsharded tensor's chunk) and adds the chunk sums in order: the unsharded step's Σg²."""
        dev = items[0][2].device if items else torch.device("cpu")
        base, n_chunks, shared, size = self._chunk_layout(dev)
        at = {c: off for c, off, _, _ in shared}
        vec = torch.zeros(size, dtype=torch.float64)
        for _, p, g, _, _ in items:
            start, flat = self._shard(p)[0], g.reshape(-1)
            first = base[p] + (start + self._whole_span(p)[0]) // _lines.BLOCK
            vec[first:first + len(sums[p])] = torch.tensor(sums[p], dtype=torch.float64)
            for x, n, c in self._shared_pieces(p):
                o = at[base[p] + c] + (start + x) % _lines.BLOCK
                vec[o:o + n] = flat[x:x + n].to(torch.float64).cpu()
        vec = vec.to(dev)
        self._reduce()(vec)
        vec = vec.cpu()
        for bf16 in (0, 1):  # the shared chunks' sums, from their elements in their own dtype (exact: x + 0)
            mine = [(c, off, n) for c, off, n, b in shared if b == bf16]
            dtype = torch.bfloat16 if bf16 else torch.float32
            got = _host_chunk_sums([vec[off:off + n].to(dtype) for _, off, n in mine])
            for (c, _, _), s in zip(mine, got):
                vec[c] = s[0]
        return _lines.add_in_order(vec[:n_chunks].tolist())

    # ------------------------------------------------------------ the CUDA step (libcollage_cuda)
    def _cuda_step_of(self, device, k, elements):
        """The libcollage_cuda optimizer of a device for this step's setting, made anew when it does not fit."""
        key = (self.strategy.index, device.index or 0, float(self.max_grad_norm or 0.0), self.skip_nonfinite,
               self.edq, self.seed)
        s = self._cuda_steps.get(device)
        if s is None or not s.fits(key, k, elements):
            if s is not None:
                s.close()
            s = self._cuda_steps[device] = _cuda.Step(*key, max(k, 1), max(elements, 1))
        return s

    def _cuda_table(self, items, slab, grads=None):
        """The collage_cuda_tensor table of CUDA items (gi, p, g, st, path): device pointers of θ, the
        gradient (grads[p] where given, with its size: the elements of whole Σg² chunks) and the state
        words, each tensor's slab index, step number and group's hyperparameters.
        The table of the last step is kept with its state tensors and reused while they are the same
        objects: each step rewrites its columns (θ, gradient, size, slab index, step, hyperparameters)
        through a numpy view, and the state words' pointers are set only when the table is made."""
        words = [st[w.key] for _, _, _, st, _ in items for w in self.strategy.state_words]
        kept = self._cuda_tables.get(len(items))
        if kept is None or len(kept[1]) != len(words) or any(a is not b for a, b in zip(kept[1], words)):
            table = (_cuda.CudaTensor * len(items))()
            for j, (_, _, _, st, _) in enumerate(items):
                for w in self.strategy.state_words:
                    table[j].words[w.role] = _local(st[w.key]).data_ptr()
            kept = self._cuda_tables[len(items)] = (table, words, np.frombuffer(memoryview(table).cast("B"), _TABLE_DTYPE))
        table, _, cols = kept
        # each tensor's row holds its group's settings (only AdamW takes this path: the table has no SGD fields)
        hp = np.array([(float(g["lr"]), float(g["weight_decay"]), float(g["eps"]), *(float(b) for b in g["betas"]))
                       for g in self.param_groups])[[gi for gi, _, _, _, _ in items]]
        cols["words"][:, 0] = [_local(p).data_ptr() for _, p, _, _, _ in items]
        gs = [grads[p] if grads else g for _, p, g, _, _ in items]
        cols["grad"] = [g.data_ptr() for g in gs]
        cols["n"] = [g.numel() for g in gs]
        cols["index0"] = [slab[p][0] for _, p, _, _, _ in items]
        cols["step"] = [st["step"] + 1 for _, _, _, st, _ in items]
        for k, name in enumerate(("lr", "weight_decay", "eps", "beta1", "beta2")):
            cols[name] = hp[:, k]
        return table

    def _cuda_block_sums(self, items, views):
        """Each CUDA gradient's Σg² chunk sums over views[p], its elements that make up whole chunks
        (libcollage_cuda's kernel: collage_sumsq_chunks' numbers)."""
        dev = items[0][2].device
        table = self._cuda_table(items, self._slab(), views)
        nbs = _chunk_counts([views[p] for _, p, _, _, _ in items])
        out = torch.empty(max(sum(nbs), 1), dtype=torch.float64, device=dev)
        step = self._cuda_step_of(dev, len(items), sum(_local(p).numel() for _, p, _, _, _ in items))
        step.sumsq_chunks(table, out.data_ptr(), torch.cuda.current_stream(dev).cuda_stream)
        return dict(zip((p for _, p, _, _, _ in items), _split(out.cpu().tolist(), nbs)))

    def _one_device(self, items):
        """Whether every tensor of the step is a CUDA tensor of one device and no all_reduce joins other
        ranks: then libcollage_cuda sums Σg² itself (the same chunks, added in the same order)."""
        if not items or self._reduce() is not None or items[0][4] != "cuda":
            return False
        dev = items[0][2].device
        return all(it[4] == "cuda" and it[2].device == dev for it in items)

    @property
    def last_stats(self):
        """The last step's statistics; a step on one GPU without skip_nonfinite or EDQ is not waited for,
        and its grad_norm and clip_coef are read from the device here, when first asked for."""
        pending = self.__dict__.get("_pending_stats")
        if pending is not None:
            step, k, stats = pending
            self._pending_stats = None
            (_, stats["grad_norm"], stats["clip_coef"]), _ = step.stats(k)
        return self.__dict__.get("_last_stats")

    @last_stats.setter
    def last_stats(self, value):
        self._pending_stats = None
        self._last_stats = value

    def _step_cuda(self, items, sumsq, slab, wait=True):
        """The CUDA tensors' step: per device, every tensor in one libcollage_cuda step with the Σg² given
        (the clipping factor is computed from it on the device, as libcollage computes it), or with
        sumsq None (one device: _one_device) the Σg² of the tensors' own gradients, summed on the device.
        Returns each parameter's EDQ sums and the last device's (skipped, grad_norm, clip_coef); with
        wait False the steps are launched and not waited for, and nothing is returned."""
        out, by_device, got = {}, {}, (False, math.nan, 1.0)
        for it in items:
            by_device.setdefault(it[1].device, []).append(it)
        for dev, its in by_device.items():
            for _, p, _, st, _ in its:
                if not st["synced"]:
                    self._sync_from_weights(p, st)
            step = self._cuda_step_of(dev, len(its), sum(_local(p).numel() for _, p, _, _, _ in its))
            total = None
            if sumsq is not None:
                total = torch.tensor([0.0 if math.isnan(sumsq) else sumsq], dtype=torch.float64, device=dev)
            table, stream = self._cuda_table(its, slab), torch.cuda.current_stream(dev).cuda_stream
            if not wait:
                step.launch(table, None if total is None else total.data_ptr(), stream)
                continue
            got, sums = step.step(table, None if total is None else total.data_ptr(), stream)
            out.update({p: e for (_, p, _, _, _), e in zip(its, sums)})
        return out, got

    def _step_c(self, items, sumsq, slab):
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
            lp = _local(p)
            if nat is None or nat.key != _Native.key_of(lp, st, self.strategy, hp, *slab[p]):
                nat = self._native[p] = _Native(self.strategy, lp, st, hp, *slab[p])
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
        if not st["synced"]:
            self._sync_from_weights(p, st)
        hp = self._hparams(group)
        opt = hp["opt"]
        key = (p.device, st["step"] + 1, float(group["lr"]), *hp["betas"], hp["eps"], tuple(sorted(opt.items())))
        k = self._scalars.get(key)  # one set per device and group a step: each is a copy to the device
        if k is None:
            k = self._scalars[key] = _lines.Scalars(*key[:6], coef, self.seed, opt)
        if _dtensor.is_dtensor(p):
            p, st = p.to_local(), {key: _local(v) for key, v in st.items()}
        return _lines.step_tensor(self.strategy.name, p, g, st, k, k.lrwd(hp["weight_decay"]), self.edq, index0)

    # ------------------------------------------------------------ state dicts
    def state_dict(self):
        """torch's state dict, every word as it is kept, plus the "collage" entry (the strategy, the seed,
        the step's settings), also in each param group: torch.distributed.checkpoint's
        get_optimizer_state_dict keeps the state and the groups only. A DTensor parameter's 8-bit word
        is given as two DTensors placed as the parameter (_q8_split), which the checkpoint can reshard."""
        sd = super().state_dict()
        sd["collage"] = {"precision": self.strategy.name, "seed": self.seed, "max_grad_norm": self.max_grad_norm,
                         "edq": self.edq, "skip_nonfinite": self.skip_nonfinite, "version": 2}
        if self._opt_name != "adamw":  # an AdamW state dict stays as it was
            sd["collage"]["optimizer"] = {"name": self._opt_name}
        for g in sd["param_groups"]:
            g["collage"] = dict(sd["collage"])
        q8 = [w for w in self._words if w.block]
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in enumerate(params):
            if q8 and i in sd["state"] and _dtensor.is_dtensor(p):
                st = dict(sd["state"][i])  # torch's dict is the live state's
                for w in q8:
                    st[w.key], st[w.key + "_scales"] = self._q8_split(st[w.key], w, p)
                sd["state"][i] = st
        return sd

    @staticmethod
    def _q8_split(t, w, p):
        """An 8-bit word of DTensor p (this rank's codes padded to 64 bytes, then its blocks' fp32 scales) as
        two DTensors placed as p: the codes (uint8, shaped as p; a view of the word) and each element's
        block scale (fp32, shaped as p). Every shard starts a block (_check_dtensor), so a checkpoint can
        reshard both to any number of ranks and each rank finds its blocks' scales at its blocks' first
        elements (_q8_join)."""
        lp = _local(p)
        n = lp.numel()
        scales = t[_codes_bytes(n):].view(torch.float32)
        each = scales.repeat_interleave(w.block)[:n].reshape(lp.shape)
        return _dtensor.like(t[:n].view(lp.shape), p), _dtensor.like(each, p)

    @staticmethod
    def _q8_join(codes, each, w, n):
        """_q8_split's inverse on one rank: the word of its n elements from its codes and elements' scales."""
        t = torch.zeros(_word_shape(w, codes), dtype=torch.uint8, device=codes.device)
        t[:n] = codes.reshape(-1)
        t[_codes_bytes(n):].view(torch.float32).copy_(each.reshape(-1)[::w.block])
        return t

    def _saved_groups(self, meta, groups):
        """The state dict's groups as this version's: version 1 kept SGD's momentum, dampening, nesterov
        and decoupled in meta["optimizer"] for every group, and gave SGD's groups betas and eps and Lion's
        eps, unused; they become the groups' settings, and the unused ones are dropped."""
        if meta.get("version", 1) >= 2 or self._opt_name == "adamw":
            return groups
        held = {k: v for k, v in meta.get("optimizer", {}).items() if k != "name"}
        return [{**held, **{k: v for k, v in sg.items() if k not in _SETTINGS or k in self._settings}}
                for sg in groups]

    def load_state_dict(self, state_dict):
        """Every word back bit for bit, onto each parameter's device, after checking that the dict is of
        this strategy and its groups and words fit the parameters (a ValueError naming what differs)."""
        meta = state_dict.get("collage")
        if meta is None and state_dict.get("param_groups"):  # torch.distributed.checkpoint's keeps the groups'
            meta = state_dict["param_groups"][0].get("collage")
        if meta is None:
            raise ValueError(f"the state dict is not a collage.torch.{type(self).__name__} state dict (no 'collage' "
                             "entry)")
        if meta["precision"] != self.strategy.name:
            raise ValueError(f"the state dict holds '{meta['precision']}' state, but this optimizer is "
                             f"'{self.strategy.name}'")
        saved_opt = meta.get("optimizer", {"name": "adamw"})["name"]
        if saved_opt != self._opt_name:
            raise ValueError(f"the state dict is of optimizer {saved_opt}, but this optimizer is {self._opt_name} "
                             f"({type(self).__name__})")
        groups = self._saved_groups(meta, state_dict["param_groups"])
        if len(groups) != len(self.param_groups):
            raise ValueError(f"the state dict has {len(groups)} param groups, this optimizer {len(self.param_groups)}")
        params, saved_ids = [], []
        for k, (g, sg) in enumerate(zip(self.param_groups, groups)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(f"param group {k} has {len(g['params'])} parameters, the state dict's "
                                 f"{len(sg['params'])}")
            self._check_hparams({**g, **{key: v for key, v in sg.items() if key not in ("params", "collage")}},
                                f"the state dict's param group {k}")
            params += g["params"]
            saved_ids += sg["params"]
        new_state = {}
        for p, sid in zip(params, saved_ids):
            if sid in state_dict["state"]:
                new_state[p] = self._load_param_state(p, state_dict["state"][sid])
        for g, sg in zip(self.param_groups, groups):
            for key, v in sg.items():
                if key not in ("params", "collage"):
                    g[key] = tuple(v) if key == "betas" else v
        self.state.clear()
        self.state.update(new_state)
        self.seed = int(meta["seed"])
        self.max_grad_norm, self.edq = meta["max_grad_norm"], bool(meta["edq"])
        self.skip_nonfinite = bool(meta["skip_nonfinite"])
        self._native.clear()
        self._cuda_steps.clear()
        self._cuda_tables.clear()

    def _part(self, p, v, dtype, key):
        """This rank's part of a saved word v that is shaped as p (a DTensor placed as p, or the full tensor),
        checked (a ValueError naming p and the word)."""
        lp = _local(p)
        if isinstance(v, torch.Tensor) and v.dtype == dtype and tuple(v.shape) == tuple(p.shape):
            if _dtensor.is_dtensor(v) and _dtensor.is_dtensor(p) and tuple(v.placements) == tuple(p.placements):
                return v.to_local()
            if not _dtensor.is_dtensor(v):
                return self._dt[p].rows_of(v) if p in self._dt else v
        got = (f"{'a DTensor placed ' + str(tuple(v.placements)) + ' ' if _dtensor.is_dtensor(v) else ''}{v.dtype} of "
               f"shape {tuple(v.shape)}") if isinstance(v, torch.Tensor) else type(v).__name__
        placed = f" placed {tuple(p.placements)} (this rank's {tuple(lp.shape)})" if _dtensor.is_dtensor(p) else ""
        raise ValueError(f"the state dict's '{key}' of {self._name(p)} is {got}; '{self.strategy.name}' keeps it as "
                         f"{dtype} of shape {tuple(p.shape)}{placed}")

    def _load_param_state(self, p, saved):
        """p's state from a saved entry: each word checked and copied onto p's device without a cast. A word
        may be shaped as p and placed as p (a DTensor parameter's), or the full tensor (this rank takes
        its rows); an 8-bit word is the library's layout of p's elements, or codes and elements' scales
        (key + "_scales") shaped as p, the form state_dict() gives for DTensor parameters."""
        out = {"step": int(saved["step"]), "synced": bool(saved["synced"])}
        lp = _local(p)
        for w in self._words:
            if w.key not in saved:
                raise ValueError(f"the state dict's entry for {self._name(p)} has no '{w.key}' ({w.role_name})")
            want = _dtype_of(w.format, self.strategy)
            if w.block and w.key + "_scales" in saved:
                codes = self._part(p, saved[w.key], torch.uint8, w.key)
                each = self._part(p, saved[w.key + "_scales"], torch.float32, w.key + "_scales")
                out[w.key] = self._q8_join(codes, each, w, lp.numel()).to(device=lp.device)
                continue
            if _dtensor.is_dtensor(p) and not w.block:
                out[w.key] = _dtensor.like(self._part(p, saved[w.key], want, w.key).to(device=lp.device, copy=True)
                                           .contiguous(), p)
                continue
            v, shape = saved[w.key], _word_shape(w, lp)
            count = math.prod(shape)
            if not isinstance(v, torch.Tensor) or v.dtype != want or v.numel() != count:
                got = f"{v.dtype} with {v.numel()} elements" if isinstance(v, torch.Tensor) else type(v).__name__
                layout = f" (the {lp.numel()} codes padded to a multiple of 64, then {-(-lp.numel() // w.block)} fp32 " \
                         "block scales)" if w.block else ""
                raise ValueError(f"the state dict's '{w.key}' of {self._name(p)} is {got}; '{self.strategy.name}' "
                                 f"keeps it as {want} with {count} elements{layout}")
            out[w.key] = v.detach().to(device=lp.device, copy=True).reshape(shape).contiguous()
        return out


_KEPT_VALUE_DOC = """
    In-place edits: a strategy that keeps more than θ (an fp32 master, a compensation δθ, Kahan's c, a
    remainder, bf16-c8's correction byte) steps its kept value, not θ alone. An edit of a parameter in
    place (``p.zero_()``, a clamp, a pruning mask) changes θ only, and the next step starts from θ and
    the old words: a master puts back the value before the edit, δθ or c is added to the edited θ, and
    a remainder or correction byte continues the edited θ's bits (an element set to 0 whose word is
    negative then stays 0 at every step). ``optimizer.sync_from_params()`` after the edit sets the kept
    value to θ (docs/python.md, "In-place edits")."""


class AdamW(_Optimizer):
    __doc__ = """AdamW with one of libcollage's precision strategies (``collage.strategies()``).

    params: tensors, (name, tensor) pairs such as ``model.named_parameters()`` (names then appear in
    messages), or param groups (dicts with "params" and any of lr, betas, eps, weight_decay: each group
    steps with its own; a setting of another optimizer, such as momentum, is refused). Parameters
    are the model's bf16 tensors (fp32 ones for ``precision="fp32"``), contiguous, one device per group.
    The compensation words, moments and masters live in ``optimizer.state[p]``.

    max_grad_norm: clip the gradient of all parameters together to this L2 norm (None: no clipping).
    skip_nonfinite: a NaN or Inf anywhere in the gradient skips the step (nothing changes).
    edq: measure the effective descent quality each step (numerics.md §7). seed: bf16-sr's random stream.
    backend: "auto" (libcollage for CPU tensors, libcollage_cuda for CUDA tensors, torch elsewhere),
    "torch" (the torch lines everywhere: slow on a GPU) or "c" (CPU tensors only).
    shards: {parameter: (start, numel)} for parameters that are a shard of a tensor of numel elements
    starting at its element start (FSDP's local shards: FSDP's flat parameter of rank r of w is
    ``(r * p.numel(), w * p.numel())``), so that stochastic rounding draws the unsharded tensor's bits.
    all_reduce: a function that sums a float64 tensor across the ranks in place (e.g.
    torch.distributed.all_reduce), given the vector of every tensor's Σg² chunk sums and of the elements
    of chunks that ranks share, each rank's own filled in: the clipping factor and the non-finite skip of
    the unsharded step on every rank. Every rank's optimizer lists the same tensors in the same order.
    FSDP2's DTensor parameters (fully_shard, HSDP) need neither: their placement says which rows a rank
    holds, and the mesh's shard dimension is the group of the all-reduce (docs/python.md, "FSDP2").

    After each step ``optimizer.last_stats`` holds (read from the GPU when first asked for, where a step on
    one GPU without skip_nonfinite or EDQ was not waited for): step, skipped, grad_norm (NaN unless clipping or
    skip_nonfinite), clip_coef, and with edq: "edq" (the whole step) and "groups" (per param group),
    each a dict of edq, edq_ratio, lost, edq_state, edq_state_ratio, update_norm, updates.
    """ + _KEPT_VALUE_DOC
    _opt_name = "adamw"
    _settings = ("lr", "betas", "eps", "weight_decay")

    def __init__(self, params, precision="collage-light", lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 max_grad_norm=None, edq=False, seed=0, skip_nonfinite=False, backend="auto", shards=None,
                 all_reduce=None):
        super().__init__(params, precision, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay),
                         max_grad_norm, edq, seed, skip_nonfinite, backend, shards, all_reduce)


class Lion(_Optimizer):
    __doc__ = """Lion (Chen et al. 2023; numerics.md §14) with one of libcollage's precision strategies: the
    update −lr·sign(β1·m + (1−β1)·g) with decoupled weight decay, then m ← β2·m + (1−β2)·g. Keeps m only
    (the strategy's v word is not kept; a strategy whose v is a pair, collage-plus, is refused). A param
    group carries lr, betas and weight_decay, each its own; eps (or another optimizer's setting) is
    refused. The other keywords and everything else as AdamW: the C step on CPU tensors, the torch lines
    elsewhere, state dicts, EDQ. Its usual learning rate is 3-10x below AdamW's.
    """ + _KEPT_VALUE_DOC
    _opt_name = "lion"
    _settings = ("lr", "betas", "weight_decay")

    def __init__(self, params, precision="collage-light", lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0,
                 max_grad_norm=None, edq=False, seed=0, skip_nonfinite=False, backend="auto", shards=None,
                 all_reduce=None):
        super().__init__(params, precision, dict(lr=lr, betas=betas, weight_decay=weight_decay),
                         max_grad_norm, edq, seed, skip_nonfinite, backend, shards, all_reduce)


class SGD(_Optimizer):
    __doc__ = """SGD with momentum, PyTorch's semantics (numerics.md §14), with one of libcollage's precision
    strategies: buf ← μ·buf + (1 − dampening)·g (the first step: buf = g), the update −lr·buf, or
    −lr·(g + μ·buf) with nesterov; weight decay L2 (g + wd·θ enters the buffer, as torch.optim.SGD) or,
    with decoupled=True, subtracted beside the update. A param group carries lr, momentum, dampening,
    nesterov, weight_decay and decoupled, each its own (so torch's schedulers that cycle 'momentum',
    OneCycleLR and CyclicLR, change what the step uses); betas or eps are refused. The buffer is the
    strategy's m word (its state key "exp_avg"). The other keywords as AdamW.
    """ + _KEPT_VALUE_DOC
    _opt_name = "sgd"
    _settings = ("lr", "momentum", "dampening", "nesterov", "weight_decay", "decoupled")

    def __init__(self, params, precision="collage-light", lr=1e-2, momentum=0.9, dampening=0.0, nesterov=False,
                 weight_decay=0.0, decoupled=False, max_grad_norm=None, edq=False, seed=0, skip_nonfinite=False,
                 backend="auto", shards=None, all_reduce=None):
        super().__init__(params, precision, dict(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                                                 weight_decay=weight_decay, decoupled=decoupled),
                         max_grad_norm, edq, seed, skip_nonfinite, backend, shards, all_reduce)

    def _opt_settings(self, group):
        return {"name": "sgd", "momentum": float(group["momentum"]), "dampening": float(group["dampening"]),
                "nesterov": bool(group["nesterov"]), "decoupled": bool(group["decoupled"])}
