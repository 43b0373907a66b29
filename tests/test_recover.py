"""Runs that survive failures (issue 44): periodic checkpoints (`--checkpoint-every K --keep N`:
DIR/v<step>, the last N kept, an older one removed only after a newer one is published, a kill
at any system call of a publication or a removal leaving a complete one to resume) and a resumed
run counted in global steps; `alphac launch --fail ROLE@STEP[:HOW]`, each way refused by name;
`--restarts` on the same roles (the ordered contract: a star, a hierarchy, a mesh, two failures
in a run, a kill as a checkpoint is published) and `--shrink` (exact_sum: a star and a
hierarchy losing owners), each publishing the uninterrupted run's bits, and the records that say
so. (tests/test_slurm.py: a Slurm job restarted.)"""
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


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_resume_latest_takes_the_newest_complete_checkpoint_and_counts_global_steps(isa, tmp_path):
    """`--resume-latest DIR` follows the one rule (docs/checkpoints.md) that tools.ckpt.newest
    follows: the highest v<step> (decimal, no leading zero) whose root manifest exists; none (or
    no DIR): from the start. `--steps` is then global; both resume options, or a checkpoint past
    --steps: `usage`."""
    from alphac.tools.ckpt import newest
    exe = build_learner_exe("lsq_adam", isa, tmp_path)
    run = lambda *a: run_exe(exe, *a, target=isa)
    want = oracle.run("lsq_adam", steps=9)
    ck = tmp_path / "ck"
    r = run("--steps", 9, "--resume-latest", ck, "--checkpoint", ck, "--checkpoint-every", 2, "--keep", 9)
    assert r.returncode == 0 and r.stdout == want and kept(ck) == ["v2", "v4", "v6", "v8", "v9"]
    shutil.rmtree(ck / "v9")
    (ck / "v8" / "MANIFEST").unlink()                               # v8: not complete
    for junk in ("v07", "v" + "9" * 16, "v7x"):                     # not a checkpoint's name
        shutil.copytree(ck / "v6", ck / junk)
    assert newest(ck) == (ck / "v6", 6)
    r = run("--steps", 9, "--resume-latest", ck)
    assert r.returncode == 0 and r.stdout == want                   # from v6: 3 steps
    assert run("--steps", 9, "--resume-latest", tmp_path / "none").stdout == want
    for args, named in ((["--steps", 5], "--steps"), (["--steps", 9, "--resume", ck / "v6"], "--resume-latest")):
        r = run(*args, "--resume-latest", ck)
        assert r.returncode == 64 and r.stderr.splitlines()[-1].startswith(f"refused: usage ({named}: "), r.stderr


@pytest.mark.parametrize("args,named", [(["--keep", 2], "--checkpoint"), (["--checkpoint-every", 2], "--checkpoint"),
                                        (["--checkpoint", "CK", "--checkpoint-every", 0], "--checkpoint-every"),
                                        (["--checkpoint", "CK", "--checkpoint-every", 2, "--keep", 0], "--keep")])
def test_periodic_options_without_what_they_need_are_usage(args, named, tmp_path):
    exe = build_learner_exe("lsq_adam", "x86_64", tmp_path)
    r = run_exe(exe, "--steps", 2, *[tmp_path / "ck" if a == "CK" else a for a in args])
    assert (r.returncode, r.stdout) == (64, "") and r.stderr.startswith("usage: "), r.stderr
    assert r.stderr.splitlines()[-1].startswith(f"refused: usage ({named}: "), r.stderr
    assert not (tmp_path / "ck").exists()


def test_a_kill_at_any_system_call_of_a_publication_or_removal_leaves_a_complete_checkpoint(tmp_path):
    """strace kills the process at every occurrence of every system call that writes, renames,
    removes or lists while the run publishes v4 and v6 and removes v2 (--keep 2): the newest
    complete checkpoint left (alphac.tools.ckpt.newest) resumes to the uninterrupted bits, and is
    v2 or later; and a checkpoint whose root manifest is there is whole (the removal takes the
    manifest first)."""
    from alphac.tools.ckpt import newest, state
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
            for p in work.glob("v*"):     # a root manifest is there only while its checkpoint is whole
                assert not (p / "MANIFEST").exists() or state(p), (name, k, p.name)
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
# HOW -> (the victim's exit, the refusals the coordinator may give). A role writes a frame in
# more than one write, so a fault between two of them leaves the coordinator a cut frame:
# `frame-truncated` is then the failure by name as much as `peer-lost` (a fresh clone's CI saw
# the coordinator refuse `frame-truncated` after `close`).
CUT = {"peer-lost", "frame-truncated"}
FAILED_AS = {"kill": (-9, CUT), "stop": (-9, CUT), "close": (72, CUT),
             "corrupt": (72, {"frame-bad-header"})}


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
    assert roles["coordinator"]["refused"] in FAILED_AS[how][1]
    assert all(r["refused"] == "peer-lost" for n, r in roles.items() if n not in ("owner.2", "coordinator"))
    assert 50 <= roles["owner.2"]["timing"]["steps"] < 400


