"""Data at run time (docs/data.md): `load("file.npy")` data is read by each owner at run time,
its rows only, checked against the build's chunk digests; refused by name when missing, of
another shape, or changed; never compiled into an executable."""
import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from alphac import npy
from alphac.driver import compile_deployments, compile_file
from alphac.dist.execute import run_plan
from alphac.ir import interp
from alphac.refusals import exit_code
from backend import run_exe
from conftest import ROOT, alphac

N = 40000                                 # x: 2.56 MB, three chunks; owners cross chunk edges


def learner(batch: str = "") -> str:
    return f"""learner loaded
data x = load("x.npy")
data y = load("y.npy")
data z = load("sub/z.npy")
param w: f64[8] = 0.0
param c: f64 = 0.0
{batch}
loss(i) {{
  let r = dot(w, x[i]) + c * z[i, 1] - y[i]
  0.5 * r^2
}}
update {{
  w = w - 0.001 * grad(w)
  c = c - 0.0001 * grad(c)
}}

deployment star4 {{
  roles coordinator, owner[4]
  topology star(coordinator)
  samples owner[0] = 0..9000, owner[1] = 9000..35000, owner[2] = 35000..37000, owner[3] = 37000..40000
  target owner[3] = aarch64
}}
"""


def write_data(d):
    rng = np.random.default_rng(17)
    np.save(d / "x.npy", rng.standard_normal((N, 8)))
    np.save(d / "y.npy", rng.integers(-5, 6, N).astype("<i8"))
    (d / "sub").mkdir(exist_ok=True)
    np.save(d / "sub" / "z.npy", rng.integers(0, 256, (N, 2)).astype("|u1"))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("loaded")
    write_data(d)
    (d / "loaded.alpha").write_text(learner())
    (d / "batched.alpha").write_text(learner("batch 4096\norder shuffle(5)"))
    return d


def build(src, out, target="x86_64"):
    from alphac.build import build_learner
    out.write_bytes(build_learner(compile_file(src).learner, target).elf)
    os.chmod(out, 0o755)
    return out


def refused(p, name):
    last = p.stderr.strip().split("\n")[-1]                 # `refused: NAME`, or with a detail
    assert p.returncode == exit_code(name) and last.split(" (")[0] == f"refused: {name}", p.stderr
    assert p.stdout == ""


# -- the build's side: the file, scanned -----------------------------------------------------------
def test_the_scan_reads_what_numpy_wrote(tmp_path):
    a = np.arange(12, dtype="<i8").reshape(4, 3) - 5
    np.save(tmp_path / "a.npy", a)
    f = npy.scan(str(tmp_path / "a.npy"))
    raw = (tmp_path / "a.npy").read_bytes()
    assert (f.descr, f.shape, f.size, f.cols) == ("<i8", (4, 3), len(raw), 3)
    assert raw[:f.offset] == f.header and f.offset % 64 == 0
    assert f.chunks == (__import__("hashlib").sha256(raw).digest(),)
    assert list(f.values()) == [float(v) for v in a.reshape(-1)]
    assert f.span(1, 3) == (f.offset + 24, f.offset + 72, 0, 1) and f.span(2, 2)[2:] == (0, 0)


@pytest.mark.parametrize("array,why", [
    (np.zeros((2, 2), dtype="<f4"), "dtype '<f4'"),
    (np.zeros((2, 2), dtype=">f8"), "dtype '>f8'"),
    (np.asfortranarray(np.zeros((2, 3))), "Fortran order"),
    (np.zeros((2, 2, 2)), "1- or 2-D"),
    (np.zeros((0, 3)), "non-empty"),
    (np.array([1.0, np.nan]), "NaN"),
    (np.array([1.0, np.inf]), "NaN or an infinity"),
    (np.array([2 ** 53 + 1, 3], dtype="<i8"), "exactly"),
])
def test_the_scan_refuses_what_an_executable_cannot_read(array, why, tmp_path):
    np.save(tmp_path / "a.npy", array)
    with pytest.raises(npy.NpyError, match=why.replace("(", r"\(")):
        npy.scan(str(tmp_path / "a.npy"))


