"""The runtime's exact binary64 sum (alphac/runtime/xsum.rt, the `exact_sum` contract) against an
exact oracle, on both ISAs: the exact sum of each group's values is an integer in units of
2^-1074 (Fraction), rounded once to nearest, ties to even, with IEEE overflow, by the test itself
and cross-checked against Python's correctly rounded float(Fraction). Cases: random doubles over
the whole exponent range (subnormals, the largest finite values, mixed signs) and in narrow
ranges, cancellation to a tiny value and to exactly zero, the zero signs, exact ties in both
directions (from the lowest binade that has ties to just below overflow), overflow and a sum
that comes back under, infinities and NaNs, permutations of one multiset, 100,000 values in one
accumulator; and, for the compact accumulators' paths, magnitudes growing and shrinking within 5
digits (windows re-based upward and downward) and one term beyond (a late spill), spreads of
just 5 and 6 digits, spills at the second term, cancellation then a far jump, carry-save digits
that only normalizing brings within 5, and splits that merge windows of equal, re-basable and
non-re-basable bases, windows into spilled, spilled into windows and spilled into spilled, with
the specials and zero signs in each state.

Each group is summed in one compact accumulator with xc_add_n, a term at a time (rounded twice: xc_round must not
modify it; its header says whether it spilled and where its window ended), and split in two: the
first part into arrays A and D, the second (backwards) into B, all three filled with junk left
spilled and cleared with xc_clear_n (which must zero those spill regions). (b) A += B with
xc_merge_n, rounded with xc_round_into; (c) B through xc_pack_spills / xc_unpack_spills into
fresh arrays C, then C += D (the other direction). Both give the oracle's sum, B and D (merge
sources) still round to their parts' sums, the headers show every path was taken, and
xc_check_n and xc_unpack_spills refuse malformed input. The x86-64 executable runs where the
host is x86-64; the AArch64 one under qemu-aarch64."""
import os
import platform
import random
import struct
from fractions import Fraction

import pytest

from backend import run_exe
from conftest import require_tool

MAX = 0x7FEFFFFFFFFFFFFF                    # the largest finite double's bits
INF, NINF, QNAN, NEG0 = 0x7FF0 << 48, 0xFFF0 << 48, 0x7FF8 << 48, 1 << 63


