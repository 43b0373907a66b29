"""The roles' word copies and gradient combines (alphac/runtime/core.rt: `vec_copy`,
`combine_into`, 64 and 32 bytes a turn in f64x2 registers, then word by word) on both ISAs:
every length 0..40 at every 8-byte offset of both operands, and a long one, over words that
include NaNs with payloads, infinities, signed zeros and subnormals. A copy must move every bit;
a combine must add lane by lane exactly as one binary64 addition (numpy's), and the count word
after the sums as an integer. Where the sum is a NaN only NaN-ness is checked: which payload
two NaNs give differs between x86-64 and AArch64, and the contract keeps no NaN (non-finite
state is refused)."""
import subprocess
import random
import struct

import numpy as np
import pytest

from backend import build_rt_program, require_isa
from conftest import require_tool

WORDS = 4096
MAIN = f"""
data src: [u8; {8 * WORDS}] = extern;
data dst0: [u8; {8 * WORDS}] = extern;
data cases: [i64] = extern;                 // (kind, src word, dst word, n), then -1
global dst: [u8; {8 * WORDS}];

fn main(argc: i64, argv: i64) -> i64 {{
    let c = cases;
    while load64(c) >= 0 {{
        vec_copy(dst, dst0, {WORDS});
        if load64(c) == 0 {{
            vec_copy(dst + 8 * load64(c + 16), src + 8 * load64(c + 8), load64(c + 24));
        }} else {{
            combine_into(dst + 8 * load64(c + 16), src + 8 * load64(c + 8), load64(c + 24));
        }}
        syscall(SYS_write, 1, dst, {8 * WORDS});
        c = c + 32;
    }}
    return 0;
}}
"""
SPECIAL = [0x7FF8000000000001, 0xFFF0000000000000, 0x7FF0000000000000, 0x8000000000000000, 0,
           1, 0x000FFFFFFFFFFFFF, 0x7FF4000000000abc, 0x3FF0000000000000, 0xC000000000000000]


def words(rnd, n):
    out = [rnd.choice(SPECIAL) if rnd.random() < 0.2 else rnd.getrandbits(64) for _ in range(n)]
    return np.array(out, dtype=np.uint64)


def cases():
    out = [(kind, s, d, n) for kind in (0, 1) for n in range(41) for s in range(3) for d in range(3)
           if n + max(s, d) < WORDS]
    return out + [(0, 5, 9, 3000), (1, 3, 1, 2999)]


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_copies_and_combines_move_and_add_every_bit(isa, tmp_path):
    require_isa(isa)
    rnd = random.Random(31)
    src, dst0, todo = words(rnd, WORDS), words(rnd, WORDS), cases()
    blobs = {"src": src.tobytes(), "dst0": dst0.tobytes(),
             "cases": struct.pack(f"<{4 * len(todo) + 1}q", *(v for c in todo for v in c), -1)}
    exe = build_rt_program(MAIN, "copies", isa, tmp_path, blobs)
    cmd = ([require_tool("qemu-aarch64")] if isa == "aarch64" else []) + [str(exe)]
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    assert (r.returncode, r.stderr) == (0, b"")
    got = np.frombuffer(r.stdout, dtype=np.uint64).reshape(len(todo), WORDS)
    for row, (kind, s, d, n) in zip(got, todo):
        want = dst0.copy()
        if kind == 0:
            want[d:d + n] = src[s:s + n]
        else:
            with np.errstate(all="ignore"):
                want[d:d + n] = (want[d:d + n].view(np.float64) + src[s:s + n].view(np.float64)).view(np.uint64)
            want[d + n] = (int(want[d + n]) + int(src[s + n])) & ((1 << 64) - 1)
        nan = np.isnan(want.view(np.float64)) & (kind == 1)
        assert np.isnan(row.view(np.float64))[nan].all(), (kind, s, d, n)
        bad = np.flatnonzero((row != want) & ~nan)
        assert not len(bad), ((kind, s, d, n), bad[:5])
