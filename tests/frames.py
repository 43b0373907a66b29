"""The tests' twin of the frame format (alphac/runtime/net.rt), built from its one table,
`alphac.formats.FRAME`: encode frames (good and malformed) and decode headers, to talk to role
executables as a peer would.

The checksum `sum64` mixes eight bytes at a time, `h = rotl(h ^ w, 29) * K`, the tail
zero-padded, then the length: over the header (checksum field zero) and then the payload. It is
written here from that description, not from net.rt's code.
"""
from __future__ import annotations

import struct

from alphac.formats import FRAME, FRAME_FORMAT, FRAME_KINDS, FRAME_MAGIC

MAGIC, FORMAT, KINDS, HEADER = FRAME_MAGIC, FRAME_FORMAT, FRAME_KINDS, FRAME.size
K = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1
DIGESTS = ("learner", "rate", "contract", "combine", "membership", "plan")


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
    fields = dict(zip(DIGESTS, digests64(identity)), magic=magic, format=fmt, kind=kind,
                  sender=sender, length=len(payload) if length is None else length,
                  epoch=epoch, version=version)
    head = FRAME.pack(**fields)
    if checksum is None:
        checksum = sum64(payload, sum64(head))
    return FRAME.pack(**fields, checksum=checksum) + payload


def hello(sender: int, identity: dict[str, bytes], steps: int) -> bytes:
    """The HELLO of a role `sender` whose run takes `steps` steps (its version field)."""
    from alphac.dist.identity import COMPONENTS
    return encode(KINDS["hello"], sender, b"".join(identity[c] for c in COMPONENTS), identity,
                  version=steps)


def decode_header(data: bytes) -> dict:
    h = FRAME.unpack(data[:HEADER])
    h["ids"] = tuple(h[d] for d in DIGESTS)
    return h


def recv_exact(conn, n: int) -> bytes:
    """Exactly n bytes from a socket; ConnectionError if the peer closes first."""
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf
