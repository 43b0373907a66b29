"""The runtime's frame checksum `sum64` (alphac/runtime/net.rt) against its Python twin
(tests/frames.py, written from the description in docs/runtime.md), on both ISAs: every length
0..200 (each split of 32-byte chunks, whole words left and tail bytes) at unaligned offsets, random
lengths and seeds to 100,000 bytes, and a megabyte. Live frames (tests/test_roles.py) only reach
the lengths real payloads have; this reaches every path."""
import random

import pytest

import frames
from backend import build_rt_program, require_isa, run_exe

MSG = 1 << 20
MAIN = f"""
data msg: [u8; {MSG}] = extern;
data cases: [i64] = extern;                 // (offset, length, seed) triples, then -1

fn main(argc: i64, argv: i64) -> i64 {{
    let c = cases;
    while load64(c) >= 0 {{
        let h = sum64(msg + load64(c), load64(c + 8), load64(c + 16));
        let s = 60;
        while s >= 0 {{
            rt_out_byte(load8(rt_hex_digits + ((h >> s) & 15)));
            s = s - 4;
        }}
        rt_out_byte(10);
        c = c + 24;
    }}
    rt_flush();
    return 0;
}}
"""


SUM64 = {"sum64", "sum64_begin", "sum64_chunks", "sum64_end", "net_chains"}


def inputs(seed: int = 2026):
    rnd = random.Random(seed)
    msg = rnd.randbytes(MSG)
    cases = [(rnd.randrange(64), n, rnd.getrandbits(63)) for n in range(201)]
    cases += [(rnd.randrange(MSG - 100_000), rnd.randrange(100_001), rnd.getrandbits(63))
              for _ in range(40)]
    cases += [(0, MSG, 0), (3, MSG - 3, 1)]
    return msg, cases


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_runtime_sum64_equals_its_twin(isa, tmp_path):
    require_isa(isa)
    from alphac.build import runtime_closure
    msg, cases = inputs()
    net = [it for it in runtime_closure("net") if it[0] in ("fn", "global") and it[1] in SUM64]
    assert len(net) == len(SUM64)           # net.rt's own functions, alone (the rest needs a role)
    words = [v for c in cases for v in c] + [-1]
    blobs = {"msg": msg, "cases": b"".join(v.to_bytes(8, "little", signed=True) for v in words)}
    exe = build_rt_program(MAIN, "sum64", isa, tmp_path, blobs, net)
    r = run_exe(exe, target=isa, timeout=300)
    assert (r.returncode, r.stderr) == (0, "")
    got = r.stdout.split()
    want = [f"{frames.sum64(msg[o:o + n], h):016x}" for o, n, h in cases]
    assert len(got) == len(want)
    wrong = [(i, cases[i][1]) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not wrong, wrong[:10]


def test_sum64_four_chains_see_order_and_length():
    """Swapping two words of a chunk, two chunks, or adding a zero byte changes the sum."""
    rnd = random.Random(7)
    data = bytearray(rnd.randbytes(96))
    base = frames.sum64(bytes(data))
    swapped_words = data[8:16] + data[0:8] + data[16:]
    swapped_chunks = data[32:64] + data[0:32] + data[64:]
    assert len({base, frames.sum64(bytes(swapped_words)), frames.sum64(bytes(swapped_chunks)),
                frames.sum64(bytes(data) + b"\0")}) == 4


PARTS_MAIN = f"""
data msg: [u8; {MSG}] = extern;
data cases: [i64] = extern;                 // (seed, parts, (offset, length) each), then -1

fn main(argc: i64, argv: i64) -> i64 {{
    pv_setup(msg);
    let c = cases;
    while load64(c) >= 0 {{
        frame_parts();
        let k = 0;
        while k < load64(c + 8) {{
            frame_part(msg + load64(c + 16 + 16 * k), load64(c + 24 + 16 * k));
            k = k + 1;
        }}
        let h = net_digest_parts(3, load64(c));
        let s = 60;
        while s >= 0 {{
            rt_out_byte(load8(rt_hex_digits + ((h >> s) & 15)));
            s = s - 4;
        }}
        rt_out_byte(32);
        let i = 0;
        while i < 16 {{
            rt_out_byte(load8(rt_hex_digits + (load8(net_digest + i) >> 4)));
            rt_out_byte(load8(rt_hex_digits + (load8(net_digest + i) & 15)));
            i = i + 1;
        }}
        rt_out_byte(10);
        c = c + 16 + 16 * k;
    }}
    rt_flush();
    return 0;
}}
"""
PARTS = SUM64 | {"net_chunks", "net_digest_parts", "frame_parts", "frame_part", "net_parts", "net_nparts",
                 "net_len", "net_stage", "net_digest"}


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_a_payload_in_parts_is_summed_and_hashed_as_one(isa, tmp_path):
    """net.rt's net_digest_parts (a frame's payload sent from, or received into, where its parts
    lie) gives the sum64 and the POLYVAL of the parts' concatenation: 1 to FRAME_PARTS parts,
    empty ones, chunks and blocks across parts, lengths to 100,000 bytes."""
    require_isa(isa)
    from alphac.build import runtime_closure, runtime_items
    from alphac.formats import FRAME_PARTS
    rnd = random.Random(43)
    msg = rnd.randbytes(MSG)
    cases = []
    for i in range(300):
        top = 200 if i < 200 else 100_000
        total = rnd.randrange(top + 1)
        ends = [0] + sorted(rnd.randrange(total + 1) for _ in range(rnd.randrange(FRAME_PARTS))) + [total]
        lens = [b - a for a, b in zip(ends, ends[1:])]
        cases.append((rnd.getrandbits(63), [(rnd.randrange(MSG - n), n) for n in lens]))
    words = [v for h, parts in cases for v in [h, len(parts)] + [x for p in parts for x in p]] + [-1]
    items = [it for it in runtime_closure("net") if it[0] in ("fn", "global") and it[1] in PARTS]
    exe = build_rt_program(PARTS_MAIN, "parts", isa, tmp_path,
                           {"msg": msg, "cases": b"".join(v.to_bytes(8, "little", signed=True) for v in words)},
                           items + list(runtime_items("polyval")))
    r = run_exe(exe, target=isa, timeout=300)
    assert (r.returncode, r.stderr) == (0, "")
    got = [tuple(line.split()) for line in r.stdout.splitlines()]
    want = []
    for h, parts in cases:
        data = b"".join(msg[o:o + n] for o, n in parts)
        want.append((f"{frames.sum64(data, h):016x}", frames.polyval(msg[:16], data).hex()))
    assert len(got) == len(want)
    wrong = [(i, [n for _, n in cases[i][1]]) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not wrong, wrong[:10]
