"""Live metrics and TensorBoard: each step's mean loss as a JSON line while a run goes, and a
run record's losses as TensorBoard event files, written here with the standard library alone.

What it does
    `metric_line(step, mean, n)` is one step's line: `{"step": K, "loss": MEAN, "bits": HEX,
    "n": N}`, K counting steps from 1 (the loss of the state step K starts from, as the record's
    `loss` list and `--loss-every` count), MEAN the binary64 mean written as Python's repr (it
    reads back to the same bits; a mean that is not finite, which JSON has no number for, is the
    string "inf", "-inf" or "nan"), HEX its 16 hex digits (the state's format). `alphac run
    --metrics` writes one per step of the reference interpreter, `alphac launch --metrics` one
    per `loss` event of the root's stream as the roles write them (supervise.Progress follows
    it); each line is flushed as it is written.

    `export_tensorboard(record, out)` writes `OUT/events.out.tfevents.0.alphac`: TFRecord
    framing, each record `length` (u64 LE), `masked_crc32c(length)` (u32 LE), `data`,
    `masked_crc32c(data)`, where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 mod 2^32 and
    CRC-32C is the Castagnoli polynomial (reflected 0x82f63b78); the first record an `Event` with
    `file_version` "brain.Event:2", then one `Event` a step: `step` K, `wall_time` 0 (a record
    keeps no wall clock), a `Summary` of one `Value`: tag "loss", metadata plugin "scalars"
    (data class scalar), and the mean as a scalar `TensorProto` of dtype DT_DOUBLE, so TensorBoard
    shows the exact binary64. The protobuf fields written (tensorflow/core/util/event.proto,
    framework/summary.proto, tensor.proto): Event 1 wall_time double, 2 step int64,
    3 file_version string, 5 summary; Summary 1 value; Value 1 tag, 8 tensor, 9 metadata;
    SummaryMetadata 1 plugin_data {1 plugin_name}, 4 data_class; TensorProto 1 dtype,
    2 tensor_shape (empty: a scalar), 6 double_val (packed).
Requires
    A run record (record.read_record: its `loss` list) for the export.
Guarantees
    The same bytes for the same record; an existing OUT's other files are left alone.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from alphac.files import write_file
from alphac.tools.record import read_record

EVENTS_FILE = "events.out.tfevents.0.alphac"
DT_DOUBLE, DATA_CLASS_SCALAR = 2, 1


def metric_line(step: int, mean: float, n: int) -> str:
    loss = mean if math.isfinite(mean) else "nan" if mean != mean else "inf" if mean > 0 else "-inf"
    return json.dumps({"step": step, "loss": loss, "bits": struct.pack(">d", mean).hex(), "n": n},
                      allow_nan=False) + "\n"


def record_line(entry: dict) -> str:
    """The line of an entry of a record's `loss` list (record.losses)."""
    return metric_line(entry["step"], struct.unpack(">d", bytes.fromhex(entry["mean"]))[0], entry["n"])


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n: int) -> bytes:
    out = b""
    while n > 0x7F:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def field(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2): a string, bytes, a message or a packed list."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def tf_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def loss_event(step: int, mean: float) -> bytes:
    tensor = varint(1 << 3) + varint(DT_DOUBLE) + field(2, b"") + field(6, struct.pack("<d", mean))
    metadata = field(1, field(1, b"scalars")) + varint(4 << 3) + varint(DATA_CLASS_SCALAR)
    value = field(1, b"loss") + field(8, tensor) + field(9, metadata)
    return varint(1 << 3 | 1) + struct.pack("<d", 0.0) + varint(2 << 3) + varint(step) + field(5, field(1, value))


def export_tensorboard(record: str | Path, out: str | Path) -> Path:
    """Write `record`'s losses as TensorBoard's event file in directory `out`; its path."""
    rec = read_record(record)
    data = tf_record(varint(1 << 3 | 1) + struct.pack("<d", 0.0) + field(3, b"brain.Event:2"))
    for e in rec["loss"]:
        data += tf_record(loss_event(e["step"], struct.unpack(">d", bytes.fromhex(e["mean"]))[0]))
    path = Path(out) / EVENTS_FILE
    write_file(path, data, 0o644)
    return path
