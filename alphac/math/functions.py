"""The contract's functions, each written once in the staging language (alphac.math.dsl).

Exact operations (IEEE 754-2019 semantics, docs/language.md):
    fmax(a, b), fmin(a, b)   NaN if either is NaN; max(-0, +0) = +0, min(-0, +0) = -0
    fabs(a)                  the sign bit cleared
    relu(a)                  a if a > 0, NaN if a is NaN, else +0
Correctly rounded (the binary64 nearest the exact value, ties to even), for every binary64:
    exp, log, log1p, expm1, tanh, sin, cos
    pow(x, y): the same strategy on log and exp (docs/math.md "pow" says how far its
    accurate path's 2^-167 is a proof and how far evidence), exact and midpoint cases snapped

Each correctly rounded function is Ziv's strategy in two steps. Special values and ranges
where the result is known exactly are decided first. Then a fast path computes the value as a
double-double (alphac.math.dd) with a proven error bound, and the rounding test returns its
rounding where the bound decides it. Where it does not (about one input in 2^10 to 2^20), the
accurate path evaluates in 192-bit fixed point (alphac.math.mp) with a relative error below
2^-125 (each function's bound is derived at its definition) and rounds once (`to_double`).
The hardest-to-round cases known for these functions need about 2^-(53+66) relative
accuracy at most (Lefevre and Muller's searches, CORE-MATH's worst-case lists), so the
rounding of the 192-bit value is the correct rounding of the exact value. tests/test_math.py
checks every such case, every special value and random inputs against MPFR, the fast paths'
bounds against measured errors, and that a fast path without its rounding test is caught.

Requires: a backend (alphac.math.dsl). Guarantees: the same bits under every backend.
"""
from __future__ import annotations

import struct

from alphac.math import mp
from alphac.math.dd import (fast_two_sum, rounded, split, square, two_prod, two_prod_split,
                            two_sum)
from alphac.math.dsl import Table
from alphac.math.tables import exp_tables, fast_tables, log_tables, trig_tables

SIGN = 1 << 63
ABS = SIGN - 1
INF = 0x7FF0000000000000
MANT = (1 << 52) - 1
IMPLICIT = 1 << 52


def _tables() -> dict[str, Table]:
    out = {}
    for group in (exp_tables(), log_tables(), fast_tables(), trig_tables()):
        for name, values in group.items():
            out[name] = Table(name.lower(), tuple(values))
    return out


LOG_POLY = (1 / 3, -1 / 4, 1 / 5, -1 / 6, 1 / 7, -1 / 8, 1 / 9)
LOG_ERR = 2.0 ** -72 + 2.0 ** -91              # 2^-72 + 2^-101 |log x|, |log x| < 745 < 2^9.6
TABLES = _tables()
LN2_HL, EXP_C = (tuple(struct.unpack("<d", struct.pack("<Q", w))[0] for w in TABLES[name].words)
                  for name in ("LN2_HL", "EXP_C"))      # read as pool constants, not table words


def limbs(m, table: str, k) -> tuple:
    """Entry k of a table of 192-bit numbers (three words each); k an int or a value."""
    t = TABLES[table]
    if isinstance(k, int):
        return tuple(m.load(t, 3 * k + i) for i in range(3))
    base = k * 3
    return tuple(m.load(t, base + i) for i in range(3))


def const192(m, table: str) -> tuple:
    return limbs(m, table, 0)


# -- exact operations ------------------------------------------------------------------------
def is_nan(m, a):
    return m.i(INF).ult(a.bits() & ABS)


def fmax(m, a, b):
    ab, bb = a.bits(), b.bits()
    nan = is_nan(m, a) | is_nan(m, b)
    return m.cond(nan, lambda: (a + b,), lambda: m.cond(
        a.fgt(b), lambda: (a,), lambda: m.cond(
            b.fgt(a), lambda: (b,), lambda: (m.float_(ab & bb),))))[0]


def fmin(m, a, b):
    ab, bb = a.bits(), b.bits()
    nan = is_nan(m, a) | is_nan(m, b)
    return m.cond(nan, lambda: (a + b,), lambda: m.cond(
        b.fgt(a), lambda: (a,), lambda: m.cond(
            a.fgt(b), lambda: (b,), lambda: (m.float_(ab | bb),))))[0]


def fabs(m, a):
    return m.float_(a.bits() & ABS)


def relu(m, a):
    return m.cond(a.fgt(m.f(0.0)), lambda: (a,), lambda: m.cond(
        is_nan(m, a), lambda: (a + a,), lambda: (m.f(0.0),)))[0]


# -- rounding a 192-bit value -----------------------------------------------------------------
def to_double(m, sign, a: tuple, s):
    """The binary64 nearest (ties to even) to N * 2^s, N the nonzero 192-bit number `a` and s
    a signed integer value, with the sign bit `sign` (0 or 1 << 63): subnormal results and
    overflow to infinity included."""
    lz = mp.clz(m, a)
    b = mp.shl(m, a, lz)                              # the top bit at 2^191
    e = s + 191 - lz                                  # the unbiased exponent of the value

    def normal():
        mant = b[0] >> 11                             # 53 bits, the implicit one at 2^52
        rb = (b[0] >> 10) & 1
        sticky = m.i(0).ult((b[0] & 0x3FF) | b[1] | b[2])
        mant = mant + (rb & (sticky | (mant & 1)))   # ties to even; 2^53 carries into e
        bits = ((e + 1022) << 52) + mant
        big = m.i(0x7FEFFFFFFFFFFFFF).ult(bits) | m.i(1023).slt(e)
        return m.cond(big, lambda: (m.i(INF),), lambda: (bits,))

    def subnormal():
        # in units of 2^-1074 the value is b * 2^(s - lz + 1074); shift right by sh >= 140
        sh = lz - s - 1074
        x, sticky = mp.shr(m, b, sh - 1)
        mant = x[2] >> 1
        rb = x[2] & 1
        rest = sticky | m.i(0).ult(x[0] | x[1])
        return (mant + (rb & (rest | (mant & 1))),)
    bits = m.cond(e.slt(-1022), subnormal, normal)[0]
    return m.float_(bits | sign)


# -- the fast paths ------------------------------------------------------------------------------
# Error bounds are relative to the value unless marked absolute; each `rounded` call passes at
# least twice the bound derived here (alphac.math.dd states the test's requirements).
EXP_POLY = (1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040)
FAST_EXP_MAX = 0x4086200000000000        # 708: e^x stays normal, 2^(k >> 8) too
TWO = {n: 2.0 ** n for n in (-64, -65, -67, -68, -72, -75, -76, -98, -101)}


def outlined(m, name, rest, xb):
    """rest(m, x) for x = xb's binary64 (a function's special values and accurate path), which
    RtSource writes once as the subroutine `rt_math_<name>`: the fast path's own function then
    saves no registers and spills nothing around it."""
    return m.float_(m.outline(name, lambda sub, b: (rest(sub, sub.float_(b)).bits(),), (xb,), 1)[0])


def _horner(m, t, coefs):
    acc = m.f(coefs[-1])
    for c in reversed(coefs[:-1]):
        acc = m.f(c) + t * acc
    return acc


def _exp_reduce(m, x, xl=None):
    """(k, p_h, p_l): x = k ln2/256 + r, e^r - 1 = p_h + p_l, for 2^-54 <= |x| <= 708.

    k = round(x 256/ln2) (to within one), so |r| <= 0.51 ln2/256 < 2^-9.47 and |k| < 2^18.
    ln2/256 = C1 + C2 + C3 (C1, C2 of 35 bits: k C1 and k C2 are exact). x - k C1 is exact:
    for |k| >= 2 the two are within a factor 2 of each other (Sterbenz); for |k| = 1 they are,
    or x lies in the binade below C1's and the difference, a multiple of ulp(x) smaller than
    x, is representable. Then (r_h, r_l) = r with an absolute error below 2^-110, exact for k = 0.
    p = r + r^2/2 + r^3 q(r), q(r) = 1/6 + r/24 + ... + r^4/5040 by Horner in binary64 at r_h:
    truncation r^8/8! < 2^-81.6 |r|; q's rounding (about 6 roundings, 2^-50.4 relative) times
    |r^3 q| <= 2^-21.5 |r|, r_h for r in q, and the four additions of the low part (partial
    sums below 2^-30) give |p_h + p_l - (e^r - 1)| < 2^-71 |e^r - 1| for k = 0 and below 2^-79
    absolute for any k. With xl (|xl| <= 2^-43, pow's double-double argument x + xl) added to
    r's low part, its rounding adds 2^-96 absolute."""
    t = x * m.f(INV_LN2_256) + m.f(MAGIC)
    k = t.bits() - m.f(MAGIC).bits()
    kf = t - m.f(MAGIC)
    c = EXP_C
    r1 = x - kf * m.f(c[0])
    rh, rl = two_sum(r1, -(kf * m.f(c[1])))
    rh, rl = fast_two_sum(rh, (rl if xl is None else rl + xl) - kf * m.f(c[2]))
    sh, sl = square(rh)
    q = (sh * rh) * _horner(m, rh, EXP_POLY)
    a, b = fast_two_sum(rh, sh * m.f(0.5))
    lo = (b + (rl + (sl * m.f(0.5) + rh * rl))) + q
    ph, pl = fast_two_sum(a, lo)
    return k, ph, pl


