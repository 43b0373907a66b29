"""The .npy files a learner's data is loaded from: one reader for the checker, the tools and the
tables the executables check their data against.

A learner's `data NAME = load("file.npy")` is not compiled into its executables: each owner
reads, at run time, the byte range of the rows it holds (alphac/runtime/data.rt), and checks it
first against what the build saw. This module is the build's side of that check:

    scan(path, rel)   -> NpyFile: the file's header bytes, dtype, shape, size, and the SHA-256 of
                         each CHUNK-byte chunk of the whole file (the last one shorter)
    NpyFile.root      the SHA-256 of the chunk digests, in order: what enters the learner's
                         identity (a one-level Merkle tree; a changed byte changes its chunk's
                         digest and so the root)
    NpyFile.span(lo, hi)  the file bytes of rows lo..hi-1 and the chunks that cover them: an
                         owner carries exactly those chunks' digests
    NpyFile.values()  the array as binary64 (read-only): a small file's (KEEP bytes at most) as
                         scanned; a larger one's read when first evaluated (a build never
                         holds it) and checked against the digests again

The format (NumPy's "npy" format 1.0, 2.0 and 3.0): the magic `\\x93NUMPY`, a major and a minor
version byte, the header's length (2 bytes little-endian for 1.0, 4 for 2.0 and 3.0), the header
(a Python dict literal with exactly `descr`, `fortran_order` and `shape`, padded with spaces and
ending in a newline), then the array's bytes. An executable reads `DTYPES`: little-endian
float64, little-endian int64 and uint8, C order, 1 or 2 dimensions, at least one sample. The scan
also refuses what binary64 would not hold exactly (an int64 beyond 2^53 that rounds) and what a
learner may not hold (NaN, infinity), reading the file once, chunk by chunk, in bounded memory.
`not_integer(file)` says why a file cannot be a learner's `i64` data (a float dtype, an integer
beyond 2^53 in magnitude), or None.
"""
from __future__ import annotations

import ast
import hashlib
import math
import os
from dataclasses import dataclass, field
from functools import cached_property

CHUNK = 1 << 20                      # bytes per digest: an owner hashes whole chunks
MAGIC = b"\x93NUMPY"
MAX_HEADER = 1 << 16                 # numpy's own bound is 10,000 bytes
MAX_BYTES = 1 << 40                  # a data file, at most (1 TiB)
KEEP = 1 << 23                       # a file of at most this many bytes is kept as scanned
# descr -> (run-time kind, item size): the kinds data.rt converts (0: copy, 1: int64, 2: uint8)
DTYPES = {"<f8": (0, 8), "<i8": (1, 8), "|u1": (2, 1)}


class NpyError(ValueError):
    """Why a file is not data an executable can read; the message follows the file's name."""


