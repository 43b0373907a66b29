"""The constants of the accurate paths, computed here with Python's integers (no library).

Every value is computed in fixed point with GUARD = 320 fraction bits by series whose
truncation and rounding errors are far below 2^-300, then floored to the representation its
algorithm reads (a 192-bit fraction, three 64-bit words each). tests/test_math.py checks
each word against MPFR.

    LN2_256      floor(ln 2 / 256 * 2^200)                         (exp: k * ln2/256)
    EXP_COEF[n]  floor(2^192 / (2 * n!)), n = 0..16               (exp: e^r / 2)
    EXP2[j]      floor(2^(j/256) / 2 * 2^192), j = 0..255          (exp: 2^(j/256) / 2)
    LOG_INV[j]   I_j, an integer near 2^16 / c_j, c_j = 1 + (j + 1/2)/256; I_0 = 2^16, I_255 = 2^15
    LOG_TAB[j]   floor(log(2^16 / I_j) * 2^192)                   (log: -log(I_j / 2^16))
    LOG_COEF[n]  floor(2^192 / (2 n)), n = 1..24                   (log1p(t) = 2 t * sum)
    LN2          floor(ln 2 * 2^192)

The fast paths' tables are binary64 words (double-doubles as hi, lo pairs, hi the binary64
nearest the value and lo the binary64 nearest the rest; Python's int / int is correctly
rounded):

    EXP_T[j]     2^(j/256) as a double-double, and the high half of the high part's Veltkamp
                 split (three words per j), j = 0..255
    EXP_C        ln 2 / 256 as C1 + C2 + C3, C1 and C2 of 35 significant bits each
    LOG_R[j]     I_j / 2^16 (exact: 17 bits)
    LOG_L[j]     log(2^16 / I_j) as hi + lo, hi the nearest multiple of 2^-42 (e H + hi is
                 exact) (LOG_L[255] is LN2_HL: ln 2 the way e ln 2 is taken, so log(x) for x
                 just below 1 cancels exactly)
    LN2_HL       ln 2 as H + L, H of 42 significant bits

sin and cos (tables of their own, so that exp's and log's stay as they are):

    TRIG_COEF[n] floor(2^192 / (2 n!)), n = 0..45                (sin y / y and cos y, halved)
    PI4          floor(pi/4 * 2^192)                              (y = f pi/2 from the quadrant's f)
    INV_PIO2[k]  the bits of 2/pi 64 to a word, most significant first, after one word of
                 zeros: word k >= 1 holds bits 64k - 63 .. 64k after the binary point
                 (Payne and Hanek's reduction reads a window of it where x's exponent says)
    TRIG_T[j]    sin(j pi/64) as a double-double, j = 0..127 (cos(j pi/64) is entry j + 32)
    TRIG_C       pi/64 as C1 + C2 + C3, C1 and C2 of 28 significant bits each
"""
from __future__ import annotations

import struct
from functools import lru_cache

GUARD = 320
ONE = 1 << GUARD


def _atanh_inv(q: int) -> int:
    """atanh(1/q) * 2^GUARD for an integer q > 1."""
    total, k = 0, 0
    power = ONE // q                       # (1/q)^(2k+1)
    q2 = q * q
    while power:
        total += power // (2 * k + 1)
        power //= q2
        k += 1
    return total


@lru_cache(maxsize=None)
def ln2() -> int:
    return 2 * _atanh_inv(3)               # ln 2 = 2 atanh(1/3)


def exp_fixed(y: int) -> int:
    """e^y for 0 <= y < 1 (both scaled by 2^GUARD): the Taylor series."""
    total, term, n = ONE, ONE, 1
    while term:
        term = term * y // (ONE * n)
        total += term
        n += 1
    return total


