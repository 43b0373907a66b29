"""Schedules (docs/language.md, "The update's clock" and "Comparisons and where"): `step` and
`epoch` in the update, IEEE comparisons and `where` in the loss and the update, on every engine.

Golden programs with their expected bits: a warm-up then decay schedule over a Huber loss, its
bits computed again by a plain-Python oracle here (IEEE floats, MPFR's exp), then the same bits
from the interpreter, x86-64 at every level, AArch64 under qemu, the PTX of the GPU owner (on the
PTX interpreter), a star and a ZeRO-3 deployment (an AArch64 owner among them), each resumed from
a mid-run checkpoint; and a table of comparisons on NaN and signed zeros, which every engine must
decide as IEEE 754 does.
"""
import subprocess

import pytest

from alphac.driver import compile_file
from alphac.ir import interp
from alphac.math.binary64 import hex16
from backend import run_exe
from conftest import alphac

SCHEDULE = """learner warmdecay
data x = [[1.0, 0.5], [0.25, -1.0], [2.0, 1.5], [-0.5, 0.75], [1.5, -0.25], [0.75, 2.0], [-1.25, 0.5]]
data y = [0.5, -1.0, 2.0, 0.25, 0.75, -0.5, 1.0]
param w: f64[2] = [0.25, -0.5]
state m: f64[2] = 0.0
state rate: f64 = 0.0
batch 2
loss(i) {
  let r = dot(w, x[i]) - y[i]
  where(abs(r) <= 1, 0.5 * r^2, abs(r) - 0.5)
}
update {
  let warm = min(1, (step + 1) / 3)
  let decay = max(0.05, exp(-0.5 * epoch))
  let hold = where(epoch == 1, 0.5, where(step != 5, 1, 0.25))
  rate = 0.5 * where(step < 3, warm, decay * hold)
  m = where(epoch >= 2, 0.25 * m, 0.5 * m) + grad(w)
  w = w - where(m > 0, rate, tanh(rate)) * m
}

deployment star {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..3, owner[2] = 3..7
  target owner[1] = aarch64
}

deployment zero3 {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..4, owner[1] = 4..7
  strategy zero3
  partition owner[0] = 0..1, owner[1] = 1..2
}
"""
STEPS = 11                  # 4 batches an epoch: epochs 0, 1 and 2
# the state after STEPS steps (the oracle below computes it again)
GOLDEN = """w[0] 3fc7544b6cd52ee6
w[1] 3fd7cbc913e5c0da
m[0] bfda8e2b32e7f222
m[1] 3fec154933dd3e0f
rate 3fc78b56362cef38
"""


