"""The tiled kernels (alphac/ptx/tiled.py, docs/gpu.md "Tiled kernels"): the owner's sum fused
into the weight gradient and the batched products, on the PTX interpreter and against the mock
driver.

A hidden-layer MLP (gpu/local_check.py's `mlp_source`: 40-36-3 tanh, softmax cross-entropy, on
20 samples: two tiles down W1's 36 rows and two across its 40 columns, samples in two stages of
16) has W1 and W2 fused: grad_samples writes their factors, outer_sum_W1 / outer_sum_W2 make
their G; and the products batched, in phases (docs/gpu.md "Phases"): matvec0 computes W1 @ x[i]
for the step's samples, vectors1 h, matvec1 W2 @ h, vectors2 dz, vecmat2 dz @ W2, before
grad_samples reads them all. Guarantees checked:
  * the layout: the fused params, the gs row (plain coordinates, then each factor), and the gs
    buffer of the launch image sized by it;
  * the fold: on gs rows made so that the order shows, the kernel gives the left fold over the
    samples ascending; its mutants (the stage's samples visited descending; the first product
    added to a +0) give other bits, and a -0 first term survives; either barrier left out is
    caught by the interpreter (a read before the write, a race); the same for a batched product
    (each row's fold over the columns ascending from the first term), over any lo..hi;
  * the MLP as a single GPU owner, sm_90 and sm_86 (and x86_64-v4+sm_90: its host shadow in
    AVX-512's lanes), prints the interpreter's bits with an empty
    mock error list and the tiled kernels launched, in shuffled minibatches too; either tiled
    kernel's descending mutant (matvec0, matvec1, vecmat2, outer_sum_W1) is refused by the host
    shadow (gpu-shadow-mismatch); the step's kernels in launch order; on the interpreter, so does a
    learner whose only param is fused (no owner_sum);
  * in a star of an sm_90 owner and an sm_86 owner with a CPU owner, the interpreter's bits, and
    its checkpoint resumes on CPU owners with the uninterrupted run's bits.
"""
import json
import os
import re
import struct

import pytest

import mockgpu
from conftest import require_tool
from ptx_interp import InterpDevice, Memory, Ptx
from ptx_host import Owner

from alphac.dist.execute import run_plan
from alphac.driver import compile_deployments, compile_file
from alphac.ir import interp
from alphac.ptx.abi import batch_kernels, batch_widths, fused, param_count, products, row_layout
from alphac.ptx.kernels import kernels
from alphac.ptx.tiled import outer_sum, product
from alphac.refusals import exit_code
from local_check import mlp_source
from test_gpu_local import card_for, host_for, two_cards

INPUTS, HIDDEN, CLASSES, ROWS, STEPS = 40, 36, 3, 20, 2
LAUNCHED = ["matvec0", "vectors1", "matvec1", "vectors2", "vecmat2", "grad_samples", "owner_sum",
            "outer_sum_W1", "outer_sum_W2"]        # a step's kernels: W1 @ x, h, W2 @ h, dz, dz @ W2
DEPLOYMENTS = f"""
deployment gpu_and_cpu {{
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..9, owner[1] = 9..11, owner[2] = 11..{ROWS}
  target owner[0] = x86_64+sm_90, owner[2] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[2] = "c.gpuhost"
}}

deployment cpus {{
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..9, owner[1] = 9..11, owner[2] = 11..{ROWS}
}}
"""


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiled")
    (d / "mlp.alpha").write_text(mlp_source(INPUTS, HIDDEN, CLASSES, ROWS, "mlp") + DEPLOYMENTS)
    lr = compile_file(d / "mlp.alpha").learner
    state = interp.initial_state(lr)
    for _ in range(STEPS):
        state = interp.step(lr, state)
    return d, lr, interp.format_state(lr, state)


