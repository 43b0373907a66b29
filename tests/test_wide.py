"""The x86_64-v3 and x86_64-v4 levels: f64x4 (AVX2) and f64x8 (AVX-512F), never FMA, through
the runtime language, the register allocator and the x86-64 selector, against plain Python; their
start-up checks; their learners' bits.

Each lane must be exactly the scalar operation on that lane: the programs here print every lane's
bits and compare them with Python's binary64 arithmetic (the host's own SSE2). An x86_64-v3
executable runs natively where this CPU has AVX2, else under `qemu-x86_64 -cpu max`; under qemu's
Nehalem (no AVX) and SandyBridge (AVX, no AVX2) models it must refuse `cpu-level` before anything
else. qemu emulates no AVX-512, so an x86_64-v4 executable runs only natively, where the CPU has
it; on a CPU without it (and under every qemu model) the same tests check that it refuses
`cpu-level` instead: a run on such a host checks the refusal, never skips.
"""
import math
import struct
import subprocess

import numpy as np
import pytest
from conftest import ROOT, require_tool
from differential import runner

from alphac.targets import host_runs
from alphac.refusals import REFUSALS

P, Q, R, NAN, INF, TINY = 1.5, -0.1, 3.0, math.nan, math.inf, 5e-324
WA, WB, WC = (P, Q, R, NAN), (INF, TINY, -0.0, 1e300), (R, TINY, INF, -0.0)
NW = 20                              # vectors live across a call: spilled (4 or 8 slots each)
# a level -> its lanes and its builtins (load, store, splat, sqrt)
LEVEL = {"x86_64-v3": (4, "loadw", "storew", "splatw", "sqrtw"),
         "x86_64-v4": (8, "loadz", "storez", "splatz", "sqrtz")}
REFUSED = f"exit {REFUSALS['cpu-level'][0]}: refused: cpu-level"


def operands(n: int):
    """wa, wb, wc in n lanes (8: each followed by another's four), and the seeds: wa, wb, wc at
    seeds + 0, 8n, 16n, q alone at seeds + 24n."""
    wa, wb, wc = (WA, WB, WC) if n == 4 else (WA + WC, WB + WA, WC + WB)
    return wa, wb, wc, wa + wb + wc + (Q,)


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def lanes(f, *ws):
    """f on each lane, in numpy's binary64 (x / 0 is an infinity or a NaN, as on the CPU)."""
    with np.errstate(all="ignore"):
        return tuple(float(f(*(np.float64(w[k]) for w in ws))) for k in range(len(ws[0])))


def cases(n: int, splat: str, sqrt: str) -> list:
    wa, wb, wc, _ = operands(n)
    return [
        ("wa + wb", lanes(lambda a, b: a + b, wa, wb)), ("wb - wa", lanes(lambda a, b: a - b, wb, wa)),
        ("wa * wb", lanes(lambda a, b: a * b, wa, wb)), ("wa / wb", lanes(lambda a, b: a / b, wa, wb)),
        ("wb / wa", lanes(lambda a, b: a / b, wb, wa)), (f"{sqrt}(wc)", lanes(np.sqrt, wc)),
        ("-wa", lanes(lambda a: -a, wa)), ("-wb", lanes(lambda a: -a, wb)),
        (f"{splat}(q) * wa", lanes(lambda a: Q * a, wa)),
        (f"{splat}(loadf(seeds + {24 * n})) - wc", lanes(lambda c: Q - c, wc)),   # a broadcast from memory
        (f"{splat}(loadf(seeds + 8 * (z - 4))) + wb", lanes(lambda b: P + b, wb)),   # indexed (z = 4)
        # a product with a broadcast from memory (x86_64-v4: `vmulpd zmm, zmm, m64{1to8}`), the
        # splat first or second, at an offset or indexed
        (f"{splat}(loadf(seeds + {24 * n})) * wc", lanes(lambda c: Q * c, wc)),
        (f"wb * {splat}(loadf(seeds + 8 * (z - 4)))", lanes(lambda b: b * P, wb)),
        ("(wa + wc) * (wa - wc) / wb", lanes(lambda a, c, b: (a + c) * (a - c) / b, wa, wc, wb)),
    ]


OFFSETS = [0, 8, 32, -32, 64, -64, 4104, 8128, 8192, -8192, 65504, 60008]   # immediate offsets


def press(a: float, n: int) -> float:
    """What wpress(a) returns: NW vectors live across a call, summed lane by lane, then lanes."""
    wa = operands(n)[0]
    ws = [tuple(x * float(k + 1) + a for x in wa[:n - 1] + (a,)) for k in range(NW)]
    acc = [0.0] * n
    for w in ws:
        acc = [s + x for s, x in zip(acc, w)]
    return ((acc[0] - acc[1]) + acc[2]) * acc[n - 1]


