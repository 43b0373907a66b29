"""docs/tutorial.md, run as written (issue 46): from an empty folder, every block in order, each
`sh` block with `bash -e` and each `file=NAME` block written as NAME. Here `alphac` and `python`
are this checkout's (PYTHONPATH) and this interpreter; tests/test_wheel.py runs the same page
with an installed wheel's. The page is the one place the steps live."""
import json
import os
import re
import subprocess
import sys

from conftest import ROOT

BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.M | re.S)


def run_tutorial(work, env) -> str:
    """Every block of the page, in order, in the empty folder `work`; the standard output."""
    commands, out = [], ""
    for info, body in BLOCK.findall((ROOT / "docs" / "tutorial.md").read_text()):
        if "file=" in info:
            (work / info.split("file=")[1]).write_text(body)
        elif info == "sh":
            p = subprocess.run(["bash", "-ec", body], cwd=work, env=env, capture_output=True, text=True,
                               timeout=300)
            assert p.returncode == 0 and "Traceback" not in p.stderr, \
                f"{body}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
            commands, out = commands + body.splitlines(), out + p.stdout
    for needed in ("alphac check", "alphac run", "alphac build mine.alpha --deployment",
                   "alphac launch three --steps 50 --checkpoint", "alphac eval", "alphac ckpt export",
                   "alphac export-metrics", "alphac trace"):
        assert any(c.startswith(needed) for c in commands), needed
    assert len((work / "loss.jsonl").read_text().splitlines()) == 50 and "accuracy: " in out
    return out


def test_the_tutorial_runs_as_written(tmp_path):
    work, shims = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    shims.mkdir()
    for name, how in (("alphac", f'"{sys.executable}" -m alphac'), ("python", f'"{sys.executable}"')):
        (shims / name).write_text(f'#!/bin/sh\nexec {how} "$@"\n')
        (shims / name).chmod(0o755)
    run_tutorial(work, {**os.environ, "PYTHONPATH": str(ROOT),
                        "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"})
    # what the page says happened: the resumed run is 60 steps of the deployment's plan
    from alphac import api
    second = json.loads((work / "runs" / "three-0002" / "record.json").read_text())
    compiled, plans = api.deployments(work / "mine.alpha", "three")
    assert second["passed"] and second["published"] == api.run(compiled, 60, plan=plans["three"])
