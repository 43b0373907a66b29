"""The exact sums on the card (alphac/ptx/xsum.py), run by the PTX interpreter: for rows of
terms of every kind (normal, subnormal, signed zeros, infinities, NaNs, sums that cancel, sums
that spill), xsum_clear, xsum_add and xsum_fold leave in each coordinate's compact accumulator
(and, spilled, its dense digits) exactly the rational sum of its finite terms and the flags
xsum.rt would set, in the runtime's format (alphac/formats.py); the dense words do not depend on
the order in which the terms are added; and each kernel assembles with ptxas."""
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
    clear, add, fold = xsum.kernels(lr)
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
