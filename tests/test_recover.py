"""Runs that survive failures (issue 44): periodic checkpoints (`--checkpoint-every K --keep N`:
DIR/v<step>, the last N kept, an older one removed only after a newer one is published, a kill
at any system call of a publication or a removal leaving a complete one to resume) and a resumed
run counted in global steps."""
import shutil
import subprocess
from pathlib import Path

import pytest

import oracle
from backend import build_deployment, build_learner_exe, run_exe
from conftest import EXAMPLES, alphac, require_tool


def launch(dep_dir, tmp_path, **kw):
    from alphac.tools.launch import launch as run
    return run(dep_dir, records=tmp_path / "runs", **{"deadline_ms": 8000, **kw})


def kept(ck: Path) -> list[str]:
    return sorted((p.name for p in ck.iterdir()), key=lambda n: int(n[1:]))


# -- periodic checkpoints ------------------------------------------------------------------------------
def test_the_last_n_periodic_checkpoints_are_kept_and_each_resumes_exactly(tmp_path):
    exe = build_learner_exe("lsq_adam", "x86_64", tmp_path)
    ck = tmp_path / "ck"
    r = run_exe(exe, "--steps", 7, "--checkpoint", ck, "--checkpoint-every", 2, "--keep", 3)
    assert r.returncode == 0 and r.stdout == oracle.run("lsq_adam", steps=7)
    assert kept(ck) == ["v4", "v6", "v7"]          # every 2nd step and the last; the last 3
    for v in (4, 6, 7):
        b = run_exe(exe, "--steps", 9 - v, "--resume", ck / f"v{v}")
        assert b.returncode == 0 and b.stdout == oracle.run("lsq_adam", steps=9), v
    # a resumed run goes on in the same directory: the one a kill left behind goes with the next
    (ck / "v2").mkdir()
    (ck / "v2" / "single").mkdir()
    (ck / "v2" / "single" / "w.0-5.e0.v2.npy.tmp").write_bytes(b"half")
    run_exe(exe, "--steps", 3, "--resume", ck / "v7", "--checkpoint", ck, "--checkpoint-every", 2, "--keep", 2)
    assert kept(ck) == ["v8", "v10"]


@pytest.mark.parametrize("args", [["--keep", 2], ["--checkpoint-every", 2],
                                  ["--checkpoint", "CK", "--checkpoint-every", 0],
                                  ["--checkpoint", "CK", "--checkpoint-every", 2, "--keep", 0]])
def test_periodic_options_without_what_they_need_are_usage(args, tmp_path):
    exe = build_learner_exe("lsq_adam", "x86_64", tmp_path)
    r = run_exe(exe, "--steps", 2, *[tmp_path / "ck" if a == "CK" else a for a in args])
    assert (r.returncode, r.stderr, r.stdout) == (64, "refused: usage\n", "")
    assert not (tmp_path / "ck").exists()


def test_a_kill_at_any_system_call_of_a_publication_or_removal_leaves_a_complete_checkpoint(tmp_path):
    """strace kills the process at every occurrence of every system call that writes, renames,
    removes or lists while the run publishes v4 and v6 and removes v2 (--keep 2): the newest
    complete checkpoint left (alphac.tools.ckpt.newest) resumes to the uninterrupted bits, and is
    v2 or later."""
    from alphac.tools.ckpt import newest
    strace = require_tool("strace")
    exe = build_learner_exe("lsq_momentum", "x86_64", tmp_path)
    base = tmp_path / "base"
    run_exe(exe, "--steps", 2, "--checkpoint", base, "--checkpoint-every", 2)
    want = run_exe(exe, "--steps", 8).stdout
    args = ["--steps", "4", "--resume", "RESUME", "--checkpoint", "CK", "--checkpoint-every", "2", "--keep", "2"]
    log = tmp_path / "trace"
    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    subprocess.run([strace, "-o", str(log), str(exe)] + [str(probe / "v2") if a == "RESUME" else str(probe)
                   if a == "CK" else a for a in args], check=True, capture_output=True)
    calls = ("openat", "write", "fsync", "renameat", "unlinkat", "getdents64", "mkdirat")
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines():
        name = line.split("(")[0]
        if name in calls:
            counts[name] = counts.get(name, 0) + 1
    assert counts["unlinkat"] >= 6 and counts["getdents64"] >= 2     # v2 was removed
    seen = set()
    for name, n in sorted(counts.items()):
        for k in range(1, n + 1):
            work = tmp_path / f"w-{name}-{k}"
            shutil.copytree(base, work)
            subprocess.run([strace, "-o", "/dev/null", "-e", f"inject={name}:signal=KILL:when={k}", str(exe)]
                           + [str(work / "v2") if a == "RESUME" else str(work) if a == "CK" else a for a in args],
                           capture_output=True)
            found = newest(work)
            assert found is not None, (name, k)
            path, v = found
            after = run_exe(exe, "--steps", 8 - v, "--resume", path)
            assert after.returncode == 0 and after.stdout == want, (name, k, v, after.stderr)
            seen.add(v)
            shutil.rmtree(work)
    assert seen == {2, 4, 6}


