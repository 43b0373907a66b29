"""The sampled shadow's tree digest of a message, on the card (docs/gpu.md "The tree digest").

The message is L bytes (a GPU owner's: G then every state, declaration order, each binary64's 8
bytes little endian; alphac/lower/gpu.py). Its digest D (32 bytes) is a tree of SHA-256:

    leaf j   = SHA-256(0x00 | M[1024 j : 1024 j + 1024])     j < max(1, ceil(L / 1024)); the
                                                              last one short (L = 0: one, empty)
    node     = SHA-256(0x01 | up to 32 digests of the level below, in order)
    D        = SHA-256(0x01 | the top level's digests | L as 8 bytes little endian)

levels of nodes are built, 32 children a node, until a level has at most 32 digests: the root
takes them all and the length (so the root's message, 1 + 32 c + 8 bytes, is never an inner
node's, 1 + 32 c). `tree_digest` is the definition, with hashlib.

`kernels(L, sm)` computes it on the card: `digest_0` (one thread a leaf), `digest_1` ... (one
thread a node), the last one the root (one thread), each a launch of its own, in order, a
wait-for-idle between. Every size is fixed by L, so each level's counts and offsets are
immediates. Parameters: `msg` (the message, 8-byte aligned, ceil(L / 8) words; the bytes past L
in its last word are never read into a hash), `dg` (the levels' digests, `scratch_words(L)`
words: level r's at its `levels(L)` offset) and `dout` (the root, 4 words). A thread streams its
input as 64-bit little-endian words shifted one byte up behind its prefix byte, appends SHA-256's
padding (0x80, zeros, the bit length big endian) and compresses 64 bytes at a time with u32
operations (add, and, or, xor, shf.r.wrap for the rotations, prmt for the byte order), the 64
rounds and the schedule unrolled; the round constants and the initial hash are read from the
runtime's SHA-256 (alphac/runtime/sha256.rt `sha_kw`, `sha_init`), the one table of them.

Requires: L < 2^29 (the bit length in 32 bits). Guarantees: the same L and target give the same
text; tests/test_digest_card.py runs the kernels in the PTX interpreter against `tree_digest`.
"""
from __future__ import annotations

import hashlib
import re
import struct
from functools import lru_cache

from alphac.ptx.abi import Kernel, Param
from alphac.ptx.render import Emitter

CHUNK, FAN = 1024, 32          # a leaf's bytes, a node's children
LEAF, NODE = 0x00, 0x01        # the domain prefixes
M32 = 0xFFFFFFFF


def tree_digest(msg: bytes) -> bytes:
    """D, the definition (the module doc)."""
    level = [hashlib.sha256(bytes([LEAF]) + msg[i:i + CHUNK]).digest()
             for i in range(0, max(1, len(msg)), CHUNK)]
    while len(level) > FAN:
        level = [hashlib.sha256(bytes([NODE]) + b"".join(level[i:i + FAN])).digest()
                 for i in range(0, len(level), FAN)]
    return hashlib.sha256(bytes([NODE]) + b"".join(level) + struct.pack("<Q", len(msg))).digest()