def _exp_scaled(m, k, ph, pl):
    """(v_h, v_l) = 2^(j/256) (1 + p), j = k & 255: error below 2^-79 + 2^-100 (table, products,
    and the four roundings of the low part), under 2^-78.9 relative; v in [1, 2.003)."""
    at = (k & 255) * 3
    th, tl, thh = (m.loadf(TABLES["EXP_T"], at + i) for i in range(3))
    uh, ul = two_prod_split(th, thh, th - thh, ph, *split(ph))
    vh, vl = fast_two_sum(th, uh)
    return vh, vl + (ul + (th * pl + tl * (m.f(1.0) + ph)))


def _pow2(m, e):
    return m.float_((e + 1023) << 52)


def _exp_lean(m, x):
    """(k, v_h, l): e^x = 2^(k >> 8) (v_h + l) within 2^-69.1 relative, for 2^-54 <= |x| <
    708; shorter than _exp_reduce and _exp_scaled (which pow and expm1 near 0 need at 2^-79):
    about 50 binary64 operations.

    k, kf, r1 and x = k ln2/256 + r as in _exp_reduce; (r_h, r_l) = two_sum(r1, -k C2), then
    r_l - k C3 without renormalizing: |r_h| < 2^-9.47, |r_l| < 2^-60.2, r = r_h + r_l within
    2^-111. e^r - 1 = r_h + w, w = r_h^2/2 + r_h^3 P(r_h) + r_l (1 + r_h) up to r_l r_h^2/2 <
    2^-80.1; P = 1/6 + ... + r^3/720 truncates below 2^-78.6. Computed: s = fl(r_h^2) (2^-71.94
    absolute, 2^-72.94 in s/2); the r^3 term (P by Estrin's scheme, (1/6 + r/24) + s (1/120 +
    r/720): a chain of four operations) to 2^-50.7 relative of 2^-30.99 (2^-81.7); w's last
    addition 2^-72.93; so w within 2^-71.9, |w| < 2^-19.93. With T = t_h + t_l = 2^(j/256)
    (j = k & 255, 2^-104 of T): T (1 + r_h + w) = t_h + t_h r_h + (t_h w + t_l (1 + r_h)) up to
    t_l w < 2^-72.93; t_h r_h = u_h + u_l by Dekker's product (t_h's split from the table),
    t_h + u_h = v_h + v_t exactly (fast_two_sum), and the low part l = (v_t + (u_l + t_l (1 +
    r_h))) + t_h w (t_h w, the latest, added last) with four roundings below 2^-71.9 each
    (partial sums below 2^-18.9): in all under 6.5 2^-71.9 = 2^-69.2 absolute, on a
    value above 0.997: 2^-69.1 relative. The low part reaches 2^-18.9 |v_h|, above the 2^-40
    alphac.math.dd asks for, but what its proof uses holds: 2^-53 (|l| + err) < err/2 for
    err >= v_h 2^-68.1 (twice the bound, v_h > 0.997)."""
    t = x * m.f(INV_LN2_256) + m.f(MAGIC)
    k = t.bits() - m.i(0x4338000000000000)                 # MAGIC's bits
    kf = t - m.f(MAGIC)
    c = EXP_C
    r1 = x - kf * m.f(c[0])
    u = kf * m.f(c[1])
    rh = r1 - u                                         # two_sum(r1, -u), its negation folded
    bb = rh - r1
    rl = ((r1 - (rh - bb)) - (u + bb)) - kf * m.f(c[2])
    s = rh * rh
    c0, c1, c2, c3 = (m.f(p) for p in EXP_POLY[:4])
    q = (s * rh) * ((c0 + rh * c1) + s * (c2 + rh * c3))
    w = s * m.f(0.5) + (q + (rl + rh * rl))
    at = (k & 255) * 3
    th, tl, thh = (m.loadf(TABLES["EXP_T"], at + i) for i in range(3))
    uh, ul = two_prod_split(th, thh, th - thh, rh, *split(rh))
    vh, vt = fast_two_sum(th, uh)
    return k, vh, (vt + (ul + tl * (m.f(1.0) + rh))) + th * w


def _exp_fast(m, x):
    """exp's fast path: _exp_lean's value, the rounding test at err = v_h 2^-67 (twice the
    bound and more; about one input in 2^14 goes on to the accurate path)."""
    k, vh, lo = _exp_lean(m, x)
    ok, v = rounded(m, vh, lo, vh * m.f(TWO[-67]))
    return ok, v * _pow2(m, k.sar(8))                   # exact: the result is normal


def _expm1_lean(m, x):
    """(h, l, err) for e^x - 1, 1/4 <= |x| < 708 (k != 0): Y = 2^E v from _exp_lean (2^-69.1 Y
    absolute; 2^E exact on v_h, Y > e^-40), minus one by two_sum; the low part b_l + y_l (y_l up
    to 2^-18.9 Y) rounds within 2^-71.9 Y + 2^-106 |Y - 1|: below 2^-68.9 Y + 2^-106 |Y - 1| in
    all, and err = 2^-67 (Y + |Y - 1|) is at least twice it. Relative to |Y - 1| (at least
    0.22 Y for |x| >= 1/4) err is below 2^-64.5, so about one input in 2^11.5 near |x| = 1/4
    fails the test, one in 2^13 beyond 1. The low part reaches 2^-18.9 Y (dd's proof holds, as
    in exp's)."""
    k, vh, lo = _exp_lean(m, x)
    scale = _pow2(m, k.sar(8))                          # yh exact; yl within 2^-1074
    yh, yl = vh * scale, lo * scale
    ah, bl = two_sum(yh, m.f(-1.0))
    return ah, bl + yl, (yh + _fabs(m, ah)) * m.f(TWO[-67])


def _expm1_dd(m, x, ax):
    """expm1's double-double (h, l, err) for the fast path's range: _expm1_lean from |x| >= 1/4
    on, _expm1_fast (2^-79, for the cancellation near 0) below."""
    return m.cond(m.i(0x3FCFFFFFFFFFFFFF).ult(ax), lambda: _expm1_lean(m, x),
                  lambda: _expm1_fast(m, x))


def _expm1_fast(m, x):
    """(h, l, err) for e^x - 1, -40 <= x <= 708, |x| >= 2^-54: for k = 0, p itself (2^-71);
    otherwise Y = 2^E v (absolute error 2^-78.9 Y) minus one by two_sum, the low part's
    rounding below 2^-104 (|Y - 1| + Y): err = 2^-75 (Y + |Y - 1|)."""
    k, ph, pl = _exp_reduce(m, x)

    def far():
        vh, vl = _exp_scaled(m, k, ph, pl)
        scale = _pow2(m, k.sar(8))
        yh, yl = vh * scale, vl * scale
        ah, bl = two_sum(yh, m.f(-1.0))
        return ah, bl + yl, (yh + _fabs(m, ah)) * m.f(TWO[-75])
    return m.cond(k.eq(0), lambda: (ph, pl, _fabs(m, ph) * m.f(TWO[-68])), far)


def _fabs(m, a):
    return m.float_(a.bits() & ABS)


def _log1p_poly(m, th, tl):
    """log1p(t) as a double-double, t = t_h + t_l exactly, |t| < 2^-8: t - t^2/2 + t^3 q(t),
    t^2 = u^2 + v, u t_h's first 26 bits (u^2 exact), v = fl((t_h - u) fl(t_h + u)) (t_h - u
    exact; two roundings: within 2^-77 t_h^2); q = 1/3 - t/4 + ... + t^6/9 at t_h, by Estrin's
    scheme (pairs c_k + c_(k+1) t, then t^2 and t^4 = (t^2)^2: a chain of five operations where
    Horner's has fourteen). Truncation t^10/10 < 2^-75.3 |t|; q's rounding (the coefficients'
    and nine operations': below 2^-50.7 relative, every term after 1/3 being below 2^-9.6 of
    it) and the two products (2^-50.3 in all) times |t^3 q| <= 2^-17.6 |t|; t_h for t in q
    (2^-69 |t|); the low part's four roundings (partial sums below 2^-17 |t|, 2^-68 |t|):
    below 2^-66.5 |t|, so below 2^-66 |log1p(t)|."""
    u = m.float_(th.bits() & -(1 << 27))                   # t_h's first 26 bits: u^2 exact
    v = (th - u) * (th + u)                                 # t_h^2 - u^2 within 2^-77 t_h^2
    sh = th * th
    c0, c1, c2, c3, c4, c5, c6 = (m.f(k) for k in LOG_POLY)
    q = (c0 + th * c1 + sh * (c2 + th * c3)) + (sh * sh) * ((c4 + th * c5) + sh * c6)
    c = (sh * th) * q
    a, b = fast_two_sum(th, (u * u) * m.f(-0.5))
    return fast_two_sum(a, (b + (tl - (v * m.f(0.5) + th * tl))) + c)




