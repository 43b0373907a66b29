"""Hostile input (issue 22, the compiler's side): output paths that are not files, inputs that
are not files or never end, the compiler's limits, `alphac ckpt show` on hostile records, and a
fuzzer of the whole command line that fails on any traceback or internal error."""
import os

import pytest

from conftest import ROOT, alphac, example


# -- output paths ------------------------------------------------------------------------------------
def _others(tmp_path):
    """Output targets that are neither absent nor regular files: each must be refused."""
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "outside")
    return {"dir": "a directory", "fifo": "a FIFO", "link": "a symbolic link"}


def test_build_refuses_an_output_that_is_not_a_regular_file(tmp_path):
    for name, kind in _others(tmp_path).items():
        rc, _, err = alphac("build", example("scalar_regression"), "-o", tmp_path / name)
        assert rc == 1 and err == f"alphac: error: cannot write `{tmp_path / name}`: it is {kind}, " \
                                  "not a regular file\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "link"]   # no DIR.tmp
    assert list((tmp_path / "dir").iterdir()) == [] and not (tmp_path / "outside").exists()


def test_build_never_follows_a_planted_link(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    secret = tmp_path / "secret"
    secret.write_text("keep")
    for planted in ("out.tmp", "out.manifest.json.tmp"):    # the old fixed temporary names
        (tmp_path / planted).symlink_to(secret)
    rc, _, err = alphac("build", "examples/scalar_regression.alpha", "-o", tmp_path / "out")
    assert rc == 0, err
    assert secret.read_text() == "keep" and (tmp_path / "out").read_bytes()[:4] == b"\x7fELF"
    assert not (tmp_path / "out").is_symlink() and (tmp_path / "out.manifest.json").is_file()
    rc, _, _ = alphac("build", "examples/scalar_regression.alpha", "-o", tmp_path / "out")
    assert rc == 0                                          # a regular file is replaced


@pytest.mark.parametrize("argv", [["build", "F", "-o", ""], ["check", ""], ["ckpt", "show", ""],
                                  ["launch", "D", "--checkpoint", ""], ["launch", "D", "--resume", ""],
                                  ["build-all", "--out", ""], ["verify", ""]])
def test_an_empty_path_is_a_usage_error(argv):
    rc, _, err = alphac(*argv)
    assert rc == 2 and "not a path: ''" in err, err


# -- the compiler's limits -----------------------------------------------------------------------------
def learner(tmp_path, body: str, name="t.alpha"):
    p = tmp_path / name
    p.write_text("learner t\n" + body)
    return p


def diagnostic(rc, err):
    """The one line `FILE:LINE:COL: error[CODE]: message` of a refused check."""
    assert rc == 1 and "Traceback" not in err and "internal error" not in err, err
    return err.splitlines()[0].split(": ", 1)


def test_number_literals_that_overflow_binary64(tmp_path):
    for n, lit in enumerate(["1" * 4400, "0x1p1024", "0x" + "f" * 300, "1e309"]):
        p = learner(tmp_path, f"state s: f64 = 1.0\nupdate {{\n  s = s * {lit}\n}}\n", f"{n}.alpha")
        where, what = diagnostic(*alphac("check", p)[::2])
        assert where == f"{p}:4:11" and what.startswith("error[E0004]: `") and "overflows" in what
    p = learner(tmp_path, "state s: f64[" + "0" * 5000 + "2] = 1.0\nupdate {\n  s = s\n}\n")
    assert alphac("check", p)[0] == 0                       # 5,000 leading zeros: the integer 2
