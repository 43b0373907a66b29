"""The launcher under hostile input and faults (issue 22): malformed inputs and an unusable
records directory are refused by name before any role starts; a signalled launcher takes its
roles with it; a run record cannot be edited, nor its streams, without verify_record saying so."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, alphac

from alphac.refusals import REFUSALS, Refusal
from alphac.tools.launch import launch
from alphac.tools.record import record_key, seal, verify_record, write_record


def one_line(err, name: str) -> bool:
    """The CLI's refusal: `refused: NAME (what was wrong)`, one line."""
    return err.startswith(f"refused: {name} (") and err.endswith(")\n") and err.count("\n") == 1

DEP = "lsq_adam_star"
EDITED = "the record was edited: its MAC does not match"


@pytest.fixture(scope="module")
def build(example_roles):
    """The reference learners' deployments (lsq_adam's among them), built once for the run:
    DIR/roles/DEPLOYMENT/ROLE and DIR/MANIFEST.json (never changed: a test changes a copy)."""
    return example_roles.parent


def copy_of(build, tmp_path) -> Path:
    shutil.copytree(build, tmp_path / "b")
    return tmp_path / "b"


def restamp(b: Path, name: str) -> None:
    """The manifest made to list a file's new bytes: only the file's content is wrong."""
    m = json.loads((b / "MANIFEST.json").read_text())
    data = (b / "roles" / DEP / name).read_bytes()
    m["artifacts"][f"roles/{DEP}/{name}"].update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    (b / "MANIFEST.json").write_text(json.dumps(m))


def edit_table(b: Path, edit) -> None:
    path = b / "roles" / DEP / "roles.json"
    t = json.loads(path.read_text())
    edit(t)
    path.write_text(json.dumps(t))
    restamp(b, "roles.json")


def write_roles_json(text):
    def mutate(b):
        (b / "roles" / DEP / "roles.json").write_text(text)
        restamp(b, "roles.json")
    return mutate


def directory_instead_of(name):
    def mutate(b):
        path = b / "roles" / DEP / name
        path.unlink()
        path.mkdir()
    return mutate


def edit_manifest(edit):
    def mutate(b):
        m = json.loads((b / "MANIFEST.json").read_text())
        edit(m)
        (b / "MANIFEST.json").write_text(json.dumps(m))
    return mutate