def program(level: str) -> tuple[str, list[int]]:
    n, load, store, splat, sqrt = LEVEL[level]
    wa, wb, wc, seeds = operands(n)
    body = ["    let z = 4;", f"    let q = loadf(seeds + {24 * n});", f"    let wa = {load}(seeds);",
            f"    let wb = {load}(seeds + {8 * n});", f"    let wc = {load}(seeds + {16 * n});"]
    want: list[int] = []

    def out(w: str) -> None:
        body.append(f"    {store}(obuf, {w});")
        body.extend(f"    out(f2bits(loadf(obuf + {8 * k})));" for k in range(n))
    for e, v in cases(n, splat, sqrt):
        body.append(f"    let t = {e};")
        out("t")
        want += [bits(x) for x in v]
    body.append("    let wv = wa;")           # a copy, then a loop that redefines it (wmov)
    body.append("    let n = 0;\n    while n < 3 { wv = wv + wc; n = n + 1; }")
    out("wv")
    want += [bits(a + c + c + c) for a, c in zip(wa, wc)]
    for k, off in enumerate(OFFSETS):
        addr = f"wbuf + 9000 + {off}" if off >= 0 else f"wbuf + 9000 - {-off}"
        body.append(f"    {store}({addr}, {splat}(bits2f({k + 1})) * wb);")
    image = bytearray(80000)
    for k, off in enumerate(OFFSETS):
        scale = struct.unpack("<d", (k + 1).to_bytes(8, "little"))[0]
        image[9000 + off:9000 + off + 8 * n] = struct.pack(f"<{n}d", *(scale * b for b in wb))
    for k, off in enumerate(OFFSETS):
        addr = f"wbuf + 9000 + {off}" if off >= 0 else f"wbuf + 9000 - {-off}"
        out(f"{load}({addr})")
        want += [int.from_bytes(image[9000 + off + d:9000 + off + d + 8], "little") for d in range(0, 8 * n, 8)]
    body += [f"    {store}(wbuf + 8 * (z + 100), wa);", "    out(f2bits(loadf(wbuf + 8 * (z + 102))));"]
    out(f"{load}(wbuf + 8 * (z + 100))")
    want += [bits(R)] + [bits(x) for x in wa]
    body += ["    wide_end();", "    out(f2bits(wpress(p)));"]
    want.append(bits(press(P, n)))
    press_fn = ["fn nop() { }", "fn wpress(a: f64) -> f64 {", f"    storef(obuf + {8 * (n - 1)}, a);"]
    press_fn += [f"    storef(obuf + {8 * k}, loadf(seeds + {8 * k}));" for k in range(n - 1)]
    press_fn += [f"    let v = {load}(obuf);"]
    press_fn += [f"    let w{k} = v * {splat}({float(k + 1)!r}) + {splat}(a);" for k in range(NW)]
    press_fn += ["    nop();", f"    let acc = {load}(zeros);"]
    press_fn += [f"    acc = acc + w{k};" for k in range(NW)]
    press_fn += [f"    {store}(obuf, acc);", "    wide_end();",
                 f"    return ((loadf(obuf) - loadf(obuf + 8)) + loadf(obuf + 16)) * loadf(obuf + {8 * (n - 1)});", "}"]
    # (the first n - 1 lanes of v are wa's, the last one a: w_k = v * (k + 1) + a)
    seeds = ", ".join(str(bits(x)) for x in seeds)
    source = (f"global obuf: [u8; 64];\nglobal wbuf: [u8; 80000];\nvar seeds: [i64; {3 * n + 1}] = [{seeds}];\n"
              f"var zeros: [i64; {n}] = [{', '.join(['0'] * n)}];\n" + "\n".join(press_fn) + "\n" +
              "fn out(v: i64) { rt_out_hex16(v); rt_out_byte(10); }\n"
              "fn main(argc: i64, argv: i64) -> i64 {\n    let p = loadf(seeds);\n" + "\n".join(body) +
              "\n    rt_flush();\n    return 3;\n}\n")
    return source, want


def build(target: str, source: str) -> bytes:
    from alphac.build import link_program, runtime_closure
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    from alphac.lower.target import target as get
    from test_select_ops import high_first
    tgt = get(target.removesuffix("/high"))
    tgt = high_first(tgt) if target.endswith("/high") else tgt
    own = rt.parse(source, "w.rt")              # generated: stores at computed offsets allowed
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") + own
    return link_program(lower_program(items, {}, generated=frozenset(map(id, own))), tgt)[0]


