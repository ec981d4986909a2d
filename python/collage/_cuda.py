"""libcollage_cuda through ctypes (include/collage_cuda.h): the AdamW step of every strategy on NVIDIA GPUs,
called with tensors' device pointers on PyTorch's current stream, so that no compiled extension is needed.

The library is optional: `make CUDA=1` builds it beside libcollage.so. It is looked for at
$COLLAGE_CUDA_LIB, then beside the libcollage.so the package loaded. `available()` says whether it loaded
and `missing()` why not."""

import ctypes
import os

from . import _lib

c_size, c_u64, c_int, c_double, c_void_p = ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int, ctypes.c_double, ctypes.c_void_p


class CudaTensor(ctypes.Structure):  # collage_cuda_tensor, field for field
    _fields_ = [("words", c_void_p * _lib.ROLE_COUNT), ("grad", c_void_p), ("n", c_size), ("index0", c_u64),
                ("step", c_u64), ("lr", c_double), ("weight_decay", c_double), ("beta1", c_double),
                ("beta2", c_double), ("eps", c_double)]


class CudaConfig(ctypes.Structure):  # collage_cuda_adamw_config
    _fields_ = [("strategy", c_int), ("clip", c_double), ("skip_nonfinite", c_int), ("edq", c_int), ("seed", c_u64),
                ("grad_scale", c_double), ("max_tensors", c_int), ("max_elements", c_size), ("device", c_int)]


_state = {"lib": None, "path": None, "why": None, "tried": False}


def _candidates():
    env = os.environ.get("COLLAGE_CUDA_LIB")
    if env:
        yield env
        return
    yield os.path.join(os.path.dirname(os.path.abspath(_lib.library_path)), "libcollage_cuda.so")


def _declare(lib):
    P = ctypes.POINTER
    for name, res, args in (
            ("collage_cuda_adamw_create", c_int, [P(CudaConfig), P(c_void_p)]),
            ("collage_cuda_adamw_free", None, [c_void_p]),
            ("collage_cuda_adamw_error", ctypes.c_char_p, [c_void_p]),
            ("collage_cuda_sumsq_chunk_count", c_size, [P(CudaTensor), c_int]),
            ("collage_cuda_sumsq_chunks", c_int, [c_void_p, P(CudaTensor), c_int, c_void_p, c_void_p]),
            ("collage_cuda_adamw_step", c_int, [c_void_p, P(CudaTensor), c_int, c_void_p, c_size, c_void_p]),
            ("collage_cuda_adamw_stats", c_int, [c_void_p, P(_lib.StepStats), P(_lib.EDQ)])):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def load():
    """The library, loaded once; None when it is not there (missing() says where it was looked for)."""
    if not _state["tried"]:
        _state["tried"] = True
        tried = []
        for path in _candidates():
            if not os.path.exists(path):
                tried.append(f"{path} (no such file)")
                continue
            try:
                _state["lib"], _state["path"] = _declare(ctypes.CDLL(path)), path
                break
            except (OSError, AttributeError) as e:
                tried.append(f"{path} ({e})")
        if _state["lib"] is None:
            _state["why"] = "; ".join(tried)
    return _state["lib"]


def available():
    return load() is not None


def missing():
    """Why the library is not loaded, or None."""
    load()
    return _state["why"]


class Step:
    """A libcollage_cuda optimizer (its device memory: the tensor table, Σg² chunks, EDQ sums) for one
    strategy, device and setting of clip / skip / EDQ / seed, big enough for max_tensors tensors of
    max_elements elements together."""

    def __init__(self, strategy_index, device_index, clip, skip_nonfinite, edq, seed, max_tensors, max_elements):
        lib = load()
        cfg = CudaConfig(strategy=strategy_index, clip=clip, skip_nonfinite=int(skip_nonfinite), edq=int(edq),
                         seed=seed, grad_scale=1.0, max_tensors=max_tensors, max_elements=max_elements,
                         device=device_index)
        h = c_void_p()
        st = lib.collage_cuda_adamw_create(ctypes.byref(cfg), ctypes.byref(h))
        self.handle, self._lib = h, lib
        self.key = (strategy_index, device_index, clip, bool(skip_nonfinite), bool(edq), seed)
        self.max_tensors, self.max_elements = max_tensors, max_elements
        if st != _lib.OK:
            why = lib.collage_cuda_adamw_error(h).decode(errors="replace") if h else ""
            self.close()
            _lib.check(st, "collage_cuda_adamw_create", why)

    def fits(self, key, k, elements):
        return key == self.key and k <= self.max_tensors and elements <= self.max_elements

    def launch(self, table, sumsq_ptr, stream):
        """One step of the tensors in `table` (a CudaTensor array) enqueued on stream, not waited for, with
        the Σg² given as one device double at sumsq_ptr, or, where sumsq_ptr is None, the Σg² of the
        table's own gradients (the library's chunk sums added in order on the device: no round trip
        through the host)."""
        lib = self._lib
        st = lib.collage_cuda_adamw_step(self.handle, table, len(table), sumsq_ptr, 0 if sumsq_ptr is None else 1,
                                         stream)
        _lib.check(st, "collage_cuda_adamw_step", lib.collage_cuda_adamw_error(self.handle).decode(errors="replace"))

    def step(self, table, sumsq_ptr, stream):
        """launch, then stats: the step's (skipped, grad_norm, clip_coef) and each tensor's EDQ sums."""
        self.launch(table, sumsq_ptr, stream)
        return self.stats(len(table))

    def stats(self, k):
        """After waiting for the last step (of k tensors): its (skipped, grad_norm, clip_coef) and each
        tensor's EDQ sums (dot, dot_state, nn, lost, updates)."""
        lib = self._lib
        stats, per = _lib.StepStats(), (_lib.EDQ * k)()
        st = lib.collage_cuda_adamw_stats(self.handle, ctypes.byref(stats), per)
        _lib.check(st, "collage_cuda_adamw_stats", lib.collage_cuda_adamw_error(self.handle).decode(errors="replace"))
        return ((bool(stats.skipped), stats.grad_norm, stats.clip_coef),
                [(e.sum_dot, e.sum_dot_state, e.sum_nn, e.lost_count, e.updates) for e in per])

    def sumsq_chunks(self, table, out_ptr, stream):
        st = self._lib.collage_cuda_sumsq_chunks(self.handle, table, len(table), out_ptr, stream)
        _lib.check(st, "collage_cuda_sumsq_chunks", self._lib.collage_cuda_adamw_error(self.handle).decode(errors="replace"))

    def close(self):
        if getattr(self, "handle", None):
            self._lib.collage_cuda_adamw_free(self.handle)
            self.handle = None

    def __del__(self):
        self.close()
