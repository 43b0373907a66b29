"""192-bit fixed-point arithmetic in the staging language, for the accurate paths.

A number is a tuple of three 64-bit limbs (hi, mid, lo) of one unsigned integer
N = hi*2^128 + mid*2^64 + lo; what it stands for is the algorithm's choice of scale (a
"fraction" is N * 2^-192, in [0, 1)). Every function here expands inline into the caller's
code (no calls, no memory), so the same text runs under every backend.

Error bounds, in units of the lowest limb (2^-192 of a fraction):
    add, sub, shl, shr_exact, scale_small    exact (modulo 2^192 for add/sub)
    mul (fraction * fraction)                 the floor of the true product, minus [0, 4)
    shr (by a variable amount, with sticky)   exact floor, and whether bits were dropped

Requires: a backend of alphac.math.dsl.
"""
from __future__ import annotations

from alphac.math.dsl import M64


def const(m, n: int) -> tuple:
    """The limbs of the integer n (0 <= n < 2^192)."""
    assert 0 <= n < 1 << 192, n
    return (m.i(n >> 128), m.i((n >> 64) & M64), m.i(n & M64))


def zero(m) -> tuple:
    return (m.i(0), m.i(0), m.i(0))


def add(m, a: tuple, b: tuple) -> tuple:
    """(a + b) mod 2^192, and the carry out (0 or 1)."""
    s0 = a[2] + b[2]
    c0 = s0.ult(a[2])
    s1 = a[1] + b[1]
    c1 = s1.ult(a[1])
    t1 = s1 + c0
    c1 = c1 | t1.ult(s1)
    s2 = a[0] + b[0]
    c2 = s2.ult(a[0])
    t2 = s2 + c1
    c2 = c2 | t2.ult(s2)
    return (t2, t1, s0), c2


def sub(m, a: tuple, b: tuple) -> tuple:
    """(a - b) mod 2^192, and the borrow out (1 when a < b)."""
    d0 = a[2] - b[2]
    w0 = a[2].ult(b[2])
    d1 = a[1] - b[1]
    w1 = a[1].ult(b[1])
    e1 = d1 - w0
    w1 = w1 | d1.ult(w0)
    d2 = a[0] - b[0]
    w2 = a[0].ult(b[0])
    e2 = d2 - w1
    w2 = w2 | d2.ult(w1)
    return (e2, e1, d0), w2


def neg(m, a: tuple) -> tuple:
    return sub(m, zero(m), a)[0]


def mul(m, a: tuple, b: tuple) -> tuple:
    """floor(a * b / 2^192) - [0, 4): the product of two fractions, as a fraction. (A backend
    may write it once and call it: `m.outline`.)"""
    return m.outline("mul3", _mul, tuple(a) + tuple(b), 3)


def _mul(m, *ab) -> tuple:
    a, b = ab[:3], ab[3:]
    a2, a1, a0 = a
    b2, b1, b0 = b
    # the column at 2^192 (r0): lows of the weight-3 products, highs of the weight-2 ones
    terms0 = [a2 * b1, a1 * b2, a2.umulh(b0), a1.umulh(b1), a0.umulh(b2)]
    r0, c = terms0[0], m.i(0)
    for t in terms0[1:]:
        r0 = r0 + t
        c = c + r0.ult(t)
    # the column at 2^256 (r1): low of a2*b2, highs of the weight-3 products, and the carries
    r1, c1 = c, m.i(0)
    for t in (a2 * b2, a2.umulh(b1), a1.umulh(b2)):
        r1 = r1 + t
        c1 = c1 + r1.ult(t)
    r2 = a2.umulh(b2) + c1
    return (r2, r1, r0)


def shl_const(m, a: tuple, n: int) -> tuple:
    """a << n (0 <= n < 192), the bits above 2^192 dropped."""
    if n == 0:
        return a
    if n >= 128:
        return (a[2] << (n - 128), m.i(0), m.i(0))
    if n >= 64:
        k = n - 64
        hi = a[1] << k if k == 0 else (a[1] << k) | (a[2] >> (64 - k))
        return (hi, a[2] << k, m.i(0))
    return ((a[0] << n) | (a[1] >> (64 - n)), (a[1] << n) | (a[2] >> (64 - n)), a[2] << n)


def shr_const(m, a: tuple, n: int) -> tuple:
    """floor(a / 2^n) (0 <= n < 192)."""
    if n == 0:
        return a
    if n >= 128:
        return (m.i(0), m.i(0), a[0] >> (n - 128))
    if n >= 64:
        k = n - 64
        lo = a[1] if k == 0 else (a[1] >> k) | (a[0] << (64 - k))
        return (m.i(0), a[0] >> k, lo)
    return (a[0] >> n, (a[1] >> n) | (a[0] << (64 - n)), (a[2] >> n) | (a[1] << (64 - n)))