def test_the_layout_holds_factors_for_the_weight_gradients(mlp):
    _, lr, _ = mlp
    assert list(fused(lr)) == ["W1", "W2"]
    lay = row_layout(lr)
    assert [p for p, *_ in lay.plain] == ["b1", "b2"]
    assert lay.factors == {"W1": (HIDDEN + CLASSES, HIDDEN, 2 * HIDDEN + CLASSES, INPUTS),
                           "W2": (2 * HIDDEN + CLASSES + INPUTS, CLASSES, 2 * HIDDEN + 2 * CLASSES + INPUTS, HIDDEN)}
    assert lay.width == 2 * HIDDEN + 2 * CLASSES + INPUTS + HIDDEN < param_count(lr)
    assert [k.name for k in kernels(lr)][:9] == ["grad_samples", *LAUNCHED[:5], "owner_sum", "outer_sum_W1",
                                                 "outer_sum_W2"]
    k = outer_sum(lr, "W1")
    assert (k.block, k.threads) == (64, 64 * 2 * 2) and "bar.sync 0;" in k.ptx and ".shared" in k.ptx
    ps = [(p.W, p.vecmat, p.data, p.out, p.vin, p.phase) for p in products(lr)]
    assert ps == [("W1", False, "x", 0, -1, 0), ("W2", False, "", 1, 3, 1), ("W2", True, "", 2, 4, 2)]
    assert batch_kernels(lr) == LAUNCHED[:5] and batch_widths(lr) == [HIDDEN, CLASSES, HIDDEN, HIDDEN, CLASSES]
    assert products(lr)[1].vec.size == HIDDEN and products(lr)[2].vec.size == CLASSES   # h, dz
    k = product(lr, 0)
    assert (k.block, k.tile, k.threads) == (64, (32, 64 * 2), None)
    assert [q.name for q in k.params] == ["state_W1", "data_x", "mv0", "lo", "hi"]
    assert [q.name for q in product(lr, 2).params] == ["state_W2", "mv4", "mv2", "lo", "hi"]