def log_fixed(num: int, den: int) -> int:
    """log(num/den) * 2^GUARD for positive integers with 1/2 <= num/den <= 2."""
    # log(x) = 2 atanh((x - 1)/(x + 1)), (x - 1)/(x + 1) = (num - den)/(num + den)
    a, b = num - den, num + den
    sign = -1 if a < 0 else 1
    a = abs(a)
    total, k = 0, 0
    power = a * ONE // b                    # t^(2k+1), t = a/b <= 1/3
    t2n, t2d = a * a, b * b
    while power:
        total += power // (2 * k + 1)
        power = power * t2n // t2d
        k += 1
    return sign * 2 * total


def _atan_inv(q: int, bits: int) -> int:
    """atan(1/q) * 2^bits, within a unit per term (q >= 5)."""
    total, k, power, q2 = 0, 0, (1 << bits) // q, q * q
    while power:
        total += power // (2 * k + 1) * (-1 if k & 1 else 1)
        power //= q2
        k += 1
    return total


@lru_cache(maxsize=None)
def pi_fixed(bits: int) -> int:
    """floor(pi * 2^bits), up to one unit (Machin: pi = 16 atan(1/5) - 4 atan(1/239), 32 guard
    bits against the series' floors)."""
    g = bits + 32
    return (16 * _atan_inv(5, g) - 4 * _atan_inv(239, g)) >> 32


def sin_fixed(y: int) -> int:
    """sin(y) for 0 <= y <= 2 (both scaled by 2^GUARD): the Taylor series."""
    total, term, n = y, y, 1
    while term:
        term = term * y * y // (ONE * ONE * (n + 1) * (n + 2))
        total += -term if n % 4 == 1 else term
        n += 2
    return total