def _log_dd(m, xb, extra):
    """(h, l, err): log(x) = h + l within err/2 (err at least twice the bound), for x = xb's
    positive normal binary64, plus `extra` (None, or a binary64 below 2^-52 |log x| added to
    the low part). pow reads it (log and log1p take _log_lean, with three steps fewer).

    x = 2^e c, c in [1, 2); j = c's first 8 fraction bits, r_j = I_j / 2^16: c r_j - 1 = t,
    |t| < 2^-8, exactly t_h + t_l (c = c_h + c_l, c_h its first 26 bits, c_h r_j, c_l r_j exact,
    c_h r_j - 1 exact by Sterbenz); e as a binary64 is 2^52 + x's exponent field (bits 0x433
    and the field) minus 2^52 + 1023, exactly. log x = e ln2 + log(1/r_j) + log1p(t).
    h_1 = e H + LOG_L[j]'s high word is exact (both multiples of 2^-42, H of 42 bits, and
    |h_1| < 2^10). Where e = 0, j = 0 or e = -1, j = 255
    (x in [1 - 2^-9, 1 + 2^-8)) the first two cancel exactly (LOG_L[255] is LN2_HL itself:
    their sum h_1 is 0 there and nowhere else, tests/test_math.py checks the table) and the
    result is log1p(t) (relative 2^-66). Elsewhere |log x| > 2^-9 and the absolute error is
    below 2^-74 (log1p) + 2^-84.8 (e L, e < 2^11) + 2^-96 (tables) + 2^-103 |log x| (sums):
    err is the constant LOG_ERR, at least 2^-72 + 2^-101 |log x|."""
    th, tl, ef, at = _log_reduce(m, xb)
    ph, pl = _log1p_poly(m, th, tl)
    h1 = ef * m.f(LN2_HL[0]) + m.loadf(TABLES["LOG_L"], at)
    s1, s2 = two_sum(h1, ph)
    low = m.loadf(TABLES["LOG_L"], at + 1) + ef * m.f(LN2_HL[1])
    lo = s2 + (pl + (low if extra is None else low + extra))
    err = m.cond(h1.bits().eq(0), lambda: (_fabs(m, s1) * m.f(2.0 ** -65),),
                 lambda: (m.f(LOG_ERR),))[0]
    return s1, lo, err


def _log_parts(m, xb):
    """(c, c_h, r_j, e, 2j) of _log_dd's reduction (its docstring), which _log_lean shares."""
    j = (xb >> 44) & 255
    cb = (xb & MANT) | 0x3FF0000000000000
    ch = m.float_(cb & -(1 << 27))                          # c's first 26 bits: c_h r_j exact
    ef = m.float_((xb >> 52) | 0x4330000000000000) - m.f(2.0 ** 52 + 1023)   # e, exactly
    return m.float_(cb), ch, m.loadf(TABLES["LOG_R"], j), ef, j * 2


def _log_reduce(m, xb):
    """(t_h, t_l, e, 2j) of _log_dd's reduction (its docstring)."""
    c, ch, r, ef, at = _log_parts(m, xb)
    th, tl = two_sum(ch * r - m.f(1.0), (c - ch) * r)
    return th, tl, ef, at


def _log1p_lean(m, th, tl):
    """(a, rest): log1p(t) = a + rest within 2^-65.8 |t|, t = t_h + t_l exactly, |t| < 2^-8:
    _log1p_poly's terms with q stopped at t^5/8 and no final renormalization (_log_lean)."""
    u = m.float_(th.bits() & -(1 << 27))                   # t_h's first 26 bits: u^2 exact
    v = (th - u) * (th + u)                                 # t_h^2 - u^2 within 2^-77 t_h^2
    sh = th * th
    c0, c1, c2, c3, c4, c5 = (m.f(k) for k in LOG_POLY[:6])
    q = (c0 + th * c1 + sh * (c2 + th * c3)) + (sh * sh) * (c4 + th * c5)
    a, b = fast_two_sum(th, (u * u) * m.f(-0.5))
    return a, (b + (tl - (v * m.f(0.5) + th * tl))) + (sh * th) * q


def _log_lean(m, xb, extra=None):
    """log's own fast path (the scalar and its lanes; pow keeps _log_dd), and log1p's with
    `extra` as in _log_dd (its one_plus: |log x| > 2^-9 there, so err = LOG_ERR): _log_dd's
    table and reduction with a shorter dependent chain. (1) t = c r_j - 1 = a + b exactly,
    a = fl(c r_j) - 1 (Sterbenz), b = (c_h r_j - fl(c r_j)) + c_l r_j (each step exact: c_l
    r_j has 44 bits, the sum 15), |b| <= 2^-53, and b = 0 where r_j is 1 or 1/2 (x near 1):
    log1p(t) = log1p(a) + b (1 - a + a^2) within 2^-77 (no two-sum waits on t). (2) a^2 = u^2
    + v, u = a rounded to a multiple of 2^-34 by adding and subtracting 1.5 2^18 (26 bits, no
    trip through the integer registers; in the lanes, where bits cost nothing, a's first 26
    bits by a mask), v = (a - u) fl(a + u) within 2^-94 (2^-85 |a|). (3) q stops at
    t^5/8 (degree 8), at a: log1p(a) within 2^-66.5 |a| + 2^-67.2 |a| (truncation t^9/9) <
    2^-65.8 |a|. (4) s = h_1 + a, then s_1 = s - u^2/2, by Dekker's fast sums: exact where
    h_1 = 0, and elsewhere |h_1| exceeds every |a| of its interval (tests/test_math.py checks
    each (e, j) with e in {0, -1}; |e| >= 1 otherwise gives |h_1| > 0.69), and |s| > 2^-9.1
    exceeds u^2/2. The low part's partial sums reach 2^-25.4: three roundings of 2^-78.4. Near
    1 (h_1 = 0: b = e_1 = low = 0) the bound is 2^-65.8 |t| < 2^-65.7 |log x|, and err = |s_1|
    2^-64 covers it; elsewhere (|log x| > 2^-9) 2^-73.8 + 2^-77 + 2^-79 (q at a, not t) + 3
    2^-78.4 + 2^-84.8 + 2^-96 + 2^-103 |log x| < 2^-73.4 + 2^-103 |log x|, within LOG_ERR / 2.
    The low part reaches 2^-16.4 |h| (|h| > 2^-9; 2^-17.6 |h| near 1), above
    alphac.math.dd's 2^-40, but what its proof uses holds: 2^-53 (|l| + err) < err/2."""
    c, ch, r, ef, at = _log_parts(m, xb)
    h1 = ef * m.f(LN2_HL[0]) + m.loadf(TABLES["LOG_L"], at)
    low = m.loadf(TABLES["LOG_L"], at + 1) + ef * m.f(LN2_HL[1])
    low = low if extra is None else low + extra
    p = c * r
    a = p - m.f(1.0)
    b = (ch * r - p) + (c - ch) * r
    u = m.float_(a.bits() & -(1 << 27)) if m.free_bits else (   # a's first 26 bits, or
        (p + m.f(1.5 * 2.0 ** 18)) - m.f(1.5 * 2.0 ** 18 + 1.0))  # a on 2^-34's grid
    sh = a * a
    rest = (b + b * (sh - a)) - ((a - u) * (a + u)) * m.f(0.5)
    s, e1 = fast_two_sum(h1, a)
    s1, s2 = fast_two_sum(s, (u * u) * m.f(-0.5))
    rest = rest + (e1 + low)
    c0, c1, c2, c3, c4, c5 = (m.f(k) for k in LOG_POLY[:6])
    q = (c0 + a * c1 + sh * (c2 + a * c3)) + (sh * sh) * (c4 + a * c5)
    err = m.cond(h1.bits().eq(0), lambda: (_fabs(m, s1) * m.f(TWO[-64]),),
                 lambda: (m.f(LOG_ERR),))[0]
    return rounded(m, s1, (rest + s2) + (sh * a) * q, err)


# -- exp ------------------------------------------------------------------------------------------
INV_LN2_256 = 369.3299304675746          # 256 / ln 2, rounded: k only has to be near
MAGIC = 6755399441055744.0               # 1.5 * 2^52: x + MAGIC rounds x to an integer


def _abs_k(m, k):
    neg = k.slt(0)
    return m.cond(neg, lambda: (m.i(0) - k,), lambda: (k,))[0], neg


def exp_core(m, x):
    """e^x as (Q, s): e^x = Q * 2^s (1 + eps), Q a 192-bit number with Q * 2^-192 in
    [1/4, 1/2), |eps| < 2^-184; for a finite x with 2^-54 <= |x| < 746.

    x = k ln2/256 + r with 0 <= r < ln2/256: r exact up to 2 * 2^-176 (X holds x exactly at
    2^-176, k ln2/256 is floored from a 200-bit constant); e^r / 2 by Horner over 17 terms
    (truncation < 2^-191, 16 products of error < 4 * 2^-192 and 17 floored constants:
    < 2^-184 in all); times 2^(j/256) / 2 from the table (floored, and one product)."""
    xb = x.bits()
    negative = m.i(0).ult(xb & SIGN)
    e = (xb >> 52) & 0x7FF
    mant = (xb & MANT) | IMPLICIT
    X = mp.shl(m, (m.i(0), m.i(0), mant), e - 899)           # |x| * 2^176, exact
    X = m.cond(negative, lambda: mp.neg(m, X), lambda: X)
    return _exp_fixed(m, X, x)


def _exp_fixed(m, X, x):
    """exp_core of X 2^-176, X a signed (two's complement) 192-bit number with |X| < 2^186, x a
    binary64 within 2^-40 of it (k only has to be near); the same bound, plus X's own error."""
    t = x * m.f(INV_LN2_256) + m.f(MAGIC)
    k = t.bits() - m.f(MAGIC).bits()                         # round(x * 256/ln2)
    ak, kneg = _abs_k(m, k)
    p4 = mp.scale_small(m, const192(m, "LN2_256"), ak)       # |k| * ln2/256 * 2^200
    kc = ((p4[0] << 40) | (p4[1] >> 24), (p4[1] << 40) | (p4[2] >> 24), (p4[2] << 40) | (p4[3] >> 24))
    kc = m.cond(kneg, lambda: mp.neg(m, kc), lambda: kc)
    r, _ = mp.sub(m, X, kc)
    c = mp.shr_const(m, const192(m, "LN2_256"), 24)          # ln2/256 * 2^176
    low = m.i(0).ult(r[0] & SIGN)                            # r < 0: one step down
    *r, k = m.cond(low, lambda: mp.add(m, r, c)[0] + (k - 1,), lambda: r + (k,))
    high = mp.lt(m, tuple(r), c) ^ 1                         # r >= ln2/256: one step up
    *r, k = m.cond(high, lambda: mp.sub(m, tuple(r), c)[0] + (k + 1,), lambda: tuple(r) + (k,))
    r = tuple(r)
    R = mp.shl_const(m, r, 16)                               # r as a fraction (r < 2^-8)
    p = limbs(m, "EXP_COEF", 16)
    for n in range(15, -1, -1):
        p, _ = mp.add(m, mp.mul(m, p, R), limbs(m, "EXP_COEF", n))
    q = mp.mul(m, limbs(m, "EXP2", k & 255), p)              # e^r 2^(j/256) / 4
    return q, k.sar(8) + 2 - 192