def _pair_shr(hi, lo, r):
    """The low 64 bits of (hi:lo) >> r, for a variable r in 0..63 (no shift by 64)."""
    return (lo >> r) | ((hi << (r ^ 63)) << 1)


def _pair_shl(hi, lo, r):
    """The high 64 bits of (hi:lo) << r, for a variable r in 0..63."""
    return (hi << r) | ((lo >> (r ^ 63)) >> 1)


def shr(m, a: tuple, n) -> tuple:
    """(floor(a / 2^n), sticky) for a variable 0 <= n (n >= 192 gives 0): sticky is 1 when a
    bit that was 1 is dropped."""
    *y, sticky = m.outline("shr3", _shr, tuple(a) + (n,), 4)
    return tuple(y), sticky


def _shr(m, a0, a1, a2, n) -> tuple:
    a = (a0, a1, a2)
    q, r = n >> 6, n & 63
    z = m.i(0)

    def by_limbs(x2, x1, x0, lost):
        y2 = x2 >> r
        y1 = _pair_shr(x2, x1, r)
        y0 = _pair_shr(x1, x0, r)
        mask = (m.i(1) << r) - 1
        return y2, y1, y0, lost | (x0 & mask)

    def pick(k):
        if k == 0:
            return by_limbs(a[0], a[1], a[2], z)
        if k == 1:
            return by_limbs(z, a[0], a[1], a[2])
        if k == 2:
            return by_limbs(z, z, a[0], a[1] | a[2])
        return (z, z, z, a[0] | a[1] | a[2])
    y2, y1, y0, lost = m.cond(q.eq(0), lambda: pick(0), lambda: m.cond(
        q.eq(1), lambda: pick(1), lambda: m.cond(q.eq(2), lambda: pick(2), lambda: pick(3))))
    return y2, y1, y0, z.ult(lost)


def shl(m, a: tuple, n) -> tuple:
    """a << n for a variable 0 <= n < 192, the bits above 2^192 dropped."""
    return m.outline("shl3", _shl, tuple(a) + (n,), 3)


def _shl(m, a0, a1, a2, n) -> tuple:
    a = (a0, a1, a2)
    q, r = n >> 6, n & 63
    z = m.i(0)

    def by_limbs(x2, x1, x0):
        return _pair_shl(x2, x1, r), _pair_shl(x1, x0, r), x0 << r

    return m.cond(q.eq(0), lambda: by_limbs(a[0], a[1], a[2]), lambda: m.cond(
        q.eq(1), lambda: by_limbs(a[1], a[2], z), lambda: by_limbs(a[2], z, z)))


def clz64(m, x):
    """The number of leading zero bits of a 64-bit word (64 for 0), by halving."""
    n = m.i(0)
    for k in (32, 16, 8, 4, 2, 1):
        top = (x >> (64 - k)).eq(0)             # the top k bits are all zero
        shift = top * k
        x = _shift_var(m, x, shift)
        n = n + shift
    return n + x.eq(0)


def _shift_var(m, x, s):
    return x << s


def clz(m, a: tuple):
    """The number of leading zeros of a 192-bit number (192 for 0)."""
    return m.outline("clz3", _clz, tuple(a), 1)[0]


def _clz(m, *a):
    z0, z1, z2 = clz64(m, a[0]), clz64(m, a[1]), clz64(m, a[2])
    return m.cond(z0.ult(64), lambda: (z0,), lambda: m.cond(
        z1.ult(64), lambda: (z1 + 64,), lambda: (z2 + 128,)))


def scale_small(m, a: tuple, k) -> tuple:
    """a * k for a 64-bit k, exactly: four limbs (top, hi, mid, lo)."""
    p0 = a[2] * k
    h0 = a[2].umulh(k)
    p1 = a[1] * k
    h1 = a[1].umulh(k)
    p2 = a[0] * k
    h2 = a[0].umulh(k)
    l1 = p1 + h0
    c1 = l1.ult(p1)
    l2 = p2 + h1
    c2 = l2.ult(p2)
    l2b = l2 + c1
    c2 = c2 + l2b.ult(l2)
    return (h2 + c2, l2b, l1, p0)


def lt(m, a: tuple, b: tuple):
    """1 when a < b (unsigned)."""
    return sub(m, a, b)[1]
