"""The files alphac reads and writes: regular files only, read bounded, written whole.

What it does
    `read_regular(path, limit)` reads a source, a `.npy` file or a checkpoint file;
    `write_file(path, data, mode)` writes an executable, a manifest or any artifact.

Requires nothing. Guarantees: a read never blocks on a FIFO or a device (the file is opened
non-blocking and refused unless it is a regular file) and never reads more than `limit` + 1
bytes; a write happens only when the target is absent or a regular file (never a directory, a
device, a FIFO, a socket or a symbolic link), into a fresh temporary file beside it (created
exclusively: a planted symbolic link is never followed), fsynced, renamed over the target, and
the directory fsynced. Every refusal is an `OSError` whose `strerror` says what the path is.
"""
from __future__ import annotations

import errno
import os
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
    fd, _ = open_regular(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"it is larger than {limit} bytes", str(path))
    return data


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
