"""collage.numerics: libcollage's low-precision arithmetic over numpy arrays, for checking one's own
kernels against it: bf16, fp16, fp8 (e4m3, e5m2) and fp4 (e2m1) conversions, the single operations (evaluated in
fp32, rounded once: docs/numerics.md §3), fma, the error-free transforms and the MCF updates (§4-5),
and the counter-based random bits (§2).

Values travel as their bits in uint16 arrays (fp8 in the low byte, e2m1 in the low nibble, its NaN
marker 0x10 above the codes), as in the C API. Conversions to a
format go through the library's scalar reference rows (collage_lp_from_f32_row_ref, ...); the
operations are the same fp32 expressions in numpy (IEEE binary32, one operation at a time) rounded by
those rows, so every result is the C library's bit for bit (python/tests/test_numerics.py checks them
against the scalar C functions). Arguments broadcast as numpy does.

    import numpy as np, collage.numerics as cn
    hi, lo = cn.two_sum(cn.from_f32(np.float32(1/3)), cn.from_f32(np.float32(100)))
    cn.to_f32(hi), cn.to_f32(lo)          # 100.5, -0.166015625
"""

import ctypes

import numpy as np

from . import _lib

__all__ = ["FORMATS", "format_info", "to_f32", "from_f32", "from_f32_sr", "from_f64", "add", "sub", "mul", "div",
           "sqrt", "fma", "two_sum", "fast_two_sum", "two_prod", "grow", "grow_addcmul", "mcf_mul", "mcf_mul_v1",
           "split", "rand32", "rand_key"]

FORMATS = ("bf16", "fp16", "e4m3", "e5m2", "e2m1")


class _FormatInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("bits", ctypes.c_int), ("exp_bits", ctypes.c_int),
                ("man_bits", ctypes.c_int), ("bias", ctypes.c_int), ("has_inf", ctypes.c_int),
                ("max_bits", ctypes.c_uint16), ("nan_bits", ctypes.c_uint16), ("max_value", ctypes.c_float),
                ("has_nan", ctypes.c_int)]


_lib.lib.collage_format_get.restype = ctypes.POINTER(_FormatInfo)
_lib.lib.collage_format_get.argtypes = [ctypes.c_int]


def _fmt(name):
    idx = ctypes.c_int()
    if _lib.lib.collage_format_parse(str(name).encode(), ctypes.byref(idx)) != _lib.OK:
        raise ValueError(f"unknown format {name!r}; collage has {', '.join(FORMATS)}")
    return idx.value


def format_info(fmt="bf16"):
    """The format's figures (collage_format_info) as a dict."""
    i = _lib.lib.collage_format_get(_fmt(fmt)).contents
    return {k: (getattr(i, k).decode() if k == "name" else getattr(i, k)) for k, _ in _FormatInfo._fields_}


def _bits(x):
    return np.ascontiguousarray(x, dtype=np.uint16)


def to_f32(bits, fmt="bf16"):
    """The exact fp32 values of format bits."""
    b = _bits(bits)
    out = np.empty(b.shape, dtype=np.float32)
    _lib.check(_lib.lib.collage_lp_to_f32_row_ref(_fmt(fmt), out.ctypes.data, b.ctypes.data, b.size), "to_f32")
    return out


def from_f32(x, fmt="bf16", saturate=False):
    """RN of fp32 values to the format (ties to even; overflow to ±Inf, e4m3's NaN, e2m1's ±6; saturate: to ±max)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.uint16)
    f = _fmt(fmt)
    _lib.check(_lib.lib.collage_lp_from_f32_row_ref(f, out.ctypes.data, x.ctypes.data, x.size), "from_f32")
    if saturate:
        info = format_info(fmt)
        over = ~np.isfinite(to_f32(out, fmt)) & ~np.isnan(x)
        sign = np.where(np.signbit(x), 1 << (info["bits"] - 1), 0).astype(np.uint16)
        out = np.where(over, sign | np.uint16(info["max_bits"]), out).astype(np.uint16)
    return out


def from_f32_sr(x, key, index0=0, fmt="bf16"):
    """Stochastic rounding of fp32 values, element i with collage_rand32(key, index0 + i) (flat order)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.uint16)
    _lib.check(_lib.lib.collage_lp_from_f32_sr_row_ref(_fmt(fmt), out.ctypes.data, x.ctypes.data, x.size, key, index0),
               "from_f32_sr")
    return out


def from_f64(x, fmt="bf16"):
    """RN of doubles to the format with one rounding: rounded to odd at fp32 first (24 ≥ p + 2 bits, and
    fp32's exponent range covers every format's), which makes the RN that follows the correct one."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32)
        inexact = np.isfinite(x) & (r.astype(np.float64) != x)
        # truncate toward zero where RN went away from zero, then set the last bit: round to odd
        away = inexact & (np.abs(r.astype(np.float64)) > np.abs(x))
        r = np.where(away, np.nextafter(r, np.float32(0)), r).astype(np.float32)
        u = r.view(np.uint32) | np.where(inexact, 1, 0).astype(np.uint32)
    return from_f32(u.view(np.float32), fmt)


def _w(a, fmt):
    return to_f32(a, fmt)


def _quiet(fn):
    """Overflow and NaN are values here, not events: numpy's floating-point warnings off."""
    def wrapped(*args, **kw):
        with np.errstate(all="ignore"):
            return fn(*args, **kw)
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


@_quiet
def add(a, b, fmt="bf16"):
    return from_f32(_w(a, fmt) + _w(b, fmt), fmt)


@_quiet
def sub(a, b, fmt="bf16"):
    return from_f32(_w(a, fmt) - _w(b, fmt), fmt)


