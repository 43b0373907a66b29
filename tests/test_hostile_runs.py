"""Hostile runs (issue 45): a learner that diverges (a learning rate too large for least squares,
a real user's mistake) through launch, plot, trace and ckpt export; a full --records disk; the
smaller defects of the issue (step counts, names, k8s data entries, big records); and the CLI's
exit code for its own defects, apart from every answer."""
import contextlib
import hashlib
import json
import math
import struct
from pathlib import Path

import pytest

from conftest import alphac

DIVERGE = """learner diverge
data x = [1.0, 2.0, 3.0, 4.0]
data y = [2.0, 4.0, 6.0, 8.0]
param a: f64 = 0.0
loss(i) = 0.5 * (a * x[i] - y[i])^2
update {
  a = a - 1000.0 * grad(a)
}
deployment diverge_star {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..4
  strategy zero2
}
"""


@pytest.fixture(scope="module")
def diverging(tmp_path_factory):
    """The diverging learner's deployment, built: its loss is inf from step 41 (a * x overflows
    squared), nan from step 82 (inf - inf), and its state non-finite soon after."""
    d = tmp_path_factory.mktemp("diverge")
    (d / "diverge.alpha").write_text(DIVERGE)
    with contextlib.chdir(d):                      # a manifest names its inputs relative to it
        rc, _, err = alphac("build", "diverge.alpha", "--deployment", "diverge_star", "-o", "dep")
    assert rc == 0, err
    return d