def test_the_emitted_module_with_the_tiled_kernels_assembles(mlp, tmp_path):
    """`alphac build --emit ptx`'s one module: each entry declares its own .shared stages."""
    from alphac.ptx.kernels import module
    _, lr, _ = mlp
    text = module(lr)
    assert text.count(".shared .align 8 .b8 sh0[4096];") == 5      # the 3 products, outer_sum_W1, _W2
    (tmp_path / "m.ptx").write_text(text)
    import subprocess
    r = subprocess.run([require_tool("ptxas"), "-arch=sm_90", "--disable-optimizer-constants", "m.ptx",
                        "-o", "m.cubin"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# -- the fold, on rows made so that its order shows ---------------------------------------------
def descending(ptx):
    """The stage's samples visited from the last down (j = count-1 .. 0)."""
    m = re.search(r"// the stage's terms, ascending\n\tmov\.u32 (%r\d+), 0;\n(\$L\d+):\n"
                  r"\tsetp\.ge\.u32 %p\d+, \1, (%r\d+);", ptx)
    j, count = m[1], m[3]
    out = ptx.replace(m[0], m[0].replace(f"mov.u32 {j}, 0;", f"sub.u32 {j}, {count}, 1;"))
    return out.replace(f"\tadd.u32 {j}, {j}, 1;", f"\tsub.u32 {j}, {j}, 1;")


def plus_zero_first(ptx):
    """Each accumulator started as +0 + the first product (not the product itself)."""
    head, _, rest = ptx.partition("// the first term's products start the accumulators\n")
    body, mark, tail = rest.partition("\tmov.u64")
    body = re.sub(r"(\tmul\.rn\.f64 (%fd\d+), .*;)", r"\1\n\tadd.rn.f64 \2, \2, 0d0000000000000000;", body)
    return head + body + mark + tail


TINY = """learner tiny
data x = [[1.0], [1.0], [1.0]]
param W: f64[1, 1] = 0.0
loss(i) {
  sum(W @ x[i])
}
update {
  W = W - grad(W)
}
"""


def fold(tmp_path, us, vs, mutate=lambda t: t):
    """G of a 1 x 1 fused param from factor rows u_s, v_s through outer_sum (with `mutate`)."""
    (tmp_path / "t.alpha").write_text(TINY)
    lr = compile_file(tmp_path / "t.alpha").learner
    k = outer_sum(lr, "W")
    assert row_layout(lr).factors == {"W": (0, 1, 1, 1)}
    mem = Memory()
    gs, G = mem.alloc([x for u, v in zip(us, vs) for x in (u, v)]), mem.alloc([1.0])
    Ptx(mutate(k.ptx)).launch(mem, {"gs": gs, "G": G, "n": len(us)}, k.threads, block=k.block)
    return bits(mem.read(G, 1)[0])


def test_the_fold_is_ascending_from_the_first_product_and_its_mutants_differ(tmp_path):
    tiny = 2.0 ** -60
    us, vs = [1.0, -1.0, tiny], [1.0, 1.0, 1.0]         # (1 - 1) + t = t, but (1 + t) - 1 = 0
    assert fold(tmp_path, us, vs) == bits(tiny)
    assert fold(tmp_path, us, vs, descending) == bits(0.0)
    assert fold(tmp_path, [-0.0, -0.0], [1.0, 1.0]) == bits(-0.0)     # -0 + -0: a -0 survives
    assert fold(tmp_path, [-0.0, -0.0], [1.0, 1.0], plus_zero_first) == bits(0.0)
    assert fold(tmp_path, [2.0] * 40, [0.5] * 40) == bits(40.0)       # three stages


MV = """learner mv
data x = [[1.0, 1.0, 1.0], [1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]
param W: f64[2, 3] = [[1.0, -1.0, 8.673617379884035e-19], [-0.0, 0.0, 0.0]]
loss(i) {
  let z = W @ x[i]
  0.5 * dot(z, z)
}
update {
  W = W - grad(W)
}
"""


def products_of(tmp_path, mutate=lambda t: t, lo=0, hi=3):
    """matvec0 of MV (W @ x[i]) over samples lo..hi-1, as bits, row by row."""
    (tmp_path / "mv.alpha").write_text(MV)
    lr = compile_file(tmp_path / "mv.alpha").learner
    k = product(lr, 0)
    mem = Memory()
    args = {"state_W": mem.alloc(lr.state("W").init), "data_x": mem.alloc(lr.datum("x").values),
            "mv0": mem.alloc([1.0] * 2 * (hi - lo)), "lo": lo, "hi": hi}
    Ptx(mutate(k.ptx)).launch(mem, args, -(-(hi - lo) // k.tile[0]) * k.tile[1], block=k.block)
    return [bits(v) for v in mem.read(args["mv0"], 2 * (hi - lo))]


def test_a_batched_product_folds_from_the_first_term_ascending_and_its_mutants_differ(tmp_path):
    """W's row 0 (1, -1, t) against 1, 1, 1: (1 - 1) + t = t, but (1 + t) - 1 = 0 descending;
    row 1 (-0, 0, 0) against 1, -1, -1: -0 + -0 + -0 = -0, but +0 from a +0 start."""
    tiny = bits(2.0 ** -60)
    want = [tiny, bits(0.0), bits(2.0), bits(-0.0), tiny, bits(0.0)]
    assert products_of(tmp_path) == want
    assert products_of(tmp_path, lo=1, hi=3) == want[2:]
    assert products_of(tmp_path, descending)[0] == bits(0.0)
    assert products_of(tmp_path, plus_zero_first)[3] == bits(0.0)


VM = """learner vm
data x = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
param W: f64[3, 2] = [[1.0, -0.0], [1.0, 0.0], [1.0, 0.0]]
loss(i) {
  let z = (2.0 * x[i]) @ W
  0.5 * dot(z, z)
}
update {
  W = W - grad(W)
}
"""


def vecmat_of(tmp_path, us, mutate=lambda t: t):
    """vecmat0 of VM (u @ W, u computed per sample: its rows `us` written into mv<vin>), as bits."""
    (tmp_path / "vm.alpha").write_text(VM)
    lr = compile_file(tmp_path / "vm.alpha").learner
    (p,) = products(lr)
    assert (p.vecmat, p.data, p.vin, p.phase, batch_kernels(lr)) == (True, "", 1, 0, ["vectors0", "vecmat0"])
    k, mem = product(lr, 0), Memory()
    args = {"state_W": mem.alloc(lr.state("W").init), "mv1": mem.alloc([x for u in us for x in u]),
            "mv0": mem.alloc([1.0] * 2 * len(us)), "lo": 0, "hi": len(us)}
    Ptx(mutate(k.ptx)).launch(mem, args, -(-len(us) // k.tile[0]) * k.tile[1], block=k.block)
    return [bits(v) for v in mem.read(args["mv0"], 2 * len(us))]


def test_a_vecmat_folds_over_the_rows_from_the_first_term_ascending_and_its_mutants_differ(tmp_path):
    """W's column 0 (1, 1, 1) against u = (1, -1, t): (1 - 1) + t = t, but (t - 1) + 1 = 0
    descending; column 1 (-0, 0, 0) against (1, -1, -1): -0 + -0 + -0 = -0, but +0 from a +0."""
    tiny = 2.0 ** -60
    us = [(1.0, -1.0, tiny), (1.0, -1.0, -1.0)]
    assert vecmat_of(tmp_path, us) == [bits(tiny), bits(0.0), bits(-1.0), bits(-0.0)]
    assert vecmat_of(tmp_path, us, descending)[0] == bits(0.0)
    assert vecmat_of(tmp_path, us, plus_zero_first)[3] == bits(0.0)


@pytest.mark.parametrize("which,error", [(0, "shared read before any write"), (-1, "a race between threads")])
def test_the_interpreter_catches_a_missing_barrier(tmp_path, which, error):
    """Without the barrier after the stage is written, a thread reads a word another has not
    written yet; without the one before the next stage, a thread overwrites a word another
    read in the same phase: the interpreter names both, though it runs the threads in order."""
    def drop(ptx):
        at = [m.start() for m in re.finditer(r"\tbar\.sync 0;\n", ptx)][which]
        return ptx[:at] + ptx[at + len("\tbar.sync 0;\n"):]
    with pytest.raises(KeyError, match=error):
        fold(tmp_path, [2.0] * 40, [0.5] * 40, drop)


def test_the_mlp_on_the_interpreter_has_the_reference_bits(mlp, tmp_path):
    """The MLP, and a learner whose only param is fused (no owner_sum at all)."""
    _, lr, want = mlp
    owner = Owner(InterpDevice(), lr, kernels(lr))
    for _ in range(STEPS):
        owner.step()
    assert interp.format_state(lr, owner.read_state()) == want
    (tmp_path / "t.alpha").write_text(TINY.replace("[[1.0], [1.0], [1.0]]", "[[0.5], [-1.5], [0.25]]"))
    lr = compile_file(tmp_path / "t.alpha").learner
    ks = kernels(lr)
    assert [k.name for k in ks] == ["grad_samples", "outer_sum_W", "update_g0"]
    owner, state = Owner(InterpDevice(), lr, ks), interp.initial_state(lr)
    for _ in range(3):
        owner.step()
        state = interp.step(lr, state)
    assert interp.format_state(lr, owner.read_state()) == interp.format_state(lr, state)
    assert state != interp.initial_state(lr)


# -- against the mock driver ----------------------------------------------------------------------
def need_mock():
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)


def run(mlp, sm, mutate=None, tag="", lr=None, args=(), level="x86_64"):
    from alphac.build import build_gpu_owner
    d, mine, _ = mlp
    lr = lr or mine
    built = build_gpu_owner(lr, f"{level}+sm_{sm}", host_for(sm))
    path = d / f"owner.{level}.sm_{sm}{tag}"
    path.write_bytes(built.image.elf)
    os.chmod(path, 0o755)
    return mockgpu.run(path, args or ["--steps", str(STEPS)], card=card_for(sm), kernels=built.kernels,
                       mutate=mutate)


@pytest.mark.parametrize("sm,level", [(90, "x86_64"), (86, "x86_64"), (90, "x86_64-v4")])
def test_a_gpu_owner_of_the_mlp_prints_the_interpreters_bits(mlp, sm, level):
    """x86_64-v4+sm_90: the host part's shadow in AVX-512's lanes, the same bits (on a CPU
    without AVX-512, refused `cpu-level` before the driver is opened)."""
    from alphac.targets import host_runs
    need_mock()
    _, _, want = mlp
    r = run(mlp, sm, level=level)
    if not host_runs(level):
        assert (r.returncode, r.stdout, r.device_calls()) == (exit_code("cpu-level"), "", [])
        return
    assert r.errors == [] and (r.returncode, r.stderr) == (0, "")
    assert r.stdout == want
    names = [la[0] for la in r.launches]
    assert names[:9] == LAUNCHED
    assert r.submissions == 1 + STEPS and len(names) == (len(LAUNCHED) + 4) * STEPS  # one chain a step
    assert names.count("outer_sum_W1") == names.count("vecmat2") == names.count("vectors1") == STEPS
    grids = {la[0]: la[1:3] for la in r.launches}
    assert grids["outer_sum_W1"] == (4, 64) and grids["matvec0"] == (2, 64)      # 20 rows: 1 x 2 tiles
    assert (grids["matvec1"], grids["vecmat2"]) == ((1, 64), (2, 64))   # rows of 3 outputs and of 36
    assert grids["vectors1"][0] * grids["vectors1"][1] >= ROWS


def test_a_gpu_owner_of_the_mlp_in_shuffled_minibatches(mlp):
    """Batches of 8 of the 20 samples (the last of an epoch 4): the step's count, which the host
    writes into every sum kernel's constant bank, is the fold's n."""
    d, _, _ = mlp
    (d / "mb.alpha").write_text(mlp_source(INPUTS, HIDDEN, CLASSES, ROWS, "mb").replace(
        "learner mb\n", "learner mb\nbatch 8\norder shuffle(3)\n"))
    lr = compile_file(d / "mb.alpha").learner
    need_mock()
    r = run(mlp, 90, lr=lr, tag=".mb", args=["--steps", "4"])
    assert (r.returncode, r.errors) == (0, [])
    assert r.stdout == interp.format_state(lr, interp.run(lr, 4))


def test_a_card_whose_fused_sum_runs_in_another_order_is_refused(mlp):
    need_mock()
    r = run(mlp, 90, mutate={"outer_sum_W1": descending}, tag=".desc")
    assert r.errors == []
    assert (r.returncode, r.stdout) == (exit_code("gpu-shadow-mismatch"), "")


def test_two_gpu_owners_with_a_cpu_owner_in_a_star_and_resumed_on_cpu_owners(mlp, tmp_path):
    need_mock()
    from alphac.artifacts import build_deployment
    from alphac.tools.launch import launch
    d, lr, _ = mlp
    wrapper = two_cards(d, lr)
    old = os.getcwd()
    os.chdir(d)
    try:
        _, plans = compile_deployments("mlp.alpha")
        for name in ("gpu_and_cpu", "cpus"):
            build_deployment("mlp.alpha", name, d / "build" / name)
        want = interp.format_state(lr, run_plan(lr, plans["gpu_and_cpu"], 3))
        a = launch(d / "build" / "gpu_and_cpu", steps=2, records=d / "runs", gpu_wrapper=wrapper,
                   checkpoint=tmp_path / "g")
        assert a["passed"], [r["stderr"] for r in a["roles"]]
        assert a["published"] == interp.format_state(lr, run_plan(lr, plans["gpu_and_cpu"], 2))
        logs = [json.loads(f.read_text()) for f in sorted((d / "logs").iterdir())]
        assert sorted(log["card"] for log in logs) == [0, 1]
        assert all(log["errors"] == [] and log["launches"].count("outer_sum_W1") == 2 for log in logs)
        assert all(log["launches"][:9] == LAUNCHED for log in logs)
        b = launch(d / "build" / "cpus", steps=1, records=d / "runs", resume=tmp_path / "g")
        assert b["passed"] and b["published"] == want
    finally:
        os.chdir(old)


def test_a_card_whose_batched_product_runs_in_another_order_is_refused(mlp):
    need_mock()
    r = run(mlp, 90, mutate={"matvec0": descending}, tag=".mvdesc")
    assert r.errors == []
    assert (r.returncode, r.stdout) == (exit_code("gpu-shadow-mismatch"), "")


@pytest.mark.parametrize("kernel", ["matvec1", "vecmat2"])
def test_a_card_whose_phase_product_runs_in_another_order_is_refused(mlp, kernel):
    """W2 @ h and dz @ W2, their vectors computed by vectors1 / vectors2: folded descending."""
    need_mock()
    r = run(mlp, 90, mutate={kernel: descending}, tag=f".{kernel}desc")
    assert r.errors == []
    assert (r.returncode, r.stdout) == (exit_code("gpu-shadow-mismatch"), "")
