"""The run record: its format, directory and space, keys, MACs and verifier, which every tool
that writes or reads a record imports (launch, slurm-record, verify-record, plot, trace,
gpu/qualify.py, the benchmarks). docs/runtime.md ("Run records", "Authentication") states the
format and the MACs this implements; the events' MAC label is alphac.formats.EVENTS_LABEL, the
one the runtime reads through its prelude. `verify_record` checks a record and recomputes what
follows from the rest.
"""
from __future__ import annotations

import errno
import hmac
import json
import os
import platform
import re
import shutil
import struct
from pathlib import Path

from alphac.encode import json_text
from alphac.files import LIMITS, read_json, read_regular
from alphac.formats import EVENTS_LABEL
from alphac.manifest import ManifestError, load as load_manifest, sha256_file
from alphac.refusals import Refusal

RECORD_FORMAT = 2
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")     # a role, file or deployment: one name
LABEL = EVENTS_LABEL.encode()


def is_name(v) -> bool:
    return isinstance(v, str) and NAME.match(v) is not None


def is_count(v) -> bool:
    """A whole number in ASCII decimal digits (str.isdigit alone takes `²`, which int refuses)."""
    return isinstance(v, str) and v.isascii() and v.isdigit()


def is_hex(v, digits: int) -> bool:
    return isinstance(v, str) and re.fullmatch(f"[0-9a-f]{{{digits}}}", v) is not None


# -- the record's directory, and the space it needs -------------------------------------------------
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
# root's split, step, loss and periodic checkpoint) and EVENTS_FIXED more (connect, data, checkpoint, finish): that much
# free space is checked for too, not held, since the roles write their streams themselves.
# Steps count up to RESERVE_STEPS (a record of about 20 MB): a longer run (a count given to be
# ended by a signal, say) reserves as much, and past it a full disk is refused record-write.
RECORD_FIXED, RECORD_PER_ROLE, RECORD_PER_STEP, PUBLISHED_RESERVE = 8192, 1024, 200, 65536
EVENT_LINE, EVENTS_PER_STEP, EVENTS_FIXED = 192, 4, 32
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
    h = hmac.new(k, LABEL + b"|" + role.encode(), "sha256").digest()
    for line in lines:
        h = hmac.new(k, h + b"|" + line, "sha256").digest()
    return h.hex()


def events_key(k: bytes, role: str) -> bytes:
    return hmac.new(k, b"alphac-events-key|" + role.encode(), "sha256").digest()


def role_events(k: bytes, lines: list[bytes]) -> list[str] | None:
    """The events of a stream a role wrote under its events key `k` (each line "TEXT MAC",
    MAC_i = HMAC(k, MAC_{i-1} | TEXT), MAC_0 = HMAC(k, EVENTS_LABEL)), or None unless
    every line is complete and authentic."""
    mac = hmac.new(k, LABEL, "sha256").digest()
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
    for r in record["roles"] + [r for f in record.get("failures", []) for r in f["roles"]]:
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


# -- the record ------------------------------------------------------------------------------------
PASS_RULES = {   # what `passed` must be, from the rest of a record of each kind
    "launch": lambda rec: all(r["exit"] == 0 for r in rec["roles"]) and bool(rec["published"]),
    "gpu-qualification": lambda rec: bool(rec["roles"]) and all(
        r["exit"] == 0 and r.get("equals_interpreter") is True and r.get("equals_oracle") is True
        for r in rec["roles"]),
}


def make_record(table: dict, runs: list, steps: int, manifest: dict, mpath: Path, rdir: Path) -> dict:
    """The unsealed record of `table`'s `runs` (supervise.RoleRun), their streams in `rdir`."""
    roles = []
    for run in runs:
        line = next((l[len("refused: "):] for l in run.stderr.splitlines()
                     if l.startswith("refused: ")), None)
        refused, _, detail = (line or "").partition(" (")
        ended = [l[len("launcher: "):] for l in run.stderr.splitlines() if l.startswith("launcher: ")]
        roles.append({"role": run.role, "isa": run.target, "sha256": run.sha256,
                      "artifact": run.artifact,
                      "exit": run.exit, "refused": refused or None,
                      "detail": detail.removesuffix(")") or (ended[-1] if ended else None),
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
    for f in rec.get("failures", []):   # a restarted run's earlier attempts (authentic: the MAC matched)
        problems += [p for r in f["roles"] for p in stream_problems(k, rec["kind"], r, path.parent / r["stream"]["file"])]
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