def test_a_truncated_or_grown_file_is_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.ones(10))
    raw = (tmp_path / "a.npy").read_bytes()
    for bad, why in ((raw[:-1], "describes"), (raw + b"\0", "describes"), (raw[:9], "magic|truncated"),
                     (b"\x93NUMPY\x09\x00" + raw[8:], "version 9")):
        (tmp_path / "b.npy").write_bytes(bad)
        with pytest.raises(npy.NpyError, match=why):
            npy.scan(str(tmp_path / "b.npy"))


@given(st.binary(max_size=300), st.integers(0, 200))
@settings(max_examples=300, deadline=None)
def test_headers_from_outside_are_refused_by_name(junk, cut):
    """parse_header never fails otherwise than NpyError, whatever bytes a file starts with."""
    good = b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }"
    good = good + b" " * (128 - len(good) - 1) + b"\n"
    for head in (junk, good[:cut] + junk, b"\x93NUMPY\x01\x00" + junk, b"\x93NUMPY\x02\x00" + junk):
        try:
            header, descr, shape = npy.parse_header(head)
        except npy.NpyError:
            continue
        assert descr in npy.DTYPES and 1 <= len(shape) <= 2 and header == head[:len(header)]


def test_the_identity_holds_the_root_not_the_values(work, tmp_path):
    lr = compile_file(work / "loaded.alpha").learner
    roots = {d.name: d.file.root for d in lr.data}
    text = __import__("alphac.ir.learner", fromlist=["canonical"]).canonical(lr)
    assert all(f"npy {r}" in text for r in roots.values()) and len(text) < 20000
    for name in ("x.npy", "y.npy", "sub"):
        os.symlink(work / name, tmp_path / name)
    (tmp_path / "loaded.alpha").write_text(learner())
    assert compile_file(tmp_path / "loaded.alpha").learner.identity == lr.identity
    tmp_path.joinpath("y.npy").unlink()
    y = np.load(work / "y.npy")
    y[7] += 1
    np.save(tmp_path / "y.npy", y)
    assert compile_file(tmp_path / "loaded.alpha").learner.identity != lr.identity


# -- the executables -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def roles(work):
    cwd = os.getcwd()
    os.chdir(work)
    try:
        code, out, err = alphac("build", "loaded.alpha", "--deployment", "star4", "-o", "roles")
        assert code == 0, err
    finally:
        os.chdir(cwd)
    return work / "roles"          # roles.json, coordinator, owner.0 ... owner.3


def launch(roles, *args, cwd):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return alphac("launch", roles, "--format", "hex", *args)
    finally:
        os.chdir(old)


def test_owners_read_their_rows_and_equal_the_interpreter(work, roles, tmp_path):
    lr, plans = compile_deployments(work / "loaded.alpha")
    want = interp.format_state(lr.learner, run_plan(lr.learner, plans["star4"], 2))
    code, out, err = launch(roles, "--steps", "2", "--records", tmp_path / "runs", cwd=work)
    assert code == 0 and out == want, err
    # from elsewhere, with the data in another directory: --data
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("x.npy", "y.npy", "sub"):
        os.rename(work / name, moved / name)
    try:
        code, out, err = launch(roles.resolve(), "--steps", "2", "--records", tmp_path / "runs",
                                "--data", moved, cwd=tmp_path)
        assert code == 0 and out == want, err
        code, out, err = launch(roles.resolve(), "--steps", "2", "--records", tmp_path / "runs",
                                "--deadline-ms", "1000", cwd=work)
        assert code != 0 and "refused: data-missing" in err and "give --data DIR" in err
    finally:
        for name in ("x.npy", "y.npy", "sub"):
            os.rename(moved / name, work / name)


