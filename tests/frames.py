"""The tests' twin of the frame format (alphac/runtime/net.rt), built from its one table,
`alphac.formats.FRAME`: encode frames (good and malformed) and decode headers, to talk to role
executables as a peer would.

The checksum `sum64` mixes eight-byte words as `h = rotl(h ^ w, 29) * K` in four chains: chain j
(starting at h ^ j) takes word j of each 32-byte chunk; the words left and then the tail
(zero-padded) go into chain 0, which then takes chains 1, 2, 3 in turn, then the length: over the
header (checksum field zero) and then the payload. It is written here from that description, not
from net.rt's code.
"""
from __future__ import annotations

import struct

from alphac.formats import FRAME, FRAME_FORMAT, FRAME_KINDS, FRAME_MAGIC

MAGIC, FORMAT, KINDS, HEADER = FRAME_MAGIC, FRAME_FORMAT, FRAME_KINDS, FRAME.size
K = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1
DIGESTS = ("learner", "rate", "contract", "combine", "membership", "plan")


def _mix(h: int, w: int) -> int:
    h ^= w
    return (((h << 29) | (h >> 35)) & M64) * K & M64


def sum64(data: bytes, h: int = 0) -> int:
    n = len(data)
    chains = [h, h ^ 1, h ^ 2, h ^ 3]
    chunked = n - n % 32
    for words in struct.iter_unpack("<4Q", data[:chunked]):
        chains = [_mix(c, w) for c, w in zip(chains, words)]
    h = chains[0]
    full = n - n % 8
    for (w,) in struct.iter_unpack("<Q", data[chunked:full]):
        h = _mix(h, w)
    if full < n:
        h = _mix(h, int.from_bytes(data[full:], "little"))
    for c in chains[1:]:
        h = _mix(h, c)
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