@pytest.mark.parametrize("level, build_as", [(lv, lv) for lv in sorted(LEVEL)] + [
    ("x86_64-v4", "x86_64-v4/high"), ("x86_64-v3", "x86_64-v4/high")])
def test_every_wide_operation(tmp_path, level, build_as):
    """Every f64x4 (x86_64-v3) or f64x8 (x86_64-v4) operation, lane by lane (built as
    x86_64-v4/high: in registers 16-31, preferred, so EVEX's 256- and 512-bit forms); an
    x86_64-v4 run on a CPU without AVX-512 checks its refusal instead."""
    source, want = program(level)
    exe = tmp_path / "wide"
    exe.write_bytes(build(build_as, source))
    exe.chmod(0o755)
    built = build_as.removesuffix("/high")
    r = subprocess.run(runner(built) + [str(exe)], capture_output=True, text=True, timeout=60)
    if not host_runs(built) and built == "x86_64-v4":
        assert (r.returncode, r.stdout, r.stderr) == (REFUSALS["cpu-level"][0], "", "refused: cpu-level\n")
        return
    assert (r.returncode, r.stderr) == (3, "")
    got = r.stdout.split()
    assert len(got) == len(want)
    wrong = [(i, g, f"{w:016x}") for i, (g, w) in enumerate(zip(got, want)) if g != f"{w:016x}"]
    assert not wrong, wrong


def test_x86_64_v4_multiplies_by_a_broadcast_from_memory():
    """A splat of a binary64 load read once, by a product, is that product's memory operand at
    x86_64-v4 (AVX-512's embedded broadcast: one instruction, not a vbroadcastsd and a vmulpd),
    at an offset and indexed, the splat first or second (the cases above, lane by lane)."""
    import io
    import capstone
    from elftools.elf.elffile import ELFFile
    elf = build("x86_64-v4", program("x86_64-v4")[0])
    text = ELFFile(io.BytesIO(elf)).get_section_by_name(".text").data()
    folded = [f"{i.mnemonic} {i.op_str}" for i in capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64).disasm(text, 0)
              if i.op_str.endswith("{1to8}")]
    assert [f.split(", ")[2].split(" [")[1].count("*8") for f in folded] == [0, 1], folded
    assert all(f.startswith("vmulpd zmm") for f in folded), folded


@pytest.mark.parametrize("isa, level", [("x86_64", "x86_64-v3"), ("aarch64", "x86_64-v3"),
                                        ("x86_64", "x86_64-v4"), ("x86_64-v3", "x86_64-v4"),
                                        ("aarch64", "x86_64-v4")])
def test_wide_vectors_are_refused_below_the_level(isa, level):
    from alphac.lower.rt import RtError
    _, load, store, _, _ = LEVEL[level]
    with pytest.raises(RtError, match=f"only the {level} target has"):
        build(isa, f"global b: [u8; 64];\nfn main(argc: i64, argv: i64) -> i64 {{\n    let w = {load}(b);\n"
                   f"    {store}(b, w);\n    return 0;\n}}\n")


@pytest.mark.parametrize("level", sorted(LEVEL))
def test_no_wide_vector_lives_across_wide_end(level):
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    from alphac.lower.target import target
    from alphac.lower.regalloc import allocate
    from alphac.build import runtime_closure
    tgt = target(level)
    _, load, store, _, _ = LEVEL[level]
    src = (f"fn f(a: i64 writes 64) {{\n    let w = {load}(a);\n    wide_end();\n    {store}(a, w);\n}}\n"
           "global b: [u8; 64];\nfn main(argc: i64, argv: i64) -> i64 { f(b); return 0; }\n")
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