@_quiet
def mul(a, b, fmt="bf16"):
    return from_f32(_w(a, fmt) * _w(b, fmt), fmt)


@_quiet
def div(a, b, fmt="bf16"):
    return from_f32(_w(a, fmt) / _w(b, fmt), fmt)


@_quiet
def sqrt(a, fmt="bf16"):
    return from_f32(np.sqrt(_w(a, fmt)), fmt)


@_quiet
def fma(a, b, c, fmt="bf16"):
    """RN(a·b + c) with one rounding (numerics.md §3): a·b exact in double, TwoSum with c, the sum rounded
    to odd, then to the format. With NaN operands: the first NaN of (a, b, c), quieted."""
    a, b, c = np.broadcast_arrays(_bits(a), _bits(b), _bits(c))
    fa, fb, fc = (_w(v, fmt).astype(np.float64) for v in (a, b, c))
    with np.errstate(over="ignore", invalid="ignore"):
        p = fa * fb
        s = p + fc
        bb = s - p
        e = (p - (s - bb)) + (fc - bb)
        u = s.view(np.uint64).copy()
        odd = np.isfinite(s) & (s != 0) & (e != 0) & ((u & 1) == 0)
        step = np.where((s > 0) == (e > 0), 1, -1).astype(np.int64)
        u = np.where(odd, (u.astype(np.int64) + step).astype(np.uint64), u)
    out = from_f64(u.view(np.float64), fmt)
    for v, fv in ((c, fc), (b, fb), (a, fa)):  # the first NaN operand wins: a over b over c
        out = np.where(np.isnan(fv), from_f32(fv.astype(np.float32), fmt), out)
    return out.astype(np.uint16)


@_quiet
def fast_two_sum(a, b, fmt="bf16"):
    """(s, e) with s + e = a + b exactly; needs |a| ≥ |b| or a = 0."""
    s = add(a, b, fmt)
    return s, sub(b, sub(s, a, fmt), fmt)


@_quiet
def two_sum(a, b, fmt="bf16"):
    """(s, e) with s + e = a + b exactly (barring overflow); no precondition."""
    s = add(a, b, fmt)
    bv = sub(s, a, fmt)
    av = sub(s, bv, fmt)
    return s, add(sub(a, av, fmt), sub(b, bv, fmt), fmt)


@_quiet
def two_prod(a, b, fmt="bf16"):
    """(p, e): p = a ⊗ b, e = RN(fp32(a·b) − p)."""
    ab = _w(a, fmt) * _w(b, fmt)
    p = from_f32(ab, fmt)
    return p, from_f32(ab - _w(p, fmt), fmt)


@_quiet
def grow(hi, lo, d, fmt="bf16"):
    """Grow((hi, lo), d): Collage's weight update."""
    s = add(hi, d, fmt)
    r = add(lo, sub(d, sub(s, hi, fmt), fmt), fmt)
    m = add(s, r, fmt)
    return m, sub(r, sub(m, s, fmt), fmt)


@_quiet
def grow_addcmul(hi, lo, t1, t2, c, fmt="bf16"):
    """GrowAddcmul((hi, lo), t1, t2, c): adds c·t1·t2, c an fp32 scalar."""
    x = from_f32(np.float32(c) * (_w(t1, fmt) * _w(t2, fmt)), fmt)
    s = add(hi, x, fmt)
    x = add(x, sub(hi, s, fmt), fmt)
    x = add(x, lo, fmt)
    m = add(s, x, fmt)
    return m, sub(x, sub(m, s, fmt), fmt)


@_quiet
def mcf_mul(hi, lo, bh, bl, fmt="bf16"):
    """MultMC((hi, lo), (bh, bl)): the corrected product of an MCF by an MCF."""
    p, e = two_prod(hi, bh, fmt)
    r = mul(lo, bh, fmt)
    r = from_f32(_w(r, fmt) + _w(hi, fmt) * _w(bl, fmt), fmt)
    r = add(r, e, fmt)
    m = add(p, r, fmt)
    return m, sub(r, sub(m, p, fmt), fmt)


@_quiet
def mcf_mul_v1(hi, lo, bh, bl, fmt="bf16"):
    """The published, in-place MultMC (collage-plus-v1): only to reproduce the paper."""
    p = mul(hi, bh, fmt)
    pf = _w(p, fmt)
    e = from_f32(-pf + pf * _w(bh, fmt), fmt)
    r = mul(lo, bh, fmt)
    r = from_f32(_w(r, fmt) + pf * _w(bl, fmt), fmt)
    r = add(r, e, fmt)
    return add(p, r, fmt), r


def split(beta, fmt="bf16"):
    """(RN(β), RN(β − RN(β))) as format bits: the MCF constant of collage-plus's β2."""
    pair = _lib.lib.collage_lp_split(_fmt(fmt), float(beta))
    return np.uint16(pair.hi), np.uint16(pair.lo)


def _lowbias32(x):
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & np.uint64(0xFFFFFFFF)
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & np.uint64(0xFFFFFFFF)
    return x ^ (x >> np.uint64(16))


def rand_key(seed, stream):
    """collage_rand_key(seed, stream)."""
    return int(_lib.lib.collage_rand_key(seed, stream))


def rand32(key, index):
    """collage_rand32(key, index) for an array of indices (uint64), as uint32."""
    idx = np.ascontiguousarray(index, dtype=np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    with np.errstate(over="ignore"):
        k1 = _lowbias32((np.uint64(key) & m32) ^ _lowbias32(((idx >> np.uint64(32)) + np.uint64(0x9E3779B9)) & m32))
        k2 = np.uint64(((key >> 32) * 0x9E3779B9) & 0xFFFFFFFF)
        return _lowbias32((((idx & m32) ^ k1) + k2) & m32).astype(np.uint32)
