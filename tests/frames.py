"""The tests' twin of the frame format (alphac/runtime/net.rt), built from its one table,
`alphac.formats.FRAME`: encode frames (good and malformed) and decode headers, to talk to role
executables as a peer would.

The checksum `sum64` mixes eight-byte words as `h = rotl(h ^ w, 29) * K` in four chains: chain j
(starting at h ^ j) takes word j of each 32-byte chunk; the words left and then the tail
(zero-padded) go into chain 0, which then takes chains 1, 2, 3 in turn, then the length: over the
payload from 0, then over the header (checksum field zero) from the payload's sum. It is written here from that description, not
from net.rt's code; so are the set-up of a connection (CHALLENGE, HELLO, HELLO) and the frames'
MACs under a run key (docs/runtime.md, "Membership"): `accept` and `connect` play either end
(with the zero key, a role started without ALPHAC_RUN_KEY), `Session.mac` seals a frame.
"""
from __future__ import annotations

import hmac
import os
import struct

from alphac.formats import (FRAME, FRAME_FORMAT, FRAME_KINDS, FRAME_MAGIC, HELLO_BYTES,
                            HELLO_LABEL, POLYVAL_LABEL, SESSION_LABEL)

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
           magic: int = MAGIC, fmt: int = FORMAT, session: "Session | None" = None) -> bytes:
    fields = dict(zip(DIGESTS, digests64(identity)), magic=magic, format=fmt, kind=kind,
                  sender=sender, length=len(payload) if length is None else length,
                  epoch=epoch, version=version)
    if session is not None:
        fields["mac"] = session.mac(FRAME.pack(**fields), payload)
    head = FRAME.pack(**fields)
    if checksum is None:
        checksum = sum64(head, sum64(payload))
    return FRAME.pack(**fields, checksum=checksum) + payload


ZERO_KEY = bytes(32)
POLY = (1 << 128) | (1 << 127) | (1 << 126) | (1 << 121) | 1      # RFC 8452's POLYVAL field


def polyval(h: bytes, data: bytes, length_block: bool = True) -> bytes:
    """POLYVAL (RFC 8452, section 3) under the 16-byte key h of `data` zero-padded to whole
    blocks, then (with length_block) the block le64(8 len) | le64(0): S = dot(S ^ X, H) a block,
    dot(a, b) = a * b * x^-128 mod POLY, each block a little-endian 128-bit number."""
    if length_block:
        data = data + bytes(-len(data) % 16) + struct.pack("<2Q", 8 * len(data), 0)
    key, s = int.from_bytes(h, "little"), 0
    for i in range(0, len(data), 16):
        a, b, r = s ^ int.from_bytes(data[i:i + 16], "little"), key, 0
        while b:                                      # a * b, carry-less
            if b & 1:
                r ^= a
            a, b = a << 1, b >> 1
        for _ in range(128):                          # * x^-128: r + (its bit 0) * POLY, halved
            r = (r ^ POLY if r & 1 else r) >> 1       # (degree < 128 at the end)
        s = r
    return s.to_bytes(16, "little")


def kdf(key: bytes, label: str, nonces: bytes, *words: int) -> bytes:
    return hmac.new(key, label.encode() + nonces + struct.pack(f"<{len(words)}Q", *words), "sha256").digest()


class Session:
    """One end of a connection after its set-up: MACs of the frames it sends and receives, each
    direction counted from 0."""

    def __init__(self, key: bytes, nonces: bytes, a: int, c: int, me: int, peer: int):
        self.key, self.me, self.peer = kdf(key, SESSION_LABEL, nonces, a, c), me, peer
        self.hash_key = hmac.new(key, POLYVAL_LABEL.encode(), "sha256").digest()[:16]
        self.sent = self.got = 0

    def _mac(self, seq: int, sender: int, head: bytes, payload: bytes) -> bytes:
        msg = struct.pack("<2Q", seq, sender) + head + polyval(self.hash_key, payload)
        return hmac.new(self.key, msg, "sha256").digest()[:16]

    def mac(self, head: bytes, payload: bytes) -> bytes:
        """The MAC of a frame we send (head: its header, checksum and mac zero)."""
        self.sent += 1
        return self._mac(self.sent - 1, self.me, head, payload)

    def check(self, frame: bytes) -> bool:
        """Whether a frame we received carries the MAC our peer's next frame must."""
        head = FRAME.unpack(frame[:HEADER])
        self.got += 1
        want = self._mac(self.got - 1, self.peer, FRAME.pack(**{**head, "checksum": 0, "mac": b""}),
                         frame[HEADER:])
        return hmac.compare_digest(want, head["mac"])


def hello(sender: int, identity: dict[str, bytes], steps: int, nonce: bytes = bytes(32),
          proof: bytes = bytes(32)) -> bytes:
    """The HELLO of a role `sender` whose run takes `steps` steps (its version field)."""
    from alphac.dist.identity import COMPONENTS
    return encode(KINDS["hello"], sender, b"".join(identity[c] for c in COMPONENTS) + nonce + proof,
                  identity, version=steps)


def accept(conn, me: int, identity: dict[str, bytes], steps: int, key: bytes = ZERO_KEY):
    """The acceptor's set-up: CHALLENGE sent, the connector's HELLO read. Returns (the
    connector's code, the HELLO that answers it, and a function of no argument that gives the
    session once that HELLO is sent)."""
    nonce_a = os.urandom(32)
    conn.sendall(encode(KINDS["challenge"], me, nonce_a, identity, version=steps))
    head = recv_exact(conn, HEADER)
    body, h = recv_exact(conn, HELLO_BYTES), decode_header(head)
    zeroed = FRAME.pack(**{**FRAME.unpack(head), "checksum": 0})
    assert h["checksum"] == sum64(zeroed, sum64(body)) and h["kind"] == KINDS["hello"], "twins disagree"
    who, nonces = h["sender"], nonce_a + body[-64:-32]
    answer = hello(me, identity, steps, nonce_a, kdf(key, HELLO_LABEL, nonces, me, who, steps, 0))
    return who, answer, lambda: Session(key, nonces, me, who, me, who)


def connect(conn, me: int, peer: int, identity: dict[str, bytes], steps: int,
            key: bytes = ZERO_KEY, read_answer: bool = True) -> Session:
    """The connector's set-up with `peer`: its CHALLENGE read, our HELLO sent, its HELLO read."""
    nonce_a = recv_exact(conn, HEADER + 32)[HEADER:]
    nonce_c = os.urandom(32)
    conn.sendall(hello(me, identity, steps, nonce_c,
                       kdf(key, HELLO_LABEL, nonce_a + nonce_c, me, peer, steps, 0)))
    if read_answer:
        recv_exact(conn, HEADER + HELLO_BYTES)
    return Session(key, nonce_a + nonce_c, peer, me, me, peer)


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
