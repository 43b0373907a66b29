"""The exact sums of `contract exact_sum` on the card: three kernels over the per-sample rows.

The card keeps, for each of the owner's P param coordinates, the runtime's dense accumulator
(alphac/runtime/xsum.rt, alphac/formats.py): XS_WORDS 64-bit words, word 0 the flags
(XS_FLAGS), word 1 + k digit k of weight 2^(32k - 1074), signed, in carry-save form. A finite
term M * 2^(p - 1074) is three 32-bit digit values added to digits k, k + 1, k + 2 (k = p >> 5,
M << (p & 31), negated for a negative term), exactly as xsum.rt's `xc_add_n` splits it; an inf,
a NaN and a zero only OR flags. The adds are `red.global.add.u64` and the flags
`red.global.or.b64`: integer adds and ors are associative and commutative, so the words do not
depend on which thread adds first, and every term of every sample may be added by its own thread
at once. The bound is the runtime's: at most 2^30 terms a sum, each under 2^32 a digit, so no
digit leaves 64 bits and no carry is lost before `xsum_fold` resolves them.

    xsum_clear  one thread per coordinate j in [0, P): its XS_WORDS words zeroed (each step first)
    xsum_add    one thread per term g in [0, rows * P): the binary64 gs[g] (sample g / P,
                coordinate g mod P) added to coordinate g mod P's words
    xsum_fold   one thread per coordinate: the digits normalized in place (digits 0..64 to
                [-2^31, 2^31), the carry into digit 65: the value unchanged), then the compact
                accumulator (XC_WORDS words at xc + 8 XC_WORDS j) written as xsum.rt's format
                says: no nonzero digit: the flags alone; nonzero digits lo..hi within XC_DIGITS:
                a window of base min(lo, XC_MAX_BASE); else XC_SPILLED, the window zero, and the
                sum is the coordinate's normalized digits, left in its dense words
    xsum_round  one thread per coordinate, in place of xsum_fold in a `--shadow sampled` step:
                G[j], the sum rounded once (xsum.rt's xs_round_digits), which the updates read

So the host reads P * XC_WORDS words and the dense digits of the spilled coordinates only (not
the P * rows words of the rows), and checks them against its own exact sums (alphac/lower/gpu.py
`gpu_exact_check`); under `--shadow sampled` it reads G alone (P words). The parameters (alphac/ptx/abi.py): `xd` the dense words, `xc` the compact
ones, `gs` the rows, `rows` (u32) the sample count.

Requires: a learner with a loss under exact_sum. Guarantees: the same learner and target give
the same text; tests/test_xsum_card.py runs the kernels in the PTX interpreter against exact
rational sums and the runtime's format.
"""
from __future__ import annotations

from alphac.formats import (XC_BASE_SHIFT, XC_DIGITS, XC_MAX_BASE, XC_SPILLED, XC_WORDS,
                            XS_DIGITS, XS_FLAGS, XS_WORDS)
from alphac.ir.learner import Learner
from alphac.ptx.abi import Kernel, Param, param_count
from alphac.ptx.render import Emitter

NNZ = XS_FLAGS["not-neg-zero"]
INF = 0x7FF0000000000000
LOW32 = 0xFFFFFFFF


def _kernel(em: Emitter, lr: Learner, name: str, params: list[Param], sm: int) -> Kernel:
    em.label("$done")
    em.op("ret")
    return Kernel(name, sm, tuple(params), em.module(name, [(p.name, p.type) for p in params],
                                                     sm, f"{lr.name}: {name}"))


def _start(em: Emitter, params: list[Param], P: int) -> tuple[dict[str, str], str]:
    """The buffers' global addresses and coordinate j's dense words (threads j >= P: done)."""
    base = {p.name: em.op("global", em.op("ldp64", p.name)) for p in params if p.type == "u64"}
    j = em.thread_index()
    em.op("braif", em.op("ge", j, P), "$done")
    return base, j


