"""`alphac verify MANIFEST`: is what a manifest lists what its source says?

What it does
    For a manifest (`alphac.manifest`), checks the compiler (this compiler's source digest and
    version against the manifest's), every input (its file's SHA-256 now, relative to the
    current directory, against the manifest's), and every artifact: the file's SHA-256 (relative
    to the manifest's directory), then a rebuild from its recipe (`alphac.artifacts`), whose
    SHA-256, inputs and tools must equal the manifest's. This is how a user confirms that an
    executable they were handed is what the source says.

Requires
    The current directory is the one the build ran in (input paths are relative to it).
Guarantees
    `verify` returns one line per problem, naming the artifact, input or field; an empty list
    means everything matched. It writes nothing. A malformed manifest raises ManifestError.
"""
from __future__ import annotations

from pathlib import Path

from alphac import artifacts, manifest
from alphac.diag import CompileError


def _rebuild(recipe: dict):
    """(Built, None) or (None, why it could not be rebuilt)."""
    from alphac.build import BuildError
    try:
        return artifacts.build(recipe), None
    except CompileError as e:
        first = e.diagnostics[0].render().split("\n")[0] if e.diagnostics else "compile error"
        return None, first
    except (BuildError, artifacts.RecipeError, manifest.ManifestError) as e:
        return None, str(e)


def verify(path: str | Path) -> list[str]:
    m = manifest.load(path)
    problems = []
    here = manifest.compiler()
    for field in ("sha256", "version"):
        if here[field] != m["compiler"][field]:
            problems.append(f"compiler: {field} {here[field]} != manifest {m['compiler'][field]}")
    theirs = m["compiler"].get("math_tables", {})
    for name in sorted(set(theirs) | set(here["math_tables"])):
        if theirs.get(name) != here["math_tables"].get(name):
            problems.append(f"compiler: math table {name} differs from the manifest's")

    users = {}
    for name, a in m["artifacts"].items():
        for i in a["inputs"]:
            users.setdefault(i, []).append(name)
    missing_input = False
    for p in sorted(m["inputs"]):
        used = f" (used by {', '.join(sorted(users[p]))})" if p in users else ""
        want = m["inputs"][p]["sha256"]
        try:
            got = manifest.sha256_file(p)
        except OSError as e:
            problems.append(f"input {p}{used}: cannot read: {e.strerror or e}")
            missing_input = True
            continue
        if got != want:
            problems.append(f"input {p}{used}: sha256 {got} != manifest {want}")
    if missing_input:
        problems.append("note: input paths are relative to the directory the build ran in; "
                        "run verify from there")

    base = Path(path).parent
    for name in sorted(m["artifacts"]):
        a = m["artifacts"][name]
        try:
            got = manifest.sha256_file(base / name)
            if got != a["sha256"]:
                problems.append(f"{name}: file sha256 {got} != manifest {a['sha256']}")
        except OSError as e:
            problems.append(f"{name}: cannot read the file: {e.strerror or e}")
        built, why = _rebuild(a["recipe"])
        if built is None:
            problems.append(f"{name}: cannot rebuild: {why}")
            continue
        rebuilt = manifest.sha256_bytes(built.data)
        if rebuilt != a["sha256"]:
            problems.append(f"{name}: rebuilt sha256 {rebuilt} != manifest {a['sha256']}")
        if sorted(built.inputs) != a["inputs"]:
            problems.append(f"{name}: rebuilt from inputs {sorted(built.inputs)} != manifest "
                            f"{a['inputs']}")
        for tool, info in sorted(built.tools.items()):
            if m["tools"].get(tool) != info:
                problems.append(f"{name}: tool {tool} {info} != manifest {m['tools'].get(tool)}")
    return problems
