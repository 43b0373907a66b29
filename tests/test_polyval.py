"""The runtime's POLYVAL (alphac/runtime/polyval.rt), the universal hash under the frames' MACs,
against RFC 8452's test vectors and the tests' twin (tests/frames.py's `polyval`, itself checked
against those vectors here), on every x86-64 level and on AArch64 under qemu-aarch64, by both of
its paths: the CPU's carry-less multiply where it has one (PCLMULQDQ; qemu's CPUs all have
PMULL), then the scalar code, forced. Random contents at unaligned offsets, every length 0..300
(partial last blocks, the eight-block groups of polyval_hw and their remainders), random lengths to
5000 against the twin; a few messages of up to 3 MiB where the two paths must agree."""
import random

import pytest

from backend import build_rt_program, require_isa, run_exe
from frames import polyval

from alphac.build import runtime_items

# RFC 8452: Appendix A's POLYVAL(H, X_1, X_2), and Appendix C.1's second vector's POLYVAL input
# (the plaintext block, then the length block) and result under its record authentication key
RFC = [("25629347589242761d31f826ba4b757b",
        "4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362",
        "f7a3b47b846119fae5b7866cf5e5b77e"),
       ("d9b360279694941ac5dbc6987ada7377",
        "0100000000000000000000000000000000000000000000004000000000000000",
        "eb93b7740962c5e49d2a90a7dc5cec74")]

MSG = 3 << 20
MAIN = f"""
data msg: [u8; {MSG}] = extern;
data cases: [i64] = extern;                 // (key offset, offset, length, whole blocks), then -1
global digest: [u8; 16];

fn main(argc: i64, argv: i64) -> i64 {{
    let pass = 0;
    while pass < 2 {{                        // as found at start, then the scalar code
        let c = cases;
        while load64(c) >= 0 {{
            pv_setup(msg + load64(c));
            if pass == 1 {{ store64(pv_hw, 0); }}
            if pass == 0 && c == cases {{
                rt_out_dec(load64(pv_hw));
                rt_out_byte(10);
            }}
            if load64(c + 24) {{                // POLYVAL itself, of whole blocks
                store64(digest, 0);
                store64(digest + 8, 0);
                pv_blocks(digest, msg + load64(c + 8), load64(c + 16) >> 4);
            }} else {{
                polyval(msg + load64(c + 8), load64(c + 16), digest);
            }}
            let i = 0;
            while i < 16 {{
                rt_out_byte(load8(rt_hex_digits + (load8(digest + i) >> 4)));
                rt_out_byte(load8(rt_hex_digits + (load8(digest + i) & 15)));
                i = i + 1;
            }}
            rt_out_byte(10);
            c = c + 32;
        }}
        pass = pass + 1;
    }}
    rt_flush();
    return 0;
}}
"""


def test_the_twin_gives_rfc_8452s_vectors():
    for h, x, want in RFC:
        assert polyval(bytes.fromhex(h), bytes.fromhex(x), length_block=False).hex() == want


def inputs(seed: int = 8452):
    rnd = random.Random(seed)
    msg = bytearray(rnd.randbytes(MSG))
    cases = []
    for h, x, _ in RFC:                              # the vectors at the start of msg
        at = 32 * len(cases)
        msg[at:at + 16], msg[at + 1024:at + 1024 + 32] = bytes.fromhex(h), bytes.fromhex(x)
        cases.append((at, at + 1024, 32, 1))
    cases += [(rnd.randrange(MSG - 16), rnd.randrange(64) + 4096, n, 0) for n in range(301)]
    cases += [(rnd.randrange(MSG - 16), rnd.randrange(MSG - 5000), rnd.randrange(5001), 0) for _ in range(40)]
    big = [(rnd.randrange(MSG - 16), 3, (1 << 20) + 7, 0), (rnd.randrange(MSG - 16), 0, MSG, 0)]
    return bytes(msg), cases, big


def words(values) -> bytes:
    return b"".join(v.to_bytes(8, "little", signed=True) for v in values)


@pytest.mark.parametrize("target", ["x86_64", "x86_64-v3", "x86_64-v4", "aarch64"])
def test_runtime_polyval_equals_the_twin(target, tmp_path):
    from alphac.targets import LEVELS, host_runs
    isa = LEVELS[target].isa if target in LEVELS else target
    require_isa(isa)
    if target in LEVELS and not host_runs(target):
        pytest.skip(f"this CPU does not run {target}")
    msg, cases, big = inputs()
    exe = build_rt_program(MAIN, "polyval", target, tmp_path,
                           {"msg": msg, "cases": words([v for c in cases + big for v in c] + [-1])},
                           extra=runtime_items("polyval"))
    r = run_exe(exe, target=isa, timeout=600)
    assert (r.returncode, r.stderr) == (0, "")
    hw, *got = r.stdout.split()
    assert hw == str(int(has_clmul(isa)))
    n = len(cases) + len(big)
    assert len(got) == 2 * n
    want = [polyval(msg[k:k + 16], msg[o:o + m], length_block=not whole).hex() for k, o, m, whole in cases]
    assert [want[i] for i in range(len(RFC))] == [v for _, _, v in RFC]
    for path, digests in (("found at start", got[:n]), ("scalar", got[n:])):
        wrong = [(i, cases[i]) for i, (g, w) in enumerate(zip(digests, want)) if g != w]
        assert not wrong, (path, wrong[:10])
    assert got[len(cases):n] == got[n + len(cases):]          # the big ones: both paths agree


def has_clmul(isa: str) -> bool:
    if isa == "aarch64":
        return True
    flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    return "pclmulqdq" in flags