def xsum_clear(lr: Learner, sm: int = 90) -> Kernel:
    em, P = Emitter(), param_count(lr)
    params = [Param("xd", "u64", "xd")]
    base, j = _start(em, params, P)
    rec, zero = em.op("add64", base["xd"], em.op("wide", j, 8 * XS_WORDS)), em.op("movi64", 0)
    for w in range(XS_WORDS):
        em.op("stu64", rec, 8 * w, zero)
    return _kernel(em, lr, "xsum_clear", params, sm)


def xsum_add(lr: Learner, sm: int = 90) -> Kernel:
    em, P = Emitter(), param_count(lr)
    params = [Param("gs", "u64", "gs"), Param("xd", "u64", "xd"), Param("rows", "u32", "rows")]
    base = {p.name: em.op("global", em.op("ldp64", p.name)) for p in params if p.type == "u64"}
    g = em.op("add64", em.op("wide", em.op("sreg", "ctaid.x"), em.op("sreg", "ntid.x")),
              em.op("wide", em.op("sreg", "tid.x"), 1))          # 64 bits: rows * P may pass 2^32
    em.op("braifnot", em.op("ltu64", g, em.op("wide", em.op("ldp32", "rows"), P)), "$done")
    b = em.op("ldu64", em.op("add64", base["gs"], em.op("shl64", g, 3)), 0)
    rec = em.op("add64", base["xd"], em.op("mullo64", em.op("rem64", g, P), 8 * XS_WORDS))
    add_term(em, rec, b, "$done")
    return _kernel(em, lr, "xsum_add", params, sm)


def add_term(em: Emitter, rec: str, b: str, done: str) -> None:
    """The binary64 with bits `b` added exactly to the dense accumulator at `rec` (red: any order,
    any thread), then a branch to `done` (or falling through to it, the last)."""
    finite, nonzero = em.fresh_label(), em.fresh_label()
    e = em.op("and64", em.op("shr64", b, 52), 0x7FF)
    m = em.op("and64", b, 0xFFFFFFFFFFFFF)
    em.op("braifnot", em.op("eq64", e, 0x7FF), finite)
    em.comment("an inf or a NaN: its flag (XS_FLAG_NINF is XS_FLAG_PINF << 1) and not-neg-zero")
    inf = em.op("shl64", em.op("movi64", XS_FLAGS["pinf"]), em.op("cvt32", em.op("shr64", b, 63)))
    f = em.op("selp64", XS_FLAGS["nan"], inf, em.op("ne64", m, 0))
    em.op("redor64", rec, 0, em.op("or64", f, NNZ))
    em.op("bra", done)
    em.label(finite)
    em.op("braifnot", em.op("eq64", em.op("shl64", b, 1), 0), nonzero)
    em.comment("+0.0 sets not-neg-zero, -0.0 nothing")
    em.op("redor64", rec, 0, em.op("selp64", NNZ, 0, em.op("eq64", b, 0)))
    em.op("bra", done)
    em.label(nonzero)
    em.op("redor64", rec, 0, em.op("movi64", NNZ))
    normal = em.op("selp01", em.op("ne64", e, 0))
    big = em.op("or64", m, em.op("shl64", normal, 52))            # M, below 2^53
    p = em.op("sub64", e, normal)
    s = em.op("cvt32", em.op("and64", p, 31))
    low = em.op("shl64", big, s)                                  # M << s, its low 64 bits
    neg = em.op("sar64", b, 63)                                   # 0, or -1: d -> (d ^ -1) + 1
    at = em.op("add64", rec, em.op("shl64", em.op("shr64", p, 5), 3))
    em.comment("the term's three digits, signed, added to digits k, k + 1, k + 2 (words 1 + k ...)")
    for w, digit in enumerate((em.op("and64", low, LOW32), em.op("shr64", low, 32),
                               em.op("shr64", big, em.op("sub32", 64, s)))):
        em.op("redadd64", at, 8 + 8 * w, em.op("sub64", em.op("xor64", digit, neg), neg))


