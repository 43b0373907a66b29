"""`alphac launch DIR`: the runner, which runs a built deployment on this machine, in the order
docs/runtime.md gives: the inputs checked before anything starts (table.py; record.py's key,
directory and reserved space); the roles' loopback ports and command lines (role_argv, with the
emulator each target needs here: alphac.targets); the run (supervise.py); the record (record.py).
Periodic checkpoints (`checkpoint_every`, `keep`) are the roles' own (alphac/runtime/ckpt.rt);
the runner passes them on, resumes a directory of them from its newest complete one
(tools/ckpt.newest), and counts steps globally: a run resumed at step 180 for 270 steps shows
and records step 450 of 450.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import socket
import time
from pathlib import Path

from alphac.refusals import Refusal
from alphac.targets import LEVELS, below, emulator, host_runs, names
from alphac.tools.ckpt import CheckpointError, newest, read_manifest
from alphac.tools.record import (events_key, stream_events, stream_lines, make_record, new_record_dir, record_key, reserve_record,
                                 run_key, seal, space_needed, write_record)
from alphac.tools.supervise import HOWS, Fault, Progress, RoleRun, run_roles
from alphac.tools.table import artifact_key, load_build


def ephemeral_low() -> int:
    """The bottom of the kernel's ephemeral port range (0 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def bound(port: int) -> int | None:
    """The loopback port a socket binds to when asked for `port` (0: any), or None if taken."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return None
        return s.getsockname()[1]


def free_port(taken: set[int] | None = None) -> int:
    """A loopback port to listen on, below the kernel's ephemeral range when it can be read: a
    port from bind(0) is an ephemeral one, and until its role binds it another role's outgoing
    connection (a connect retried while its parent starts) may take it as its source port,
    which makes that role's listen fail (seen with slow-starting GPU owners)."""
    taken = set() if taken is None else taken
    low = ephemeral_low()
    candidates = random.sample(range(max(1024, low - 12000), low), 64) if low > 2048 else []
    for port in candidates + [0]:
        if port in taken:
            continue
        port = bound(port)
        if port is not None and port not in taken:
            taken.add(port)
            return port
    raise Refusal("launch-tool", "no free loopback port")


def free_ports_at(offsets: list[int], taken: set[int]) -> int:
    """A base B whose ports B + o, for each offset o, are all free loopback ports below the
    ephemeral range (a mesh's `--mesh 127.0.0.1:B+{}`, each owner at its rank)."""
    low = ephemeral_low() or 32768
    for base in random.sample(range(max(1024, low - 12000), max(1025, low - max(offsets))), 64):
        ports = [base + o for o in offsets]
        if not taken.intersection(ports) and all(bound(p) == p for p in ports):
            taken.update(ports)
            return base
    raise Refusal("launch-tool", "no free block of loopback ports for the mesh")


def emulators(table: dict) -> dict[str, list[str]]:
    """The table's targets -> what runs their roles here (alphac.targets); else `launch-tool`. A
    GPU owner's host part (x86_64-v4 of x86_64-v4+sm_90) runs natively or not at all: the
    driver's calls are not emulated."""
    emulate = {}
    for t in sorted({r["target"] for r in table["roles"]}):
        cpu, plus, gpu = t.partition("+")
        if cpu not in names():
            continue
        how = [] if host_runs(cpu) else emulator(t)
        if how is None and cpu not in LEVELS:
            raise Refusal("launch-tool", f"{t} roles need an {cpu} host: a GPU owner is not emulated")
        if how is None:
            raise Refusal("launch-tool", f"{t} roles need a CPU with {LEVELS[cpu].extension} ("
                          f"{'a GPU owner is not emulated' if plus else 'qemu does not emulate it'}); "
                          f"build them for {' or '.join(b + plus + gpu for b in below(cpu))}")
        if how and shutil.which(how[0]) is None:
            raise Refusal("launch-tool", f"{how[0]} is needed for {t} roles on this host")
        emulate[t] = [shutil.which(how[0]), *how[1:]] if how else []
    return emulate


