"""`alphac launch`: the local qualification driver for a built deployment.

    alphac launch build/roles/lsq_adam_star [--steps N] [--deadline-ms MS] [--records DIR]
                                            [--record-key FILE]

What it does, in order, and nothing else (no launcher decides anything about the learning):
1. reads the build's MANIFEST.json (found in the directory or above it) and `roles.json`
   (written by the build), refusing either by name when it is malformed (`launch-input`), and
   checks the SHA-256 of `roles.json` and of every role executable against the manifest
   (`artifact-hash`); reads the record key (`record-key`), makes the run's record directory and
   reserves the space its record needs, checking that the roles' events have room too
   (`records-dir`; space_needed). Nothing has started yet, so a refusal here leaves nothing
   behind to lose;
2. picks free loopback ports for the roles that listen, starts every role (AArch64 roles under
   qemu-aarch64 unless this host is AArch64) in one process group of their own, each writing
   its events into the record directory. Every role dies with the launcher (PR_SET_PDEATHSIG,
   set between fork and exec), and SIGINT, SIGTERM or SIGHUP to the launcher ends them all and
   is then refused as `launch-interrupted`, after the record is written;
3. waits for all of them (bounded: the deadline plus a margin), kills none unless the bound
   passes;
4. writes the run record (DESIGN.md contract 11, docs/runtime.md): host, each role's ISA,
   artifact hash, exit code, refusal and event stream, the published state, whether the run
   passed, all authenticated with HMAC-SHA-256 under a key the launcher holds and never writes
   down (`verify_record` checks it and recomputes what follows from the rest);
5. prints the published state on stdout exactly as the root printed it.

Authentication: the record key (32 random bytes in `$ALPHAC_RECORD_KEY`, by default
~/.config/alphac/record-key, made with mode 0600 on first use) and a random nonce kept in the
record give the run key `k = HMAC(key, "alphac-run-key|" + nonce)`. Each role authenticates its
own events as it writes them, in the runtime (alphac/runtime/core.rt), under its events key
`HMAC(k, "alphac-events-key|" + role)`, given in its environment (ALPHAC_EVENTS_KEY), never on a
command line: every line ends with its MAC. After the run, each stream is also chained,
`h_0 = HMAC(k, "alphac-events-v2|" + role)`, `h_i = HMAC(k, h_{i-1} | "|" | line_i)` (a line
with its newline), and sealed with its length and final hash; the record's `mac` is
`HMAC(k, canonical JSON of the record without "mac")`.
"""
from __future__ import annotations

import ctypes
import errno
import hashlib
import hmac
import json
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from alphac.encode import json_text
from alphac.files import LIMITS, read_json, read_regular
from alphac.manifest import ManifestError, load as load_manifest, sha256_file
from alphac.targets import LEVELS, below, emulator, host_runs, names
from alphac.refusals import Refusal

RECORD_FORMAT = 2
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")     # a role, file or deployment: one name
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class RoleRun:
    role: str
    target: str
    sha256: str
    artifact: str                      # its path in the build manifest
    argv: list[str]
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    exit: int | None = None
    stdout: str = ""
    stderr: str = ""


def is_name(v) -> bool:
    return isinstance(v, str) and NAME.match(v) is not None


def is_count(v) -> bool:
    """A whole number in ASCII decimal digits (str.isdigit alone takes `²`, which int refuses)."""
    return isinstance(v, str) and v.isascii() and v.isdigit()


def is_hex(v, digits: int) -> bool:
    return isinstance(v, str) and re.fullmatch(f"[0-9a-f]{{{digits}}}", v) is not None


def find_manifest(start: Path) -> Path:
    for d in [start, *start.parents]:
        m = d / "MANIFEST.json"
        if m.exists():
            return m
    raise Refusal("artifact-hash", f"no MANIFEST.json at or above {start}")


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
    import random
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
    import random
    low = ephemeral_low() or 32768
    for base in random.sample(range(max(1024, low - 12000), max(1025, low - max(offsets))), 64):
        ports = [base + o for o in offsets]
        if not taken.intersection(ports) and all(bound(p) == p for p in ports):
            taken.update(ports)
            return base
    raise Refusal("launch-tool", "no free block of loopback ports for the mesh")


