"""alphac.elf: the one static ELF64 executable writer, shared by every target ISA, and a reader.

What it does: ``alphac.elf.writer`` lays out ``.text``/``.rodata``/``.data``/``.bss`` into a
static, little-endian ``ET_EXEC`` file with W^X ``PT_LOAD`` segments, a ``PT_GNU_STACK``, a
``.note.gnu.build-id`` and a symbol table, and resolves relocations through a callback that the
target ISA supplies (the writer knows addresses, the ISA knows encodings). ``alphac.elf.reader``
reads ELF64 files back (sections, symbols, relocations): cubins for ``alphac.ptx.cubin`` and the
executables for ``--emit asm``; pyelftools is only the tests' oracle for it.

Requires: nothing but the Python standard library.

Guarantees: the output bytes depend only on the inputs; see ``alphac.elf.writer`` for the layout.
The reader checks every offset and size it reads and raises ``ElfError`` for a malformed file.
"""
