"""GPU code (alphac.ptx): the PTX obeys the contract, ptxas accepts it, the cubin reader agrees
with ptxas, and the kernels compute the reference interpreter's bits.

Requires: ptxas (CUDA 13.0; skipped without it, failed in CI) for the assembler and cubin tests;
nothing for the golden and interpreter tests.

Guarantees checked:
  * for the five learners, sm_86 and sm_90: ptxas accepts every kernel; a scan finds no fma,
    mad, atom, red, .ftz or .approx, and every f64 add/sub/mul/div/sqrt names .rn;
  * the launch image (alphac.ptx.cubin) has the registers, stack, shared and constant-bank sizes
    `ptxas -v` reports, and parameter offsets laid out from the kernel's own parameter list;
    a probe kernel with shared and local memory and .maxntid checks the non-zero cases;
  * tests/golden/ptx/<learner>.<kernel>.ptx hold the sm_90 text (`PYTHONPATH=. python
    tests/test_ptx.py` rewrites them);
  * PTX INTERPRETER (below, written here from the PTX ISA): running the kernels through
    gpu/ptx_host.py gives, step after step, the bits of alphac.ir.interp and of tests/oracle.py,
    single owner and the reference four-owner split; a reassociated add is caught;
  * PTX and cubins are byte-identical across runs from two working directories.
"""
import hashlib
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest

import oracle
from ptx_interp import F64, INF, InterpDevice, Memory, Ptx, ieee_div, ieee_sqrt
from conftest import LEARNER_NAMES, ROOT, example, require_tool

from alphac.driver import compile_file
from alphac.ir import interp
from alphac.ptx import ptxas
from alphac.ptx.cubin import CubinError, cubin_info, read_cubin
from ptx_host import Owner
from alphac.ir.learner import postorder
from alphac.ptx.abi import param_count, row_layout
from alphac.ptx.kernels import kernels
from alphac.ptx.render import PARAM_TYPES

GOLDEN = ROOT / "tests" / "golden" / "ptx"
SMS = [86, 90]


@lru_cache(maxsize=None)
def learner(name):
    return compile_file(example(name)).learner


@lru_cache(maxsize=None)
def built(name, sm):
    """(kernel, cubin bytes) for each kernel of the learner."""
    require_tool("ptxas")
    return [(k, ptxas.assemble(k.ptx, sm)) for k in kernels(learner(name), sm)]


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


# -- the PTX scan ---------------------------------------------------------------------------------
FORBIDDEN_OPS = {"fma", "mad", "atom", "red"}
FORBIDDEN_MODS = {"ftz", "approx"}
ROUNDING_OPS = {"add", "sub", "mul", "div", "sqrt"}


def scan(ptx):
    """Every instruction's problems with the contract (an empty list when there are none)."""
    bad = []
    for line in ptx.splitlines():
        code = line.split("//")[0].strip()
        if not code.endswith(";") or code.startswith("."):
            continue
        op = code.split()[1] if code.startswith("@") else code.split()[0]
        parts = op.split(".")
        if parts[0] in FORBIDDEN_OPS or FORBIDDEN_MODS & set(parts[1:]):
            bad.append(code)
        elif parts[0] in ROUNDING_OPS and "f64" in parts and "rn" not in parts:
            bad.append(code)
    return bad


def test_scan_catches_what_it_must():
    assert scan("\tfma.rn.f64 %fd1, %fd2, %fd3, %fd4;\n\tmad.lo.s32 %r1, %r2, %r3, %r4;") != []
    assert len(scan("\tadd.f64 %fd1, %fd2, %fd3;\n\tdiv.approx.f64 %fd1, %fd2, %fd3;\n"
                    "\tsqrt.rn.ftz.f64 %fd1, %fd2;\n\tred.global.add.f64 [%rd1], %fd1;")) == 4
    assert scan("\tadd.rn.f64 %fd1, %fd2, %fd3;\n\t@%p1 bra $done;\n\tneg.f64 %fd1, %fd1;") == []


@pytest.mark.parametrize("sm", SMS)
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_ptx_keeps_the_contract_and_assembles(name, sm):
    ks = kernels(learner(name), sm)
    assert [k.name for k in ks] == (["grad_samples", "owner_sum"] if learner(name).loss else []) \
        + [f"update_g{g.index}" for g in learner(name).groups]
    for k in ks:
        assert scan(k.ptx) == [], k.name
        assert f".target sm_{sm}\n" in k.ptx
    for k, cubin in built(name, sm):
        assert list(read_cubin(cubin)) == [k.name]


# -- the cubin reader against ptxas -v ------------------------------------------------------------
def ptxas_v(ptx, sm):
    """`ptxas -v` per entry: registers, stack, spills, smem and cmem[0] (when it prints it)."""
    tool = ptxas.find_ptxas()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "k.ptx").write_text(ptx)
        run = subprocess.run([tool.path, f"-arch=sm_{sm}", *ptxas.FLAGS, "-v", "k.ptx", "-o",
                              "k.cubin"], cwd=tmp, capture_output=True, text=True, check=True)
    out, entry, fn = {}, None, None
    for line in (run.stdout + run.stderr).splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            entry = m[1]
            out[entry] = {"smem": 0}
        elif m := re.search(r"Function properties for (\S+)", line):
            fn = m[1]
        elif (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)) \
                and fn == entry:
            out[entry].update(stack=int(m[1]), spills=int(m[2]))
        elif m := re.search(r"Used (\d+) registers", line):
            out[entry]["registers"] = int(m[1])
            if s := re.search(r"(\d+) bytes smem", line):
                out[entry]["smem"] = int(s[1])
            if c := re.search(r"(\d+) bytes cmem\[0\]", line):
                out[entry]["cmem0"] = int(c[1])
    return out


