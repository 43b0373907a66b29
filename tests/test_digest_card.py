"""The sampled shadow's tree digest on the card (alphac/ptx/digest.py), run by the PTX interpreter:
the kernels' root equals `tree_digest` (hashlib) for messages of 0, 1, 1023, 1024, 1025 bytes,
32 KiB and one byte either side, 33 leaves (a level of nodes) and 1 MiB + 7 (1,025 leaves, two
levels of nodes); `tree_digest` is the documented tree, spelled out with hashlib for the small
cases; the bytes past L in the message's last word never reach a hash; a kernel that differs
from SHA-256 by one constant, one rotation or one mask is caught; the kernels assemble with
ptxas without local memory."""
import hashlib
import os
import random
import struct

import pytest

from conftest import require_tool
from ptx_interp import Memory, Ptx, bits_of, float_of

from alphac.ptx import digest


def card_digest(msg: bytes, mutate=lambda name, text: text, garbage: int = 0xA5) -> bytes:
    """The kernels' root over `msg`, the bytes past its end in its last word set to `garbage`."""
    L, mem = len(msg), Memory()
    pad = msg + bytes([garbage]) * (-L % 8)
    m = mem.alloc([float_of(w) for w in struct.unpack(f"<{len(pad) // 8}Q", pad)] or [float_of(-1 & (1 << 64) - 1)])
    dg = mem.alloc([0.0] * digest.scratch_words(L))
    out = mem.alloc([0.0] * 4)
    for k in digest.kernels(L):
        Ptx(mutate(k.name, k.ptx)).launch(mem, {"msg": m, "dg": dg, "dout": out}, k.threads, block=32)
    return b"".join(struct.pack("<Q", bits_of(x)) for x in mem.read(out, 4))


def message(L: int) -> bytes:
    return random.Random(L).randbytes(L)


@pytest.mark.parametrize("L", [0, 1, 7, 8, 55, 56, 1023, 1024, 1025, 32 * 1024 - 1, 32 * 1024,
                               32 * 1024 + 1, 33 * 1024 + 1])
def test_the_kernels_give_the_reference_digest(L):
    assert card_digest(message(L)) == digest.tree_digest(message(L))


def test_a_mebibyte_and_seven():
    """1,025 leaves, 33 nodes, 2 nodes, the root (about 20 s of interpreter)."""
    msg = os.urandom((1 << 20) + 7)
    assert card_digest(msg) == digest.tree_digest(msg)


def test_the_reference_is_the_documented_tree():
    sha = lambda b: hashlib.sha256(b).digest()          # noqa: E731
    assert digest.tree_digest(b"") == sha(b"\x01" + sha(b"\x00") + bytes(8))
    assert digest.tree_digest(b"x") == sha(b"\x01" + sha(b"\x00x") + struct.pack("<Q", 1))
    m = message(33 * 1024 + 1)                          # 34 leaves: 2 nodes, then the root
    leaves = [sha(b"\x00" + m[i:i + 1024]) for i in range(0, len(m), 1024)]
    nodes = [sha(b"\x01" + b"".join(leaves[:32])), sha(b"\x01" + b"".join(leaves[32:]))]
    assert digest.tree_digest(m) == sha(b"\x01" + b"".join(nodes) + struct.pack("<Q", len(m)))
    assert digest.levels(len(m)) == [(34, 0), (2, 136)] and digest.scratch_words(len(m)) == 144
    assert digest.sha_tables()[0][63] == 0xc67178f2 and digest.sha_tables()[1][0] == 0x6a09e667


def test_the_bytes_past_the_message_are_not_hashed():
    for L in (1, 13, 1025):
        assert card_digest(message(L), garbage=0x00) == card_digest(message(L), garbage=0xFF) \
            == digest.tree_digest(message(L))


@pytest.mark.parametrize("name,old,new", [
    ("digest_0", "1116352408", "1116352409"),            # K[0] off by one
    ("digest_1", "shf.r.wrap.b32 %r", "shr.u32 %r"),     # a rotation made a shift (the first)
    ("digest_0", "sub.s64", "add.s64"),                  # the last word's mask
    ("digest_1", "prmt.b32", "mov.b32"),                 # the byte order (its operands differ)
])
def test_a_kernel_that_differs_from_sha256_is_caught(name, old, new):
    def mutate(k, text):
        if k != name:
            return text
        assert old in text
        if new == "mov.b32":                             # prmt d, a, 0, 291 -> or d, a, 0
            return text.replace("prmt.b32", "or.b32", 1).replace(", 0, 291;", ", 0;", 1)
        if new == "shr.u32 %r":                          # shf.r.wrap d, a, a, n -> shr d, a, n
            at = text.index(old)
            line = text[at:text.index(";", at)]
            d, a, _, n = line.split(" ", 1)[1].split(", ")
            return text.replace(line, f"shr.u32 {d}, {a}, {n}", 1)
        return text.replace(old, new, 1)
    msg = message(1025 + 32 * 1024)                      # 34 leaves: a level of 2 nodes, the root
    assert card_digest(msg, mutate) != digest.tree_digest(msg)


@pytest.mark.parametrize("sm", [86, 90])
def test_the_kernels_assemble(sm):
    from alphac.ptx.cubin import read_cubin
    from alphac.ptx.ptxas import assemble, find_ptxas
    require_tool("ptxas")
    for k in digest.kernels(33 * 1024 + 1, sm):
        im = read_cubin(assemble(k.ptx, sm, find_ptxas()))[k.name]
        assert im.local == 0, k.name
