"""collage: exact pure-16-bit training (Collage, Yu et al. 2024) for Python, over libcollage.

- ``collage.torch.AdamW``: a ``torch.optim.Optimizer`` with every precision strategy of the library
  (``collage.strategies()``), bit for bit the C library's step on CPU and the same operations in torch
  on any other device; ``collage.torch.to_collage`` and ``collage.torch.load``.
- ``collage.numerics``: bf16/fp16/fp8 conversions and the MCF operations over numpy arrays.
- ``collage.export``: a collage checkpoint as model.safetensors + config.json (Hugging Face's layout).

Importing ``collage`` loads libcollage.so: ``$COLLAGE_LIB``, else the package's own (``pip install
./python`` builds it), else the one it was installed against, the source tree's build/ or an installed one
found by pkg-config; ``collage.torch`` also needs torch.
"""

import ctypes
import os
from dataclasses import dataclass

__version__ = "0.1.0"   # include/collage.h's COLLAGE_VERSION_STRING (setup.py and test_library check)

from . import _lib  # noqa: E402
from ._lib import CollageError  # noqa: E402

_lib._check_version()
_lib._check_layout()

__all__ = ["Strategy", "Word", "strategies", "strategy", "export", "CollageError", "library_path", "__version__"]

library_path = _lib.library_path

# ASCII keys of the state dict for the roles the library names (collage_word_role_name); a role
# added to the library and missing here is keyed by its own name.
_ROLE_KEYS = {"θ": "weights", "m": "exp_avg", "v": "exp_avg_sq", "δθ": "compensation", "c": "kahan",
              "remainder": "remainder", "δv": "exp_avg_sq_lo", "master": "master", "e": "correction"}


@dataclass(frozen=True)
class Word:
    """One word a strategy stores per parameter: its role ("θ", "m", "v", "δθ", ...), the key it has in
    the optimizer's state, its format ("fp32", "bf16", "int16", ...), bytes per parameter, and whether
    the step only writes it (derived from the other words)."""
    role: int
    role_name: str
    key: str
    format: str
    bytes: float
    derived: bool
    block: int = 0             # 8-bit words: elements per fp32 scale (COLLAGE_QBLOCK); 0 for the others


@dataclass(frozen=True)
class Strategy:
    """A row of libcollage's strategy table (collage_strategy_info)."""
    index: int
    name: str
    alias: str
    arith: str                 # the format AdamW's lines round to: "fp32", "bf16" or "fp16"
    words: tuple               # Word, in role order (θ first)
    keeps_update_in: str       # where an update too small for θ is kept; None: it is lost
    bytes_per_param: float     # every word plus the gradient

    @property
    def weights(self):
        return self.words[0]

    @property
    def state_words(self):
        """The words besides θ: what the optimizer keeps in its state."""
        return self.words[1:]

    def has(self, role_name):
        return any(w.role_name == role_name for w in self.words)


def _strategy_of(index):
    row = _lib.lib.collage_strategy_get(index)
    if not row:
        raise ValueError(f"no strategy {index}")
    row = row.contents
    words = []
    for r in range(_lib.ROLE_COUNT):
        w = row.word[r]
        if w.format == 0:
            continue
        name = _lib.lib.collage_word_role_name(r).decode()
        words.append(Word(r, name, _ROLE_KEYS.get(name, name), _lib.lib.collage_word_format_name(w.format).decode(),
                          w.bytes, bool(w.derived), w.block))
    mem = _lib.lib.collage_strategy_memory(index)
    return Strategy(index, row.name.decode(), row.alias.decode() if row.alias else None,
                    _lib.lib.collage_word_format_name(row.arith).decode(), tuple(words),
                    row.keeps_update_in.decode() if row.keeps_update_in else None, mem.total)


def strategies():
    """Every strategy of the library's table, in table order."""
    out, s = [], 0
    while _lib.lib.collage_strategy_get(s):
        out.append(_strategy_of(s))
        s += 1
    return out


def strategy(name):
    """The strategy named `name`: a preset, its alias (e.g. "light") or a composition
    "PRESET+m=F,v=F[,q=sr]"; a Strategy passes through. A ValueError says what is wrong with the name
    (the library's reason, as `collage train --precision` gives it) and lists the presets."""
    if isinstance(name, Strategy):
        return name
    if not isinstance(name, str):
        raise TypeError(f"precision must be a strategy's name (a str), not {type(name).__name__}")
    idx = ctypes.c_int()
    if _lib.lib.collage_strategy_parse(name.encode(), ctypes.byref(idx)) != _lib.OK:
        why = _lib.lib.collage_strategy_parse_error().decode(errors="replace")
        raise ValueError(f"precision {name!r}: {why}; the presets are " + ", ".join(s.name for s in strategies()) +
                         ", and a composition is PRESET+m=F,v=F[,q=sr] such as collage-light+m=int8,v=int8")
    return _strategy_of(idx.value)


def _model_path(checkpoint):
    """The model file of a checkpoint argument: a run folder's newest checkpoint's, a folder's model.bin,
    or the file itself (collage_checkpoint_model_path; the readers check it against its manifest)."""
    buf = ctypes.create_string_buffer(4096)
    _lib.lib.collage_checkpoint_model_path(os.fsencode(checkpoint), buf, len(buf))
    return buf.value


def export(checkpoint, out_dir, dtype=None):
    """`collage export --checkpoint CHECKPOINT --out OUT_DIR [--dtype D]`: writes OUT_DIR/model.safetensors
    and OUT_DIR/config.json in the Hugging Face layout of the checkpoint's family. checkpoint: a model
    file (llm.c format) or a folder written by `collage train --save`; dtype: "bf16", "fp32" or None
    (the checkpoint's own). A model file of a checkpoint is checked against the size and checksum its
    train.state records first (collage_model_read_header). Raises CollageError naming the file and the
    problem; out_dir is then left as it was."""
    if dtype not in (None, "bf16", "fp32"):
        raise ValueError(f"dtype must be 'bf16', 'fp32' or None, not {dtype!r}")
    path = _model_path(checkpoint)
    cfg, file_bf16, err = _lib.ModelConfig(), ctypes.c_int(), ctypes.create_string_buffer(1024)
    st = _lib.lib.collage_model_read_header(path, ctypes.byref(cfg), ctypes.byref(file_bf16), err, len(err))
    if st != _lib.OK:
        raise CollageError(err.value.decode(errors="replace"), st)
    bf16 = file_bf16.value if dtype is None else int(dtype == "bf16")
    n = _lib.lib.collage_model_num_params(ctypes.byref(cfg))
    buf = (ctypes.c_uint8 * (n * (2 if bf16 else 4)))()
    st = _lib.lib.collage_model_load_file(path, ctypes.byref(cfg), buf, bf16, err, len(err))
    if st == _lib.OK:
        os.makedirs(out_dir, exist_ok=True)
        st = _lib.lib.collage_model_export_safetensors(str(out_dir).encode(), ctypes.byref(cfg), buf, bf16, err,
                                                       len(err))
    if st != _lib.OK:
        raise CollageError(err.value.decode(errors="replace"), st)
