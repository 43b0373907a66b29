"""Checkpoints: exact resume everywhere, state moved across owner counts and ISAs, crash-safe
publication, path-only restore, shards numpy reads, and every resume refusal by an executed
mutant (the refused resume writes nothing)."""
import hashlib
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import oracle
from backend import build_deployment, build_learner_exe, run_exe
from conftest import EXAMPLES, LEARNER_NAMES, ROOT, alphac, example, require_tool
from alphac.formats import CKPT_HEADER, CKPT_RECORD
from alphac.refusals import REFUSALS

HDR, REC = CKPT_HEADER.size, CKPT_RECORD.size
PATH, PATHB = CKPT_RECORD.offset("path"), CKPT_RECORD.field("path").size

SPLIT, TREE = oracle.REF_SPLIT, oracle.REF_TREE
DEPLOYMENTS = oracle.REF_DEPLOYMENTS
OTHER = {"x86_64": "aarch64", "aarch64": "x86_64"}


def launch(dep_dir, tmp_path, **kw):
    from alphac.tools.launch import launch as run
    rec = run(dep_dir, records=tmp_path / "runs", deadline_ms=8000, **kw)
    return rec


# -- single process --------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_single_process_exact_resume(name, target, tmp_path):
    if target == "aarch64":
        require_tool("qemu-aarch64")
    exe = build_learner_exe(name, target, tmp_path)
    full = run_exe(exe, "--steps", 5, target=target).stdout
    a = run_exe(exe, "--steps", 3, "--checkpoint", tmp_path / "ck", target=target)
    assert a.returncode == 0 and a.stdout == oracle.run(name, steps=3)
    # resume in a fresh process, on the other ISA too
    for t in (target, OTHER[target]):
        if t == "aarch64":
            require_tool("qemu-aarch64")
        other = build_learner_exe(name, t, tmp_path / t if (tmp_path / t).mkdir() is None else None)
        b = run_exe(other, "--steps", 2, "--resume", tmp_path / "ck", target=t)
        assert b.returncode == 0 and b.stdout == full == oracle.run(name, steps=5), (t, b.stderr)


def test_shards_are_numpy_files_holding_the_published_values(tmp_path):
    from alphac.tools.ckpt import read_manifest
    exe = build_learner_exe("lsq_adam", "x86_64", tmp_path)
    out = run_exe(exe, "--steps", 4, "--checkpoint", tmp_path / "ck").stdout
    printed = dict(line.split() for line in out.splitlines())
    m = read_manifest(tmp_path / "ck" / "MANIFEST")
    assert (m.epoch, m.version, m.layout) == (0, 4, 0)
    for r in m.records:
        values = np.load(tmp_path / "ck" / r.path)
        assert values.dtype == np.float64 and values.shape == (r.hi - r.lo,)
        for j, v in zip(range(r.lo, r.hi), values):
            label = r.state if r.state.startswith("p") else f"{r.state}[{j}]"
            assert printed[label] == struct.pack(">d", v).hex()
    code, shown, _ = alphac("ckpt", "show", tmp_path / "ck")
    assert code == 0 and "root, epoch 0, step 4, flat" in shown and "w[0] 3f" in shown


# -- distributed -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(example_roles):
    return {dep: example_roles / dep for dep in DEPLOYMENTS}


def swapped_dir(dep, tmp_path_factory, cache={}):
    if dep not in cache:
        out = tmp_path_factory.mktemp("swapped")
        cache[dep] = build_deployment(example(DEPLOYMENTS[dep]), dep, out,
                                      target_of=lambda role, t: OTHER[t] if "owner" in role else t)
    return cache[dep]


@pytest.mark.parametrize("dep", sorted(DEPLOYMENTS))
def test_distributed_exact_resume_and_isa_swap(dep, built, tmp_path, tmp_path_factory):
    name = DEPLOYMENTS[dep]
    full = launch(built[dep], tmp_path, steps=5)
    assert full["passed"] and full["published"] == oracle.run(name, [(5, SPLIT, TREE)])
    a = launch(built[dep], tmp_path, steps=3, checkpoint=tmp_path / "ck")
    assert a["passed"] and a["published"] == oracle.run(name, [(3, SPLIT, TREE)])
    b = launch(built[dep], tmp_path, steps=2, resume=tmp_path / "ck")
    assert b["passed"] and b["published"] == full["published"], b["roles"]
    require_tool("qemu-aarch64")
    c = launch(swapped_dir(dep, tmp_path_factory), tmp_path, steps=2, resume=tmp_path / "ck")
    assert c["passed"] and c["published"] == full["published"], c["roles"]


