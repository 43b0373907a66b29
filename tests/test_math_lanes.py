"""The vector functions (alphac.math.lanes) give, lane by lane, the scalar function's bits.

Each is run through an AArch64 (2 lanes: NEON, under qemu-aarch64 on other hosts), an x86_64-v3
(4 lanes) and an x86_64-v4 (8 lanes) filter executable (alphac.tools.mathexe) and compared bit
for bit with the scalar x86-64 executable, itself
checked against MPFR by tests/test_math.py: on CORE-MATH's worst cases and the special values
(inputs whose rounding test fails or which the fast path does not take), each placed in every
lane position among random inputs the fast path decides, and on random inputs. The mutants whose
lanes keep the fast path's value without the rounding test, or take the fast path outside its
range, must disagree.
"""
from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from alphac.math import dd, lanes
from alphac.targets import LEVELS, emulator, host_runs
from alphac.tools import mathexe
from tests.test_math import _workdir, random_inputs, run, special_inputs, worst_inputs

LEVEL = {2: "aarch64", 4: "x86_64-v3", 8: "x86_64-v4"}
WIDTHS = sorted(LEVEL)
NAMES = sorted(lanes.FAST)
EASY = {"exp": (-700.0, 700.0), "tanh": (-19.0, 19.0), "log": (1e-3, 1e3),      # inputs the
        "log1p": (-0.9, 100.0), "expm1": (-30.0, 30.0)}                          # fast path takes


def runner(width: int, level: str = "") -> list[str]:
    level = level or LEVEL[width]
    if host_runs(level):
        return []
    if emulator(level) is None:
        pytest.skip(f"{level} executables need {LEVELS[level].extension}")
    return list(emulator(level))


@lru_cache(maxsize=None)
def executable(name: str, width: int, mode: str = "test") -> Path:
    real = lanes.lane_source

    def lane_source(*a):                 # only the vector function is the mutant
        saved, dd.MODE = dd.MODE, "test" if mode == "norange" else mode
        fast = lanes.FAST[name]
        if mode == "norange":            # every lane takes the fast path, in its range or not
            lanes.FAST[name] = (lambda m, x: m.i(1), fast[1])
        try:
            return real(*a)
        finally:
            dd.MODE, lanes.FAST[name] = saved, fast
    lanes.lane_source = lane_source
    try:
        elf = mathexe.build(name, LEVEL[width], width)
    finally:
        lanes.lane_source = real
    path = _workdir() / f"{name}.w{width}.{mode}"
    path.write_bytes(elf)
    os.chmod(path, 0o755)
    return path


def run_lanes(name: str, width: int, xs: np.ndarray, mode: str = "test") -> np.ndarray:
    r = subprocess.run(runner(width) + [str(executable(name, width, mode))],
                       input=xs.astype("<u8").tobytes(), capture_output=True, timeout=600)
    assert r.returncode == 0 and r.stderr == b"", (r.returncode, r.stderr[-500:])
    return np.frombuffer(r.stdout, dtype="<u8").astype(np.uint64)


def arranged(name: str, width: int) -> np.ndarray:
    """Each hard input (worst case, special value) in each lane position p of a group whose
    other lanes are random inputs of the fast path's range; then the hard ones in a row."""
    hard = np.concatenate([worst_inputs(name), special_inputs(name)])
    easy = np.random.default_rng(7).uniform(*EASY[name], len(hard) * (width - 1)).view(np.uint64)
    parts = []
    for p in range(width):
        g = np.empty((len(hard), width), dtype=np.uint64)
        g[:, [q for q in range(width) if q != p]] = easy.reshape(len(hard), width - 1)
        g[:, p] = hard
        parts.append(g.ravel())
    return np.concatenate(parts + [hard, random_inputs(name, 200_003 if width > 2 else 20_003)])   # (qemu: fewer)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", NAMES)