def xsum_fold(lr: Learner, sm: int = 90) -> Kernel:
    em, P = Emitter(), param_count(lr)
    params = [Param("xd", "u64", "xd"), Param("xc", "u64", "xc")]
    base, j = _start(em, params, P)
    rec = em.op("add64", base["xd"], em.op("wide", j, 8 * XS_WORDS))
    out = em.op("add64", base["xc"], em.op("wide", j, 8 * XC_WORDS))
    flags = em.op("and64", em.op("ldu64", rec, 0), 0xF)
    em.comment("digits 0..64 to balanced 32-bit digits, the carry into digit 65; lo, hi: the "
               "lowest and highest nonzero (lo = XS_DIGITS: none)")
    k, c = em.op("movi64", 0), em.op("movi64", 0)
    lo, hi = em.op("movi64", XS_DIGITS), em.op("movi64", 0)
    em.label("$carry")
    at = em.op("add64", rec, em.op("shl64", k, 3))
    v = em.op("add64", em.op("ldu64", at, 8), c)
    d = em.op("sub64", em.op("and64", em.op("add64", v, 1 << 31), LOW32), 1 << 31)
    d = em.op("selp64", v, d, em.op("eq64", k, XS_DIGITS - 1))
    em.op("sar64", em.op("sub64", v, d), 32, d=c)
    em.op("stu64", at, 8, d)
    nz = em.op("ne64", d, 0)
    em.op("selp64", k, hi, nz, d=hi)
    em.op("selp64", lo, em.op("selp64", k, lo, nz), em.op("ltu64", lo, XS_DIGITS), d=lo)
    em.op("add64", k, 1, d=k)
    em.op("braif", em.op("ltu64", k, XS_DIGITS), "$carry")
    zero = em.op("movi64", 0)
    em.op("braifnot", em.op("eq64", lo, XS_DIGITS), "$some")
    em.comment("no nonzero digit: the flags alone")
    em.op("stu64", out, 0, flags)
    for w in range(1, XC_WORDS):
        em.op("stu64", out, 8 * w, zero)
    em.op("bra", "$done")
    em.label("$some")
    em.op("braifnot", em.op("ltu64", em.op("sub64", hi, lo), XC_DIGITS), "$spill")
    em.comment("a window of base min(lo, XC_MAX_BASE): digits base .. base + XC_DIGITS - 1")
    wb = em.op("selp64", lo, XC_MAX_BASE, em.op("ltu64", lo, XC_MAX_BASE))
    em.op("stu64", out, 0, em.op("or64", flags, em.op("shl64", em.op("add64", wb, 1), XC_BASE_SHIFT)))
    src = em.op("add64", rec, em.op("shl64", wb, 3))
    for w in range(XC_DIGITS):
        em.op("stu64", out, 8 + 8 * w, em.op("ldu64", src, 8 + 8 * w))
    em.op("bra", "$done")
    em.label("$spill")
    em.comment("spilled: the sum is the normalized dense digits, which the host reads")
    em.op("stu64", out, 0, em.op("or64", flags, XC_SPILLED))
    for w in range(1, XC_WORDS):
        em.op("stu64", out, 8 * w, zero)
    return _kernel(em, lr, "xsum_fold", params, sm)


