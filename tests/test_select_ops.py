"""Every LIR operation through both instruction selectors, against plain Python.

One runtime-language program (built here, with the real core runtime) prints one 64-bit pattern a
line: integer and binary64 operations on values the compiler cannot fold (umulh with the top bits
set, fgt on NaNs, infinities, signed zeros and subnormals), every immediate shape (bitmask,
movz/movn/movk, add/sub imm12 and lsl #12, negative compares), every load/store width at offsets
that take each addressing form, prefetches at those offsets and at unmapped addresses (a hint
never faults), calls whose arguments form move cycles, functions with an odd
number of callee-saved registers, and one with hundreds of values live across calls (spills,
slot-to-slot moves, umulh, fgt, ror32 and bswap32 on spilled operands, a frame over 4 KiB). The
expected lines are computed in Python (the SHA-256 operations are run against hashlib by
tests/test_sha256.py). The x86-64 executable runs where the host is x86-64; the AArch64 one
under qemu-aarch64.
"""
import math
import platform
import struct
import subprocess

import pytest
from conftest import require_tool

M = (1 << 64) - 1
X, Y, Z, S = 0x0123456789ABCDEF, -1234567, 7, 13
P, Q, R = 1.5, -0.1, 3.0
NAN, INF, TINY = math.nan, math.inf, 5e-324        # TINY: the least subnormal
FSEEDS = {"p": P, "q": Q, "r": R, "nan": NAN, "inf": INF, "tiny": TINY}


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def sdiv(a, b):
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


U = lambda v: v & M                    # noqa: E731  (the unsigned view)


def ror32(v, k):
    v &= 0xFFFFFFFF
    return ((v >> k) | (v << (32 - k))) & 0xFFFFFFFF


def ror64(v, k):
    v &= M
    return ((v >> k) | (v << (64 - k))) & M


def bswap32(v):
    return int.from_bytes((v & 0xFFFFFFFF).to_bytes(4, "little"), "big")


def umulh(a, b):
    return (U(a) * U(b)) >> 64


