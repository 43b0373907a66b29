"""Issue 18's code shapes keep every bit: samples in blocks of 4 (independent chains) and pairs
of coordinates in f64x2 (SSE2 packed double, NEON .2d) give the interpreter's bits on both ISAs,
for sizes that leave remainders (odd coordinate counts, a last block of fewer samples, a 2-D
gradient whose rows are odd), and the generated code really takes those shapes where it may,
and does not where it must not (a call of the elementary-function library: max, tanh)."""
import math
import os
import re

import pytest

from alphac.build import build_learner
from alphac.driver import compile_file
from alphac.ir import interp
from alphac.lower.learner import SAMPLE_LANES, learner_source
from alphac.lower.target import target as target_record
from alphac.targets import host_runs
from backend import run_exe

# 7 samples: a block of 4, then 3 one at a time. w has 21 coordinates (10 pairs and one), W is
# 5 x 9 (each row's column loop: 4 pairs and one), and the update is Adam with sqrt and /.
ROWS = [[round(0.1 * ((3 * i + 7 * k) % 11) - 0.5, 2) for k in range(21)] for i in range(7)]
U = [[round(0.2 * ((5 * i + 3 * k) % 7) - 0.6, 2) for k in range(9)] for i in range(7)]
W0 = [[round(0.05 * ((r + 2 * c) % 7) - 0.15, 3) for c in range(9)] for r in range(5)]
SRC = f"""learner pairs
data x = {ROWS}
data u = {U}
data y = [0.5, -1.0, 0.25, 1.5, -0.3, 0.8, 0.1]
const W0 = {W0}
param w: f64[21] = 0.0
param W: f64[5, 9] = W0
state m: f64[21] = 0.0
state v: f64[21] = 0.0
state p: f64 = 1.0
loss(i) {{
  let h = W @ u[i]
  let z = dot(w, x[i]) + dot(h, h) * 0.1 + sum(h @ W) * 0.01
  0.5 * (z - y[i])^2
}}
update {{
  p = p * 0.9
  let g = grad(w)
  m = 0.9 * m + 0.1 * g
  v = 0.999 * v + 0.001 * (g * g)
  w = w - (0.01 / (1 - p)) * (m / (sqrt(v) + 1e-8))
  W = W - 0.05 * grad(W)
}}
"""


@pytest.fixture
def learner(tmp_path):
    src = tmp_path / "pairs.alpha"
    src.write_text(SRC)
    return compile_file(src).learner


def functions(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"fn (\w+)\([^)]*\)[^{]*\{\n(.*?)\n\}\n", text, re.S)}


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_both_isas_equal_the_interpreter(learner, target, tmp_path):
    exe = tmp_path / f"pairs.{target}"
    exe.write_bytes(build_learner(learner, target).elf)
    os.chmod(exe, 0o755)
    p = run_exe(exe, "--steps", "6", target=target)
    assert p.returncode == 0 and p.stdout == interp.format_state(learner, interp.run(learner, 6))


def test_the_code_takes_blocks_and_pairs_where_it_may(learner):
    fns = functions(learner_source(learner)[0])
    grad = fns["learner_grad"]
    assert f"while i + {SAMPLE_LANES} <= hi" in grad and "let row_x_3 = " in grad
    assert "while i < hi" in grad                                  # the rest, one by one
    assert "storev(G_w + 8 * (" in grad and "storev(G_W + 8 * (" in grad   # gradient sums
    assert re.search(r"storev\(ua\d+ \+ 16, splat\(", grad)           # u @ W: u splatted once,
    assert re.search(r"let rp\d+ = st_W \+ 8 \* \(0\)", grad)         # W's columns in blocks
    first = grad[grad.index(f"if i + {SAMPLE_LANES} <= hi"):grad.index(f"while i + {SAMPLE_LANES} <= hi")]
    assert "storev(G_w + 8 * (" in first and not re.search(r"load[fv]\((G_|gr)", first)  # stores G
    assert "while" not in fns["learner_mean"]            # no pass over G: G / n where it is read
    assert any(re.search(r"loadv\(G_\w+ \+ 8 \* \(j\d+\)\) / s\d+", b) for b in fns.values())
    group = next(body for name, body in fns.items() if name.startswith("learner_group") and "st_m" in body)
    assert "sqrtv(" in group and "storev(st_w" in group and "if j" in group   # 21: one left over
    assert "let last" in group and re.search(r"while j\d+ <= last", group)
    assert group.index("splat(") < group.index("while")          # constants splatted once, before


