"""The AdamW step of every precision strategy in torch operations, line by line as docs/numerics.md §6
writes it and src/optim/adamw_ref.c computes it: each bf16 line is one fp32 evaluation of the widened
operands and one rounding to bf16, each fp32 line one fp32 operation; scalars are fp32 tensors on the
parameter's device (a Python scalar would be rounded to bf16 first by PyTorch's CPU kernels, and a CPU
scalar divisor becomes a reciprocal product on CUDA). Every operation is its own kernel, so nothing is
contracted into a fused multiply-add. The roundings, the stochastic rounding's random bits
(collage_rand32) and the gradient's Σg² (16 lanes per block of 2^14, a fixed tree, blocks in order)
are reproduced exactly, so on CPU these lines give the C library's bits; tests/test_optimizer.py checks
it for every strategy.

Adding a strategy: its lines here (STRATEGY_LINES) beside its lines in adamw_ref.c."""

import math

import numpy as np
import torch

BLOCK = 1 << 14  # the optimizer's blocks (src/optim/adamw.c BLOCK): Σg² per block, blocks in order
M32 = 0xFFFFFFFF


# ---------------------------------------------------------------- rounding to bf16
def _rn_bits(x):
    """bf16 RN of fp32 x from its bits: (u + 0x7FFF + lsb) >> 16; NaN: (u >> 16) | 0x40 (numerics.md §2)."""
    u = x.contiguous().view(torch.int32)
    nan = torch.isnan(x)
    safe = torch.where(nan, torch.zeros_like(u), u)
    r = (safe + (0x7FFF + ((safe >> 16) & 1))) >> 16
    r = torch.where(nan, (u >> 16) | 0x40, r)
    return r.to(torch.int16).view(torch.bfloat16)


# fp32 bit patterns whose bf16 RN is easy to get wrong: ties either way, subnormals (a conversion that
# flushes them fails here), the overflow threshold, infinities, signed zeros.
_PROBE = [0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0x00008000, 0x00018000, 0x00000001, 0x00007FFF,
          0x80008001, 0x80018000, 0x007FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0xFF7F8000, 0x7F800000, 0xFF800000,
          0x00000000, 0x80000000, 0x3DCCCCCD, 0xC2C80001]
_native_ok = {}


def _native_is_exact(device):
    key = (device.type, device.index)
    if key not in _native_ok:
        bits = torch.tensor(np.array(_PROBE, dtype=np.uint32).view(np.int32), device=device)
        x = bits.view(torch.float32)
        _native_ok[key] = bool(torch.equal(x.to(torch.bfloat16).view(torch.int16), _rn_bits(x).view(torch.int16)))
    return _native_ok[key]


def rn(x):
    """bf16 RN of an fp32 tensor, ties to even, subnormals kept: PyTorch's own conversion where it gives
    those bits on this device (checked once on _PROBE), else the bit formula. A NaN stays a NaN (its
    payload bits are the device's)."""
    if _native_is_exact(x.device):
        return x.to(torch.bfloat16)
    return _rn_bits(x)


def f(t):
    """Widen bf16 to fp32 (exact)."""
    return t.float()


def _int16_of(v):
    """int64 values in [0, 2^16) to the int16 with those bits."""
    return torch.where(v >= 0x8000, v - 0x10000, v).to(torch.int16)


def _u32(x):
    """The bits of an fp32 tensor as int64 in [0, 2^32)."""
    return x.contiguous().view(torch.int32).to(torch.int64) & M32


def sr(x, r):
    """bf16 SR of fp32 x with 32-bit random words r (int64): (u + (r >> 16)) >> 16; NaN as RN; ±Inf kept."""
    u = _u32(x)
    mag = u & 0x7FFFFFFF
    out = (u + (r >> 16)) >> 16
    out = torch.where(mag == 0x7F800000, u >> 16, out)
    out = torch.where(mag > 0x7F800000, (u >> 16) | 0x40, out)
    return _int16_of(out & 0xFFFF).view(torch.bfloat16)


