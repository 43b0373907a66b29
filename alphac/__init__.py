"""alphac: the Alpha compiler.

Alpha learners (``.alpha`` files) become a reference-interpreted oracle, static executables for
x86-64 and AArch64 Linux, and (for GPU owners) GPU code. The pipeline is one module per pass:

    parse -> types -> ir -> dist -> lower -> x86_64 | aarch64 -> elf

``alphac.driver`` reads as that list.
"""

__version__ = "0.1.0"
