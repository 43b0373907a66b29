"""Every diagnostic code: a bad program and its exact message (tests/diagnostics/CODE.alpha and
CODE.expected), `alphac explain`, and docs/diagnostics.md generated from the one table."""
from pathlib import Path

import pytest

from alphac.diag import CODES
from alphac.refusals import REFUSALS, TOOL_EXITS
from conftest import ROOT, alphac, require_tool

DIAG = Path(__file__).parent / "diagnostics"
# E0000 (an unreadable file) and E0117 (a protocol that does not fit, which no source can
# produce: it is shown by a mutant in tests/test_dist.py) have their own tests.
FILE_CODES = sorted(c for c in CODES if c not in ("E0000", "E0117"))


@pytest.mark.parametrize("code", FILE_CODES)
def test_golden_message(code, monkeypatch):
    if code == "E0120":                  # memory admission plans the kernels: needs ptxas
        require_tool("ptxas")
    monkeypatch.chdir(DIAG)
    first = (DIAG / f"{code}.alpha").read_text().split("\n", 1)[0]
    args = first[len("# args: "):].split() if first.startswith("# args: ") else ["check"]
    rc, out, err = alphac(*args[:1], f"{code}.alpha", *args[1:])
    assert err == (DIAG / f"{code}.expected").read_text()
    assert f"[{code}]" in err
    assert rc == (0 if code.startswith("W") else 1)


def test_unreadable_file_is_E0000(tmp_path):
    rc, _, err = alphac("check", tmp_path / "nope.alpha")
    assert rc == 1 and "error[E0000]: cannot read" in err and "No such file" in err


def test_every_golden_file_names_a_code():
    for p in DIAG.glob("*.alpha"):
        assert p.stem in CODES, p


def test_several_errors_in_one_run(monkeypatch):
    src = ("learner bad\nconst a = 1 +\nconst b = atan(2)\nstate s: f64[2] = [1.0]\n"
           "update {\n  s = s + q\n}\n")
    p = DIAG.parent / "_several.alpha"
    try:
        p.write_text(src)
        rc, _, err = alphac("check", p)
    finally:
        p.unlink()
    assert rc == 1
    # the syntax error stops checking, so the parse error is reported alone
    assert err.count("error[") >= 1 and "E0010" in err
    src2 = "learner bad\nconst b = atan(2)\nstate s: f64[2] = [1.0]\nupdate {\n  s = s + q\n}\n"
    p.write_text(src2)
    try:
        rc, _, err = alphac("check", p)
    finally:
        p.unlink()
    assert [c for c in ("E0040", "E0031", "E0020") if c in err] == ["E0040", "E0031", "E0020"]


@pytest.mark.parametrize("body, wrong, meant", [
    ("loss(i) {\n  let h = tanh(w * x[i])\n  (hh - x[i])^2\n}\nupdate {\n  w = w - 0.1 * grad(w)\n}\n", "hh", "h"),
    ("loss(i) = (wq * x[i])^2\nupdate {\n  w = w - 0.1 * grad(w)\n}\n", "wq", "w"),
    ("loss(i) = (w * x[i])^2\nupdate {\n  let gw = grad(w)\n  w = w - 0.1 * g\n}\n", "g", "gw"),
    ("loss(i) = (w * x[i])^2\nupdate {\n  let step = 0.1 * grad(w)\n  ww = w - step\n}\n", "ww", "w"),
])
def test_an_unknown_name_gets_the_nearest_name_in_scope(tmp_path, body, wrong, meant):
    """`hh` for a `let h` of the same body, as for a declaration: "did you mean"."""
    p = tmp_path / "t.alpha"
    p.write_text("learner t\ndata x = [1.0, 2.0]\nparam w: f64 = 0.5\n" + body)
    rc, _, err = alphac("check", p)
    assert rc == 1 and f"error[E0020]: unknown name `{wrong}`" in err and \
        f"hint: did you mean `{meant}`?" in err, err


