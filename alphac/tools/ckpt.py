"""Reading checkpoints from Python: `alphac ckpt show DIR`, and the tests' view of the format.

The format is written by the runtime (alphac/runtime/ckpt.rt) from the one table of its
fields, `alphac.formats` (CKPT_HEADER, CKPT_RECORD), which this module reads too; it is
documented in docs/checkpoints.md: a manifest (header, records, a SHA-256 trailer) and shards
that are plain NumPy `.npy` files. This module checks what it reads the way the runtime
does (trailer, shard checksums), and assembles the state a checkpoint holds.

Guarantees: a hostile checkpoint is a `CheckpointError`, never another exception: only regular
files of bounded size are read, a record's path must be a relative path inside the checkpoint
directory (no `..`, no absolute path, no link leading out, UTF-8), a shard must be the 1-D
float64 array its record's range describes, and names are shown with non-ASCII bytes escaped.
Each error carries the name of the refusal the runtime's resume gives for it (`refusal`), so
that `alphac eval --checkpoint` refuses by the same names.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from alphac.formats import (CKPT_FORMAT, CKPT_HEADER, CKPT_MAGIC, CKPT_RECORD, CKPT_SHARD, CKPT_SUB,
                            CKPT_TRAILER, MAX_VALUES, NPY_HEADER)

from alphac.files import read_regular
from alphac.encode import json_text

HDR, REC = CKPT_HEADER.size, CKPT_RECORD.size
LIMIT = 8 * MAX_VALUES + NPY_HEADER        # bytes of any checkpoint file: a learner's values, at most


class CheckpointError(Exception):
    def __init__(self, message: str, refusal: str = "manifest-torn"):
        super().__init__(message)
        self.refusal = refusal


@dataclass
class Record:
    kind: int           # 1 shard, 2 sub-manifest
    writer: int
    lo: int
    hi: int
    sha256: bytes
    state: str
    path: str


@dataclass
class Manifest:
    kind: int
    learner: bytes
    rate: bytes
    epoch: int
    version: int
    layout: int
    owners: tuple[int, int]
    records: list[Record]


def _read(path: Path, missing: str) -> bytes:
    try:
        return read_regular(path, LIMIT)
    except OSError as e:
        raise CheckpointError(f"{path}: {e.strerror or e}", missing)


def inside(root: Path, rel: str) -> Path:
    """`root / rel`, refused unless it stays inside `root` (links resolved)."""
    bad = not rel or rel.startswith("/") or ".." in PurePosixPath(rel).parts or "\0" in rel
    try:
        bad = bad or not (root / rel).resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):                 # a loop of links
        bad = True
    if bad:
        raise CheckpointError(f"{root}: record path {rel!r} is not a path inside the checkpoint")
    return root / rel


def read_manifest(path: Path, missing: str = "manifest-torn") -> Manifest:
    data = _read(Path(path), missing)
    if len(data) < HDR + CKPT_TRAILER or data[:len(CKPT_MAGIC)] != CKPT_MAGIC:
        raise CheckpointError(f"{path}: not a checkpoint manifest")
    if hashlib.sha256(data[:-CKPT_TRAILER]).digest() != data[-CKPT_TRAILER:]:
        raise CheckpointError(f"{path}: torn (its checksum fails)")
    h = CKPT_HEADER.unpack(data)
    if h["format"] != CKPT_FORMAT:
        raise CheckpointError(f"{path}: manifest format {h['format']}, not {CKPT_FORMAT}")
    count = h["count"]
    if len(data) != HDR + REC * count + CKPT_TRAILER:
        raise CheckpointError(f"{path}: torn (length)")
    recs = []
    for k in range(count):
        r = CKPT_RECORD.unpack(data, HDR + REC * k)
        try:
            rel = r["path"].rstrip(b"\0").decode()
        except UnicodeDecodeError:
            raise CheckpointError(f"{path}: record {k}: its path is not UTF-8")
        recs.append(Record(r["kind"], r["writer"], r["lo"], r["hi"], r["sha256"],
                           r["state"].rstrip(b"\0").decode("ascii", errors="backslashreplace"), rel))
    return Manifest(h["kind"], h["learner"], h["rate"], h["epoch"], h["version"], h["layout"],
                    (h["owner_lo"], h["owner_hi"]), recs)


def walk(root: Path) -> list[tuple[str, Manifest]]:
    """Every manifest of the tree, root first (a test tool: the runtime reads only a path)."""
    root = Path(root)
    out = [("MANIFEST", read_manifest(root / "MANIFEST", "checkpoint-missing"))]
    i = 0
    while i < len(out):
        for r in out[i][1].records:
            if r.kind == CKPT_SUB:
                data = _read(inside(root, r.path), "manifest-torn")
                if hashlib.sha256(data).digest() != r.sha256:
                    raise CheckpointError(f"{r.path}: checksum differs from its record")
                out.append((r.path, read_manifest(root / r.path)))
        i += 1
    return out


def newest(root: Path) -> tuple[Path, int] | None:
    """The newest complete periodic checkpoint in `root` (`--checkpoint-every`: root/v<step>) and
    its step, by the one rule docs/checkpoints.md states ("Periodic checkpoints") and the
    runtime's `--resume-latest` follows (alphac/runtime/ckpt.rt, ckpt_latest): the highest step,
    in decimal without a leading zero (at most 15 digits), whose root manifest exists; the
    resume checks the rest and refuses by name. None when there is none."""
    found = [int(p.name[1:]) for p in Path(root).glob("v*") if re.fullmatch(r"v[1-9][0-9]{0,14}", p.name)
             and os.path.exists(p / "MANIFEST")]
    return (Path(root) / f"v{max(found)}", max(found)) if found else None


def state(root: Path) -> dict[str, list[float]]:
    """The values a checkpoint holds, by state (shards read with numpy, checksums checked)."""
    import numpy as np
    root = Path(root)
    out: dict[str, list] = {}
    for _, m in walk(root):
        for r in m.records:
            if r.kind != CKPT_SHARD:
                continue
            data = _read(inside(root, r.path), "shard-missing")
            if hashlib.sha256(data).digest() != r.sha256:
                raise CheckpointError(f"{r.path}: checksum differs from its record", "shard-corrupt")
            try:
                values = np.load(io.BytesIO(data), allow_pickle=False)
            except Exception as e:      # numpy reports many kinds of malformed files
                raise CheckpointError(f"{r.path}: not a .npy array: {e}", "shard-corrupt")
            if values.dtype != np.float64 or values.shape != (r.hi - r.lo,) or r.hi > MAX_VALUES:
                raise CheckpointError(f"{r.path}: not the float64[{r.hi - r.lo}] its record says",
                                      "shard-corrupt")
            vec = out.setdefault(r.state, [])
            if len(vec) < r.hi:
                vec.extend([None] * (r.hi - len(vec)))
            for j, v in zip(range(r.lo, r.hi), values.tolist()):
                if vec[j] is None:
                    vec[j] = v
    return out


def show(root: Path) -> str:
    from alphac.math.binary64 import hex16
    root = Path(root)
    lines = []
    for rel, m in walk(root):
        shape = "flat" if m.layout == 0 else f"tree, fan-out {m.layout}"
        lines.append(f"{rel}: {'root' if m.kind == 0 else 'sub-manifest'}, epoch {m.epoch}, "
                     f"step {m.version}, {shape}, owners {m.owners[0]}..{m.owners[1]}")
        lines.append(f"  learner {m.learner.hex()[:16]}  rate {m.rate.hex()[:16]}")
        for r in m.records:
            what = f"{r.state}[{r.lo}..{r.hi}) by owner {r.writer}" if r.kind == CKPT_SHARD else \
                f"owners {r.lo}..{r.hi}"
            lines.append(f"  {'shard' if r.kind == CKPT_SHARD else 'sub  '} {what:<28} {r.path}  "
                         f"sha256 {r.sha256.hex()[:16]}")
    lines.append("state:")
    for name, vals in state(root).items():
        for j, v in enumerate(vals):
            label = name if len(vals) == 1 else f"{name}[{j}]"
            lines.append(f"  {label} {hex16(v) if v is not None else '(none)'}"
                         + (f"  {v!r}" if v is not None else ""))
    return "\n".join(lines) + "\n"


def show_json(root: Path) -> str:
    """`alphac ckpt show --json`: every manifest (its fields and records) and the state, each
    value as its 16 hex digits and as a number (a NaN or an infinity, which JSON has no number
    for, as the string "nan", "inf" or "-inf"); always valid JSON."""
    from dataclasses import asdict
    from alphac.math.binary64 import hex16
    root = Path(root)
    manifests = []
    for rel, m in walk(root):
        d = asdict(m)
        d.update(path=rel, learner=m.learner.hex(), rate=m.rate.hex(), owners=list(m.owners),
                 records=[dict(asdict(r), sha256=r.sha256.hex()) for r in m.records])
        manifests.append(d)
    number = lambda v: v if v is None or math.isfinite(v) else \
        "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"     # JSON has no inf or NaN
    st = {name: {"hex": [hex16(v) if v is not None else None for v in vals],
                 "values": [number(v) for v in vals]} for name, vals in state(root).items()}
    return json_text({"manifests": manifests, "state": st}, indent=2) + "\n"