def half_inverse_factorials(count: int) -> tuple[int, ...]:
    """floor(2^192 / (2 n!)) for n = 0..count-1, as 192-bit numbers (three words each)."""
    import math
    out = []
    for n in range(count):
        out += words((1 << 191) // math.factorial(n))
    return tuple(out)


def words(n: int) -> tuple[int, int, int]:
    assert 0 <= n < 1 << 192
    return (n >> 128, (n >> 64) & ((1 << 64) - 1), n & ((1 << 64) - 1))


def to_frac(v: int, bits: int = 192) -> int:
    """floor(v / 2^GUARD * 2^bits)."""
    return v >> (GUARD - bits)


@lru_cache(maxsize=None)
def exp_tables() -> dict[str, tuple[int, ...]]:
    ln2_256 = to_frac(ln2(), 200) // 256
    coef = half_inverse_factorials(17)
    exp2 = []
    for j in range(256):
        v = exp_fixed(ln2() * j // 256)            # 2^(j/256)
        exp2 += words(to_frac(v // 2))
    return {"LN2_256": words(ln2_256), "EXP_COEF": coef, "EXP2": tuple(exp2)}


def log_inverse(j: int) -> int:
    if j == 0:
        return 1 << 16
    if j == 255:
        return 1 << 15
    # c_j = 1 + (j + 1/2)/256 = (512 + 2j + 1)/512; I_j = round(2^16 / c_j)
    return (2 * 512 * (1 << 16) + (513 + 2 * j)) // (2 * (513 + 2 * j))


@lru_cache(maxsize=None)
def log_tables() -> dict[str, tuple[int, ...]]:
    inv, tab = [], []
    for j in range(256):
        i = log_inverse(j)
        inv.append(i)
        tab += words(to_frac(log_fixed(1 << 16, i)) if i != 1 << 16 else 0)
    coef = []
    for n in range(1, 25):
        coef += words((1 << 192) // (2 * n))
    return {"LOG_INV": tuple(inv), "LOG_TAB": tuple(tab), "LOG_COEF": tuple(coef),
            "LN2": words(to_frac(ln2()))}


def f64_word(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _nearest(v: int) -> float:
    return v / ONE                            # correctly rounded (int / int)


def dd(v: int) -> tuple[int, int]:
    """The double-double (as two words) of v / 2^GUARD."""
    hi = _nearest(v)
    n, d = hi.as_integer_ratio()
    lo = (v * d - n * ONE) / (d * ONE)
    return f64_word(hi), f64_word(lo)


def veltkamp_head(x: float) -> float:
    """The high part of Veltkamp's split of x (alphac.math.dd.split), as binary64 computes it."""
    c = x * 134217729.0
    return c - (c - x)


def dd42(v: int) -> tuple[int, int]:
    """hi + lo of v / 2^GUARD (0 <= v < 2^GUARD): hi a multiple of 2^-42, lo the nearest rest."""
    h = (v + (1 << (GUARD - 43))) >> (GUARD - 42) << (GUARD - 42)
    return f64_word(_nearest(h)), f64_word(_nearest(v - h))


def head(v: int, nbits: int) -> int:
    """v rounded to nbits significant bits (v > 0, fixed point)."""
    drop = max(v.bit_length() - nbits, 0)
    return ((v + (1 << drop >> 1)) >> drop) << drop


@lru_cache(maxsize=None)
def fast_tables() -> dict[str, tuple[int, ...]]:
    c = ln2() // 256
    c1 = head(c, 35)
    c2 = head(c - c1, 35) if c > c1 else -head(c1 - c, 35)
    c3 = c - c1 - c2
    exp_t = []
    for j in range(256):
        hi, lo = dd(exp_fixed(ln2() * j // 256))
        exp_t += (hi, lo, f64_word(veltkamp_head(struct.unpack("<d", struct.pack("<Q", hi))[0])))
    log_r, log_l = [], []
    for j in range(256):
        i = log_inverse(j)
        log_r.append(f64_word(i / (1 << 16)))
        log_l += dd42(log_fixed(1 << 16, i)) if i != 1 << 16 else (0, 0)
    h = head(ln2(), 42)
    ln2_hl = (f64_word(_nearest(h)), f64_word(_nearest(ln2() - h)))
    log_l[510:512] = ln2_hl                   # log(2^16/2^15) exactly as e ln2 reads it
    return {"EXP_T": tuple(exp_t),
            "EXP_C": (f64_word(_nearest(c1)), f64_word(_nearest(c2)), f64_word(_nearest(c3))),
            "LOG_R": tuple(log_r), "LOG_L": tuple(log_l),
            "LN2_HL": ln2_hl}


TWO_OVER_PI_WORDS = 22        # word 0 zeros, then 1344 bits: the reduction reads words 0..21


@lru_cache(maxsize=None)
def trig_tables() -> dict[str, tuple[int, ...]]:
    nbits = 64 * (TWO_OVER_PI_WORDS - 1)
    pi = pi_fixed(nbits + 64)
    two_over_pi = (1 << (2 * nbits + 65)) // pi          # floor(2/pi * 2^nbits)
    inv = [0] + [(two_over_pi >> (nbits - 64 * k)) & ((1 << 64) - 1)
                 for k in range(1, TWO_OVER_PI_WORDS)]
    pi_g = pi_fixed(GUARD)
    quarter = [sin_fixed(pi_g * j // 64) for j in range(32)] + [ONE]   # sin(j pi/64), j <= 32
    half = quarter + quarter[31:0:-1]                     # sin((64 - j) pi/64) = sin(j pi/64)
    sines = half + [-v for v in half]                     # sin(pi + y) = -sin(y)
    trig_t = []
    for j in range(128):
        trig_t += dd(sines[j]) if sines[j] else (0, 0)
    c = pi_g // 64
    c1 = head(c, 28)
    c2 = head(c - c1, 28) if c > c1 else -head(c1 - c, 28)
    c3 = c - c1 - c2
    return {"TRIG_COEF": half_inverse_factorials(46), "PI4": words(pi_fixed(254) >> 64),
            "INV_PIO2": tuple(inv), "TRIG_T": tuple(trig_t),
            "TRIG_C": tuple(f64_word(_nearest(v)) for v in (c1, c2, c3))}
