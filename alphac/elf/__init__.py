"""alphac.elf: the one static ELF64 executable writer, shared by every target ISA.

What it does: ``alphac.elf.writer`` lays out ``.text``/``.rodata``/``.data``/``.bss`` into a
static, little-endian ``ET_EXEC`` file with W^X ``PT_LOAD`` segments, a ``PT_GNU_STACK``, a
``.note.gnu.build-id`` and a symbol table, and resolves relocations through a callback that the
target ISA supplies (the writer knows addresses, the ISA knows encodings).

Requires: nothing but the Python standard library.

Guarantees: the output bytes depend only on the inputs; see ``alphac.elf.writer`` for the layout.
"""
