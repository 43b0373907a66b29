"""The files the CLI reads, under hostile input (issue 45): a FIFO never blocks, /dev/zero and a
huge sparse file never exhaust memory, truncated or deeply nested JSON and a key given twice
(a forged `"passed"` before the real one) are refused by name, never a RecursionError or an
internal error; a record over 64 MiB is still plotted; `verify-record` reads nothing a record
names before its MAC matches; `trace` refuses a malformed event line by name. Every reader goes
through alphac.files (read_regular, read_json: its LIMITS and MAX_DEPTH)."""
import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, alphac

from alphac.tools.record import record_key, seal, verify_record, write_record

EDITED = "the record was edited: its MAC does not match"
MAC = "0" * 64


def crafted(rdir: Path, lines=("connected @1", "step 0 comm 5 @2", "done @3"), **fields) -> Path:
    """A sealed record of one role, `root`, whose stream holds `lines` (each with a dummy MAC):
    enough for plot and trace, and for verify-record to check its MAC."""
    (rdir / "events").mkdir(parents=True)
    (rdir / "events" / "root.log").write_text("".join(f"{l} {MAC}\n" for l in lines))
    rec = {"format": 2, "kind": "launch", "deployment": "d", "published": "w 1\n", "passed": True,
           "roles": [{"role": "root", "exit": 0, "stream": {"file": "events/root.log"}}],
           "loss": [{"step": 1, "mean": "3ff0000000000000"}, {"step": 2, "mean": "3fe0000000000000"}],
           **fields}
    write_record(rdir, seal(rec, rdir, record_key()))
    return rdir / "record.json"


def cli(*args, timeout=60):
    """The CLI in a child process (a read that blocks or exhausts memory cannot take the test
    run with it): in 3 GiB of address space, killed after `timeout`."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "alphac", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=env, preexec_fn=limit)
    return p.returncode, p.stdout, p.stderr


def refused(err: str, name: str, why: str) -> bool:
    return err.startswith(f"refused: {name} (") and why in err and err.count("\n") == 1


RECORD_READERS = [("verify-record",), ("plot",), ("trace", "-o", "OUT")]


def run_reader(cmd, record, tmp_path, **kw):
    argv = [a if a != "OUT" else tmp_path / "trace.json" for a in cmd[1:]]
    return cli(cmd[0], record, *argv, **kw)


@pytest.mark.parametrize("cmd", RECORD_READERS, ids=lambda c: c[0])
def test_a_record_that_is_a_fifo_or_a_device_is_refused_not_waited_on(cmd, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path, why in ((tmp_path / "fifo", "it is a FIFO, not a regular file"),
                      ("/dev/zero", "it is a character device, not a regular file")):
        code, out, err = run_reader(cmd, path, tmp_path, timeout=30)
        assert code == 107 and refused(err, "record-malformed", why), err


@pytest.mark.parametrize("cmd", RECORD_READERS, ids=lambda c: c[0])
def test_a_huge_sparse_record_is_refused_unread(cmd, tmp_path):
    with open(tmp_path / "record.json", "wb") as f:
        f.truncate(8 << 30)                    # 8 GiB, no block written: refused by its size
    code, _, err = run_reader(cmd, tmp_path / "record.json", tmp_path, timeout=30)
    assert code == 107 and refused(err, "record-malformed", f"it is larger than {1 << 30} bytes"), err


DEEP = "[" * 200000 + "]" * 200000


@pytest.mark.parametrize("cmd", RECORD_READERS, ids=lambda c: c[0])
@pytest.mark.parametrize("text", ["deep", "deep in a string", "truncated", "passed twice", "not UTF-8"])
def test_malformed_record_json_is_refused_by_name(cmd, text, tmp_path):
    path = crafted(tmp_path / "r")
    real = path.read_text()
    body = {"deep": '{"x": ' + DEEP + "}",
            "truncated": real[:len(real) // 2],
            "passed twice": real.replace('{\n', '{\n  "passed": true,\n', 1),
            "not UTF-8": None}.get(text)
    if text == "deep in a string":              # brackets inside a string are not nesting
        rec = json.loads(real)
        rec["published"] = DEEP
        write_record(path.parent, seal(rec, path.parent, record_key()))
    elif body is None:
        path.write_bytes(real.encode().replace(b'"w 1', b'"\xff 1'))
    else:
        path.write_text(body)
    code, out, err = run_reader(cmd, path, tmp_path)
    if text == "deep in a string":
        assert code in (0, 3) and "internal error" not in err, err     # read: verify says why
        return
    why = {"deep": "nests objects or arrays deeper than 64", "truncated": "line ",
           "passed twice": "the key 'passed' appears twice in one object",
           "not UTF-8": "utf-8"}[text]
    assert code == 107 and refused(err, "record-malformed", why), err


def test_a_manifest_too_deep_or_with_a_key_twice_is_refused_by_verify(tmp_path):
    for text, why in (('{"format": 1, "tools": ' + DEEP + "}", "nests objects or arrays deeper than 64"),
                      ('{"format": 1, "format": 1}', "the key 'format' appears twice")):
        (tmp_path / "MANIFEST.json").write_text(text)
        code, out, err = alphac("verify", tmp_path / "MANIFEST.json")
        assert code == 1 and err.startswith("alphac: error: ") and why in err and err.count("\n") == 1, err
    os.mkfifo(tmp_path / "fifo.json")
    code, _, err = cli("verify", tmp_path / "fifo.json", timeout=30)
    assert code == 1 and "it is a FIFO, not a regular file" in err, err


def test_a_record_key_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    path = crafted(tmp_path / "r")
    os.mkfifo(tmp_path / "key", 0o600)
    code, _, err = cli("verify-record", path, "--record-key", tmp_path / "key", timeout=30)
    assert code == 105 and refused(err, "record-key", "it is a FIFO, not a regular file"), err


def test_slurm_record_refuses_a_slurm_json_that_is_a_fifo(tmp_path):
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "slurm.json")
    code, _, err = cli("slurm-record", tmp_path / "run", timeout=30)
    assert code == 103 and refused(err, "launch-input", "it is a FIFO, not a regular file"), err


def test_a_stream_that_cannot_be_read_is_a_problem_not_an_error(tmp_path, monkeypatch):
    path = crafted(tmp_path / "r")
    from alphac.files import LIMITS
    monkeypatch.setitem(LIMITS, "stream", (10, "a stream"))
    assert "root: stream events/root.log cannot be read: it is larger than 10 bytes" in verify_record(path)


def test_a_record_over_64_mib_is_plotted(tmp_path):
    """A record of 450,000 steps is about 64 MiB: the reader's limit is far above it."""
    path = crafted(tmp_path / "r", published="w " + "1" * (65 << 20) + "\n")
    assert path.stat().st_size > 64 << 20
    code, out, err = alphac("plot", path)
    assert code == 0 and "first 1.0 (step 1), last 0.5 (step 2)" in out, err


