"""The tree itself: no import loops among the compiler's modules, and every dotted name of
the package (`alphac.lower.target`, say) and every file path that a doc or a docstring names exists, so the docs cannot drift from
the code without a failing test."""
import ast
import importlib
import re
from collections import defaultdict

from conftest import ROOT

PKG = ROOT / "alphac"
TEXTS = sorted([*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), *PKG.rglob("*.py"),
                *PKG.rglob("*.rt"), *(ROOT / "tests").glob("*.py"), *(ROOT / "gpu").glob("*.py"),
                *(ROOT / "bench").glob("*.py"), *(ROOT / "reproducible").glob("*.py")])
DOTTED = re.compile(r"\balphac(?:\.[A-Za-z_][A-Za-z_0-9]*)+")
PATH = re.compile(r"(?<![\w/.])((?:alphac|tests|docs|examples|bench|gpu|reproducible)/[\w./-]*[\w])")


def modules():
    out = {}
    for f in PKG.rglob("*.py"):
        name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def test_no_import_loops():
    mods = modules()
    graph = defaultdict(set)
    for name, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("alphac"):
                for a in node.names:
                    cand = f"{node.module}.{a.name}"
                    graph[name].add(cand if cand in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name.startswith("alphac")}
    loops = find_loops({v: {w for w in ws if w in mods} for v, ws in graph.items()}, sorted(mods))
    assert not loops, "import loops:\n" + "\n".join(loops)


def find_loops(graph: dict, nodes) -> list[str]:
    """The loops a depth-first walk of `graph` (node -> the nodes it points at) from `nodes`
    meets, each as `a -> b -> a`; none when the graph has no cycle (tests/test_layers.py too)."""
    state: dict[str, int] = {}
    loops = []

    def visit(v, path):
        state[v] = 1
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                loops.append(" -> ".join(path[path.index(w):] + [w]))
            elif w not in state:
                visit(w, path + [w])
        state[v] = 2
    for v in nodes:
        if v not in state:
            visit(v, [v])
    return loops


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def mentions(pattern):
    for f in TEXTS:
        for k, line in enumerate(f.read_text().splitlines(), 1):
            for m in pattern.finditer(line):
                yield f, k, m.group(0 if pattern is DOTTED else 1)


def mentions_in_context(pattern):
    for f in TEXTS:
        for k, line in enumerate(f.read_text().splitlines(), 1):
            for m in pattern.finditer(line):
                yield f, k, line, m.group(1)


def test_every_dotted_name_resolves():
    bad = sorted({f"{f.relative_to(ROOT)}:{k}: {name}" for f, k, name in mentions(DOTTED)
                  if not resolves(name.rstrip("."))})
    assert not bad, "\n".join(bad)


def test_every_named_path_exists():
    """A path names a file or folder; `tests/test_x86_64_*.py` a glob; a word in capitals
    (`tests/diagnostics/CODE.alpha`) a placeholder, which still names an existing folder; or a
    file of the project `alphac init` writes (the README's "Using it" runs in one: its paths
    are that project's, alphac/tools/init.py's `files()`)."""
    from alphac.tools.init import files
    project = set(files())
    bad = []
    for f, k, line, path in mentions_in_context(PATH):
        p = ROOT / path.rstrip(".")
        glob = line[line.index(path) + len(path):][:1] == "*"
        placeholder = re.search(r"[A-Z]{3,}[^/]*$", path)
        ok = (p.exists() or (glob and any(ROOT.glob(path + "*"))) or
              (placeholder and p.parent.is_dir()) or path.rstrip(".") in project)
        if not ok:
            bad.append(f"{f.relative_to(ROOT)}:{k}: {path}")
    assert not bad, "\n".join(sorted(set(bad)))
