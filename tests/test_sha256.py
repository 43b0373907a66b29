"""The runtime's SHA-256 (alphac/runtime/sha256.rt) against hashlib, on both ISAs and both of its
paths (the CPU's SHA-256 instructions where it has them, then the scalar code, forced): random
contents at unaligned offsets, every length 0..300 (each padding case: one or two final blocks,
the 55/56/63/64-byte edges), random lengths to 5000 and messages of a few MiB (whole 1 MiB
chunks and odd sizes), and HMAC-SHA-256 against hmac under random keys. The executable says
which path it found: on x86-64, SHA-NI exactly when /proc/cpuinfo lists sha_ni, ssse3 and sse4_1;
under qemu-aarch64, whose CPUs all have the SHA2 extension, always the instructions. The x86-64
executable runs where the host is x86-64; the AArch64 one under qemu-aarch64."""
import hashlib
import hmac
import random

import pytest

from backend import build_rt_program, require_isa, run_exe

MSG = 4 << 20
MAIN = f"""
data msg: [u8; {MSG}] = extern;
data cases: [i64] = extern;                 // (offset, length) pairs, then 0, -1
data keyed: [i64] = extern;                 // (key offset, message offset, length), then -1
global digest: [u8; 32];

fn print_digest() {{
    let i = 0;
    while i < 32 {{
        rt_out_byte(load8(rt_hex_digits + (load8(digest + i) >> 4)));
        rt_out_byte(load8(rt_hex_digits + (load8(digest + i) & 15)));
        i = i + 1;
    }}
    rt_out_byte(10);
}}

fn main(argc: i64, argv: i64) -> i64 {{
    rt_out_dec(load64(sha_hw));
    rt_out_byte(10);
    let pass = 0;
    while pass < 2 {{                        // as found at start, then the scalar code
        let c = cases;
        while load64(c + 8) >= 0 {{
            sha256(msg + load64(c), load64(c + 8), digest);
            print_digest();
            c = c + 16;
        }}
        c = keyed;
        while load64(c) >= 0 {{
            hmac_sha256(msg + load64(c), msg + load64(c + 8), load64(c + 16), digest);
            print_digest();
            c = c + 24;
        }}
        store64(sha_hw, 0);
        pass = pass + 1;
    }}
    rt_flush();
    return 0;
}}
"""


def words(values) -> bytes:
    return b"".join(v.to_bytes(8, "little", signed=True) for v in values)


def inputs(seed: int = 2024):
    rnd = random.Random(seed)
    msg = rnd.randbytes(MSG)
    cases = [(rnd.randrange(64), n) for n in range(301)]
    cases += [(rnd.randrange(MSG - 5000), rnd.randrange(5001)) for _ in range(60)]
    cases += [(0, 1 << 20), (7, 2 << 20), (rnd.randrange(4096), (3 << 20) + rnd.randrange(1 << 16)),
              (1, MSG - 1)]
    keyed = [(rnd.randrange(MSG - 32), rnd.randrange(MSG - 192), rnd.randrange(193)) for _ in range(40)]
    return msg, cases, keyed


def build(isa: str, tmp_path, msg: bytes, cases, keyed):
    blobs = {"msg": msg, "cases": words([v for c in cases for v in c] + [0, -1]),
             "keyed": words([v for c in keyed for v in c] + [-1])}
    return build_rt_program(MAIN, "sha", isa, tmp_path, blobs)


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_runtime_sha256_equals_hashlib_on_random_messages(isa, tmp_path):
    require_isa(isa)
    msg, cases, keyed = inputs()
    r = run_exe(build(isa, tmp_path, msg, cases, keyed), target=isa, timeout=300)
    assert (r.returncode, r.stderr) == (0, "")
    want = [hashlib.sha256(msg[o:o + n]).hexdigest() for o, n in cases]
    want += [hmac.new(msg[k:k + 32], msg[o:o + n], hashlib.sha256).hexdigest() for k, o, n in keyed]
    hw, *got = r.stdout.split()
    assert hw == str(int(has_sha_instructions(isa)))
    assert len(got) == 2 * len(want)
    for path, digests in (("found at start", got[:len(want)]), ("scalar", got[len(want):])):
        wrong = [(i, (cases + keyed)[i]) for i, (g, w) in enumerate(zip(digests, want)) if g != w]
        assert not wrong, (path, wrong[:10])


def has_sha_instructions(isa: str) -> bool:
    if isa == "aarch64":
        return True
    flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    return all(f in flags for f in ("sha_ni", "ssse3", "sse4_1"))
