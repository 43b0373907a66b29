"""`alphac launch`: the local qualification driver for a built deployment.

    alphac launch build/roles/lsq_adam_star [--steps N] [--deadline-ms MS] [--records DIR]

What it does, in order, and nothing else (no launcher decides anything about the learning):
1. reads `roles.json` (written by the build) and the build's MANIFEST.json (found in the
   directory or above it), and checks every role executable's SHA-256 against the manifest
   before anything runs (`refused: artifact-hash` otherwise);
2. picks free loopback ports for the roles that listen, starts every role (AArch64 roles under
   qemu-aarch64 unless this host is AArch64), each with its own event file;
3. waits for all of them (bounded: the deadline plus a margin), kills none unless the bound
   passes;
4. writes a run record (DESIGN.md contract 10): host, each role's ISA, artifact hash, exit code,
   refusal, and its event stream, hash-chained and sealed; the published state; whether the run
   passed. A record is a pass only when every role exited 0, the root published, and every
   stream is linked and intact (`verify_record`);
5. prints the published state on stdout exactly as the root printed it.

Event streams: each role writes one line per event; the launcher chains them, `h_0 =
SHA-256("alphac-events-v1" | role)`, `h_i = SHA-256(h_{i-1} | line_i)`, and seals the stream with
its length and final hash. The record links each stream by file name and seal.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from alphac.files import read_regular
from alphac.manifest import MAX_FILE, sha256_file
from alphac.refusals import Refusal

RECORD_FORMAT = 1


@dataclass
class RoleRun:
    role: str
    target: str
    sha256: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    exit: int | None = None
    stdout: str = ""
    stderr: str = ""


def find_manifest(start: Path) -> Path:
    for d in [start, *start.parents]:
        m = d / "MANIFEST.json"
        if m.exists():
            return m
    raise Refusal("artifact-hash", f"no MANIFEST.json at or above {start}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chain(role: str, lines: list[str]) -> tuple[str, list[str]]:
    h = hashlib.sha256(b"alphac-events-v1|" + role.encode()).digest()
    links = []
    for line in lines:
        h = hashlib.sha256(h + b"|" + line.encode()).digest()
        links.append(h.hex())
    return h.hex(), links


def load_table(dep_dir: Path) -> tuple[dict, dict, Path]:
    table_path = dep_dir / "roles.json"
    if not table_path.exists():
        raise Refusal("artifact-hash", f"{table_path} does not exist (run `make roles`)")
    mpath = find_manifest(dep_dir)
    try:
        table, manifest = (json.loads(read_regular(p, MAX_FILE)) for p in (table_path, mpath))
    except (OSError, ValueError) as e:
        raise Refusal("artifact-hash", f"{table_path} or {mpath} cannot be read as JSON: {e}")
    return table, manifest, mpath


def check_hashes(dep_dir: Path, table: dict, manifest: dict, mpath: Path) -> dict[str, str]:
    """The SHA-256 of every role executable (and roles.json), checked against the manifest."""
    rel = dep_dir.resolve().relative_to(mpath.parent.resolve())
    hashes = {}
    for name in ["roles.json"] + [r["file"] for r in table["roles"]]:
        key = (rel / name).as_posix()
        entry = manifest.get("artifacts", {}).get(key)
        path = dep_dir / name
        if entry is None or not path.exists() or sha256_file(path) != entry["sha256"]:
            raise Refusal("artifact-hash", f"{key} does not match the manifest")
        hashes[name] = entry["sha256"]
    return hashes


def launch(dep_dir: str | Path, steps: int = 5, deadline_ms: int = 10000,
           records: str | Path = "runs", extra: dict[str, list[str]] | None = None,
           kill: tuple[str, float] | None = None, checkpoint: str | Path | None = None,
           resume: str | Path | None = None, targets: dict[str, str] | None = None) -> dict:
    """Run a built deployment; returns the run record (also written under `records`)."""
    dep_dir = Path(dep_dir)
    table, manifest, mpath = load_table(dep_dir)
    hashes = check_hashes(dep_dir, table, manifest, mpath)
    if targets:                        # run other builds of the roles (e.g. every owner swapped)
        for r in table["roles"]:
            r["target"] = targets.get(r["role"], r["target"])
    ports = {r["role"]: free_port() for r in table["roles"] if r["listens"]}
    extra = {k: list(v) for k, v in (extra or {}).items()}
    for flag, path in (("--checkpoint", checkpoint), ("--resume", resume)):
        if path is not None:
            extra.setdefault("*", []).extend([flag, str(Path(path).resolve())])
    work = Path(tempfile.mkdtemp(prefix="alphac-run-"))
    native = platform.machine().lower() in ("aarch64", "arm64")
    runs: list[RoleRun] = []
    for r in table["roles"]:
        argv = [str((dep_dir / r["file"]).resolve()), "--steps", str(steps),
                "--deadline-ms", str(deadline_ms), "--events", str(work / f"{r['role']}.events")]
        if r["listens"]:
            argv += ["--listen", f"127.0.0.1:{ports[r['role']]}"]
        if r["parent"]:
            argv += ["--parent", f"127.0.0.1:{ports[r['parent']]}"]
        argv += (extra or {}).get(r["role"], []) + (extra or {}).get("*", [])
        if r["target"] == "aarch64" and not native:
            qemu = shutil.which("qemu-aarch64")
            if qemu is None:
                raise Refusal("launch-tool", "qemu-aarch64 is needed for AArch64 roles")
            argv = [qemu] + argv
        runs.append(RoleRun(r["role"], r["target"], hashes[r["file"]], argv))
    for run in runs:
        run.proc = subprocess.Popen(run.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if kill is not None:
        victim, after = kill
        time.sleep(after)
        for run in runs:
            if run.role == victim and run.proc.poll() is None:
                run.proc.kill()
    bound = deadline_ms / 1000 * 4 + 30
    start = time.monotonic()
    for run in runs:
        left = max(0.1, bound - (time.monotonic() - start))
        try:
            out, err = run.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            out, err = run.proc.communicate()
            err += b"launcher: killed after the bound\n"
        run.exit, run.stdout, run.stderr = run.proc.returncode, out.decode(errors="replace"), \
            err.decode(errors="replace")
    record = make_record(table, runs, work, steps, manifest)
    rdir = write_record(Path(records), table["deployment"], record, work)
    record["path"] = str(rdir / "record.json")
    shutil.rmtree(work, ignore_errors=True)
    return record


def make_record(table: dict, runs: list[RoleRun], work: Path, steps: int, manifest: dict) -> dict:
    roles = []
    for run in runs:
        ev_path = work / f"{run.role}.events"
        lines = ev_path.read_text().splitlines() if ev_path.exists() else []
        head, _ = chain(run.role, lines)
        refused = next((l[len("refused: "):] for l in run.stderr.splitlines()
                        if l.startswith("refused: ")), None)
        roles.append({"role": run.role, "isa": run.target, "sha256": run.sha256,
                      "exit": run.exit, "refused": refused,
                      "signal": -run.exit if run.exit is not None and run.exit < 0 else None,
                      "stream": {"file": f"events/{run.role}.log", "count": len(lines), "seal": head}})
    root = next(r for r in runs if r.role == table["root"])
    published = root.stdout if root.exit == 0 else ""
    passed = all(r.exit == 0 for r in runs) and bool(published)
    return {"format": RECORD_FORMAT, "deployment": table["deployment"], "learner": table["learner"],
            "identity": table["identity"], "steps": steps,
            "host": {"machine": platform.machine(), "system": platform.system(),
                     "release": platform.release()},
            "compiler": manifest.get("compiler", {}), "roles": roles,
            "published": published, "passed": passed}


def new_record_dir(records: Path, name: str) -> Path:
    """`records/NAME-NNNN` with its `events/` folder, NNNN the first number not yet taken."""
    records.mkdir(parents=True, exist_ok=True)
    n = 1
    while (records / f"{name}-{n:04d}").exists():
        n += 1
    rdir = records / f"{name}-{n:04d}"
    (rdir / "events").mkdir(parents=True)
    return rdir


def write_record(records: Path, deployment: str, record: dict, work: Path) -> Path:
    rdir = new_record_dir(records, deployment)
    for r in record["roles"]:
        src = work / f"{r['role']}.events"
        (rdir / r["stream"]["file"]).write_bytes(src.read_bytes() if src.exists() else b"")
    tmp = rdir / "record.json.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, rdir / "record.json")
    return rdir


def verify_record(path: str | Path) -> list[str]:
    """Problems with a run record: empty when it is a pass whose streams are linked and intact."""
    path = Path(path)
    rec = json.loads(path.read_text())
    problems = []
    for r in rec["roles"]:
        f = path.parent / r["stream"]["file"]
        if not f.exists():
            problems.append(f"{r['role']}: stream {r['stream']['file']} is missing")
            continue
        lines = f.read_text().splitlines()
        head, _ = chain(r["role"], lines)
        if len(lines) != r["stream"]["count"] or head != r["stream"]["seal"]:
            problems.append(f"{r['role']}: stream does not match its seal")
        if r["exit"] != 0:
            problems.append(f"{r['role']}: exited {r['exit']}" + (f" (refused: {r['refused']})" if r["refused"] else ""))
    if not rec.get("published"):
        problems.append("nothing was published")
    if not rec.get("passed"):
        problems.append("the record is not a pass")
    return problems
