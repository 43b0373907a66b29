"""Decoders of what a GPU owner writes, for the GPU tools, the mock GPU and the tests (the
compiler only encodes): a GPFIFO entry back to its push buffer, a QMD image back to its fields."""
from alphac.nvdrv import abi
from alphac.nvdrv.abi import BITFIELDS, FieldError, QmdLayout


def qmd_field(name: str, index: int | None = None) -> str:
    """The table key of FIELD or FIELD(index)."""
    return name if index is None else f"{name}({index})"


def unpack_qmd(layout: QmdLayout, image: bytes, names=None) -> dict[str, int]:
    """Field values of a QMD image (all fields when names is None)."""
    if len(image) != layout.nbytes:
        raise FieldError(f"a {layout.name} QMD is {layout.nbytes} bytes, not {len(image)}")
    word = int.from_bytes(image, "little")
    out = {}
    for name in (layout.fields if names is None else names):
        hi, lo = layout.fields[name]
        out[name] = (word >> lo) & ((1 << (hi - lo + 1)) - 1)
    return out


def decode_entry(arch: abi.Arch, entry: int) -> tuple[int, int]:
    """(push-buffer va, dwords) of a GPFIFO entry: the inverse of gpfifo_entry, for the mock."""
    h = arch.host_methods

    def field(word: int, name: str) -> int:
        hi, lo = BITFIELDS[name]
        return (word >> lo) & ((1 << (hi - lo + 1)) - 1)
    lo, hi = entry & 0xffffffff, entry >> 32
    va = (field(lo, f"{h}_GP_ENTRY0_GET") << 2) | (field(hi, f"{h}_GP_ENTRY1_GET_HI") << 32)
    return va, field(hi, f"{h}_GP_ENTRY1_LENGTH")