@dataclass(frozen=True, eq=False)
class NpyFile:
    path: str                        # where the build read it, as the executable opens it
    rel: str                         # as load() names it: relative to the source's directory
    size: int                        # the file's bytes
    header: bytes                    # everything before the array: magic, version, header
    descr: str
    shape: tuple[int, ...]
    chunks: tuple[bytes, ...]        # SHA-256 of each CHUNK bytes of the file
    kept: bytes | None = field(default=None, repr=False)   # a small file's bytes, as scanned
    wide: bool = False               # an integer beyond 2^53 in magnitude (not i64 data)

    @property
    def offset(self) -> int:
        return len(self.header)

    @property
    def kind(self) -> int:
        return DTYPES[self.descr][0]

    @property
    def itemsize(self) -> int:
        return DTYPES[self.descr][1]

    @property
    def cols(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def row_bytes(self) -> int:
        return self.cols * self.itemsize

    @cached_property
    def root(self) -> str:
        return hashlib.sha256(b"".join(self.chunks)).hexdigest()

    def span(self, lo: int, hi: int) -> tuple[int, int, int, int]:
        """(first byte, end byte, first chunk, end chunk) of rows lo..hi-1; no chunk when empty."""
        a, b = self.offset + lo * self.row_bytes, self.offset + hi * self.row_bytes
        if b <= a:
            return a, a, 0, 0
        return a, b, a // CHUNK, (b + CHUNK - 1) // CHUNK

    def digests(self, lo: int, hi: int) -> bytes:
        """The digests an owner of rows lo..hi-1 checks, in order."""
        _, _, c0, c1 = self.span(lo, hi)
        return b"".join(self.chunks[c0:c1])

    def values(self):
        """The array as read-only binary64 values, flat (row-major), read again now and checked
        chunk by chunk against the digests of the scan: a file changed since the learner was
        compiled is refused as an executable refuses it (`data-missing`, `data-shape`,
        `data-hash`), never evaluated."""
        import numpy as np
        from alphac.refusals import Refusal
        if self.kept is not None:
            arr = np.frombuffer(self.kept, dtype=self.descr, offset=self.offset).astype("<f8")
            arr.flags.writeable = False
            return arr
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise Refusal("data-missing", f"{self.path}: {e.strerror}")
        try:
            if os.fstat(fd).st_size != self.size or os.pread(fd, self.offset, 0) != self.header:
                raise Refusal("data-shape", f"{self.path} is not the file the learner was compiled with")
            raw = bytearray(self.size - self.offset)
            view, at = memoryview(raw), 0
            for k, digest in enumerate(self.chunks):
                block = os.pread(fd, min(CHUNK, self.size - k * CHUNK), k * CHUNK)
                if hashlib.sha256(block).digest() != digest:
                    raise Refusal("data-hash", f"{self.path}: bytes {k * CHUNK}.. changed since "
                                  "the learner was compiled")
                part = block[max(0, self.offset - k * CHUNK):]
                view[at:at + len(part)] = part
                at += len(part)
        except OSError as e:
            raise Refusal("data-missing", f"{self.path}: {e.strerror}")
        finally:
            os.close(fd)
        arr = np.frombuffer(raw, dtype=self.descr).astype("<f8", copy=False)
        arr.flags.writeable = False
        return arr


def runtime_path(path: str) -> str:
    """`path` as an executable opens it by default: relative to the directory the build ran in
    when it is inside it (a build records no absolute path), else absolute."""
    rel = os.path.relpath(os.path.abspath(path))
    return os.path.abspath(path) if rel == ".." or rel.startswith("../") else rel


def parse_header(head: bytes) -> tuple[bytes, str, tuple[int, ...]]:
    """(the header's bytes, descr, shape) from a file's first bytes; NpyError saying why not."""
    if len(head) < 10 or head[:6] != MAGIC:
        raise NpyError("is not a .npy file (no \\x93NUMPY magic)")
    major = head[6]
    if major == 1:
        n, start = int.from_bytes(head[8:10], "little"), 10
    elif major in (2, 3):
        if len(head) < 12:
            raise NpyError("is truncated in its header")
        n, start = int.from_bytes(head[8:12], "little"), 12
    else:
        raise NpyError(f"has .npy format version {major}.{head[7]}; versions 1, 2 and 3 are read")
    if n > MAX_HEADER or start + n > len(head):
        raise NpyError("is truncated in its header" if n <= MAX_HEADER
                       else f"has a header of {n} bytes; at most {MAX_HEADER} are read")
    try:
        text = head[start:start + n].decode("utf-8" if major == 3 else "latin-1")
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        raise NpyError("has a header that is not a Python dict literal")
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise NpyError("has a header without exactly `descr`, `fortran_order` and `shape`")
    descr, shape = d["descr"], d["shape"]
    if isinstance(descr, str) and descr in ("=f8", "f8", "float64", "<d"):
        descr = "<f8"
    if not isinstance(descr, str) or descr not in DTYPES:
        raise NpyError(f"has dtype {descr!r}; data is read at run time as "
                       f"{', '.join(sorted(DTYPES))} (convert it: np.save(path, a.astype('<f8')), "
                       "or '<i8' for i64 data)")
    if d["fortran_order"] is not False:
        raise NpyError("is in Fortran order; data is read row by row (np.ascontiguousarray)")
    if not isinstance(shape, tuple) or not all(type(s) is int and s >= 0 for s in shape):
        raise NpyError("has a malformed shape")
    if not 1 <= len(shape) <= 2 or math.prod(shape) == 0:
        raise NpyError(f"has shape {shape}; data must be a non-empty 1- or 2-D array")
    if (start + n) % DTYPES[descr][1]:
        raise NpyError("has a header whose length does not align its items")
    return head[:start + n], descr, shape


def scan(path: str, rel: str | None = None) -> NpyFile:
    """Read `path` once, in CHUNK pieces: its header, its digests, and the checks in the
    module's docstring. OSError when it cannot be read (or is not a regular file)."""
    import numpy as np
    from alphac.files import open_regular
    fd, st = open_regular(path)
    try:
        if st.st_size > MAX_BYTES:
            raise NpyError(f"has {st.st_size} bytes; a data file has at most {MAX_BYTES}")
        head = os.pread(fd, min(st.st_size, 12 + MAX_HEADER), 0)
        header, descr, shape = parse_header(head)
        kind, size = DTYPES[descr]
        want = len(header) + size * math.prod(shape)
        if st.st_size != want:
            raise NpyError(f"has {st.st_size} bytes, but its header describes {want}")
        chunks, at, kept, wide = [], 0, bytearray() if want <= KEEP else None, False
        while at < want:
            block = os.pread(fd, min(CHUNK, want - at), at)
            if len(block) != min(CHUNK, want - at):
                raise NpyError("changed size while it was read")
            chunks.append(hashlib.sha256(block).digest())
            if kept is not None:
                kept += block
            lo = max(at, len(header)) - at            # the items in this chunk (never split)
            items = np.frombuffer(block, dtype=descr, offset=lo) if lo < len(block) else None
            if items is not None and kind == 0 and not np.isfinite(items).all():
                raise NpyError("holds a NaN or an infinity")
            if items is not None and kind == 1:
                wide = wide or bool(((items > 1 << 53) | (items < -(1 << 53))).any())
            if items is not None and kind == 1 and (np.abs(items) > 1 << 53).any():
                big = items[np.abs(items) > 1 << 53]
                if not np.array_equal(big.astype("<f8").astype("<i8"), big):
                    raise NpyError("has integers that binary64 cannot hold exactly")
            at += len(block)
    finally:
        os.close(fd)
    return NpyFile(path, rel if rel is not None else path, want, header, descr, shape, tuple(chunks),
                   bytes(kept) if kept is not None else None, wide)


def not_integer(f: NpyFile) -> str | None:
    """Why `f` cannot hold `i64` data (docs/language.md: an integer dtype, every value within
    2^53 in magnitude, which binary64 holds exactly), or None when it can."""
    if f.kind == 0:
        return (f"holds {f.descr} values, not integers; i64 data is read from an integer file, "
                f"{' or '.join(d for d, (k, _) in sorted(DTYPES.items()) if k)} (convert it: "
                "np.save(path, a.astype('<i8')))")
    return "holds an integer beyond 2^53 in magnitude; i64 data holds at most 2^53" if f.wide else None
