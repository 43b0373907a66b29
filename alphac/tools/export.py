"""`alphac ckpt export DIR -o FILE`: a checkpoint as full named tensors, in one file.

What it does
    Merges the shards of a checkpoint (every manifest of its tree, checksums checked, by
    alphac.tools.ckpt.state) into one float64 array per state, and writes them as safetensors
    (FILE ending in `.safetensors`: an 8-byte little-endian header length, a JSON header of
    `{"NAME": {"dtype": "F64", "shape": [...], "data_offsets": [b, e]}}` padded with spaces to
    a multiple of 8, then the data) or as a NumPy `.npz` (each array a `.npy` member). With the
    learner's source (`--learner FILE`), each array has its state's shape (a scalar 0-d, a
    vector 1-d); without it every state is 1-d.
Requires
    A checkpoint that covers every value of every state it names.
Guarantees
    The bits of each value are the checkpoint's. The file is the same bytes for the same
    checkpoint (names sorted; the .npz's members carry a fixed date), written to a temporary
    name beside FILE, fsynced and renamed. CheckpointError for a checkpoint that does not cover
    a state; ValueError for another suffix.
"""
from __future__ import annotations

import io
import math
import re
import struct
import zipfile
from pathlib import Path

import numpy as np

from alphac.tools.ckpt import CheckpointError, state
from alphac.encode import json_text

SUFFIXES = (".safetensors", ".npz")


STATE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")      # an identifier of the language


def tensors(ckpt: Path, shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Each state's values; refused as resume and `alphac eval` refuse the checkpoint: a state
    not covered (shard-missing), a NaN or an infinity (shard-non-finite), a state whose name is
    not a name of the language, such as one that is not UTF-8 (shard-missing: it covers no
    learner's state)."""
    out = {}
    for name, values in sorted(state(ckpt).items()):
        if not STATE_NAME.match(name):
            raise CheckpointError(f"{ckpt}: a record names the state {name!r}, which is not a "
                                  "name (an identifier: ASCII letters, digits and `_`), so it "
                                  "holds no learner's state", "shard-missing")
        if any(v is None for v in values):
            raise CheckpointError(f"{ckpt}: the shards do not cover every value of `{name}`",
                                  "shard-missing")
        if not all(map(math.isfinite, values)):
            raise CheckpointError(f"{ckpt}: `{name}` holds a NaN or an infinity; a checkpoint "
                                  "holds finite state only", "shard-non-finite")
        arr = np.array(values, dtype="<f8")
        shape = (shapes or {}).get(name, arr.shape)
        if int(np.prod(shape)) != arr.size:
            raise CheckpointError(f"{ckpt}: `{name}` holds {arr.size} values, the learner's "
                                  f"state has shape {shape}")
        out[name] = arr.reshape(shape)
    return out


def safetensors_bytes(arrays: dict[str, np.ndarray], metadata: dict[str, str]) -> bytes:
    header, data, at = {"__metadata__": metadata}, [], 0
    for name in sorted(arrays):
        raw = np.asarray(arrays[name], dtype="<f8", order="C").tobytes()
        header[name] = {"dtype": "F64", "shape": list(arrays[name].shape),
                        "data_offsets": [at, at + len(raw)]}
        data.append(raw)
        at += len(raw)
    text = json_text(header, compact=True).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(data)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(arrays[name], dtype="<f8", order="C"),
                                      allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, member.getvalue())
    return buf.getvalue()


def export(ckpt: str | Path, out: str | Path, shapes: dict[str, tuple[int, ...]] | None = None) -> dict:
    """Write the checkpoint at `ckpt` to `out`; returns {name: shape}."""
    from alphac.files import write_file
    from alphac.tools.ckpt import read_manifest
    ckpt, out = Path(ckpt), Path(out)
    if out.suffix not in SUFFIXES:
        raise ValueError(f"{out}: the file must end in {' or '.join(SUFFIXES)}")
    arrays = tensors(ckpt, shapes)
    root = read_manifest(ckpt / "MANIFEST")
    meta = {"format": "alphac checkpoint", "learner": root.learner.hex(), "rate": root.rate.hex(),
            "step": str(root.version), "epoch": str(root.epoch)}
    data = safetensors_bytes(arrays, meta) if out.suffix == ".safetensors" else npz_bytes(arrays)
    write_file(out, data, 0o644)
    return {name: a.shape for name, a in arrays.items()}


def learner_shapes(lr) -> dict[str, tuple[int, ...]]:
    """Each state's shape, from the learner (alphac.ir.learner.Learner)."""
    return {s.name: tuple(s.shape) for s in lr.states}