def _exp_rest(m, x):
    xb = x.bits()
    ax = xb & ABS

    def finite():
        return m.cond(m.i(0x4087500000000000).ult(ax), lambda: m.cond(      # |x| > 746
            m.i(0).ult(xb & SIGN), lambda: (m.f(0.0),), lambda: (m.f(float("inf")),)),
            lambda: m.cond(ax.ult(0x3C90000000000000), lambda: (m.f(1.0),),  # |x| < 2^-54
                           lambda: (to_double(m, m.i(0), *exp_core(m, x)),)))
    special = m.i(INF - 1).ult(ax)                                          # inf or NaN
    return m.cond(special, lambda: m.cond(ax.eq(INF), lambda: m.cond(
        m.i(0).ult(xb & SIGN), lambda: (m.f(0.0),), lambda: (x,)), lambda: (x + x,)),
        finite)[0]


def exp(m, x):
    xb = x.bits()
    return m.first((xb & ABS).ult(FAST_EXP_MAX), lambda: _exp_fast(m, x),
                      lambda: outlined(m, "exp_rest", _exp_rest, xb))


# -- log, log1p ---------------------------------------------------------------------------------
NAN = 0x7FF8000000000000                 # the NaN the functions make (x86 would make 0xfff8...)


def log_core(m, e, Y, fine=False):
    """log(y) for y = (Y / 2^191) * 2^e, Y a 192-bit number with its top bit at 2^191, y != 1,
    as (sign, N, s): log(y) = (-1)^sign N 2^s (1 + eps), |eps| < 2^-135.

    y's mantissa m is reduced by the table: j = its 8 bits after the leading one, I_j ~ 2^16/c_j
    (I_0 = 2^16, I_255 = 2^15), so m I_j / 2^16 = 1 + t exactly with |t| < 2^-8;
    log(y) = e ln2 + log(2^16/I_j) + log1p(t), log1p(t) = 2 t A(t) with
    A(t) = sum_{n=1..24} (-t)^(n-1) / (2n) by Horner (truncation < 2^-200).
    In the two exact cancellations (e = 0, j = 0 and e = -1, j = 255) log(y) is log1p(t)
    alone, and t is normalized before the last product so that a tiny t keeps its relative
    accuracy (A's absolute error below 2^-185, the product's 2^-190: relative < 2^-184; log1p of
    a tiny x needs it: its hardest cases, x - x^2/2 near a midpoint, need 2^-141). Elsewhere the
    three terms are summed in signed fixed point at 2^-180 (error < 4 * 2^-180) and
    |log y| >= 2^-9 (relative error < 2^-169)."""
    j = (Y[0] >> 55) & 255
    inv = m.load(TABLES["LOG_INV"], j)
    P = mp.scale_small(m, Y, inv)                           # m I_j / 2^16 = P / 2^207
    t_nonneg = m.i(0).ult(P[0] >> 15)                       # P >= 2^207: t >= 0
    T = ((P[0] << 49) | (P[1] >> 15), (P[1] << 49) | (P[2] >> 15), (P[2] << 49) | (P[3] >> 15))
    T = m.cond(t_nonneg, lambda: T, lambda: mp.neg(m, T))  # |t| as a fraction

    def series(op):
        a = limbs(m, "LOG_COEF", 23)
        for n in range(22, -1, -1):
            a, _ = op(m, limbs(m, "LOG_COEF", n), mp.mul(m, T, a))
        return a
    A = m.cond(t_nonneg, lambda: series(mp.sub), lambda: series(mp.add))
    L1 = mp.mul(m, T, A)                                    # |log1p(t)| / 2, as a fraction
    tsign = m.cond(t_nonneg, lambda: (m.i(0),), lambda: (m.i(SIGN),))[0]
    alone = (e.eq(0) & j.eq(0)) | (e.eq(-1) & j.eq(255))

    def summed():
        ae, eneg = _abs_k(m, e)
        E4 = mp.scale_small(m, const192(m, "LN2"), ae)      # |e| ln2 2^192, four limbs
        E = ((E4[0] << 52) | (E4[1] >> 12), (E4[1] << 52) | (E4[2] >> 12), (E4[2] << 52) | (E4[3] >> 12))
        E = m.cond(eneg, lambda: mp.neg(m, E), lambda: E)
        L = mp.shr_const(m, limbs(m, "LOG_TAB", j), 12)
        P1 = mp.shr_const(m, L1, 11)                        # 2 |t| A at 2^-180
        P1 = m.cond(t_nonneg, lambda: P1, lambda: mp.neg(m, P1))
        S, _ = mp.add(m, mp.add(m, E, L)[0], P1)
        neg = m.i(0).ult(S[0] & SIGN)
        mag = m.cond(neg, lambda: mp.neg(m, S), lambda: S)
        return (m.cond(neg, lambda: (m.i(SIGN),), lambda: (m.i(0),))[0],) + mag + (m.i(-180),)
    def by_itself():                                        # log1p(t): T normalized first
        lz = mp.clz(m, T)
        return (tsign,) + mp.mul(m, mp.shl(m, T, lz), A) + (m.i(-191) - lz,)

    def summed_fine():                                      # e = 0 or -1: |log y| < 1, so the
        E = m.cond(e.eq(0), lambda: mp.zero(m),             # sum fits at 2^-191 (< 6 units)
                   lambda: mp.neg(m, mp.shr_const(m, const192(m, "LN2"), 1)))
        P1 = m.cond(t_nonneg, lambda: L1, lambda: mp.neg(m, L1))
        S, _ = mp.add(m, mp.add(m, E, mp.shr_const(m, limbs(m, "LOG_TAB", j), 1))[0], P1)
        neg = m.i(0).ult(S[0] & SIGN)
        mag = m.cond(neg, lambda: mp.neg(m, S), lambda: S)
        return (m.cond(neg, lambda: (m.i(SIGN),), lambda: (m.i(0),))[0],) + mag + (m.i(-191),)
    if fine:                                                # pow's: 2^-188 absolute near 1
        out = m.cond(alone, by_itself, lambda: m.cond(e.eq(0) | e.eq(-1), summed_fine, summed))
    else:
        out = m.cond(alone, by_itself, summed)
    return out[0], out[1:4], out[4]


def _decompose(m, xb):
    """(e, Y) of a positive finite nonzero double: x = (Y / 2^191) 2^e, Y's top bit at 2^191."""
    field = (xb >> 52) & 0x7FF
    mant = xb & MANT

    def subnormal():
        lz = mp.clz64(m, mant)
        return (m.i(-1011) - lz, mant << lz)

    def normal():
        return (field - 1023, (mant | IMPLICIT) << 11)
    e, top = m.cond(field.eq(0), subnormal, normal)
    return e, (top, m.i(0), m.i(0))


def _log_go(m, xb):
    return (xb - IMPLICIT).ult(INF - IMPLICIT)                            # positive normal


def _log_go_lanes(m, xb):
    """_log_go without an unsigned comparison (alphac.math.lanes makes those of five
    operations): both xb - 2^52 and xb + 2^52 have their sign bit clear exactly where x is a
    positive normal (zero and subnormals wrap below, infinities and NaNs above)."""
    return (((xb - IMPLICIT) | (xb + IMPLICIT)) >> 63) ^ 1


def _log_rest(m, x):
    """log's special values and accurate path (`outlined`)."""
    xb = x.bits()

    def positive():
        return m.cond(xb.eq(0x3FF0000000000000), lambda: (m.f(0.0),), lambda: m.cond(
            xb.eq(INF), lambda: (x,), lambda: (to_double(m, *log_core(m, *_decompose(m, xb))),)))
    return m.cond(is_nan(m, x), lambda: (x + x,), lambda: m.cond(
        (xb & ABS).eq(0), lambda: (m.f(float("-inf")),), lambda: m.cond(
            m.i(0).ult(xb & SIGN), lambda: (m.float_(m.i(NAN)),), positive)))[0]


def log(m, x):
    xb = x.bits()
    return m.first(_log_go(m, xb), lambda: _log_lean(m, xb),
                   lambda: outlined(m, "log_rest", _log_rest, xb))


def _log1p_go(m, xb, ax):                                   # 2^-54 <= |x|, -1 < x < inf
    return (ax - 0x3C90000000000000).ult(INF - 0x3C90000000000000) & xb.ult(0xBFF0000000000000)


def _log1p_go_lanes(m, xb, ax):
    """_log1p_go without an unsigned comparison (as _log_go_lanes): the sign bits of
    |x| - 2^-54 (|x| below it), |x| + 2^52 (inf, NaN) and x & (|x| + 2^62 + 2^52) (x <= -1)."""
    return (((ax - 0x3C90000000000000) | (ax + IMPLICIT) | (xb & (ax + 0x4010000000000000)))
            >> 63) ^ 1


