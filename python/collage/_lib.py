"""libcollage through ctypes: finding the shared library, the declarations of the public headers the
package calls (include/collage.h, collage_model.h, collage_run.h), and status codes turned into
exceptions. Array sizes that follow the library's tables (the roles of a strategy's words) are asked
of the library when it loads, so a strategy or a role added there needs no change here."""

import ctypes
import ctypes.util
import os
import pathlib
import shutil
import subprocess

__all__ = ["lib", "CollageError", "check", "library_path", "ROLE_COUNT"]


class CollageError(RuntimeError):
    """A libcollage call failed: .status is the collage_status code, .status_name its text."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


BUNDLED = pathlib.Path(__file__).resolve().parent / "libcollage.so"


def _candidates():
    """Where libcollage.so may be: $COLLAGE_LIB; else the package's own (collage/libcollage.so, which
    `pip install ./python` builds), and then nothing else: a package with its library inside loads that
    one or fails saying why, never another one found further on. Without one: the library the package
    was installed against ($COLLAGE_LIB at install time, collage/_libpath.py), the source tree's build/
    (this file is python/collage/_lib.py), pkg-config's libdir, the loader's path."""
    env = os.environ.get("COLLAGE_LIB")
    if env:
        yield env
        return
    if BUNDLED.exists():
        yield str(BUNDLED)
        return
    try:  # written by setup.py when the package was installed with $COLLAGE_LIB set
        from ._libpath import LIBRARY
        if LIBRARY:
            yield LIBRARY
    except ImportError:
        pass
    yield str(pathlib.Path(__file__).resolve().parents[2] / "build" / "libcollage.so")
    if shutil.which("pkg-config"):
        try:
            out = subprocess.run(["pkg-config", "--variable=libdir", "collage"], capture_output=True, text=True,
                                 timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                yield os.path.join(out.stdout.strip(), "libcollage.so")
        except (OSError, subprocess.SubprocessError):
            pass
    found = ctypes.util.find_library("collage")
    if found:
        yield found


# What the bundled library needs at run time besides the C library (its NEEDED entries, which
# tests/test_python.sh checks against this list), and Debian 12's packages that have them.
RUNTIME_NEEDS = {"libopenblas.so.0": "libopenblas0", "libdnnl.so.2": "libdnnl2", "libgomp.so.1": "libgomp1"}


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
            if path == str(BUNDLED):
                needs, debs = ", ".join(RUNTIME_NEEDS), " ".join(RUNTIME_NEEDS.values())
                raise ImportError(f"collage: cannot load the package's own libcollage.so: {e}. It needs {needs} "
                                  f"(Debian 12: apt-get install {debs}); or set COLLAGE_LIB to another build of "
                                  "the same version") from None
    raise ImportError("collage: cannot load libcollage.so; tried " + "; ".join(tried or ["nothing"]) +
                      ". Install the package with `pip install ./python` (it builds the library), or build it "
                      "with `make` in the collage repository, or `make install` it, or set COLLAGE_LIB to its path")


lib, library_path = _load()

c_size = ctypes.c_size_t
c_u64 = ctypes.c_uint64
c_u32 = ctypes.c_uint32
c_u16 = ctypes.c_uint16
c_int = ctypes.c_int
c_double = ctypes.c_double
c_float = ctypes.c_float
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_fn("collage_version", c_char_p)
_fn("collage_status_str", c_char_p, c_int)
_fn("collage_strategy_name", c_char_p, c_int)
_fn("collage_strategy_parse", c_int, c_char_p, ctypes.POINTER(c_int))
_fn("collage_strategy_parse_error", c_char_p)
_fn("collage_optimizer_check", c_int, c_int, c_int, c_char_p, ctypes.c_size_t)
_fn("collage_word_role_name", c_char_p, c_int)
_fn("collage_word_format_name", c_char_p, c_int)


def _count(name_of):
    """How many values an enum of the library has: its names stop at "unknown"."""
    n = 0
    while name_of(n) != b"unknown":
        n += 1
        if n > 1000:
            raise ImportError("collage: libcollage names more than 1000 values of an enum; is it libcollage?")
    return n


ROLE_COUNT = _count(lib.collage_word_role_name)
FORMAT_COUNT = _count(lib.collage_word_format_name)


class StateWord(ctypes.Structure):
    _fields_ = [("format", c_int), ("block", c_int), ("bytes", c_double), ("derived", c_int)]


class StrategyInfo(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("alias", c_char_p), ("arith", c_int), ("word", StateWord * ROLE_COUNT),
                ("keeps_update_in", c_char_p)]


class Memory(ctypes.Structure):
    _fields_ = [(k, c_double) for k in ("weights", "compensation", "m", "v", "master", "grad", "total")]


class ParamGroup(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("offset", c_size), ("count", c_size), ("weight_decay", c_double)]


class AdamWConfig(ctypes.Structure):
    _fields_ = [("strategy", c_int), ("n", c_size), ("beta1", c_double), ("beta2", c_double), ("eps", c_double),
                ("weight_decay", c_double), ("groups", ctypes.POINTER(ParamGroup)), ("n_groups", c_int),
                ("clip", c_double), ("skip_nonfinite", c_int), ("edq", c_int), ("seed", c_u64),
                ("params", c_void_p), ("index0", c_size), ("total", c_size), ("words", c_void_p * ROLE_COUNT),
                ("optimizer", c_int), ("momentum", c_double), ("dampening", c_double), ("nesterov", c_int),
                ("decoupled", c_int)]


class EDQ(ctypes.Structure):
    _fields_ = [("edq", c_double), ("edq_ratio", c_double), ("lost", c_double), ("edq_state", c_double),
                ("edq_state_ratio", c_double), ("update_norm", c_double), ("updates", c_u64),
                ("sum_dot", c_double), ("sum_dot_state", c_double), ("sum_nn", c_double), ("lost_count", c_u64)]


class StepStats(ctypes.Structure):
    _fields_ = [("step", c_u64), ("skipped", c_int), ("grad_norm", c_double), ("clip_coef", c_double),
                ("edq", EDQ), ("tie_free", c_int)]


class ModelConfig(ctypes.Structure):  # collage_model_config, field for field
    _fields_ = [("family", c_int), ("vocab_size", c_int), ("padded_vocab_size", c_int), ("max_seq_len", c_int),
                ("num_layers", c_int), ("num_heads", c_int), ("channels", c_int), ("num_kv_heads", c_int),
                ("hidden_dim", c_int), ("untied", c_int), ("norm_eps", c_double), ("rope_theta", c_double)]


class LpPair(ctypes.Structure):
    _fields_ = [("hi", c_u16), ("lo", c_u16)]


_P = ctypes.POINTER
_fn("collage_strategy_get", _P(StrategyInfo), c_int)
_fn("collage_strategy_memory", Memory, c_int)
_fn("collage_adamw_create", c_int, _P(AdamWConfig), _P(c_void_p))
_fn("collage_adamw_free", None, c_void_p)
_fn("collage_adamw_params", c_void_p, c_void_p)
_fn("collage_adamw_word", c_void_p, c_void_p, c_int)
_fn("collage_adamw_set_steps", c_int, c_void_p, c_u64, c_int)
_fn("collage_adamw_synced", c_int, c_void_p)
_fn("collage_adamw_steps", c_u64, c_void_p)
_fn("collage_adamw_set_edq", c_int, c_void_p, c_int)
_fn("collage_adamw_set_tie_proof", c_int, c_void_p, c_size)
_fn("collage_adamw_set_weights_f32", c_int, c_void_p, c_void_p, c_size)
_fn("collage_adamw_kept_f64", c_int, c_void_p, c_void_p, c_size)
_fn("collage_adamw_step", c_int, c_void_p, c_void_p, c_double, _P(StepStats))
_fn("collage_adamw_step_sumsq", c_int, c_void_p, c_void_p, c_double, c_double, _P(StepStats))
_fn("collage_adamw_step_many", c_int, _P(c_void_p), _P(c_void_p), _P(c_double), c_int, c_double, _P(StepStats))
_fn("collage_adamw_grad_sumsq", c_int, c_void_p, c_void_p, _P(c_double))
_fn("collage_adamw_group_edq", c_int, c_void_p, c_int, _P(EDQ))
_fn("collage_adamw_error", c_char_p, c_void_p)
_fn("collage_sumsq_chunks", c_int, c_void_p, c_int, c_size, c_size, c_void_p)
_fn("collage_sumsq_chunks_many", c_int, _P(c_void_p), _P(c_size), c_int, c_int, c_size, c_void_p)
_fn("collage_edq_combine", EDQ, _P(EDQ), c_int)
_fn("collage_rand32", c_u32, c_u64, c_u64)
_fn("collage_set_threads", None, c_int)
_fn("collage_get_threads", c_int)
_fn("collage_rand_key", c_u64, c_u64, c_u64)
_fn("collage_format_parse", c_int, c_char_p, _P(c_int))
_fn("collage_lp_from_f32_row_ref", c_int, c_int, c_void_p, c_void_p, c_size)
_fn("collage_lp_from_f32_sr_row_ref", c_int, c_int, c_void_p, c_void_p, c_size, c_u64, c_u64)
_fn("collage_lp_to_f32_row_ref", c_int, c_int, c_void_p, c_void_p, c_size)
_fn("collage_lp_from_f32", c_u16, c_int, c_float)
_fn("collage_lp_from_f32_sat", c_u16, c_int, c_float)
_fn("collage_lp_from_f32_sr", c_u16, c_int, c_float, c_u32)
_fn("collage_lp_from_f64", c_u16, c_int, c_double)
_fn("collage_lp_fma", c_u16, c_int, c_u16, c_u16, c_u16)
_fn("collage_lp_split", LpPair, c_int, c_double)
for _op in ("add", "sub", "mul", "div"):
    _fn(f"collage_lp_{_op}", c_u16, c_int, c_u16, c_u16)
_fn("collage_lp_sqrt", c_u16, c_int, c_u16)
for _op in ("two_sum", "fast_two_sum", "two_prod"):
    _fn(f"collage_lp_{_op}", LpPair, c_int, c_u16, c_u16)
_fn("collage_lp_grow", LpPair, c_int, LpPair, c_u16)
_fn("collage_lp_grow_addcmul", LpPair, c_int, LpPair, c_u16, c_u16, c_float)
_fn("collage_lp_mcf_mul", LpPair, c_int, LpPair, LpPair)
_fn("collage_lp_mcf_mul_v1", LpPair, c_int, LpPair, LpPair)
_fn("collage_model_read_header", c_int, c_char_p, _P(ModelConfig), _P(c_int), c_char_p, c_size)
_fn("collage_model_num_params", c_size, _P(ModelConfig))
_fn("collage_model_load_file", c_int, c_char_p, _P(ModelConfig), c_void_p, c_int, c_char_p, c_size)
_fn("collage_model_export_safetensors", c_int, c_char_p, _P(ModelConfig), c_void_p, c_int, c_char_p, c_size)
_fn("collage_checkpoint_model_path", None, c_char_p, c_char_p, c_size)

OK = 0
ERR_NONFINITE = 7


def status_name(st):
    return lib.collage_status_str(st).decode()


def check(st, what, detail=None):
    """Raise CollageError for a status other than COLLAGE_OK, naming what failed."""
    if st != OK:
        msg = f"{what}: {status_name(st)}"
        if detail:
            msg += f" ({detail})"
        raise CollageError(msg, st)


def _check_version():
    from . import __version__
    have = lib.collage_version().decode()
    if have.split(".")[:2] != __version__.split(".")[:2]:
        raise ImportError(f"collage: the package is {__version__} but {library_path} is libcollage {have}; "
                          "rebuild one of them from the same tree")


def _check_layout():
    """The table's bytes read through these declarations must add up to the library's own memory
    report: a mismatch means the declarations above no longer match the headers."""
    s = 0
    while lib.collage_strategy_get(s):
        row = lib.collage_strategy_get(s).contents
        words = sum(row.word[r].bytes for r in range(ROLE_COUNT))
        mem = lib.collage_strategy_memory(s)
        if abs(words + row.word[0].bytes - mem.total) > 1e-9:
            raise ImportError(f"collage: {library_path} does not match the package's declarations (strategy "
                              f"{row.name!r}: {words} + {row.word[0].bytes} bytes vs {mem.total}); reinstall "
                              "the package from the same tree as the library")
        s += 1
