"""The x86_64-v3 level: f64x4 (AVX2, never FMA) through the runtime language, the register
allocator and the x86-64 selector, against plain Python; its start-up check; its learners' bits.

Each f64x4 lane must be exactly the scalar operation on that lane: the programs here print every
lane's bits and compare them with Python's binary64 arithmetic (the host's own SSE2). An
x86_64-v3 executable runs natively where this CPU has AVX2, else under `qemu-x86_64 -cpu max`;
under qemu's Nehalem (no AVX) and SandyBridge (AVX, no AVX2) models it must refuse
`cpu-level` before anything else.
"""
import math
import struct
import subprocess

import numpy as np
import pytest
from conftest import ROOT, require_tool
from differential import runner

from alphac.refusals import REFUSALS

P, Q, R, NAN, INF, TINY = 1.5, -0.1, 3.0, math.nan, math.inf, 5e-324
WA, WB, WC = (P, Q, R, NAN), (INF, TINY, -0.0, 1e300), (R, TINY, INF, -0.0)
SEEDS = WA + WB + WC + (Q,)          # at seeds + 0, 32, 64; q alone at seeds + 96
NW = 20                              # f64x4 values live across a call: spilled (4 slots each)


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def lanes(f, *ws):
    """f on each lane, in numpy's binary64 (x / 0 is an infinity or a NaN, as on the CPU)."""
    with np.errstate(all="ignore"):
        return tuple(float(f(*(np.float64(w[k]) for w in ws))) for k in range(4))


CASES = [
    ("wa + wb", lanes(lambda a, b: a + b, WA, WB)), ("wb - wa", lanes(lambda a, b: a - b, WB, WA)),
    ("wa * wb", lanes(lambda a, b: a * b, WA, WB)), ("wa / wb", lanes(lambda a, b: a / b, WA, WB)),
    ("wb / wa", lanes(lambda a, b: a / b, WB, WA)), ("sqrtw(wc)", lanes(np.sqrt, WC)),
    ("-wa", lanes(lambda a: -a, WA)), ("-wb", lanes(lambda a: -a, WB)),
    ("splatw(q) * wa", lanes(lambda a: Q * a, WA)),
    ("splatw(loadf(seeds + 96)) - wc", lanes(lambda c: Q - c, WC)),    # a broadcast from memory
    ("splatw(loadf(seeds + 8 * (z - 4))) + wb", lanes(lambda b: P + b, WB)),    # indexed (z = 4)
    ("(wa + wc) * (wa - wc) / wb", lanes(lambda a, c, b: (a + c) * (a - c) / b, WA, WC, WB)),
]
OFFSETS = [0, 8, 32, -32, 4104, 65504, 60008]      # storew/loadw at immediate offsets


def press(a: float) -> float:
    """What wpress(a) returns: NW f64x4 live across a call, summed lane by lane, then the lanes."""
    ws = [tuple(x * float(k + 1) + a for x in WA[:3] + (a,)) for k in range(NW)]
    acc = [0.0] * 4
    for w in ws:
        acc = [s + x for s, x in zip(acc, w)]
    return ((acc[0] - acc[1]) + acc[2]) * acc[3]


def program() -> tuple[str, list[int]]:
    body = ["    let z = 4;", "    let q = loadf(seeds + 96);", "    let wa = loadw(seeds);",
            "    let wb = loadw(seeds + 32);", "    let wc = loadw(seeds + 64);"]
    want: list[int] = []

    def out(w: str) -> None:
        body.append(f"    storew(obuf, {w});")
        body.extend(f"    out(f2bits(loadf(obuf + {8 * k})));" for k in range(4))
    for e, v in CASES:
        body.append(f"    let t = {e};")
        out("t")
        want += [bits(x) for x in v]
    body.append("    let wv = wa;")           # a copy, then a loop that redefines it (wmov)
    body.append("    let n = 0;\n    while n < 3 { wv = wv + wc; n = n + 1; }")
    out("wv")
    want += [bits(a + c + c + c) for a, c in zip(WA, WC)]
    for k, off in enumerate(OFFSETS):
        addr = f"wbuf + 300 + {off}" if off >= 0 else f"wbuf + 300 - {-off}"
        body.append(f"    storew({addr}, splatw(bits2f({k + 1})) * wb);")
    image = bytearray(70000)
    for k, off in enumerate(OFFSETS):
        scale = struct.unpack("<d", (k + 1).to_bytes(8, "little"))[0]
        image[300 + off:300 + off + 32] = struct.pack("<4d", *(scale * b for b in WB))
    for k, off in enumerate(OFFSETS):
        addr = f"wbuf + 300 + {off}" if off >= 0 else f"wbuf + 300 - {-off}"
        out(f"loadw({addr})")
        want += [int.from_bytes(image[300 + off + d:300 + off + d + 8], "little") for d in range(0, 32, 8)]
    body += ["    storew(wbuf + 8 * (z + 100), wa);", "    out(f2bits(loadf(wbuf + 8 * (z + 102))));"]
    out("loadw(wbuf + 8 * (z + 100))")
    want += [bits(R)] + [bits(x) for x in WA]
    body += ["    wide_end();", "    out(f2bits(wpress(p)));"]
    want.append(bits(press(P)))
    press_fn = ["fn nop() { }", "fn wpress(a: f64) -> f64 {", "    storef(obuf + 24, a);",
                "    storef(obuf, loadf(seeds));", "    storef(obuf + 8, loadf(seeds + 8));",
                "    storef(obuf + 16, loadf(seeds + 16));", "    let v = loadw(obuf);"]
    press_fn += [f"    let w{k} = v * splatw({float(k + 1)!r}) + splatw(a);" for k in range(NW)]
    press_fn += ["    nop();", f"    let acc = loadw(zero4);"]
    press_fn += [f"    acc = acc + w{k};" for k in range(NW)]
    press_fn += ["    storew(obuf, acc);", "    wide_end();",
                 "    return ((loadf(obuf) - loadf(obuf + 8)) + loadf(obuf + 16)) * loadf(obuf + 24);", "}"]
    # (the first three lanes of v are WA's p q r, the last one a: w_k = v * (k + 1) + a)
    seeds = ", ".join(str(bits(x)) for x in SEEDS)
    source = (f"global obuf: [u8; 64];\nglobal wbuf: [u8; 70000];\nvar seeds: [i64; {len(SEEDS)}] = [{seeds}];\n"
              f"var zero4: [i64; 4] = [0, 0, 0, 0];\n" + "\n".join(press_fn) + "\n" +
              "fn out(v: i64) { rt_out_hex16(v); rt_out_byte(10); }\n"
              "fn main(argc: i64, argv: i64) -> i64 {\n    let p = loadf(seeds);\n" + "\n".join(body) +
              "\n    rt_flush();\n    return 3;\n}\n")
    return source, want