def role_argv(dep_dir: Path, r: dict, steps: int, deadline_ms: int, rdir: Path,
              ports: dict[str, int], mesh_base: int | None, extra: dict[str, list[str]]) -> list[str]:
    """Role `r`'s command line, with the extra arguments for it (`extra[ROLE]`) and all ("*")."""
    argv = [str((dep_dir / r["file"]).resolve()), "--steps", str(steps), "--deadline-ms",
            str(deadline_ms), "--events", str((rdir / "events" / f"{r['role']}.log").resolve())]
    if r.get("rank") is not None:        # an index node's member is chosen by its rank
        argv += ["--rank", str(r["rank"])]
    if r["listens"]:
        argv += ["--listen", f"127.0.0.1:{ports[r['role']]}"]
    if r["parent"]:
        argv += ["--parent", f"127.0.0.1:{ports[r['parent']]}"]
    if r.get("mesh"):
        argv += ["--mesh", f"127.0.0.1:{mesh_base}+{{}}"]
    return argv + extra.get(r["role"], []) + extra.get("*", [])


def parse_fault(text: str, table: dict) -> Fault:
    """`ROLE@STEP[:HOW]` (HOW one of supervise.HOWS, default kill) of a role of `table`."""
    m = re.fullmatch(r"([A-Za-z0-9_.+-]+)@([0-9]{1,15})(?::(\w+))?", text)
    if not m or m[1] not in {r["role"] for r in table["roles"]} or (m[3] or "kill") not in HOWS \
            or int(m[2]) < 1:
        raise Refusal("launch-input", f"--fail {text!r}: not ROLE@STEP[:HOW] with a role of "
                                      f"{table['deployment']}, a step from 1 and HOW one of {', '.join(HOWS)}")
    return Fault(m[1], int(m[2]), m[3] or "kill")


def failed_roles(runs: list[RoleRun], done: list[Fault]) -> list[str]:
    """The roles that failed an attempt: those a fault was done to; else those ended by a signal
    or refusing anything but peer-lost (which a peer of a failed role refuses); else every role
    that did not exit 0."""
    named = sorted({f.role for f in done}) or [r.role for r in runs if r.exit and r.exit < 0]
    refused = [r.role for r in runs if r.exit and "refused: peer-lost" not in r.stderr]
    return named or refused or [r.role for r in runs if r.exit != 0]


def first_step_ms(events: Path, since_ns: int) -> float | None:
    """Milliseconds from `since_ns` (CLOCK_MONOTONIC) to the first step in the stream `events`."""
    try:
        steps = [t for what, t in stream_events(stream_lines(events), True) if what.startswith("step ") and t]
    except OSError:
        return None
    return round((steps[0] - since_ns) / 1e6, 3) if steps else None


def resume_point(resume: str | Path | None) -> tuple[Path | None, int]:
    """The checkpoint a run resumes from, and its step: `resume` itself, or, for a directory of
    periodic checkpoints, its newest complete one (`launch-input` when it has none)."""
    if resume is None:
        return None, 0
    resume = Path(resume)
    if not (resume / "MANIFEST").exists() and any(resume.glob("v*")):
        found = newest(resume)
        if found is None:
            raise Refusal("launch-input", f"{resume} holds no complete checkpoint")
        return found
    try:
        return resume, read_manifest(resume / "MANIFEST").version
    except CheckpointError:
        return resume, 0                # the roles refuse it by name