# -- the inputs, checked before anything starts ---------------------------------------------------
def check_table(t) -> dict:
    """roles.json if it is what the launcher reads; `launch-input` otherwise."""
    def bad(why):
        return Refusal("launch-input", f"roles.json: {why}")
    if not isinstance(t, dict) or t.get("format") != 1 or not isinstance(t.get("roles"), list) \
            or not isinstance(t.get("identity"), dict):
        raise bad("not a table of format 1 with roles and an identity")
    if not t["roles"]:
        raise bad(f"it lists no roles: a fleet of {t.get('role_count')} roles (over 4096) is not "
                  "launched or gathered role by role; its `nodes` give each executable's ranks")
    if not all(isinstance(t.get(k), str) for k in ("learner", "root")) \
            or not is_name(t.get("deployment")):
        raise bad("learner, root or deployment is not a name")
    for i, r in enumerate(t["roles"]):
        if not (isinstance(r, dict) and is_name(r.get("role")) and is_name(r.get("file"))
                and isinstance(r.get("listens"), bool) and isinstance(r.get("target"), str)
                and (r.get("rank") is None or (type(r["rank"]) is int and r["rank"] >= 0))
                and (r.get("parent") is None or isinstance(r["parent"], str))
                and isinstance(r.get("mesh", False), bool)
                and (not r.get("mesh") or type(r.get("rank")) is int)):
            raise bad(f"role {i} is not a role entry")
    data = t.get("data", [])
    if not isinstance(data, list) or not all(
            isinstance(f, dict) and all(isinstance(f.get(k), str) and f[k] and "\0" not in f[k]
                                        for k in ("path", "load", "root")) for f in data):
        raise bad("`data` is not a list of the files the owners load (each a path, a load path "
                  "and a root)")
    names = [r["role"] for r in t["roles"]]
    listening = {r["role"] for r in t["roles"] if r["listens"]}
    if len(set(names)) != len(names) or t["root"] not in names \
            or any(r["parent"] is not None and r["parent"] not in listening for r in t["roles"]):
        raise bad("a role is named twice, the root is not a role, or a parent is not a listening role")
    return t


HOW = "build one with `alphac build FILE --deployment NAME -o DIR` (or `make roles`)"


def load_table(dep_dir: Path) -> tuple[dict, dict, Path]:
    table_path = dep_dir / "roles.json"
    if not dep_dir.exists():
        raise Refusal("launch-input", f"{dep_dir} does not exist; {HOW}")
    if not dep_dir.is_dir():
        raise Refusal("launch-input", f"{dep_dir} is a file, not a built deployment (a directory "
                                      f"with roles.json); {HOW}")
    if not table_path.exists():
        inner = sorted(p.parent.name for p in dep_dir.glob("*/roles.json"))
        if inner:
            raise Refusal("launch-input", f"{dep_dir} holds deployments, not one: launch one of "
                                          f"{', '.join(str(dep_dir / n) for n in inner)}")
        raise Refusal("launch-input", f"{dep_dir} has no roles.json, so it is not a built "
                                      f"deployment; {HOW}")
    mpath = find_manifest(dep_dir)
    try:
        manifest = load_manifest(mpath)
    except ManifestError as e:
        raise Refusal("launch-input", str(e))
    check_hashes(dep_dir, ["roles.json"], manifest, mpath)
    try:
        table = read_json(table_path, "roles")
    except OSError as e:
        raise Refusal("launch-input", f"roles.json: {e.strerror or e}")
    except ValueError as e:
        raise Refusal("launch-input", f"roles.json is not JSON: {e}")
    return check_table(table), manifest, mpath


def load_build(dep_dir: Path) -> tuple[dict, dict, Path, dict[str, str]]:
    """roles.json, the manifest, its path and each role file's SHA-256, all checked (load_table,
    check_hashes): what a launcher reads before anything starts (launch, alphac slurm)."""
    table, manifest, mpath = load_table(dep_dir)
    return table, manifest, mpath, check_hashes(dep_dir, sorted({r["file"] for r in table["roles"]}),
                                                manifest, mpath)


def artifact_key(dep_dir: Path, mpath: Path, name: str) -> str:
    return (dep_dir.resolve().relative_to(mpath.parent.resolve()) / name).as_posix()