def build(target: str, source: str) -> bytes:
    from alphac.build import link_program, runtime_closure
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    from alphac.lower.target import target as get
    tgt = get(target)
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") + rt.parse(source, "w.rt")
    return link_program(lower_program(items, {}), tgt)[0]


def test_every_f64x4_operation(tmp_path):
    source, want = program()
    exe = tmp_path / "wide"
    exe.write_bytes(build("x86_64-v3", source))
    exe.chmod(0o755)
    r = subprocess.run(runner("x86_64-v3") + [str(exe)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (3, "")
    got = r.stdout.split()
    assert len(got) == len(want)
    wrong = [(i, g, f"{w:016x}") for i, (g, w) in enumerate(zip(got, want)) if g != f"{w:016x}"]
    assert not wrong, wrong


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_f64x4_is_refused_below_the_level(isa):
    from alphac.lower.rt import RtError
    with pytest.raises(RtError, match="only the x86_64-v3 target has"):
        build(isa, "fn main(argc: i64, argv: i64) -> i64 {\n    let w = loadw(argv);\n"
                   "    storew(argv, w);\n    return 0;\n}\n")


def test_no_f64x4_lives_across_wide_end():
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    from alphac.lower.target import target
    from alphac.lower.regalloc import allocate
    from alphac.build import runtime_closure
    tgt = target("x86_64-v3")
    src = ("fn f(a: i64) {\n    let w = loadw(a);\n    wide_end();\n    storew(a, w);\n}\n"
           "fn main(argc: i64, argv: i64) -> i64 { f(argv); return 0; }\n")
    prog = lower_program(rt.parse(tgt.prelude(), "p.rt") + runtime_closure("core") + rt.parse(src, "w.rt"), {})
    with pytest.raises(ValueError, match="live across a wend"):
        allocate(prog.function("f"), tgt.regfile)


def learner_exe(tmp_path, name: str, target: str):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    lr = compile_file(ROOT / "examples" / f"{name}.alpha").learner
    img = build_learner(lr, target)
    exe = tmp_path / f"{name}.{target}"
    exe.write_bytes(img.elf)
    exe.chmod(0o755)
    return exe, img


@pytest.mark.parametrize("cpu", ["Nehalem", "SandyBridge"])
def test_a_cpu_without_avx2_is_refused(tmp_path, cpu):
    exe, _ = learner_exe(tmp_path, "lsq_adam", "x86_64-v3")
    qemu = require_tool("qemu-x86_64")
    r = subprocess.run([qemu, "-cpu", cpu, str(exe), "--steps", "3"], capture_output=True, text=True, timeout=60)
    said = [line for line in r.stderr.splitlines() if not line.startswith("qemu-x86_64: warning")]
    assert (r.returncode, r.stdout, said) == (REFUSALS["cpu-level"][0], "", ["refused: cpu-level"])
    ok = subprocess.run([qemu, "-cpu", "max", str(exe), "--steps", "3"], capture_output=True, text=True,
                        timeout=60)
    base, _ = learner_exe(tmp_path, "lsq_adam", "x86_64")
    assert ok.returncode == 0 and ok.stdout == subprocess.run(
        [qemu, "-cpu", cpu, str(base), "--steps", "3"], capture_output=True, text=True, timeout=60).stdout


@pytest.mark.parametrize("name", ["lsq_adam", "lsq_momentum", "logistic", "independent_state"])
def test_examples_print_the_baselines_bits(tmp_path, name):
    """Same bits as the x86_64 build, and f64x4 in its code (the vector loops are 4 wide)."""
    exe, img = learner_exe(tmp_path, name, "x86_64-v3")
    base, _ = learner_exe(tmp_path, name, "x86_64")
    run = lambda e, pre: subprocess.run(pre + [str(e), "--steps", "7"], capture_output=True, text=True,
                                        timeout=60, check=True).stdout
    assert run(exe, runner("x86_64-v3")) == run(base, [])
    assert "loadw(" in img.rt_source