def f2b(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def b2f(b: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", b))[0]


def units(b: int) -> int:
    """A finite double's exact value in units of 2^-1074."""
    n, d = b2f(b).as_integer_ratio()         # d: a power of two, at most 2^1074
    return n << (1075 - d.bit_length())


def round_units(s: int, ties: str = "even", overflow: str = "inf") -> int:
    """The bits of s * 2^-1074 (s != 0) rounded once to binary64: to nearest, ties as `ties`
    says (even; away from zero and toward zero are the mutants), a magnitude that rounds to
    2^1024 or more is an infinity (`overflow="clamp"`, the mutant, gives the largest double)."""
    sign = (1 << 63) if s < 0 else 0
    a = abs(s)
    if a < 1 << 53:                          # below 2^-1021: exact (subnormal or the first binade)
        return sign | a
    shift = a.bit_length() - 53
    q, r = a >> shift, a & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if r > half or (r == half and {"even": q & 1, "away": 1, "zero": 0}[ties]):
        q += 1
    if q == 1 << 53:
        q, shift = q >> 1, shift + 1
    biased = shift + 1                       # q's top bit has weight 2^(52 + shift - 1074)
    if biased >= 0x7FF:
        return sign | (INF if overflow == "inf" else MAX)
    return sign | (biased << 52) | (q - (1 << 52))


def python_rounding(s: int) -> int:
    """float(Fraction) is correctly rounded (nearest, ties to even) and raises OverflowError
    exactly when the rounded value would not be finite."""
    try:
        return f2b(float(Fraction(s, 1 << 1074)))
    except OverflowError:
        return INF if s > 0 else NINF


def expected(values, **mutant) -> int:
    finite = [b for b in values if (b >> 52) & 0x7FF != 0x7FF]
    special = [b for b in values if (b >> 52) & 0x7FF == 0x7FF]
    nan = any(b & ((1 << 52) - 1) for b in special)
    pinf, ninf = INF in special, NINF in special
    if nan or (pinf and ninf):
        return QNAN
    if pinf or ninf:
        return INF if pinf else NINF
    s = sum(units(b) for b in finite)
    if s == 0:
        return NEG0 if all(b == NEG0 for b in values) else 0
    return round_units(s, **mutant)


def rand_double(rnd, lo=0, hi=0x7FE) -> int:
    return (rnd.getrandbits(1) << 63) | (rnd.randint(lo, hi) << 52) | rnd.getrandbits(52)


def tie_cases() -> list[list[int]]:
    """Sums exactly halfway between two doubles: round down to an even mantissa, or up."""
    one, low = f2b(1.0), f2b(2.0 ** -1021)   # 2^-1021: the lowest binade with ties (ulp 2 units)
    sub = (1 << 52) - 1                      # the largest subnormal (bits = units)
    return [
        [one, f2b(2.0 ** -53)], [one, f2b(3 * 2.0 ** -53)],   # 1 + 2^-53 -> 1, 1 + 3*2^-53 -> up
        [f2b(-1.0), f2b(-(2.0 ** -53))], [f2b(-1.0), f2b(-3 * 2.0 ** -53)],
        [f2b(2.0 ** 53), one], [f2b(2.0 ** 53), f2b(3.0)],    # 2^53 + 1 -> 2^53, 2^53 + 3 -> up
        [f2b(2.0 ** 53 + 2), one],                            # -> 2^53 + 4
        [low, 1], [low, 3], [low + 2, 1],                     # 2^53 + 1, + 3, + 5 units
        [low | NEG0, 1 | NEG0],
        [sub, sub, 3], [sub, sub, 5], [sub | NEG0, sub | NEG0, 5 | NEG0],   # subnormal inputs
        [MAX - 1, f2b(2.0 ** 970)],                           # an even mantissa below overflow
        [MAX - 1 | NEG0, f2b(-(2.0 ** 970))],
        [MAX, f2b(2.0 ** 970)], [MAX | NEG0, f2b(-(2.0 ** 970))],   # odd: up, to infinity
        [f2b(2.0 ** 60), f2b(2.0 ** 7), f2b(2.0 ** 60), f2b(2.0 ** 7)],   # 2^61 + 2^8: down
        [f2b(2.0 ** 60), f2b(2.0 ** 60), f2b(2.0 ** 9), f2b(2.0 ** 8)],   # 2^61 + 768: up
    ] + [[one, f2b(2.0 ** -53), f2b(sign * 2.0 ** -k)]               # a tie but for a sticky
         for k in range(54, 1075, 3) for sign in (1, -1)]             # unit, at every distance


def near_ties(rnd) -> list[list[int]]:
    """Random halfway sums (q + 1/2) * 2^e units, q of 53 bits, split into random doubles; and
    the same a unit above and below."""
    out = []
    for _ in range(40):
        e = rnd.randint(1, 0x7FD)
        sign = rnd.choice((1, -1))
        tie = ((2 * ((1 << 52) | rnd.getrandbits(52)) + 1) << (e - 1))
        for delta in (0, 1, -1):
            out.append(split_exact(rnd, sign * (tie + delta)))
    return out


def split_exact(rnd, total: int) -> list[int]:
    """Doubles whose exact sum is `total` units: peel off its top 33 to 53 bits while any are
    left, plus a pair that cancels."""
    vals = []
    rest = total
    while rest:
        a = abs(rest)
        shift = max(0, min(a.bit_length() - 1, a.bit_length() - 53 + rnd.randint(0, 20)))
        piece = (a >> shift) << shift if rest > 0 else -((a >> shift) << shift)
        b = round_units(piece)
        assert units(b) == piece
        vals.append(b)
        rest -= piece
    x = rand_double(rnd)
    vals += [x, x ^ NEG0]
    rnd.shuffle(vals)
    return vals


XC_SPILLED, XC_SHIFT, XC_MAX_BASE, XS_DIGITS = 16, 8, 61, 66
M32 = (1 << 32) - 1


def finite_nonzero(b: int) -> bool:
    return (b >> 52) & 0x7FF != 0x7FF and b & ~NEG0 != 0


def digits_of(b: int) -> set[int]:
    """The digits (weight 2^(32k - 1074)) a finite term touches with nonzero values."""
    a = abs(units(b))
    return {k for k in range(XS_DIGITS) if (a >> (32 * k)) & M32}


def digit_span(values) -> int:
    """How many digits the finite nonzero terms' nonzero digits span (0: none)."""
    ks = set().union(*(digits_of(b) for b in values if finite_nonzero(b)))
    return max(ks) - min(ks) + 1 if ks else 0


def first_base(values) -> int | None:
    """The base of the window the first finite nonzero term opens: its lowest digit k, minus 1."""
    for b in values:
        if finite_nonzero(b):
            e = (b >> 52) & 0x7FF
            return min(max(((e - (e != 0)) >> 5) - 1, 0), XC_MAX_BASE)
    return None


def kind(h: int) -> str:
    return "spilled" if h & XC_SPILLED else ("window" if h >> XC_SHIFT else "empty")


def merge_kind(hd: int, hs: int, hm: int) -> str | None:
    """Which path a merge of src (header hs) into dst (hd) took (hm: dst's header after)."""
    kd, ks = kind(hd), kind(hs)
    if kd == ks == "window":
        if hd >> XC_SHIFT == hs >> XC_SHIFT:
            return "equal bases"
        return "not re-basable" if hm & XC_SPILLED else "re-based"
    return {("spilled", "spilled"): "both spilled", ("spilled", "window"): "window into spilled",
            ("window", "spilled"): "spilled into window"}.get((kd, ks))


def bit(u: int, sign: int = 1) -> int:
    """The double sign * 2^(u - 1074)."""
    return round_units(sign << u)


def short(rnd, u: int, sign: int = 1) -> int:
    """A double of 21 significant bits, the top one at unit u."""
    return round_units(sign * (((1 << 20) | rnd.getrandbits(20)) << (u - 20)))


def grow(rnd, a: int, beyond: bool) -> list[int]:
    """Same-sign terms whose magnitudes grow a few bits at a time from digit a until their
    digits span 5 (beyond: and one term more, spanning 6)."""
    sign = rnd.choice((1, -1))
    u = 32 * a + rnd.randint(0, 31)
    g: list[int] = []
    while True:
        cand = g + [short(rnd, u, sign)]
        if digit_span(cand) > 5:
            return cand if beyond else g
        g = cand
        u += rnd.randint(1, 7)


def designed(rnd):
    """(group, fixed split or None, tags) for the compact accumulators' paths. Tags: window (one
    accumulator must not spill), spill (must), up / down (its window ended above / below where
    it opened)."""
    out = []
    for _ in range(12):
        a = rnd.randint(2, 58)
        out.append((grow(rnd, a, False), None, {"window", "up"}))
        out.append((grow(rnd, a, False)[::-1], None, {"window", "down"}))
        out.append((grow(rnd, a, True), None, {"spill"}))           # a late spill
        out.append((grow(rnd, a, True)[::-1], None, {"spill"}))
    for _ in range(12):                       # spreads of just 5 digits and just 6
        a = rnd.randint(0, 59)
        lo, hi = 32 * a + rnd.randint(0, 31), 32 * (a + 4) + rnd.randint(0, 31)
        mid = rnd.sample(range(lo + 1, hi), 6)
        g = [bit(u, rnd.choice((1, -1))) for u in [lo, hi] + mid]
        rnd.shuffle(g)
        out.append((g, None, {"window"}))
        sign = rnd.choice((1, -1))
        g = [bit(u, sign) for u in [lo, hi + 32] + mid]
        rnd.shuffle(g)
        out.append((g, None, {"spill"}))
    for _ in range(8):
        a = rnd.randint(4, 40)
        far = a + rnd.randint(6, 24)
        g = [short(rnd, 32 * a + 10), short(rnd, 32 * far + 3)]
        g += [short(rnd, 32 * a + rnd.randint(0, 60), rnd.choice((1, -1))) for _ in range(10)]
        out.append((g, None, {"spill"}))                            # spilled at the second term
        g = [short(rnd, 32 * a + rnd.randint(0, 40), rnd.choice((1, -1))) for _ in range(30)]
        out.append((g + [short(rnd, 32 * far)], None, {"spill"}))   # spilled at the last
        x = short(rnd, 32 * a + 7)                                  # cancelled, then far away
        g = [x, x ^ NEG0, short(rnd, 32 * far + 5)] + [short(rnd, 32 * far + 9, -1)] * 3
        out.append((g, None, {"window"}))
        y = short(rnd, 32 * (a - 3) + 1)
        g = [x, y, x ^ NEG0, y ^ NEG0, short(rnd, 32 * far + 5)]
        out.append((g, None, {"window"}))
        # 2^(32d) in carry-save digits d + 1 and d (raw digits span 6 with the last term, 5
        # once normalized: the window moves down), and 2^(32d) as twice 2^(32d - 1) (up)
        d = a + 4
        g = [bit(32 * (d + 1)), round_units(-(M32 << (32 * d))), bit(32 * (d - 4) + 3)]
        out.append((g, None, {"window", "down"}))
        g = [bit(32 * d - 1), bit(32 * d - 1), bit(32 * (d + 4) + 20)]
        out.append((g, None, {"window", "up"}))
        # merged, the same carry-save digits fit only normalized: the source's in (b), the
        # destination's in (c) (one accumulator spills at the second term)
        g = [bit(32 * (d - 4) + 3), bit(32 * (d + 1)), round_units(-(M32 << (32 * d)))]
        out.append((g, 1, {"spill", "merged window"}))
    for _ in range(4):                        # a window at base 1 whose sum is below 2^53 units
        x = short(rnd, rnd.randint(64 + 52, 95 + 52), rnd.choice((1, -1)))
        y = round_units(rnd.choice((1, -1)) * (rnd.randint(1, (1 << 20) - 1) << 32))   # digit 1
        z = round_units(rnd.choice((1, -1)) * rnd.randint(1, M32))
        out += [([x, x ^ NEG0, y], None, {"window"}), ([x, y, x ^ NEG0, z], None, {"window"}),
                ([x, z, x ^ NEG0], None, {"window"})]
    for _ in range(5):                        # merges, the split fixed
        a = rnd.randint(2, 50)
        u = 32 * a + rnd.randint(0, 31)
        g = [short(rnd, u, rnd.choice((1, -1))) for _ in range(6)]
        out.append((g, 3, {"window"}))                              # equal bases
        g = [bit(u, rnd.choice((1, -1))) for u in rnd.sample(range(32 * a + 20, 32 * a + 32), 3)]
        g += [bit(u, rnd.choice((1, -1))) for u in rnd.sample(range(32 * a + 84, 32 * a + 96), 3)]
        out.append((g, 3, {"window"}))                              # bases a - 2 and a
        g = [short(rnd, 32 * a + 5), short(rnd, 32 * a + 9), short(rnd, 32 * (a + 10) + 5)]
        out.append((g, 2, {"spill"}))                               # windows too far apart
        sp = [short(rnd, 32 * a + 5), short(rnd, 32 * (a + 9) + 5, -1)]
        win = [short(rnd, 32 * (a + 4) + 9), short(rnd, 32 * (a + 4) + 12, -1)]
        out.append((sp + win, 2, {"spill"}))                        # spilled, then a window
        out.append((win + sp, 2, {"spill"}))
        out.append((sp + [short(rnd, 32 * a + 30), short(rnd, 32 * (a + 7), -1)], 2, {"spill"}))
    one, big, small = f2b(1.0), f2b(2.0 ** 1000), f2b(2.0 ** -1000)
    zero_spilled = [small, big, small ^ NEG0, big ^ NEG0]
    for g, split in [([one, INF], 1), ([INF, one], 1), ([small, big, NINF], 2),
                     ([NINF, small, big], 1), ([small, big, QNAN], 1), ([one, f2b(2.0), QNAN], 2),
                     (zero_spilled, 2), (zero_spilled, 1), ([NEG0] + zero_spilled, 1),
                     (zero_spilled + [NEG0], 4), ([NEG0, NEG0], 1), ([NEG0, one, one ^ NEG0], 1),
                     ([one, one ^ NEG0, NEG0], 2), ([one, one ^ NEG0, NEG0], 1),
                     ([INF, small, big], 1), ([small, big, NINF, INF], 2), ([1, 1 | NEG0], 1),
                     ([small, big, NEG0, INF ^ NEG0], 3), ([NEG0, small, big, NEG0], 3),
                     ([MAX, INF], 1), ([MAX, QNAN], 2), ([MAX ^ NEG0, NINF, MAX], 1),
                     ([MAX, INF, small, MAX ^ NEG0], 2)]:
        out.append((g, split, set()))
    return out


def cases(seed: int = 2025):
    rnd = random.Random(seed)
    groups = []
    for _ in range(250):                                   # the whole range
        groups.append([rand_double(rnd) for _ in range(rnd.randint(1, 40))])
    for _ in range(250):                                   # narrow ranges: rounding matters
        lo = rnd.randint(0, 0x7FE - 60)
        hi = lo + rnd.randint(0, 60)
        groups.append([rand_double(rnd, lo, hi) for _ in range(rnd.randint(1, 40))])
    for _ in range(60):                                    # subnormals and the first normals
        groups.append([rand_double(rnd, 0, 2) for _ in range(rnd.randint(1, 40))])
    for _ in range(60):                                    # x, -x pairs and a tiny value
        xs = [rand_double(rnd) for _ in range(rnd.randint(1, 15))]
        g = xs + [x ^ NEG0 for x in xs]
        if rnd.random() < 0.7:
            g.append(rand_double(rnd, 0, rnd.randint(0, 100)))
        rnd.shuffle(g)
        groups.append(g)
    groups += [[], [NEG0], [NEG0, NEG0, NEG0], [0], [NEG0, 0], [0, NEG0], [1, 1 | NEG0],
               [MAX, MAX | NEG0], [MAX, MAX | NEG0, 1], [f2b(1.0), f2b(-1.0), NEG0],
               [f2b(2.0 ** -1022) - 1, 1], [MAX, MAX], [MAX | NEG0, MAX | NEG0],
               [MAX, MAX, MAX | NEG0], [MAX, MAX, MAX | NEG0, MAX | NEG0],
               [MAX] * 40 + [MAX | NEG0] * 39, [MAX, f2b(2.0 ** 970), 1 | NEG0],
               [INF], [NINF], [INF, NINF], [QNAN], [0xFFF0000000000001], [0x7FF0000000000001],
               [INF, f2b(1.0)], [NINF, MAX, MAX], [INF, INF], [QNAN, INF], [NEG0, INF],
               [f2b(1.0), NINF, f2b(-1.0)], [NINF, QNAN | NEG0, INF]]
    ties = tie_cases() + near_ties(rnd)
    groups += ties
    perms = []                                             # (a group, the same in another order)
    tied = range(len(groups) - len(ties), len(groups))
    for i in [*range(40), *range(250, 290), *tied]:
        for _ in range(2):
            p = list(groups[i])
            rnd.shuffle(p)
            perms.append((i, len(groups)))
            groups.append(p)
    splits, tags = {}, {}
    for g, split, tag in designed(rnd):
        if split is not None:
            splits[len(groups)] = split
        tags[len(groups)] = tag
        groups.append(g)
    lo = rnd.randint(900, 1100)                            # a long group, with cancelling pairs of any size
    long = [rand_double(rnd, lo, lo + 40) for _ in range(100_000)]
    for _ in range(200):
        x = rand_double(rnd)
        long[rnd.randrange(len(long))] = x
        long[rnd.randrange(len(long))] = x ^ NEG0
    groups.append(long)
    return groups, ties, perms, splits, tags


def check_cases() -> list[tuple[list[int], int]]:
    """Compact accumulators (6 words) for xc_check_n, and whether each is well formed."""
    w = 8 | (5 << XC_SHIFT)                               # a window at base 4
    return [([0] * 6, 1), ([8] + [0] * 5, 1), ([15] + [0] * 5, 1), ([w, 1, -2, 3, 0, -1 << 62], 1),
            ([8 | (62 << XC_SHIFT)] + [7] * 5, 1), ([1 | (1 << XC_SHIFT) | 8] + [0] * 5, 1),
            ([8 | XC_SPILLED] + [0] * 5, 1), ([15 | XC_SPILLED] + [0] * 5, 1),
            ([w | 32] + [0] * 5, 0), ([w | 64] + [0] * 5, 0), ([w | 128] + [0] * 5, 0),
            ([w | (1 << 16)] + [0] * 5, 0), ([w | (1 << 63)] + [0] * 5, 0), ([0x20] + [0] * 5, 0),
            ([8 | (63 << XC_SHIFT)] + [0] * 5, 0), ([8 | (255 << XC_SHIFT)] + [0] * 5, 0),
            ([8 | XC_SPILLED | (1 << XC_SHIFT)] + [0] * 5, 0), ([8 | XC_SPILLED, 0, 0, 1, 0, 0], 0),
            ([8, 0, 0, 0, 0, 1], 0), ([0, 1, 0, 0, 0, 0], 0), ([1 << XC_SHIFT] + [0] * 5, 0),
            ([XC_SPILLED] + [0] * 5, 0), ([w | 16] + [1] * 5, 0)]


UNP_N, UNP_WORDS = 4, 2 + 4 * 6 + 4 * (1 + XS_DIGITS)


def unpack_cases(rnd) -> list[tuple[int, int, list[int], list[list[int]], int]]:
    """(n, count, 4 compact accumulators' words, records, the answer) for xc_unpack_spills:
    coordinates 0 and 2 spilled, 1 windowed, 3 empty (and beyond them a spilled guard, index 4)."""
    acc = [8 | XC_SPILLED, 0, 0, 0, 0, 0, 8 | (3 << XC_SHIFT), 5, 0, -7, 0, 0,
           8 | XC_SPILLED, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    digits = [[rnd.getrandbits(40) - (1 << 39) for _ in range(XS_DIGITS)] for _ in range(4)]

    def recs(*idx):
        return [[j] + digits[r] for r, j in enumerate(idx)]
    three = list(acc)
    three[18] = 8 | XC_SPILLED                            # coordinate 3 marked, without a record
    none = [0] * 24
    return [(4, 2, acc, recs(0, 2), 1), (4, 0, none, [], 1), (3, 2, acc, recs(0, 2), 1),
            (4, 2, acc, recs(0, 4), 0), (4, 2, acc, recs(-1, 2), 0), (4, 2, acc, recs(0, 1 << 40), 0),
            (4, 2, acc, recs(0, 0), 0), (4, 2, acc, recs(2, 0), 0), (4, 2, acc, recs(2, 2), 0),
            (4, 2, acc, recs(0, 1), 0), (4, 2, acc, recs(0, 3), 0), (4, 2, acc, recs(1, 2), 0),
            (4, 1, acc, recs(0), 0), (4, 1, acc, recs(2), 0), (4, 3, acc, recs(0, 2, 3), 0),
            (4, 2, three, recs(0, 2), 0), (4, 3, three, recs(0, 2, 3), 1),
            (2, 1, acc, recs(0), 1), (2, 2, acc, recs(0, 2), 0), (4, -1, acc, [], 0),
            (4, 0, acc, [], 0)]


MAIN = """
data vals: [i64] = extern;                  // every group's values (bits), one after another
data groups: [i64] = extern;                // (start, count, split) per group
data chk: [i64] = extern;                   // NCHK compact accumulators for xc_check_n
data unp: [i64] = extern;                   // NUNP cases of UNP_WORDS: n, count, 4 accumulators, 4 records
global one: [i64; XC_WORDS];
global onesp: [i64; XS_DIGITS];
global va: [i64; XC_WORDS * NG];
global vasp: [i64; XS_DIGITS * NG];
global vb: [i64; XC_WORDS * NG];
global vbsp: [i64; XS_DIGITS * NG];
global vc: [i64; XC_WORDS * NG];
global vcsp: [i64; XS_DIGITS * NG];
global vd: [i64; XC_WORDS * NG];
global vdsp: [i64; XS_DIGITS * NG];
global pk: [i64; XC_RECORD_WORDS * NG];
global outb: [f64; NG];
global outc: [f64; NG];
global srcb: [f64; NG];
global srcd: [f64; NG];
global ua: [i64; XC_WORDS * 5];           // 4 accumulators and a spilled guard
global usp: [i64; XS_DIGITS * 5];           // 4 regions and a guard

fn junk(acc: i64 writes 8 * XC_WORDS * n, sp: i64 writes 8 * XS_DIGITS * n, n: i64) {        // even coordinates left spilled, with junk digits
    let j = 0;
    while j < n {
        let h = (j + 1) * 0x9e3779b97f4a7c15;
        let a = acc + 8 * XC_WORDS * j;
        store64(a, h & ~XC_SPILLED);
        if (j & 1) == 0 {
            store64(a, h | XC_SPILLED);
            let k = 0;
            while k < XS_DIGITS {
                store64(sp + 8 * XS_DIGITS * j + 8 * k, h ^ (k + 1));
                k = k + 1;
            }
        }
        let i = 1;
        while i < XC_WORDS {
            store64(a + 8 * i, h + i);
            i = i + 1;
        }
        j = j + 1;
    }
}

fn or_words(p: i64, n: i64) -> i64 {
    let v = 0;
    let k = 0;
    while k < n {
        v = v | load64(p + 8 * k);
        k = k + 1;
    }
    return v;
}

fn show(v: i64) {
    rt_out_hex16(v);
    rt_out_byte(' ');
}

fn adds(acc: i64 writes 8 * XC_WORDS, sp: i64 writes 8 * XS_DIGITS, p: i64, from: i64, to: i64) {   // values from..to-1, or backwards
    let i = from;
    while i != to {
        if from < to {
            xc_add_n(acc, sp, p + 8 * i, 1);
            i = i + 1;
        } else {
            i = i - 1;
            xc_add_n(acc, sp, p + 8 * i, 1);
        }
    }
}

fn main(argc: i64, argv: i64) -> i64 {
    junk(va, vasp, NG);
    junk(vb, vbsp, NG);
    junk(vd, vdsp, NG);
    junk(one, onesp, 1);
    xc_clear_n(va, vasp, NG);
    xc_clear_n(vb, vbsp, NG);
    xc_clear_n(vd, vdsp, NG);
    show(or_words(vasp, XS_DIGITS * NG) | or_words(vbsp, XS_DIGITS * NG) |
        or_words(vdsp, XS_DIGITS * NG) | or_words(va, XC_WORDS * NG) |
        or_words(vb, XC_WORDS * NG) | or_words(vd, XC_WORDS * NG));
    rt_out_byte(10);
    let g = 0;
    while g < NG {
        let start = vals + 8 * load64(groups + 24 * g);
        let count = load64(groups + 24 * g + 8);
        let split = load64(groups + 24 * g + 16);
        xc_clear_n(one, onesp, 1);
        if or_words(onesp, XS_DIGITS) != 0 { return 3; }
        adds(one, onesp, start, 0, count);
        show(f2bits(xc_round(one, onesp)));
        show(f2bits(xc_round(one, onesp)));
        show(load64(one));
        rt_out_byte(10);
        adds(room(va, 8 * XC_WORDS * g, 8 * XC_WORDS, "buffer-bound"), room(vasp, 8 * XS_DIGITS * g, 8 * XS_DIGITS, "buffer-bound"), start, 0, split);
        adds(room(vd, 8 * XC_WORDS * g, 8 * XC_WORDS, "buffer-bound"), room(vdsp, 8 * XS_DIGITS * g, 8 * XS_DIGITS, "buffer-bound"), start, 0, split);
        adds(room(vb, 8 * XC_WORDS * g, 8 * XC_WORDS, "buffer-bound"), room(vbsp, 8 * XS_DIGITS * g, 8 * XS_DIGITS, "buffer-bound"), start, count, split);
        g = g + 1;
    }
    show(xc_check_n(va, NG));
    show(xc_check_n(vb, NG));
    show(xc_check_n(vd, NG));
    let records = xc_pack_spills(vb, vbsp, NG, pk);
    let k = 0;
    while k < XC_WORDS * NG {
        store64(vc + 8 * k, load64(vb + 8 * k));
        k = k + 1;
    }
    show(records);
    show(xc_check_n(vc, NG));
    show(xc_unpack_spills(vc, vcsp, NG, pk, records));
    rt_out_byte(10);
    g = 0;
    while g < NG {
        show(load64(va + 8 * XC_WORDS * g));
        show(load64(vb + 8 * XC_WORDS * g));
        rt_out_byte(10);
        g = g + 1;
    }
    xc_merge_n(va, vasp, vb, vbsp, NG);
    xc_merge_n(vc, vcsp, vd, vdsp, NG);
    xc_round_into(outb, va, vasp, NG);
    xc_round_into(outc, vc, vcsp, NG);
    xc_round_into(srcb, vb, vbsp, NG);
    xc_round_into(srcd, vd, vdsp, NG);
    g = 0;
    while g < NG {
        show(load64(outb + 8 * g));
        show(load64(outc + 8 * g));
        show(load64(va + 8 * XC_WORDS * g));
        show(load64(vc + 8 * XC_WORDS * g));
        show(load64(srcb + 8 * g));
        show(load64(srcd + 8 * g));
        rt_out_byte(10);
        g = g + 1;
    }
    show(xc_check_n(va, NG));
    show(xc_check_n(vc, NG));
    rt_out_byte(10);
    let c = 0;
    while c < NCHK {
        show(xc_check_n(chk + 8 * XC_WORDS * c, 1));
        c = c + 1;
    }
    rt_out_byte(10);
    c = 0;
    while c < NUNP {
        let u = unp + 8 * UNP_WORDS * c;
        k = 0;
        while k < XC_WORDS * 4 {
            store64(ua + 8 * k, load64(u + 16 + 8 * k));
            k = k + 1;
        }
        store64(ua + 8 * XC_WORDS * 4, XS_FLAG_NOT_NEG_ZERO | XC_SPILLED);
        k = 0;
        while k < XS_DIGITS * 5 {
            store64(usp + 8 * k, 0);
            k = k + 1;
        }
        show(xc_unpack_spills(ua, room(usp, 0, 8 * XS_DIGITS * load64(u), "buffer-bound"), load64(u),
                              u + 16 + 8 * XC_WORDS * 4, load64(u + 8)));
        k = 0;
        while k < 5 {
            show(or_words(usp + 8 * XS_DIGITS * k, XS_DIGITS));
            k = k + 1;
        }
        rt_out_byte(10);
        c = c + 1;
    }
    rt_flush();
    return 0;
}
"""


def words(values) -> bytes:
    return b"".join((v & ((1 << 64) - 1)).to_bytes(8, "little") for v in values)


def build(isa: str, tmp_path, groups, splits, unpacks, rnd):
    from alphac.build import link_program, runtime_items, target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    tgt = target(isa)
    consts = (f"const NG = {len(groups)};\nconst NCHK = {len(check_cases())};\n"
              f"const NUNP = {len(unpacks)};\nconst UNP_WORDS = {UNP_WORDS};\n")
    units_ = [("prelude.rt", rt.parse(tgt.prelude(), "prelude.rt"), False)]
    units_ += [(f"{m}.rt", list(runtime_items(m)), True) for m in rt.modules("core", runtime_items)]
    units_.append(("xsum.rt", list(runtime_items("xsum")), True))
    units_.append(("main.rt", rt.parse(consts + MAIN, "main.rt"), False))
    rt.check_modules(units_)                 # xsum.rt reads only its own items and the prelude
    table, at = [], 0
    for i, g in enumerate(groups):
        table += [at, len(g), splits.get(i, rnd.randint(0, len(g)))]
        at += len(g)
    unp = []
    for n, count, acc, recs, _ in unpacks:
        flat = [w for r in recs for w in r]
        unp += [n, count] + acc + flat + [0] * (4 * (1 + XS_DIGITS) - len(flat))
    blobs = {"vals": words([b for g in groups for b in g]), "groups": words(table),
             "chk": words([w for acc, _ in check_cases() for w in acc]), "unp": words(unp)}
    exe = tmp_path / f"xsum.{isa}"
    program = lower_program([it for _, items, _ in units_ for it in items], blobs,
                            generated=frozenset(id(it) for _, items, m in units_ if not m for it in items))
    exe.write_bytes(link_program(program, tgt)[0])
    os.chmod(exe, 0o755)
    return exe, table[2::3]


@pytest.fixture(scope="module")
def inputs():
    groups, ties, perms, splits, tags = cases()
    return groups, ties, perms, splits, tags, [expected(g) for g in groups]


def test_oracle_rounding_is_pythons_and_the_ties_and_overflow_are_not_vacuous(inputs):
    groups, ties, _, _, _, want = inputs
    for g, w in zip(groups, want):
        if all((b >> 52) & 0x7FF != 0x7FF for b in g) and any(b != NEG0 for b in g):
            s = sum(units(b) for b in g)
            assert w == (python_rounding(s) if s else 0), g[:5]
    big = 1 << 2098                           # 2^1024 in units
    assert round_units(big - (1 << 2044)) == INF == python_rounding(big - (1 << 2044))
    assert round_units(big - (1 << 2044) - 1) == MAX == python_rounding(big - (1 << 2044) - 1)
    for mutant in ({"ties": "away"}, {"ties": "zero"}):      # ties both ways, each decides
        assert any(expected(g, **mutant) != expected(g) for g in ties), mutant
    assert any(expected(g, overflow="clamp") != expected(g) for g in groups)
    assert sum(w in (INF, NINF) for w in want) >= 6 and want.count(QNAN) >= 5


def test_designed_groups_span_what_they_say(inputs):
    groups, _, _, splits, tags, _ = inputs
    for i, tag in tags.items():
        if "up" in tag or "down" in tag:
            assert 3 <= digit_span(groups[i]) <= 6, i
    assert sum(digit_span(groups[i]) == 5 for i, t in tags.items() if t == {"window"}) >= 12
    assert sum(digit_span(groups[i]) > 5 for i, t in tags.items() if t == {"window"}) >= 16
    assert sum(digit_span(groups[i]) == 6 for i, t in tags.items() if t == {"spill"}) >= 36
    assert len(splits) >= 45


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_runtime_exact_sum_equals_the_oracle(isa, tmp_path, inputs):
    if isa == "aarch64":
        require_tool("qemu-aarch64")
    elif platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 executables run only on an x86-64 host")
    groups, _, perms, splits, tags, want = inputs
    unpacks = unpack_cases(random.Random(11))
    exe, split_of = build(isa, tmp_path, groups, splits, unpacks, random.Random(7))
    r = run_exe(exe, target=isa, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    lines = [[int(h, 16) for h in line.split()] for line in r.stdout.splitlines()]
    ng = len(groups)
    assert len(lines) == 3 * ng + 4 + len(unpacks)
    assert lines[0] == [0]                    # cleared: every word, the junk spill regions too
    single = lines[1:1 + ng]
    checks, pairs = lines[1 + ng], lines[2 + ng:2 + 2 * ng]
    after = lines[2 + 2 * ng:2 + 3 * ng]
    partw = [(expected(g[:s]), expected(g[s:])) for g, s in zip(groups, split_of)]
    for name, got, w in (("one accumulator", [s[0] for s in single], want),
                         ("rounded again", [s[1] for s in single], want),
                         ("A += B", [a[0] for a in after], want),
                         ("C += D, C unpacked", [a[1] for a in after], want),
                         ("B after merging", [a[4] for a in after], [p[1] for p in partw]),
                         ("D after merging", [a[5] for a in after], [p[0] for p in partw])):
        wrong = [(i, hex(g), hex(v), [hex(b) for b in groups[i][:6]])
                 for i, (g, v) in enumerate(zip(got, w)) if g != v]
        assert not wrong, (name, len(wrong), wrong[:5])
    for i, j in perms:                       # implied by the oracle; said outright
        assert single[i][0] == single[j][0] == after[i][0] == after[j][0]

    # the headers: well formed, and every path taken
    heads = [s[2] for s in single] + [x for p in pairs for x in p] + [a[k] for a in after for k in (2, 3)]
    assert all(h & ~0xFF1F == 0 and h >> XC_SHIFT <= XC_MAX_BASE + 1 for h in heads)
    spilled = [bool(s[2] & XC_SPILLED) for s in single]
    nspilled_b = sum(bool(hb & XC_SPILLED) for _, hb in pairs)
    assert checks == [1, 1, 1, nspilled_b, 1, 1] and lines[2 + 3 * ng] == [1, 1]
    assert sum(spilled) >= 150 and ng - sum(spilled) >= 500, sum(spilled)
    moved = {"up": 0, "down": 0}
    for i, (g, s) in enumerate(zip(groups, single)):
        h, b0 = s[2], first_base(g)
        assert (kind(h) == "empty") == (b0 is None and not spilled[i]), i
        if digit_span(g) <= 5:                # a window holds it: never spilled
            assert not spilled[i] and not pairs[i][0] & XC_SPILLED and not pairs[i][1] & XC_SPILLED
            assert not after[i][2] & XC_SPILLED and not after[i][3] & XC_SPILLED, i
        elif len({b >> 63 for b in g if finite_nonzero(b)}) == 1 and "window" not in tags.get(i, ()):
            assert spilled[i], i              # same signs spanning more than 5 digits
        tag = tags.get(i, set())
        if "window" in tag:
            assert not spilled[i], i
        if "spill" in tag:
            assert spilled[i], i
        if "merged window" in tag:
            assert kind(after[i][2]) == kind(after[i][3]) == "window", i
        ks = {((b >> 52) & 0x7FF) - ((b >> 52) & 0x7FF != 0) >> 5 for b in g if finite_nonzero(b)}
        if len(ks) == 1 and not spilled[i]:   # one lowest digit k: the window opened at k - 1
            assert h >> XC_SHIFT == b0 + 1, i
        if kind(h) == "window" and b0 is not None and h >> XC_SHIFT != b0 + 1:
            moved["up" if h >> XC_SHIFT > b0 + 1 else "down"] += 1
            assert not ({"up", "down"} - {"up" if h >> XC_SHIFT > b0 + 1 else "down"}) & tag, i
        elif tag & {"up", "down"}:
            assert False, ("a window that should have moved", i)
    assert min(moved.values()) >= 15, moved
    print(isa, f"{sum(spilled)} of {ng} spilled", moved)
    paths_b, paths_c = {}, {}
    for (ha, hb), a in zip(pairs, after):
        for paths, key in ((paths_b, merge_kind(ha, hb, a[2])), (paths_c, merge_kind(hb, ha, a[3]))):
            paths[key] = paths.get(key, 0) + 1
    for paths in (paths_b, paths_c):
        for key in ("equal bases", "re-based", "not re-basable", "window into spilled",
                    "spilled into window", "both spilled"):
            assert paths.get(key, 0) >= 3, (key, paths)
    print("merges (b)", paths_b, "(c)", paths_c)

    # refusals: malformed headers, and spill records that do not match them
    assert lines[3 + 3 * ng] == [ok for _, ok in check_cases()]
    for (n, count, acc, recs, ok), got in zip(unpacks, lines[4 + 3 * ng:]):
        if not ok:
            assert got == [0] * 6, (n, count, [r[0] for r in recs])
        else:
            marked = {r[0] for r in recs}
            assert got[0] == 1 and [bool(x) for x in got[1:]] == [q in marked for q in range(5)]