# ---------------------------------------------------------------- random bits (numerics.md §2)
def _mul32(x, c):
    """(x · c) mod 2^32 for x in [0, 2^32) (int64 tensor or int) and a constant c < 2^32, without
    overflowing int64: c in two 16-bit halves."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + ((x * hi) & 0xFFFF) * 65536) & M32


def _lowbias32(x):
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def rand_key(seed, stream):
    """collage_rand_key: splitmix64 of (seed, stream)."""
    m64 = (1 << 64) - 1
    z = (seed * 0x9E3779B97F4A7C15 + stream + 0x632BE59BD9B4E019) & m64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
    return z ^ (z >> 31)


def rand32(key, index0, n, device):
    """collage_rand32(key, index0 + i) for i < n, as int64 in [0, 2^32)."""
    idx = torch.arange(n, dtype=torch.int64, device=device) + index0
    k2 = ((key >> 32) * 0x9E3779B9) & M32
    if (index0 + n - 1) >> 32 == index0 >> 32:  # one high half: k1 is one number
        k1 = _lowbias32((key & M32) ^ _lowbias32(((index0 >> 32) + 0x9E3779B9) & M32))
    else:
        k1 = _lowbias32((key & M32) ^ _lowbias32(((idx >> 32) + 0x9E3779B9) & M32))
    return _lowbias32((((idx & M32) ^ k1) + k2) & M32)


# ---------------------------------------------------------------- Σg², as the C step sums it
def block_sumsq(grads):
    """Σ g² of each block of 2^14 elements of each tensor (flat, one device), in order, as Python floats:
    each square exact in double, element i of a block into lane i mod 16 in element order, the lanes
    added as the fixed tree l[j] += l[j + w] for w = 8, 4, 2, 1 (src/optim/adamw.c collage__sumsq_ref)."""
    if not grads:
        return []
    parts, longest = [], 0
    for g in grads:
        n = g.numel()
        nb = -(-n // BLOCK)
        longest = max(longest, n)
        pad = torch.zeros(nb * BLOCK, dtype=g.dtype, device=g.device)
        pad[:n] = g.reshape(-1)
        parts.append(pad.view(nb, BLOCK // 16, 16))
    x = torch.cat(parts) if len(parts) > 1 else parts[0]
    lanes = torch.zeros(x.shape[0], 16, dtype=torch.float64, device=x.device)
    for r in range(min(BLOCK // 16, -(-longest // 16))):  # rows past every tensor's end add zeros
        d = x[:, r, :].double()
        lanes += d * d
    for w in (8, 4, 2, 1):
        lanes[:, :w] += lanes[:, w:2 * w]
    return lanes[:, 0].cpu().tolist()


def add_in_order(values):
    """Σ values added one after the other from 0 (the C step adds its blocks' sums so)."""
    s = 0.0
    for v in values:
        s += v
    return s


# ---------------------------------------------------------------- the step's scalars
def f32(x):
    """RN of a Python float (double) to fp32, as C's (float) conversion."""
    return float(np.float32(x))


def split_beta(beta):
    """collage_mcf_split(β) in bf16: hi = RN(β), lo = RN(β − hi), each from double with one rounding
    (RN to 8 significant bits with ties to even: round() on the scaled significand); β in (0, 1)."""
    def rn8(x):
        if x == 0.0:
            return 0.0
        m, e = math.frexp(x)
        return math.ldexp(round(m * 256.0), e - 8)
    hi = rn8(beta)
    return hi, rn8(beta - hi)


class Scalars:
    """The step's scalars (numerics.md §6) as 0-dim fp32 tensors on one device, converted to fp32 once."""

    def __init__(self, device, t, lr, beta1, beta2, eps, coef, seed, opt=None):
        def T(v):
            return torch.tensor(f32(v), dtype=torch.float32, device=device)
        step_size = lr * math.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t)
        # Lion and SGD (numerics.md §14, opt: their settings): no bias correction; SGD's b1 is μ and its
        # omb1 1 − dampening
        self.opt = opt or {"name": "adamw"}
        if self.opt["name"] != "adamw":
            step_size = lr
        if self.opt["name"] == "sgd":
            beta1, beta2 = self.opt["momentum"], 0.5
        self.first = t == 1
        self.b1, self.omb1 = T(beta1), T(1.0 - beta1)
        if self.opt["name"] == "sgd":
            self.omb1 = T(1.0 - self.opt["dampening"])
        self.b2, self.omb2 = T(beta2), T(1.0 - beta2)
        self.eps, self.neg_step = T(eps), T(-step_size)
        # eco's feedback factor (numerics.md §6): (1/β1 − 1) / ns in double, β1 SGD's μ; Lion has none
        use = step_size != 0.0 and beta1 > 0.0 and self.opt["name"] != "lion"
        self.eco = T((1.0 / beta1 - 1.0) / -step_size if use else 0.0)
        self.coef, self.clip = T(coef), coef != 1.0
        hi, lo = split_beta(beta2)
        self.b2hi, self.b2lo = T(hi), T(lo)
        self.key = rand_key(seed, t)
        self._lr, self._device, self._lrwd = lr, device, {}

    def lrwd(self, wd):
        if wd not in self._lrwd:
            self._lrwd[wd] = torch.tensor(f32(self._lr * wd), dtype=torch.float32, device=self._device)
        self.wd = torch.tensor(f32(wd), dtype=torch.float32, device=self._device)  # SGD's L2 decay of this group
        return self._lrwd[wd]


