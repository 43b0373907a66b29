"""Exact sums rounded once: the `exact_sum` contract in the reference interpreter.

Under `contract exact_sum` each gradient coordinate's sum over a step's samples (and the loss
sum) is the exact real sum of the per-sample terms, rounded once to binary64 (to nearest, ties
to even). No order or grouping of the terms changes it, so every owner count, combine tree and
strategy gives the single process's bits. The executables compute it with fixed-point
accumulators (`alphac/runtime/xsum.rt`); this module is the interpreter's own route, written
independently of them:

- an owner's exact partial sum is the multiset of its terms, `Terms` (one row per sample, one
  column per coordinate: nothing is rounded before the end); combining two is a concatenation;
- `round_columns` rounds each column's exact sum with `math.fsum` (exact partials, rounded once,
  to nearest even), falling back to Python integers when an intermediate overflows, and applies
  the contract's special cases itself: a NaN term, or both infinities, give the quiet NaN
  0x7ff8000000000000; one infinity gives it; an exact zero is -0.0 when every term is -0.0 (or
  there is none: the sum's identity), else +0.0.

Requires: float64 terms. Guarantees: the correctly rounded exact sum, independent of row order.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np

NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000))[0]   # the contract's NaN
NEG_ZERO = np.uint64(0x8000000000000000)


def exact_round(terms: list[float]) -> float:
    """One finite list's exact sum, rounded once (no special values among the terms)."""
    try:
        return math.fsum(terms)
    except OverflowError:                    # an intermediate overflowed: integers, exactly
        total = sum(Fraction(t) for t in terms)
        try:
            return total.numerator / total.denominator      # correctly rounded, raises on overflow
        except OverflowError:
            return math.copysign(math.inf, total)


def round_columns(rows: np.ndarray) -> list[float]:
    """Each column's exact sum of the rows, rounded once, with the contract's special cases."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError("terms are a 2-D array")
    k, n = rows.shape
    if k == 0:
        return [-0.0] * n
    bits = rows.view(np.uint64)
    negzero = (bits == NEG_ZERO).all(axis=0)
    nan = np.isnan(rows).any(axis=0)
    pinf = (rows == np.inf).any(axis=0)
    ninf = (rows == -np.inf).any(axis=0)
    out: list[float] = []
    for j, col in enumerate(rows.T.tolist()):
        if nan[j] or (pinf[j] and ninf[j]):
            out.append(NAN)
        elif pinf[j]:
            out.append(math.inf)
        elif ninf[j]:
            out.append(-math.inf)
        elif negzero[j]:
            out.append(-0.0)
        else:
            v = exact_round(col)
            out.append(0.0 if v == 0 else v)
    return out


def exact_total(terms) -> float:
    """One list's exact sum rounded once, with the contract's special cases (round_columns)."""
    return round_columns(np.asarray(terms, dtype=np.float64).reshape(-1, 1))[0]


class Terms:
    """An exact partial sum: the terms themselves, one row per sample (every param's coordinates
    in declaration order, flattened), not yet rounded."""
    __slots__ = ("rows", "layout")

    def __init__(self, rows: np.ndarray, layout: tuple[tuple[str, int], ...]):
        self.rows, self.layout = rows, layout

    @classmethod
    def of(cls, lr, rows: np.ndarray) -> "Terms":
        """Rows of a learner's per-sample gradients (its params in declaration order)."""
        return cls(rows, tuple((p.name, p.size) for p in lr.params))

    def merged(self, other: "Terms") -> "Terms":
        return Terms(np.concatenate([self.rows, other.rows]), self.layout)

    def rounded(self) -> dict[str, tuple[float, ...]]:
        flat = round_columns(self.rows)
        out, base = {}, 0
        for name, size in self.layout:
            out[name] = tuple(flat[base:base + size])
            base += size
        return out
