"""The numerical contract's operations, on Python floats (IEEE 754 binary64).

Python's `+ - *` on floats are single correctly rounded binary64 operations (round to nearest,
ties to even); `/` and `math.sqrt` are too, except that Python raises where IEEE returns an
infinity or NaN. `div` and `sqrt` here give the IEEE results instead. This table is the one
definition of each operation used by constant folding and the reference interpreter; the tests'
oracle deliberately does not import it.

`div_array` and `sqrt_array` are `div` and `sqrt` elementwise on numpy float64 arrays (numpy's
float64 add, subtract, multiply, divide and sqrt ufuncs are the same single IEEE operations per
element, with no fused multiply-add; the vectorized interpreter uses them directly).

Guarantees: each function performs exactly one rounding; none raises on any float input.
"""
from __future__ import annotations

import math
import struct

INF = float("inf")
NAN = float("nan")


def add(a: float, b: float) -> float:
    return a + b


def sub(a: float, b: float) -> float:
    return a - b


def mul(a: float, b: float) -> float:
    return a * b


def div(a: float, b: float) -> float:
    if b != 0.0:
        try:
            return a / b
        except OverflowError:               # cannot happen on IEEE hosts; kept for safety
            return math.copysign(INF, a) * math.copysign(1.0, b)
    if a != a or a == 0.0:
        return NAN
    return math.copysign(INF, a) * math.copysign(1.0, b)


def sqrt(a: float) -> float:
    if a != a or a < 0.0:
        return NAN if a != 0.0 else a
    return math.sqrt(a)


def neg(a: float) -> float:
    return -a


def div_array(a, b):
    """`div` on numpy float64 arrays: the IEEE quotient, and `div`'s NaN where b is zero."""
    import numpy as np
    q = np.divide(a, b)
    zero = np.asarray(b) == 0.0
    if np.any(zero):
        q = np.where(zero & ((a != a) | (np.asarray(a) == 0.0)), NAN, q)
    return q


def sqrt_array(a):
    """`sqrt` on numpy float64 arrays (numpy's square root is IEEE's, correctly rounded)."""
    import numpy as np
    return np.where((a != a) | (np.asarray(a) < 0.0), NAN, np.sqrt(a))


BINARY = {"add": add, "sub": sub, "mul": mul, "div": div}
UNARY = {"neg": neg, "sqrt": sqrt}


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def hex16(x: float) -> str:
    """The LEARNERS.md printing of a value: 16 lowercase hex digits of its bit pattern."""
    return f"{bits(x):016x}"