def check_hashes(dep_dir: Path, names: list[str], manifest: dict, mpath: Path) -> dict[str, str]:
    """The SHA-256 of each named file (an executable, or roles.json), checked against the manifest."""
    hashes = {}
    for name in names:
        key, path = artifact_key(dep_dir, mpath, name), dep_dir / name
        if path.exists() and not (path.is_file() and (name == "roles.json" or os.access(path, os.X_OK))):
            raise Refusal("launch-input", f"{key} is not an executable regular file")
        entry = manifest["artifacts"].get(key)
        try:
            same = entry is not None and path.exists() and sha256_file(path) == entry["sha256"]
        except OSError as e:
            raise Refusal("launch-input", f"{key}: {e.strerror}")
        if not same:
            raise Refusal("artifact-hash", f"{key} does not match the manifest")
        hashes[name] = entry["sha256"]
    return hashes


def new_record_dir(records: Path, name: str) -> Path:
    """`records/NAME-NNNN` with its `events/` folder, NNNN the first number not yet taken;
    `records-dir` when it cannot be made (so that nothing runs whose record would be lost)."""
    try:
        records.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            rdir = records / f"{name}-{n:04d}"
            try:
                rdir.mkdir()
                break
            except FileExistsError:
                n += 1
        (rdir / "events").mkdir()
    except OSError as e:
        raise Refusal("records-dir", f"{records}: {e.strerror or e}")
    return rdir


# The space a run's record needs, reserved before anything starts (a full disk under --records
# refuses the run, records-dir, rather than losing its record after it): a record of R roles
# and N steps is at most RECORD_FIXED + R * RECORD_PER_ROLE + N * RECORD_PER_STEP bytes (a loss
# entry is at most 190 bytes of indented JSON: 24 of decimal, 16 and 16 hex digits, 20 and 15
# of counts) plus the published state's, which the launcher cannot know before the run:
# PUBLISHED_RESERVE bytes are reserved for it (about 2,000 coordinates; a larger state that
# then finds the disk full is refused record-write, by name, saying where the checkpoint is).
# The roles' events need at most EVENT_LINE bytes a line, EVENTS_PER_STEP lines a step (the
# root's step and loss) and EVENTS_FIXED more (connect, data, checkpoint, finish): that much
# free space is checked for too, not held, since the roles write their streams themselves.
# Steps count up to RESERVE_STEPS (a record of about 20 MB): a longer run (a count given to be
# ended by a signal, say) reserves as much, and past it a full disk is refused record-write.
RECORD_FIXED, RECORD_PER_ROLE, RECORD_PER_STEP, PUBLISHED_RESERVE = 8192, 1024, 200, 65536
EVENT_LINE, EVENTS_PER_STEP, EVENTS_FIXED = 192, 2, 32
RESERVE_STEPS = 100_000
RESERVED = "record.json.tmp"            # the reservation, which becomes the record


def space_needed(table: dict, steps: int, mpath: Path) -> tuple[int, int]:
    """(bytes reserved for the record, bytes of free space the roles' events need)."""
    roles, steps = table["roles"], min(steps, RESERVE_STEPS)
    record = RECORD_FIXED + len(str(mpath.resolve())) + PUBLISHED_RESERVE + steps * RECORD_PER_STEP \
        + sum(RECORD_PER_ROLE + 2 * len(r["file"]) + 2 * len(r["role"]) for r in roles)
    events = len(roles) * EVENT_LINE * (EVENTS_PER_STEP * steps + EVENTS_FIXED)
    return record, events