def oracle(steps: int) -> str:
    """The schedule learner by hand: plain binary64 arithmetic (Python's floats: one rounding
    an operation, no fused multiply-add), MPFR's correctly rounded exp and tanh, the where's
    derivative by hand (dr = r where |r| <= 1, else the sign of r)."""
    import gmpy2

    def cr(f, v):
        with gmpy2.context(precision=53, emin=-1073, emax=1024, subnormalize=True):
            return float(f(gmpy2.mpfr(v)))
    xs = [[1.0, 0.5], [0.25, -1.0], [2.0, 1.5], [-0.5, 0.75], [1.5, -0.25], [0.75, 2.0], [-1.25, 0.5]]
    ys = [0.5, -1.0, 2.0, 0.25, 0.75, -0.5, 1.0]
    w, m, rate = [0.25, -0.5], [0.0, 0.0], 0.0
    for t in range(steps):
        p, epoch = t % 4, float(t // 4)
        G = None
        for i in range(2 * p, min(2 * p + 2, 7)):
            r = (w[0] * xs[i][0] + w[1] * xs[i][1]) - ys[i]
            dr = r if abs(r) <= 1 else (1.0 if r > 0 else -1.0)
            g = [dr * xs[i][0], dr * xs[i][1]]
            G = g if G is None else [G[0] + g[0], G[1] + g[1]]
        n = float(min(2 * p + 2, 7) - 2 * p)
        warm = min(1.0, (float(t) + 1) / 3)
        decay = max(0.05, cr(gmpy2.exp, -0.5 * epoch))
        hold = 0.5 if epoch == 1 else (1.0 if t != 5 else 0.25)
        rate = 0.5 * (warm if t < 3 else decay * hold)
        m = [(0.25 if epoch >= 2 else 0.5) * m[k] + G[k] / n for k in range(2)]
        w = [w[k] - (rate if m[k] > 0 else cr(gmpy2.tanh, rate)) * m[k] for k in range(2)]
    return "".join(f"{name} {hex16(v)}\n" for name, v in
                   (("w[0]", w[0]), ("w[1]", w[1]), ("m[0]", m[0]), ("m[1]", m[1]), ("rate", rate)))


@pytest.fixture(scope="module")
def schedule(tmp_path_factory):
    d = tmp_path_factory.mktemp("schedule")
    src = d / "warmdecay.alpha"
    src.write_text(SCHEDULE)
    return src, compile_file(src).learner


def build(src, out, target):
    from alphac.build import build_learner
    out.write_bytes(build_learner(compile_file(src).learner, target).elf)
    out.chmod(0o755)
    return out


def test_the_golden_bits_are_the_oracles(schedule):
    _, lr = schedule
    assert oracle(STEPS) == GOLDEN
    assert interp.format_state(lr, interp.run(lr, STEPS)) == GOLDEN
    assert [lr.clock(t) for t in (0, 3, 4, 11)] == [{"step": 0.0, "epoch": 0.0}, {"step": 3.0, "epoch": 0.0},
                                                    {"step": 4.0, "epoch": 1.0}, {"step": 11.0, "epoch": 2.0}]


@pytest.mark.parametrize("target", ["x86_64", "x86_64-v3", "x86_64-v4", "aarch64"])
def test_every_isa_and_level_gives_the_golden_bits_and_resumes(target, schedule, tmp_path):
    src, _ = schedule
    exe = build(src, tmp_path / "exe", target)
    p = run_exe(exe, "--steps", STEPS, target=target)
    assert p.returncode == 0 and p.stdout == GOLDEN, p.stderr
    ck = tmp_path / "ck"                  # 6 steps, then 5 more: step 6 is in epoch 1
    p = run_exe(exe, "--steps", 6, "--checkpoint", ck, target=target)
    assert p.returncode == 0, p.stderr
    p = run_exe(exe, "--resume", ck, "--steps", STEPS - 6, target=target)
    assert p.returncode == 0 and p.stdout == GOLDEN, p.stderr


def gpu_owner(lr):
    """lr's GPU owner kernels on the PTX interpreter (gpu/ptx_host.py)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
    from ptx_host import Owner
    from alphac.ptx.kernels import kernels
    from ptx_interp import InterpDevice
    return Owner(InterpDevice(), lr, kernels(lr))


def test_the_gpu_owners_kernels_give_the_golden_bits(schedule):
    """The GPU owner's PTX (loss where on the card, step and epoch as the update kernels'
    parameters), run by the PTX interpreter through gpu/ptx_host.py."""
    _, lr = schedule
    owner = gpu_owner(lr)
    upd = owner.kernels["update_g0"]
    assert [p.name for p in upd.params if p.name.startswith("clock_")] == ["clock_epoch"]   # m reads it
    for t in range(STEPS):
        owner.step(t)
    assert interp.format_state(lr, owner.read_state()) == GOLDEN


@pytest.mark.parametrize("deployment", ["star", "zero3"])
def test_a_star_and_zero3_give_the_plans_bits_and_resume_them(deployment, schedule, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "warmdecay.alpha"         # the build names its inputs from here
    src.write_text(SCHEDULE)
    roles = tmp_path / "roles"
    code, _, err = alphac("build", src, "--deployment", deployment, "-o", roles)
    assert code == 0, err
    plan = alphac("run", src, "--deployment", deployment, "--steps", STEPS)[1]
    runs = tmp_path / "runs"
    code, out, err = alphac("launch", roles, "--steps", STEPS, "--records", runs)
    assert code == 0 and out == plan, err
    code, _, err = alphac("launch", roles, "--steps", 5, "--checkpoint", tmp_path / "ck", "--records", runs)
    assert code == 0, err
    code, out, err = alphac("launch", roles, "--steps", STEPS - 5, "--resume", tmp_path / "ck", "--records", runs)
    assert code == 0 and out == plan, err
    if deployment == "zero3":              # the update is per coordinate: ZeRO-3 is the single run
        assert plan == GOLDEN


COMPARE = """learner compare
state s: f64 = 0.0
state c: f64[14] = 0.0
update {
  let nan = (s - s) / (s - s)
  let nz = -s
  c = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] + %s
  s = s
}
"""
# (condition, whether it holds): IEEE 754 -- a NaN is unordered (only != holds), -0 == +0
CASES = [("nan < 1", False), ("nan >= nan", False), ("nan == nan", False), ("nan != nan", True),
         ("1 > nan", False), ("nan <= 1", False), ("nz == s", True), ("nz < s", False),
         ("nz >= s", True), ("s <= nz", True), ("nz != s", False), ("step == 0", True),
         ("epoch >= 1", False), ("2 > 1", True)]


def test_comparisons_are_ieee_on_every_engine(tmp_path):
    """Each case sets coordinate k to 1 where it holds, 2 where it does not (a NaN never
    reaches the state): the interpreter, x86-64 and AArch64 must all decide as IEEE does."""
    terms = " + ".join(f"where({cond}, {[0] * k + [1] + [0] * (13 - k)}, {[0] * k + [2] + [0] * (13 - k)})"
                       for k, (cond, _) in enumerate(CASES))
    src = tmp_path / "compare.alpha"
    src.write_text(COMPARE % terms)
    lr = compile_file(src).learner
    want = "s 0000000000000000\n" + "".join(
        f"c[{k}] {hex16(1.0 if holds else 2.0)}\n" for k, (_, holds) in enumerate(CASES))
    assert interp.format_state(lr, interp.run(lr, 1)) == want
    for target in ("x86_64", "x86_64-v4", "aarch64"):
        p = run_exe(build(src, tmp_path / target, target), "--steps", 1, target=target)
        assert p.returncode == 0 and p.stdout == want, (target, p.stderr)
    owner = gpu_owner(lr)                      # the update kernel's setp, on the PTX interpreter
    owner.step(0)
    assert interp.format_state(lr, owner.read_state()) == want


@pytest.mark.parametrize("body,code,message", [
    ("loss(i) = where(x[i], w, 0)", "E0074", "the condition of `where` is not a comparison"),
    ("loss(i) = (w < x[i]) * w", "E0074", "a comparison (`<`) is not a number"),
    ("loss(i) = where(w < x[i] < 2, w, 0)", "E0074", "a second comparison after `<`"),
    ("loss(i) = w * step", "E0075", "`step` outside the update"),
    ("predict(i) = w * epoch", "E0075", "`epoch` outside the update"),
    ("const k = step", "E0075", "`step` outside the update"),
    ("loss(i) = sum(where(v < u, v, v)) + w * x[i]", "E0030", "`where` of f64[2], f64[3], f64[2], f64[2]"),
    ("loss(i) = where(w < x[i], v, u) + w", "E0030", "`where` of f64, f64, f64[2], f64[3]"),
])
def test_bad_comparisons_and_clocks_are_refused_by_name(body, code, message, tmp_path):
    src = tmp_path / "bad.alpha"
    src.write_text("learner bad\ndata x = [1.0, 2.0]\nparam w: f64 = 0.0\nconst v = [1.0, 2.0]\n"
                   f"const u = [1.0, 2.0, 3.0]\n{body}\n" + ("" if body.startswith("loss") else
                                                             "loss(i) = w * x[i]\n")
                   + "update {\n  w = w - 0.1 * grad(w)\n}\n")
    rc, _, err = alphac("check", src)
    assert rc == 1 and f"error[{code}]: {message}" in err, err
    line = err.split(":")[1]
    assert line == "6", err                # the position: the line that holds it


def test_declared_names_hide_step_and_epoch(tmp_path):
    src = tmp_path / "hide.alpha"
    src.write_text("learner hide\nstate step: f64 = 1.0\nstate n: f64 = 0.0\n"
                   "update {\n  let epoch = 3\n  n = n + step * epoch\n  step = step\n}\n")
    lr = compile_file(src).learner
    assert not lr.clocked and interp.run(lr, 2)["n"] == (6.0,)


def test_a_gpu_owner_under_the_mock_driver_gives_the_golden_bits(schedule, tmp_path):
    """The GPU owner executable: the host stores step t's clock (learner_clock) into the
    update kernel's constant bank; the mock GPU runs the kernels on the PTX interpreter."""
    import os
    import mockgpu
    from alphac.build import build_gpu_owner
    from conftest import require_tool
    from test_gpu_local import card_for, host_for
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    _, lr = schedule
    built = build_gpu_owner(lr, "x86_64+sm_90", host_for(90))
    exe = tmp_path / "owner"
    exe.write_bytes(built.image.elf)
    exe.chmod(0o755)
    r = mockgpu.run(exe, ["--steps", str(STEPS)], card=card_for(90), kernels=built.kernels)
    assert r.errors == [] and (r.returncode, r.stderr) == (0, "") and r.stdout == GOLDEN