def _log1p_fast(m, x, ax):
    def near_zero():                                        # |x| < 2^-8: log1p(t), t = x
        a, rest = _log1p_lean(m, x, m.f(0.0))
        return rounded(m, a, rest, _fabs(m, a) * m.f(TWO[-64]))

    def one_plus():                                         # log(y_h) + y_l / y_h, y = 1 + x
        yh, yl = two_sum(m.f(1.0), x)
        return _log_lean(m, yh.bits(), yl / yh)
    return m.cond(ax.ult(0x3F70000000000000), near_zero, one_plus)


def _log1p_rest(m, x):
    """log1p's special values and accurate path (`outlined`)."""
    xb = x.bits()
    ax = xb & ABS
    negative = m.i(0).ult(xb & SIGN)

    def large():                                            # x >= 1: x's mantissa, plus one
        e = ((xb >> 52) & 0x7FF) - 1023
        Y = (((xb & MANT) | IMPLICIT) << 11, m.i(0), m.i(0))

        def add_one():                                      # 1 is bit 191 - e of Y
            one = mp.shl(m, (m.i(0), m.i(0), m.i(1)), m.i(191) - e)
            s, carry = mp.add(m, Y, one)
            halved = ((s[0] >> 1) | SIGN, (s[1] >> 1) | (s[0] << 63), (s[2] >> 1) | (s[1] << 63))
            return m.cond(carry, lambda: (e + 1,) + halved, lambda: (e,) + s)
        return m.cond(m.i(191).slt(e), lambda: (e,) + Y, add_one)   # beyond 2^191, 1 is lost

    def small():                                            # -1 < x < 1: 1 + x, exactly
        e = ((xb >> 52) & 0x7FF) - 1023
        X = mp.shl(m, (m.i(0), m.i(0), (xb & MANT) | IMPLICIT), e + 138)   # |x| 2^190
        one = (m.i(1 << 62), m.i(0), m.i(0))                               # 2^190
        Y0 = m.cond(negative, lambda: mp.sub(m, one, X)[0], lambda: mp.add(m, one, X)[0])
        lz = mp.clz(m, Y0)
        return (m.i(1) - lz,) + mp.shl(m, Y0, lz)

    def accurate():
        r = m.cond(negative | ax.ult(0x3FF0000000000000), small, large)
        return to_double(m, *log_core(m, r[0], r[1:4]))

    minus_one = xb.eq(0xBFF0000000000000)
    below = m.i(0xBFF0000000000000).ult(xb)                 # x < -1, -inf included
    return m.cond(is_nan(m, x), lambda: (x + x,), lambda: m.cond(
        ax.ult(0x3C90000000000000), lambda: (x,), lambda: m.cond(     # |x| < 2^-54: x
            xb.eq(INF), lambda: (x,), lambda: m.cond(
                minus_one, lambda: (m.f(float("-inf")),), lambda: m.cond(
                    below, lambda: (m.float_(m.i(NAN)),), lambda: (accurate(),))))))[0]


def log1p(m, x):
    xb = x.bits()
    ax = xb & ABS
    return m.first(_log1p_go(m, xb, ax), lambda: _log1p_fast(m, x, ax),
                   lambda: outlined(m, "log1p_rest", _log1p_rest, xb))


# -- expm1, tanh -----------------------------------------------------------------------------------
def _exp_minus_one(m, x, negative):
    """e^x - 1 as (sign, D, s): D 2^s (1 + eps), for a finite x with 2^-54 <= |x| < 746:
    e^x = Q 2^s from exp_core, and 1 is 2^-s in Q's units. Where 1 fits in Q's 192 bits
    (-191 <= s <= 0) the difference is exact; beyond (s > 0) the 1 is below Q's last bit; below
    (e^x < 1/2) both are taken at 2^-191. |e^x - 1| >= |x|/2, so |eps| < 2^-184 e^x / (|x|/2),
    below 2^-129 everywhere."""
    Q, s = exp_core(m, x)

    def aligned():
        one = mp.shl(m, (m.i(0), m.i(0), m.i(1)), m.i(0) - s)
        D = m.cond(negative, lambda: mp.sub(m, one, Q)[0], lambda: mp.sub(m, Q, one)[0])
        return D + (s,)

    def below():                                           # e^x < 1/2: 1 - e^x at 2^-191
        q, _ = mp.shr(m, Q, m.i(-191) - s)
        return mp.sub(m, (m.i(SIGN), m.i(0), m.i(0)), q)[0] + (m.i(-191),)
    out = m.cond(m.i(0).slt(s), lambda: Q + (s,), lambda: m.cond(s.slt(-191), below, aligned))
    sign = m.cond(negative, lambda: (m.i(SIGN),), lambda: (m.i(0),))[0]
    return sign, out[0:3], out[3]


def _expm1_series(m, x, negative):
    """e^x - 1 for 2^-54 <= |x| < 2^-9 with relative accuracy, as (sign, D, s): x B(x),
    B/2 = sum_{n=0..15} x^n / (2 (n+1)!) by Horner over |x| as an exact fraction (truncation
    below 2^-192; 15 products and 16 floored coefficients, < 2^-185 absolute on B/2 ~ 1/2),
    times |x| normalized (2^-190): relative error < 2^-183. (e^x - 1 near 0 is as hard to round
    as log1p there; the fixed point of _exp_minus_one holds only 2^-129 of it.)"""
    xb = x.bits()
    e = ((xb >> 52) & 0x7FF) - 1023
    T = mp.shl(m, (m.i(0), m.i(0), (xb & MANT) | IMPLICIT), e + 140)   # |x| 2^192, exact
    a = _expm1_half_b(m, T, negative)
    lz = mp.clz(m, T)
    sign = m.cond(negative, lambda: (m.i(SIGN),), lambda: (m.i(0),))[0]
    return sign, mp.mul(m, mp.shl(m, T, lz), a), m.i(-191) - lz


def _expm1_half_b(m, T, negative):
    """B/2 as a fraction, e^x - 1 = x B, for |x| = T 2^-192 < 2^-9 (x < 0 where negative)."""
    op = m.cond(negative, lambda: (m.i(1),), lambda: (m.i(0),))[0]

    def series(step):
        a = limbs(m, "EXP_COEF", 16)
        for n in range(14, -1, -1):
            a, _ = step(m, limbs(m, "EXP_COEF", n + 1), mp.mul(m, T, a))
        return a
    return m.cond(op, lambda: series(mp.sub), lambda: series(mp.add))


def _expm1_go(m, xb, ax):                                   # -40 < x < 708, 2^-54 <= |x|
    return m.i(0x3C8FFFFFFFFFFFFF).ult(ax) & ax.ult(FAST_EXP_MAX) & \
        (xb.ult(SIGN) | ax.ult(0x4044000000000000))


def _expm1_rest(m, x):
    xb = x.bits()
    ax = xb & ABS
    negative = m.i(0).ult(xb & SIGN)

    def finite():
        return m.cond(ax.ult(0x3C90000000000000), lambda: (x,), lambda: m.cond(  # |x| < 2^-54
            negative & m.i(0x4044000000000000).ult(ax), lambda: (m.f(-1.0),),    # x < -40
            lambda: m.cond(m.i(0x4087500000000000).ult(ax), lambda: (m.f(float("inf")),),
                           accurate)))

    def accurate():
        return m.cond(
            ax.ult(0x3F60000000000000), lambda: (to_double(m, *_expm1_series(m, x, negative)),),
            lambda: (to_double(m, *_exp_minus_one(m, x, negative)),))
    return m.cond(m.i(INF - 1).ult(ax), lambda: m.cond(ax.eq(INF), lambda: m.cond(
        negative, lambda: (m.f(-1.0),), lambda: (x,)), lambda: (x + x,)), finite)[0]


def expm1(m, x):
    xb = x.bits()
    ax = xb & ABS
    return m.first(_expm1_go(m, xb, ax), lambda: rounded(m, *_expm1_dd(m, x, ax)),
                      lambda: outlined(m, "expm1_rest", _expm1_rest, xb))


def _reciprocal(m, d):
    """w ~ 1/(4 d) for a fraction d in [1/2, 1), as a fraction, with a relative error below
    2^-186: a binary64 start (2^-51) and two Newton steps, w += w (1 - 4 d w) 4."""
    top = d[0] >> 11                                       # d's leading 53 bits
    y0 = m.f(1.0) / (m.i2f(top) * m.f(2.0 ** -53))         # 1/d to about 2^-51, in (1, 2]
    yb = y0.bits()
    w = mp.shl(m, (m.i(0), m.i(0), (yb & MANT) | IMPLICIT), ((yb >> 52) & 0x7FF) - 1023 + 138)
    quarter = (m.i(1 << 62), m.i(0), m.i(0))               # 1/4
    for _ in range(2):
        g = mp.mul(m, d, w)                                # d w ~ 1/4
        over = mp.lt(m, quarter, g)

        def step(sub):
            e = mp.sub(m, g, quarter)[0] if sub else mp.sub(m, quarter, g)[0]
            c = mp.shl_const(m, mp.mul(m, w, e), 2)
            return mp.sub(m, w, c)[0] if sub else mp.add(m, w, c)[0]
        w = m.cond(over, lambda: step(True), lambda: step(False))
    return w


