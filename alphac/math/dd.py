"""Double-double arithmetic and the rounding test of the fast paths, in the staging language.

There is no fused multiply-add in the contract, so exact products come from Veltkamp's
splitting and Dekker's product; every operation below is plain binary64 `+ - *` (round to
nearest even), so it means the same on every backend.

    two_sum(a, b)        (s, t): s = fl(a + b), s + t = a + b exactly (Knuth, 6 operations)
    fast_two_sum(a, b)   the same for |a| >= |b| or a = 0 (Dekker, 3 operations)
    split(a)             (h, l): a = h + l, h with at most 26 significant bits, l with 26
                         (Veltkamp, C = 2^27 + 1; |a| < 2^995 so C a does not overflow)
    two_prod(a, b)       (p, e): p = fl(a b), p + e = a b exactly, no underflow assumed
                         (Dekker); two_prod_split when b's split is a table's

rounded(m, h, l, err) is Ziv's rounding test: y = h + l approximates a value Y with
|Y - y| < err/2, |l| <= 2^-40 |h| and err >= 2^-90 |h|. Let a = fl(h + fl(l + err)) and
b = fl(h + fl(l - err)). The roundings of l +- err are at most 2^-53 (|l| + err) < err/2, so
fl(l - err) <= Y - h <= fl(l + err), and rounding to nearest is monotone, so b <= RN(Y) <= a.
If a = b, RN(Y) = a: the fast path's answer is the correct rounding. rounded returns (ok, a)
with ok = 1 when a = b; the caller takes the accurate path otherwise. Callers pass err at least
twice their proven error bound.

Requires: a backend of alphac.math.dsl. Guarantees: exactness as stated, on every backend.
"""
from __future__ import annotations

SPLITTER = 134217729.0                  # 2^27 + 1


def two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


def split(a):
    c = a * SPLITTER
    h = c - (c - a)
    return h, a - h


def two_prod_split(a, ah, al, b, bh, bl):
    p = a * b
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def two_prod(a, b):
    ah, al = split(a)
    bh, bl = split(b)
    return two_prod_split(a, ah, al, b, bh, bl)


def square(a):
    ah, al = split(a)
    p = a * a
    return p, ((ah * ah - p) + 2.0 * (ah * al)) + al * al


# MODE is "test" except in the builds tests/test_math.py makes: "raw" is the mutant whose fast
# paths return fl(h + l) without the rounding test (the hardest cases must catch it);
# "accurate" fails every test, so that the accurate paths alone answer (and are checked alone).
MODE = "test"


def rounded(m, h, l, err):
    """(ok, a): ok = 1 when the rounding test decides RN(Y) = a (module doc)."""
    if MODE == "raw":
        return m.i(1), h + l
    a = h + (l + err)
    b = h + (l - err)
    if MODE == "accurate":
        return m.i(0), a
    return a.bits().eq(b.bits()), a
