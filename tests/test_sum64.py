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
    net = [it for it in runtime_closure("net") if it[:2] == ("fn", "sum64")]
    assert len(net) == 1                    # net.rt's own function, alone (the rest needs a role)
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