MALFORMED = {
    "roles.json not JSON": write_roles_json('{"roles": ['),
    "roles.json a list": write_roles_json("[]"),
    "roles not a list": lambda b: edit_table(b, lambda t: t.update(roles=5)),
    "a role without its file": lambda b: edit_table(b, lambda t: t["roles"][1].pop("file")),
    "a role named outside the record": lambda b: edit_table(b, lambda t: t["roles"][1].update(role="../../x")),
    "a file outside the deployment": lambda b: edit_table(b, lambda t: t["roles"][1].update(file="../x")),
    "a parent that is not a role": lambda b: edit_table(b, lambda t: t["roles"][1].update(parent="nobody")),
    "the root not a role": lambda b: edit_table(b, lambda t: t.update(root="owner.9")),
    "a role twice": lambda b: edit_table(b, lambda t: t["roles"].append(t["roles"][1])),
    "MANIFEST.json not JSON": lambda b: (b / "MANIFEST.json").write_text("{"),
    "MANIFEST.json a list": lambda b: (b / "MANIFEST.json").write_text("[]"),
    "a hash that is a number": edit_manifest(lambda m: m["artifacts"][f"roles/{DEP}/owner.1"].update(sha256=5)),
    "artifacts a list": edit_manifest(lambda m: m.update(artifacts=[])),
    "a role file that is a directory": directory_instead_of("owner.1"),
    "roles.json a directory": directory_instead_of("roles.json"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_inputs_are_refused_before_anything_starts(build, tmp_path, case):
    b = copy_of(build, tmp_path)
    MALFORMED[case](b)
    code, out, err = alphac("launch", b / "roles" / DEP, "--steps", 1, "--records", tmp_path / "runs",
                            "--checkpoint", tmp_path / "ck")
    assert (code, out, one_line(err, "launch-input")) == (REFUSALS["launch-input"][0], "", True)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ck").exists()


def test_an_unusable_records_directory_is_refused_before_anything_starts(build, tmp_path):
    (tmp_path / "file").write_text("")
    code, out, err = alphac("launch", build / "roles" / DEP, "--steps", 1, "--records",
                            tmp_path / "file" / "runs", "--checkpoint", tmp_path / "ck")
    assert (code, one_line(err, "records-dir")) == (REFUSALS["records-dir"][0], True)
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("content,mode", [(os.urandom(32), 0o644), (b"short", 0o600)],
                         ids=["others-can-read", "short"])
def test_a_key_others_can_read_or_too_short_is_refused(build, tmp_path, content, mode):
    key = tmp_path / "key"
    key.write_bytes(content)
    key.chmod(mode)
    code, out, err = alphac("launch", build / "roles" / DEP, "--records", tmp_path / "runs",
                            "--record-key", key, "--checkpoint", tmp_path / "ck")
    assert (code, one_line(err, "record-key")) == (REFUSALS["record-key"][0], True)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ck").exists()


def test_a_missing_key_is_made_private_and_kept(tmp_path):
    path = tmp_path / "cfg" / "record-key"
    key = record_key(path)
    assert len(key) == 32 and path.stat().st_mode & 0o777 == 0o600
    assert record_key(path) == key and record_key(path, create=False) == key


# -- a signalled launcher --------------------------------------------------------------------------
def role_pids(dep: Path) -> list[int]:
    """The processes running one of `dep`'s executables (directly, or under qemu)."""
    inside = str(dep.resolve()).encode() + b"/"
    pids = []
    for p in Path("/proc").iterdir():
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0") if p.name.isdigit() else []
        except OSError:
            continue
        if any(a.startswith(inside) for a in argv[:2]):
            pids.append(int(p.name))
    return pids


def until(cond, seconds):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        time.sleep(0.05)
    return cond()


def default_signals():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signalled_launcher_leaves_no_role_running(build, tmp_path, sig):
    dep = build / "roles" / DEP
    p = subprocess.Popen([sys.executable, "-m", "alphac", "launch", str(dep), "--steps", str(10**12),
                          "--deadline-ms", "2000", "--records", str(tmp_path / "runs")],
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        assert until(lambda: len(role_pids(dep)) == 5, 30), "the roles did not start"
        p.send_signal(sig)
        out, err = p.communicate(timeout=20)
        assert until(lambda: role_pids(dep) == [], 5), "roles outlived their launcher"
    finally:
        for pid in role_pids(dep):
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
    if sig != signal.SIGKILL:
        assert (p.returncode, out, one_line(err, "launch-interrupted")) == \
            (REFUSALS["launch-interrupted"][0], "", True)
        path = tmp_path / "runs" / f"{DEP}-0001" / "record.json"
        rec = json.loads(path.read_text())
        assert rec["interrupted"] == sig.name and not rec["passed"] and rec["published"] == ""
        assert all(r["signal"] == 9 for r in rec["roles"]), [(r["role"], r["exit"], r["detail"]) for r in rec["roles"]]
        assert EDITED not in verify_record(path) and "the record is not a pass" in verify_record(path)


def test_an_interrupt_while_the_roles_start_loses_none_of_them(monkeypatch):
    """The race a fresh clone's CI hit: SIGINT while a Popen waited for its child's exec lost that
    role's process object (killed with the group, but never reaped nor recorded: signal None)."""
    from alphac.tools import supervise
    real, started = subprocess.Popen, []

    def popen(*a, **k):
        started.append(real(*a, **k))
        if len(started) == 2:                       # the handler runs here, inside the start loop
            os.kill(os.getpid(), signal.SIGINT)
        return started[-1]

    monkeypatch.setattr(supervise.subprocess, "Popen", popen)
    runs = [supervise.RoleRun(f"owner.{i}", "x86_64", "", "", ["sleep", "60"]) for i in range(4)]
    # a pytest started in the background by a shell (`make test`'s second shard) inherits SIGINT
    # ignored, which the launcher keeps ignored (nohup): the default here, as a terminal gives
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert supervise.run_roles(runs, 2000, None) == "SIGINT"
    finally:
        signal.signal(signal.SIGINT, before)
    assert [(r.role, r.exit) for r in runs] == [(f"owner.{i}", -signal.SIGKILL) for i in range(4)]
    assert all(p.returncode == -signal.SIGKILL for p in started) and len(started) == 4


# -- run records that cannot be edited -------------------------------------------------------------
@pytest.fixture(scope="module")
def records(build, tmp_path_factory):
    """A pass and a failed run (owner.0 killed), each a record directory."""
    runs = tmp_path_factory.mktemp("records")
    good = launch(build / "roles" / DEP, steps=3, records=runs)
    bad = launch(build / "roles" / DEP, steps=10**9, deadline_ms=2000, records=runs, kill=("owner.0", 0.3))
    assert good["passed"] and not bad["passed"]
    return {"pass": Path(good["path"]).parent, "fail": Path(bad["path"]).parent}


def v1_seal(role, lines):
    """The old unkeyed chain (record format 1): anyone could recompute it."""
    h = hashlib.sha256(b"alphac-events-v1|" + role.encode()).digest()
    for line in lines:
        h = hashlib.sha256(h + b"|" + line.encode()).digest()
    return h.hex()


def edit_stream(rdir, rec):
    log = rdir / "events" / "owner.2.log"
    log.write_text(log.read_text().replace("step 2\n", "step 9\n"))
    lines = log.read_text().splitlines()
    s = next(r for r in rec["roles"] if r["role"] == "owner.2")["stream"]
    s.update(count=len(lines), seal=v1_seal("owner.2", lines))


def owner(n):
    return lambda rec: next(r for r in rec["roles"] if r["role"] == f"owner.{n}")


def turn_into_a_pass(rdir, rec):
    for r in rec["roles"]:
        r.update(exit=0, signal=None, refused=None)
    rec.update(passed=True, published="w[0] 3fc31b83dbd2b507\n")


EDITS = {   # name -> (the record edited, the edit)
    "an exit": ("pass", lambda d, rec: owner(1)(rec).update(exit=72)),
    "passed": ("pass", lambda d, rec: rec.update(passed=False)),
    "passed of a failed run": ("fail", lambda d, rec: rec.update(passed=True)),
    "a failed run turned into a pass": ("fail", turn_into_a_pass),
    "the published state": ("pass", lambda d, rec: rec.update(published=rec["published"].replace("3", "4", 1))),
    "a hash": ("pass", lambda d, rec: owner(2)(rec).update(sha256="0" * 64)),
    "a stream line, its unkeyed seal recomputed": ("pass", edit_stream),
    "the nonce": ("pass", lambda d, rec: rec["auth"].update(nonce="00" * 16)),
}


def edited_copy(records, which, edit, tmp_path) -> Path:
    rdir = tmp_path / "rec"
    shutil.copytree(records[which], rdir)
    rec = json.loads((rdir / "record.json").read_text())
    edit(rdir, rec)
    (rdir / "record.json").write_text(json.dumps(rec))
    return rdir / "record.json"


def test_an_untouched_record_verifies(records):
    assert verify_record(records["pass"] / "record.json") == []
    assert "the record is not a pass" in verify_record(records["fail"] / "record.json")
    assert EDITED not in verify_record(records["fail"] / "record.json")


@pytest.mark.parametrize("case", sorted(EDITS))
def test_an_edited_record_is_detected(records, tmp_path, case):
    which, edit = EDITS[case]
    path = edited_copy(records, which, edit, tmp_path)
    problems = verify_record(path)
    assert EDITED in problems, problems
    code, out, err = alphac("verify-record", path)
    assert code == 3 and f"verify-record: {EDITED}\n" in err


def test_an_edited_stream_is_detected(records, tmp_path):
    path = edited_copy(records, "pass", lambda d, rec: None, tmp_path)
    log = path.parent / "events" / "owner.2.log"
    log.write_bytes(log.read_bytes().replace(b"step 2 ", b"step 9 "))
    assert verify_record(path) == ["owner.2: stream does not match its seal"]
    log.write_bytes(log.read_bytes().replace(b"step 9 ", b"step 2 ").rstrip(b"\n"))
    assert verify_record(path) == ["owner.2: stream does not match its seal"]


@pytest.mark.parametrize("edit", ["changed", "dropped", "reordered", "unauthenticated"])
def test_a_stream_changed_before_the_launcher_sealed_it_is_detected(records, tmp_path, edit):
    """Each role authenticates its events as it writes them: a stream changed during the run
    (before the launcher's seal, which is then recomputed with the launcher's own key) does not
    verify."""
    path = edited_copy(records, "pass", lambda d, rec: None, tmp_path)
    log = path.parent / "events" / "owner.2.log"
    lines = log.read_bytes().splitlines(keepends=True)
    if edit == "changed":
        k = next(k for k, line in enumerate(lines) if line.startswith(b"step 2 "))
        lines[k] = lines[k].replace(b"step 2 ", b"step 9 ")
    elif edit == "dropped":
        del lines[2]
    elif edit == "reordered":
        lines[2], lines[3] = lines[3], lines[2]
    else:
        lines[2] = lines[2].rpartition(b" ")[0] + b"\n"
    log.write_bytes(b"".join(lines))
    rec = json.loads(path.read_text())
    rec.pop("mac")
    write_record(path.parent, seal(rec, path.parent, record_key(), rec["auth"]["nonce"]))
    assert verify_record(path) == ["owner.2: its events are not the ones it authenticated as it ran"]


def test_a_record_sealed_or_checked_with_another_key_is_detected(records, tmp_path):
    other = tmp_path / "other-key"
    other_key = record_key(other)
    path = edited_copy(records, "fail", lambda d, rec: None, tmp_path)
    assert verify_record(path, key=other) == ["the record was authenticated with another key"]
    rec = json.loads(path.read_text())
    turn_into_a_pass(path.parent, rec)
    write_record(path.parent, seal(rec, path.parent, other_key))
    assert verify_record(path) == ["the record was authenticated with another key"]


SELF_CONTRADICTIONS = {   # sealed with the right key, yet not what the rest of the record says
    "passed": ("pass", lambda d, rec: rec.update(passed=False), "`passed` does not follow"),
    "a failed run said to pass": ("fail", lambda d, rec: rec.update(passed=True), "`passed` does not follow"),
    "exit 0 without `done`": ("fail", lambda d, rec: owner(0)(rec).update(exit=0, signal=None),
                              "owner.0: exited 0 but its stream does not end with `done`"),
    "a hash not the manifest's": ("pass", lambda d, rec: owner(2)(rec).update(sha256="0" * 64),
                                  "owner.2: its sha256 is not the build manifest's"),
    "a signal not the exit's": ("fail", lambda d, rec: owner(0)(rec).update(signal=None),
                                "owner.0: its signal is not its exit's"),
}


@pytest.mark.parametrize("case", sorted(SELF_CONTRADICTIONS))
def test_what_follows_from_the_streams_and_the_build_is_recomputed(records, tmp_path, case):
    which, edit, problem = SELF_CONTRADICTIONS[case]

    def resealed(d, rec):
        edit(d, rec)
        seal(rec, d, record_key(), rec["auth"]["nonce"])     # the roles' events keys kept
    problems = verify_record(edited_copy(records, which, resealed, tmp_path))
    assert EDITED not in problems and any(p.startswith(problem) for p in problems), problems


MALFORMED_RECORDS = {
    "not JSON": lambda rec: "{",
    "format 1": lambda rec: json.dumps(dict(rec, format=1)),
    "roles not a list": lambda rec: json.dumps(dict(rec, roles={})),
    "no MAC": lambda rec: json.dumps({k: v for k, v in rec.items() if k != "mac"}),
    "a nonce that is not hex": lambda rec: json.dumps(dict(rec, auth=dict(rec["auth"], nonce="\ud800" * 32))),
    "a kind that is a list": lambda rec: json.dumps(dict(rec, kind=[])),
    "a seal that is not hex": lambda rec: json.dumps(dict(rec, roles=[dict(rec["roles"][0], stream=dict(
        rec["roles"][0]["stream"], seal="\u00e9" * 64))])),
    "a stream outside the record": lambda rec: json.dumps(dict(rec, roles=[dict(rec["roles"][0], stream={
        "file": "../../../etc/passwd", "count": 1, "seal": "0" * 64})])),
    "an exit that is a string": lambda rec: json.dumps(dict(rec, roles=[dict(rec["roles"][0], exit="0")])),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_RECORDS))
def test_a_malformed_record_is_refused_by_name(records, tmp_path, case):
    path = tmp_path / "record.json"
    path.write_text(MALFORMED_RECORDS[case](json.loads((records["pass"] / "record.json").read_text())))
    with pytest.raises(Refusal) as e:
        verify_record(path)
    assert e.value.name == "record-malformed"
    code, out, err = alphac("verify-record", path)
    assert (code, out, one_line(err, "record-malformed")) == (REFUSALS["record-malformed"][0], "", True)


@pytest.mark.parametrize("target,lacks,said", [
    ("x86_64-v4", "x86_64-v4", "AVX-512 (qemu does not emulate it); build them for x86_64-v3 or x86_64)"),
    ("x86_64-v4+sm_90", "x86_64-v4", "AVX-512 (a GPU owner is not emulated); build them for x86_64-v3+sm_90 or "
                                     "x86_64+sm_90)"),
    ("x86_64+sm_90", "x86_64", "x86_64+sm_90 roles need an x86_64 host: a GPU owner is not emulated)")])
def test_x86_64_v4_roles_on_a_cpu_without_avx512_are_refused(build, tmp_path, monkeypatch, target, lacks, said):
    """qemu emulates no AVX-512 (and a GPU owner's host part is never emulated): on a host
    without it, a deployment with an x86_64-v4 role, or an x86_64-v4+sm_90 GPU owner (or any GPU
    owner on a host of another ISA), is refused `launch-tool` before any role starts (never run
    into a `cpu-level` refusal)."""
    import alphac.tools.launch as launcher
    real = launcher.host_runs
    monkeypatch.setattr(launcher, "host_runs", lambda t: t != lacks and real(t))
    runs = tmp_path / "runs"
    with pytest.raises(Refusal) as e:
        launch(build / "roles" / DEP, steps=3, records=runs, targets={"owner.1": target})
    assert e.value.name == "launch-tool" and str(e.value).endswith(said)
    assert not runs.exists() or not any(runs.iterdir())
