"""`alphac launch DIR`: the runner, which runs a built deployment on this machine, in the order
docs/runtime.md gives: the inputs checked before anything starts (table.py; record.py's key,
directory and reserved space); the roles' loopback ports and command lines (role_argv, with the
emulator each target needs here: alphac.targets); the run (supervise.py); the record (record.py).
Room for what comes next: recovery (a failed role restarted from the last checkpoint) and
periodic checkpoints (issue 44) are the runner's, around the run (a loop around `run_roles` that
restarts roles with `--resume`, every attempt's streams in the one record); the record's format,
the table and the supervision stay as they are.
"""
from __future__ import annotations

import os
import random
import shutil
import socket
from pathlib import Path

from alphac.refusals import Refusal
from alphac.targets import LEVELS, below, emulator, host_runs, names
from alphac.tools.record import (events_key, make_record, new_record_dir, record_key, reserve_record,
                                 run_key, seal, space_needed, write_record)
from alphac.tools.supervise import Progress, RoleRun, run_roles
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
    """The table's targets -> what runs their roles here (alphac.targets); else `launch-tool`."""
    emulate = {}
    for t in sorted({r["target"] for r in table["roles"]} & set(names())):
        how = [] if host_runs(t) else emulator(t)
        if how is None:
            raise Refusal("launch-tool", f"{t} roles need a CPU with {LEVELS[t].extension} (qemu does "
                                         f"not emulate it); build them for {' or '.join(below(t))}")
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


def launch(dep_dir: str | Path, steps: int = 5, deadline_ms: int = 10000,
           records: str | Path = "runs", extra: dict[str, list[str]] | None = None,
           kill: tuple[str, float] | None = None, checkpoint: str | Path | None = None,
           resume: str | Path | None = None, targets: dict[str, str] | None = None,
           key: str | Path | None = None, progress=None, data: str | Path | None = None,
           gpu_wrapper: list[str] | None = None) -> dict:
    """Run a built deployment; the run record (also written under `records`). `progress`: a stream
    for the root's steps; `data`: the owners' `--data`; `gpu_wrapper`: before each GPU owner."""
    dep_dir = Path(dep_dir)
    table, manifest, mpath, hashes = load_build(dep_dir)
    if targets:                        # run other builds of the roles (e.g. every owner swapped)
        for r in table["roles"]:
            r["target"] = targets.get(r["role"], r["target"])
    emulate = emulators(table)                           # 1. the inputs, before anything starts
    secret = record_key(key)
    nonce = os.urandom(16).hex()
    k = run_key(secret, nonce)
    rdir = new_record_dir(Path(records), table["deployment"])
    reserve_record(rdir, *space_needed(table, steps, mpath))
    taken: set[int] = set()                              # 2. the roles' addresses and command lines
    ports = {r["role"]: free_port(taken) for r in table["roles"] if r["listens"]}
    mesh = [r["rank"] for r in table["roles"] if r.get("mesh")]
    mesh_base = free_ports_at(mesh, taken) if mesh else None
    extra = {k: list(v) for k, v in (extra or {}).items()}
    for flag, path in (("--checkpoint", checkpoint), ("--resume", resume), ("--data", data)):
        if path is not None:
            extra.setdefault("*", []).extend([flag, str(Path(path).resolve())])
    runs = []
    for r in table["roles"]:               # the emulator its target needs here, or a GPU owner's wrapper
        before = emulate.get(r["target"]) or (list(gpu_wrapper) if "+" in r["target"] and gpu_wrapper else [])
        runs.append(RoleRun(r["role"], r["target"], hashes[r["file"]], artifact_key(dep_dir, mpath, r["file"]),
                            before + role_argv(dep_dir, r, steps, deadline_ms, rdir, ports, mesh_base, extra),
                            {**os.environ, "ALPHAC_EVENTS_KEY": events_key(k, r["role"]).hex()}))
    # 3. the run (issue 44's recovery and periodic checkpoints go around this call: see above)
    try:
        if progress:
            shown = Progress(rdir / "events" / f"{table['root']}.log", steps, progress)
            shown.start()
        interrupted = run_roles(runs, deadline_ms, kill)
        if progress:
            shown.finish()
    except OSError as e:              # an executable the manifest lists that cannot be executed
        raise Refusal("launch-input", f"{e.filename}: {e.strerror}")
    # 4. the record
    record = make_record(table, runs, steps, manifest, mpath, rdir)
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