"""Rebuilds the worst-case files here from CORE-MATH's lists (a checkout of core-math):

    python tests/data/worst/make.py /path/to/core-math [FUNCTION ...]

Each `src/binary64/<f>/<f>.wc` line that is not a comment starts with one input in C99 hex
notation; every such input becomes its binary64 bit pattern, and `<f>.f64.xz` holds the
distinct patterns sorted, as little-endian 64-bit words, xz-compressed.
"""
import lzma
import struct
import sys
from pathlib import Path

FUNCTIONS = ("exp", "expm1", "log", "log1p", "tanh", "sin", "cos")


SPECIAL = {"snan": 0x7FF4000000000000, "nan": 0x7FF8000000000000, "inf": 0x7FF0000000000000}


def pattern(token: str) -> int:
    sign = (1 << 63) if token.startswith("-") else 0
    name = token.lstrip("+-")
    if name in SPECIAL:
        return sign | SPECIAL[name]
    return struct.unpack("<Q", struct.pack("<d", float.fromhex(token)))[0]


def patterns(text: str) -> list[int]:
    return sorted({pattern(line.split("#")[0].split()[0].rstrip(","))
                   for line in text.splitlines() if line.split("#")[0].strip()})


def main(root: str, names: list[str]) -> None:
    here = Path(__file__).parent
    for f in names or FUNCTIONS:
        words = patterns((Path(root) / "src/binary64" / f / f"{f}.wc").read_text())
        data = b"".join(struct.pack("<Q", w) for w in words)
        (here / f"{f}.f64.xz").write_bytes(lzma.compress(data, preset=9))
        print(f, len(words))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