def test_bad_npy_files(tmp_path):
    import numpy as np
    (tmp_path / "s.npy").write_bytes(b"not an npy file")
    np.save(tmp_path / "str.npy", np.array(["a", "b"]))
    np.save(tmp_path / "big.npy", np.array([2**60 + 1], dtype=np.int64))
    np.save(tmp_path / "ok.npy", np.array([[1.0, 2.0], [3.0, 4.0]]))
    for name, code in [("s", "E0060"), ("str", "E0060"), ("big", "E0060"), ("ok", None)]:
        p = tmp_path / f"{name}.alpha"
        p.write_text(f'learner t\ndata x = load("{name}.npy")\nstate s: f64 = 0.0\n'
                     'update {\n  s = s\n}\n')
        rc, _, err = alphac("check", p)
        assert (rc == 0) == (code is None), err
        if code:
            assert f"error[{code}]" in err


def test_npy_bytes_are_part_of_the_identity(tmp_path):
    import numpy as np
    from alphac.driver import compile_file
    src = ('learner t\ndata x = load("x.npy")\nparam w: f64 = 0.0\n'
           'loss(i) = (w * x[i])^2\nupdate {\n  w = w - 0.1 * grad(w)\n}\n')
    (tmp_path / "t.alpha").write_text(src)
    np.save(tmp_path / "x.npy", np.array([1.0, 2.0]))
    a = compile_file(tmp_path / "t.alpha").learner
    np.save(tmp_path / "x.npy", np.array([1.0, 2.5]))
    b = compile_file(tmp_path / "t.alpha").learner
    assert a.identity != b.identity
    assert a.data[0].origin.startswith("npy:")


@pytest.mark.parametrize("code", sorted(CODES))
def test_explain(code):
    rc, out, _ = alphac("explain", code)
    assert rc == 0 and out.startswith(f"{code}: {CODES[code][0]}")


def test_explain_unknown():
    rc, _, err = alphac("explain", "E9999")
    assert rc == 2 and "no diagnostic code, refusal or exit code 'E9999'" in err
    assert "did you mean `peer-lost`?" in alphac("explain", "peer-lsot")[2]


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_explain_every_refusal_by_name_and_by_exit_code(name):
    """`alphac explain nvidia-open` (or 124) says what the refusal means, from the one table."""
    code, when = REFUSALS[name]
    for key in (name, str(code)):
        rc, out, _ = alphac("explain", key)
        assert rc == 0 and f"refused: {name} (exit code {code})\n\n{when}\n" in out


@pytest.mark.parametrize("name", sorted(TOOL_EXITS))
def test_explain_every_exit_code_of_alphac(name):
    code, when = TOOL_EXITS[name]
    rc, out, _ = alphac("explain", str(code))
    assert (rc, out) == (0, f"alphac exit code {code} ({name})\n\n{when}\n")


def test_docs_match_the_table():
    from alphac.tools.docs import diagnostics_md
    assert (ROOT / "docs" / "diagnostics.md").read_text() == diagnostics_md()


def test_refusal_docs_match_the_table():
    """alphac/refusals.py says a test keeps docs/refusals.md equal to its table: this one."""
    from alphac.tools.docs import refusals_md
    assert (ROOT / "docs" / "refusals.md").read_text() == refusals_md()


def test_data_that_cannot_be_read_is_reported_once(tmp_path):
    """A missing .npy file is one E0060 each: no follow-on errors about the loss, the batch or
    the shapes its uses would have had (the logistic example before `make data`)."""
    src = tmp_path / "m.alpha"
    src.write_text((ROOT / "examples" / "logistic.alpha").read_text())
    rc, _, err = alphac("check", src)
    codes = [l.split("error[")[1][:5] for l in err.splitlines() if "error[" in l]
    assert rc == 1 and codes == ["E0060", "E0060"], err