def xsum_round(lr: Learner, sm: int = 90) -> Kernel:
    """One thread per coordinate j: G[j] = the exact sum in xd's words of j rounded once to
    binary64, the bits of xsum.rt's `xs_round_digits(flags, digits, 0, XS_DIGITS)` (to nearest,
    ties to even; NaN when a NaN or both infinities were added, else an infinity added; a
    magnitude of at least 2^1024 - 2^970 an infinity; the empty sum -0.0 unless not-neg-zero).
    The digits may be in carry-save form (xsum_add's, fold or not): they are rewritten in place as
    the sum's magnitude in 32-bit digits (xd is cleared before the next step's adds), the carry
    out of digit 65 being the sign (the bound: a sum below 2^1054)."""
    em, P = Emitter(), param_count(lr)
    params = [Param("xd", "u64", "xd"), Param("G", "u64", "G")]
    base, j = _start(em, params, P)
    rec = em.op("add64", base["xd"], em.op("wide", j, 8 * XS_WORDS))
    round_to(em, rec, em.op("add64", base["G"], em.op("wide", j, 8)), "$done")
    return _kernel(em, lr, "xsum_round", params, sm)


def clear(em: Emitter, xr: str, pos: int) -> str:
    """Accumulator `pos` of the array at `xr` zeroed; its address."""
    rec, zero = em.op("add64", xr, 8 * XS_WORDS * pos), em.op("movi64", 0)
    for w in range(XS_WORDS):
        em.op("stu64", rec, 8 * w, zero)
    return rec


