"""The binary formats shared by the compiler and the runtime, each as one table.

Each `Layout` is a record's fields (name, offset, type). The runtime reads them as constants
that every program's prelude defines (`prelude()`: `FH_KIND`, `CKR_LO`, ... and `FH_BYTES`);
the Python side packs and unpacks with `Layout.unpack`/`pack`; the docs' tables are tested
against `Layout.doc_rows()`. So a format changes in this file and nowhere else.

    FRAME        the 104-byte header of every frame between roles (alphac/runtime/net.rt)
    FRAME_KINDS  the message kinds a frame carries
    CKPT_HEADER  a checkpoint manifest's 128-byte header (alphac/runtime/ckpt.rt)
    CKPT_RECORD  its 160-byte records
    CONV_*       the driver conversation's record header, opcodes, patch, expectation and
                 refusal kinds (alphac/nvdrv/conversation.py writes it, nvdrv.rt reads it)
    XS_*, XC_*   the exact binary64 sum accumulators of the `exact_sum` contract (xsum.rt)
    XF_*         its combine frames' payload: expansions, written accumulators, spills
    EVENTS_LABEL the label of the event streams' MACs (core.rt), a string constant of the prelude

Requires nothing. Guarantees: offsets are checked at import (fields in order, no overlap,
inside the record).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

SIZES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
CODES = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q"}


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    type: str                 # u8 u16 u32 u64, or bytes<N> (raw, or zero-padded text)
    doc: str

    @property
    def size(self) -> int:
        return SIZES.get(self.type) or int(self.type[len("bytes"):])


@dataclass(frozen=True)
class Layout:
    title: str
    prefix: str               # the runtime's constants: PREFIX_FIELD offsets, PREFIX_BYTES
    size: int
    fields: tuple[Field, ...]

    def __post_init__(self) -> None:
        at = 0
        for f in self.fields:
            assert f.offset >= at, f"{self.title}: {f.name} overlaps"
            at = f.offset + f.size
        assert at <= self.size, f"{self.title}: fields pass the end"

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    def offset(self, name: str) -> int:
        return self.field(name).offset

    def constants(self) -> dict[str, int]:
        """PREFIX_FIELD (its offset) for every field, PREFIX_FIELD_BYTES for the byte strings'
        sizes, and PREFIX_BYTES."""
        out = {f"{self.prefix}_{f.name.upper()}": f.offset for f in self.fields}
        out.update({f"{self.prefix}_{f.name.upper()}_BYTES": f.size for f in self.fields
                    if f.type not in CODES})
        out[f"{self.prefix}_BYTES"] = self.size
        return out

    def unpack(self, data: bytes, at: int = 0) -> dict[str, int | bytes]:
        out: dict[str, int | bytes] = {}
        for f in self.fields:
            if f.type in CODES:
                (out[f.name],) = struct.unpack_from("<" + CODES[f.type], data, at + f.offset)
            else:
                out[f.name] = bytes(data[at + f.offset: at + f.offset + f.size])
        return out

    def pack(self, **values) -> bytes:
        buf = bytearray(self.size)
        for f in self.fields:
            v = values.get(f.name, 0 if f.type in CODES else b"")
            if f.type in CODES:
                struct.pack_into("<" + CODES[f.type], buf, f.offset, v)
            else:
                assert len(v) <= f.size, (f.name, len(v))
                buf[f.offset:f.offset + len(v)] = v
        return bytes(buf)

    def doc_rows(self) -> list[str]:
        """Markdown table rows `| offset | type | field: meaning |`, as the docs show them."""
        return [f"| {f.offset} | {f.type} | {f.name}: {f.doc} |" for f in self.fields]


def _fields(*rows: tuple[str, int, str, str]) -> tuple[Field, ...]:
    return tuple(Field(*r) for r in rows)


# -- frames between roles (DESIGN.md contract 5) --------------------------------------------------
FRAME_MAGIC = 0x48504C41                  # "ALPH"
FRAME_FORMAT = 6                          # 2: sum64 in four chains; 3: the MAC; 4: over POLYVAL;
                                          # 5: exact_sum's compact combine frames (XF_*); 6: the
                                          # payload summed first, the header from its sum
FRAME = Layout("frame header", "FH", 104, _fields(
    ("magic", 0, "u32", 'the bytes "ALPH"'),
    ("format", 4, "u16", "the frame format, 6"),
    ("kind", 6, "u16", "the message kind (FRAME_KINDS)"),
    ("sender", 8, "u32", "the sender's role code: (its index node << 24) + its index"),
    ("length", 12, "u32", "payload bytes; the receiver knows exactly how many it expects"),
    ("learner", 16, "u64", "the first 8 bytes of the learner digest"),
    ("rate", 24, "u64", "... of the rate digest (the constants)"),
    ("contract", 32, "u64", "... of the numerical contract's digest"),
    ("combine", 40, "u64", "... of the combine order's digest"),
    ("membership", 48, "u64", "... of the membership's digest"),
    ("plan", 56, "u64", "... of the plan's digest (split, strategy, placement)"),
    ("epoch", 64, "u64", "the epoch"),
    ("version", 72, "u64", "the step the frame belongs to"),
    ("checksum", 80, "u64", "sum64 of the header (this field zero), then of the payload"),
    ("mac", 88, "bytes16", "with a run key, the frame's MAC under its connection's session key "
                           "(docs/runtime.md, \"Membership\"); zero in a HELLO, a CHALLENGE, or without one"),
))
FRAME_KINDS = {"hello": 1, "combine": 2, "deliver": 3, "gather-inputs": 4, "allgather-params": 5,
               "allgather-state": 6, "publish": 7, "checkpoint": 8, "challenge": 9, "reduce": 10}
IDENTITY_BYTES = 192                      # the six 32-byte identity digests
HELLO_BYTES = IDENTITY_BYTES + 64         # the identity, the sender's nonce, its proof
NONCE_BYTES = 32                          # a CHALLENGE's payload: the acceptor's nonce

# -- checkpoint manifests (DESIGN.md contract 6) ---------------------------------------------------
# A learner's constants, data and state hold at most MAX_VALUES binary64 values (alphac.types.check
# counts them; a checkpoint's shard is refused beyond it), and a .npy file's header is at most
# NPY_HEADER bytes (numpy's own bound is 10,000).
MAX_VALUES = 1 << 20
NPY_HEADER = 1 << 16
CKPT_MAGIC = b"ALPHCKPT"
CKPT_FORMAT = 2                           # 2: room for names of NAME_MAX bytes (1: 31, 71)
# The longest name the language takes (alphac.parse.lexer, E0005), a state's or a role's; a role
# of a counted group is NAME.INDEX (at most 2^20 owners: 7 digits). A shard's path,
# ROLE/STATE.LO-HI.eEPOCH.vVERSION.npy, is at most ROLE_MAX + 1 + NAME_MAX + 4 * 20 + 9 bytes
# (four unsigned 64-bit decimals of at most 20 digits): it and its NUL fit the record's path.
NAME_MAX = 128
ROLE_MAX = NAME_MAX + 8
SHARD_PATH_MAX = ROLE_MAX + 1 + NAME_MAX + 4 * 20 + 9
CKPT_HEADER = Layout("checkpoint manifest header", "CKH", 128, _fields(
    ("magic", 0, "bytes8", 'the bytes "ALPHCKPT"'),
    ("format", 8, "u32", "the manifest format, 2 (CKPT_FORMAT)"),
    ("kind", 12, "u32", "0 the root manifest, 1 a sub-manifest"),
    ("learner", 16, "bytes32", "the learner digest"),
    ("rate", 48, "bytes32", "the rate digest"),
    ("epoch", 80, "u64", "the capture's epoch"),
    ("version", 88, "u64", "the capture's step"),
    ("count", 96, "u64", "the number of records after the header"),
    ("layout", 104, "u64", "0 flat (a star or one process), else the fan-out of the hierarchy"),
    ("owner_lo", 112, "u64", "the first owner the manifest covers"),
    ("owner_hi", 120, "u64", "one past the last"),
))
CKPT_RECORD = Layout("checkpoint manifest record", "CKR", 576, _fields(
    ("kind", 0, "u32", "1 a shard, 2 a sub-manifest"),
    ("writer", 4, "u32", "the owner that wrote the shard"),
    ("lo", 8, "u64", "a shard: its first coordinate; a sub-manifest: its first owner"),
    ("hi", 16, "u64", "one past the last"),
    ("sha256", 24, "bytes32", "the SHA-256 of the file"),
    ("state", 56, "bytes136", "a shard's state name (at most NAME_MAX = 128 bytes), zero padded"),
    ("path", 192, "bytes384", "the file's path relative to the checkpoint (at most SHARD_PATH_MAX = 354 bytes), "
                              "zero padded"),
))
assert NAME_MAX < CKPT_RECORD.field("state").size and SHARD_PATH_MAX < CKPT_RECORD.field("path").size
CKPT_SHARD, CKPT_SUB = 1, 2
CKPT_TRAILER = 32                         # a SHA-256 of everything before it

# -- the driver conversation (alphac/nvdrv/conversation.py) --------------------------------------
CONV_HEADER_WORDS = 10                    # op, a0..a6, npatch, nsave
CONV_ITEM_WORDS = 4                       # a patch (dst, size, kind, value) or a save
CONV_OPS = {"open": 1, "ioctl": 2, "mmap": 3, "close": 4, "find": 5, "expect": 6, "mark": 7}
CONV_PATCHES = {"slot": 1, "addr": 2, "copy": 3}
CONV_EXPECTS = {"bytes": 1, "string": 2, "ge": 3, "le": 4, "eq64": 5}   # eq64: a u64 == the value
CONV_REFUSALS = {"device-uuid": 1, "nvidia-plan-host": 2, "gpu-topology": 3, "nvidia-call": 4}

# -- the exact sum accumulators (alphac/runtime/xsum.rt) -----------------------------------------
# Digit k (0..XS_DIGITS - 1) of an exact sum has weight 2**(32 * k - 1074); digits are signed
# 64-bit words in carry-save form (not normalized). The flags, XS_FLAGS: XS_FLAG_PINF (a +inf
# was added), XS_FLAG_NINF (a -inf), XS_FLAG_NAN (a NaN), XS_FLAG_NOT_NEG_ZERO (a value other than
# -0.0 was added: a +0.0, or any nonzero, inf or NaN). The empty sum rounds to -0.0; a zero sum
# rounds to +0.0 once XS_FLAG_NOT_NEG_ZERO is set. At most 2**30 terms per sum in all (merged
# ones included).
#
# A coordinate's compact accumulator is XC_WORDS 64-bit little-endian words at an 8-byte-aligned
# address: word 0 the header, words 1..XC_DIGITS a window of signed digits, window digit i of
# weight 2**(32 * (base + i) - 1074). Header bits 0..3 the flags, bit 4 XC_SPILLED (the sum lives
# in the coordinate's spill region: XS_DIGITS dense digits, digit k of weight 2**(32k - 1074);
# the window digits are then zero and the base field 0), bits XC_BASE_SHIFT..XC_BASE_SHIFT + 7
# base + 1 (0: no window, the digits zero; else base in 0..XC_MAX_BASE); a window or XC_SPILLED
# implies XS_FLAG_NOT_NEG_ZERO; every other bit zero. A spill region is zero while its coordinate
# is not spilled. A frame's spill records are XC_RECORD_WORDS words each: the coordinate's index,
# then its XS_DIGITS digits. XS_WORDS (a flags word and XS_DIGITS digits) is the dense size.
XS_DIGITS = 66
XS_WORDS = 1 + XS_DIGITS
XS_FLAGS = {"pinf": 1, "ninf": 2, "nan": 4, "not-neg-zero": 8}
XC_DIGITS = 5
XC_WORDS = 1 + XC_DIGITS
XC_SPILLED = 16
XC_BASE_SHIFT = 8
XC_MAX_BASE = XS_DIGITS - XC_DIGITS
XC_RECORD_WORDS = 1 + XS_DIGITS
# An exact_sum combine (format 5) is up to three frames. The first: each of the P sums' expansion
# (xsum.rt, "Expansions": a param's s words, then its lo words, params in order, then the loss
# sum's pair), then XF_TAIL words: n, the record count R (at most P) and the spill count S (at
# most R). Then, when R > 0, a frame of R records of XF_RECORD_WORDS words: the coordinate's index
# (increasing, below P), then its compact accumulator (XC_WORDS words, its header not zero): the
# coordinates whose accumulators were written; a sum is its expansion's plus its record's. Then,
# when S > 0, a frame of S spill records (XC_RECORD_WORDS words each, as above).
XF_TAIL = 3
XF_RECORD_WORDS = 1 + XC_WORDS

# the events' MAC chains: the runtime's (core.rt, through the prelude) and the record's seals
EVENTS_LABEL = "alphac-events-v2"
# membership (net.rt): what a HELLO's proof and a connection's session key are MACs of begins
# with these 16 bytes, and the run's POLYVAL key is the MAC of the third (docs/runtime.md,
# "Membership")
HELLO_LABEL = "alphac-hello-v01"
SESSION_LABEL = "alphac-session-1"
POLYVAL_LABEL = "alphac-polyval-1"
STRINGS = {"EVENTS_LABEL": EVENTS_LABEL, "HELLO_LABEL": HELLO_LABEL,   # the runtime's string
           "SESSION_LABEL": SESSION_LABEL, "POLYVAL_LABEL": POLYVAL_LABEL}   # constants

# POLYVAL (polyval.rt): the blocks the CPU's carry-less multiply (polyval_hw, each selector)
# folds a reduction; the runtime's key table holds H^1 .. H^PV_GROUP, then p's constant
PV_GROUP = 8
# a frame's payload in parts (net.rt's frame_part): at most this many, sent from and received into
# where they lie; role.py packs a message of more into one buffer
FRAME_PARTS = 16

LAYOUTS = (FRAME, CKPT_HEADER, CKPT_RECORD)


def constants() -> dict[str, int]:
    """Every constant the runtime reads from this file, by name."""
    out: dict[str, int] = {}
    for lay in LAYOUTS:
        out.update(lay.constants())
    out.update(FRAME_MAGIC=FRAME_MAGIC, FRAME_FORMAT=FRAME_FORMAT, HELLO_BYTES=HELLO_BYTES,
               IDENTITY_BYTES=IDENTITY_BYTES, NONCE_BYTES=NONCE_BYTES,
               CKPT_FORMAT=CKPT_FORMAT, CKPT_SHARD=CKPT_SHARD, CKPT_SUB=CKPT_SUB,
               CKPT_TRAILER=CKPT_TRAILER, NAME_MAX=NAME_MAX, SHARD_PATH_MAX=SHARD_PATH_MAX, NV_HEADER_WORDS=CONV_HEADER_WORDS,
               NV_ITEM_WORDS=CONV_ITEM_WORDS, XS_WORDS=XS_WORDS, XS_DIGITS=XS_DIGITS,
               XC_DIGITS=XC_DIGITS, XC_WORDS=XC_WORDS, XC_SPILLED=XC_SPILLED,
               XC_BASE_SHIFT=XC_BASE_SHIFT, XC_MAX_BASE=XC_MAX_BASE,
               XC_RECORD_WORDS=XC_RECORD_WORDS, XF_TAIL=XF_TAIL, XF_RECORD_WORDS=XF_RECORD_WORDS,
               PV_GROUP=PV_GROUP, FRAME_PARTS=FRAME_PARTS)
    out.update((k + "_BYTES", len(v)) for k, v in STRINGS.items())
    for name, code in FRAME_KINDS.items():
        out["KIND_" + name.upper().replace("-", "_")] = code
    for table, prefix in ((CONV_OPS, "NV_"), (CONV_PATCHES, "NV_PATCH_"),
                          (CONV_EXPECTS, "NV_EXPECT_"), (CONV_REFUSALS, "NV_REFUSE_"),
                          (XS_FLAGS, "XS_FLAG_")):
        for name, code in table.items():
            out[prefix + name.upper().replace("-", "_")] = code
    return out


def prelude() -> str:
    """The runtime-language constants of every shared format (part of every prelude)."""
    return "".join(f"const {k} = {v};\n" for k, v in sorted(constants().items())) + \
        "".join(f'const {k} = "{v}";\n' for k, v in sorted(STRINGS.items()))