def test_no_pairs_where_a_lane_would_differ(tmp_path):
    """`max` and tanh (calls of the elementary-function library) keep the
    update one coordinate at a time; the bits still agree."""
    src = tmp_path / "np.alpha"
    src.write_text(SRC.replace("W = W - 0.05 * grad(W)", "W = W - 0.05 * tanh(grad(W))")
                      .replace("m = 0.9 * m + 0.1 * g", "m = max(0.9 * m + 0.1 * g, m)"))
    lr = compile_file(src).learner
    fns = functions(learner_source(lr)[0])
    for name, body in fns.items():
        if name.startswith("learner_group"):
            assert "storev" not in body, name
    exe = tmp_path / "np"
    exe.write_bytes(build_learner(lr, "x86_64").elf)
    os.chmod(exe, 0o755)
    p = run_exe(exe, "--steps", "4")
    assert p.returncode == 0 and p.stdout == interp.format_state(lr, interp.run(lr, 4))


# W @ b in row blocks (Values.matvec): 6 samples (a block of 4, then 2 alone); A is 7 x 3 (its
# columns unrolled; one block of 4 rows, then 3), B is 10 x 11 (two blocks of 4 rows, then 2;
# with one sample at a time: 8 rows, then 2). A's b is a data row, B's a computed vector.
A0 = [[round(0.1 * ((r + 3 * c) % 5) - 0.2, 2) for c in range(3)] for r in range(7)]
B0 = [[round(0.03 * ((2 * r + c) % 9) - 0.12, 3) for c in range(11)] for r in range(10)]
MV = f"""learner blocks
data x = {[[round(0.1 * ((2 * i + k) % 7) - 0.3, 2) for k in range(3)] for i in range(6)]}
data y = [0.5, -1.0, 0.25, 1.5, -0.3, 0.8]
const A0 = {A0}
const B0 = {B0}
param A: f64[7, 3] = A0
param B: f64[10, 11] = B0
param c: f64[11] = 0.1
BATCH
loss(i) {{
  let h = A @ x[i]
  let u = B @ (c * sum(h) + 0.5)
  0.5 * (dot(u, u) * 0.1 + sum(h) - y[i])^2
}}
update {{
  A = A - 0.05 * grad(A)
  B = B - 0.05 * grad(B)
  c = c - 0.05 * grad(c)
}}
"""


@pytest.mark.parametrize("batch", ["", "batch 4"])
@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_matvec_row_blocks_equal_the_interpreter(batch, target, tmp_path):
    src = tmp_path / "blocks.alpha"
    src.write_text(MV.replace("BATCH", batch))
    lr = compile_file(src).learner
    grad = functions(learner_source(lr)[0])["learner_grad"]
    if batch:                        # one sample at a time: blocks of 8 scalar chains
        assert "pack(" not in grad and len(re.findall(r"let acc\d+ = bits2f", grad)) >= 8
    else:                            # lanes packed in pairs; 4 rows x 2 pairs a block
        assert "pack(" in grad and "lane(" in grad
        assert len(re.findall(r"let acc\d+ = splat", grad)) >= 8
    assert re.search(r"let rp\d+ = st_B \+ 8 \* ", grad)          # B's rows as bases
    exe = tmp_path / f"blocks.{target}"
    exe.write_bytes(build_learner(lr, target).elf)
    os.chmod(exe, 0o755)
    p = run_exe(exe, "--steps", "5", target=target)
    assert p.returncode == 0 and p.stdout == interp.format_state(lr, interp.run(lr, 5))


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_fewer_samples_than_a_block_equal_the_interpreter(target, tmp_path):
    """3 samples: no first block to store G, so G is zero-filled and the samples added one at a
    time (issue 43); over steps, a G left from the last step would show."""
    src = tmp_path / "three.alpha"
    src.write_text(SRC.replace(f"data x = {ROWS}", f"data x = {ROWS[:3]}").replace(f"data u = {U}", f"data u = {U[:3]}")
                   .replace("data y = [0.5, -1.0, 0.25, 1.5, -0.3, 0.8, 0.1]", "data y = [0.5, -1.0, 0.25]"))
    lr = compile_file(src).learner
    exe = tmp_path / f"three.{target}"
    exe.write_bytes(build_learner(lr, target).elf)
    os.chmod(exe, 0o755)
    p = run_exe(exe, "--steps", "6", target=target)
    assert p.returncode == 0 and p.stdout == interp.format_state(lr, interp.run(lr, 6))


# A 2-D gradient's rows two at a time (GRAD_ROWS, issue 43): 19 samples (blocks of 8 or 4, then
# the rest one at a time), W 5 x 11 (two pairs of rows, then the last row alone; a row's columns
# in 8, 4, 2 and 1), values whose every sum rounds, and the state keeps grad(W): a sum that
# takes a block's samples out of order shows in the bits.
GU = [[round(math.sin(1 + 7 * i + 3 * k), 6) for k in range(11)] for i in range(19)]
GW = [[round(0.3 * math.cos(2 + r + 5 * c), 6) for c in range(11)] for r in range(5)]
ROWS2 = f"""learner rows
data u = {GU}
data y = {[round(math.sin(3 * i), 6) for i in range(19)]}
const W0 = {GW}
param W: f64[5, 11] = W0
state g: f64[5, 11] = 0.0
loss(i) {{
  let h = W @ u[i]
  0.5 * (dot(h, h) * 0.3 - y[i])^2
}}
update {{
  g = grad(W)
  W = W - 0.01 * g
}}
"""


