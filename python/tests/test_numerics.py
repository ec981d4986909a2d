"""collage.numerics against libcollage's scalar functions, bit for bit, in every format: conversions,
single operations, fma, the error-free transforms, the MCF updates, random bits; and the vectors of
docs/numerics.md §9. One latitude: where several NaNs meet in an operation, which payload survives is
the compiler's choice in C as in numpy (IEEE 754 leaves it open), so two NaNs count as equal there."""

import numpy as np
import pytest

import collage.numerics as cn
from collage import _lib

L = _lib.lib
N = 4000  # operand sets per format and operation (fp8 and fp4: conversions of all their values too)


def operands(fmt, k, seed):
    """k random bit patterns per operand, specials mixed in (±0, ±max, ±Inf/NaN, subnormals)."""
    bits = cn.format_info(fmt)["bits"]
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << bits, k, dtype=np.uint64).astype(np.uint16)
    special = np.array([0, 1, 2, cn.format_info(fmt)["max_bits"], cn.format_info(fmt)["nan_bits"],
                        1 << (bits - 1), (1 << (bits - 1)) | 1], dtype=np.uint16)
    x[rng.integers(0, k, 40)] = special[rng.integers(0, special.size, 40)]
    return x


def same(got, want, fmt):
    """Equal bits, or NaN on both sides."""
    got, want = np.asarray(got, dtype=np.uint16), np.asarray(want, dtype=np.uint16)
    both_nan = np.isnan(cn.to_f32(got, fmt)) & np.isnan(cn.to_f32(want, fmt))
    return got.shape == want.shape and bool(np.all((got == want) | both_nan))


def c_each(fn, *cols):
    return np.array([fn(*(int(c[i]) for c in cols)) for i in range(cols[0].size)], dtype=np.uint16)


@pytest.mark.parametrize("fmt", cn.FORMATS)
def test_conversions(fmt):
    f = cn.FORMATS.index(fmt)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 1 << 32, N, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[:6] = [np.inf, -np.inf, 0.0, -0.0, 464.0, 61440.0]
    assert np.array_equal(cn.from_f32(x, fmt), np.array([L.collage_lp_from_f32(f, float(v)) for v in x], dtype=np.uint16))
    assert np.array_equal(cn.from_f32(x, fmt, saturate=True),
                          np.array([L.collage_lp_from_f32_sat(f, float(v)) for v in x], dtype=np.uint16))
    d = rng.standard_normal(N) * np.exp2(rng.integers(-140, 130, N))
    d[:4] = [np.inf, np.nan, 1e300, 2.0 ** -1100]
    assert np.array_equal(cn.from_f64(d, fmt), np.array([L.collage_lp_from_f64(f, float(v)) for v in d], dtype=np.uint16))
    allbits = np.arange(1 << cn.format_info(fmt)["bits"], dtype=np.uint16) if fmt in ("e4m3", "e5m2", "e2m1") else \
        operands(fmt, N, 2)
    back = cn.to_f32(allbits, fmt)
    assert np.array_equal(back.view(np.uint32), np.array([np.float32(_to_f32(f, b)).view(np.uint32) for b in allbits]))


def _to_f32(f, b):
    out = np.empty(1, dtype=np.float32)
    v = np.array([b], dtype=np.uint16)
    L.collage_lp_to_f32_row_ref(f, out.ctypes.data, v.ctypes.data, 1)
    return out[0]


@pytest.mark.parametrize("fmt", cn.FORMATS)
def test_operations(fmt):
    f = cn.FORMATS.index(fmt)
    a, b, c = (operands(fmt, N, s) for s in (3, 4, 5))
    for name in ("add", "sub", "mul", "div"):
        cfn = getattr(L, f"collage_lp_{name}")
        assert same(getattr(cn, name)(a, b, fmt), c_each(lambda x, y: cfn(f, x, y), a, b), fmt), name
    assert same(cn.sqrt(a, fmt), c_each(lambda x: L.collage_lp_sqrt(f, x), a), fmt)
    assert same(cn.fma(a, b, c, fmt), c_each(lambda x, y, z: L.collage_lp_fma(f, x, y, z), a, b, c), fmt)
    for name in ("two_sum", "fast_two_sum", "two_prod"):
        cfn = getattr(L, f"collage_lp_{name}")
        hi, lo = getattr(cn, name)(a, b, fmt)
        pairs = [cfn(f, int(x), int(y)) for x, y in zip(a, b)]
        assert same(hi, [p.hi for p in pairs], fmt) and same(lo, [p.lo for p in pairs], fmt), name


