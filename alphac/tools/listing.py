"""`alphac build --emit asm`: the executable's code, disassembled, annotated with Alpha source.

The disassembler is capstone, an optional dependency (`pip install 'alphac[listing]'`;
without it `CapstoneMissing`, which the CLI reports in one line); the annotation comes
from the line table the assembler keeps (`Text.lines`), which follows the `#line` directives
the learner lowering emits. Each function is listed under its name; where the Alpha line an
instruction came from changes, the line is printed as a comment:

    learner_group_0:
      ; lsq_adam.alpha:35:   m = b1 * m + c1 * g
      401234: f2 0f 59 c1      mulsd xmm0, xmm1
"""
from __future__ import annotations


class CapstoneMissing(Exception):
    """capstone is not installed: `--emit asm` is refused with how to install it."""


def disassemble(image, source_lines: list[str], source_name: str) -> str:
    try:
        import capstone
    except ImportError:
        raise CapstoneMissing("--emit asm needs the disassembler capstone, an optional dependency: "
                              "pip install 'alphac[listing]' (or pip install capstone)") from None
    arch_name, mode_name = image.target.capstone
    arch = getattr(capstone, arch_name, None) or getattr(capstone, "CS_ARCH_AARCH64")
    md = capstone.Cs(arch, getattr(capstone, mode_name))
    from alphac.elf.reader import Elf
    elf = Elf(image.elf)
    text = elf.section(".text")
    base, code = text.addr, elf.data(text)
    marks = {off: line for off, _, line in image.text.lines}
    out = []
    for name, start, size in image.text.funcs:
        out.append(f"{name}:")
        current = None
        for insn in md.disasm(code[start:start + size], base + start):
            off = insn.address - base
            if off in marks and marks[off] != current:
                current = marks[off]
                text = source_lines[current - 1].strip() if 0 < current <= len(source_lines) else ""
                out.append(f"  ; {source_name}:{current}: {text}")
            raw = " ".join(f"{b:02x}" for b in insn.bytes)
            out.append(f"  {insn.address:x}: {raw:<24} {insn.mnemonic} {insn.op_str}".rstrip())
        out.append("")
    return "\n".join(out)


def lir(program) -> str:
    return "\n\n".join(f.dump() for f in program.functions) + "\n"