def launch(dep_dir: str | Path, steps: int = 5, deadline_ms: int = 10000,
           records: str | Path = "runs", extra: dict[str, list[str]] | None = None,
           kill: tuple[str, float] | None = None, checkpoint: str | Path | None = None,
           resume: str | Path | None = None, targets: dict[str, str] | None = None,
           key: str | Path | None = None, progress=None, data: str | Path | None = None,
           gpu_wrapper: list[str] | None = None, checkpoint_every: int | None = None,
           keep: int | None = None, fail: list[str] = (), restarts: int = 0,
           shrink: bool = False, authenticate: bool = True, metrics=None) -> dict:
    """Run a built deployment; the run record (also written under `records`). `progress`: a stream
    for the root's steps; `metrics`: one for each step's loss as a JSON line (metrics.py) as the
    root writes it (a restarted attempt's steps come again); `data`: the owners' `--data`; `gpu_wrapper`: before each GPU owner;
    `checkpoint_every` K and `keep` N: checkpoint/v<step> after every K-th step, the last N kept;
    `fail`: faults to do to the roles, `ROLE@STEP[:HOW]` (supervise.Injector); `restarts` R: a
    failed run restarted from the newest complete checkpoint up to R times, on the same roles, or
    with `shrink` (exact_sum only) on the surviving owners (tools/shrink.py); `authenticate`: give
    the roles a run key (False only to measure what it costs)."""
    dep_dir = Path(dep_dir)
    if (checkpoint_every or keep) and checkpoint is None:
        raise Refusal("launch-input", "--checkpoint-every and --keep need --checkpoint DIR")
    if (restarts or shrink) and not (checkpoint is not None and checkpoint_every):
        raise Refusal("launch-input", "--restarts and --shrink need --checkpoint DIR --checkpoint-every K "
                                      "(a failed run resumes from the newest complete checkpoint)")
    resume, start = resume_point(resume)
    end = start + steps
    table, manifest, mpath, hashes = load_build(dep_dir)
    if shrink:                          # refused by name before anything starts; imported here:
        from alphac.tools.shrink import build as shrink_build, check_source   # the compiler's
        src, plan = check_source(table, manifest)                             # modules, only then
    if targets:                        # run other builds of the roles (e.g. every owner swapped)
        for r in table["roles"]:
            r["target"] = targets.get(r["role"], r["target"])
    emulate = emulators(table)                           # 1. the inputs, before anything starts
    faults = [parse_fault(f, table) for f in fail]
    secret = record_key(key)
    nonce = os.urandom(16).hex()
    k = run_key(secret, nonce)
    run_env = {k: v for k, v in os.environ.items() if k != "ALPHAC_RUN_KEY"}
    if authenticate:                                      # the run's key (docs/distribution.md)
        run_env["ALPHAC_RUN_KEY"] = os.urandom(32).hex()  # getrandom(2)
    rdir = new_record_dir(Path(records), table["deployment"])
    reserve_record(rdir, *space_needed(table, steps, mpath))
    extra = {k: list(v) for k, v in (extra or {}).items()}
    for flag, path in (("--checkpoint", checkpoint), ("--data", data)):
        if path is not None:
            extra.setdefault("*", []).extend([flag, str(Path(path).resolve())])
    for flag, n in (("--checkpoint-every", checkpoint_every), ("--keep", keep)):
        if n:
            extra.setdefault("*", []).extend([flag, str(n)])
    failures, first, resume0, curve, fired, at_ns = [], start, resume, [], [], {}
    while True:                                          # 2. the roles' addresses and command lines
        taken: set[int] = set()
        ports = {r["role"]: free_port(taken) for r in table["roles"] if r["listens"]}
        mesh = [r["rank"] for r in table["roles"] if r.get("mesh")]
        mesh_base = free_ports_at(mesh, taken) if mesh else None
        more = {**extra, "*": extra.get("*", []) + (["--resume", str(resume.resolve())] if resume else [])}
        runs = []
        for r in table["roles"]:           # the emulator its target needs here, or a GPU owner's wrapper
            before = emulate.get(r["target"]) or (list(gpu_wrapper) if "+" in r["target"] and gpu_wrapper else [])
            runs.append(RoleRun(r["role"], r["target"], hashes[r["file"]], artifact_key(dep_dir, mpath, r["file"]),
                                before + role_argv(dep_dir, r, end - first, deadline_ms, rdir, ports, mesh_base, more),
                                {**run_env, "ALPHAC_EVENTS_KEY": events_key(k, r["role"]).hex()}))
        try:                                             # 3. the run
            if progress or metrics:
                shown = Progress(rdir / "events" / f"{table['root']}.log", first, end, progress, metrics)
                shown.start()
            parents = {r["role"]: ports.get(r["parent"]) for r in table["roles"]}
            interrupted = run_roles(runs, deadline_ms, kill, faults, rdir / "events", parents.get)
            if progress or metrics:
                shown.finish()
        except OSError as e:              # an executable the manifest lists that cannot be executed
            raise Refusal("launch-input", f"{e.filename}: {e.strerror}")
        if failures:                     # failure to the first step after it (the roles' clock)
            failures[-1]["recover_ms"] = first_step_ms(rdir / "events" / f"{table['root']}.log",
                                                       at_ns[len(failures)])
        passed = all(r.exit == 0 for r in runs)
        if interrupted or passed or len(failures) >= restarts:
            break
        # a failure: this attempt's roles and streams kept under attempts/N; then the restart
        n = len(failures) + 1
        gone = make_record(table, runs, end, manifest, mpath, rdir)
        (rdir / "attempts").mkdir(exist_ok=True)
        os.rename(rdir / "events", rdir / "attempts" / str(n))
        (rdir / "events").mkdir()
        for r in gone["roles"]:
            r["stream"]["file"] = f"attempts/{n}/{r['role']}.log"
        curve += gone["loss"]
        done = [f for f in faults if f.at_ns is not None and f.role in {r.role for r in runs} and f not in fired]
        fired += done
        failed = failed_roles(runs, done)
        found = newest(Path(checkpoint))
        resume, first = found if found else (resume0, start)
        entry = {"attempt": n, "failed": failed, "roles": gone["roles"],
                 "faults": [{"role": f.role, "step": f.step, "how": f.how} for f in done],
                 "resumed_from": {"checkpoint": resume.name if found else None, "step": first}}
        at_ns[n] = min([f.at_ns for f in done], default=time.monotonic_ns())
        owners = sorted(int(f.rpartition(".")[2]) for f in failed if f.rpartition(".")[0] == plan.dep.owner) \
            if shrink else []
        try:                             # the survivors, rebuilt (tools/shrink.py)
            if owners and len(owners) < plan.dep.owners:
                dep_dir, plan = shrink_build(src, plan, owners, rdir / f"shrink-{n}")
                table, manifest, mpath, hashes = load_build(dep_dir)
                emulate = emulators(table)
        except Refusal as e:             # then on the same roles, and the record says why
            entry["not_shrunk"] = e.detail
        entry.update(deployment=table["deployment"], membership=[r["role"] for r in table["roles"]])
        failures.append(entry)
        if progress:
            print(f"launch: {', '.join(failed)} failed; restart {n} of {restarts} from "
                  f"{entry['resumed_from']['checkpoint'] or 'the start'} (step {first})", file=progress, flush=True)
    # 4. the record
    record = make_record(table, runs, end, manifest, mpath, rdir)
    if start:
        record["resumed_at"] = start
    if faults:
        record["faults"] = [{"role": f.role, "step": f.step, "how": f.how, "done": f.at_ns is not None}
                            for f in faults]
    if failures:                        # the loss curve: each step's last computation
        record["failures"] = failures
        record["loss"] = sorted({e["step"]: e for e in curve + record["loss"]}.values(), key=lambda e: e["step"])
    if interrupted:
        record["interrupted"] = interrupted
    try:
        record["path"] = str(write_record(rdir, seal(record, rdir, secret, nonce)))
    except OSError as e:
        ck = f"; its checkpoint was published in {checkpoint}" if checkpoint and record["passed"] \
            else ""
        raise Refusal("record-write", f"{rdir / 'record.json'}: {e.strerror or e}: the run "
                                      f"{'passed' if record['passed'] else 'failed'}, but its record "
                                      f"is lost{ck}; its events are in {rdir / 'events'}")
    if interrupted:
        raise Refusal("launch-interrupted", f"{interrupted}; run record {record['path']}")
    return record


