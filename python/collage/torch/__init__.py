"""collage for PyTorch: AdamW with libcollage's precision strategies, the cast of a float model to bf16
that keeps its rounding errors, and collage checkpoints as state dicts.

    import collage.torch
    model = collage.torch.to_collage(model, "collage-light")      # bf16 weights, δθ seeded
    opt = collage.torch.AdamW(model.named_parameters(), precision="collage-light", lr=3e-4,
                              weight_decay=0.1, max_grad_norm=1.0, edq=True)
    ...; loss.backward(); opt.step(); opt.zero_grad(); print(opt.last_stats["edq"]["lost"])
"""

import json
import os
import tempfile

import torch

from .. import export as _export
from .. import strategy as _strategy
from . import _lines
from . import _optim
from ._optim import SGD, AdamW, Lion

__all__ = ["AdamW", "Lion", "SGD", "to_collage", "load", "read_safetensors"]


def to_collage(model, precision="collage-light"):
    """Cast model's floating parameters and buffers to the strategy's weights (bf16; fp32 for "fp32"),
    in place, and leave on each parameter the words that keep its float value, which the first step of
    a collage.torch.AdamW of the same precision takes over: δθ = RN(w − θ) (or Kahan's c), so that
    θ + δθ holds w to 16 significant bits (exactly where w has no more: any bf16 or fp16 value, any
    float whose low 8 bits are zero); the fp32 master (bf16-master) and the remainder (bf16-remainder)
    hold w exactly; strategies that keep θ alone keep RN(w). Float64 weights are rounded to fp32 first.
    A parameter cast before for the same precision keeps what it holds (a second call changes nothing);
    one cast for another precision, or on the meta device, is refused by name before anything is cast.
    Returns the model."""
    s = _strategy(precision)
    _optim._supported_or_raise(s)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[s.weights.format]
    params = [(name, p) for name, p in model.named_parameters() if p.is_floating_point()]
    for name, p in params:
        _check_castable(name, p, s)
    with torch.no_grad():
        for name, p in params:
            if getattr(p, "_collage_seed", None) is None:
                th, words = _lines.kept_words(s, p.detach().float().contiguous())
                p.data = th.to(dtype)
                p._collage_seed = (s.name, words)
        for mod in model.modules():
            for name, b in list(mod._buffers.items()):
                if b is not None and b.is_floating_point():
                    mod._buffers[name] = b.to(dtype)
    return model


def _check_castable(name, p, s):
    if p.device.type == "meta":
        raise ValueError(f"parameter '{name}' is on the meta device, which holds no values to cast: materialise the "
                         "model first (model.to_empty(device='cpu') and load its weights)")
    seed = getattr(p, "_collage_seed", None)
    if seed is not None and seed[0] != s.name:
        raise ValueError(f"parameter '{name}' was cast by to_collage for '{seed[0]}' already: casting it for '{s.name}' "
                         "would drop the rounding error that cast kept; cast the float model once")


_ST_DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}


def read_safetensors(path):
    """A safetensors file as {name: tensor} (CPU, in the file's dtypes), and its __metadata__."""
    with open(path, "rb") as fh:
        data = fh.read()
    if len(data) < 8:
        raise ValueError(f"'{path}' is too short to be a safetensors file")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise ValueError(f"'{path}': its header length {n} runs past the end of the file ({len(data)} bytes)")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    body = bytearray(data[8 + n:])
    out = {}
    for name, e in header.items():
        if e["dtype"] not in _ST_DTYPES:
            raise ValueError(f"'{path}': tensor '{name}' has dtype {e['dtype']}, which this reader does not know")
        a, b = e["data_offsets"]
        dt = _ST_DTYPES[e["dtype"]]
        count = 1
        for d in e["shape"]:
            count *= d
        if not 0 <= a <= b <= len(body) or b - a != count * torch.empty((), dtype=dt).element_size():
            raise ValueError(f"'{path}': tensor '{name}' has byte range [{a}, {b}) for shape {e['shape']} "
                             f"{e['dtype']} in a data section of {len(body)} bytes")
        t = torch.frombuffer(body, dtype=dt, count=count, offset=a) if count else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"])
    return out, meta


def load(path):
    """A state dict of torch tensors: path is a folder written by `collage export` (its
    model.safetensors), a safetensors file, or a collage checkpoint (a model file or a folder written by
    `collage train --save`), which is exported on the way. Names and layouts are the Hugging Face class's
    (GPT-2: GPT2LMHeadModel)."""
    path = os.fspath(path)
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "model.safetensors")):
        return read_safetensors(os.path.join(path, "model.safetensors"))[0]
    if os.path.isfile(path) and path.endswith(".safetensors"):
        return read_safetensors(path)[0]
    with tempfile.TemporaryDirectory(prefix="collage-load-") as tmp:
        _export(path, tmp)
        sd = read_safetensors(os.path.join(tmp, "model.safetensors"))[0]
        return {k: v.clone() for k, v in sd.items()}