# -- moving state to other owner counts ----------------------------------------------------------------
SPLITS = {3: [(0, 3), (3, 4), (4, 8)], 5: [(0, 1), (1, 2), (2, 5), (5, 6), (6, 8)],
          2: [(0, 5), (5, 8)]}


def with_stars(name, tmp_path):
    """The learner's file plus stars of 2, 3 and 5 owners (zero2: partitioned state)."""
    text = (EXAMPLES / f"{name}.alpha").read_text()
    for p, split in SPLITS.items():
        ranges = ", ".join(f"owner[{k}] = {a}..{b}" for k, (a, b) in enumerate(split))
        text += (f"\ndeployment star{p} {{\n  roles coordinator, owner[{p}]\n"
                 f"  topology star(coordinator)\n  samples {ranges}\n  strategy zero2\n}}\n")
    src = tmp_path / f"{name}.alpha"
    src.write_text(text)
    return src


def test_momentum_moves_from_four_owners_to_three_then_five(built, tmp_path):
    src = with_stars("lsq_momentum", tmp_path)
    out = tmp_path / "b"
    d3 = build_deployment(src, "star3", out)
    d5 = build_deployment(src, "star5", out)
    a = launch(built["lsq_momentum_star"], tmp_path, steps=3, checkpoint=tmp_path / "c1")
    b = launch(d3, tmp_path, steps=2, resume=tmp_path / "c1", checkpoint=tmp_path / "c2")
    c = launch(d5, tmp_path, steps=4, resume=tmp_path / "c2")
    want = oracle.run("lsq_momentum", [(3, SPLIT, TREE), (2, SPLITS[3], (0, 1, 2)),
                                       (4, SPLITS[5], (0, 1, 2, 3, 4))])
    assert a["passed"] and b["passed"] and c["passed"], (b["roles"], c["roles"])
    assert c["published"] == want


def test_adam_moves_from_four_owners_to_two_with_moments_and_powers(built, tmp_path):
    src = with_stars("lsq_adam", tmp_path)
    d2 = build_deployment(src, "star2", tmp_path / "b")
    launch(built["lsq_adam_star_zero2"], tmp_path, steps=3, checkpoint=tmp_path / "c1")
    r = launch(d2, tmp_path, steps=3, resume=tmp_path / "c1")
    assert r["passed"], r["roles"]
    assert r["published"] == oracle.run("lsq_adam", [(3, SPLIT, TREE), (3, SPLITS[2], (0, 1))])


# -- crash safety ----------------------------------------------------------------------------------------
def test_killed_at_every_syscall_of_the_publication(tmp_path):
    strace = require_tool("strace")
    exe = build_learner_exe("lsq_momentum", "x86_64", tmp_path)
    ck = tmp_path / "ck"
    old = run_exe(exe, "--steps", 3, "--checkpoint", ck).stdout
    new = run_exe(exe, "--steps", 5).stdout
    log = tmp_path / "trace"
    subprocess.run([strace, "-o", str(log), str(exe), "--steps", "2", "--resume", str(ck),
                    "--checkpoint", str(tmp_path / "probe")], capture_output=True, check=True)
    shutil.rmtree(tmp_path / "probe")
    names = [l.split("(")[0] for l in log.read_text().splitlines() if "(" in l and not l.startswith("+++")]
    names = [n for n in names if n not in ("execve", "exit_group")]
    counts: dict[str, int] = {}
    points = []
    for n in names:
        counts[n] = counts.get(n, 0) + 1
        points.append((n, counts[n]))
    assert ("renameat", 1) in points and ("fsync", 1) in points
    outcomes = {"old": 0, "new": 0}
    for n, k in points:
        work = tmp_path / f"w-{n}-{k}"
        shutil.copytree(ck, work)
        r = subprocess.run([strace, "-o", "/dev/null", "-e", f"inject={n}:signal=KILL:when={k}",
                            str(exe), "--steps", "2", "--resume", str(work), "--checkpoint", str(work)],
                           capture_output=True, text=True)
        assert r.returncode != 0 or r.stdout == new
        after = run_exe(exe, "--steps", 0, "--resume", work)
        if after.returncode == 0:
            assert after.stdout in (old, new), (n, k)
            outcomes["old" if after.stdout == old else "new"] += 1
        else:
            name = after.stderr.strip()[len("refused: "):]
            assert name in REFUSALS and after.returncode == REFUSALS[name][0], (n, k, after.stderr)
        shutil.rmtree(work)
    assert outcomes["old"] > 0 and outcomes["new"] >= 0


