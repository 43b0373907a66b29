"""The pinned PTX assembler: find `ptxas`, fingerprint it, and turn PTX into a cubin.

`find_ptxas()` takes `$ALPHAC_PTXAS` if set, else `ptxas` on the PATH, and records its version
line and the SHA-256 of the file (after resolving symlinks; a wrapper script is hashed as the
script). `assemble(ptx, sm)` runs it as

    ptxas -arch=sm_<sm> -O3 --fmad=false --disable-optimizer-constants kernel.ptx -o kernel.cubin

in a fresh temporary directory with fixed file names and `LC_ALL=C`. `--fmad=false` forbids
contracting a multiply and an add into DFMA (the PTX already names `.rn` on each, which forbids
it too). `--disable-optimizer-constants` keeps ptxas's own constants out of a second constant
bank (`.nv.constant2.K`, seen on sm_86 for div/sqrt), so a launch binds constant bank 0 only.
ptxas records its options in the cubin (`.note.nv.tkinfo`) but no path, so the cubin's
bytes depend only on the PTX, the target and the assembler: tests/test_ptx.py checks two builds
from two directories are identical. `-v` is never passed to a build (it would change that note).

Requires: nothing at import. Guarantees: `PtxasMissing` when no assembler is found (the
compiler refuses the GPU build before writing anything); `PtxasFailed` with the assembler's
message when it rejects the PTX; otherwise the complete cubin bytes, never a partial file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

FLAGS = ("-O3", "--fmad=false", "--disable-optimizer-constants")


class PtxasMissing(Exception):
    """No ptxas: set $ALPHAC_PTXAS or put CUDA's ptxas on the PATH."""


class PtxasFailed(Exception):
    """ptxas rejected the PTX (a compiler defect: alphac's PTX should always assemble)."""


@dataclass(frozen=True)
class Ptxas:
    path: str
    version: str        # the `ptxas --version` line naming the release, e.g. "... V13.0.88"
    sha256: str


def _unwrap(path: str) -> str:
    """The binary behind a one-line `exec /path/ptxas "$@"` wrapper script (as CUDA installs
    often put on the PATH), so that the fingerprint pins the assembler, not the wrapper."""
    real = os.path.realpath(path)
    try:
        with open(real if os.path.isfile(real) else os.devnull, "rb") as f:
            head = f.read(512)
    except OSError:
        return real
    if head.startswith(b"#!"):
        for line in head.decode(errors="replace").splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "exec" and os.path.isfile(words[1]):
                return os.path.realpath(words[1])
    return real


@lru_cache(maxsize=None)
def _fingerprint(path: str) -> Ptxas:
    real = _unwrap(path)
    try:
        out = subprocess.run([real, "--version"], capture_output=True, text=True, check=True,
                             env=_env()).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise PtxasMissing(f"`{path}` does not run as ptxas: {e}") from None
    version = next((ln for ln in out.splitlines() if "release" in ln), out.strip())
    return Ptxas(real, version.strip(), hashlib.sha256(Path(real).read_bytes()).hexdigest())


def _env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


def find_ptxas(path: str | None = None) -> Ptxas:
    """`path` if given, else $ALPHAC_PTXAS, else `ptxas` on the PATH; PtxasMissing if none runs."""
    if path is not None:
        if not os.path.isfile(path):
            raise PtxasMissing(f"`{path}` is not a file")
        return _fingerprint(path)
    path = os.environ.get("ALPHAC_PTXAS") or shutil.which("ptxas")
    if not path or not os.path.isfile(path):
        raise PtxasMissing("ptxas not found: set ALPHAC_PTXAS or add CUDA's bin to PATH")
    return _fingerprint(path)


def command(sm: int, tool: Ptxas) -> list[str]:
    return [tool.path, f"-arch=sm_{sm}", *FLAGS, "kernel.ptx", "-o", "kernel.cubin"]


def assemble(ptx: str, sm: int, tool: Ptxas | None = None) -> bytes:
    """The cubin for `ptx` on sm_<sm>: ptxas run once per text, architecture and ptxas (by its
    path, version and SHA-256) in a process, since a build of several owners of one learner (the
    host choices, the benchmark's variants, the tests) assembles the same kernels each time."""
    return _assemble(ptx, sm, tool or find_ptxas())


@lru_cache(maxsize=256)
def _assemble(ptx: str, sm: int, tool: Ptxas) -> bytes:
    with tempfile.TemporaryDirectory(prefix="alphac-ptxas-") as tmp:
        Path(tmp, "kernel.ptx").write_text(ptx)
        run = subprocess.run(command(sm, tool), cwd=tmp, capture_output=True, text=True,
                             env=_env())
        if run.returncode != 0:
            raise PtxasFailed(run.stderr.strip() or f"ptxas exited {run.returncode}")
        return Path(tmp, "kernel.cubin").read_bytes()