# ---------------------------------------------------------------- error-free transforms and MCF (§4-5)
def grow(hi, lo, d):
    """Grow((hi, lo), d): s = hi ⊕ d; r = lo ⊕ (d ⊖ (s ⊖ hi)); hi' = s ⊕ r; lo' = r ⊖ (hi' ⊖ s)."""
    s = rn(f(hi) + f(d))
    r = rn(f(lo) + f(rn(f(d) - f(rn(f(s) - f(hi))))))
    m = rn(f(s) + f(r))
    return m, rn(f(r) - f(rn(f(m) - f(s))))


def sqrt32(x):
    """The fp32 square root, correctly rounded, as C's sqrtf. PyTorch 2's CPU sqrt (SLEEF's vectors) is
    off by an ulp for about 1 input in 160, in float64 too; float64's, within an ulp, rounds to the
    correct fp32 (an fp32's square root is at least 2^-51 relative from an fp32 midpoint). Other
    devices' sqrt is IEEE's."""
    if x.device.type != "cpu":
        return torch.sqrt(x)
    return torch.sqrt(x.double()).float()


def grow_addcmul(hi, lo, t1, t2, c):
    """GrowAddcmul((hi, lo), t1, t2, c): adds c·t1·t2 (c an fp32 scalar)."""
    x = rn(c * (f(t1) * f(t2)))
    s = rn(f(hi) + f(x))
    x = rn(f(x) + f(rn(f(hi) - f(s))))
    x = rn(f(x) + f(lo))
    m = rn(f(s) + f(x))
    return m, rn(f(x) - f(rn(f(m) - f(s))))


def mcf_mul(hi, lo, bh, bl):
    """MultMC((hi, lo), (bh, bl)), bh and bl fp32 scalars holding bf16 values."""
    ab = f(hi) * bh
    p = rn(ab)
    e = rn(ab - f(p))
    r = rn(f(lo) * bh)
    r = rn(f(r) + f(hi) * bl)
    r = rn(f(r) + f(e))
    m = rn(f(p) + f(r))
    return m, rn(f(r) - f(rn(f(m) - f(p))))


def mcf_mul_v1(hi, lo, bh, bl):
    """The published MultMC (collage-plus-v1): m multiplied in place, no renormalisation."""
    pf = f(rn(f(hi) * bh))
    e = rn((-pf) + pf * bh)
    r = rn(f(lo) * bh)
    r = rn(f(r) + pf * bl)
    r = rn(f(r) + f(e))
    return rn(pf + f(r)), r


# ---------------------------------------------------------------- AdamW's raw update (§6)
def lp_raw(th, g, st, k, lrwd, multmc):
    """The low-precision path: updates st["exp_avg"], st["exp_avg_sq"] (and st["exp_avg_sq_lo"] when
    multmc) in place and returns raw, a bf16 tensor (Lion's and SGD's lines where k.opt says so)."""
    if k.opt["name"] != "adamw":
        return _lion_sgd_lp(th, g, st, k, lrwd)
    if k.clip:
        g = rn(f(g) * k.coef)
    m = rn(f(st["exp_avg"]) * k.b1)
    m = rn(f(m) + k.omb1 * f(g))
    st["exp_avg"].copy_(m)
    if multmc is not None:
        vh, vl = multmc(st["exp_avg_sq"], st["exp_avg_sq_lo"], k.b2hi, k.b2lo)
        vh, vl = grow_addcmul(vh, vl, g, g, k.omb2)
        st["exp_avg_sq_lo"].copy_(vl)
    else:
        vh = rn(f(st["exp_avg_sq"]) * k.b2)
        vh = rn(f(vh) + k.omb2 * (f(g) * f(g)))
    st["exp_avg_sq"].copy_(vh)
    den = rn(f(rn(sqrt32(f(vh)))) + k.eps)
    a = rn(f(m) * k.neg_step)
    b = rn(f(a) / f(den))
    c = rn(f(th) * lrwd)
    return rn(f(b) - f(c))


