"""Reading checkpoints from Python: `alphac ckpt show DIR`, and the tests' view of the format.

The format is written by the runtime (alphac/runtime/ckpt.rt) and documented in
docs/checkpoints.md: a manifest (128-byte header, 160-byte records, a SHA-256 trailer) and
shards that are plain NumPy `.npy` files. This module checks what it reads the way the runtime
does (trailer, shard checksums), and assembles the state a checkpoint holds.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

HDR, REC = 128, 160


class CheckpointError(Exception):
    pass


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


def read_manifest(path: Path) -> Manifest:
    data = Path(path).read_bytes()
    if len(data) < HDR + 32 or data[:8] != b"ALPHCKPT":
        raise CheckpointError(f"{path}: not a checkpoint manifest")
    if hashlib.sha256(data[:-32]).digest() != data[-32:]:
        raise CheckpointError(f"{path}: torn (its checksum fails)")
    fmt, kind = struct.unpack_from("<II", data, 8)
    epoch, version, count, layout, olo, ohi = struct.unpack_from("<6Q", data, 80)
    if len(data) != HDR + REC * count + 32:
        raise CheckpointError(f"{path}: torn (length)")
    recs = []
    for k in range(count):
        r = data[HDR + REC * k: HDR + REC * (k + 1)]
        rk, writer, lo, hi = struct.unpack_from("<IIQQ", r)
        recs.append(Record(rk, writer, lo, hi, r[24:56], r[56:88].rstrip(b"\0").decode(),
                           r[88:160].rstrip(b"\0").decode()))
    return Manifest(kind, data[16:48], data[48:80], epoch, version, layout, (olo, ohi), recs)


def walk(root: Path) -> list[tuple[str, Manifest]]:
    """Every manifest of the tree, root first (a test tool: the runtime reads only a path)."""
    root = Path(root)
    out = [("MANIFEST", read_manifest(root / "MANIFEST"))]
    i = 0
    while i < len(out):
        for r in out[i][1].records:
            if r.kind == 2:
                data = (root / r.path).read_bytes()
                if hashlib.sha256(data).digest() != r.sha256:
                    raise CheckpointError(f"{r.path}: checksum differs from its record")
                out.append((r.path, read_manifest(root / r.path)))
        i += 1
    return out


def state(root: Path) -> dict[str, list[float]]:
    """The values a checkpoint holds, by state (shards read with numpy, checksums checked)."""
    import numpy as np
    root = Path(root)
    out: dict[str, list] = {}
    for _, m in walk(root):
        for r in m.records:
            if r.kind != 1:
                continue
            data = (root / r.path).read_bytes()
            if hashlib.sha256(data).digest() != r.sha256:
                raise CheckpointError(f"{r.path}: checksum differs from its record")
            values = np.load(root / r.path)
            vec = out.setdefault(r.state, [])
            if len(vec) < r.hi:
                vec.extend([None] * (r.hi - len(vec)))
            for j, v in zip(range(r.lo, r.hi), values.tolist()):
                if vec[j] is None:
                    vec[j] = v
    return out


def show(root: Path) -> str:
    from alphac.ir.binary64 import hex16
    root = Path(root)
    lines = []
    for rel, m in walk(root):
        shape = "flat" if m.layout == 0 else f"tree, fan-out {m.layout}"
        lines.append(f"{rel}: {'root' if m.kind == 0 else 'sub-manifest'}, epoch {m.epoch}, "
                     f"step {m.version}, {shape}, owners {m.owners[0]}..{m.owners[1]}")
        lines.append(f"  learner {m.learner.hex()[:16]}  rate {m.rate.hex()[:16]}")
        for r in m.records:
            what = f"{r.state}[{r.lo}..{r.hi}) by owner {r.writer}" if r.kind == 1 else \
                f"owners {r.lo}..{r.hi}"
            lines.append(f"  {'shard' if r.kind == 1 else 'sub  '} {what:<28} {r.path}  "
                         f"sha256 {r.sha256.hex()[:16]}")
    lines.append("state:")
    for name, vals in state(root).items():
        for j, v in enumerate(vals):
            label = name if len(vals) == 1 else f"{name}[{j}]"
            lines.append(f"  {label} {hex16(v) if v is not None else '(none)'}"
                         + (f"  {v!r}" if v is not None else ""))
    return "\n".join(lines) + "\n"