def natural_layout(types):
    """C-like layout of parameters: each aligned to its size."""
    off, out = 0, []
    for t in types:
        size = PARAM_TYPES[t]
        off = (off + size - 1) // size * size
        out.append((off, size))
        off += size
    return out, off


PARAM_BASE = {86: 0x160, 90: 0x210}      # observed with ptxas 13.0 (NVIDIA-DRIVER-NOTES guessed)
RESERVED_SMEM = {86: 0, 90: 1024}        # sm_90: .nv.shared.K starts with a 1 KiB reserved window


def check_image(im, sm, types, v):
    assert im.sm == sm
    assert im.registers == v["registers"]
    assert im.local == v["stack"] and v["spills"] == 0
    assert im.shared == (v["smem"] + RESERVED_SMEM[sm] if v["smem"] else 0)
    if "cmem0" in v:
        assert im.cbank0 == v["cmem0"]
    layout, size = natural_layout(types)
    assert [(p.offset, p.size) for p in im.params] == layout
    assert [p.ordinal for p in im.params] == list(range(len(types)))
    assert im.param_size == size and im.param_base == PARAM_BASE[sm]
    assert im.param_base + im.param_size <= im.cbank0
    assert im.code_sha256 == hashlib.sha256(im.code).hexdigest() and im.relocs == ()


@pytest.mark.parametrize("sm", SMS)
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_launch_image_equals_ptxas_v(name, sm):
    for k, cubin in built(name, sm):
        im = read_cubin(cubin)[k.name]
        check_image(im, sm, [p.type for p in k.params], ptxas_v(k.ptx, sm)[k.name])
        assert im.exits and all(e % 16 == 0 and e < len(im.code) for e in im.exits)
        listing = cubin_info(cubin)
        assert f"kernel {k.name}:" in listing and "EIATTR_KPARAM_INFO" in listing


PROBE = """.version 7.8
.target sm_{sm}
.address_size 64

.visible .entry probe(.param .u64 out, .param .u32 k, .param .f64 x, .param .u32 j)
.maxntid 64, 1, 1
{{
	.reg .b32 %r<3>;
	.reg .b64 %rd<8>;
	.reg .f64 %fd<3>;
	.shared .align 8 .b8 sh[256];
	.local .align 8 .b8 loc[96];
	ld.param.u64 %rd1, [out];
	cvta.to.global.u64 %rd1, %rd1;
	ld.param.u32 %r1, [k];
	ld.param.f64 %fd1, [x];
	mul.wide.u32 %rd2, %r1, 8;
	mov.u64 %rd3, loc;
	add.s64 %rd4, %rd3, %rd2;
	st.local.f64 [%rd4], %fd1;
	mov.u64 %rd5, sh;
	add.s64 %rd6, %rd5, %rd2;
	st.shared.f64 [%rd6], %fd1;
	bar.sync 0;
	ld.param.u32 %r2, [j];
	mul.wide.u32 %rd2, %r2, 8;
	add.s64 %rd4, %rd3, %rd2;
	ld.local.f64 %fd2, [%rd4];
	add.s64 %rd6, %rd5, %rd2;
	ld.shared.f64 %fd1, [%rd6];
	add.rn.f64 %fd2, %fd2, %fd1;
	st.global.f64 [%rd1], %fd2;
	ret;
}}
"""


@pytest.mark.parametrize("sm", SMS)
def test_reader_on_a_probe_with_shared_local_and_maxntid(sm):
    require_tool("ptxas")
    ptx = PROBE.format(sm=sm)
    im = read_cubin(ptxas.assemble(ptx, sm))["probe"]
    v = ptxas_v(ptx, sm)["probe"]
    assert v["stack"] == 96 and v["smem"] == 256         # the probe reaches the non-zero cases
    check_image(im, sm, ["u64", "u32", "f64", "u32"], v)
    assert im.max_threads == (64, 1, 1)


def test_reader_refuses_what_it_does_not_understand():
    with pytest.raises(CubinError):
        read_cubin(b"\x7fELF not really")
    with pytest.raises(CubinError):
        read_cubin(Path(sys.executable).read_bytes()[:1 << 16])
    cubin = bytearray(built("scalar_regression", 90)[0][1])
    at = bytes(cubin).index(b".nv.constant0.")
    cubin[at:at + 14] = b".nv.constant2."            # a second constant bank: not launchable
    with pytest.raises(CubinError):
        read_cubin(bytes(cubin))


# -- the assembler --------------------------------------------------------------------------------
def test_ptxas_is_fingerprinted_and_missing_is_named(monkeypatch, tmp_path):
    require_tool("ptxas")
    tool = ptxas.find_ptxas()
    assert "release" in tool.version and len(tool.sha256) == 64
    assert "--fmad=false" in ptxas.FLAGS
    monkeypatch.setenv("ALPHAC_PTXAS", str(tmp_path / "no-ptxas"))
    with pytest.raises(ptxas.PtxasMissing):
        ptxas.find_ptxas()
    monkeypatch.delenv("ALPHAC_PTXAS")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ptxas.PtxasMissing):
        ptxas.assemble(".version 7.8\n", 90)


