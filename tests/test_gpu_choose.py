"""gpu/choose.py against the mock (issue 42): the candidates of the host choices, in order, each
built, run under both shadow policies and compared with the CPU executable's bits; the first that
passes written as bench/gpu.py's --choose arguments; a card on which the defaults fail shows the
one choice that mends it; none passing exits 1.
"""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT
from test_device_check_local import mock_runner, need_mock
from test_gpu_scripts import fake_proc


def uvm_refusing_runner(exe, args, built):
    """mock_runner, but a card whose driver refuses UVM: an owner mapping through UVM (the
    default) is refused at once, as a refused driver call is."""
    if built is not None and args != ["--probe-identity"] and built.conversation.host.gpu_map == "uvm":
        return 1, "", "refused: nvidia-call\n"
    return mock_runner(exe, args, built)


def refusing_runner(exe, args, built):
    """A card on which every GPU owner is refused (the identity probe aside)."""
    if built is not None and args != ["--probe-identity"]:
        return 1, "", "refused: gpu-timeout\n"
    return mock_runner(exe, args, built)


def choose(tmp_path, runner: str, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "gpu" / "choose.py"), "--quick", "--learners", "lsq",
                           "--keys", "map", "--steps", "2", "--out", str(tmp_path / "out"),
                           "--proc", str(fake_proc(tmp_path)), "--runner",
                           f"{ROOT / 'tests' / 'test_gpu_choose.py'}:{runner}", *more],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_the_first_candidate_that_gives_the_bits_is_chosen(tmp_path):
    need_mock()
    r = choose(tmp_path, "uvm_refusing_runner")
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    lines = (tmp_path / "out" / "choose.txt").read_text().splitlines()
    assert lines[0].startswith("defaults: FAIL (lsq, full: exit 1 (refused: nvidia-call))"), lines
    assert lines[1].startswith("map=rm: PASS") and lines[2] == "chosen: map=rm", lines
    assert (tmp_path / "out" / "choose.args").read_text() == "--choose map=rm\n"


def test_none_passing_exits_1_with_the_defaults(tmp_path):
    need_mock()
    r = choose(tmp_path, "refusing_runner")
    assert r.returncode == 1, (r.stdout, r.stderr[-2000:])
    lines = (tmp_path / "out" / "choose.txt").read_text().splitlines()
    assert [l.split(":")[0] for l in lines] == ["defaults", "map=rm", "chosen"] and lines[-1] == "chosen: none"
    assert all("FAIL (lsq, full: exit 1 (refused: gpu-timeout))" in l for l in lines[:2]), lines
    assert (tmp_path / "out" / "choose.args").read_text() == "\n"


def test_candidates_and_usage():
    sys.path.insert(0, str(ROOT / "gpu"))
    import choose as c
    from alphac.nvdrv.host import CHOICES
    from alphac.nvdrv.host import VERIFIED
    got = c.candidates(list(CHOICES))
    singles = sum(len(v) - 1 for v, _ in CHOICES.values())
    assert got[0] == () and len(set(got)) == len(got) == singles + 2
    assert all(len(p) == 1 for p in got[1:1 + singles])
    assert dict(got[-1]) == {k: v for k, v in VERIFIED.items() if v != CHOICES[k][0][0]}   # the paths of 2026-12-04
    assert set(VERIFIED) == set(CHOICES) and all(v in CHOICES[k][0] for k, v in VERIFIED.items())
    r = subprocess.run([sys.executable, str(ROOT / "gpu" / "choose.py"), "--out", "x", "--keys", "nope"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "(not: nope)" in r.stderr