def f32_raw(w, g, st, k, lrwd):
    """The fp32 path: m, v fp32, each operation rounded to fp32; w is the value the decay multiplies."""
    if k.opt["name"] != "adamw":
        return _lion_sgd_f32(w, g, st, k, lrwd)
    if k.clip:
        g = g * k.coef
    m = st["exp_avg"] * k.b1 + k.omb1 * g
    v = st["exp_avg_sq"] * k.b2 + k.omb2 * (g * g)
    st["exp_avg"].copy_(m)
    st["exp_avg_sq"].copy_(v)
    return (m * k.neg_step) / (sqrt32(v) + k.eps) - w * lrwd


# ---------------------------------------------------------------- Lion's and SGD's raw update (§14)
def _sign(c):
    """+1, −1, 0 for ±0, NaN for NaN (torch.sign gives 0 for NaN)."""
    one = torch.ones_like(c)
    return torch.where(c > 0, one, torch.where(c < 0, -one, torch.where(c == 0, torch.zeros_like(c), c)))


def _lion_sgd_lp(th, g, st, k, lrwd):
    """src/optim/adamw_elem.h ce_lion_lp and ce_sgd_lp: m in st["exp_avg"], raw a bf16 tensor."""
    if k.clip:
        g = rn(f(g) * k.coef)
    m = st["exp_avg"]
    if k.opt["name"] == "lion":
        c = rn(f(rn(f(m) * k.b1)) + k.omb1 * f(g))
        m.copy_(rn(f(rn(f(m) * k.b2)) + k.omb2 * f(g)))
        a = rn(k.neg_step * _sign(f(c)))
        return rn(f(a) - f(rn(f(th) * lrwd)))
    if not k.opt["decoupled"] and float(k.wd) != 0.0:
        g = rn(f(g) + f(rn(f(th) * k.wd)))
    d = g
    if float(k.b1) != 0.0:
        buf = g if k.first else rn(f(rn(f(m) * k.b1)) + k.omb1 * f(g))
        m.copy_(buf)
        d = rn(f(g) + f(rn(f(buf) * k.b1))) if k.opt["nesterov"] else buf
    u = rn(f(d) * k.neg_step)
    return rn(f(u) - f(rn(f(th) * lrwd))) if k.opt["decoupled"] else u


def _lion_sgd_f32(w, g, st, k, lrwd):
    """adamw_elem.h ce_lion_f32 and ce_sgd_f32: each operation rounded to fp32; w the value the decay multiplies."""
    if k.clip:
        g = g * k.coef
    m = st["exp_avg"]
    mf = m.float()
    if k.opt["name"] == "lion":
        c = mf * k.b1 + k.omb1 * g
        m.copy_(mf * k.b2 + k.omb2 * g)
        return k.neg_step * _sign(c) - w * lrwd
    if not k.opt["decoupled"] and float(k.wd) != 0.0:
        g = g + w * k.wd
    d = g
    if float(k.b1) != 0.0:
        buf = g.clone() if k.first else mf * k.b1 + k.omb1 * g
        m.copy_(buf)
        d = g + k.b1 * buf if k.opt["nesterov"] else buf
    u = k.neg_step * d
    return u - w * lrwd if k.opt["decoupled"] else u


# ---------------------------------------------------------------- applying raw, per strategy
# Each returns (d, de, ds) as float64 tensors for EDQ (numerics.md §7) when edq, else None: the
# intended update, the change of θ, the change of the kept value.
def _d(x):
    return x.double()


def apply_fp32(p, g, st, k, lrwd, edq, index0):
    old = p.clone() if edq else None
    raw = f32_raw(p, g, st, k, lrwd)
    p.copy_(p + raw)
    if edq:
        return _d(raw), _d(p) - _d(old), _d(p) - _d(old)


def apply_fp32_states(p, g, st, k, lrwd, edq, index0):
    old = p.clone()
    raw = f32_raw(f(old), f(g), st, k, lrwd)
    p.copy_(rn(f(old) + raw))
    if edq:
        de = _d(f(p)) - _d(f(old))
        return _d(raw), de, de


def apply_master(p, g, st, k, lrwd, edq, index0):
    old, mold = p.clone() if edq else None, st["master"].clone() if edq else None
    raw = f32_raw(st["master"], f(g), st, k, lrwd)
    st["master"].copy_(st["master"] + raw)
    p.copy_(rn(st["master"]))
    if edq:
        return _d(raw), _d(f(p)) - _d(f(old)), _d(st["master"]) - _d(mold)