@pytest.mark.parametrize("spec", ["owner.9@3", "owner.2@0", "owner.2@3:melt", "owner.2", "@3"])
def test_a_fault_that_names_no_role_step_or_way_is_refused(spec, example_roles, tmp_path):
    code, _, err = alphac("launch", example_roles / "lsq_adam_star", "--fail", spec, "--records", tmp_path / "runs")
    assert code == 103 and err.startswith("refused: launch-input") and "--fail" in err
    assert not (tmp_path / "runs").exists()


# -- recovery ------------------------------------------------------------------------------------------
STEPS, EVERY = 500, 40


def check_recovered(rec, failures: int, members: list[list[str]]):
    """A passing, authentic record with `failures` failures, each resumed from a checkpoint at a
    multiple of EVERY, with these memberships, a time to recover, and one loss curve."""
    from alphac.tools.record import verify_record
    assert rec["passed"], [(f["failed"], [(r["role"], r["refused"]) for r in f["roles"]])
                           for f in rec.get("failures", [])] + [rec["roles"]]
    assert verify_record(rec["path"]) == []
    assert len(rec["failures"]) == failures and [f["membership"] for f in rec["failures"]] == members
    for f in rec["failures"]:
        assert f["resumed_from"]["step"] % EVERY == 0 and f["recover_ms"] > 0
    assert [e["step"] for e in rec["loss"]] == list(range(1, STEPS + 1)) and rec["steps"] == STEPS


@pytest.mark.parametrize("dep", ["lsq_adam_star", "lsq_adam_tree", "lsq_adam_mesh"])
def test_restarts_on_the_same_roles_publish_the_uninterrupted_bits(dep, example_roles, tmp_path):
    """The ordered contract: two owners killed at seeded random steps of one run (the second
    with its socket closed on the mesh), restarted from the newest complete checkpoint with the
    same roles each time: the uninterrupted run's bits."""
    import random
    rng = random.Random(dep)
    a, b = rng.randrange(60, 140), rng.randrange(180, 260)
    table = [r["role"] for r in __import__("json").loads((example_roles / dep / "roles.json").read_text())["roles"]]
    rec = launch(example_roles / dep, tmp_path, steps=STEPS, deadline_ms=2000, checkpoint=tmp_path / "ck",
                 checkpoint_every=EVERY, restarts=2,
                 fail=[f"owner.{rng.randrange(4)}@{a}", f"owner.{rng.randrange(4)}@{b}:{'close' if 'mesh' in dep else 'kill'}"])
    check_recovered(rec, 2, [table, table])
    assert rec["published"] == oracle.run("lsq_adam", [(STEPS, oracle.REF_SPLIT, oracle.REF_TREE)])
    # a failed attempt's stream is sealed like the last one's: changed, the record does not verify
    from alphac.tools.record import verify_record
    stream = Path(rec["path"]).parent / rec["failures"][0]["roles"][-1]["stream"]["file"]
    stream.write_bytes(stream.read_bytes().replace(b"step 2 ", b"step 3 ", 1))
    assert verify_record(rec["path"]) == [f"{rec['failures'][0]['roles'][-1]['role']}: stream does not match its seal"]


def test_a_kill_at_a_checkpoint_step_restarts_from_a_complete_one(example_roles, tmp_path):
    """The coordinator killed as it publishes v80 (once it has said step 80): the restart takes
    v80 if its root manifest was published, else v40, and the bits are the uninterrupted run's.
    (The strace test above kills a publication at every system call.)"""
    rec = launch(example_roles / "lsq_momentum_star", tmp_path, steps=STEPS, checkpoint=tmp_path / "ck",
                 checkpoint_every=EVERY, restarts=1, fail=["coordinator@80"])
    assert rec["passed"] and rec["failures"][0]["resumed_from"]["step"] in (40, 80)
    assert rec["published"] == oracle.run("lsq_momentum", [(STEPS, oracle.REF_SPLIT, oracle.REF_TREE)])


