"""The files alphac reads and writes: regular files only, read bounded, written whole.

What it does
    `read_regular(path, limit)` reads a source, a `.npy` file or a checkpoint file;
    `read_json(path, kind)` reads a JSON file of one of the kinds of `LIMITS` (a run record, a
    build manifest, roles.json, ...) and `loads(text)` parses JSON text: both refuse a document
    nested deeper than `MAX_DEPTH` or with a key twice in one object (a forged `"passed"` before
    the real one), so that every reader of alphac's JSON reads the same thing, and never meets
    a RecursionError; `write_file(path, data, mode)` writes an executable, a manifest or any
    artifact.

Requires nothing. Guarantees: a read never blocks on a FIFO or a device (the file is opened
non-blocking and refused unless it is a regular file) and never reads more than `limit` + 1
bytes (`LIMITS[kind]` for `read_json`): a file larger than that, a huge sparse one say, is
refused by its size before a byte is read, and one that grows while it is read at the limit; a
write happens only when the target is absent or a regular file (never a directory, a device,
a FIFO, a socket or a symbolic link), into a fresh temporary file beside it (created exclusively:
a planted symbolic link is never followed), fsynced, renamed over the target, and the directory
fsynced. Every refusal is an `OSError` whose `strerror` says what the path is,
or (JSON that is not UTF-8, not JSON, too deep, or with a duplicate key) a `ValueError` that
says which.
"""
from __future__ import annotations

import errno
import itertools
import json
import os
import re
import stat
import tempfile
from pathlib import Path

KINDS = {stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
         stat.S_IFLNK: "a symbolic link"}


def _not_regular(path, mode: int) -> OSError:
    what = KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return OSError(errno.EINVAL, f"it is {what}, not a regular file", str(path))


def open_regular(path: str | Path) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file `path` (opened without blocking) and its status; OSError
    when it cannot be opened or is not a regular file. The caller closes it."""
    if "\0" in str(path):
        raise OSError(errno.EINVAL, "the path holds a NUL byte", repr(str(path)))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(path, st.st_mode)
    return fd, st


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file `path`, refused (OSError) when it has more than `limit`."""
    fd, st = open_regular(path)
    try:
        if st.st_size > limit:                # a huge (or sparse) file: refused unread
            raise OSError(errno.EFBIG, f"it is larger than {limit} bytes", str(path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"it is larger than {limit} bytes", str(path))
    return data


# The most bytes alphac reads of each kind of file (docs/runtime.md shows this table). A run's
# record and event streams grow by about 150 bytes a step (a record of 64 MiB is about 450,000 steps):
# 1 GiB holds about 7 million steps of a record and is still parsed in a few seconds.
LIMITS = {
    "record": (1 << 30, "a run record (runs/NAME-NNNN/record.json)"),
    "stream": (1 << 30, "a role's event stream (runs/NAME-NNNN/events/ROLE.log)"),
    "manifest": (1 << 28, "a build manifest (MANIFEST.json, OUT.manifest.json)"),
    "roles": (1 << 28, "a deployment's roles.json"),
    "slurm-job": (1 << 20, "an `alphac slurm` run directory's slurm.json"),
    "slurm-task": (1 << 24, "a Slurm task's output, exit code or node (RUNDIR/tasks/*)"),
    "record-key": (1 << 12, "the record key"),
}
MAX_DEPTH = 64          # JSON nesting (objects and arrays); alphac's own documents nest 6 deep
_ESCAPE = re.compile(r"\\.", re.S)           # an escape inside a string: \" or \\ among them
_STRUCTURE = {c: None for c in range(0x80) if chr(c) not in '[]{}"'}    # delete the rest of ASCII
_QUOTED = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _unique(pairs: list[tuple[str, object]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {twice!r} appears twice in one object")
    return out


def json_depth(text: str) -> int:
    """The deepest nesting of objects and arrays in the JSON `text` (brackets in strings do not
    count): escapes dropped, then every string, then all but brackets; in C but the last sum."""
    brackets = _NOT_BRACKET.sub("", _QUOTED.sub("", _ESCAPE.sub("", text).translate(_STRUCTURE)))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads(text: str | bytes):
    """JSON `text` (bytes: UTF-8) as Python values; ValueError when it is not UTF-8 or not JSON,
    nests deeper than MAX_DEPTH, or holds a key twice in one object."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")           # UnicodeDecodeError is a ValueError
    if json_depth(text) > MAX_DEPTH:
        raise ValueError(f"it nests objects or arrays deeper than {MAX_DEPTH}")
    return json.loads(text, object_pairs_hook=_unique)


def read_json(path: str | Path, kind: str):
    """The JSON file `path` of kind `kind` (a key of LIMITS), read with read_regular and loads:
    OSError when it cannot be read (or is larger than its limit), ValueError when it is not JSON."""
    return loads(read_regular(path, LIMITS[kind][0]))


def write_file(path: str | Path, data: bytes, file_mode: int) -> None:
    """Write `data` whole as `path` (mode `file_mode`, whatever the umask): see Guarantees."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(fd, file_mode)
            os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
