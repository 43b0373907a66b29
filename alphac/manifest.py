"""Build manifests: what a build made, from what, with which compiler; as stable JSON.

What it does
    A manifest is written next to every build. It lists each artifact (its path relative to the
    manifest's directory, size, SHA-256, the inputs it was made from, and a `recipe`: a small
    dict that `alphac.artifacts` can rebuild it from), the SHA-256 of every input (sources,
    `.npy` files; paths relative to the directory the build ran in), the compiler (its version
    and the SHA-256 of every file of its package) and the external tools used (name -> version and
    SHA-256; none yet, ptxas later). `alphac verify` reads it back and checks every hash.

        {"format": 1,
         "compiler": {"sha256": "...", "version": "0.1.0",
                      "math_tables": {"exp2": {"sha256": "...", "words": 768}, ...}},
         "tools": {},
         "inputs": {"examples/lsq_adam.alpha": {"sha256": "..."}},
         "artifacts": {"learners/lsq_adam.x86_64": {
             "inputs": ["examples/lsq_adam.alpha"],
             "recipe": {"kind": "learner", "source": "examples/lsq_adam.alpha", "target": "x86_64"},
             "sha256": "...", "size": 6840}}}

Requires
    Inputs inside the current directory (an absolute path inside it is recorded relative to it).

Guarantees
    The text is a function of its content: JSON with sorted keys, 2-space indent, a trailing
    newline; lists sorted. No time, no host name, no absolute path: `input_path` refuses a path
    outside the current directory, and `load` refuses a manifest with one. A missing or
    malformed manifest raises `ManifestError` with a one-line reason, never another exception.
"""
from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path, PurePosixPath

from alphac import __version__, compiler_digest, compiler_files  # noqa: F401 (also named here)
from alphac.encode import json_text
from alphac.files import LIMITS, loads, open_regular, read_regular, write_file

FORMAT = 1
NAME = "MANIFEST.json"                   # what build-all writes into its output directory
SUFFIX = ".manifest.json"                # `alphac build -o OUT` writes OUT.manifest.json

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


class ManifestError(ValueError):
    """A manifest that cannot be written or read; the message says which field and why."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MAX_FILE = LIMITS["manifest"][0]    # bytes of a manifest, or of a file it hashes


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a regular file, read in 1 MiB pieces (a data file may be any size)."""
    fd, _ = open_regular(path)
    try:
        h = hashlib.sha256()
        while block := os.read(fd, 1 << 20):
            h.update(block)
    finally:
        os.close(fd)
    return h.hexdigest()


def input_path(path: str | Path) -> str:
    """`path` as a manifest records it: relative to the current directory, '/'-separated."""
    cwd = os.path.abspath(os.curdir)
    rel = os.path.relpath(os.path.abspath(path), cwd)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        raise ManifestError(f"input `{path}` is outside the current directory, so a manifest "
                            f"cannot name it without an absolute path; build from a directory "
                            f"that contains every input")
    return PurePosixPath(Path(rel)).as_posix()


@lru_cache(maxsize=None)
def compiler() -> dict:
    """This compiler, as a manifest names it: with the constant tables of the contract's
    functions (alphac.math), which every executable that calls one carries as data."""
    from alphac.math import table_digests
    return {"sha256": compiler_digest(), "version": __version__, "math_tables": table_digests()}


def artifact_entry(data: bytes, recipe: dict, inputs: list[str]) -> dict:
    return {"inputs": sorted(set(inputs)), "recipe": dict(recipe),
            "sha256": sha256_bytes(data), "size": len(data)}


def new(artifacts: dict[str, dict], inputs: list[str], tools: dict[str, dict]) -> dict:
    """A manifest of `artifacts` (path -> artifact_entry), hashing every input file now."""
    return {"format": FORMAT, "compiler": compiler(), "tools": dict(tools),
            "inputs": {p: {"sha256": sha256_file(p)} for p in sorted(set(inputs))},
            "artifacts": dict(artifacts)}


def dumps(manifest: dict) -> str:
    return json_text(manifest, indent=2) + "\n"


def write(path: str | Path, manifest: dict) -> None:
    write_file(path, dumps(manifest).encode("utf-8"), 0o644)


# ---- reading -----------------------------------------------------------------------------------
def _relative(p, what: str) -> str:
    if not isinstance(p, str) or not p:
        raise ManifestError(f"{what}: not a path: {p!r}")
    parts = PurePosixPath(p).parts
    if p.startswith("/") or os.path.isabs(p) or ".." in parts:
        raise ManifestError(f"{what}: `{p}` is not a relative path inside its directory")
    return p


def _sha(v, what: str) -> str:
    if not isinstance(v, str) or not _HEX64.match(v):
        raise ManifestError(f"{what}: not a SHA-256 in hex: {v!r}")
    return v


def _dict(v, what: str) -> dict:
    if not isinstance(v, dict):
        raise ManifestError(f"{what}: expected an object, got {type(v).__name__}")
    return v


def validate(m) -> dict:
    """`m` if it is a well-formed manifest of this format; otherwise ManifestError."""
    m = _dict(m, "manifest")
    if m.get("format") != FORMAT:
        raise ManifestError(f"format {m.get('format')!r} is not {FORMAT}")
    missing = sorted({"format", "compiler", "tools", "inputs", "artifacts"} - set(m))
    if missing:
        raise ManifestError(f"missing field{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
    comp = _dict(m["compiler"], "compiler")
    _sha(comp.get("sha256"), "compiler.sha256")
    if not isinstance(comp.get("version"), str):
        raise ManifestError("compiler.version: not a string")
    for name, t in _dict(comp.get("math_tables", {}), "compiler.math_tables").items():
        _sha(_dict(t, f"compiler.math_tables.{name}").get("sha256"),
             f"compiler.math_tables.{name}.sha256")
    for name, tool in _dict(m["tools"], "tools").items():
        _dict(tool, f"tools.{name}")
    for p, entry in _dict(m["inputs"], "inputs").items():
        _relative(p, "inputs")
        _sha(_dict(entry, f"inputs.{p}").get("sha256"), f"inputs.{p}.sha256")
    for p, a in _dict(m["artifacts"], "artifacts").items():
        _relative(p, "artifacts")
        a = _dict(a, f"artifacts.{p}")
        _sha(a.get("sha256"), f"artifacts.{p}.sha256")
        if not isinstance(a.get("size"), int) or a["size"] < 0:
            raise ManifestError(f"artifacts.{p}.size: not a size: {a.get('size')!r}")
        recipe = _dict(a.get("recipe"), f"artifacts.{p}.recipe")
        if not isinstance(recipe.get("kind"), str):
            raise ManifestError(f"artifacts.{p}.recipe.kind: not a string")
        ins = a.get("inputs")
        if not isinstance(ins, list):
            raise ManifestError(f"artifacts.{p}.inputs: expected a list")
        for i in ins:
            if _relative(i, f"artifacts.{p}.inputs") not in m["inputs"]:
                raise ManifestError(f"artifacts.{p}.inputs: `{i}` is not among the inputs")
    return m


def load(path: str | Path) -> dict:
    try:
        text = read_regular(path, MAX_FILE).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"cannot read `{path}`: {getattr(e, 'strerror', None) or e}")
    try:
        m = loads(text)
    except ValueError as e:
        raise ManifestError(f"`{path}` is not JSON: {e}")
    try:
        return validate(m)
    except ManifestError as e:
        raise ManifestError(f"`{path}`: {e}")