@pytest.mark.parametrize("sm", SMS)
def test_build_is_all_or_nothing(sm, monkeypatch, tmp_path):
    require_tool("ptxas")
    from alphac.ptx import build
    for name in LEARNER_NAMES:
        got = build(learner(name), sm)
        assert [b.kernel.name for b in got if not b.kernel.name.startswith("digest_")] == \
            [k.name for k in kernels(learner(name), sm)]      # then the sampled shadow's digest
        assert all(b.image.sm == sm and b.image.name == b.kernel.name for b in got)
    monkeypatch.delenv("ALPHAC_PTXAS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ptxas.PtxasMissing):
        build(learner("lsq_adam"), sm)


def test_ptxas_failure_is_named():
    require_tool("ptxas")
    with pytest.raises(ptxas.PtxasFailed):
        ptxas.assemble(".version 7.8\n.target sm_90\n.address_size 64\nnonsense;\n", 90)


# -- golden PTX -----------------------------------------------------------------------------------
def golden_texts():
    return {f"{n}.{k.name}.ptx": k.ptx for n in LEARNER_NAMES for k in kernels(learner(n), 90)}


def test_golden_ptx():
    texts = golden_texts()
    assert sorted(p.name for p in GOLDEN.glob("*.ptx")) == sorted(texts)
    for fname, text in texts.items():
        assert (GOLDEN / fname).read_text() == text, f"{fname} changed: regenerate and review"


def test_targets_differ_only_in_the_target_line():
    for n in LEARNER_NAMES:
        for a, b in zip(kernels(learner(n), 86), kernels(learner(n), 90)):
            assert a.ptx.replace(".target sm_86", ".target sm_90") == b.ptx


# -- the PTX interpreter (tests/ptx_interp.py) ----------------------------------------------------
def test_interpreter_arithmetic_is_ieee():
    assert ieee_div(1.0, 0.0) == INF and ieee_div(-1.0, 0.0) == -INF and ieee_div(1.0, -0.0) == -INF
    assert math.isnan(ieee_div(0.0, 0.0)) and math.isnan(ieee_sqrt(-1.0))
    assert bits(ieee_sqrt(-0.0)) == bits(-0.0) and ieee_sqrt(INF) == INF
    assert F64["add.rn.f64"](0.1, 0.2) == 0.30000000000000004


def state_bits(state):
    return {k: [bits(x) for x in v] for k, v in state.items()}


def run_on_interpreter(name, steps=5, mutate=None):
    """Steps through gpu/ptx_host.py; returns the first step whose bits differ, or None."""
    lr = learner(name)
    owner = Owner(InterpDevice(mutate), lr, kernels(lr))
    want = interp.initial_state(lr)
    for s in range(1, steps + 1):
        owner.step()
        want = interp.step(lr, want)
        if state_bits(owner.read_state()) != state_bits(want):
            return s
    assert interp.format_state(lr, owner.read_state()) == oracle.run(name, steps=steps)
    return None


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_kernels_compute_the_reference_bits(name):
    assert run_on_interpreter(name) is None


def four_owners(lr, split, steps):
    """`steps` steps of `lr` on the owners `split` combined by the reference tree, on the PTX
    interpreter and on alphac.ir.interp: the state after each step must have the same bits."""
    owner = Owner(InterpDevice(), lr, kernels(lr))
    want = interp.initial_state(lr)
    for _ in range(steps):
        parts = [(owner.contribution(lo, hi), hi - lo) for lo, hi in split]
        G, n = oracle.combine(oracle.REF_TREE, parts)
        owner.update(G, n)
        c = [interp.owner_contribution(lr, want, range(lo, hi)) for lo, hi in split]
        total = interp.combine(interp.combine(c[0], c[1]), interp.combine(c[2], c[3]))
        want = interp.apply_update(lr, want, interp.mean_gradient(total))
        assert state_bits(owner.read_state()) == state_bits(want)
    return want


@pytest.mark.parametrize("name", ["lsq_momentum", "lsq_adam"])
def test_reference_split_four_owners(name):
    want = four_owners(learner(name), oracle.REF_SPLIT, 5)
    split = [(5, oracle.REF_SPLIT, oracle.REF_TREE)]
    assert interp.format_state(learner(name), want) == oracle.run(name, split)


COVERAGE = """learner coverage
data x = [[1.0, 2.0, -0.5], [0.25, -1.5, 3.0], [2.0, 0.5, 1.0], [-1.0, 1.0, 0.75]]
data y = [1.0, -2.0, 0.5, 3.0]
const c = [0.5, 1.5, 2.0]
param w: f64[3] = 0.1
param b: f64 = 0.2
param W: f64[2, 3] = 0.05
param u: f64[2] = 1.0
state s: f64 = 2.0
state q: f64[3] = 1.0
loss(i) {
  let h = dot(W[0], x[i]) * s + sum(w * x[i] * c) - b^3
  let z = sqrt(h * h + 1) - y[i]
  0.5 * z^2 + -(W[1, 2] / (b + 2))
}
update {
  let g = grad(w)
  q = q * 0.5 + c * (g * g)
  s = s * 0.99
  w = w - 0.01 * g / sqrt(q + 1e-8) * s
  b = b - 0.01 * grad(b)
  W = W - 0.02 * grad(W)
  u = -u / 2
}
"""


def test_every_node_kind(tmp_path):
    """dot, sum, pow, sqrt, neg, a row and an element of a matrix param, a scalar state read by
    the loss and (new) by the update, a vector constant in the update, four groups."""
    (tmp_path / "coverage.alpha").write_text(COVERAGE)
    lr = compile_file(tmp_path / "coverage.alpha").learner
    ks = kernels(lr)
    assert [k.name for k in ks] == ["grad_samples", "owner_sum",
                                    *(f"update_g{i}" for i in range(4))]
    assert [p.name for p in ks[2].params] == ["state_w", "state_q", "G", "n", "scalar_s_new",
                                              "const_0", "klo", "khi"]
    owner, want = Owner(InterpDevice(), lr, ks), interp.initial_state(lr)
    for _ in range(8):
        owner.step()
        want = interp.step(lr, want)
        assert state_bits(owner.read_state()) == state_bits(want)
    interp.format_state(lr, want)                       # finite: a meaningful comparison
    if shutil.which("ptxas") or os.environ.get("ALPHAC_PTXAS"):    # else other tests fail in CI
        from alphac.ptx import build
        for sm in SMS:
            for b in build(lr, sm):
                assert scan(b.kernel.ptx) == []
                check_image(b.image, sm, [p.type for p in b.kernel.params],
                            ptxas_v(b.kernel.ptx, sm)[b.kernel.name])


MLP = """learner mlp
data x = [[0.5, -1.0, 0.25, 2.0], [1.5, 0.3, -0.7, 0.0], [-0.2, 0.8, 1.1, -1.5],
          [0.9, -0.4, 0.6, 0.1], [0.0, 2.0, -1.0, 0.5], [-1.2, 0.4, 0.3, 0.8]]
data y = [0, 1, 2, 1, 0, 2]
param W1: f64[3, 4] = [[0.1, -0.2, 0.3, 0.05], [0.4, 0.05, -0.1, 0.2], [-0.3, 0.25, 0.15, -0.05]]
param b1: f64[3] = [0.01, -0.02, 0.0]
param W2: f64[3, 3] = [[0.2, -0.1, 0.05], [-0.15, 0.3, 0.1], [0.05, 0.2, -0.25]]
param b2: f64[3] = 0.0
state mW1: f64[3, 4] = 0.0
state vW1: f64[3, 4] = 0.0
state p1: f64 = 1.0
loss(i) {
  let h = relu(W1 @ x[i] + b1)
  let z = W2 @ h + b2
  logsumexp(z) - dot(onehot(y[i], 3), z)
}
update {
  p1 = p1 * 0.9
  let g = grad(W1)
  mW1 = 0.9 * mW1 + 0.1 * g
  vW1 = 0.999 * vW1 + 0.001 * (g * g)
  W1 = W1 - (0.1 / (1 - p1)) * (mW1 / (sqrt(vW1) + 1e-8))
  b1 = b1 - 0.1 * grad(b1)
  W2 = W2 - 0.1 * grad(W2)
  b2 = b2 - 0.1 * grad(b2)
}
"""

# every new node kind: A @ v, u @ A, outer, max(v) (ties, signed zeros: its adjoint's winner
# rule), onehot (labels in range, fractional, negative, past the end), vectors over a matrix's
# rows, a vector of computed scalars, relu
OPS = """learner ops
data x = [[1.0, -0.0, 0.5], [0.0, -0.0, 2.0], [0.25, 0.25, 0.25], [-1.0, 3.0, -1.0],
          [2.0, 0.5, 2.0], [0.0, 0.0, -0.0]]
data lab = [0, 2, 1.5, -1, 7, 1]
param A: f64[3, 3] = [[0.1, -0.2, 0.3], [0.4, 0.05, -0.1], [-0.15, 0.2, 0.25]]
param u: f64[3] = [0.3, -0.7, 0.11]
param c: f64[3] = [0.2, 0.1, -0.3]
loss(i) {
  let h = A @ x[i]
  let g = u @ A
  let P = relu(outer(h, c) + c) * x[i]
  let s = [max(x[i]), max(h), sum(P @ c), max(x[i] * u[0])]
  dot(onehot(lab[i], 3), g) + sum(s * s) + max(g * x[i]) + 0.5 * sum(u @ P)
}
update {
  A = A - 0.1 * grad(A)
  u = u - 0.1 * grad(u)
  c = c - 0.1 * grad(c)
}
"""
SPLIT6 = [(0, 1), (1, 3), (3, 4), (4, 6)]


@pytest.mark.parametrize("src", [MLP, OPS], ids=["mlp", "ops"])
def test_matrix_operations_compute_the_reference_bits(src, tmp_path, monkeypatch):
    """An MLP (relu, softmax cross-entropy by logsumexp, Adam on a 2-D param) and a learner with
    every matrix operation: three steps on four owners have the interpreter's bits, and ptxas
    takes every kernel for both targets."""
    (tmp_path / "l.alpha").write_text(src)
    lr = compile_file(tmp_path / "l.alpha").learner
    ks = kernels(lr)
    kinds = {type(n).__name__ for n in postorder([c.node for cs in lr.grads.values() for c in cs])}
    assert {"MatVec", "Max", "MaxAdj", "OneHot"} <= kinds
    if src is OPS:
        assert {"VecMat", "Outer", "Stack"} <= kinds
    want = four_owners(lr, SPLIT6, 3)
    interp.format_state(lr, want)                       # finite: a meaningful comparison
    if src is OPS:      # vectors kept in registers (as built), in .local arrays, or recomputed
        mod = sys.modules[kernels.__module__]
        assert ".local" not in ks[0].ptx
        monkeypatch.setattr(mod, "IN_REGISTERS", 0)
        kept = kernels(lr)[0].ptx
        arrays = kept.count(".local .align")
        assert arrays > 0 and state_bits(four_owners(lr, SPLIT6, 3)) == state_bits(want)
        monkeypatch.setattr(mod, "STORE_MAX", 0)                       # stacks kept still
        assert 0 < kernels(lr)[0].ptx.count(".local .align") < arrays
        assert kernels(lr)[0].ptx.count("ld.global") > kept.count("ld.global")
        assert state_bits(four_owners(lr, SPLIT6, 3)) == state_bits(want)
        monkeypatch.undo()
    assert state_bits(want) != state_bits(interp.initial_state(lr))
    if shutil.which("ptxas") or os.environ.get("ALPHAC_PTXAS"):
        for sm in SMS:
            for k in kernels(lr, sm):
                assert scan(k.ptx) == [], k.name
                image = read_cubin(ptxas.assemble(k.ptx, sm))
                arrays = sum(int(b) for b in re.findall(r"\.local \.align 8 \.b8 \w+\[(\d+)\]", k.ptx))
                assert list(image) == [k.name]          # local memory: the kept vectors, no spill
                assert arrays <= image[k.name].local <= arrays + 64 if arrays else image[k.name].local == 0
    fused = ["outer_sum_W1", "outer_sum_W2"] if src is MLP else []    # OPS: A has several contributions
    # W1 @ x[i], then W2 @ h and dz @ W2 from their vectors; A @ x[i] and A @ (computed from x[i])
    batched = ["matvec0", "vectors1", "matvec1", "vectors2", "vecmat2"] if src is MLP else \
        ["vectors0", "matvec0", "matvec1"]
    assert [k.name for k in ks] == ["grad_samples", *batched, "owner_sum", *fused] + \
        [f"update_g{g.index}" for g in lr.groups]


def no_batched_products(monkeypatch):
    """grad_samples alone computes every vector (the loops' lowering under test), as before
    the batched products of later phases (docs/gpu.md, "Phases") took the MLP's vectors."""
    import alphac.ptx.abi as abi
    monkeypatch.setattr(abi, "products", lambda lr: [])


def test_a_wider_mlp_in_loops_computes_the_reference_bits(tmp_path, monkeypatch):
    """A 20-18-3 tanh MLP (gpu/local_check.py's mlp_source): its hidden vectors are kept in .local
    arrays, its 3 classes in registers read by a loop's computed index (outer(dz, h)); three steps
    on four owners have the interpreter's bits. The PTX has the same lines at hidden 18 and 180
    but for the constants (the loops' bounds), so the code does not grow with the width."""
    from local_check import mlp_source
    no_batched_products(monkeypatch)
    (tmp_path / "m.alpha").write_text(mlp_source(20, 18, 3, 6, "m"))
    lr = compile_file(tmp_path / "m.alpha").learner
    gs = kernels(lr)[0].ptx
    assert ".local" in gs and "selp.f64" in gs
    want = four_owners(lr, SPLIT6, 3)
    assert state_bits(want) != state_bits(interp.initial_state(lr))
    (tmp_path / "w.alpha").write_text(mlp_source(20, 180, 3, 6, "m"))
    wide = kernels(compile_file(tmp_path / "w.alpha").learner)[0].ptx
    shape = lambda t: re.sub(r"\b\d+\b", "N", t)                  # noqa: E731
    assert shape(wide) == shape(gs)


def test_local_arrays_stay_within_a_threads_budget(tmp_path, monkeypatch):
    """kernels.LOCAL_MAX bounds the .local coordinates a thread keeps in all (each kept vector
    beyond it is recomputed where read, as one beyond STORE_MAX is), so a learner with many wide
    kept vectors does not need an area the card cannot hold (a 2,048-wide fuzz learner asked for
    96.8 GB); the bits stay the interpreter's. The 20-18-3 MLP keeps vectors of 18 coordinates:
    with a budget of 20, one of them (grad_samples alone, as above)."""
    from local_check import mlp_source
    no_batched_products(monkeypatch)
    (tmp_path / "m.alpha").write_text(mlp_source(20, 18, 3, 6, "m"))
    lr = compile_file(tmp_path / "m.alpha").learner

    def local_coordinates(ptx):
        return sum(int(b) for b in re.findall(r"\.local \.align 8 \.b8 \w+\[(\d+)\]", ptx)) // 8
    mod = sys.modules[kernels.__module__]
    free = local_coordinates(kernels(lr)[0].ptx)
    assert free >= 2 * 18
    monkeypatch.setattr(mod, "LOCAL_MAX", 20)
    bound = local_coordinates(kernels(lr)[0].ptx)
    assert 0 < bound <= 20 < free
    four_owners(lr, SPLIT6, 2)          # the interpreter's bits after each step (checked inside)


SPECIALS = """learner specials
data k = [0, 1, 2, 1.5, -1, 3, 0, 0]
param w: f64[3] = 0.0
param v: f64[3] = 0.5
loss(i) {
  max(w) * k[i] + dot(onehot(k[i], 3), v)
}
update {
  w = w - grad(w)
  v = v - grad(v)
}
"""


def test_max_and_onehot_on_special_values(tmp_path):
    """max(w)'s adjoint goes to the interpreter's winner (ties, signed zeros, NaNs, infinities)
    and onehot(k) is the interpreter's (a fractional, negative, past-the-end, NaN and -0 label):
    each sample's gradient in gs has the bits of interp.per_sample_gradient."""
    (tmp_path / "s.alpha").write_text(SPECIALS)
    lr = compile_file(tmp_path / "s.alpha").learner
    lr.data[0].literal = (0.0, 1.0, 2.0, 1.5, -1.0, 3.0, float("nan"), -0.0)
    owner, n, nan = Owner(InterpDevice(), lr, kernels(lr)), lr.nsamples, float("nan")
    rows = [(1.0, 1.0, 0.5), (-0.0, 0.0, -0.0), (0.0, -0.0, 0.0), (1.0, nan, 2.0), (nan, 1.0, 3.0),
            (-INF, -INF, -INF), (2.0, 3.0, 3.0), (0.5, 4.0, 1.0), (3.0, 2.0, nan),
            (-0.0, -0.0, 1.0)]
    for w in rows:
        owner.dev.write(owner.state["w"], w)
        owner.contribution(0, n)
        state = {**interp.initial_state(lr), "w": w}
        want = [x for i in range(n) for g in [interp.per_sample_gradient(lr, state, i)]
                for x in g["w"] + g["v"]]
        assert [bits(x) for x in owner.dev.read(owner.gs, 6 * n)] == [bits(x) for x in want], w


def test_exact_sum_has_no_owner_sum_and_the_cards_exact_sums_of_the_rows(tmp_path):
    """Under `contract exact_sum` the card adds the per-sample rows exactly (no binary64
    owner_sum kernel: alphac/ptx/xsum.py's), the host rounds its accumulators: 3 steps of the MLP
    equal the interpreter's exact run."""
    (tmp_path / "l.alpha").write_text(MLP.replace("learner mlp\n", "learner mlp\ncontract exact_sum\n"))
    lr = compile_file(tmp_path / "l.alpha").learner
    ks = kernels(lr)
    assert [k.name for k in ks][:6] == ["grad_samples", "xsum_clear", "xsum_add", "xsum_fold", "xsum_round", "update_g0"]
    owner = Owner(InterpDevice(), lr, ks)
    for t in range(3):
        owner.step(t)
    assert state_bits(owner.read_state()) == state_bits(interp.run(lr, 3))


def test_a_shuffled_minibatch_computes_the_reference_bits(tmp_path):
    """The MLP in batches of 4 of its 6 samples, shuffled: grad_samples computes the samples
    the host lists (idx, count), one of 4 then one of 2 a epoch; 4 steps cross an epoch."""
    (tmp_path / "l.alpha").write_text(MLP.replace("learner mlp\n", "learner mlp\nbatch 4\norder shuffle(5)\n"))
    lr = compile_file(tmp_path / "l.alpha").learner
    owner = Owner(InterpDevice(), lr, kernels(lr))
    counts = []
    for t in range(4):
        owner.step(t)
        counts.append(owner.count)
    assert counts == [4, 2, 4, 2]
    assert state_bits(owner.read_state()) == state_bits(interp.run(lr, 4))


def test_generated_matrix_learners_compute_the_reference_bits(tmp_path):
    """The first five learners of tests/learngen.py with the matrix operations (and neither
    minibatches nor exact_sum) that the checker takes and that are small enough for the PTX
    interpreter: three steps on it have
    the interpreter's bits (NaNs compared as NaNs: their bits are not part of the contract)."""
    import learngen
    from alphac.diag import CompileError
    kinds, checked = set(), 0
    for seed in range(100):
        prog = learngen.generate(seed, matrices=True, npy=False)
        if prog.batch or prog.contract or prog.expect or prog.loss_result is None:
            continue
        try:
            lr = compile_file(learngen.write(prog, tmp_path / f"l{seed}.alpha")).learner
        except CompileError:
            continue
        ks = kernels(lr)
        if ks[0].ptx.count("\n") * lr.nsamples > 30000:       # the interpreter is slow
            continue
        owner, want = Owner(InterpDevice(), lr, ks), interp.initial_state(lr)
        for _ in range(3):
            owner.step()
            want = interp.step(lr, want)
        nan = bits(float("nan"))
        same = {k: [nan if x != x else bits(x) for x in v] for k, v in want.items()}
        assert same == {k: [nan if x != x else bits(x) for x in v]
                        for k, v in owner.read_state().items()}, seed
        kinds |= {type(n).__name__ for n in postorder([lr.loss])}
        checked += 1
        if checked == 5:
            break
    assert checked == 5 and {"MatVec", "VecMat", "Outer", "Max", "OneHot"} <= kinds, kinds


def reverse_first_fold(ptx):
    """The first loop that folds (`add.rn.f64 %acc, %acc, ...` in its body) run over its terms
    from the last down: k = 1 .. N-1 becomes N-1 .. 1, so t0 + t(N-1) + ... + t1."""
    lines = [x for x in ptx.split("\n") if x != '\t.pragma "nounroll";']
    head = re.compile(r"\tsetp\.ge\.u32 (%p\d+), (%r\d+), (\d+);")
    for i in range(len(lines) - 2):
        m = head.fullmatch(lines[i + 1])
        if not (lines[i].startswith("$L") and m):
            continue
        k, n = m[2], m[3]
        end = lines.index(f"\tadd.u32 {k}, {k}, 1;", i)
        body = lines[i + 3:end]
        if not any(re.fullmatch(r"\tadd\.rn\.f64 (%fd\d+), \1, %fd\d+;", x) for x in body):
            continue
        kr = "%r99999"
        body = [re.sub(re.escape(k) + r"\b", kr, x) for x in body]
        lines[i + 3:end] = [f"\tsub.u32 {kr}, {n}, {k};"] + body
        return "\n".join(lines)
    raise AssertionError("no folding loop")


def test_interpreter_catches_a_fold_loop_run_backwards():
    """A dot product's loop over its terms run from the last down gives other bits."""
    mutant = {"grad_samples": reverse_first_fold}
    text = reverse_first_fold(kernels(learner("lsq_adam"))[0].ptx)
    assert "sub.u32 %r99999, 5, %r10;" in text
    assert run_on_interpreter("lsq_adam", mutate=mutant) is not None


def sum_plus_zero_first(ptx):
    """owner_sum's fold started from +0: +0 + the first term (a -0 column becomes +0)."""
    return re.sub(r"(\tld\.global\.f64 (%fd\d+), \[%rd\d+\+0\];)",
                  r"\1\n\tadd.rn.f64 \2, 0d0000000000000000, \2;", ptx, count=1)


def sum_batch_reversed(ptx):
    """owner_sum's first batch of adds (a whole batch, in the loop) in the opposite order."""
    lines = ptx.split("\n")
    add = re.compile(r"\tadd\.rn\.f64 (%fd\d+), \1, %fd\d+;")
    i = next(i for i, x in enumerate(lines) if add.fullmatch(x) and add.fullmatch(lines[i + 1]))
    j = next(j for j in range(i, len(lines)) if not add.fullmatch(lines[j]))
    lines[i:j] = lines[i:j][::-1]
    return "\n".join(lines)


def sum_tail_swapped(ptx):
    """owner_sum's last terms (fewer than a stage) with the first two read swapped."""
    head, mark, tail = ptx.partition("$last:")
    loads = re.findall(r"ld\.shared\.f64 %fd\d+, \[%rd\d+\+\d+\];", tail)[:2]
    a, b = (re.search(r"\[.*\]", x)[0] for x in loads)
    return head + mark + tail.replace(loads[0], loads[0].replace(a, "\0"), 1).replace(
        loads[1], loads[1].replace(b, a), 1).replace("\0", b, 1)


def sum_stage_skipped(ptx):
    """owner_sum's loaders writing every stage into the first (their swap of stages removed)."""
    head, mark, tail = ptx.partition("// a loader: the next terms into the other stage\n")
    swap = re.search(r"\txor\.b64 .*\n", tail)[0]
    return head + mark + tail.replace(swap, "", 1)


def owner_sums(text, W, columns, n, k):
    """G from owner_sum's PTX `text` (launched as kernel k) over n rows of width W, column c's
    terms columns[c](i)."""
    mem = Memory()
    gs = mem.alloc([columns[c % len(columns)](i + c) for i in range(n) for c in range(W)] or [0.0])
    G = mem.alloc([1.0] * W)
    Ptx(text).launch(mem, {"gs": gs, "G": G, "n": n}, k.threads, block=k.block)
    return [bits(x) for x in mem.read(G, W)]


WIDE = """learner wide
data x = [{row}, {row}]
data y = [1.0, 2.0]
param w: f64[70] = 0.0
loss(i) {{
  let r = dot(w, x[i]) - y[i]
  0.5 * r * r
}}
update {{
  w = w - 0.1 * grad(w)
}}
""".format(row=[1.0] * 70)


@pytest.mark.parametrize("wide", [False, True])
def test_owner_sum_is_the_left_fold_from_the_first_sample_and_its_mutants_differ(wide, tmp_path):
    """owner_sum stages its terms in shared memory but adds them in order, from the first term:
    the bits of the left fold for every count around a stage (n = 0 writes nothing), for 5
    columns (one block, most lanes idle) and 70 (three blocks); each mutant (started from +0, a
    stage's adds reversed, two of the last terms swapped, the loaders never changing stage)
    differs."""
    from alphac.ptx.kernels import SUM_COLS, SUM_STAGE
    if wide:
        (tmp_path / "wide.alpha").write_text(WIDE)
        lr = compile_file(tmp_path / "wide.alpha").learner
    else:
        lr = learner("lsq_adam")
    W = row_layout(lr).width
    k = [k for k in kernels(lr) if k.name == "owner_sum"][0]
    assert k.threads == k.block * -(-W // SUM_COLS) and "bar.sync 0;" in k.ptx
    big = [1.0, 2.0 ** 53, -(2.0 ** 53), 2.0 ** -60, 3.0, -1.0]
    columns = [lambda i: -0.0, lambda i: big[i % 6], lambda i: big[(i * 5 + 1) % 6],
               lambda i: (1.0 if i % 7 == 0 else 2.0 ** -53) * (-1) ** (i // 3), lambda i: float(i)]

    def fold(c, n):
        acc = columns[c % 5](c)
        for i in range(1, n):
            acc += columns[c % 5](i + c)
        return bits(acc)
    S = SUM_STAGE
    counts = [0, 1, 2, 3, S, S + 1, S + 4, 2 * S + 1, 3 * S + 7] if not wide else [1, 2, S + 1, 2 * S + 3]
    for n in counts:
        want = [fold(c, n) if n else bits(1.0) for c in range(W)]
        assert owner_sums(k.ptx, W, columns, n, k) == want, n
    assert bits(-0.0) == fold(0, 3)

    def differs(text, n):           # other bits, or a race the interpreter sees (KeyError)
        try:
            return owner_sums(text, W, columns, n, k) != [fold(c, n) for c in range(W)]
        except KeyError as e:
            return "race" in str(e)
    for mutant in (sum_plus_zero_first, sum_batch_reversed, sum_tail_swapped, sum_stage_skipped):
        text = mutant(k.ptx)
        assert text != k.ptx
        assert any(differs(text, n) for n in counts[3:]), mutant


REDUCED = example("lsq_adam").read_text().split("# -- deployments")[0].replace(
    "  let g = grad(w)\n", "  let g = grad(w) * min(1, 0.5 / sqrt(dot(grad(w), grad(w)))) + 0.001 * sum(m) + 0.001 * max(-1 - v)\n")


def test_the_cards_reduced_scalars_have_the_interpreters_bits_and_their_mutants_differ(tmp_path):
    """`reduce` folds the update's reduced scalars over the group on the card (a dot of the
    gradients, a sum and a max(v) of the state), the update kernels read them from rd: the
    interpreter's bits, step by step; its folds started from +0, or run from the last coordinate
    down, give other bits; a reduction of constants alone stays the host's parameter."""
    from alphac.ptx.abi import card_reductions
    (tmp_path / "r.alpha").write_text(REDUCED)
    lr = compile_file(tmp_path / "r.alpha").learner
    ks = kernels(lr)
    assert [k.name for k in ks] == ["grad_samples", "owner_sum", "reduce", "update_g0"]
    assert card_reductions(lr) == {0: 0, 1: 1, 2: 2} and ks[2].threads == 3
    assert "rd" in [p.name for p in ks[3].params] and not any(p.name.startswith("reduced_") for p in ks[3].params)

    def first_difference(mutate=None):
        owner, want = Owner(InterpDevice(mutate), lr, kernels(lr)), interp.initial_state(lr)
        for s in range(1, 5):
            owner.step(s - 1)
            want = interp.step(lr, want, s - 1)
            if state_bits(owner.read_state()) != state_bits(want):
                return s
        return None
    assert first_difference() is None
    text = ks[2].ptx
    firsts = list(re.finditer(r"setp\.eq\.u32 (%p\d+), %r\d+, 0;\n\tselp\.f64 (%fd\d+), %fd\d+, (%fd\d+), \1;", text))
    assert len(firsts) == 3                 # each fold's first term starts it
    m = firsts[2]                           # max(-1 - v)'s started from +0 instead
    from_zero = text[:m.start()] + f"mov.f64 {m[2]}, {m[3]};" + text[m.end():]
    at = re.search(r"mul\.wide\.u32 (%rd\d+), (%r\d+), 8;", text)     # the dot's coordinate j
    down = text.replace(at[0], f"sub.u32 %r99, 4, {at[2]};\n\tmul.wide.u32 {at[1]}, %r99, 8;", 1)
    for mutant in (from_zero, down):
        assert mutant != text and first_difference({"reduce": lambda t, m=mutant: m}) is not None
    consts = REDUCED.replace("+ 0.001 * sum(m) + 0.001 * max(-1 - v)", "+ sum(p1 * [1.0, 2.0])")
    (tmp_path / "c.alpha").write_text(consts)
    lc = compile_file(tmp_path / "c.alpha").learner
    assert card_reductions(lc) == {0: 0} and "reduced_1" in [p.name for p in kernels(lc)[-1].params]


# -- the vendor check script ----------------------------------------------------------------------
def test_vendor_check_without_libcuda_exits_2(tmp_path):
    script = ROOT / "gpu" / "vendor_check.py"
    run = subprocess.run([sys.executable, str(script), "--libcuda", str(tmp_path / "nope.so")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "libcuda" in run.stderr and run.stdout == ""
    run = subprocess.run([sys.executable, str(script), "--learner", "nonesuch"],
                         capture_output=True, text=True)
    assert run.returncode == 2


class FakeCuda:
    """The driver-API calls gpu/vendor_check.py makes, decoded from their ctypes arguments and
    served by the PTX interpreter: checks the script's marshaling without a GPU."""
    sm = 90

    def __init__(self, mutate=None):
        self.mem, self.kernels, self.mutate = Memory(), {}, mutate or {}

    def call(self, name, *a):
        import ctypes
        if name == "cuModuleLoadData":
            a[0]._obj.value = len(self.kernels) + 1
        elif name == "cuModuleGetFunction":
            a[0]._obj.value = a[1].value
            self.kernels[a[1].value] = a[2].decode()
        elif name == "cuMemAlloc_v2":
            a[0]._obj.value = self.mem.alloc([0.0] * (a[1].value // 8))
        elif name == "cuMemcpyHtoD_v2":
            self.mem.write(a[0].value, struct.unpack(f"<{a[2].value // 8}d", a[1]))
        elif name == "cuMemcpyDtoH_v2":
            data = struct.pack(f"<{a[2].value // 8}d", *self.mem.read(a[1].value, a[2].value // 8))
            ctypes.memmove(a[0], data, len(data))
        elif name == "cuLaunchKernel":
            k = self.current[self.kernels[a[0].value]]
            ctype = {"u64": ctypes.c_uint64, "u32": ctypes.c_uint32, "f64": ctypes.c_double}
            args = {p.name: ctypes.cast(a[9][i], ctypes.POINTER(ctype[p.type])).contents.value
                    for i, p in enumerate(k.params)}
            text = self.mutate.get(k.name, lambda t: t)(k.ptx)
            Ptx(text).launch(self.mem, args, 0, block=a[4], grid=a[1])
        else:
            assert name == "cuCtxSynchronize", name


def vendor_check_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("vendor_check", ROOT / "gpu" / "vendor_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_vendor_check_against_a_fake_driver(tmp_path):
    require_tool("ptxas")
    vc = vendor_check_module()
    assert vc.main(["--build", str(tmp_path), "--learner", "lsq_adam"]) == 0
    for name in LEARNER_NAMES:
        fake = FakeCuda()
        fake.current = {k.name: k for k in kernels(learner(name))}
        assert vc.check(fake, name, 5, tmp_path if name == "lsq_adam" else None) == []
    fake = FakeCuda({"grad_samples": reverse_first_fold})
    fake.current = {k.name: k for k in kernels(learner("lsq_adam"))}
    rows = vc.check(fake, "lsq_adam", 5, tmp_path)
    assert rows and "step   3" in rows[0]


def regenerate():
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for old in GOLDEN.glob("*.ptx"):
        old.unlink()
    for fname, text in golden_texts().items():
        (GOLDEN / fname).write_text(text)
    print(f"wrote {len(golden_texts())} files to {GOLDEN}")


TWO_MAX = """learner twomax
data x = [[1.0, 2.0], [0.5, -1.0], [0.25, 0.75]]
data y = [1.0, 2.0, -0.5]
param w: f64[2] = 0.2
param b: f64[2] = 0.1
loss(i) = (dot(w, x[i]) + sum(b) - y[i])^2
update {
  let norm = max(abs(grad(w))) + max(abs(grad(b)))
  w = w - 0.1 * grad(w) / (1.0 + norm)
  b = b - 0.1 * grad(b)
}
"""


def test_a_kernel_lowering_max_twice_has_its_labels_once(tmp_path):
    """`reduce` lowers each reduction's terms through a math lowering of its own: two `max` of
    the update gave two `$m1_else` labels and ptxas refused the kernel (the fuzzer's seed
    1208003); the labels are the kernel's emitter's now, and the kernels give the interpreter's
    bits."""
    require_tool("ptxas")
    from alphac.ptx import build
    (tmp_path / "t.alpha").write_text(TWO_MAX)
    lr = compile_file(tmp_path / "t.alpha").learner
    assert "reduce" in [b.kernel.name for b in build(lr, 90)]
    owner = Owner(InterpDevice(), lr, kernels(lr))
    want = interp.initial_state(lr)
    for t in range(3):
        owner.step(t)
        want = interp.step(lr, want, t)
    assert interp.format_state(lr, owner.read_state()) == interp.format_state(lr, want)


if __name__ == "__main__":
    sys.exit(regenerate())