def _apply_lp(new_theta):
    """A low-precision strategy whose θ alone is kept: θ' = new_theta(θ, raw, k, index0)."""
    def apply(p, g, st, k, lrwd, edq, index0, multmc=None):
        old = p.clone()
        raw = lp_raw(old, g, st, k, lrwd, multmc)
        p.copy_(new_theta(old, raw, k, index0))
        if edq:
            de = _d(f(p)) - _d(f(old))
            return _d(f(raw)), de, de
    return apply


apply_bf16 = _apply_lp(lambda th, raw, k, i0: rn(f(th) + f(raw)))
apply_sr = _apply_lp(lambda th, raw, k, i0: sr(f(th) + f(raw), rand32(k.key, i0, th.numel(), th.device).view(th.shape)))


def apply_eco(p, g, st, k, lrwd, edq, index0):
    """eco (numerics.md §6): θ' = SR(w), w = fp32(θ + raw), as bf16-sr; e = w − θ' into m:
    m = RN(m + fp32(fp32(e·den)·k_eco)), den the step's RN(RN(√v) + eps) (1 for SGD)."""
    old = p.clone()
    raw = lp_raw(old, g, st, k, lrwd, None)
    w = f(old) + f(raw)
    th = sr(w, rand32(k.key, index0, old.numel(), old.device).view(old.shape))
    e = w - f(th)
    den = rn(f(rn(sqrt32(f(st["exp_avg_sq"])))) + k.eps) if k.opt["name"] == "adamw" else None
    fed = e * f(den) if den is not None else e
    st["exp_avg"].copy_(rn(f(st["exp_avg"]) + fed * k.eco))
    p.copy_(th)
    if edq:
        de = _d(f(p)) - _d(f(old))
        return _d(f(raw)), de, de


def _apply_pair(word, update):
    """A strategy keeping θ + word: (θ', word') = update(θ, word, raw)."""
    def apply(p, g, st, k, lrwd, edq, index0, multmc=None):
        old, cold = p.clone(), st[word].clone()
        raw = lp_raw(old, g, st, k, lrwd, multmc)
        th, c = update(old, cold, raw)
        p.copy_(th)
        st[word].copy_(c)
        if edq:
            de = _d(f(th)) - _d(f(old))
            return _d(f(raw)), de, de + (_d(f(c)) - _d(f(cold)))
    return apply


def _kahan(th, c, raw):
    c = rn(f(c) + f(raw))
    t = rn(f(th) + f(c))
    return t, rn(f(c) + f(rn(f(th) - f(t))))


apply_grow = _apply_pair("compensation", grow)
apply_kahan = _apply_pair("kahan", _kahan)


def rem_join(th, rho):
    """bf16-remainder's master: bits (θ << 16) + sign_extend(ρ) mod 2^32, as fp32."""
    u = ((th.view(torch.int16).to(torch.int64) & 0xFFFF) * 65536 + rho.to(torch.int64)) & M32
    return torch.where(u >= 0x80000000, u - (1 << 32), u).to(torch.int32).view(torch.float32)


def rem_split(master):
    """θ = (bits + 0x8000) >> 16 (ties away from zero), ρ = bits − (θ << 16) mod 2^16."""
    u = _u32(master)
    th = ((u + 0x8000) >> 16) & 0xFFFF
    return _int16_of(th).view(torch.bfloat16), _int16_of((u - th * 65536) & 0xFFFF)


def apply_remainder(p, g, st, k, lrwd, edq, index0):
    old = p.clone()
    mold = rem_join(old, st["remainder"])
    raw = lp_raw(old, g, st, k, lrwd, None)
    mnew = mold + f(raw)
    th, rho = rem_split(mnew)
    p.copy_(th)
    st["remainder"].copy_(rho)
    if edq:
        return _d(f(raw)), _d(f(th)) - _d(f(old)), _d(mnew) - _d(mold)


def c8_join(th, e):
    """bf16-c8's kept value q: bits (θ << 16) + e·2^8 mod 2^32, as fp32 (src/numerics/c8.h c8_join)."""
    u = ((th.view(torch.int16).to(torch.int64) & 0xFFFF) * 65536 + e.to(torch.int64) * 256) & M32
    return torch.where(u >= 0x80000000, u - (1 << 32), u).to(torch.int32).view(torch.float32)