INT_CASES = [
    ("x + 4095", X + 4095), ("x + 20480", X + 20480), ("x + 8384512", X + 0x7FF000),
    ("x + -5", X - 5), ("x - 4095", X - 4095), ("x - -7", X + 7), ("x + 123456789", X + 123456789),
    ("x - 8384512", X - 0x7FF000), ("x & 0xFF00", X & 0xFF00),
    ("x | 0x5555555555555555", X | 0x5555555555555555), ("x ^ -1", ~X), ("x & 0x123456", X & 0x123456),
    ("x * 1000003", X * 1000003), ("x * y", X * Y), ("x & y", X & Y), ("x | y", X | Y),
    ("x ^ y", X ^ Y), ("x + y", X + Y), ("x - y", X - Y), ("y - x", Y - X),
    ("x << 7", X << 7), ("x >> 9", X >> 9), ("sar(y, 3)", Y >> 3), ("sar(x, z)", X >> Z),
    ("x << s", X << S), ("y >> s", U(Y) >> S), ("sar(y, s)", Y >> S), ("y << 63", Y << 63),
    ("y >> 0", Y), ("udiv(x, z)", X // Z), ("urem(x, z)", X % Z), ("udiv(y, z)", U(Y) // Z),
    ("urem(y, z)", U(Y) % Z), ("y / z", sdiv(Y, Z)), ("y % z", Y - sdiv(Y, Z) * Z),
    ("x / y", sdiv(X, Y)), ("x % y", X - sdiv(X, Y) * Y), ("-x", -X), ("~y", ~Y),
    ("x < y", X < Y), ("y < 0", Y < 0), ("y < -5", Y < -5), ("y > -2000000", Y > -2000000),
    ("x == 81985529216486895", X == 81985529216486895), ("ult(y, x)", U(Y) < X), ("ult(x, y)", X < U(Y)),
    ("x >= 4096", X >= 4096), ("x != y", X != Y), ("y <= -1234567", Y <= -1234567),
    ("ult(x, 0x7000000000000000)", X < 0x7000000000000000), ("y == -1234567", True),
    ("z >= -4095", True), ("ult(z, 4096)", True), ("z > 4096", False), ("!z", False),
    ("umulh(x, y)", umulh(X, Y)), ("umulh(y, x)", umulh(Y, X)), ("umulh(y, y)", umulh(Y, Y)),
    ("umulh(x, x)", umulh(X, X)), ("umulh(x, z)", umulh(X, Z)), ("umulh(y, -1)", umulh(Y, -1)),
    ("umulh(-1, -1)", umulh(-1, -1)), ("umulh(s, 0x8000000000000000)", umulh(S, 1 << 63)),
    ("ror32(x, 7)", ror32(X, 7)), ("ror32(y, 1)", ror32(Y, 1)), ("ror32(y, 31)", ror32(Y, 31)),
    ("ror32(x + y, 25) ^ ror32(x, 13)", ror32(X + Y, 25) ^ ror32(X, 13)), ("bswap32(x)", bswap32(X)),
    ("bswap32(y)", bswap32(Y)), ("bswap32(ror32(y, 8))", bswap32(ror32(Y, 8))),
    ("ror64(x, 35)", ror64(X, 35)), ("ror64(y, 1)", ror64(Y, 1)), ("ror64(y, 63)", ror64(Y, 63)),
    ("ror64(x ^ y, 35) * 1000003", ror64(X ^ Y, 35) * 1000003), ("ror64(ror32(y, 3), 32)", ror64(ror32(Y, 3), 32)),
]
# fgt is Python's float >: ordered (false when either side is a NaN), +0.0 and -0.0 equal
FGT_CASES = [
    ("fgt(p, q)", P > Q), ("fgt(q, p)", Q > P), ("fgt(p, p)", P > P), ("fgt(p, 1.5)", P > 1.5),
    ("fgt(0.0, -0.0)", 0.0 > -0.0), ("fgt(-0.0, 0.0)", -0.0 > 0.0),
    ("fgt(p - p, -(p - p))", (P - P) > -(P - P)),
    ("fgt(nan, p)", NAN > P), ("fgt(p, nan)", P > NAN), ("fgt(nan, nan)", NAN > NAN),
    ("fgt(-nan, q)", -NAN > Q), ("fgt(q, -nan)", Q > -NAN),
    ("fgt(inf, nan)", INF > NAN), ("fgt(nan, -inf)", NAN > -INF),
    ("fgt((p - p) / (p - p), q)", NAN > Q),       # 0/0: a NaN (Python raises instead)
    ("fgt(inf, 1e300)", INF > 1e300), ("fgt(1e300, inf)", 1e300 > INF),
    ("fgt(inf, inf)", INF > INF), ("fgt(inf, -inf)", INF > -INF),
    ("fgt(q, -inf)", Q > -INF), ("fgt(-inf, q)", -INF > Q),
    ("fgt(tiny, 0.0)", TINY > 0.0), ("fgt(0.0, tiny)", 0.0 > TINY),
    ("fgt(-0.0, -tiny)", -0.0 > -TINY), ("fgt(-tiny, -0.0)", -TINY > -0.0),
    ("fgt(tiny * 2.0, tiny)", TINY * 2.0 > TINY), ("fgt(tiny, bits2f(1))", TINY > TINY),
    # fge is Python's float >=: equal operands (-0.0 and +0.0, infinities) hold, a NaN never
    ("fge(p, q)", P >= Q), ("fge(q, p)", Q >= P), ("fge(p, p)", True), ("fge(0.0, -0.0)", True),
    ("fge(-0.0, 0.0)", True), ("fge(nan, p)", False), ("fge(p, nan)", False), ("fge(nan, nan)", False),
    ("fge(inf, inf)", True), ("fge(-inf, q)", -INF >= Q), ("fge(q, -inf)", True),
    ("fge(tiny, 0.0)", True), ("fge(0.0, tiny)", False), ("fge(inf, nan)", False),
]
CONSTANTS = [0, 1, -1, 4095, 0xFFFF0000, 0x5555555555555555, 0x0000FFFF0000FFFF,
             0xFFFF1234FFFFFFFF, -123456789, 0x8000000000000000, 0x123456789ABCDEF0,
             0x0001000000000000, 0xFFFFFFFFFFFF0000 + 0x1234]
BRANCHES = [("y < -5", Y < -5), ("x > 4095", X > 4095), ("z == 7", True), ("ult(y, 5)", False),
            ("z != -7", True), ("y >= x", Y >= X), ("z <= 0x100000000", True),
            ("fgt(r, p)", R > P), ("fgt(q, nan)", Q > NAN), ("fge(r, r)", True), ("fge(nan, q)", False),
            ("umulh(y, y) == 0", umulh(Y, Y) == 0)]
FLOAT_CASES = [
    ("p + q", P + Q), ("p - q", P - Q), ("q - p", Q - P), ("p * q", P * Q), ("p / q", P / Q),
    ("q / p", Q / P), ("sqrt(r)", math.sqrt(R)), ("-q", -Q), ("i2f(y)", float(Y)), ("i2f(x)", float(X)),
    ("bits2f(x)", struct.unpack("<d", X.to_bytes(8, "little"))[0]), ("0.0", 0.0), ("-0.0", -0.0),
    ("1e300", 1e300), ("p * q + r", P * Q + R), ("r - p * q", R - P * Q),
    ("(p + q) * (p - q)", (P + Q) * (P - Q)), ("fret(q, p)", P - Q),
    # a load read once as the second operand: folded into the operation on x86-64
    ("r - loadf(seeds + 32)", R - P), ("q / loadf(seeds + 40) * loadf(seeds + 48)", Q / Q * R),
    ("p + loadf(seeds + 8 * (z - 2))", P + Q), ("r * loadf(seeds + 8 * (z - 3))", R * P),
]
# f64x2: each lane is the scalar operation on that lane. va = (p, q), vb = (r, nan), vc = (inf, tiny)
VA, VB, VC = (P, Q), (R, NAN), (INF, TINY)


def lanes(f, *vs):
    return tuple(f(*(v[k] for v in vs)) for k in (0, 1))


VEC_CASES = [
    ("va + vb", lanes(lambda a, b: a + b, VA, VB)), ("vb - va", lanes(lambda a, b: a - b, VB, VA)),
    ("va * vc", lanes(lambda a, b: a * b, VA, VC)), ("va / vb", lanes(lambda a, b: a / b, VA, VB)),
    ("vc / va", lanes(lambda a, b: a / b, VC, VA)), ("sqrtv(vc)", lanes(math.sqrt, VC)),
    ("-va", lanes(lambda a: -a, VA)), ("-vb", lanes(lambda a: -a, VB)),
    ("splat(q) * va", lanes(lambda a: Q * a, VA)), ("vc - splat(tiny)", lanes(lambda a: a - TINY, VC)),
    ("pack(q, r) * va", (Q * P, R * Q)), ("pack(lane(vc, 1), lane(va, 0)) - vb", (TINY - R, P - NAN)),
    ("(va + vc) * (va - vc) / vb", lanes(lambda a, c, b: (a + c) * (a - c) / b, VA, VC, VB)),
]
# f64x2's lanes as 64-bit integers (the q builtins: SSE2, VEX, EVEX on xmm16-31, NEON)
Q_CASES = [("qadd(va, vb)", (VA, VB), lambda a, b: a + b), ("qsub(vc, va)", (VC, VA), lambda a, b: a - b),
           ("qand(va, vb)", (VA, VB), lambda a, b: a & b), ("qor(vb, vc)", (VB, VC), lambda a, b: a | b),
           ("qxor(va, vc)", (VA, VC), lambda a, b: a ^ b), ("qshl(vb, 1)", (VB,), lambda a: a << 1),
           ("qshr(vc, 63)", (VC,), lambda a: a >> 63),
           ("qshr(qsub(va, vb), 11)", (VA, VB), lambda a, b: U(a - b) >> 11)]
VSTORES = [0, 8, 24, -16, 4104, 65520, 60008]      # b + off: scaled, unscaled and far offsets
NVEC = 24


def vpress_source() -> str:
    """NVEC f64x2 values live across a call (so spilled: no call keeps 16 bytes of a register)."""
    src = ["global vpair: [f64; 2];", "fn vpress_sum(pa: f64, pb: f64) -> f64 {",
           "    storef(vpair, pa);", "    storef(vpair + 8, pb);", "    let va = loadv(vpair);"]
    src += [f"    let w{k} = va * splat({float(k + 1)!r}) + splat(pb);" for k in range(NVEC)]
    src += ["    nop();", "    let acc = splat(0.0);"]
    src += [f"    acc = acc + w{k};" for k in range(NVEC)]
    src += ["    return lane(acc, 0) - lane(acc, 1);", "}"]
    return "\n".join(src) + "\n"


def vpress(pa, pb):
    acc = [0.0, 0.0]
    for k in range(NVEC):
        for i, a in enumerate((pa, pb)):
            acc[i] = acc[i] + (a * float(k + 1) + pb)
    return acc[0] - acc[1]


BASE = 300                      # b = buf + BASE, so that negative offsets stay inside buf
STORES = [("store64", 0, "x"), ("store32", 9, "y"), ("store16", 15, "x"), ("store8", -3, "y"),
          ("store64", -16, "y"), ("store64", 60000, "x"), ("store8", 65000, "x"),
          ("store16", 8190, "x"), ("store16", 8192, "y"), ("store32", 16380, "x"),
          ("store32", 16384, "y"), ("store64", 32760, "y"), ("store64", 32768, "x"),
          ("store64", 255, "x"), ("store64", -256, "x"), ("storef", 33, "p"),
          ("storef", 40000, "q"), ("storef", 48, "r")]
LOADS = [(s.replace("store", "load"), off) for s, off, _ in STORES] + [
    ("load64", 8), ("load32", 12), ("load16", 1), ("load8", 10), ("load64", -8)]
NSPILL = 300
PREFETCHES = [0, 8, 12, -8, 255, -256, 32760, 32768, 65000]   # every form of prfm's address


def spill_source() -> tuple[str, int]:
    """A function with NSPILL integers and NSPILL binary64s live across calls, and its result."""
    src = ["fn spill(x: i64, p: f64) -> i64 {"]
    src += [f"    let a{k} = x * {k + 2} ^ {k};" for k in range(NSPILL)]
    src += [f"    let f{k} = p * {float(k + 1)!r};" for k in range(NSPILL)]
    src.append("    nop();")
    for v in "af":
        src.append(f"    let t{v} = {v}0;")
        src += [f"    {v}{k} = {v}{k + 1};" for k in range(NSPILL - 1)]
        src.append(f"    {v}{NSPILL - 1} = t{v};")
    src += ["    nop();", "    let acc = 0;", "    let facc = 0.0;", "    let hacc = 0;"]
    src += [f"    acc = acc * 31 + a{k};\n    facc = facc + f{k};" for k in range(NSPILL)]
    src += [f"    hacc = hacc * 31 + umulh(a{k}, a{_partner(k)}) + fgt(f{k}, f{_partner(k)})"
            f" + ror32(a{k}, {k % 31 + 1}) + bswap32(a{_partner(k)});" for k in range(NSPILL)]
    src += ["    return acc ^ f2bits(facc) ^ hacc;", "}"]
    a = [U(X * (k + 2)) ^ k for k in range(NSPILL)]
    f = [P * float(k + 1) for k in range(NSPILL)]
    a, f = a[1:] + a[:1], f[1:] + f[:1]
    acc, facc, hacc = 0, 0.0, 0
    for k in range(NSPILL):
        acc, facc = U(acc * 31 + a[k]), facc + f[k]
        hacc = U(hacc * 31 + umulh(a[k], a[_partner(k)]) + (f[k] > f[_partner(k)])
                 + ror32(a[k], k % 31 + 1) + bswap32(a[_partner(k)]))
    return "\n".join(src) + "\n", acc ^ bits(facc) ^ hacc


def _partner(k: int) -> int:
    """The spilled value umulh and fgt pair with the k-th: far from it, before or after."""
    return (7 * k + 3) % NSPILL


FUNCTIONS = """
fn nop() {}
fn out(v: i64) { rt_out_hex16(v); rt_out_byte(10); }
fn fret(p: f64, q: f64) -> f64 { return q - p; }
fn args(a: i64, b: i64, c: i64, d: i64, e: i64, f: i64,
        p1: f64, p2: f64, p3: f64, p4: f64, p5: f64, p6: f64, p7: f64, p8: f64) -> i64 {
    let acc = ((((a * 3 + b) * 3 + c) * 3 + d) * 3 + e) * 3 + f;
    let fa = (((((((p1 - p2) * p3) - p4) / p5) + p6) - p7) * p8);
    return acc ^ f2bits(fa);
}
fn rot(a: i64, b: i64, c: i64, d: i64, e: i64, f: i64,
       p1: f64, p2: f64, p3: f64, p4: f64, p5: f64, p6: f64, p7: f64, p8: f64) -> i64 {
    return args(f, a, b, c, d, e, p8, p1, p2, p3, p4, p5, p6, p7);
}
fn swap2(a: i64, b: i64, p: f64, q: f64) -> i64 {
    return args(b, a, b, a, a, b, q, p, q, q, p, p, q, p);
}
fn three(x: i64, p: f64) -> i64 {
    let a = x + 1;
    let b = x * 5;
    let c = x - 9;
    let f = p * 2.0;
    nop();
    return (a * b - c) ^ f2bits(f + p);
}
fn wide(x: i64, y: i64, p: f64, q: f64) -> i64 {
    let h = umulh(x, y);
    let g = fgt(p, q);
    nop();
    return (umulh(h, y) ^ umulh(y, x)) + g * 2 + fgt(q, p) * 4 + fgt(p, p) * 8;
}
"""


def args(a, b, c, d, e, f, p1, p2, p3, p4, p5, p6, p7, p8):
    acc = a
    for v in (b, c, d, e, f):
        acc = acc * 3 + v
    return U(acc) ^ bits((((((((p1 - p2) * p3) - p4) / p5) + p6) - p7) * p8))


def wide(x, y, p, q):
    h = umulh(x, y)
    return U((umulh(h, y) ^ umulh(y, x)) + (p > q) * 2 + (q > p) * 4 + (p > p) * 8)


def program() -> tuple[str, str]:
    """(runtime-language source with `main`, the expected stdout)."""
    spill, spill_value = spill_source()
    body = [f"    let {v} = load64(seeds + {8 * k});" for k, v in enumerate("xyzs")]
    body += [f"    let {v} = loadf(seeds + {32 + 8 * k});" for k, v in enumerate(FSEEDS)]
    want = []
    for e, v in INT_CASES + FGT_CASES:
        body.append(f"    out({e});")
        want.append(int(v))
    for c in CONSTANTS:
        body.append(f"    out({c:#x});")
        want.append(c)
    for e, v in BRANCHES:
        body.append(f"    if {e} {{ out(1); }} else {{ out(0); }}")
        want.append(int(v))
    for e, v in FLOAT_CASES:
        body.append(f"    out(f2bits({e}));")
        want.append(bits(v))
    body += ["    let va = loadv(seeds + 32);", "    let vb = loadv(seeds + 48);",
             "    let vc = loadv(seeds + 64);"]
    for e, v in VEC_CASES:
        body.append(f"    let t = {e};\n    out(f2bits(lane(t, 0)));\n    out(f2bits(lane(t, 1)));")
        want += [bits(v[0]), bits(v[1])]
    for e, vs, f in Q_CASES:
        body.append(f"    let t = {e};\n    out(f2bits(lane(t, 0)));\n    out(f2bits(lane(t, 1)));")
        want += [U(f(*(bits(v[k]) for v in vs))) for k in (0, 1)]
    body.append("    out(f2bits(vpress_sum(p, q)));")
    want.append(bits(vpress(P, Q)))
    body.append("    let vb_base = vbuf + 300;")
    for k, off in enumerate(VSTORES):            # f64x2 stores and loads at immediate offsets
        addr = f"vb_base + {off}" if off >= 0 else f"vb_base - {-off}"
        body.append(f"    storev({addr}, splat(bits2f({k + 1})) * vc);")
    for k, off in enumerate(VSTORES):
        addr = f"vb_base + {off}" if off >= 0 else f"vb_base - {-off}"
        body.append(f"    let lv{k} = loadv({addr});\n    out(f2bits(lane(lv{k}, 0)));\n"
                    f"    out(f2bits(lane(lv{k}, 1)));")
    image = bytearray(70000)                     # later stores overwrite earlier overlaps
    for k, off in enumerate(VSTORES):
        scale = struct.unpack("<d", (k + 1).to_bytes(8, "little"))[0]
        image[BASE + off:BASE + off + 16] = struct.pack("<2d", scale * VC[0], scale * VC[1])
    for off in VSTORES:
        want += [int.from_bytes(image[BASE + off + d:BASE + off + d + 8], "little") for d in (0, 8)]
    # indexed: base + 8 * index with the index in a register (z = 7)
    body += ["    storev(vb_base + 8 * (z + 100), va);", "    storef(vb_base + 8 * (z + 102), r);",
             "    let ix = loadv(vb_base + 8 * (z + 101));", "    out(f2bits(lane(ix, 0)));",
             "    out(f2bits(lane(ix, 1)));", "    out(f2bits(loadf(vb_base + (z + 100) * 8)));"]
    want += [bits(Q), bits(R), bits(P)]
    mem = bytearray(70000)
    value = {"x": X.to_bytes(8, "little"), "y": U(Y).to_bytes(8, "little"),
             "p": struct.pack("<d", P), "q": struct.pack("<d", Q), "r": struct.pack("<d", R)}
    width = {"8": 1, "16": 2, "32": 4, "64": 8, "f": 8}
    body.append("    let b = buf + 300;")
    for op, off, v in STORES:
        body.append(f"    {op}(b + {off}, {v});" if off >= 0 else f"    {op}(b - {-off}, {v});")
        n = width[op[5:]]
        mem[BASE + off:BASE + off + n] = value[v][:n]
    for off in PREFETCHES:         # hints: the loads below read what the stores wrote
        body.append(f"    prefetch(b + {off});" if off >= 0 else f"    prefetch(b - {-off});")
    body += ["    prefetch(b + 8 * (z + 100));", "    prefetch(0);", "    prefetch(x);"]   # x: unmapped
    for op, off in LOADS:
        addr = f"b + {off}" if off >= 0 else f"b - {-off}"
        body.append(f"    out(f2bits(loadf({addr})));" if op == "loadf" else f"    out({op}({addr}));")
        want.append(int.from_bytes(mem[BASE + off:BASE + off + width[op[4:]]], "little"))
    pa = [P, Q, R, -R, 0.25, 7.0, -2.5, 1e-3]
    body += ["    out(rot(x, y, z, s, 1, 2, p, q, r, -r, 0.25, 7.0, -2.5, 0.001));",
             "    out(swap2(x, y, p, q));", "    out(three(x, p));", "    out(spill(x, p));",
             "    out(wide(x, y, p, q));", "    out(wide(y, x, q, p));"]
    want += [args(2, X, Y, Z, S, 1, pa[7], *pa[:7]),
             args(Y, X, Y, X, X, Y, Q, P, Q, Q, P, P, Q, P),
             U((X + 1) * (X * 5) - (X - 9)) ^ bits(P * 2.0 + P), spill_value,
             wide(X, Y, P, Q), wide(Y, X, Q, P)]
    seeds = [X, Y, Z, S] + [bits(v) for v in FSEEDS.values()]
    source = (f"global buf: [u8; 70000];\nglobal vbuf: [u8; 70000];\nvar seeds: [i64; {len(seeds)}] = {seeds};\n" +
              FUNCTIONS + spill + vpress_source() +
              "fn main(argc: i64, argv: i64) -> i64 {\n" + "\n".join(body) +
              "\n    rt_flush();\n    return 3;\n}\n")
    return source, "".join(f"{U(v):016x}\n" for v in want)


def high_first(tgt):
    """tgt with the vector registers 16-31 first in the allocator's preference (x86_64-v4): so
    nearly every value takes one, and every operation is selected in its EVEX form."""
    from dataclasses import replace
    regs = tgt.regfile.float_regs
    return replace(tgt, regfile=replace(tgt.regfile, float_regs=tuple(sorted(regs, key=lambda r: int(r[3:]) < 16))))


def build(isa: str, source: str) -> bytes:
    from alphac.build import link_program, runtime_closure, target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    tgt = target(isa.removesuffix("/high"))
    tgt = high_first(tgt) if isa.endswith("/high") else tgt
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core")
    own = rt.parse(source, "ops.rt")            # generated: stores at computed offsets allowed
    return link_program(lower_program(items + own, {}, generated=frozenset(map(id, own))), tgt)[0]


@pytest.mark.parametrize("isa", ["x86_64", "x86_64-v3", "x86_64-v4", "x86_64-v4/high", "aarch64"])
def test_every_operation(isa, tmp_path):
    """The levels too: their selector emits VEX for every binary64 and f64x2 operation, and EVEX
    where a register is 16-31 (x86_64-v4/high: registers 16-31 preferred, so nearly all are);
    an x86_64-v4 run on a CPU without AVX-512 checks its refusal instead."""
    from differential import runner
    from alphac.refusals import REFUSALS
    from alphac.targets import host_runs
    if isa != "aarch64" and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 executables run only on an x86-64 host")
    source, want = program()
    exe = tmp_path / "ops"
    exe.write_bytes(build(isa, source))
    exe.chmod(0o755)
    level = isa.removesuffix("/high")
    r = subprocess.run(runner(level) + [str(exe)], capture_output=True, text=True, timeout=60)
    if level == "x86_64-v4" and not host_runs(level):
        assert (r.returncode, r.stdout, r.stderr) == (REFUSALS["cpu-level"][0], "", "refused: cpu-level\n")
        return
    assert (r.returncode, r.stderr) == (3, "")
    got, expected = r.stdout.splitlines(), want.splitlines()
    assert len(got) == len(expected)
    wrong = [(i, g, e) for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not wrong, wrong


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_every_lir_operation_has_a_rule(isa):
    """The op table is the list: each selector has one rule per LIR operation (AArch64: but the
    f64x4 and f64x8 ones, lir.WIDE; x86-64: but the NEON ones, lir.NEON), and no rule for an
    operation the table does not have."""
    import importlib
    from alphac.lower.lir import NEON, OPS, WIDE
    rules = importlib.import_module(f"alphac.{isa}.select").RULES
    want = set(OPS) - (WIDE if isa == "aarch64" else NEON)
    assert set(rules) == want, (want ^ set(rules))
    assert WIDE == {op for op in OPS if op[0] in "wz"} and {"wadd", "zadd"} <= WIDE
    assert {op for op, o in OPS.items() if o.clobbers} == {"call", "syscall", "cpu_has_sha256",
                                                           "sha256_hw", "cpu_has_avx2", "cpu_has_avx512",
                                                           "cpu_has_clmul", "polyval_hw"}