def test_lanes_equal_scalar(name, width):
    xs = arranged(name, width)
    got, want = run_lanes(name, width, xs), run(name, "x86_64", xs)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, [(hex(xs[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", NAMES)
def test_lanes_without_rounding_test_are_caught(name, width):
    xs = worst_inputs(name)[::1 if width > 2 else 7]              # (qemu: every 7th)
    assert np.count_nonzero(run_lanes(name, width, xs, "raw") != run(name, "x86_64", xs)) > 0


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", NAMES)
def test_lanes_outside_the_range_are_caught(name, width):
    xs = special_inputs(name)
    assert np.count_nonzero(run_lanes(name, width, xs, "norange") != run(name, "x86_64", xs)) > 0


@pytest.mark.parametrize("name", ["log", "log1p"])
def test_lane_ranges_are_the_scalar_ranges(name):
    """log's and log1p's lanes test their range without unsigned comparisons
    (functions._log_go_lanes, _log1p_go_lanes): the same predicate as the scalar function's,
    on every boundary (each side, either sign) and on random bit patterns."""
    from alphac.math import functions as F
    from alphac.math.dsl import Eval
    m = Eval()
    scalar = {"log": lambda x: F._log_go(m, x), "log1p": lambda x: F._log1p_go(m, x, x & F.ABS)}
    edges = [0, 1 << 52, 0x3C90000000000000, 0x3FF0000000000000, 0x7FF0000000000000, 1 << 63]
    bits = [(b + d) % (1 << 64) | s for b in edges for d in (-1, 0, 1) for s in (0, 1 << 63)]
    bits += np.random.default_rng(5).integers(0, 1 << 64, 20000, dtype=np.uint64).tolist()
    for b in bits:
        assert lanes.FAST[name][0](m, m.float_(m.i(b))).v == scalar[name](m.i(b)).v, hex(b)


def test_lane_source_refuses_a_binary64_comparison():
    m = lanes.LaneSource(4)
    x = lanes.Val(m, "f", "u0")
    with pytest.raises(TypeError, match="no lane form"):
        x.fgt(m.f(1.0))


# A learner whose tanh, exp, log, log1p and expm1 run over vectors of 15 coordinates (8 + 4 + 2 + 1 at x86_64-v4;
# 4 + 4 + 4 + 2 + 1 at v3; 7 * 2 + 1 on AArch64) with coordinates the fast path does not take (0, -0, 2^-1074, 1e-9,
# +-25, exp beyond 708) between ones it does: every compiled level must give the baseline's bits.
LEARNER = """learner lanes
data x = [[0.5, -1.25, 2.0], [1.5, 0.25, -0.75], [-2.0, 3.0, 0.125]]
const c = [0.0, -0.0, 4.9e-324, 1e-9, 25.0, 0.3, -25.0, 0.9, -0.45, 1.1, 0.99, -0.02, 7.5, -3.25, 0.6]
param W: f64[15, 3] = 0.125
param b: f64[15] = 0.0
state u: f64[15] = 0.5
state v: f64[15] = 1.0
state w: f64[15] = 0.0
loss(i) {
  let h = tanh(W @ x[i] + b + c)
  dot(h, h) + sum(exp(h * 2.0)) + sum(log1p(h * h)) + sum(expm1(h * 0.5))
}
update {
  W = W - 0.5 * grad(W)
  b = b - 0.25 * grad(b)
  u = tanh(exp(c * 800.0 + u * 0.5)) + tanh(u * c)
  v = log(c * c + v * v) * 0.125 + log1p(c * 0.01 + v * 0.5) + expm1(u * c * 0.1)
  w = log(c * c * 1e-300 + 5e-324 + u * 0.0) + log1p(c * 1e-20 + u * 0.0) + expm1(0.0 - c * c * 3.0 + u * 0.0) + w
}
"""


def test_learner_levels_agree(tmp_path):
    import differential
    rep = differential.check_text(LEARNER, tmp_path, ("interp", "x86_64", "x86_64-v3", "x86_64-v4", "aarch64"))
    assert rep.status == "agreed", rep.summary() or rep.code


# The integer lane builtins (qadd ... qshr: alphac.lower.rt) the vector functions are written
# with, each on random 64-bit lanes (the carries, the sign bit, shifts 0, 1, 63) against Python.
QCASES = {"qadd(a, b)": lambda a, b: a + b, "qsub(a, b)": lambda a, b: a - b,
          "qand(a, b)": lambda a, b: a & b, "qor(a, b)": lambda a, b: a | b,
          "qxor(a, b)": lambda a, b: a ^ b, "qshl(a, 0)": lambda a, b: a,
          "qshl(a, 1)": lambda a, b: a << 1, "qshl(a, 63)": lambda a, b: a << 63,
          "qshr(a, 0)": lambda a, b: a,
          "qshr(a, 1)": lambda a, b: a >> 1, "qshr(a, 63)": lambda a, b: a >> 63,
          "qshr(qsub(a, b), 17)": lambda a, b: ((a - b) & M) >> 17}
M = (1 << 64) - 1
END = {2: "", 4: "wide_end();", 8: "wide_end();"}         # (f64x2 needs no transition)


@pytest.mark.parametrize("width, level", [*LEVEL.items(), (2, "x86_64"), (2, "x86_64-v3"), (2, "x86_64-v4")])
def test_integer_lane_builtins(width, level, tmp_path):
    """Each q builtin on random lanes against Python: f64x2 on AArch64 (NEON) and at each x86-64
    level (SSE2's two-operand forms, the VEX and EVEX ones on xmm), f64x4, f64x8."""
    from alphac.build import link_program, runtime_closure, target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    load, store = lanes.VOCAB[width]
    rng = np.random.default_rng(width)
    a, b = (rng.integers(0, 1 << 63, width, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, width, dtype=np.uint64)
            for _ in range(2))
    a[0], b[0] = M, 1                                    # a carry out of every bit
    body = [f"    let a = {load}(inp);", f"    let b = {load}(inp + {8 * width});"]
    for k, e in enumerate(QCASES):
        body.append(f"    {store}(out + {8 * width * k}, {e});")
    src = (f"var inp: [i64; {2 * width}] = [{', '.join(str(int(v) - (1 << 64) if v >> 63 else int(v)) for v in [*a, *b])}];\n"
           f"global out: [i64; {width * len(QCASES)}];\nfn main(argc: i64, argv: i64) -> i64 {{\n"
           + "\n".join(body) + f"\n    {END[width]}\n    syscall(SYS_write, 1, out, {8 * width * len(QCASES)});\n    return 0;\n}}\n")
    tgt = target(level)
    own = rt.parse(src, "q.rt")
    elf = link_program(lower_program(rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") + own, {},
                                     generated=frozenset(map(id, own))), tgt)[0]
    exe = tmp_path / "q"
    exe.write_bytes(elf)
    exe.chmod(0o755)
    r = subprocess.run(runner(width, level) + [str(exe)], capture_output=True, timeout=60)
    got = np.frombuffer(r.stdout, dtype="<u8").reshape(len(QCASES), width)
    want = [[f(int(x), int(y)) & M for x, y in zip(a, b)] for f in QCASES.values()]
    assert [[int(v) for v in row] for row in got] == want


@pytest.mark.parametrize("text, message", [
    ("let v = qadd(1.0, 2.0);", "wants f64x2, f64x4 or f64x8"),
    ("let v = qshl(loadw(inp), argc);", "needs a constant K in 0..63"),
    ("let v = qshr(loadw(inp), 64);", "needs a constant K in 0..63"),
    ("let v = qand(loadw(inp), splatw(1.0)) + qxor(loadw(inp), loadw(inp));", None),
    ("let v = qadd(loadv(inp), loadv(inp));", None),
    ("let v = gatherv(inp, loadv(inp));", "on f64x2 needs NEON")])
def test_integer_lane_builtins_refuse_bad_operands(text, message):
    from alphac.build import runtime_closure, target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    tgt = target("x86_64-v3")
    src = f"var inp: [i64; 4] = [1, 2, 3, 4];\nfn main(argc: i64, argv: i64) -> i64 {{\n    {text}\n    return 0;\n}}\n"
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") + rt.parse(src, "q.rt")
    if message is None:
        lower_program(items, {})
        return
    with pytest.raises(rt.RtError, match=message):
        lower_program(items, {})


@pytest.mark.parametrize("width", WIDTHS)
def test_gathers_under_register_pressure(width, tmp_path):
    """gatherv/gatherw/gatherz with 48 vectors live (index, value and gathered ones spilled: AVX2's
    every case of destination, index and mask registers, the red zone's included; NEON's
    destination the index's register or not) against Python; the x86_64-v4 executable runs the
    4-lane gather in AVX-512VL's form."""
    from alphac.build import link_program, runtime_closure, target
    load, store = lanes.VOCAB[width]
    k, rng = 16, np.random.default_rng(width)
    ix = rng.integers(0, 64, (k, width))
    vals = rng.uniform(-2, 2, (k, width))
    tab = rng.uniform(-2, 2, 64)
    body = [f"    let i{j} = {load}(ix + {8 * width * j});\n    {store}(copy + {8 * width * j}, i{j});"
            for j in range(k)]                   # (read early: live, and so spilled, until gathered)
    body += [f"    let v{j} = {load}(vals + {8 * width * j});\n    {store}(copy + {8 * width * (k + j)}, v{j});"
             for j in range(k)]
    body += [f"    let g{j} = gather{load[-1]}(tab, i{j});" for j in range(k)]
    body += [f"    {store}(out + {8 * width * j}, g{j} * v{j} + g{(j + 1) % k});" for j in range(k)]
    src = (f"var ix: [i64; {k * width}] = [{', '.join(str(int(v)) for v in ix.ravel())}];\n"
           f"var vals: [f64; {k * width}] = [{', '.join(repr(float(v)) for v in vals.ravel())}];\n"
           f"var tab: [f64; 64] = [{', '.join(repr(float(v)) for v in tab)}];\nglobal out: [f64; {k * width}];\n"
           f"global copy: [f64; {2 * k * width}];\n"
           "fn main(argc: i64, argv: i64) -> i64 {\n" + "\n".join(body) +
           f"\n    {END[width]}\n    syscall(SYS_write, 1, out, {8 * k * width});\n    return 0;\n}}\n")
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    for level in {2: ("aarch64",), 4: ("x86_64-v3", "x86_64-v4"), 8: ("x86_64-v4",)}[width]:
        tgt = target(level)
        own = rt.parse(src, "g.rt")
        elf = link_program(lower_program(rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") + own,
                                         {}, generated=frozenset(map(id, own))), tgt)[0]
        exe = tmp_path / f"g{level}"
        exe.write_bytes(elf)
        exe.chmod(0o755)
        width_of = {v: w for w, v in LEVEL.items()}
        r = subprocess.run(runner(width_of[level]) + [str(exe)], capture_output=True, timeout=60)
        g = tab[ix]
        want = g * vals + np.roll(g, -1, axis=0)
        assert r.stdout == want.astype("<f8").tobytes(), level


def test_aarch64_learner_calls_the_2_lane_functions(tmp_path):
    """AArch64's vector loops call rt_math_<f>_w2 for the five functions (CPU_NEON; x86-64's
    baseline, without NEON's integer lanes, calls the scalar function per lane)."""
    from alphac.build import build_learner
    from alphac.driver import compile_file
    src = tmp_path / "lanes.alpha"
    src.write_text(LEARNER)
    lr = compile_file(src).learner
    text = build_learner(lr, "aarch64", None).rt_source
    assert all(f"{lanes.lane_name(f, 2)}(rt_math_arg);" in text for f in NAMES)