def _tanh_fast(m, y, lean=True):
    """tanh(y/2) = E / D, 2^-27 <= y <= 38.2, E = e^y - 1 and D = e^y + 1 as double-doubles
    with a relative bound rho = err/E_h on E (err already twice the bound), E_l below 2^-42 E_h,
    and D's absolute error at most E's (so relative below rho/2 too). For y >= 2^-6 both come
    from exp's lean Y = 2^E V (_exp_lean, 2^-69.1 Y), in units of 2^E (the quotient is the
    same; no scaling): V renormalized by the fast sum, then V - 2^-E and V + 2^-E by the fast
    sum (V >= 2^-E: Y > 1.015), their low parts under 2^-46 of them; err = 2^-67 (Y + |Y - 1|)
    as _expm1_lean's, 2^-61 of E near y = 2^-6, where one input in 130 goes on to the accurate
    path (x in [2^-5, 2^-3): one in 700; from 1/8 on, one in 2,000), still cheaper than expm1's
    2^-79 path; below 2^-6, _tanh_small. With `lean` off (the lanes', where a cond runs both
    branches; either way the correct rounding where the test passes), E from _expm1_fast and D
    = 2 + E by two_sum throughout. One division: i = fl(1/D_h), q_h = fl(E_h i) (within 2^-51.9 of
    E_h/D_h); the remainder E_h - q_h D_h as (((E_h - a_h b_h) - a_h b_l) - a_l b_h) - a_l b_l
    from Veltkamp's splits of q_h and D_h, every step exact but the last (the first by
    Sterbenz, the next two multiples of 2^(e_q + e_D - 77) below 2^(e_q + e_D - 24)), so within
    2^-104 E; q_l = (rem + (E_l - q_h D_l)) i, |q_l| < 2^-41 q: its roundings (2^-95 q), q_l's
    and i's (2^-52 |q_l|) and D_l against D_h (|D_l| < 2^-51.7 D: 2^-93.7 q): below 2^-93 q.
    tanh's bound is rho/2 + rho/2 + 2^-93; err = (err_E i) (2 + 2^-47) + q_h 2^-91 is at least
    twice it: err_E i (2 + 2^-47) is at least 2 rho q_h, q_h/E_h being within 2^-51.9 of 1/D_h
    and i within 2^-53. The quotient is written in each branch, so no values merge."""
    def near_zero():
        eh, el, err = _expm1_fast(m, y)
        dh, dt = two_sum(m.f(2.0), eh)
        return eh, el, dh, dt + el, err

    def from_exp():                                     # y >= 2^-6: Y = e^y > 1.015
        k, vh, lo = _exp_lean(m, y)
        c = m.float_((m.i(1023) - k.sar(8)) << 52)      # 2^-E: N and D in units of 2^E
        yh, yl = fast_two_sum(vh, lo)
        nh, (dh, db) = yh - c, fast_two_sum(yh, c)      # Y - 1 by the fast sum, -c folded in
        nb = (yh - nh) - c
        return nh, nb + yl, dh, db + yl, (yh + nh) * m.f(TWO[-67])
    def quotient(eh, el, dh, dl, err):                  # in each branch: no values merged
        inv = m.f(1.0) / dh
        qh = eh * inv
        (ah, al), (bh, bl) = split(qh), split(dh)
        ql = (((((eh - ah * bh) - ah * bl) - al * bh) - al * bl) + (el - qh * dl)) * inv
        return rounded(m, qh, ql, (err * inv) * m.f(2.0 + 2.0 ** -47) + qh * m.f(2.0 ** -91))
    if not lean:
        return quotient(*near_zero())
    return m.cond(m.i(0x3F8FFFFFFFFFFFFF).ult(y.bits()), lambda: quotient(*from_exp()),  # 2^-6
                  lambda: _tanh_small(m, y * m.f(0.5)))


TANH_POLY = (-1 / 3, 2 / 15, -17 / 315, 62 / 2835)


def _tanh_small(m, x):
    """tanh's fast path for 2^-28 <= x < 2^-7: x + c, c = x^3 P(x^2), P = -1/3 + 2/15 s - 17/315
    s^2 + 62/2835 s^3 (truncation 0.0089 x^11 < 2^-76.8 x), in binary64: s = fl(x^2), fl(x s),
    P by Horner's scheme at s (its last addition and -1/3's representation 2^-52.2 relative,
    the rest below 2^-66 of P), the product: c within 2^-50.5 |c| <= 2^-66.1 x (|c| < 2^-15.58
    x). err = 2^-64 x is at least twice the bound (about one input in 2^10.5 goes on); the low
    part c is up to 2^-15.6 x, above alphac.math.dd's 2^-40, but 2^-53 (|c| + err) < err/2."""
    s = x * x
    return rounded(m, x, (x * s) * _horner(m, s, TANH_POLY), x * m.f(TWO[-64]))


def _tanh_go(m, ax):
    return m.i(0x3E2FFFFFFFFFFFFF).ult(ax) & ax.ult(0x403319999999999A)     # 2^-28 <= |x| <= 19.1


def _tanh_signed(m, ax, sign, lean=True):
    ok, v = _tanh_fast(m, m.float_(ax) * m.f(2.0), lean)
    return ok, m.float_(v.bits() | sign)


def _tanh_rest(m, x):
    """tanh |x| = (e^y - 1) / (e^y + 1), y = 2|x|, both exact from e^y = Q 2^s (1 is 2^-s,
    inside Q's bits for y < 38.2); the quotient by a Newton reciprocal."""
    xb = x.bits()
    ax = xb & ABS
    sign = xb & SIGN

    def accurate():
        y = m.float_(ax) * m.f(2.0)
        Q, s = exp_core(m, y)
        one = mp.shl(m, (m.i(0), m.i(0), m.i(1)), m.i(0) - s)
        num = mp.sub(m, Q, one)[0]
        den = mp.add(m, Q, one)[0]
        lzn, lzd = mp.clz(m, num), mp.clz(m, den)
        w = _reciprocal(m, mp.shl(m, den, lzd))
        q = mp.mul(m, mp.shl(m, num, lzn), w)              # num/den / 4, normalized parts
        return (to_double(m, sign, q, lzd - lzn - 190),)
    one = m.float_(m.i(0x3FF0000000000000) | sign)
    return m.cond(
        m.i(INF - 1).ult(ax), lambda: m.cond(ax.eq(INF), lambda: (one,), lambda: (x + x,)),
        lambda: m.cond(ax.ult(0x3E30000000000000), lambda: (x,), lambda: m.cond(   # < 2^-28
            m.i(0x4033199999999999).ult(ax), lambda: (one,), accurate)))[0]            # > 19.1


def tanh(m, x):
    xb = x.bits()
    ax = xb & ABS
    return m.first(_tanh_go(m, ax), lambda: _tanh_signed(m, ax, xb & SIGN),
                      lambda: outlined(m, "tanh_rest", _tanh_rest, xb))


# -- sin, cos ----------------------------------------------------------------------------------------
INV_PI_64 = 20.371832715762604           # 64/pi, rounded: n only has to be near
FAST_TRIG_MAX = 0x4130000000000000       # 2^20: |n| < 2^24.35, so n C1 and n C2 are exact
SIN_POLY = (-1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800)
COS_POLY = (1 / 24, -1 / 720, 1 / 40320, -1 / 3628800, 1 / 479001600)
PI4_BITS = 0x3FE921FB54442D18            # pi/4 rounded down


def _trig_fast(m, x, off):
    """sin(x) (off = 0) or cos(x) = sin(x + pi/2) (off = 32) for 2^-27 <= |x| < 2^20, as Ziv's
    (ok, value).

    n = round(x 64/pi) (to within one: |r| <= 0.51 pi/128 < 2^-5.3, |n| < 2^24.35); pi/64 =
    C1 + C2 + C3 + C4 (C1, C2 of 28 bits: n C1, n C2 exact; |C3| < 2^-64, |C4| < 2^-118).
    x - n C1 is exact (Sterbenz for |n| >= 2; for |n| = 1 a multiple of ulp(x) below 2^-5), so
    r = r_h + r_l with an absolute error below |n| 2^-111 + 2^-105 |r| (n C3's rounding, n C4,
    one addition), and r = x exactly for n = 0. With j = (n + off) mod 128, S = sin(j pi/64)
    and C = cos(j pi/64) = entry j + 32 (double-doubles, 2^-106 relative):
    sin(j pi/64 + r) = S + S (cos r - 1) + C sin r.
    sin r = r + r^3 P(r^2), P to r^11 (truncation below 2^-102 |r|) in binary64 at r_h: its
    roundings, the constants' and r_l's part below 2^-52 |r|^3 absolute. cos r - 1 =
    -r_h^2/2 exactly (Dekker's square) - r_h r_l + r^4 Q(r^2), Q to r^12: below 2^-54 r^4.
    The products by S and C are Dekker's, their low parts and the final sums add below
    2^-100 (|S| + |C sin r|), under 2^-99 of the value (sin(j pi/64 + r) cancels by at most a
    half: |r| <= pi/128 + 2^-28). err is twice the sum of these bounds, computed per input."""
    t = x * m.f(INV_PI_64) + m.f(MAGIC)
    n = t.bits() - m.f(MAGIC).bits()
    nf = t - m.f(MAGIC)
    c = TABLES["TRIG_C"]
    r1 = x - nf * m.loadf(c, 0)
    rh, rl = two_sum(r1, -(nf * m.loadf(c, 1)))
    rh, rl = two_sum(rh, rl - nf * m.loadf(c, 2))
    j = (n + off) & 127
    tb = TABLES["TRIG_T"]
    sh, sl = m.loadf(tb, j * 2), m.loadf(tb, j * 2 + 1)
    k = ((j + 32) & 127) * 2
    ch, cl = m.loadf(tb, k), m.loadf(tb, k + 1)
    zh, zl = square(rh)
    srh, srl = fast_two_sum(rh, rl + (zh * rh) * _horner(m, zh, SIN_POLY))
    cmh = zh * m.f(-0.5)
    cml = (zh * zh) * _horner(m, zh, COS_POLY) - (zl * m.f(0.5) + rh * rl)
    ph, pl = two_prod(ch, srh)
    qh, ql = two_prod(sh, cmh)
    a, b = two_sum(sh, ph)
    a, d = two_sum(a, qh)
    lo = (b + d) + (((pl + (ch * srl + cl * srh)) + (ql + (sh * cml + sl * cmh))) + sl)
    h, l = fast_two_sum(a, lo)
    bound = (_fabs(m, nf) * m.f(2.0 ** -111) + (zh * _fabs(m, rh)) * m.f(2.0 ** -52)) + \
        ((zh * zh) * _fabs(m, sh)) * m.f(2.0 ** -54)
    return rounded(m, h, l, bound * m.f(2.0) + _fabs(m, h) * m.f(2.0 ** -89))


