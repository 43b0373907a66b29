"""The frame format in Python: the twin of alphac/runtime/net.rt, for tests and tools.

A frame is a 96-byte little-endian header and a payload (see net.rt for the field table). The
checksum `sum64` mixes eight bytes at a time, `h = rotl(h ^ w, 29) * K`, the tail zero-padded,
then the length: it is over the header (checksum field zero) and then the payload.
"""
from __future__ import annotations

import struct

MAGIC = 0x48504C41
FORMAT = 1
HEADER = struct.Struct("<IHHII6QQQQQ")      # 96 bytes
K = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1
KINDS = {"hello": 1, "combine": 2, "deliver": 3, "gather-inputs": 4, "allgather-params": 5,
         "allgather-state": 6, "publish": 7}
assert HEADER.size == 96


def sum64(data: bytes, h: int = 0) -> int:
    n = len(data)
    full = n - n % 8
    for (w,) in struct.iter_unpack("<Q", data[:full]):
        h ^= w
        h = (((h << 29) | (h >> 35)) & M64) * K & M64
    if full < n:
        w = int.from_bytes(data[full:], "little")
        h ^= w
        h = (((h << 29) | (h >> 35)) & M64) * K & M64
    h ^= n
    return h * K & M64


def digests64(identity: dict[str, bytes]) -> list[int]:
    from alphac.dist.identity import COMPONENTS
    return [int.from_bytes(identity[c][:8], "little") for c in COMPONENTS]


def encode(kind: int, sender: int, payload: bytes, identity: dict[str, bytes], version: int = 0,
           epoch: int = 0, length: int | None = None, checksum: int | None = None,
           magic: int = MAGIC, fmt: int = FORMAT) -> bytes:
    length = len(payload) if length is None else length
    ids = digests64(identity)
    head = HEADER.pack(magic, fmt, kind, sender, length, *ids, epoch, version, 0, 0)
    if checksum is None:
        checksum = sum64(payload, sum64(head))
    head = HEADER.pack(magic, fmt, kind, sender, length, *ids, epoch, version, checksum, 0)
    return head + payload


def hello(sender: int, identity: dict[str, bytes]) -> bytes:
    from alphac.dist.identity import COMPONENTS
    return encode(KINDS["hello"], sender, b"".join(identity[c] for c in COMPONENTS), identity)


def decode_header(data: bytes) -> dict:
    f = HEADER.unpack(data[:96])
    return {"magic": f[0], "format": f[1], "kind": f[2], "sender": f[3], "length": f[4],
            "ids": f[5:11], "epoch": f[11], "version": f[12], "checksum": f[13]}