def round_to(em: Emitter, rec: str, out: str, done: str) -> None:
    """The exact sum at `rec` rounded once, its bits stored at `out` (xsum_round's), the digits
    rewritten; then a branch to `done` (or falling through to it, the last)."""
    L = {k: em.fresh_label() for k in ("finite", "twos", "magnitude", "nonzero", "normal", "round", "sticky", "even")}
    flags = em.op("and64", em.op("ldu64", rec, 0), 0xF)
    signbit = em.op("shl64", em.op("movi64", 1), 63)
    special = em.op("and64", flags, 7)
    em.op("braif", em.op("eq64", special, 0), L["finite"])
    em.comment("a NaN, or +inf and -inf: the NaN; one infinity alone: it")
    r = em.op("selp64", INF, 0x7FF8000000000000, em.op("eq64", special, XS_FLAGS["pinf"]))
    em.op("selp64", em.op("or64", signbit, INF), r, em.op("eq64", special, XS_FLAGS["ninf"]), d=r)
    em.op("stu64", out, 0, r)
    em.op("bra", done)
    em.label(L["finite"])
    em.comment("the digits to 32-bit two's complement digits (xs_round_digits' first loop)")
    k, c = em.op("movi64", 0), em.op("movi64", 0)
    em.label(L["twos"])
    at = em.op("add64", rec, em.op("shl64", k, 3))
    v = em.op("add64", em.op("ldu64", at, 8), c)
    em.op("stu64", at, 8, em.op("and64", v, LOW32))
    em.op("sar64", v, 32, d=c)
    em.op("add64", k, 1, d=k)
    em.op("braif", em.op("ltu64", k, XS_DIGITS), L["twos"])
    em.comment("negated if negative (d ^ mask, plus the carry); t: the top nonzero digit, or -1")
    neg = em.op("lts64", c, 0)
    sign = em.op("selp64", signbit, 0, neg)
    mask = em.op("selp64", LOW32, 0, neg)
    em.op("selp01", neg, d=c)
    t = em.op("movi64", -1)
    em.op("mov64", 0, d=k)
    em.label(L["magnitude"])
    at = em.op("add64", rec, em.op("shl64", k, 3))
    v = em.op("add64", em.op("xor64", em.op("ldu64", at, 8), mask), c)
    w = em.op("and64", v, LOW32)
    em.op("stu64", at, 8, w)
    em.op("shr64", v, 32, d=c)
    em.op("selp64", k, t, em.op("ne64", w, 0), d=t)
    em.op("add64", k, 1, d=k)
    em.op("braif", em.op("ltu64", k, XS_DIGITS), L["magnitude"])
    em.op("braifnot", em.op("lts64", t, 0), L["nonzero"])
    em.comment("zero: +0.0 when a value other than -0.0 was added, else -0.0")
    em.op("stu64", out, 0, em.op("selp64", 0, signbit, em.op("ne64", em.op("and64", flags, NNZ), 0)))
    em.op("bra", done)
    em.label(L["nonzero"])
    top = em.op("add64", em.op("add64", rec, 8), em.op("shl64", t, 3))
    dd, lz = em.op("ldu64", top, 0), em.op("movi64", 0)
    em.comment("lz: the top digit's leading zeros in 32 bits; its top bit of weight 2^(at - 1074)")
    for sh in (16, 8, 4, 2):
        z = em.op("eq64", em.op("shr64", dd, 32 - sh), 0)
        em.op("selp64", em.op("shl64", dd, sh), dd, z, d=dd)
        em.op("selp64", em.op("add64", lz, sh), lz, z, d=lz)
    em.op("add64", lz, em.op("selp01", em.op("eq64", em.op("shr64", dd, 31), 0)), d=lz)
    top_at = em.op("sub64", em.op("add64", em.op("shl64", t, 5), 31), lz)
    em.op("braifnot", em.op("ltu64", top_at, 53), L["normal"])
    em.comment("below 2^-1021: exact, digits 1 and 0 are the encoding")
    low = em.op("or64", em.op("shl64", em.op("ldu64", rec, 16), 32), em.op("ldu64", rec, 8))
    em.op("stu64", out, 0, em.op("or64", sign, low))
    em.op("bra", done)
    em.label(L["normal"])
    em.op("braif", em.op("ltu64", top_at, 2098), L["round"])
    em.op("stu64", out, 0, em.op("or64", sign, INF))
    em.op("bra", done)
    em.label(L["round"])
    em.comment("the top 64 bits from digits t, t - 1, t - 2 (t = 1: none, 0), the sticky bit below")
    lz32 = em.op("cvt32", lz)
    below = em.op("selp64", em.op("ldu64", em.op("sub64", top, 16), 0), 0, em.op("ne64", t, 1))
    win = em.op("or64", em.op("shl64", em.op("ldu64", top, 0), em.op("add32", lz32, 32)),
                em.op("shl64", em.op("ldu64", em.op("sub64", top, 8), 0), lz32))
    win = em.op("or64", win, em.op("shr64", below, em.op("sub32", 32, lz32)))
    sticky = em.op("and64", em.op("shl64", below, lz32), LOW32)
    q, last = em.op("movi64", 0), em.op("sub64", t, 2)
    em.label(L["sticky"])
    em.op("braifnot", em.op("lts64", q, last), L["even"])
    em.op("or64", sticky, em.op("ldu64", em.op("add64", rec, em.op("shl64", q, 3)), 8), d=sticky)
    em.op("add64", q, 1, d=q)
    em.op("bra", L["sticky"])
    em.label(L["even"])
    em.comment("to nearest, ties to even; a carry out of the mantissa bumps the exponent")
    mant, rest = em.op("shr64", win, 11), em.op("and64", win, 0x7FF)
    up = em.op("sub64", 1, em.op("selp01", em.op("ltu64", rest, 0x401)))
    tie = em.op("and64", em.op("selp01", em.op("eq64", rest, 0x400)),
                em.op("selp01", em.op("ne64", em.op("or64", sticky, em.op("and64", mant, 1)), 0)))
    mant = em.op("add64", mant, em.op("or64", up, tie))
    bits = em.op("add64", em.op("shl64", em.op("sub64", top_at, 52), 52), mant)
    em.op("stu64", out, 0, em.op("or64", sign, bits))


def kernels(lr: Learner, sm: int = 90) -> list[Kernel]:
    """The exact sums' kernels, in launch order around grad_samples: clear, (rows), add, fold;
    then round (a sampled step's, in place of fold: alphac/lower/gpu.py)."""
    return [xsum_clear(lr, sm), xsum_add(lr, sm), xsum_fold(lr, sm), xsum_round(lr, sm)]
