"""docs/tutorial.md, run as written (issue 46): from an empty folder, every block in order, each
`sh` block with `bash -e` and each `file=NAME` block written as NAME; `alphac` and `python` are
this checkout's (PYTHONPATH) and this interpreter. The page is the one place the steps live."""
import os
import re
import subprocess
import sys

from conftest import ROOT

BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.M | re.S)


def blocks():
    return BLOCK.findall((ROOT / "docs" / "tutorial.md").read_text())


def test_the_tutorial_runs_as_written(tmp_path):
    work, shims = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    shims.mkdir()
    for name, how in (("alphac", f'"{sys.executable}" -m alphac'), ("python", f'"{sys.executable}"')):
        (shims / name).write_text(f'#!/bin/sh\nexec {how} "$@"\n')
        (shims / name).chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    commands = []
    for info, body in blocks():
        if "file=" in info:
            (work / info.split("file=")[1]).write_text(body)
        elif info == "sh":
            p = subprocess.run(["bash", "-ec", body], cwd=work, env=env, capture_output=True, text=True,
                               timeout=300)
            assert p.returncode == 0, f"{body}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
            commands += body.splitlines()
    for needed in ("alphac check", "alphac run", "alphac build mine.alpha --deployment",
                   "alphac launch three --steps 50 --checkpoint", "alphac eval", "alphac ckpt export",
                   "alphac export-metrics", "alphac trace"):
        assert any(c.startswith(needed) for c in commands), needed
    # what the page says happened: the launch equals the interpreter, the resumed run 60 steps
    from alphac import api
    import json
    second = json.loads(next((work / "runs").glob("three-0002/record.json")).read_text())
    compiled, plans = api.deployments(work / "mine.alpha", "three")
    assert second["passed"] and second["published"] == api.run(compiled, 60, plan=plans["three"])
    assert len((work / "loss.jsonl").read_text().splitlines()) == 50