@pytest.mark.parametrize("fmt", cn.FORMATS)
def test_mcf_updates(fmt):
    f = cn.FORMATS.index(fmt)
    hi, d, t1, t2 = (operands(fmt, N, s) for s in (6, 7, 8, 9))
    with np.errstate(invalid="ignore"):
        lo = cn.from_f32(cn.to_f32(hi, fmt) * np.float32(2.0 ** -10), fmt)
    P = _lib.LpPair
    m, r = cn.grow(hi, lo, d, fmt)
    want = [L.collage_lp_grow(f, P(int(x), int(y)), int(z)) for x, y, z in zip(hi, lo, d)]
    assert same(m, [w.hi for w in want], fmt) and same(r, [w.lo for w in want], fmt)
    m, r = cn.grow_addcmul(hi, lo, t1, t2, 0.001, fmt)
    want = [L.collage_lp_grow_addcmul(f, P(int(x), int(y)), int(u), int(v), 0.001) for x, y, u, v in zip(hi, lo, t1, t2)]
    assert same(m, [w.hi for w in want], fmt) and same(r, [w.lo for w in want], fmt)
    bh, bl = cn.split(0.95, fmt)
    for name in ("mcf_mul", "mcf_mul_v1"):
        m, r = getattr(cn, name)(hi, lo, bh, bl, fmt)
        cfn = getattr(L, f"collage_lp_{name}")
        want = [cfn(f, P(int(x), int(y)), P(int(bh), int(bl))) for x, y in zip(hi, lo)]
        assert same(m, [w.hi for w in want], fmt) and same(r, [w.lo for w in want], fmt), name


def test_random_bits_and_stochastic_rounding():
    key = cn.rand_key(1, 1)
    assert key == 0x41F9D639C82CABA3  # numerics.md §9
    idx = np.array([0, 1, 1 << 32, 12345, (1 << 33) + 7], dtype=np.uint64)
    assert cn.rand32(key, idx).tolist() == [L.collage_rand32(key, int(i)) for i in idx]
    assert cn.rand32(key, idx[:3]).tolist() == [0x02133561, 0xEB3E802E, 0x1BF69D17]
    x = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    for fmt in cn.FORMATS:
        f = cn.FORMATS.index(fmt)
        r = cn.rand32(key, np.arange(5, 1005, dtype=np.uint64))
        assert np.array_equal(cn.from_f32_sr(x, key, 5, fmt),
                              [L.collage_lp_from_f32_sr(f, float(v), int(q)) for v, q in zip(x, r)]), fmt


def test_vectors_of_the_numerics_page():
    b = lambda v: cn.from_f32(np.float32(v))  # noqa: E731
    assert int(b(200)) == 0x4348 and int(b(0.1)) == 0x3DCD
    assert int(cn.add(0x4348, 0x3DCD)) == 0x4348  # the update is lost
    hi, lo = cn.two_sum(b(1 / 3), b(100))
    assert cn.to_f32(hi) == 100.5 and cn.to_f32(lo) == np.float32(-0.166015625)
    assert cn.fast_two_sum(b(1 / 3), b(100))[1] == 0  # precondition broken: the error is lost
    m, r = np.uint16(0x4348), np.uint16(0)
    for _ in range(10):
        m, r = cn.grow(m, r, 0x3DCD)
    assert float(cn.to_f32(m)) + float(cn.to_f32(r)) == 201.0009765625
    assert [int(v) for v in cn.split(0.999)] == [0x3F80, 0xBA83]
    assert [int(v) for v in cn.mcf_mul(b(0.5), 0, *cn.split(0.95))] == [0x3EF3, 0x39CD]
    assert [int(v) for v in cn.mcf_mul_v1(b(0.5), 0, *cn.split(0.95))] == [0x3EE7, 0xBCC2]
    assert [int(v) for v in cn.from_f32(np.float32([464, 480]), "e4m3")] == [0x7E, 0x7F]
    assert int(cn.from_f32(np.float32(480), "e4m3", saturate=True)) == 0x7E