def test_no_executable_holds_the_data_and_the_coordinator_reads_none(work, roles):
    raw = (work / "x.npy").read_bytes()
    windows = [raw[k:k + 48] for k in range(4096, len(raw) - 48, len(raw) // 7)]
    table = json.loads((roles / "roles.json").read_text())
    for r in table["roles"]:
        elf = (roles / r["file"]).read_bytes()
        assert len(elf) < 96 * 1024, (r["file"], len(elf))      # the data (x.npy) is far larger:
        # a role with run keys, periodic checkpoints and their pruning (issue 44) is 69 KB
        assert not any(w in elf for w in windows), r["file"]
        assert (b"x.npy" in elf) == r["role"].startswith("owner"), r["file"]
    owners = {r["role"]: r["samples"] for r in table["roles"] if r["samples"]}
    assert owners["owner.2"] == [35000, 37000] and table["data"][0]["path"] == "x.npy"


def test_single_process_and_a_minibatch_learner_on_both_isas(work, tmp_path):
    for name, steps, targets in (("loaded", 2, ("x86_64",)), ("batched", 12, ("x86_64", "aarch64"))):
        lr = compile_file(work / f"{name}.alpha").learner
        want = interp.format_state(lr, interp.run(lr, steps))
        for target in targets:
            exe = build(work / f"{name}.alpha", tmp_path / f"{name}.{target}", target)
            p = run_exe(exe, "--steps", steps, "--data", work, target=target)
            assert p.returncode == 0 and p.stdout == want, (name, target, p.stderr)


PARAM_LOAD = """learner init
data x = load("x.npy")
data y = load("y.npy")
{decls}
loss(i) = 0.5 * (dot(W @ x[i], v) + b - y[i])^2
update {{
  W = W - 0.001 * grad(W)
  v = v - 0.001 * grad(v)
  b = b - 0.001 * grad(b)
}}
"""


def test_a_param_initialised_by_a_whole_load_is_a_const_load_then_the_param(tmp_path):
    """`param W: f64[3, 8] = load("w.npy")` (was E0060: only `const` then `param` worked): the
    same initial state and bits as the const form, in the interpreter and on both ISAs; the
    file is an input of the build's manifest. A load inside an expression is still E0060."""
    rng = np.random.default_rng(5)
    np.save(tmp_path / "x.npy", rng.standard_normal((20, 8)))
    np.save(tmp_path / "y.npy", rng.standard_normal(20))
    np.save(tmp_path / "w.npy", rng.standard_normal((3, 8)))
    np.save(tmp_path / "v.npy", rng.integers(-3, 4, 3).astype("<i4"))
    direct = 'param W: f64[3, 8] = load("w.npy")\nparam v: f64[3] = load("v.npy")\nparam b: f64 = 0.25'
    via = ('const W0 = load("w.npy")\nconst v0 = load("v.npy")\nparam W: f64[3, 8] = W0\n'
           'param v: f64[3] = v0\nparam b: f64 = 0.25')
    (tmp_path / "direct.alpha").write_text(PARAM_LOAD.format(decls=direct))
    (tmp_path / "via.alpha").write_text(PARAM_LOAD.format(decls=via))
    a, b = (compile_file(tmp_path / f"{n}.alpha").learner for n in ("direct", "via"))
    assert [(s.name, s.shape, s.init) for s in a.states] == [(s.name, s.shape, s.init) for s in b.states]
    want = interp.format_state(b, interp.run(b, 4))
    assert interp.format_state(a, interp.run(a, 4)) == want
    for target in ("x86_64", "aarch64"):
        p = run_exe(build(tmp_path / "direct.alpha", tmp_path / f"d.{target}", target), "--steps", 4,
                    "--data", tmp_path, target=target)
        assert (p.returncode, p.stdout) == (0, want), p.stderr
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert alphac("build", "direct.alpha", "-o", "d")[0] == 0
    finally:
        os.chdir(cwd)
    assert "w.npy" in json.loads((tmp_path / "d.manifest.json").read_text())["inputs"]
    (tmp_path / "bad.alpha").write_text(PARAM_LOAD.format(decls=direct.replace('= load("w.npy")', '= 2 * load("w.npy")')))
    code, _, err = alphac("check", tmp_path / "bad.alpha")
    assert code == 1 and "error[E0060]: load(...) can only be the whole value" in err, err


LABELS = """learner labels
data x = load("x.npy")
data y = load("y.npy")
param W: f64[3, 2] = 0.1
{batch}
loss(i) {{
  let z = W @ x[i]
  logsumexp(z) - dot(onehot(y[i], 3), z)
}}
update {{
  W = W - 0.1 * grad(W)
}}

deployment two {{
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..6, owner[1] = 6..12
  target owner[1] = aarch64
}}
"""


@pytest.mark.parametrize("label, dtype", [(3, "<i8"), (-1, "<i8"), (1.5, "<f8"), (1e18, "<f8"),
                                          (7, "|u1")])
def test_a_label_outside_onehots_range_is_refused_by_name_by_every_engine(tmp_path, label, dtype):
    """A label that onehot(y[i], 3) would read as no class (PyTorch: "Target out of bounds") is
    refused `data-label`, naming its row, by the interpreter, the plan executor, the executables
    on both ISAs (full batch and minibatch: where each reads its rows, before a first step) and
    by the owner of a launched deployment that holds the row; with 0 steps nothing is read."""
    from alphac.tools.launch import launch
    from backend import build_deployment
    np.save(tmp_path / "x.npy", np.random.default_rng(3).standard_normal((12, 2)))
    y = np.array([0, 1, 2] * 4, dtype=dtype)
    y[8] = label
    np.save(tmp_path / "y.npy", y)
    why = "refused: data-label (y[8]: not a class of onehot(..., 3), a whole number from 0 to 2)\n"
    code = exit_code("data-label")
    for batch in ("", "batch 4"):
        src = tmp_path / f"labels{len(batch)}.alpha"
        src.write_text(LABELS.format(batch=batch))
        assert alphac("run", src, "--steps", 1) == (code, "", why)
        assert alphac("run", src, "--steps", 0)[0] == 0
        for target in ("x86_64", "aarch64"):
            exe = build(src, tmp_path / f"l{len(batch)}.{target}", target)
            p = run_exe(exe, "--steps", 1, "--data", tmp_path, target=target)
            assert (p.returncode, p.stdout, p.stderr) == (code, "", why), target
            assert run_exe(exe, "--steps", 0, "--data", tmp_path, target=target).returncode == 0
    assert alphac("run", src, "--deployment", "two", "--steps", 2) == (code, "", why)
    dep = build_deployment(src, "two", tmp_path / "roles")
    rec = launch(dep, steps=2, records=tmp_path / "runs", key=tmp_path / "key", data=tmp_path)
    roles = {r["role"]: r for r in rec["roles"]}
    assert (roles["owner.1"]["refused"], roles["owner.1"]["detail"]) == ("data-label", why[len("refused: data-label ("):-2])
    assert roles["owner.0"]["refused"] != "data-label" and not rec["passed"]


def test_labels_written_in_the_source_are_warned_at_compile_time_and_refused_alike(tmp_path):
    """Literal labels out of onehot's range: W0004 when checked, and the interpreter and the
    executables (both ISAs) refuse the run as they do loaded ones."""
    src = tmp_path / "lab.alpha"
    src.write_text((ROOT / "tests" / "diagnostics" / "W0004.alpha").read_text())
    code, _, err = alphac("check", src)
    assert code == 0 and "warning[W0004]: label y[2]: not a class of onehot(..., 3)" in err
    why = "refused: data-label (y[2]: not a class of onehot(..., 3), a whole number from 0 to 2)\n"
    code, out, err = alphac("run", src, "--steps", 1)               # the warning, then the refusal
    assert (code, out, err.endswith("`refused: data-label`)\n" + why)) == (exit_code("data-label"), "", True)
    for target in ("x86_64", "aarch64"):
        p = run_exe(build(src, tmp_path / f"lab.{target}", target), "--steps", 1, target=target)
        assert (p.returncode, p.stdout, p.stderr) == (exit_code("data-label"), "", why), target


@pytest.mark.parametrize("name", ["loaded", "batched"])
def test_a_changed_file_is_refused_by_name_and_nothing_is_written(name, work, tmp_path):
    exe = build(work / f"{name}.alpha", tmp_path / "exe")
    d = tmp_path / "d"
    d.mkdir()
    raw = (work / "x.npy").read_bytes()
    (d / "sub").mkdir()
    (d / "y.npy").write_bytes((work / "y.npy").read_bytes())
    (d / "sub" / "z.npy").write_bytes((work / "sub" / "z.npy").read_bytes())
    ck = tmp_path / "ck"

    def run_with(x: bytes | None):
        if x is None:
            (d / "x.npy").unlink(missing_ok=True)
        else:
            (d / "x.npy").write_bytes(x)
        return subprocess.run([exe, "--steps", "1", "--data", d, "--checkpoint", ck],
                              capture_output=True, text=True)
    assert run_with(raw).returncode == 0 and ck.is_dir()
    __import__("shutil").rmtree(ck)
    refused(run_with(None), "data-missing")
    refused(run_with(raw + b"\0"), "data-shape")
    other = raw.replace(b"(40000, 8)", b"(80000, 4)")
    assert other != raw and len(other) == len(raw)
    refused(run_with(other), "data-shape")
    for at in (len(raw) - 1, len(raw) // 2, 200):          # the last byte, a middle one, the first row
        flipped = bytearray(raw)
        flipped[at] ^= 1
        refused(run_with(bytes(flipped)), "data-hash")
    assert not ck.exists()


def test_a_fifo_a_directory_or_a_long_path_is_refused_by_name(work, tmp_path):
    exe = build(work / "loaded.alpha", tmp_path / "exe")
    d = tmp_path / "d"
    d.mkdir()
    os.symlink(work / "y.npy", d / "y.npy")
    os.symlink(work / "sub", d / "sub")
    run = lambda *a: subprocess.run([exe, "--steps", "1", *a], capture_output=True, text=True, timeout=20)
    os.mkfifo(d / "x.npy")                                 # never blocks the owner
    refused(run("--data", d), "data-missing")
    (d / "x.npy").unlink()
    (d / "x.npy").mkdir()
    assert run("--data", d).stderr.strip() in ("refused: data-missing", "refused: data-shape")
    refused(run("--data", "d" * 5000), "usage")


def test_a_flipped_byte_is_refused_by_the_owner_that_holds_it(work, roles, tmp_path):
    """A byte in owner[1]'s rows, in a chunk no other owner reads: owner[1] refuses `data-hash`,
    the others see it leave; nothing is published, no checkpoint is written."""
    raw = (work / "x.npy").read_bytes()
    f = npy.scan(str(work / "x.npy"))
    spans = {k: f.span(lo, hi) for k, (lo, hi) in enumerate([(0, 9000), (9000, 35000), (35000, 37000),
                                                              (37000, 40000)])}
    at = npy.CHUNK + 1000                                  # chunk 1: owner[1]'s alone
    assert [k for k, s in spans.items() if s[2] <= 1 < s[3]] == [1]
    d = tmp_path / "d"
    d.mkdir()
    for name in ("y.npy", "sub"):
        os.symlink(work / name, d / name)
    flipped = bytearray(raw)
    flipped[at] ^= 0x80
    (d / "x.npy").write_bytes(bytes(flipped))
    code, out, err = launch(roles.resolve(), "--steps", "1", "--records", tmp_path / "runs", "--data", d,
                            "--checkpoint", tmp_path / "ck", "--deadline-ms", "1000", cwd=tmp_path)
    assert code == exit_code("run-failed") and out == ""
    rec = json.loads(next((tmp_path / "runs").glob("*/record.json")).read_text())
    why = {r["role"]: r["refused"] for r in rec["roles"]}
    assert why["owner.1"] == "data-hash" and list(why.values()).count("data-hash") == 1, why
    assert not rec["published"] and not (tmp_path / "ck").exists()


def test_held_out_data_is_read_when_scored(work, tmp_path):
    """`alphac build --eval-data` records the held-out file; the executable reads it at
    `--evaluate` only, checked the same way."""
    os.chdir(work)
    try:
        code, out, err = alphac("build", "loaded.alpha", "--eval-data", "x=x.npy", "--eval-data", "y=y.npy",
                                "--eval-data", "z=sub/z.npy", "-o", tmp_path / "ev")
        assert code == 0, err
        p = subprocess.run([tmp_path / "ev", "--steps", "2", "--checkpoint", tmp_path / "ck"],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        p = subprocess.run([tmp_path / "ev", "--resume", tmp_path / "ck", "--steps", "0", "--evaluate"],
                           capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.startswith(f"samples {N}\nmean_loss "), p.stderr
        code, out, err = alphac("eval", "loaded.alpha", "--checkpoint", tmp_path / "ck", "--data", "x=x.npy",
                                "--data", "y=y.npy", "--data", "z=sub/z.npy", "--format", "json")
        assert code == 0 and p.stdout.split()[3] == json.loads(out)["mean_loss_hex"], (out, p.stdout)
    finally:
        os.chdir(ROOT)
    os.rename(work / "x.npy", tmp_path / "x.npy")
    try:
        p = subprocess.run([tmp_path / "ev", "--resume", tmp_path / "ck", "--steps", "0", "--evaluate"],
                           capture_output=True, text=True, cwd=work)
        refused(p, "data-missing")
    finally:
        os.rename(tmp_path / "x.npy", work / "x.npy")


# -- at size ---------------------------------------------------------------------------------------------
def big(d, rows: int) -> None:
    """bench/data.py's learner (a 4-owner star, equal shares) and its rows x 100 binary64 data,
    written in pieces: the test never holds them."""
    sys.path.insert(0, str(ROOT / "bench"))
    from data import write
    write(d, rows, 4)


def test_a_100000_by_100_deployment_builds_small(tmp_path):
    """80 MB of data: the build reads it once (hashing) and compiles none of it; each role is
    under 96 KiB (66 KB with run keys and periodic checkpoints, issue 44) and the build's peak
    memory under 200 MB (its time is bench/data.py's)."""
    big(tmp_path, 100000)
    from data import BUILD                     # bench/data.py's build, with its own peak (VmHWM)
    p = subprocess.run([sys.executable, "-c", BUILD], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    code, seconds, rss = p.stdout.split()
    assert code == "0", p.stderr
    assert int(rss) < 200 * 1024, f"build peak {int(rss) // 1024} MiB"
    raw = (tmp_path / "x.npy").open("rb").read(1 << 16)[-4096:]
    for exe in (tmp_path / "roles").iterdir():
        if exe.name not in ("roles.json", "MANIFEST.json"):
            elf = exe.read_bytes()
            assert len(elf) < 96 * 1024 and raw[:64] not in elf and raw[-64:] not in elf, exe.name


def test_an_owners_peak_memory_is_its_share(tmp_path):
    """400 MB over four owners: each owner's peak resident memory is its 100 MB share and a
    bounded buffer; the coordinator reads nothing. The data is removed afterwards."""
    rows = 500000                                          # 400 MB of x
    try:
        big(tmp_path, rows)
        os.chdir(tmp_path)
        code, out, err = alphac("build", "big.alpha", "--deployment", "star", "-o", "roles")
        assert code == 0, err
        code, out, err = alphac("launch", "roles", "--steps", "1", "--deadline-ms", "60000",
                                "--records", "runs")
        assert code == 0 and out.startswith("w[0] "), err
        rec = json.loads(next((tmp_path / "runs").glob("*/record.json")).read_text())
        share = rows // 4 * 101 * 8 // 1024                    # KiB of x and y rows
        for r in rec["roles"]:
            extra = r["peak_rss_kib"] - (share if r["role"].startswith("owner") else 0)
            assert 0 < r["peak_rss_kib"] and extra < 8 * 1024, (r["role"], r["peak_rss_kib"], share)
    finally:
        os.chdir(ROOT)
        for f in ("x.npy", "y.npy"):
            (tmp_path / f).unlink(missing_ok=True)


WIDE_ROWS = """learner wide
data x = load("x.npy")
data y = load("y.npy")
param w: f64[100] = 0.0
{batch}
loss(i) = 0.5 * (dot(w, x[i]) - y[i])^2
update {{
  w = w - 0.01 * grad(w)
}}
"""


def test_run_time_rows_are_prefetched_a_block_ahead_and_the_bits_are_the_interpreters(tmp_path):
    """A block of samples prefetches the rows of the block AHEAD bytes or more on, spread over its
    first static loop, a line at a time (docs/codegen.md): the stride times the trip count is the
    block. Where that block is not the owner's (the last blocks), the block prefetches its own
    rows, in cache: never past the owner's rows. A minibatch learner (its rows read one at a
    time) prefetches nothing, nor does one whose samples make no block beyond the first. Every
    level's state is the interpreter's, bit for bit."""
    import re
    from alphac.lower.learner import AHEAD, learner_source
    from alphac.targets import host_runs
    rng = np.random.default_rng(3)
    np.save(tmp_path / "x.npy", rng.standard_normal((203, 100)))
    np.save(tmp_path / "y.npy", rng.standard_normal(203))
    np.save(tmp_path / "x11.npy", rng.standard_normal((11, 100)))
    (tmp_path / "few.alpha").write_text(WIDE_ROWS.format(batch="").replace('"x.npy"', '"x11.npy"')
                                        .replace('"y.npy"', '"x11.npy"').replace("y[i]", "y[i, 0]"))
    few = compile_file(tmp_path / "few.alpha").learner     # 11 samples: no block AHEAD on
    assert "prefetch" not in learner_source(few, lanes=8)[0] + learner_source(few, lanes=4)[0]
    for batch in ("", "batch 64"):
        (tmp_path / "wide.alpha").write_text(WIDE_ROWS.format(batch=batch))
        lr = compile_file(tmp_path / "wide.alpha").learner
        for lanes in (2, 4, 8):
            grad = learner_source(lr, lanes=lanes)[0].split("fn learner_grad")[1].split("\n}\n")[0]
            found = re.findall(r"let (pf\d+) = row_x;\n\s*if i \+ (\d+) <= hi \{ \1 = row_x \+ (\d+); \}\n"
                               r"\s*let (j\d+) = 0;\n\s*while \4 < (\d+) \{.*?prefetch\(\1\);\n\s*\1 = \1 \+ (\d+);",
                               grad, re.S)
            if batch:
                assert "prefetch" not in grad
                continue
            block = 8 * 100 * (8 if lanes == 8 else 4)
            assert len(found) == 2, grad              # the owner's first block, then the others
            for _, owned, ahead, _, trips, stride in found:   # the block ahead, when the owner's
                assert int(ahead) % block == 0 and AHEAD <= int(ahead) < AHEAD + block
                assert int(owned) == (int(ahead) + block) // 800 and int(stride) * int(trips) == block
        want = interp.format_state(lr, interp.run(lr, 3))
        for target in ("x86_64", "x86_64-v3", "x86_64-v4", "aarch64"):
            if target != "aarch64" and not host_runs(target):
                continue
            exe = build(tmp_path / "wide.alpha", tmp_path / f"wide.{target}", target)
            p = run_exe(exe, "--steps", 3, target=target, timeout=120)
            assert p.returncode == 0 and p.stdout == want, (batch, target, p.stderr)