def reserve_record(rdir: Path, record: int, events: int) -> None:
    """Hold `record` bytes for the record (RESERVED, allocated) and check that `events` more are
    free, before anything starts; records-dir otherwise, the record directory removed."""
    try:
        fd = os.open(rdir / RESERVED, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                os.posix_fallocate(fd, 0, record)
            except OSError as e:        # a file system that cannot allocate: zeros written
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                    raise
                for at in range(0, record, 1 << 16):
                    os.write(fd, bytes(min(1 << 16, record - at)))
        finally:
            os.close(fd)
        st = os.statvfs(rdir)
        if st.f_bavail * st.f_frsize < events:
            raise OSError(errno.ENOSPC, f"{events} bytes are needed for the roles' events, "
                                        f"{st.f_bavail * st.f_frsize} are free")
    except OSError as e:
        shutil.rmtree(rdir, ignore_errors=True)
        raise Refusal("records-dir", f"{rdir}: cannot reserve {record} bytes for the run's record "
                                     f"and find {events} for its events: {e.strerror or e}; nothing "
                                     "was started")


# -- the key ---------------------------------------------------------------------------------------
def record_key(path: str | Path | None = None, create: bool = True) -> bytes:
    """The launcher's secret: the file `path`, else $ALPHAC_RECORD_KEY, else
    ~/.config/alphac/record-key; made (32 random bytes, mode 0600) when absent and `create`."""
    p = Path(path or os.environ.get("ALPHAC_RECORD_KEY") or Path.home() / ".config/alphac/record-key")
    try:
        if create and not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = p.with_name(f".{p.name}.{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(os.urandom(32))
            try:
                os.link(tmp, p)                 # atomic: a key another launcher made first wins
            except FileExistsError:
                pass
            os.unlink(tmp)
        if p.stat().st_mode & 0o077:
            raise Refusal("record-key", f"{p} can be read or written by others (chmod 600 it)")
        key = read_regular(p, LIMITS["record-key"][0])
    except OSError as e:
        raise Refusal("record-key", f"{p}: {e.strerror or e}")
    if len(key) < 32:
        raise Refusal("record-key", f"{p} holds fewer than 32 bytes")
    return key


def key_id(key: bytes) -> str:
    """Names the key in a record without revealing it."""
    return hmac.new(key, b"alphac-key-id", "sha256").hexdigest()[:16]


def run_key(key: bytes, nonce: str) -> bytes:
    return hmac.new(key, b"alphac-run-key|" + nonce.encode(), "sha256").digest()


def stream_lines(path: Path) -> list[bytes]:
    """A stream's lines, each with its newline (so that a trailing newline counts too); OSError
    when it is not a regular file or is larger than its limit (alphac.files.LIMITS)."""
    parts = read_regular(path, LIMITS["stream"][0]).split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def chain(k: bytes, role: str, lines: list[bytes]) -> str:
    h = hmac.new(k, b"alphac-events-v2|" + role.encode(), "sha256").digest()
    for line in lines:
        h = hmac.new(k, h + b"|" + line, "sha256").digest()
    return h.hex()


def events_key(k: bytes, role: str) -> bytes:
    return hmac.new(k, b"alphac-events-key|" + role.encode(), "sha256").digest()


def role_events(k: bytes, lines: list[bytes]) -> list[str] | None:
    """The events of a stream a role wrote under its events key `k` (each line "TEXT MAC",
    MAC_i = HMAC(k, MAC_{i-1} | TEXT), MAC_0 = HMAC(k, "alphac-events-v2")), or None unless
    every line is complete and authentic."""
    mac = hmac.new(k, b"alphac-events-v2", "sha256").digest()
    texts = []
    for line in lines:
        text, _, got = line.rstrip(b"\n").rpartition(b" ")
        mac = hmac.new(k, mac + text, "sha256").digest()
        if not line.endswith(b"\n") or not hmac.compare_digest(got, mac.hex().encode()):
            return None
        texts.append(text.decode(errors="replace"))
    return texts


def split_event(text: str) -> tuple[str, int | None]:
    """("step 3 comm 120", 81234567) from "step 3 comm 120 @81234567": what the role said, and
    when (its monotonic clock, ns); None when the line has no time."""
    what, at, ns = text.rpartition(" @")
    return (what, int(ns)) if at and is_count(ns) else (text, None)


def stream_events(lines: list[bytes], authenticated: bool) -> list[tuple[str, int | None]]:
    """(what, ns) per line of a stream; `authenticated`: each line ends with its MAC (not
    checked here: verify_record does)."""
    out = []
    for line in lines:
        text = line.decode(errors="replace").rstrip("\n")
        out.append(split_event(text.rpartition(" ")[0] if authenticated else text))
    return out


def timing(events: list[tuple[str, int | None]]) -> dict | None:
    """A role's durations (ms) from its events: connecting (start to `connected`), the steps
    (`connected` to the last step), time in frames during the steps, the whole run."""
    times = {what.split(" ")[0]: t for what, t in events if t is not None}
    if not events or any(t is None for _, t in events):
        return None
    first, last = events[0][1], events[-1][1]
    steps = [(what, t) for what, t in events if what.startswith("step ")]
    frames = sum(int(w.split(" comm ")[1]) for w, _ in steps if is_count(w.partition(" comm ")[2]))
    ms = lambda ns: round(ns / 1e6, 3)
    out = {"total_ms": ms(last - first), "steps": len(steps), "frames_ms": ms(frames)}
    if "connected" in times:
        out["connect_ms"] = ms(times["connected"] - first)
        out["steps_ms"] = ms((steps[-1][1] if steps else times["connected"]) - times["connected"])
    return out


def peak_kib(events: list[tuple[str, int | None]]) -> int | None:
    """The role's peak resident memory (KiB), from its `peak_rss_kib N` event (VmHWM, read by
    the role itself as it ends: its own memory, not the launcher's that it was forked from)."""
    for what, _ in reversed(events):
        parts = what.split(" ")
        if len(parts) == 2 and parts[0] == "peak_rss_kib" and is_count(parts[1]):
            return int(parts[1])
    return None


def losses(events: list[tuple[str, int | None]]) -> list[dict]:
    """Each step's mean loss, from the root's `loss V HEX N` events: the combined loss sum (its
    bits) over n samples, and the mean sum / n (one binary64 division, as learner_mean does),
    exactly (`mean` as 16 hex digits) and in decimal (the shortest that reads back)."""
    out = []
    for what, _ in events:
        parts = what.split(" ")
        if len(parts) == 4 and parts[0] == "loss" and is_count(parts[1]) and is_count(parts[3]) \
                and is_hex(parts[2], 16) and int(parts[3]) > 0:
            mean = struct.unpack("<d", int(parts[2], 16).to_bytes(8, "little"))[0] / int(parts[3])
            out.append({"step": int(parts[1]) + 1, "sum": parts[2], "n": int(parts[3]),
                        "mean": struct.pack(">d", mean).hex(), "decimal": repr(mean)})
    return out


def record_mac(k: bytes, record: dict) -> str:
    body = {f: v for f, v in record.items() if f != "mac"}
    return hmac.new(k, json.dumps(body, sort_keys=True, separators=(",", ":")).encode(),
                    "sha256").hexdigest()


def seal(record: dict, rdir: Path, key: bytes, nonce: str | None = None) -> dict:
    """`record` authenticated under the run key of `nonce` (a fresh one by default): each role's
    stream (read from `rdir`) chained and sealed, then the whole record MACed."""
    nonce = nonce or os.urandom(16).hex()
    k = run_key(key, nonce)
    record["auth"] = {"alg": "HMAC-SHA-256", "key_id": key_id(key), "nonce": nonce}
    for r in record["roles"]:
        if "stream" in r:
            f = rdir / r["stream"]["file"]
            lines = stream_lines(f) if f.exists() else []
            r["stream"].update(count=len(lines), seal=chain(k, r["role"], lines))
    record["mac"] = record_mac(k, record)
    return record


def write_record(rdir: Path, record: dict) -> Path:
    """record.json in `rdir`, written into the space reserve_record held (when it did: the file
    is not truncated before the write, only cut to the record's length after), fsynced, renamed
    into place."""
    tmp = rdir / RESERVED
    data = (json_text(record, indent=2) + "\n").encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, rdir / "record.json")
    return rdir / "record.json"


# -- running the roles -----------------------------------------------------------------------------
class Interrupted(Exception):
    pass


def _interrupt(signum, frame):
    for s in INTERRUPTS:                   # once: ending the roles is not itself interrupted
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


def _die_with(launcher: int) -> None:
    """In a role, between fork and exec: die when the launcher does, even if it already has."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != launcher:
        os._exit(1)


class Progress(threading.Thread):
    """Steps done by the root, from its event stream, on standard error every half second:
    `step K/N, S steps/s, about T s left`; a last line when the run ends."""

    def __init__(self, events: Path, steps: int, out):
        super().__init__(daemon=True)
        self.events, self.steps, self.out = events, steps, out
        self.start_time, self.stop = time.monotonic(), threading.Event()

    def done(self) -> tuple[int, str]:
        """Steps the root has done, and its last mean loss in decimal ("" before one)."""
        try:
            lines = self.events.read_bytes().split(b"\n")
        except OSError:
            return 0, ""
        loss = losses(stream_events([line for line in lines if line.startswith(b"loss ")][-1:], True))
        return sum(1 for line in lines if line.startswith(b"step ")), \
            (f", loss {float(loss[0]['decimal']):.6g}" if loss else "")

    def line(self, final: bool) -> str:
        (k, loss), dt = self.done(), time.monotonic() - self.start_time
        rate = k / dt if dt > 0 else 0.0
        left = f", about {(self.steps - k) / rate:.0f} s left" if rate and not final else ""
        return f"launch: step {k}/{self.steps}{loss}, {rate:.1f} steps/s{left}"

    def run(self) -> None:
        while not self.stop.wait(0.5):
            print("\r" + self.line(False), end="", file=self.out, flush=True)

    def finish(self) -> None:
        self.stop.set()
        self.join()
        print("\r" + self.line(True), file=self.out, flush=True)


def run_roles(runs: list[RoleRun], deadline_ms: int, kill: tuple[str, float] | None) -> str | None:
    """Start every role in one new process group, wait for all (bounded), and on any way out
    end whatever is still running; the name of the signal that interrupted us, or None."""
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _interrupt) for s in INTERRUPTS     # an ignored signal
                    if signal.getsignal(s) is not signal.SIG_IGN}              # stays ignored (nohup)
    files = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in runs]
    interrupted, overdue = None, set()
    try:
        for run, (out, err) in zip(runs, files):
            group = runs[0].proc.pid if runs[0].proc else 0
            run.proc = subprocess.Popen(run.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=run.env,
                                        process_group=group, preexec_fn=partial(_die_with, os.getpid()))
        if kill is not None:
            victim, after = kill
            time.sleep(after)
            for run in runs:
                if run.role == victim and run.proc.poll() is None:
                    run.proc.kill()
        bound = deadline_ms / 1000 * 4 + 30
        start = time.monotonic()
        for run in runs:
            try:
                run.proc.wait(timeout=max(0.1, bound - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                run.proc.kill()
                overdue.add(run.role)
    except Interrupted as e:
        interrupted = e.args[0]
    finally:
        started = [run.proc for run in runs if run.proc]
        if any(p.poll() is None for p in started):   # the unreaped one keeps the group's id ours
            os.killpg(started[0].pid, signal.SIGKILL)
        for p in started:
            p.wait()
        for s, h in handlers.items():
            signal.signal(s, h)
    for run, (out, err) in zip(runs, files):
        if run.proc:
            run.exit = run.proc.returncode
        for fh, field in ((out, "stdout"), (err, "stderr")):
            fh.seek(0)
            setattr(run, field, fh.read().decode(errors="replace"))
            fh.close()
        run.stderr += "launcher: killed after the bound\n" if run.role in overdue else ""
    return interrupted


def launch(dep_dir: str | Path, steps: int = 5, deadline_ms: int = 10000,
           records: str | Path = "runs", extra: dict[str, list[str]] | None = None,
           kill: tuple[str, float] | None = None, checkpoint: str | Path | None = None,
           resume: str | Path | None = None, targets: dict[str, str] | None = None,
           key: str | Path | None = None, progress=None, data: str | Path | None = None,
           gpu_wrapper: list[str] | None = None) -> dict:
    """Run a built deployment; returns the run record (also written under `records`). With
    `progress` (a text stream, standard error), the root's steps are shown there as they go;
    with `data`, the owners read the learner's loaded data from that directory (`--data`);
    `gpu_wrapper` prefixes each GPU owner's command line."""
    dep_dir = Path(dep_dir)
    table, manifest, mpath, hashes = load_build(dep_dir)
    if targets:                        # run other builds of the roles (e.g. every owner swapped)
        for r in table["roles"]:
            r["target"] = targets.get(r["role"], r["target"])
    emulate = {}                       # target -> the command that runs its roles on this host
    for t in sorted({r["target"] for r in table["roles"]} & set(names())):
        how = [] if host_runs(t) else emulator(t)
        if how is None:
            raise Refusal("launch-tool", f"{t} roles need a CPU with {LEVELS[t].extension} (qemu does "
                                         f"not emulate it); build them for {' or '.join(below(t))}")
        if how and shutil.which(how[0]) is None:
            raise Refusal("launch-tool", f"{how[0]} is needed for {t} roles on this host")
        emulate[t] = [shutil.which(how[0]), *how[1:]] if how else []
    secret = record_key(key)
    nonce = os.urandom(16).hex()
    k = run_key(secret, nonce)
    rdir = new_record_dir(Path(records), table["deployment"])
    reserve_record(rdir, *space_needed(table, steps, mpath))
    taken: set[int] = set()
    ports = {r["role"]: free_port(taken) for r in table["roles"] if r["listens"]}
    mesh = [r["rank"] for r in table["roles"] if r.get("mesh")]
    mesh_base = free_ports_at(mesh, taken) if mesh else None
    extra = {k: list(v) for k, v in (extra or {}).items()}
    for flag, path in (("--checkpoint", checkpoint), ("--resume", resume), ("--data", data)):
        if path is not None:
            extra.setdefault("*", []).extend([flag, str(Path(path).resolve())])
    runs: list[RoleRun] = []
    for r in table["roles"]:
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
        argv += extra.get(r["role"], []) + extra.get("*", [])
        if emulate.get(r["target"]):
            argv = emulate[r["target"]] + argv
        elif "+" in r["target"] and gpu_wrapper:        # a GPU owner (x86_64+sm_NN)
            argv = list(gpu_wrapper) + argv
        env = {**os.environ, "ALPHAC_EVENTS_KEY": events_key(k, r["role"]).hex()}
        runs.append(RoleRun(r["role"], r["target"], hashes[r["file"]],
                            artifact_key(dep_dir, mpath, r["file"]), argv, env))
    try:
        if progress:
            shown = Progress(rdir / "events" / f"{table['root']}.log", steps, progress)
            shown.start()
        interrupted = run_roles(runs, deadline_ms, kill)
        if progress:
            shown.finish()
    except OSError as e:              # an executable the manifest lists that cannot be executed
        raise Refusal("launch-input", f"{e.filename}: {e.strerror}")
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


# -- the record --------------------------------------------------------------------------------------
PASS_RULES = {   # what `passed` must be, from the rest of a record of each kind
    "launch": lambda rec: all(r["exit"] == 0 for r in rec["roles"]) and bool(rec["published"]),
    "gpu-qualification": lambda rec: bool(rec["roles"]) and all(
        r["exit"] == 0 and r.get("equals_interpreter") is True and r.get("equals_oracle") is True
        for r in rec["roles"]),
}


def make_record(table: dict, runs: list[RoleRun], steps: int, manifest: dict, mpath: Path,
                rdir: Path) -> dict:
    roles = []
    for run in runs:
        refused = next((l[len("refused: "):] for l in run.stderr.splitlines()
                        if l.startswith("refused: ")), None)
        roles.append({"role": run.role, "isa": run.target, "sha256": run.sha256,
                      "artifact": run.artifact,
                      "exit": run.exit, "refused": refused,
                      "signal": -run.exit if run.exit is not None and run.exit < 0 else None,
                      "stream": {"file": f"events/{run.role}.log"}})
        f = rdir / roles[-1]["stream"]["file"]
        events = stream_events(stream_lines(f), True) if f.is_file() else []
        roles[-1]["timing"] = timing(events) if f.is_file() else None
        roles[-1]["peak_rss_kib"] = peak_kib(events)
    root = next(r for r in runs if r.role == table["root"])
    rf = rdir / f"events/{root.role}.log"
    loss = losses(stream_events(stream_lines(rf), True)) if rf.is_file() else []
    record = {"format": RECORD_FORMAT, "kind": "launch", "deployment": table["deployment"],
              "learner": table["learner"], "identity": table["identity"], "steps": steps,
              "host": {"machine": platform.machine(), "system": platform.system(),
                       "release": platform.release()},
              "compiler": manifest.get("compiler", {}), "roles": roles,
              "build": {"manifest": str(mpath.resolve()), "sha256": sha256_file(mpath)},
              "published": root.stdout if root.exit == 0 else "", "loss": loss}
    record["passed"] = PASS_RULES["launch"](record)
    return record


def check_record(rec) -> dict:
    """`rec` if verify_record can read it; `record-malformed` otherwise."""
    def bad(why):
        return Refusal("record-malformed", why)
    auth = rec.get("auth") if isinstance(rec, dict) else None
    if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
        raise bad(f"not a run record of format {RECORD_FORMAT}")
    if not isinstance(rec.get("kind"), str) or rec["kind"] not in PASS_RULES \
            or not isinstance(rec.get("roles"), list) or not isinstance(rec.get("published"), str) \
            or not isinstance(rec.get("passed"), bool) or not is_hex(rec.get("mac"), 64) \
            or not isinstance(auth, dict) or not isinstance(auth.get("key_id"), str) \
            or not is_hex(auth.get("nonce"), 32):
        raise bad("kind, roles, published, passed, auth or mac missing or not what they are")
    for i, r in enumerate(rec["roles"]):
        s = r.get("stream") if isinstance(r, dict) else None
        if not (isinstance(r, dict) and is_name(r.get("role"))
                and (r.get("exit") is None or type(r.get("exit")) is int)
                and ("stream" not in r or (isinstance(s, dict) and s.get("file") == f"events/{r['role']}.log"
                                           and type(s.get("count")) is int and is_hex(s.get("seal"), 64)))):
            raise bad(f"role {i} is not a role's entry")
    return rec


def read_record(path: str | Path) -> dict:
    """The run record at `path`, read bounded (alphac.files.read_json: a regular file, a key
    at most once per object, nesting bounded) and checked (check_record); `record-malformed`."""
    try:
        return check_record(read_json(path, "record"))
    except OSError as e:
        raise Refusal("record-malformed", f"{path}: {e.strerror or e}")
    except ValueError as e:
        raise Refusal("record-malformed", f"{path}: {e}")


def verify_record(path: str | Path, key: str | Path | None = None) -> list[str]:
    """Problems with a run record: empty when it is an authentic pass whose streams are intact.
    Nothing the record names (its streams, its build manifest) is read unless its MAC matches:
    an edited record is that one problem."""
    rec = read_record(path)
    path = Path(path)
    secret = record_key(key, create=False)
    if rec["auth"]["key_id"] != key_id(secret):
        return ["the record was authenticated with another key"]
    k = run_key(secret, rec["auth"]["nonce"])
    if not hmac.compare_digest(rec["mac"], record_mac(k, rec)):
        return ["the record was edited: its MAC does not match"]
    problems = []
    for r in rec["roles"]:
        if "stream" in r:
            problems += stream_problems(k, rec["kind"], r, path.parent / r["stream"]["file"])
        if r["exit"] != 0:
            problems.append(f"{r['role']}: exited {r['exit']}" + (f" (refused: {r['refused']})" if r.get("refused") else ""))
    problems += recomputed(rec)
    if not rec["published"]:
        problems.append("nothing was published")
    if not rec["passed"]:
        problems.append("the record is not a pass")
    return problems


def stream_problems(k: bytes, kind: str, r: dict, f: Path) -> list[str]:
    """What is wrong with role entry r's stream, the file f: missing, not its seal, (in a launch)
    not what the role authenticated as it ran, or (exited 0) not ending with `done`."""
    if not f.is_file():
        return [f"{r['role']}: stream {r['stream']['file']} is missing"]
    try:
        lines = stream_lines(f)
    except OSError as e:
        return [f"{r['role']}: stream {r['stream']['file']} cannot be read: {e.strerror or e}"]
    if len(lines) != r["stream"]["count"] or \
            not hmac.compare_digest(chain(k, r["role"], lines), r["stream"]["seal"]):
        return [f"{r['role']}: stream does not match its seal"]
    texts = role_events(events_key(k, r["role"]), lines) if kind == "launch" else \
        [line.decode(errors="replace").rstrip("\n") for line in lines]
    if texts is None:
        return [f"{r['role']}: its events are not the ones it authenticated as it ran"]
    if r["exit"] == 0 and [split_event(t)[0] for t in texts[-1:]] != ["done"]:
        return [f"{r['role']}: exited 0 but its stream does not end with `done`"]
    if kind == "launch" and r.get("timing") != timing(stream_events(lines, True)):
        return [f"{r['role']}: its timing is not what its stream says"]
    return []


def recomputed(rec: dict) -> list[str]:
    """What a record says that follows from the rest of it, or from the build, and differs."""
    problems = []
    if rec["passed"] != PASS_RULES[rec["kind"]](rec):
        problems.append("`passed` does not follow from the exits and the published state")
    if rec["kind"] != "launch":
        return problems
    for r in rec["roles"]:
        if r.get("signal") != (-r["exit"] if r["exit"] is not None and r["exit"] < 0 else None):
            problems.append(f"{r['role']}: its signal is not its exit's")
    build = rec.get("build") if isinstance(rec.get("build"), dict) else {}
    mpath = Path(str(build.get("manifest")))
    try:                                                    # the build, when it is reachable
        artifacts = load_manifest(mpath)["artifacts"] if mpath.is_file() \
            and sha256_file(mpath) == build.get("sha256") else None
    except (OSError, ManifestError) as e:
        return problems + [f"the build manifest {mpath} cannot be read: {getattr(e, 'strerror', None) or e}"]
    if artifacts is not None:
        for r in rec["roles"]:
            if r.get("sha256") != artifacts.get(str(r.get("artifact")), {}).get("sha256"):
                problems.append(f"{r['role']}: its sha256 is not the build manifest's")
    return problems