# what a GPU owner's start-up refusal means of this host, for `failures`
CARD_REFUSED = {"nvidia-open": "this host has no such device file (no NVIDIA driver, or no card at "
                               "that minor), or may not open it",
                "device-uuid": "this host's card at that minor is another card",
                "nvidia-plan-host": "this host's driver or card is not the one described"}


def failures(record: dict) -> list[str]:
    """A failed run's roles, one line each (`ROLE: refused: NAME (DETAIL)`, or its exit and why the
    launcher ended it), and for a GPU owner refused at start the card it was built for (from the
    build manifest the record names) and what to do; then where to read about the first refusal."""
    from alphac.manifest import ManifestError, load as load_manifest
    try:
        artifacts = load_manifest(record["build"]["manifest"])["artifacts"]
    except (ManifestError, KeyError, TypeError):
        artifacts = {}
    lines, first = [], None
    for r in record["roles"]:
        if r["exit"] == 0:
            continue
        detail = f" ({r['detail']})" if r.get("detail") else ""
        lines.append(f"{r['role']}: " + (f"refused: {r['refused']}{detail}" if r["refused"] else
                                         f"{r['detail']} (signal {-r['exit']})" if r.get("detail") and r["exit"] < 0
                                         else f"exit {r['exit']}{detail}"))
        first = first or r["refused"]
        card = artifacts.get(r.get("artifact"), {}).get("recipe", {}).get("card")
        if r["refused"] in CARD_REFUSED and isinstance(card, dict):
            lines.append(f"  {r['role']} was built for {card.get('product')} {card.get('uuid')} (driver "
                         f"{card.get('driver')}, /dev/nvidia{card.get('minor')}); {CARD_REFUSED[r['refused']]}: "
                         f"run it on that host, or rebuild the owner for this one (alphac build ... "
                         f"--gpu-host FILE: docs/nvdrv.md)")
    if first:
        lines.append(f"what `refused: {first}` means and what to do: alphac explain {first}")
    return lines