def _words5_mod(m, g, k):
    """(k G) mod 2^320 for a 320-bit G (five words, most significant first) and a word k."""
    out, carry = [g[4] * k], m.i(0)
    for t in (3, 2, 1, 0):
        hi = g[t + 1].umulh(k)
        s = g[t] * k + hi
        c = s.ult(hi)
        s2 = s + carry
        carry = c + s2.ult(s)
        out.insert(0, s2)
    return out


def _trig_reduce(m, xb):
    """Payne and Hanek's reduction of |x| >= pi/4: (q, ysign, Y, ys) with |x| = q pi/2 + y,
    |y| <= pi/4, y's sign ysign (0 or 1) and |y| = Y 2^ys (1 + eps), Y a 192-bit number with its
    top bit at 2^190 or 2^191, |eps| < 2^-186.

    |x| = M 2^E (M the 53-bit integer). Bits i < E - 1 of 2/pi (weight 2^-i) give M 2^(E-i), a
    multiple of 4: they change no quadrant. The 320 bits from E - 1 on (INV_PIO2 read from
    bit E + 63, its first word being zeros) times M, modulo 2^320, are |x| 2/pi modulo 4 at
    2^-318, short by less than M 2^-318 < 2^-265 (the bits after the window). Rounded to the
    nearest quadrant, the fraction f has |f| <= 1/2 and |f| > 2^-62 for every binary64 (the
    closest a binary64 comes to a multiple of pi/2 is 2^-61.54 quadrants, at
    0x1.6ac5b262ca1ffp+849: CORE-MATH's sin list holds each binade's closest, and the tests run
    them): relative error below 2^-200. Its first 192 bits from its leading one (2^-191), times
    PI4 (2^-191, and the product's 2^-190): below 2^-186."""
    field = (xb >> 52) & 0x7FF
    mant = (xb & MANT) | IMPLICIT
    p = field - 1013                                   # bit E - 1 of 2/pi is table bit p
    q, r = p >> 6, p & 63
    w = [m.load(TABLES["INV_PIO2"], q + t) for t in range(6)]
    g = [mp._pair_shl(w[t], w[t + 1], r) for t in range(5)]
    P = _words5_mod(m, g, mant)
    half = (P[0] >> 61) & 1
    F = [P[0] & ((1 << 62) - 1)] + P[1:]

    def folded():                                      # f - 1: 2^318 - F, the sign negative
        borrow, out = m.i(0), []
        for t in (4, 3, 2, 1, 0):
            v = m.i(0) - F[t] - borrow
            borrow = m.i(0).ult(F[t]) | (F[t].eq(0) & borrow)
            out.insert(0, v)
        out[0] = out[0] & ((1 << 62) - 1)
        return tuple(out)
    F = m.cond(half, folded, lambda: tuple(F))
    a = m.cond(F[0].eq(0), lambda: F[1:5] + (m.i(64),), lambda: F[0:4] + (m.i(0),))
    lz = mp.clz64(m, a[0]) & 63
    fn = tuple(mp._pair_shl(a[t], a[t + 1], lz) for t in range(3))
    Y = mp.mul(m, fn, const192(m, "PI4"))
    return ((P[0] >> 62) + half, half) + Y + (m.i(-189) - a[4] - lz,)


def _trig_accurate(m, x, is_sin):
    """sin(x) or cos(x) for 2^-27 <= |x| < inf in 192-bit fixed point: |x| = q pi/2 + y
    (y = |x| exactly below pi/4, else _trig_reduce); with g = q + 3 for sin (sin(x) =
    cos(x - pi/2)), the value is +-cos y for g even and +-sin |y| for g odd, its sign
    (g + 1)/2 mod 2, plus y's for g odd, plus x's for sin. z = y^2 as a fraction (floored);
    sin y / (2y) = sum_{k=0..22} (-z)^k / (2 (2k+1)!) and cos y / 2 = sum_{k=0..22} (-z)^k /
    (2 (2k)!) by one Horner text (z <= (pi/4)^2 < 0.62: truncation below 2^-204; each step a
    positive difference, c_k > z c_(k+1); 22 products and floored coefficients: below 2^-185 on a
    value above 0.35): relative error below 2^-183 in all, and then one rounding."""
    xb = x.bits()
    ax = xb & ABS
    field = (xb >> 52) & 0x7FF

    def direct():
        return m.i(0), m.i(0), ((xb & MANT) | IMPLICIT) << 11, m.i(0), m.i(0), field - 1214
    q, ysign, *Y, ys = m.cond(ax.ult(PI4_BITS), direct, lambda: _trig_reduce(m, xb))
    Y = tuple(Y)
    g = (q + (3 if is_sin else 0)) & 3
    odd = g & 1
    sign = (((g + 1) >> 1) & 1) ^ (odd & ysign)
    if is_sin:
        sign = sign ^ (xb >> 63)
    sign = sign << 63
    z, _ = mp.shr(m, mp.mul(m, Y, Y), m.i(-384) - ys - ys)
    a = limbs(m, "TRIG_COEF", odd + 44)                   # one Horner: H[2k + odd], k = 22..0
    for k in range(21, -1, -1):
        a, _ = mp.sub(m, limbs(m, "TRIG_COEF", odd + 2 * k), mp.mul(m, z, a))
    out = m.cond(odd, lambda: mp.mul(m, Y, a) + (ys + 1,), lambda: a + (m.i(-191),))
    return to_double(m, sign, out[0:3], out[3])


def _trig(m, x, is_sin):
    xb = x.bits()
    ax = xb & ABS
    tiny = 0x3E50000000000000 if is_sin else 0x3E40000000000000    # 2^-26, 2^-27
    go = m.i(tiny - 1).ult(ax) & ax.ult(FAST_TRIG_MAX)
    small = (x,) if is_sin else (m.f(1.0),)        # sin x = x (x^3/6 < 2^-54.5 |x|), cos x = 1
    return m.first(go, lambda: _trig_fast(m, x, 0 if is_sin else 32), lambda: m.cond(
        m.i(INF - 1).ult(ax), lambda: m.cond(ax.eq(INF), lambda: (m.float_(m.i(NAN)),),
                                             lambda: (x + x,)),
        lambda: m.cond(ax.ult(tiny), lambda: small, lambda: (_trig_accurate(m, x, is_sin),)))[0])


def sin(m, x):
    return _trig(m, x, True)


def cos(m, x):
    return _trig(m, x, False)


# -- pow ---------------------------------------------------------------------------------------------
ONE = 0x3FF0000000000000
SNAP = True          # tests switch it off: the mutant that rounds exact midpoints as it finds them


def _pow_yclass(m, ay):
    """(integer, odd) for |y| = ay's binary64 (1 or 0 each; any value for y = 0, inf or NaN):
    |y| >= 2^53 is an even integer, |y| < 1 no integer; otherwise y's f = 52 - e fraction bits."""
    field = ay >> 52
    mant = (ay & MANT) | IMPLICIT

    def mid():
        f = m.i(1075) - field
        return ((mant << (m.i(63) - f)) << 1).eq(0), (mant >> f) & 1
    return m.cond(m.i(0x433FFFFFFFFFFFFF).ult(ay), lambda: (m.i(1), m.i(0)), lambda: m.cond(
        ay.ult(ONE), lambda: (m.i(0), m.i(0)), mid))


def _pow_fast(m, axb, y, sign):
    """|x|^y for a positive normal |x| != 1 and a finite y, where 2^-60 <= |y log|x|| < 708, as
    Ziv's (ok, value) with the sign bit `sign`. log|x| = h + l within errL/2 (_log_dd);
    z = y (h + l) = z_h + z_l by Dekker's product (exact: |y| < 2^63) and y l (rounding below
    2^-100 |z|), so |z_h + z_l - y log|x|| < |y| errL/2 + 2^-100 |z|; e^z from exp's reduction
    of the double-double z (2^-78.8 relative): the relative error is below that sum plus
    2^-78.8 (e^d - 1 < 1.0001 d), and err is twice it, computed per input. v 2^(k >> 8) is exact
    (normal: |z| < 708)."""
    h, l, err_l = _log_dd(m, axb, m.f(0.0))
    zh0 = y * h
    az = _fabs(m, zh0)
    inside = az.fgt(m.f(2.0 ** -60)) & m.f(708.0).fgt(az)

    def work():
        ph, pl = two_prod(y, h)
        zh, zl = fast_two_sum(ph, pl + y * l)
        k, ph2, pl2 = _exp_reduce(m, zh, zl)
        vh, vl = _exp_scaled(m, k, ph2, pl2)
        bound = (_fabs(m, y) * err_l) * m.f(0.5 * 1.0001) + _fabs(m, zh) * m.f(2.0 ** -100)
        ok, v = rounded(m, vh, vl, vh * (bound * m.f(2.0) + m.f(2.0 ** -76)))
        return ok, m.float_((v * _pow2(m, k.sar(8))).bits() | sign)
    return m.cond(inside, work, lambda: (m.i(0), m.f(0.0)))


