"""The packages' layering (docs/structure.md, "Layers"): each package of alphac/ has a layer, and
an import goes only to a package of a lower layer, so no two packages import each other, by any
path. Every import counts: at the top of a module, inside a function, under TYPE_CHECKING.

The imports that break the rule today are listed in KNOWN, each with its reason; the list can
only shrink: an entry whose import is gone fails here too, so it is struck out when it is fixed.
(The target registry, alphac/lower/target.py, also finds the backends by name at run time,
`importlib.import_module("alphac.<isa>")`: that is how a registry is read, not an import.)
"""
import ast
from functools import lru_cache

from conftest import ROOT
from test_tree import find_loops

PKG = ROOT / "alphac"

# package (a folder of alphac/, or a module at its top; "alphac" is the package's own
# __init__.py) -> its layer; docs/structure.md says what each layer is for
LAYERS = {
    "alphac": 0, "files": 0, "diag": 0, "refusals": 0, "formats": 0, "encode": 0,
    "targets": 0,
    "npy": 1, "parse": 1, "math": 1, "elf": 1, "runtime": 1, "nvdrv": 1,
    "ir": 2,
    "types": 3, "dist": 3, "ptx": 3,
    "lower": 4,
    "x86_64": 5, "aarch64": 5,
    "build": 6, "driver": 6, "manifest": 6,
    "artifacts": 7,
    "tools": 8,
    "api": 9, "commands": 9,
    "cli": 10,
    "__main__": 11,
}

# (importing file, imported module) -> why it is allowed for now; issue 48 removes each
KNOWN = {
}


def package_of(module: str) -> str:
    """`alphac.lower.target` -> `lower`; `alphac.cli` -> `cli`; `alphac` -> `alphac`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "alphac"


def imports(tree: ast.AST):
    """(line, the alphac module imported) for every import in `tree`, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "alphac")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "alphac":
            if node.module == "alphac":           # `from alphac import npy`: a module, or the root's own
                for a in node.names:
                    sub = PKG / a.name
                    yield node.lineno, (f"alphac.{a.name}" if sub.is_dir() or sub.with_suffix(".py").is_file()
                                        else "alphac")
            else:
                yield node.lineno, node.module


@lru_cache(maxsize=1)
def edges() -> tuple:
    """(file, line, importing package, imported module, imported package), across packages."""
    return tuple(_edges())


def _edges():
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        mod = ".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        src = package_of(mod)
        for line, target in imports(ast.parse(f.read_text(), rel)):
            dst = package_of(target)
            if dst != src:
                yield rel, line, src, target, dst


def test_every_package_has_a_layer():
    found = {p.stem if p.suffix == ".py" else p.name for p in PKG.iterdir()
             if (p.is_dir() and not p.name.startswith("__")) or p.suffix == ".py"}
    found = {("alphac" if p == "__init__" else p) for p in found}
    assert found == set(LAYERS), (f"no layer: {sorted(found - set(LAYERS))}; "
                                  f"no such package: {sorted(set(LAYERS) - found)}")


def test_imports_go_down_the_layers():
    bad = [f"{f}:{line}: {src} (layer {LAYERS[src]}) imports {target} (layer {LAYERS[dst]})"
           for f, line, src, target, dst in edges()
           if LAYERS[dst] >= LAYERS[src] and (f, target) not in KNOWN]
    assert not bad, "upward or sideways imports (docs/structure.md, Layers):\n" + "\n".join(bad)


def test_every_known_exception_is_still_needed():
    """An exception whose import is gone, or that no longer breaks the rule, is struck out."""
    upward = {(f, target) for f, line, src, target, dst in edges() if LAYERS[dst] >= LAYERS[src]}
    stale = sorted(set(KNOWN) - upward)
    assert not stale, f"KNOWN lists imports that no longer break the rule: {stale}"
    assert all("issue 48" in why for why in KNOWN.values())


def test_no_cycle_between_packages_but_through_a_known_exception():
    """Implied by the layers; said here so that a failure names the loop."""
    graph: dict[str, set] = {}
    for f, line, src, target, dst in edges():
        if (f, target) not in KNOWN:
            graph.setdefault(src, set()).add(dst)
    loops = find_loops(graph, sorted(graph))
    assert not loops, "package import loops:\n" + "\n".join(loops)