def test_a_launch_checkpoints_periodically_and_resumes_in_global_steps(example_roles, tmp_path):
    """A hierarchy (a manifest tree per checkpoint): `alphac launch --checkpoint-every 2 --keep 2`
    keeps v4 and v5; `--resume DIR` takes the newest, and the record and the progress count
    from the run's first step (step 8 of 8)."""
    dep = example_roles / "lsq_adam_tree"
    ck = tmp_path / "ck"
    a = launch(dep, tmp_path, steps=5, checkpoint=ck, checkpoint_every=2, keep=2)
    assert a["passed"] and kept(ck) == ["v4", "v5"]
    assert sorted(p.relative_to(ck / "v5").as_posix() for p in (ck / "v5").rglob("MANIFEST")) == \
        ["MANIFEST", "agg1.0/MANIFEST", "agg1.1/MANIFEST"]
    code, out, err = alphac("launch", dep, "--steps", 3, "--resume", ck, "--records", tmp_path / "runs",
                            "--progress", "always")
    assert code == 0 and out == oracle.run("lsq_adam", [(8, oracle.REF_SPLIT, oracle.REF_TREE)])
    assert "launch: step 8/8" in err
    from alphac.tools.record import read_record
    rec = read_record(sorted((tmp_path / "runs").glob("*/record.json"))[-1])
    assert (rec["steps"], rec["resumed_at"], rec["loss"][0]["step"]) == (8, 5, 6)


# -- fault injection -----------------------------------------------------------------------------------
FAILED_AS = {   # HOW -> (the victim's exit, the refusal the coordinator gives)
    "kill": (-9, "peer-lost"), "stop": (-9, "peer-lost"), "close": (72, "peer-lost"),
    "corrupt": (72, "frame-bad-header")}


@pytest.mark.parametrize("how", sorted(FAILED_AS))
def test_each_fault_fails_the_run_by_name(how, example_roles, tmp_path):
    """`--fail owner.2@50:HOW` on a 4-owner star: the fault is done once owner.2 has said step 50,
    the run fails (every other role by name: peer-lost, or the frame the coordinator cannot
    read), the record says which fault was done, and a stopped role is ended with the others."""
    rec = launch(example_roles / "lsq_adam_star", tmp_path, steps=400, fail=[f"owner.2@50:{how}"],
                 deadline_ms=1000)
    roles = {r["role"]: r for r in rec["roles"]}
    assert not rec["passed"] and rec["faults"] == [{"role": "owner.2", "step": 50, "how": how, "done": True}]
    assert roles["owner.2"]["exit"] == FAILED_AS[how][0]
    assert roles["coordinator"]["refused"] == FAILED_AS[how][1]
    assert all(r["refused"] == "peer-lost" for n, r in roles.items() if n not in ("owner.2", "coordinator"))
    assert 50 <= roles["owner.2"]["timing"]["steps"] < 400


@pytest.mark.parametrize("spec", ["owner.9@3", "owner.2@0", "owner.2@3:melt", "owner.2", "@3"])
def test_a_fault_that_names_no_role_step_or_way_is_refused(spec, example_roles, tmp_path):
    code, _, err = alphac("launch", example_roles / "lsq_adam_star", "--fail", spec, "--records", tmp_path / "runs")
    assert code == 103 and err.startswith("refused: launch-input") and "--fail" in err
    assert not (tmp_path / "runs").exists()
