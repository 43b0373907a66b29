"""alphac: the Alpha compiler.

Alpha learners (``.alpha`` files) become a reference-interpreted oracle, static executables for
x86-64 and AArch64 Linux, and (for GPU owners) GPU code. The pipeline is one module per pass:

    parse -> types -> ir -> dist -> lower -> x86_64 | aarch64 -> elf

``alphac.driver`` reads as that list. The compiler's identity is its version and
``compiler_digest()``, the SHA-256 of every file of this package (build manifests and every
executable's ``--version`` carry it).
"""
import hashlib
from pathlib import Path

__version__ = "0.1.0"


def compiler_files(package: "str | Path | None" = None) -> list[str]:
    """Every file the compiler may read: all of `package` (code, the runtime's *.rt, the *.alpha
    libraries, any data), by sorted relative path; not __pycache__ or *.pyc (Python's caches)."""
    package = Path(package or Path(__file__).resolve().parent)
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*")
                  if p.is_file() and p.suffix != ".pyc"
                  and "__pycache__" not in p.relative_to(package).parts)


def compiler_digest(package: "str | Path | None" = None) -> str:
    """SHA-256 over `compiler_files(package)`, each as `path NUL length NUL bytes`."""
    package = Path(package or Path(__file__).resolve().parent)
    files = compiler_files(package)
    h = hashlib.sha256()
    for rel in files:
        data = (package / rel).read_bytes()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()