WIDE = """learner wide
data x = [[%s], [%s], [%s], [%s], [%s]]
data y = [0.5, -0.25, 0.75, -1.0, 0.125]
param w: f64[21] = 0.1
state m: f64[21] = 0.0
batch 2
loss(i) {
  let r = dot(w, x[i]) - y[i]
  where(abs(r) <= 0.5, 0.5 * r^2, 0.5 * abs(r) - 0.125)
}
update {
  let lr_t = 0.3 * where(step < 4, min(1, (step + 1) / 4), max(0.05, exp(-0.3 * epoch)))
  m = 0.9 * m + grad(w)
  w = w - lr_t * m
}
"""


def test_a_schedule_keeps_the_update_loop_in_vectors(tmp_path):
    """The schedule is computed once before the group's loop, which stays in f64x2/x4/x8
    (alphac.lower.learner.LearnerCode.gen_group), and every level gives the interpreter's bits."""
    from alphac.lower.learner import learner_source
    rows = [", ".join(str(round(((7 * s + 3 * k) % 11 - 5) / 8, 3)) for k in range(21)) for s in range(5)]
    src = tmp_path / "wide.alpha"
    src.write_text(WIDE % tuple(rows))
    lr = compile_file(src).learner
    group = learner_source(lr, lanes=8)[0].split("fn learner_group_0")[1].split("\n}\n")[0]
    assert "storez(" in group and "rt_math_exp" not in group.split("while")[1]
    want = interp.format_state(lr, interp.run(lr, 9))
    for target in ("x86_64", "x86_64-v3", "x86_64-v4", "aarch64"):
        p = run_exe(build(src, tmp_path / target, target), "--steps", 9, target=target)
        assert p.returncode == 0 and p.stdout == want, (target, p.stderr)