def levels(L: int) -> list[tuple[int, int]]:
    """(digests, their first word in `dg`) of each level below the root, leaves first."""
    out, n, at = [], max(1, -(-L // CHUNK)), 0
    while True:
        out.append((n, at))
        at += 4 * n
        if n <= FAN:
            return out
        n = -(-n // FAN)


def scratch_words(L: int) -> int:
    n, at = levels(L)[-1]
    return at + 4 * n


@lru_cache(maxsize=1)
def sha_tables() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(K, the initial hash) from alphac/runtime/sha256.rt."""
    from alphac.runtime import source
    text = source("sha256")
    kw = re.search(r"var sha_kw: \[u32; \d+\] = \[([^\]]*)\]", text).group(1)
    init = re.search(r"data sha_init: \[u32; 8\] = \[([^\]]*)\]", text).group(1)
    words = lambda s: tuple(int(x, 16) for x in re.findall(r"0x[0-9a-fA-F]+", s))   # noqa: E731
    return words(kw)[:64], words(init)


def _compress(em: Emitter, H: list[str], W: list[str]) -> None:
    """One 64-byte block, its 16 words big endian in W (overwritten by the schedule), into H."""
    K, _ = sha_tables()
    op = em.op

    def rot(x, n1, n2, n3, shift=False):
        a, b = op("rotr32", x, n1), op("rotr32", x, n2)
        return op("xor32", op("xor32", a, b), op("shr32", x, n3) if shift else op("rotr32", x, n3))
    v = [op("mov32", h) for h in H]                 # a b c d e f g h, the names turning
    for t in range(64):
        if t >= 16:
            w2, w15 = W[(t - 2) % 16], W[(t - 15) % 16]
            op("add32", op("add32", rot(w2, 17, 19, 10, True), W[(t - 7) % 16]),
               op("add32", rot(w15, 7, 18, 3, True), W[t % 16]), d=W[t % 16])
        a, b, c, d, e, f, g, h = v
        ch = op("xor32", g, op("and32", e, op("xor32", f, g)))
        t1 = op("add32", op("add32", h, rot(e, 6, 11, 25)), op("add32", ch, op("add32", W[t % 16], K[t])))
        maj = op("or32", op("and32", a, b), op("and32", c, op("or32", a, b)))
        t2 = op("add32", rot(a, 2, 13, 22), maj)
        v = [op("add32", t1, t2), a, b, c, op("add32", d, t1), e, f, g]
    for i in range(8):
        op("add32", H[i], v[i], d=H[i])


def _hash(em: Emitter, src: str, length: str, mem_words: str, prefix: int, extra: int | None,
          out: str) -> None:
    """SHA-256(prefix | the `length` bytes (a u32 register) at `src` | `extra`, 8 bytes LE, if
    given: then `mem_words` words are read and `length` counts the extra's 8) into the 4 words at
    `out`. `mem_words`: how many words of `src` to read (the last one masked to `length`)."""
    op = em.op
    _, init = sha_tables()
    H = [op("mov32", x) for x in init]
    nb = op("div32", op("add32", length, 64 + 9), 64)       # blocks: length + 1 + 0x80 + 8, up
    mark = op("add32", length, 1)                           # the 0x80's byte in the stream
    mark_word, mark_bits = op("div32", mark, 8), op("mul32", op("rem32", mark, 8), 8)
    carry, b, i = op("movi64", prefix), op("mov32", 0), op("mov32", 0)
    W = [em.reg("r") for _ in range(16)]
    top = em.fresh_label()
    em.label(top)
    em.op("nounroll")
    for w in range(8):
        D, skip = op("movi64", 0), em.fresh_label()
        op("braif", op("ge", i, mem_words), skip)
        op("ldu64", op("add64", src, op("wide", i, 8)), 0, d=D)
        if extra is None:                                   # the chunk's last word: its bytes
            r = op("sub32", length, op("mul32", i, 8))
            r8 = op("mul32", op("selp32", 8, r, op("ge", r, 8)), 8)    # 2^64 - 1 at 8 (shl: 0)
            op("and64", D, op("sub64", op("shl64", op("movi64", 1), r8), 1), d=D)
        em.label(skip)
        if extra is not None:
            op("selp64", extra, D, op("eq32", i, mem_words), d=D)
        S = op("or64", op("shl64", D, 8), carry)
        op("shr64", D, 56, d=carry)
        bit = op("shl64", op("movi64", 0x80), mark_bits)
        op("or64", S, op("selp64", bit, 0, op("eq32", i, mark_word)), d=S)
        op("bswap32", op("cvt32", S), d=W[2 * w])
        op("bswap32", op("cvt32", op("shr64", S, 32)), d=W[2 * w + 1])
        op("add32", i, 1, d=i)
    last = op("eq32", op("add32", b, 1), nb)                # the bit length, big endian, last
    op("selp32", 0, W[14], last, d=W[14])
    op("selp32", op("mul32", mark, 8), W[15], last, d=W[15])
    _compress(em, H, W)
    op("add32", b, 1, d=b)
    op("braifnot", op("ge", b, nb), top)
    for q in range(4):
        lo, hi = op("wide", op("bswap32", H[2 * q]), 1), op("wide", op("bswap32", H[2 * q + 1]), 1)
        op("stu64", out, 8 * q, op("or64", lo, op("shl64", hi, 32)))


def kernels(L: int, sm: int = 90) -> list[Kernel]:
    """digest_0 (leaves) .. digest_R (the root), in launch order (the module doc)."""
    lv = levels(L)
    params = [Param("msg", "u64", "dmsg"), Param("dg", "u64", "dg"), Param("dout", "u64", "dout")]
    out = []
    for r in range(len(lv) + 1):
        em = Emitter()
        base = {p.name: em.op("global", em.op("ldp64", p.name)) for p in params}
        j = em.thread_index()
        root = r == len(lv)
        count = 1 if root else lv[r][0]
        em.op("braif", em.op("ge", j, count), "$done")
        if r == 0:                          # leaf j: bytes 1024 j .. of the message
            last = L - CHUNK * (count - 1)
            length = em.op("selp32", last, CHUNK, em.op("eq32", j, count - 1))
            src = em.op("add64", base["msg"], em.op("wide", j, CHUNK))
            words = em.op("div32", em.op("add32", length, 7), 8)
        else:                               # node j: up to 32 digests of level r - 1
            below, at = lv[r - 1]
            last = below - FAN * (count - 1)
            kids = em.op("selp32", last, FAN, em.op("eq32", j, count - 1))
            length = em.op("mul32", kids, 32)
            src = em.op("add64", base["dg"], em.op("add64", em.op("wide", j, 32 * FAN), 8 * at))
            words = em.op("mul32", kids, 4)
        if root:
            length = em.op("add32", length, 8)
        dst = base["dout"] if root else em.op("add64", base["dg"], em.op("add64", em.op("wide", j, 32), 8 * lv[r][1]))
        _hash(em, src, length, words, LEAF if r == 0 else NODE, L if root else None, dst)
        em.label("$done")
        em.op("ret")
        name = f"digest_{r}"
        out.append(Kernel(name, sm, tuple(params), em.module(name, [(p.name, p.type) for p in params], sm,
                                                             f"tree digest of {L} bytes: level {r}"),
                          threads=count))
    return out



def message(lr) -> list[tuple[str, int]]:
    """The message's pieces in order, (name, words): "G" (with a loss: every param's part, in
    declaration order) then every state in declaration order: the one definition of its layout
    (alphac/lower/gpu.py writes the host's, replay the interpreter's)."""
    from alphac.ptx.abi import param_count
    return ([("G", param_count(lr))] if lr.loss is not None else []) + [(s.name, s.size) for s in lr.states]


def host_words(lr) -> dict[str, int]:
    """The states the host holds (scalar states, where the card does not run the scalar
    statements: abi.card_scalars), each one's first word in `dhost`."""
    from alphac.ptx.abi import card_scalars
    out, at, card = {}, 0, card_scalars(lr)
    for s in lr.states:
        if s.group is None and s.name not in card:
            out[s.name], at = at, at + s.size
    return out


def owner_kernels(lr, sm: int = 90) -> list[Kernel]:
    """The sampled owner's digest: `digest_gather` (G from the card's G, a grouped state from its
    buffer, a scalar state from `dhost`, where the host writes it before the step's submission,
    or from `sc`'s word after the step where the card computes it), then `kernels` of the
    message's length."""
    from alphac.ptx.abi import card_scalars
    host, card, pieces = host_words(lr), card_scalars(lr), []
    for name, n in message(lr):
        p = Param("G", "u64", "G") if name == "G" else Param("dhost", "u64", "dhost") if name in host \
            else Param("sc", "u64", "sc") if name in card else Param(f"state_{name}", "u64", "state", name)
        pieces.append((p, host[name] if name in host else 2 * card[name] + 1 if name in card else 0, n))
    return [gather(pieces, sm)] + kernels(8 * sum(n for _, n in message(lr)), sm)


def gather(pieces: list[tuple[Param, int, int]], sm: int = 90) -> Kernel:
    """`digest_gather`: the message, contiguous, into `msg`, the one it replaces kept in `prev`
    (the states a step started from, for a step drawn to be proven): one thread a word w, read
    from the piece (a buffer parameter, its first word there, its words; message order) holding w."""
    em, total = Emitter(), sum(n for _, _, n in pieces)
    params = [Param("msg", "u64", "dmsg"), Param("prev", "u64", "dprev")] + \
        list({p.name: p for p, _, _ in pieces}.values())
    base = {p.name: em.op("global", em.op("ldp64", p.name)) for p in params}
    w = em.thread_index()
    em.op("braif", em.op("ge", w, total), "$done")
    at, start = em.op("movi64", 0), 0
    for p, first, n in pieces:
        mine = em.op("add64", base[p.name], em.op("wide", em.op("add32", em.op("sub32", w, start), first), 8))
        em.op("selp64", mine, at, em.op("ge", w, start), d=at)
        start += n
    word = em.op("add64", base["msg"], em.op("wide", w, 8))
    em.op("stu64", em.op("add64", base["prev"], em.op("wide", w, 8)), 0, em.op("ldu64", word, 0))
    em.op("stu64", word, 0, em.op("ldu64", at, 0))
    em.label("$done")
    em.op("ret")
    text = em.module("digest_gather", [(p.name, p.type) for p in params], sm, f"the message: {total} words")
    return Kernel("digest_gather", sm, tuple(params), text, threads=total)