def test_without_restarts_or_checkpoints_a_failure_fails_the_run(example_roles, tmp_path):
    rec = launch(example_roles / "lsq_adam_star", tmp_path, steps=STEPS, checkpoint=tmp_path / "ck",
                 checkpoint_every=EVERY, fail=["owner.1@50"])
    assert not rec["passed"] and "failures" not in rec
    code, _, err = alphac("launch", example_roles / "lsq_adam_star", "--restarts", 1, "--records", tmp_path / "r")
    assert code == 103 and "--checkpoint-every" in err and not (tmp_path / "r").exists()


@pytest.fixture
def exact_built(tmp_path, monkeypatch):
    """lsq_adam under exact_sum, built from a directory of its own (its manifest names the source
    there, which --shrink reads back)."""
    from conftest import exact_sum_variant
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lsq_x.alpha").write_text(exact_sum_variant((EXAMPLES / "lsq_adam.alpha").read_text()))
    for dep in ("lsq_adam_star", "lsq_adam_tree"):
        code, _, err = alphac("build", "lsq_x.alpha", "--deployment", dep, "-o", dep)
        assert code == 0, err
    return tmp_path


@pytest.mark.parametrize("dep", ["lsq_adam_star", "lsq_adam_tree"])
def test_shrink_goes_on_without_the_failed_owners_with_the_uninterrupted_bits(dep, exact_built):
    """exact_sum: an owner killed at a seeded random step, then another: each time the run goes
    on without it (its samples to its neighbour, rebuilt: tools/shrink.py) from the newest
    complete checkpoint, and publishes the single process's bits; the record names each
    membership after a failure. A failed aggregator is restarted with the same membership."""
    import random
    rng = random.Random(dep)
    a, b = rng.randrange(60, 140), rng.randrange(180, 260)
    tree = dep == "lsq_adam_tree"
    second = "agg1.0" if tree else "owner.0"
    rec = launch(exact_built / dep, exact_built, steps=STEPS, deadline_ms=2000, checkpoint=exact_built / "ck",
                 checkpoint_every=EVERY, restarts=2, shrink=True, fail=[f"owner.3@{a}", f"{second}@{b}"])
    three = ["root", "agg1.0", "agg1.1", "owner.0", "owner.1", "owner.2"] if tree else \
        ["coordinator", "owner.0", "owner.1", "owner.2"]
    check_recovered(rec, 2, [three, three if tree else ["coordinator", "owner.0", "owner.1"]])
    assert rec["published"] == oracle.run("lsq_adam", steps=STEPS, exact=True)
    assert not list(exact_built.glob(".shrink-*"))          # the temporary source is gone


def test_shrink_is_refused_by_name_under_the_ordered_contract(example_roles, tmp_path):
    code, _, err = alphac("launch", example_roles / "lsq_adam_star", "--checkpoint", tmp_path / "ck",
                          "--checkpoint-every", 10, "--restarts", 1, "--shrink", "--records", tmp_path / "runs")
    assert code == 109 and err.startswith("refused: shrink-contract") and not (tmp_path / "runs").exists()


def test_a_shrink_the_compiler_refuses_restarts_on_the_same_roles(exact_built, monkeypatch):
    """When the smaller deployment cannot be built (GPU owners, a deployment the compiler refuses),
    the run goes on with the same roles and the record says why."""
    import alphac.tools.shrink as shrinker               # the launcher imports it when it shrinks
    from alphac.refusals import Refusal

    def refused(*args):
        raise Refusal("launch-input", "--shrink: not built here")
    monkeypatch.setattr(shrinker, "build", refused)
    rec = launch(exact_built / "lsq_adam_star", exact_built, steps=STEPS, checkpoint=exact_built / "ck",
                 checkpoint_every=EVERY, restarts=1, shrink=True, fail=["owner.3@100"])
    [f] = rec["failures"]
    assert rec["passed"] and f["not_shrunk"] == "--shrink: not built here"
    assert f["membership"] == ["coordinator", "owner.0", "owner.1", "owner.2", "owner.3"]
    assert rec["published"] == oracle.run("lsq_adam", steps=STEPS, exact=True)
