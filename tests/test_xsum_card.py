"""The exact sums on the card (alphac/ptx/xsum.py), run by the PTX interpreter: for rows of
terms of every kind (normal, subnormal, signed zeros, infinities, NaNs, sums that cancel, sums
that spill), xsum_clear, xsum_add and xsum_fold leave in each coordinate's compact accumulator
(and, spilled, its dense digits) exactly the rational sum of its finite terms and the flags
xsum.rt would set, in the runtime's format (alphac/formats.py); the dense words do not depend on
the order in which the terms are added; xsum_round gives each sum rounded once (the bits of
xsum.rt's rounding: the rational sum correctly rounded, the flags' specials and zero signs), from
the folded digits or straight from the adds' carry-save ones; and each kernel assembles with
ptxas."""
import random
import struct
from fractions import Fraction

import pytest

from conftest import require_tool
from ptx_interp import InterpDevice

from alphac.formats import (XC_BASE_SHIFT, XC_DIGITS, XC_MAX_BASE, XC_SPILLED, XC_WORDS,
                            XS_DIGITS, XS_FLAGS, XS_WORDS)
from alphac.ptx import xsum


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def word(v: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", v & (1 << 64) - 1))[0]


def signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


class Width:                      # what the kernels read of a learner: its name, its params
    def __init__(self, P: int):
        self.name, self.params = "terms", [type("Param", (), {"size": P})()]


def flags_of(terms) -> int:
    f = 0
    for x in terms:
        if x != x:
            f |= XS_FLAGS["nan"]
        elif x in (float("inf"), float("-inf")):
            f |= XS_FLAGS["pinf"] if x > 0 else XS_FLAGS["ninf"]
        if bits(x) != 1 << 63:
            f |= XS_FLAGS["not-neg-zero"]
    return f


def card_sums(rows: list[list[float]], order=None):
    """(compact words per coordinate, dense words per coordinate) after the three kernels;
    `order`: the samples' order in gs (the sums must not see it)."""
    P = len(rows[0])
    order = order or list(range(len(rows)))
    dev, lr = InterpDevice(), Width(P)
    gs = dev.alloc([x for i in order for x in rows[i]])
    xd = dev.alloc([word(0x5A5A5A5A5A5A5A5A)] * (XS_WORDS * P))      # garbage: cleared first
    xc = dev.alloc([0.0] * (XC_WORDS * P))
    clear, add, fold = xsum.kernels(lr)[:3]
    dev.launch(clear, [xd], P)
    dev.launch(add, [gs, xd, len(rows)], len(rows) * P)
    dense_before_fold = [bits(v) for v in dev.read(xd, XS_WORDS * P)]
    dev.launch(fold, [xd, xc], P)
    out = [bits(v) for v in dev.read(xc, XC_WORDS * P)]
    dense = [bits(v) for v in dev.read(xd, XS_WORDS * P)]
    return ([out[XC_WORDS * j:XC_WORDS * (j + 1)] for j in range(P)],
            [dense[XS_WORDS * j:XS_WORDS * (j + 1)] for j in range(P)], dense_before_fold)


def value(words: list[int], base: int) -> Fraction:
    return sum((Fraction(signed(d)) * Fraction(2) ** (32 * (base + i) - 1074)
                for i, d in enumerate(words)), Fraction(0))


def terms(r: random.Random, n: int) -> list[float]:
    kind = r.choice(["normal", "spread", "tiny", "cancel", "special", "zeros"])
    out = []
    for i in range(n):
        if kind == "spread":          # 2^-1000 beside 2^900: more than 5 digits apart
            x = r.choice([1.0, -1.0]) * r.uniform(1, 2) * 2.0 ** r.choice([-1000, -500, 0, 900])
        elif kind == "tiny":
            x = r.choice([5e-324, -5e-324, 2.2e-308, -1e-310, 3e-320])
        elif kind == "cancel":
            x = [1e300, -1e300, 3.5, -3.5, 1e-300, -1e-300][i % 6]
        elif kind == "special":
            x = r.choice([float("inf"), float("-inf"), float("nan"), 1.0, -0.0])
        elif kind == "zeros":
            x = r.choice([0.0, -0.0, -0.0])
        else:
            x = r.uniform(-4, 4) * 2.0 ** r.randint(-60, 60)
        out.append(x)
    return out


def test_the_cards_exact_sums_are_the_rational_sums_in_the_runtimes_format():
    r = random.Random(41)
    P, n = 12, 7
    cols = [terms(r, n) for _ in range(P)]
    rows = [[cols[j][i] for j in range(P)] for i in range(n)]
    compact, dense, before = card_sums(rows)
    spilled = windowed = 0
    for j in range(P):
        h, window = compact[j][0], compact[j][1:]
        want_flags = flags_of(cols[j])
        assert h & 0xF == want_flags and h & ~(0xFF00 | XC_SPILLED | 0xF) == 0, j
        assert dense[j][0] & 0xF == want_flags
        finite = [Fraction(x) for x in cols[j] if x == x and abs(x) != float("inf")]
        want = sum(finite, Fraction(0))
        if h & XC_SPILLED:
            spilled += 1
            assert h >> XC_BASE_SHIFT == 0 and window == [0] * XC_DIGITS
            assert value(dense[j][1:], 0) == want != 0
            digits = [signed(d) for d in dense[j][1:]]
            assert all(-2 ** 31 <= d < 2 ** 31 for d in digits[:-1])     # normalized
        elif h >> XC_BASE_SHIFT:
            windowed += 1
            base = (h >> XC_BASE_SHIFT) - 1
            assert 0 <= base <= XC_MAX_BASE and h & XS_FLAGS["not-neg-zero"]
            assert value(window, base) == want != 0
        else:
            assert window == [0] * XC_DIGITS and want == 0
    assert spilled and windowed                 # the seed reaches both forms
    for order in (list(range(n))[::-1], r.sample(range(n), n)):   # any order: the same words
        assert card_sums(rows, order)[2] == before


@pytest.mark.parametrize("sm", [86, 90])
def test_the_kernels_assemble(sm):
    from alphac.ptx.cubin import read_cubin
    from alphac.ptx.ptxas import assemble, find_ptxas
    require_tool("ptxas")
    for k in xsum.kernels(Width(5), sm):
        im = read_cubin(assemble(k.ptx, sm, find_ptxas()))[k.name]
        assert im.local == 0, k.name


def rounded(terms) -> int:
    """The contract's exact sum of `terms` rounded once, as bits: the rational sum of the finite
    ones correctly rounded (Python's int division), an overflow an infinity; the flags' NaN and
    infinities; a zero sum -0.0 when every term was -0.0."""
    f = flags_of(terms)
    if f & XS_FLAGS["nan"] or f & 3 == 3:
        return 0x7FF8000000000000
    if f & 3:
        return bits(float("inf") if f & XS_FLAGS["pinf"] else float("-inf"))
    s = sum((Fraction(x) for x in terms), Fraction(0))
    if s == 0:
        return 0 if f & XS_FLAGS["not-neg-zero"] else 1 << 63
    try:
        return bits(s.numerator / s.denominator)
    except OverflowError:
        return bits(float("inf") if s > 0 else float("-inf"))


def card_rounded(rows, fold=True) -> list[int]:
    """G after clear, add, (fold,) round: each coordinate's bits."""
    P = len(rows[0])
    dev, lr = InterpDevice(), Width(P)
    gs = dev.alloc([x for row in rows for x in row])
    xd = dev.alloc([word(0x5A5A5A5A5A5A5A5A)] * (XS_WORDS * P))
    xc, G = dev.alloc([0.0] * (XC_WORDS * P)), dev.alloc([1.5] * P)
    clear, add, fold, rnd = xsum.kernels(lr)
    dev.launch(clear, [xd], P)
    dev.launch(add, [gs, xd, len(rows)], len(rows) * P)
    if fold:
        dev.launch(fold, [xd, xc], P)
    dev.launch(rnd, [xd, G], P)
    return [bits(v) for v in dev.read(G, P)]


TIE, ULP = 2.0 ** -53, 2.0 ** -52
ROUNDING = [[1e16, 1.0, -1e16], [1e16, -1.0, -1e16, 3.0], [-1e16, 1.0, 1e16, -1e16],   # cancellation
            [1.0, TIE], [1.0 + ULP, TIE], [1.0, TIE, 5e-324], [-1.0, -TIE, -5e-324],   # ties, sticky
            [1.7e308, 1.7e308], [-1.7e308, -1.7e308, 1.0], [1.7976931348623157e308, 2.0 ** 970],
            [1.7976931348623157e308, 2.0 ** 970 - 2.0 ** 917],                            # overflow
            [5e-324, 5e-324, -2.2e-308], [2.2250738585072014e-308, -5e-324],            # subnormals
            [2.0 ** -1015, 2.0 ** -1068], [-(2.0 ** -1015), -(2.0 ** -1068), 5e-324],  # ties near them
            [-0.0, -0.0], [-0.0, 0.0], [1.0, -1.0], [-1.0, 1.0, -0.0],                  # zero signs
            [float("inf"), 1.0], [float("-inf"), -0.0], [float("inf"), float("-inf")],
            [float("nan"), 1.0], [2.0 ** 900, -(2.0 ** -1000), -(2.0 ** 900)],           # a spill
            [3.0 * 2.0 ** 1000, -(2.0 ** 1023), 2.0 ** -1074, -(2.0 ** 1023)]]


def test_the_card_rounds_each_exact_sum_once_as_the_runtime_does():
    """G on the card (sampled steps under exact_sum read it): for sums that cancel (1e16, 1,
    -1e16), ties and sticky bits, overflows to infinity and just below, subnormals, every zero
    sign, the specials and spilled sums, and random columns of every kind, xsum_round's bits
    are the rational sum rounded once, from folded digits and from carry-save ones alike."""
    r = random.Random(42)
    cols = [list(c) for c in ROUNDING] + [terms(r, 4) for _ in range(24)]
    n = max(map(len, cols))
    cols = [c + [-0.0] * (n - len(c)) for c in cols]           # -0.0 adds nothing, not even a flag
    rows = [[c[i] for c in cols] for i in range(n)]
    want = [rounded(c) for c in cols]
    assert want[0] == bits(1.0) and want[3] == bits(1.0) and want[5] == bits(1.0 + ULP)
    for fold in (True, False):
        got = card_rounded(rows, fold)
        assert [j for j in range(len(cols)) if got[j] != want[j]] == [], fold