@pytest.mark.parametrize("target", ["x86_64", "x86_64-v3", "x86_64-v4", "aarch64"])
def test_gradient_rows_in_pairs_keep_sample_order(target, tmp_path):
    if target.startswith("x86_64-") and not host_runs(target):
        pytest.skip(f"this host does not run {target}")
    src = tmp_path / "rows.alpha"
    src.write_text(ROWS2)
    lr = compile_file(src).learner
    grad = functions(learner_source(lr, lanes=target_record(target).lanes)[0])["learner_grad"]
    assert re.search(r"let gr\d+ = G_W \+ 8 \* \(r\d+ \* 11\);\n\s*let gr\d+ = G_W \+ 8 \* \(r\d+ \* 11\);", grad)
    exe = tmp_path / f"rows.{target}"
    exe.write_bytes(build_learner(lr, target).elf)
    os.chmod(exe, 0o755)
    p = run_exe(exe, "--steps", "4", target=target)
    assert p.returncode == 0 and p.stdout == interp.format_state(lr, interp.run(lr, 4))


# A 2-D gradient beyond L2 summed after the samples in tiles (tiled_grads, issue 43), with the
# size rule lowered to take a small one: W 5 x 77 (a row block and the last rows alone; columns
# in whole tiles of 4 vectors, then 8, 4, 2 and 1), 19 samples (blocks, then 3 one at a time),
# the state keeping grad(W): a tile sum that takes the samples out of order, or reads a
# sample's row value or x from the wrong place, shows in the bits. Only x86_64-v4 is tiled (the
# rule); the other levels and AArch64 keep the interpreter's bits too.
TU = [[round(math.sin(1 + 7 * i + 3 * k), 6) for k in range(77)] for i in range(19)]
TW = [[round(0.3 * math.cos(2 + r + 5 * c), 6) for c in range(77)] for r in range(5)]
TILED = ROWS2.replace(f"data u = {GU}", f"data u = {TU}").replace(f"const W0 = {GW}", f"const W0 = {TW}") \
    .replace("f64[5, 11]", "f64[5, 77]").replace("learner rows", "learner tiled")
TILED_STAR = """
deployment tiled_star {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..5, owner[1] = 5..13, owner[2] = 13..19
}
"""


def tiled_learner(tmp_path, monkeypatch, text=TILED):
    import alphac.lower.learner as gen
    src = tmp_path / "tiled.alpha"
    src.write_text(text)
    lr = compile_file(src).learner
    assert not gen.tiled_grads(lr, 8)            # 3 KB: below the rule, as it is
    monkeypatch.setattr(gen, "TILE_GRAD_BYTES", 0)
    return src, lr


@pytest.mark.parametrize("target", ["x86_64", "x86_64-v3", "x86_64-v4", "aarch64"])
def test_tiled_gradient_keeps_sample_order(target, tmp_path, monkeypatch):
    if target.startswith("x86_64-") and not host_runs(target):
        pytest.skip(f"this host does not run {target}")
    _, lr = tiled_learner(tmp_path, monkeypatch)
    grad = functions(learner_source(lr, lanes=target_record(target).lanes)[0])["learner_grad"]
    tiled = "storef(TR_W + 8 * (" in grad and not re.search(r"let gr\d+ = G_W", grad)
    assert tiled == (target == "x86_64-v4")
    exe = tmp_path / f"tiled.{target}"
    exe.write_bytes(build_learner(lr, target).elf)
    os.chmod(exe, 0o755)
    p = run_exe(exe, "--steps", "4", target=target)
    assert p.returncode == 0 and p.stdout == interp.format_state(lr, interp.run(lr, 4))


@pytest.mark.parametrize("target", ["x86_64-v4"])
def test_tiled_gradient_on_owners_of_some_rows(target, tmp_path, monkeypatch):
    """Owners of rows 0..5 (at x86_64-v4 fewer than a block: G zero-filled, then tiled), 5..13
    and 13..19 (lo > 0: TR_W counts from the owner's first row), launched: the interpreter's bits."""
    if not host_runs(target):
        pytest.skip(f"this host does not run {target}")
    from alphac.dist.execute import run_plan
    from alphac.driver import compile_deployments
    from alphac.tools.launch import launch
    from backend import build_deployment
    src, lr = tiled_learner(tmp_path, monkeypatch, TILED + TILED_STAR)
    dep = build_deployment(src, "tiled_star", tmp_path / "roles", target_of=lambda role, t: target)
    rec = launch(dep, records=tmp_path / "runs", steps=4)
    plan = compile_deployments(src)[1]["tiled_star"]
    assert rec["passed"] and rec["published"] == interp.format_state(lr, run_plan(lr, plan, 4))