# -- path-only restore on the hierarchy ----------------------------------------------------------------------
def test_hierarchy_restore_reads_only_the_path_to_the_owner(built, tmp_path):
    from alphac.tools.ckpt import walk
    launch(built["lsq_adam_tree"], tmp_path, steps=3, checkpoint=tmp_path / "ck")
    assert [rel for rel, _ in walk(tmp_path / "ck")] == ["MANIFEST", "agg1.0/MANIFEST", "agg1.1/MANIFEST"]
    paths = {0: "agg1.0", 1: "agg1.0", 2: "agg1.1", 3: "agg1.1"}
    for k in range(4):
        alone = tmp_path / f"only-{k}"
        shutil.copytree(tmp_path / "ck", alone)
        for d in alone.iterdir():                # siblings' subtrees: gone entirely
            if d.is_dir() and d.name not in (f"owner.{k}", paths[k]):
                shutil.rmtree(d)
        exe = built["lsq_adam_tree"] / f"owner.{k}"
        r = subprocess.run([str(exe), "--resume", str(alone), "--parent", "127.0.0.1:9",
                            "--deadline-ms", "100"], capture_output=True, text=True, timeout=20)
        # the restore succeeded (it read nothing outside the path); only the parent is missing
        assert r.stderr == "refused: connect-failed\n", (k, r.stderr)


