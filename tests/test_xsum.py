"""The runtime's exact binary64 sum (alphac/runtime/xsum.rt, the `exact_sum` contract) against an
exact oracle, on both ISAs: the exact sum of each group's values is an integer in units of
2^-1074 (Fraction), rounded once to nearest, ties to even, with IEEE overflow, by the test itself
and cross-checked against Python's correctly rounded float(Fraction). Cases: random doubles over
the whole exponent range (subnormals, the largest finite values, mixed signs) and in narrow
ranges, cancellation to a tiny value and to exactly zero, the zero signs, exact ties in both
directions (from the lowest binade that has ties to just below overflow), overflow and a sum
that comes back under, infinities and NaNs, permutations of one multiset, and 100,000 values in
one accumulator. Each group is summed in one accumulator (rounded twice: xs_round must not
modify it) and, split in two accumulators of two vectors (the second part added backwards),
merged with xs_merge_n and rounded with xs_round_into. The x86-64 executable runs where the host
is x86-64; the AArch64 one under qemu-aarch64."""
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
    lo = rnd.randint(900, 1100)                            # a long group, with cancelling pairs of any size
    long = [rand_double(rnd, lo, lo + 40) for _ in range(100_000)]
    for _ in range(200):
        x = rand_double(rnd)
        long[rnd.randrange(len(long))] = x
        long[rnd.randrange(len(long))] = x ^ NEG0
    groups.append(long)
    return groups, ties, perms


MAIN = """
data vals: [i64] = extern;                  // every group's values (bits), one after another
data groups: [i64] = extern;                // (start, count, split) per group
global one: [i64; XS_WORDS];
global va: [i64; XS_WORDS * NG];
global vb: [i64; XS_WORDS * NG];
global out: [f64; NG];

fn main(argc: i64, argv: i64) -> i64 {
    let k = 0;
    while k < XS_WORDS * NG {                // not zero: xs_clear_n must clear
        store64(va + 8 * k, k * 0x9e3779b97f4a7c15);
        store64(vb + 8 * k, -k);
        k = k + 1;
    }
    xs_clear_n(va, NG);
    xs_clear_n(vb, NG);
    let g = 0;
    while g < NG {
        let start = vals + 8 * load64(groups + 24 * g);
        let count = load64(groups + 24 * g + 8);
        let split = load64(groups + 24 * g + 16);
        xs_clear(one);
        let i = 0;
        while i < count {
            xs_add(one, bits2f(load64(start + 8 * i)));
            i = i + 1;
        }
        rt_out_hex16(f2bits(xs_round(one)));
        rt_out_byte(' ');
        rt_out_hex16(f2bits(xs_round(one)));
        rt_out_byte(10);
        let a = va + 8 * XS_WORDS * g;
        i = 0;
        while i < split {
            xs_add(a, bits2f(load64(start + 8 * i)));
            i = i + 1;
        }
        a = vb + 8 * XS_WORDS * g;
        i = count - 1;
        while i >= split {
            xs_add(a, bits2f(load64(start + 8 * i)));
            i = i - 1;
        }
        g = g + 1;
    }
    xs_merge_n(va, vb, NG);
    xs_round_into(out, va, NG);
    g = 0;
    while g < NG {
        rt_out_hex16(load64(out + 8 * g));
        rt_out_byte(10);
        g = g + 1;
    }
    rt_flush();
    return 0;
}
"""


def words(values) -> bytes:
    return b"".join((v & ((1 << 64) - 1)).to_bytes(8, "little") for v in values)


def build(isa: str, tmp_path, groups, rnd):
    from alphac.build import link_program, runtime_items, target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    tgt = target(isa)
    units_ = [("prelude.rt", rt.parse(tgt.prelude(), "prelude.rt"), False)]
    units_ += [(f"{m}.rt", list(runtime_items(m)), True) for m in rt.modules("core", runtime_items)]
    units_.append(("xsum.rt", list(runtime_items("xsum")), True))
    units_.append(("main.rt", rt.parse(f"const NG = {len(groups)};\n" + MAIN, "main.rt"), False))
    rt.check_modules(units_)                 # xsum.rt reads only its own items and the prelude
    table, at = [], 0
    for g in groups:
        table += [at, len(g), rnd.randint(0, len(g))]
        at += len(g)
    blobs = {"vals": words([b for g in groups for b in g]), "groups": words(table)}
    exe = tmp_path / f"xsum.{isa}"
    program = lower_program([it for _, items, _ in units_ for it in items], blobs)
    exe.write_bytes(link_program(program, tgt)[0])
    os.chmod(exe, 0o755)
    return exe


@pytest.fixture(scope="module")
def inputs():
    groups, ties, perms = cases()
    return groups, ties, perms, [expected(g) for g in groups]


def test_oracle_rounding_is_pythons_and_the_ties_and_overflow_are_not_vacuous(inputs):
    groups, ties, _, want = inputs
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


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_runtime_exact_sum_equals_the_oracle(isa, tmp_path, inputs):
    if isa == "aarch64":
        require_tool("qemu-aarch64")
    elif platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 executables run only on an x86-64 host")
    groups, _, perms, want = inputs
    r = run_exe(build(isa, tmp_path, groups, random.Random(7)), target=isa, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert len(lines) == 2 * len(groups)
    single = [tuple(int(h, 16) for h in line.split()) for line in lines[:len(groups)]]
    merged = [int(h, 16) for h in lines[len(groups):]]
    for name, got in (("one accumulator", [a for a, _ in single]),
                      ("rounded again", [b for _, b in single]), ("split and merged", merged)):
        wrong = [(i, hex(g), hex(w), [hex(b) for b in groups[i][:6]])
                 for i, (g, w) in enumerate(zip(got, want)) if g != w]
        assert not wrong, (name, len(wrong), wrong[:5])
    for i, j in perms:                       # implied by the oracle; said outright
        assert single[i][0] == single[j][0] == merged[i] == merged[j]