def no_constants(text: str):
    """JSON as the standard has it: Infinity, -Infinity and NaN are not JSON."""
    def refuse(word):
        raise ValueError(f"{word} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_a_diverging_run_through_launch_plot_and_trace(diverging, tmp_path):
    d, runs = diverging, tmp_path / "runs"
    rc, out, err = alphac("launch", d / "dep", "--steps", 60, "--records", runs)
    assert rc == 0 and out.startswith("a "), err            # the state is finite: published
    rc, out, err = alphac("launch", d / "dep", "--steps", 120, "--records", runs)
    assert rc == 102 and out == "" and "coordinator: refused: non-finite-state" in err, err
    rec = json.loads((runs / "diverge_star-0002" / "record.json").read_text())
    kinds = [e["decimal"] for e in rec["loss"]]
    assert len(kinds) == 120 and kinds[40:42] == ["inf", "inf"] and kinds[-1] == "nan"
    first_inf = 1 + kinds.index("inf")
    first_nan = 1 + kinds.index("nan")
    # plot: the text chart and the SVG, the non-finite means drawn and named
    rc, out, err = alphac("plot", runs / "diverge_star-0002" / "record.json", "-o", tmp_path / "l.svg")
    assert rc == 0, err
    rows = {line.split("|")[0].strip(): line.split("|")[1] for line in out.splitlines() if "|" in line}
    assert "*" in rows["inf"] and "*" in rows["nan"] and "-inf" not in rows
    assert rows["inf"].index("*") < rows["nan"].index("*")   # inf came first, then nan
    assert f"{kinds.count('inf')} steps with mean inf (the first at step {first_inf})" in out
    assert f"{kinds.count('nan')} steps with mean nan (the first at step {first_nan})" in out
    assert "last nan (step 120), lowest 15.0 (step 1)" in out
    import xml.etree.ElementTree as ET
    svg = ET.parse(tmp_path / "l.svg").getroot()
    titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert f"step {first_inf}: inf" in titles and f"step 120: nan" in titles
    assert len(titles) == kinds.count("inf") + kinds.count("nan")
    # trace: valid JSON, every step's mean a counter sample or a named instant
    for n in ("0001", "0002"):
        rc, _, err = alphac("trace", runs / f"diverge_star-{n}" / "record.json", "-o", tmp_path / "t.json")
        assert rc == 0, err
        events = no_constants((tmp_path / "t.json").read_text())["traceEvents"]
        counters = [e for e in events if e["ph"] == "C"]
        instants = [e for e in events if e["name"].startswith("mean loss ")]
        assert all(math.isfinite(e["args"]["mean"]) for e in counters)
        assert {e["args"]["mean"] for e in instants} <= {"inf", "nan"}
        assert [e["args"]["bits"] for e in instants] == \
            [x["mean"] for x in json.loads((runs / f"diverge_star-{n}" / "record.json").read_text())["loss"]
             if x["decimal"] in ("inf", "nan")]
        assert len(counters) + len(instants) == (60 if n == "0001" else 120)


def test_plot_draws_only_non_finite_and_huge_means(tmp_path):
    """Means of opposite signs near the largest double (their difference overflows), and records
    whose every mean is inf, -inf or nan: charted without error, labelled."""
    from alphac.tools.plot import chart, svg
    for points in ([(1, 1.7e308), (2, -1.7e308), (3, 0.0)], [(1, math.inf)], [(1, -math.inf), (2, math.nan)],
                   [(1, math.nan)] * 3):
        rows = [line.split("|")[0].strip() for line in chart([("", points)]).splitlines() if "|" in line]
        for word in ("inf", "-inf", "nan"):
            assert (word in rows) == any(str(v) == word for _, v in points), (points, rows)
        assert svg([("", points)]).startswith("<svg") and svg([("", points)], log=True).startswith("<svg")
    assert "1.7e+308 |" in chart([("", [(1, 1.7e308), (2, -1.7e308)])])


def _edit_first_record(ck: Path, **fields) -> None:
    """The root manifest's first record with other fields (alphac.formats' layout), the checksums
    repaired: what anyone can do to a checkpoint."""
    from alphac.formats import CKPT_HEADER, CKPT_RECORD
    data = bytearray((ck / "MANIFEST").read_bytes())
    for name, value in fields.items():
        f = CKPT_RECORD.field(name)
        data[CKPT_HEADER.size + f.offset:CKPT_HEADER.size + f.offset + f.size] = value.ljust(f.size, b"\0")
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    (ck / "MANIFEST").write_bytes(bytes(data))


def _first_shard_value(ck: Path, value: float) -> None:
    from alphac.formats import CKPT_HEADER, CKPT_RECORD
    data = (ck / "MANIFEST").read_bytes()
    r = CKPT_RECORD.unpack(data, CKPT_HEADER.size)
    shard = ck / r["path"].rstrip(b"\0").decode()
    raw = bytearray(shard.read_bytes())
    raw[-8:] = struct.pack("<d", value)
    shard.write_bytes(bytes(raw))
    _edit_first_record(ck, sha256=hashlib.sha256(bytes(raw)).digest())


@pytest.mark.parametrize("mutant", ["nan", "inf", "state-not-utf8"])
def test_ckpt_export_refuses_what_resume_and_eval_refuse(mutant, diverging, tmp_path):
    """The diverging learner's checkpoint after 30 steps (finite, if large), its shard edited to
    hold a NaN or an infinity, or its state named with bytes that are not UTF-8, checksums
    repaired: the executable's resume, `alphac eval` and `alphac ckpt export` refuse it by the
    same name, and export writes nothing."""
    import shutil
    import subprocess
    d = diverging
    with contextlib.chdir(d):
        rc, _, err = alphac("build", "diverge.alpha", "-o", tmp_path / "exe")
    assert rc == 0, err
    ck = tmp_path / "ck"
    assert subprocess.run([tmp_path / "exe", "--steps", "30", "--checkpoint", ck],
                          capture_output=True).returncode == 0
    assert alphac("ckpt", "export", ck, "-o", tmp_path / "ok.npz")[0] == 0
    bad = tmp_path / "bad"
    shutil.copytree(ck, bad)
    if mutant == "state-not-utf8":
        _edit_first_record(bad, state=b"a\xff")
        name = "shard-missing"
    else:
        _first_shard_value(bad, float(mutant))
        name = "shard-non-finite"
    r = subprocess.run([tmp_path / "exe", "--steps", "1", "--resume", bad], capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (REFUSAL[name], f"refused: {name}\n")
    rc, out, err = alphac("eval", d / "diverge.alpha", "--checkpoint", bad)
    assert (rc, out) == (REFUSAL[name], "") and err.startswith(f"refused: {name} ("), err
    for fmt in ("npz", "safetensors"):
        rc, out, err = alphac("ckpt", "export", bad, "-o", tmp_path / f"m.{fmt}", "--learner", d / "diverge.alpha")
        assert (rc, out) == (REFUSAL[name], "") and err.startswith(f"refused: {name} ("), err
        assert err.count("\n") == 1 and not (tmp_path / f"m.{fmt}").exists()
    rc, _, err = alphac("ckpt", "export", bad, "-o", tmp_path / "m.npz")
    assert rc == REFUSAL[name] and err.startswith(f"refused: {name} ("), err
    rc, out, err = alphac("ckpt", "show", bad, "--json")      # shown as what it is, in JSON
    assert rc == 0, err
    held = no_constants(out)["state"]
    assert list(held) == (["a\\xff"] if name == "shard-missing" else ["a"])
    assert held[list(held)[0]]["values"] == ([mutant] if name != "shard-missing" else held[list(held)[0]]["values"])


from alphac.refusals import REFUSALS                    # noqa: E402
REFUSAL = {name: code for name, (code, _) in REFUSALS.items()}


# -- the CLI's own defects ---------------------------------------------------------------------------
def test_a_defect_has_an_exit_code_of_its_own(monkeypatch, tmp_path):
    """An internal error is never 3, which `verify-record` answers for a record that is not an
    authentic pass; the table of codes is in the help and in docs/refusals.md."""
    import alphac.cli as cli
    from alphac.refusals import TOOL_EXITS, REFUSALS
    from alphac.tools.docs import refusals_md
    codes = [c for c, _ in TOOL_EXITS.values()]
    assert len(set(codes)) == len(codes) and not set(codes) & {c for c, _ in REFUSALS.values()}

    def defect(args):
        raise KeyError("a defect")
    monkeypatch.setitem(cli.COMMANDS, "explain", defect)
    rc, out, err = alphac("explain", "E0001")
    assert rc == TOOL_EXITS["internal-error"][0] == 4 and rc != TOOL_EXITS["differs"][0]
    assert err == "alphac: internal error: KeyError: 'a defect' (please report this input)\n"
    rc, out, _ = alphac("--help")
    assert rc == 0 and "exit codes:" in out
    for code, when in TOOL_EXITS.values():
        assert f"  {code:<7} {when.split()[0]}" in out
    docs = Path(__file__).resolve().parent.parent / "docs" / "refusals.md"
    assert docs.read_text() == refusals_md(), "run `python -m alphac.tools.docs`"
    assert "| 4 | alphac has a defect" in docs.read_text()


# -- the smaller ones --------------------------------------------------------------------------------
def test_a_count_of_16_digits_is_refused_as_the_executables_refuse_it(diverging, tmp_path):
    """--steps (and every count an executable takes) is 1 to DECIMAL_DIGITS decimal digits, on
    both sides: 15 are taken (leading zeros count, as the runtime counts them), 16 refused."""
    import subprocess
    from alphac.refusals import DECIMAL_DIGITS
    d = diverging
    with contextlib.chdir(d):
        assert alphac("build", "diverge.alpha", "-o", tmp_path / "exe")[0] == 0
    ok, over = "2".rjust(DECIMAL_DIGITS, "0"), "2".rjust(DECIMAL_DIGITS + 1, "0")
    run = lambda n: subprocess.run([tmp_path / "exe", "--steps", n], capture_output=True, text=True)
    assert run(ok).returncode == 0 and run(ok).stdout == run("2").stdout
    assert (run(over).returncode, run(over).stderr.splitlines()[-1]) == (
        REFUSAL["usage"], "refused: usage (--steps: not a decimal whole number of at most 15 digits)")
    rc, out, err = alphac("run", d / "diverge.alpha", "--steps", ok)
    assert rc == 0 and out == run("2").stdout, err
    for argv in (["run", d / "diverge.alpha", "--steps", over],
                 ["run", d / "diverge.alpha", "--steps", "9" * 40],
                 ["launch", d / "dep", "--steps", over], ["launch", d / "dep", "--deadline-ms", over],
                 ["slurm", d / "dep", "--steps", over], ["k8s", d / "dep", "--steps", over],
                 ["run", d / "diverge.alpha", "--steps", "1_000"], ["run", d / "diverge.alpha", "--steps", "+5"],
                 ["run", d / "diverge.alpha", "--steps", "٣"]):
        rc, out, err = alphac(*argv)
        assert rc == 2 and out == "" and "Traceback" not in err, (argv, err)
    assert f"more than {DECIMAL_DIGITS} digits" in alphac("run", d / "diverge.alpha", "--steps", over)[2]


def test_epochs_that_make_too_many_steps_are_a_usage_error(tmp_path):
    """E epochs of B batches: a product past DECIMAL_DIGITS digits is refused at once (the
    interpreter would run until killed; the executables refuse it)."""
    from conftest import example
    rc, out, err = alphac("run", example("logistic"), "--epochs", "9" * 15)
    assert rc == 2 and out == "" and "has more than 15 digits" in err, err


def _deployment_with_data(d: Path, data) -> Path:
    """A built-looking deployment (roles.json, executables, MANIFEST.json, every hash right)
    whose roles.json lists `data` as the files the owners load: what a rehashed manifest lets
    anyone hand `alphac k8s`, `launch` and `slurm`."""
    from alphac import artifacts, manifest
    roles = [{"role": r, "file": r, "rank": k, "parent": None if k == 0 else "coordinator",
              "listens": k == 0, "target": "x86_64", "samples": None}
             for k, r in enumerate(["coordinator", "owner.0"])]
    table = {"format": 1, "deployment": "d", "learner": "t", "identity": {}, "root": "coordinator",
             "roles": roles, "batches": 1, "data": data}
    raw = (json.dumps(table) + "\n").encode()
    artifacts.write_file(d / "dep" / "roles.json", raw, 0o644)
    entries = {"dep/roles.json": manifest.artifact_entry(raw, {"kind": "test"}, [])}
    for r in ("coordinator", "owner.0"):
        artifacts.write_file(d / "dep" / r, b"\x7fELF" + r.encode(), 0o755)
        entries[f"dep/{r}"] = manifest.artifact_entry(b"\x7fELF" + r.encode(), {"kind": "test"}, [])
    manifest.write(d / "MANIFEST.json", manifest.new(entries, [], {}))
    return d / "dep"


@pytest.mark.parametrize("data", ["x", [1], [{}], [{"load": 1, "path": "a", "root": "r"}],
                                  [{"load": "a.npy", "path": "a\0b", "root": "r"}], {"a": 1}],
                         ids=["text", "number", "empty", "load-number", "nul", "object"])
def test_a_malformed_data_entry_is_refused_by_name(data, tmp_path):
    dep = _deployment_with_data(tmp_path, data)
    for argv in (["k8s", dep, "-o", tmp_path / "k8s"], ["launch", dep, "--records", tmp_path / "runs"],
                 ["slurm", dep, "--records", tmp_path / "runs"]):
        rc, out, err = alphac(*argv)
        assert (rc, out) == (REFUSAL["launch-input"], "") and \
            err.startswith("refused: launch-input (roles.json: `data` is not a list"), (argv, err)
    assert not (tmp_path / "k8s").exists() and not (tmp_path / "runs").exists()


def test_a_role_that_connects_twice_is_refused_as_the_docs_say(diverging):
    """docs/refusals.md names the refusal the runtime gives when a role connects twice to its
    parent: the coordinator refuses rank-duplicate, and that row (and no other) says so."""
    import socket
    import subprocess
    from alphac.tools.docs import refusals_md
    d = diverging / "dep"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = ["--steps", "1", "--deadline-ms", "3000"]
    coord = subprocess.Popen([d / "coordinator", *common, "--listen", f"127.0.0.1:{port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owners = [subprocess.Popen([d / "owner.0", *common, "--parent", f"127.0.0.1:{port}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    _, err = coord.communicate(timeout=30)
    for p in owners:
        p.communicate(timeout=30)
    assert (coord.returncode, err) == (REFUSAL["rank-duplicate"], "refused: rank-duplicate\n")
    rows = [line for line in refusals_md().splitlines() if "connects twice" in line]
    assert len(rows) == 1 and rows[0].startswith("| `rank-duplicate` |"), rows


# -- a full disk under --records ---------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A real file system of 256 KiB (tmpfs; CI runs as root), unmounted after the test."""
    import os
    import subprocess
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the full-disk tests need root in CI (mount -t tmpfs)")
        pytest.skip("needs root (mount -t tmpfs)")
    d = tmp_path / "disk"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", d], check=True)
    yield d
    subprocess.run(["umount", d], check=True)


def fill(d: Path) -> None:
    """Write into d until the file system is full."""
    import os
    n = 0
    while True:
        try:
            with open(d / f"fill{n}", "wb") as fh:
                fh.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == 28                       # ENOSPC
            return
        n += 1


def test_a_full_records_disk_refuses_the_run_before_it_starts(diverging, small_disk, tmp_path):
    fill(small_disk)
    import os
    os.unlink(small_disk / "fill0")                        # 4 KiB free: not a record's room
    (small_disk / "runs").mkdir()
    rc, out, err = alphac("launch", diverging / "dep", "--steps", 60, "--records", small_disk / "runs",
                          "--checkpoint", tmp_path / "ck")
    assert (rc, out) == (REFUSAL["records-dir"], "") and err.startswith("refused: records-dir (") \
        and "nothing was started" in err, err
    assert list((small_disk / "runs").iterdir()) == [] and not (tmp_path / "ck").exists()


def test_a_full_records_disk_refuses_a_slurm_script_before_it_is_written(diverging, small_disk, tmp_path):
    """`alphac slurm` holds the room of the record `slurm-record` will write, as launch does: on a
    full disk it refuses records-dir and leaves no run directory and no script."""
    fill(small_disk)
    import os
    os.unlink(small_disk / "fill0")
    (small_disk / "runs").mkdir()
    rc, out, err = alphac("slurm", diverging / "dep", "--steps", 60, "--records", small_disk / "runs",
                          "-o", tmp_path / "job.sh")
    assert (rc, out) == (REFUSAL["records-dir"], "") and err.startswith("refused: records-dir ("), err
    assert list((small_disk / "runs").iterdir()) == [] and not (tmp_path / "job.sh").exists()
    for f in small_disk.glob("fill*"):
        f.unlink()
    rc, out, err = alphac("slurm", diverging / "dep", "--steps", 60, "--records", small_disk / "runs",
                          "-o", tmp_path / "job.sh")
    assert rc == 0, err
    (run,) = (small_disk / "runs").iterdir()
    assert (run / "record.json.tmp").stat().st_size > 60 * 200      # the record's room, held


@pytest.mark.parametrize("reserved", [True, False])
def test_a_disk_that_fills_during_the_run_keeps_the_record_or_says_so(diverging, small_disk, tmp_path,
                                                                     monkeypatch, reserved):
    """Another writer fills the disk while the roles run (after they ran, here: deterministic).
    The space reserved before the start holds the record; a record larger than its reservation
    (the reservation shrunk here to nothing) is refused record-write, naming the checkpoint."""
    import alphac.tools.launch as launch
    real = launch.run_roles

    def run_then_fill(*a, **k):
        out = real(*a, **k)
        fill(small_disk)
        return out
    monkeypatch.setattr(launch, "run_roles", run_then_fill)
    if not reserved:
        import alphac.tools.record as record
        for name in ("RECORD_FIXED", "RECORD_PER_ROLE", "RECORD_PER_STEP", "PUBLISHED_RESERVE"):
            monkeypatch.setattr(record, name, 0)
    rc, out, err = alphac("launch", diverging / "dep", "--steps", 60, "--records", small_disk / "runs",
                          "--checkpoint", tmp_path / "ck")
    assert (tmp_path / "ck" / "MANIFEST").is_file()        # published, on another disk
    if reserved:
        assert rc == 0 and out.startswith("a "), err
        from alphac.tools.record import verify_record
        assert verify_record(small_disk / "runs" / "diverge_star-0001" / "record.json") == []
    else:
        assert (rc, out) == (REFUSAL["record-write"], "") and err.count("\n") == 1, err
        assert err.startswith("refused: record-write (") and "No space left on device" in err
        assert f"its checkpoint was published in {tmp_path / 'ck'}" in err and "the run passed" in err