# -- resume refusals, each by an executed mutant; a refused resume writes nothing --------------------------
def sha_fix_manifest(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    path.write_bytes(bytes(data))


def records(path: Path):
    data = path.read_bytes()
    count = struct.unpack_from("<Q", data, 96)[0]
    return data, [HDR + REC * k for k in range(count)]


def mutate_shard_values(ck: Path, value: float) -> None:
    data, offs = records(ck / "MANIFEST")
    data = bytearray(data)
    off = offs[0]
    rel = data[off + PATH:off + PATH + PATHB].rstrip(b"\0").decode()
    shard = bytearray((ck / rel).read_bytes())
    shard[-8:] = struct.pack("<d", value)
    (ck / rel).write_bytes(bytes(shard))
    data[off + 24:off + 56] = hashlib.sha256(bytes(shard)).digest()      # the checksum "repaired"
    (ck / "MANIFEST").write_bytes(bytes(data))
    sha_fix_manifest(ck / "MANIFEST")


def first_shard(ck: Path) -> Path:
    data, offs = records(ck / "MANIFEST")
    return ck / data[offs[0] + PATH:offs[0] + PATH + PATHB].rstrip(b"\0").decode()


def mutate_first_record(ck: Path, lo: int | None = None, hi: int | None = None,
                        shard=None) -> None:
    """The first record's range (lo, hi as u64) or its shard's bytes changed, with every checksum
    recomputed: what anyone can do to a checkpoint."""
    data, offs = records(ck / "MANIFEST")
    data = bytearray(data)
    off = offs[0]
    if lo is not None:
        struct.pack_into("<QQ", data, off + 8, lo % 2 ** 64, hi % 2 ** 64)
    if shard is not None:
        rel = data[off + PATH:off + PATH + PATHB].rstrip(b"\0").decode()
        new = shard((ck / rel).read_bytes())
        (ck / rel).write_bytes(new)
        data[off + 24:off + 56] = hashlib.sha256(new).digest()
    (ck / "MANIFEST").write_bytes(bytes(data))
    sha_fix_manifest(ck / "MANIFEST")


# issue 22: ranges that wrapped 8 * (hi - lo) (restoring zeros, exit 0) or read outside the
# buffer (a segmentation fault), and shards whose header is another array's
HOSTILE = {
    "wrapping-range": lambda ck: mutate_first_record(ck, 2 ** 64 - 1000, 2 ** 61 - 995),
    "negative-lo": lambda ck: mutate_first_record(ck, -2 ** 40, 2),
    "empty-range": lambda ck: mutate_first_record(ck, 1, 1),      # holds nothing: w is missing
    "big-endian": lambda ck: mutate_first_record(ck, shard=lambda b: b.replace(b"'<f8'", b"'>f8'")),
    "integers": lambda ck: mutate_first_record(ck, shard=lambda b: b.replace(b"'<f8'", b"'<i8'")),
    "other-shape": lambda ck: mutate_first_record(
        ck, shard=lambda b: b.replace(b"'shape': (", b"'shape': (1, ")[:len(b)]),
}


def mutate_manifest(ck: Path, change) -> None:
    """The root manifest's bytes changed by `change(bytearray)`, its trailer recomputed."""
    data = bytearray((ck / "MANIFEST").read_bytes())
    change(data)
    (ck / "MANIFEST").write_bytes(bytes(data))
    sha_fix_manifest(ck / "MANIFEST")


def record_path(ck: Path, rel: bytes, sha_of: Path | None = None) -> None:
    """The first record names `rel` (with the SHA-256 of `sha_of`, so that only the path is wrong)."""
    def change(data):
        off = records(ck / "MANIFEST")[1][0]
        data[off + PATH:off + PATH + PATHB] = rel + bytes(PATHB - len(rel))
        if sha_of is not None:
            data[off + 24:off + 56] = hashlib.sha256(sha_of.read_bytes()).digest()
    mutate_manifest(ck, change)


def fifo_shard(ck: Path) -> None:
    shard = first_shard(ck)
    shard.unlink()
    os.mkfifo(shard)


def count_wrapping(data) -> None:
    # REC * (count + 2^63) == REC * count (mod 2^64): the same file size, a negative count
    count = struct.unpack_from("<Q", data, 96)[0]
    struct.pack_into("<Q", data, 96, count + 2 ** 63)


# issue 22: what docs/checkpoints.md says a manifest is, behind a trailer anyone can recompute
HOSTILE_MANIFESTS = {
    "root-marked-sub": lambda ck: mutate_manifest(ck, lambda d: struct.pack_into("<I", d, 12, 1)),
    "owners-backwards": lambda ck: mutate_manifest(ck, lambda d: struct.pack_into("<QQ", d, 112, 7, 3)),
    "owners-not-from-0": lambda ck: mutate_manifest(ck, lambda d: struct.pack_into("<QQ", d, 112, 1, 2)),
    "count-wrapping": lambda ck: mutate_manifest(ck, count_wrapping),
    "path-escapes": lambda ck: record_path(ck, b"../../../../../../etc/hostname", Path("/etc/hostname")),
    "path-absolute": lambda ck: record_path(ck, b"/etc/hostname", Path("/etc/hostname")),
    "path-unterminated": lambda ck: record_path(ck, b"single/" + b"x" * (PATHB - 7)),
}
HOSTILE_REFUSALS = {**{m: "shard-corrupt" for m in HOSTILE}, "empty-range": "shard-missing",
                    **{m: "manifest-torn" for m in HOSTILE_MANIFESTS}, "fifo-shard": "shard-corrupt"}


@pytest.fixture(scope="module")
def adam_exes(tmp_path_factory):
    d = tmp_path_factory.mktemp("adam")
    return {t: build_learner_exe("lsq_adam", t, d) for t in ("x86_64", "aarch64")}


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
@pytest.mark.parametrize("mutant", sorted(HOSTILE_REFUSALS))
def test_resume_refuses_hostile_records_and_headers(mutant, target, adam_exes, tmp_path):
    exe = adam_exes[target]
    ck = tmp_path / "ck"
    run_exe(exe, "--steps", 3, "--checkpoint", ck, target=target)
    {**HOSTILE, **HOSTILE_MANIFESTS, "fifo-shard": fifo_shard}[mutant](ck)
    before = tree_of(ck)
    r = run_exe(exe, "--steps", 2, "--resume", ck, "--checkpoint", ck, target=target, timeout=20)
    name = HOSTILE_REFUSALS[mutant]
    assert (r.returncode, r.stdout, r.stderr) == (REFUSALS[name][0], "", f"refused: {name}\n")
    assert before == tree_of(ck), "a refused resume wrote something"


def tree_of(ck: Path):
    return sorted((p.relative_to(ck), p.is_file() and p.read_bytes()) for p in ck.rglob("*"))


@pytest.mark.parametrize("option", ["--checkpoint", "--resume"])
def test_an_empty_checkpoint_path_is_usage(option, adam_exes, tmp_path):
    r = run_exe(adam_exes["x86_64"], "--steps", 1, option, "", timeout=20)
    assert (r.returncode, r.stdout, r.stderr.splitlines()[-1]) == (64, "", f"refused: usage ({option}: an empty path)")


MUTANTS = {
    "shard-corrupt": lambda ck: first_shard(ck).write_bytes(
        first_shard(ck).read_bytes()[:-1] + b"\x01"),
    "shard-missing": lambda ck: first_shard(ck).unlink(),
    "manifest-torn": lambda ck: (ck / "MANIFEST").write_bytes((ck / "MANIFEST").read_bytes()[:-40]),
    "shard-non-finite": lambda ck: mutate_shard_values(ck, float("nan")),
    "checkpoint-missing": lambda ck: (ck / "MANIFEST").unlink(),
}


@pytest.mark.parametrize("refusal", sorted(MUTANTS) + ["shard-non-finite-inf", "checkpoint-other-learner",
                                                     "stale-epoch", "checkpoint-layout"])
def test_resume_refusals(refusal, tmp_path, built):
    exe = build_learner_exe("lsq_adam", "x86_64", tmp_path)
    ck = tmp_path / "ck"
    run_exe(exe, "--steps", 3, "--checkpoint", ck)
    if refusal in MUTANTS:
        MUTANTS[refusal](ck)
    elif refusal == "shard-non-finite-inf":
        mutate_shard_values(ck, float("inf"))
        refusal = "shard-non-finite"
    elif refusal == "checkpoint-other-learner":
        exe = build_learner_exe("lsq_momentum", "x86_64", tmp_path)
    elif refusal == "stale-epoch":
        # a second checkpoint into the same directory; its manifest made to name an old shard
        old_shard = first_shard(ck)
        old_sha = hashlib.sha256(old_shard.read_bytes()).digest()
        run_exe(exe, "--steps", 2, "--resume", ck, "--checkpoint", ck)
        data, offs = records(ck / "MANIFEST")
        data = bytearray(data)
        rel = str(old_shard.relative_to(ck)).encode()
        data[offs[0] + PATH:offs[0] + PATH + PATHB] = rel + bytes(PATHB - len(rel))
        data[offs[0] + 24:offs[0] + 56] = old_sha
        (ck / "MANIFEST").write_bytes(bytes(data))
        sha_fix_manifest(ck / "MANIFEST")
    elif refusal == "checkpoint-layout":
        launch(built["lsq_adam_tree"], tmp_path, steps=1, checkpoint=tmp_path / "tree")
        shutil.rmtree(ck)
        shutil.copytree(tmp_path / "tree", ck)
    before = sorted((p.relative_to(ck), p.read_bytes()) for p in ck.rglob("*") if p.is_file())
    r = run_exe(exe, "--steps", 2, "--resume", ck, "--checkpoint", ck)
    assert (r.returncode, r.stdout, r.stderr) == (REFUSALS[refusal][0], "", f"refused: {refusal}\n")
    after = sorted((p.relative_to(ck), p.read_bytes()) for p in ck.rglob("*") if p.is_file())
    assert before == after, "a refused resume wrote something"


def test_distributed_resume_refuses_before_training(built, tmp_path):
    launch(built["lsq_adam_star"], tmp_path, steps=3, checkpoint=tmp_path / "ck")
    shard = next((tmp_path / "ck" / "owner.2").iterdir())
    shard.write_bytes(shard.read_bytes()[:-3] + b"\0\0\1")
    rec = launch(built["lsq_adam_star"], tmp_path, steps=2, resume=tmp_path / "ck")
    roles = {r["role"]: r for r in rec["roles"]}
    assert not rec["passed"] and rec["published"] == ""
    assert roles["owner.2"]["refused"] == "shard-corrupt"
    # the first refusal at start ends the others (each a refusal of its own, or ended by the launcher)
    assert all(r["refused"] in REFUSALS or r["detail"].startswith("ended when") for r in rec["roles"])