def _snap(m, Q, s):
    """(Q'..., s'): Q 2^s moved onto the nearest 54-bit number (a binary64 or a midpoint between
    two) when within 2^-140 of it relatively, else unchanged. x^y is such a number only for the
    inputs `pow` sends here (Lauter and Lefevre: y an integer in [2, 34] or n 2^F, F >= -5,
    n <= 34, or x a power of two), and the accurate path's 2^-167 puts it inside that window;
    no rounding test can decide a midpoint, so the value is snapped onto it and rounds to even."""
    lz = mp.clz(m, Q)
    b = mp.shl(m, Q, lz)                                     # the top bit at 2^191
    s = s - lz
    low = b[0] & 0x3FF                                       # the bits under 54: 2^138 units
    near0 = low.eq(0) & b[1].eq(0) & b[2].ult(1 << 51)
    near1 = low.eq(0x3FF) & b[1].eq(-1) & m.i(-(1 << 51) - 1).ult(b[2])

    def up():
        top = (b[0] | 0x3FF) + 1
        return m.cond(top.eq(0), lambda: (m.i(SIGN), m.i(0), m.i(0), s + 1),
                      lambda: (top, m.i(0), m.i(0), s))
    return m.cond(near0, lambda: (b[0], m.i(0), m.i(0), s), lambda: m.cond(
        near1, up, lambda: tuple(b) + (s,)))


def _pow_accurate(m, axb, y, sign):
    """|x|^y for a positive finite |x| != 1 and a finite nonzero y, rounded once, sign `sign`.

    log|x| = (-1)^a N 2^s from log_core: relative error below 2^-184 near 1 (x in [1 - 2^-9,
    1 + 2^-8)), below 6 2^-191 / 2^-9 < 2^-179.4 elsewhere in [1/2, 2) (its `fine` sum), and
    below 2^-178 / ln 2 < 2^-177.4 beyond. z = y log|x| = T 2^(s - n + E_y + 64), T the top 192
    bits of N's normalized value times y's 53-bit integer (floored, 2^-179 relative): z's
    relative error is below 2^-176.9. |z| < 2^-56 rounds to 1, |z| >= 1024 to 0 or inf. For
    |z| < 2^-9, x^y = 1 + (e^z - 1), e^z - 1 by expm1's series in z's normalized 192 bits
    (2^-183): the sum at 2^-191 with the dropped bits as a sticky last bit, so the error is
    below |z| 2^-176 (2^-227 for the listed worst cases near 1, which need 2^-207). Elsewhere z
    is taken at 2^-176 (Z, floored) into exp's 192-bit evaluation (2^-184): for |z| < 746
    (beyond, the result is 0 or inf far from any boundary) below 746 2^-176.9 + 2^-176 + 2^-184
    < 2^-167 relative (measured: 2^-170.0 over 3,000 pairs; before the fine sum, 2^-162.4).
    For the inputs whose x^y can be exact or a midpoint, the value is snapped first (_snap)."""
    e, X = _decompose(m, axb)
    lsign, N, s = log_core(m, e, X, fine=True)
    yb = y.bits()
    yf = (yb >> 52) & 0x7FF
    my, ey = m.cond(yf.eq(0), lambda: (yb & MANT, m.i(-1074)),
                    lambda: ((yb & MANT) | IMPLICIT, yf - 1075))
    n = mp.clz(m, N)
    T = mp.scale_small(m, mp.shl(m, N, n), my)[0:3]
    zsign = lsign ^ (yb & SIGN)
    a = s - n + ey + 240                                     # Z = T 2^a = z 2^176
    ez = a - 176 + 191 - mp.clz(m, T)                        # 2^ez <= |z| < 2^(ez + 1)
    ax1 = m.float_(m.i(ONE) | sign)

    zneg = zsign >> 63

    def general():
        Z = m.cond(a.slt(0), lambda: mp.shr(m, T, m.i(0) - a)[0], lambda: mp.shl(m, T, a))
        Z = m.cond(zneg, lambda: mp.neg(m, Z), lambda: Z)
        Q, sq = _exp_fixed(m, Z, m.i2f(Z[0]) * m.f(2.0 ** -48))
        return tuple(Q) + (sq,)

    def near_one():                  # |z| < 2^-9: 1 + (e^z - 1), the sum at 2^-191 or 2^-192
        Tn = mp.shl(m, T, mp.clz(m, T))                      # |z| = Tn 2^(ez - 191)
        D = mp.mul(m, Tn, _expm1_half_b(m, mp.shr(m, Tn, m.i(-1) - ez)[0], zneg))  # 2^(ez-190)

        def up():
            d, st = mp.shr(m, D, m.i(-1) - ez)
            W, _ = mp.add(m, (m.i(SIGN), m.i(0), m.i(0)), d)
            return W[0], W[1], W[2] | st, m.i(-191)

        def down():
            d, st = mp.shr(m, D, m.i(-2) - ez)
            W, _ = mp.sub(m, mp.neg(m, d), (m.i(0), m.i(0), st))
            return W[0], W[1], W[2] | st, m.i(-192)
        return m.cond(zneg, down, up)

    def inside():
        *Q, sq = m.cond(ez.slt(-9), near_one, general)
        pow2x = (axb & MANT).eq(0) | (((axb >> 52).eq(0)) & ((axb & MANT) & ((axb & MANT) - 1)).eq(0))
        small_y = (yb & ((1 << 47) - 1)).eq(0) & m.i(0x3F9FFFFFFFFFFFFF).ult(yb) & \
            yb.ult(0x4041000000000001)                      # 2^-5 <= y <= 34, 6 bits
        if SNAP:
            *Q, sq = m.cond(pow2x | small_y, lambda: _snap(m, Q, sq), lambda: tuple(Q) + (sq,))
        return (to_double(m, sign, tuple(Q), sq),)
    return m.cond(ez.slt(-57), lambda: (ax1,), lambda: m.cond(
        m.i(9).slt(ez), lambda: (m.cond(zsign, lambda: (m.float_(sign),),
                                        lambda: (m.float_(m.i(INF) | sign),))[0],),
        inside))[0]


def _pow_signs(m, xb, yb):
    """(|x|, |y|, y an integer, the result's sign bit, x < 0, y < 0) from the bits."""
    ax, ay = xb & ABS, yb & ABS
    yint, yodd = _pow_yclass(m, ay)
    xneg = xb >> 63
    return ax, ay, yint, (xneg & yodd) << 63, xneg, yb >> 63


def _pow_rest(m, xb, yb):
    """pow's special cases and its accurate path, bits in and out (RtSource writes it once as a
    subroutine, so that the fast path's code stays small)."""
    x, y = m.float_(xb), m.float_(yb)
    ax, ay, yint, sign, xneg, yneg = _pow_signs(m, xb, yb)
    inf = m.float_(m.i(INF) | sign)
    zero = m.float_(sign)

    def finite():
        return m.cond(xneg & (yint ^ 1), lambda: (m.float_(m.i(NAN)),), lambda: m.cond(
            ax.eq(ONE), lambda: (m.float_(m.i(ONE) | sign),),
            lambda: (_pow_accurate(m, ax, y, sign),)))
    return (m.cond(ay.eq(0) | xb.eq(ONE), lambda: (m.f(1.0),), lambda: m.cond(
        is_nan(m, x) | is_nan(m, y), lambda: (x + y,), lambda: m.cond(
            ay.eq(INF), lambda: m.cond(ax.eq(ONE), lambda: (m.f(1.0),), lambda: m.cond(
                m.i(ONE).ult(ax) ^ yneg, lambda: (m.f(float("inf")),), lambda: (m.f(0.0),))),
            lambda: m.cond(ax.eq(0), lambda: m.cond(yneg, lambda: (inf,), lambda: (zero,)),
                           lambda: m.cond(ax.eq(INF), lambda: m.cond(
                               yneg, lambda: (zero,), lambda: (inf,)), finite)))))[0].bits(),)


def pow(m, x, y):
    """x^y (C99 / IEEE 754 pow): pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN; a NaN otherwise
    gives NaN; pow(-1, +-inf) = 1; y = +-inf by |x| against 1; x = +-0 or +-inf by y's sign,
    with x's sign where y is an odd integer; x < 0 with a non-integer finite y is NaN, with an
    integer y (-1)^y |x|^y."""
    xb, yb = x.bits(), y.bits()
    ax, ay, yint, sign, xneg, _ = _pow_signs(m, xb, yb)
    go = m.i(0x000FFFFFFFFFFFFF).ult(ax) & ax.ult(INF) & (ax.eq(ONE) ^ 1) & \
        m.i(0).ult(ay) & ay.ult(INF) & (yint | (xneg ^ 1))
    return m.first(go, lambda: _pow_fast(m, ax, y, sign),
                      lambda: m.float_(m.outline("pow_rest", _pow_rest, (xb, yb), 1)[0]))
