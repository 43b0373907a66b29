"""`alphac build-all` keeps what is up to date (issue 46: a second `make demo` rebuilt all 171
artifacts): an artifact is kept when the previous MANIFEST.json was made by this compiler with
these tools, for the same recipe, from inputs of the same contents, and the file there is the
one it lists; anything else is rebuilt. A file's time never counts."""
import json
import os
import re
import shutil

import pytest

from conftest import alphac, example


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "examples").mkdir()
    for name in ("scalar_regression", "two_coordinate"):
        shutil.copy(example(name), tmp_path / "examples" / f"{name}.alpha")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def build_all() -> tuple[int, int]:
    """(built, kept) of one `alphac build-all --out b`."""
    code, out, err = alphac("build-all", "--out", "b")
    assert code == 0, err
    built, kept = map(int, re.search(r"\((\d+) built, (\d+) up to date\)", out).groups())
    return built, kept


def test_a_second_build_all_keeps_everything_and_writes_the_same_manifest(project):
    n, _ = build_all()
    first = (project / "b" / "MANIFEST.json").read_bytes()
    for f in (project / "b").rglob("*"):             # every time changed: contents count, not times
        os.utime(f, (1, 1))
    os.utime(project / "examples" / "scalar_regression.alpha", None)
    assert build_all() == (0, n)
    assert (project / "b" / "MANIFEST.json").read_bytes() == first


def test_what_changed_is_rebuilt_and_nothing_else(project, monkeypatch):
    n, _ = build_all()
    m = json.loads((project / "b" / "MANIFEST.json").read_text())
    mine = [p for p, e in m["artifacts"].items() if "examples/two_coordinate.alpha" in e["inputs"]]
    assert 0 < len(mine) < n
    src = project / "examples" / "two_coordinate.alpha"
    src.write_text(src.read_text() + "# a comment: new contents\n")
    assert build_all() == (len(mine), n - len(mine))            # an input's contents
    victim = project / "b" / mine[0]
    data = victim.read_bytes()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert build_all() == (1, n - 1)                            # an artifact edited
    victim.chmod(0o600)
    assert build_all() == (1, n - 1) and victim.stat().st_mode & 0o777 != 0o600   # its mode
    victim.unlink()
    assert build_all() == (1, n - 1)                            # an artifact gone
    from alphac import manifest
    other = dict(manifest.compiler(), sha256="0" * 64)
    monkeypatch.setattr(manifest, "compiler", lambda: other)
    assert build_all() == (n, 0)                                # another compiler


def test_another_tool_rebuilds_everything(project, monkeypatch):
    from alphac import artifacts
    n, _ = build_all()
    path = project / "b" / "MANIFEST.json"
    ptxas = {"sha256": "1" * 64, "version": "Cuda compilation tools, release 13.0, V13.0.88"}
    path.write_text(json.dumps(dict(json.loads(path.read_text()), tools={"ptxas": ptxas})))
    monkeypatch.setattr(artifacts, "tools_now", lambda: {"ptxas": lambda: ptxas})
    assert build_all() == (0, n)                                 # the same ptxas
    path.write_text(json.dumps(dict(json.loads(path.read_text()), tools={"ptxas": ptxas})))
    monkeypatch.setattr(artifacts, "tools_now", lambda: {"ptxas": lambda: dict(ptxas, sha256="2" * 64)})
    assert build_all() == (n, 0)                                 # another one


def test_build_all_progress_off_a_terminal_is_a_line_per_tenth(project):
    code, out, err = alphac("build-all", "--out", "b", "--progress", "always")
    n = int(re.search(r"(\d+) artifacts", out).group(1))
    lines = err.splitlines()
    assert code == 0 and "\r" not in err and 10 <= len(lines) <= 11 < n, err
    assert all(re.fullmatch(r"build-all: \[\d+/%d\] \S+" % n, line) for line in lines), err