def test_verify_record_reads_nothing_the_record_names_before_its_mac(tmp_path):
    """An edited record naming a manifest (its hash right, its text not a manifest) is the one
    problem EDITED: the manifest is not read; the same record authentic says it cannot be read."""
    (tmp_path / "m.json").write_text("[]")
    build = {"manifest": str(tmp_path / "m.json"),
             "sha256": hashlib.sha256(b"[]").hexdigest()}
    path = crafted(tmp_path / "r", build=build)
    problems = verify_record(path)
    assert EDITED not in problems and any("the build manifest" in p and "cannot be read" in p
                                          for p in problems), problems
    rec = json.loads(path.read_text())
    rec["published"] = "w 2\n"
    path.write_text(json.dumps(rec))
    assert verify_record(path) == [EDITED]
    code, _, err = alphac("verify-record", path)
    assert code == 3 and err == f"verify-record: {EDITED}\n", err


@pytest.mark.parametrize("line", ["step 0 comm x5 @2", "step 0 comm \u00b2 @2", "step 0 comm  @2",
                                  "step 0 comm 5 @\u00b2", "step x comm 5 @2"])     # str.isdigit takes `²`, int not
def test_trace_refuses_a_malformed_event_line_by_name(tmp_path, line):
    path = crafted(tmp_path / "r", lines=("connected @1", line, "done @3"))
    code, _, err = alphac("trace", path, "-o", tmp_path / "t.json")
    assert code == 107 and refused(err, "record-malformed", "events/root.log: line 2 is not an event"), err
    assert not (tmp_path / "t.json").exists()



def test_every_json_read_goes_through_the_one_loader():
    """alphac.files.loads (duplicate keys and depth refused) is the only JSON parser alphac calls."""
    calls = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "alphac").rglob("*.py"))
             if p.name != "files.py"
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "json.load(" in line or "json.loads(" in line]
    assert calls == []