def test_a_cpu_without_avx512_is_refused(tmp_path):
    """qemu's models have no AVX-512: under the most capable one (AVX2 and more) an x86_64-v4
    executable refuses `cpu-level` before anything else, where the x86_64-v3 one runs."""
    qemu = require_tool("qemu-x86_64")
    exe, _ = learner_exe(tmp_path, "lsq_adam", "x86_64-v4")
    v3, _ = learner_exe(tmp_path, "lsq_adam", "x86_64-v3")
    for cpu in ("max", "Nehalem"):
        r = subprocess.run([qemu, "-cpu", cpu, str(exe), "--steps", "3"], capture_output=True, text=True, timeout=60)
        said = [line for line in r.stderr.splitlines() if not line.startswith("qemu-x86_64: warning")]
        assert (r.returncode, r.stdout, said) == (REFUSALS["cpu-level"][0], "", ["refused: cpu-level"])
    ok = subprocess.run([qemu, "-cpu", "max", str(v3), "--steps", "3"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout


@pytest.mark.parametrize("level", sorted(LEVEL))
@pytest.mark.parametrize("name", ["lsq_adam", "lsq_momentum", "logistic", "independent_state", "digits_mlp"])
def test_examples_print_the_baselines_bits(tmp_path, name, level):
    """Same bits as the x86_64 build, and the level's vectors in its code (the vector loops are
    4 or 8 wide); at x86_64-v4 on a CPU without AVX-512, the refusal instead."""
    exe, img = learner_exe(tmp_path, name, level)
    base, _ = learner_exe(tmp_path, name, "x86_64")
    run = lambda e, pre: subprocess.run(pre + [str(e), "--steps", "7"], capture_output=True, text=True,
                                        timeout=120, cwd=ROOT)
    got, want = run(exe, runner(level)), run(base, [])
    assert want.returncode == 0 and want.stdout
    if level == "x86_64-v4" and not host_runs(level):
        assert (got.returncode, got.stdout, got.stderr) == (REFUSALS["cpu-level"][0], "", "refused: cpu-level\n")
    else:
        assert (got.returncode, got.stdout) == (0, want.stdout)
    assert f"{LEVEL[level][1]}(" in img.rt_source


LSQ8 = """learner lsq8
data x = load("x.npy")
data y = load("y.npy")
param w: f64[64] = 0.0
state v: f64[64] = 0.0
loss(i) = 0.5 * (dot(w, x[i]) - y[i])^2
update {
  v = 0.9 * v + grad(w)
  w = w - 0.001 * v
}
"""


def test_x86_64_v4_keeps_eight_chains_in_registers(tmp_path, monkeypatch):
    """At x86_64-v4 the allocator has registers 16-31 (EVEX): the least squares' eight dot chains
    (8 samples a block) and the gradient loop's eight splats all stay in registers, where
    registers 0-13 alone spill two chains and five splats (in each of the two copies of the
    block: the owner's first block, which stores G, and the loop's)."""
    from alphac.build import build_learner
    from alphac.driver import compile_file
    from alphac.lower.fold import fold_loads, sink_wide
    from alphac.lower.regalloc import allocate
    from alphac.lower.target import target
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    np.save("x.npy", rng.standard_normal((8, 64)))
    np.save("y.npy", rng.standard_normal(8))
    (tmp_path / "lsq8.alpha").write_text(LSQ8)
    img = build_learner(compile_file(tmp_path / "lsq8.alpha").learner, "x86_64-v4")
    fn = sink_wide(fold_loads(img.program.function("learner_grad")))
    spilled = lambda regfile: sorted(v.cls for v, (kind, _) in allocate(fn, regfile).loc.items()
                                     if kind == "slot" and v.cls != "i")
    assert len(target("x86_64-v4").regfile.float_regs) == 30
    assert spilled(target("x86_64-v4").regfile) == []
    assert spilled(target("x86_64").regfile) == ["f"] * 4 + ["z"] * 10     # in each block's code


SSE2 = {"movsd", "movapd", "movupd", "movq", "addsd", "subsd", "mulsd", "divsd", "sqrtsd", "ucomisd",
        "cvtsi2sd", "xorpd", "unpcklpd", "unpckhpd", "addpd", "subpd", "mulpd", "divpd", "sqrtpd"}


@pytest.mark.parametrize("target", ["x86_64", "x86_64-v3", "x86_64-v4"])
def test_the_levels_emit_no_sse2_arithmetic(tmp_path, target):
    """At x86_64-v3 and x86_64-v4 every binary64 and f64x2 instruction is a VEX (or EVEX) one, in
    three-operand form: no SSE2 copy before an operation, no SSE code beside the wide code (the
    hardware SHA-256 alone is legacy SSE); the baseline x86_64 is all SSE2."""
    import io
    import capstone
    from elftools.elf.elffile import ELFFile
    _, img = learner_exe(tmp_path, "digits_mlp", target)
    text = ELFFile(io.BytesIO(img.elf)).get_section_by_name(".text").data()
    seen = {i.mnemonic for i in capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64).disasm(text, 0)}
    if target == "x86_64":
        assert SSE2 - {"cvtsi2sd"} <= seen and not {m for m in seen if m.startswith("v")}
    else:
        assert not seen & SSE2 and {"vaddsd", "vmulsd", "vmovsd", "vmovapd", "vaddpd"} <= seen