def c8_add(q, raw):
    """RN16(q + raw), rounded once (c8.h c8_add): s = q + raw and its TwoSum error t; s on an fp24
    midpoint (low byte 0x80) with t ≠ 0 steps one fp32 unit toward the exact sum; then the bits rounded
    to a multiple of 2^8, ties to even."""
    s = q + raw
    bb = s - q
    t = (q - (s - bb)) + (raw - bb)
    u = _u32(s)
    mid = (((u & 0xFF) == 0x80) & (t != 0)).to(torch.int64)
    u = (u + mid * (1 - 2 * (((_u32(t) ^ u) >> 31) & 1))) & M32  # +1 where t has s's sign, else −1
    return (u + 0x7F + ((u >> 8) & 1)) & 0xFFFFFF00  # the bits of q', as int64


def c8_split(qbits):
    """θ = (bits + 0x8000) >> 16 (the nearest bf16, ties away from zero), e = (bits − (θ << 16)) >> 8."""
    th = ((qbits + 0x8000) >> 16) & 0xFFFF
    e = ((qbits - th * 65536) >> 8) & 0xFF
    return _int16_of(th).view(torch.bfloat16), torch.where(e >= 0x80, e - 0x100, e).to(torch.int8)


def _f32_of_bits(u):
    return torch.where(u >= 0x80000000, u - (1 << 32), u).to(torch.int32).view(torch.float32)


def apply_c8(p, g, st, k, lrwd, edq, index0):
    old = p.clone()
    qold = c8_join(old, st["correction"])
    raw = lp_raw(old, g, st, k, lrwd, None)
    qbits = c8_add(qold, f(raw))
    th, e = c8_split(qbits)
    p.copy_(th)
    st["correction"].copy_(e)
    if edq:
        return _d(f(raw)), _d(f(th)) - _d(f(old)), _d(_f32_of_bits(qbits)) - _d(qold)


# The torch lines of each strategy, by the table's name: (apply, MultMC of its (v, δv) or None).
STRATEGY_LINES = {
    "fp32": (apply_fp32, None),
    "bf16": (apply_bf16, None),
    "collage-light": (apply_grow, None),
    "collage-plus": (apply_grow, mcf_mul),
    "bf16-fp32-states": (apply_fp32_states, None),
    "bf16-master": (apply_master, None),
    "bf16-kahan": (apply_kahan, None),
    "bf16-sr": (apply_sr, None),
    "bf16-remainder": (apply_remainder, None),
    "collage-plus-v1": (apply_grow, mcf_mul_v1),
    "bf16-c8": (apply_c8, None),
    "eco": (apply_eco, None),
}


def step_tensor(name, p, g, st, k, lrwd, edq, index0):
    """One strategy's step of one tensor (p: the weights, g: its gradient, st: its state words by key).
    Returns the EDQ sums (dot, dot_state, nn, lost, updates) when edq, else None."""
    apply, multmc = STRATEGY_LINES[name]
    out = apply(p, g, st, k, lrwd, edq, index0, multmc) if multmc is not None else apply(p, g, st, k, lrwd, edq, index0)
    if not edq:
        return None
    d, de, ds = out
    nz = d != 0
    zero = torch.zeros((), dtype=torch.float64, device=d.device)
    return (float(torch.where(nz, de * d, zero).sum()), float(torch.where(nz, ds * d, zero).sum()),
            float(torch.where(nz, d * d, zero).sum()), int((nz & (de == 0)).sum()), int(nz.sum()))


# ---------------------------------------------------------------- the kept value from fp32 weights
def kept_words(strategy, w):
    """collage_adamw_set_weights_f32 in torch: θ and the words besides θ that keep the fp32 value w
    (θ = RN(w) with δθ or c = RN(w − θ) and master = w; bf16-remainder's exact θ and ρ; bf16-c8's θ and e
    of w rounded to 16 bits, a NaN w with e = 0; fp32: w)."""
    words = {}
    if strategy.weights.format == "fp32":
        return w.clone(), words
    if strategy.has("remainder"):
        th, rho = rem_split(w)
        return th, {"remainder": rho}
    if strategy.has("e"):
        u = _u32(w)
        th, e = c8_split((u + 0x7F + ((u >> 8) & 1)) & 0xFFFFFF00)
        nan = torch.isnan(w)
        return torch.where(nan, rn(w), th), {"correction": torch.where(nan, torch.zeros_like(e), e)}
    th = rn(w)
    for word in strategy.state_words:
        if word.role_name in ("δθ", "c"):
            words[word.key] = rn(w - f(th))
        elif word.role_name == "master":
            words[word.key] = w.clone()
    return th, words
