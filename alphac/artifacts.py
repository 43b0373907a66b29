"""Every artifact the project knows how to build, each from a recipe that can rebuild it.

What it does
    A recipe is a small dict, `{"kind": ..., ...}`, saying how to make one artifact. `KINDS` maps
    each kind to the function that builds it, `recipe -> Built(data, inputs, tools)`: the bytes,
    the input files it read (paths as `manifest.input_path` records them) and the external tools
    it ran (name -> {version, sha256}). `all_recipes()` lists every artifact the project builds,
    as sorted `(path, recipe)` pairs gathered from `CATALOGUES`; `build_all(out_dir)` builds them
    all and writes `out_dir/MANIFEST.json`. A new kind of artifact (roles, cubins) is one
    `@kind(...)` function and one `@catalogue` function; nothing else changes.

    kind "learner": {"kind": "learner", "source": "examples/lsq_adam.alpha", "target": "x86_64"}
        an executable (mode 0755) from `alphac.driver.compile_file` and `alphac.build`; its
        inputs are the source and every `.npy` the learner loads.
    kind "gpu-owner": the same with "target": "x86_64+sm_90" (or a level's, "x86_64-v4+sm_90")
        and "card": {uuid, product, memory, driver, minor}; its tool is the pinned ptxas
        (version and SHA-256). A GPU owner is built
        for one machine's card (gpu/qualify.py builds them for the card it finds); the catalogue
        builds the examples' for the reference host, examples/h200.gpuhost.

Requires
    Run from the directory that recipes' paths are relative to (the project root for
    `all_recipes`). Guarantees: the bytes depend only on the recipe, the inputs and the
    compiler; catalogues are sorted; files are written whole (a temporary file, then rename).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, NamedTuple

from alphac import manifest
from alphac.files import write_file


class Built(NamedTuple):
    data: bytes
    inputs: list[str]
    tools: dict[str, dict]


class Kind(NamedTuple):
    build: Callable[[dict], Built]
    mode: int                            # file mode of the artifact


class RecipeError(ValueError):
    """A recipe that names no known kind or lacks a field."""


KINDS: dict[str, Kind] = {}
CATALOGUES: list[Callable[[], list[tuple[str, dict]]]] = []


def kind(name: str, mode: int = 0o755):
    """Register `fn(recipe) -> Built` as the builder of recipes of kind `name`."""
    def register(fn):
        KINDS[name] = Kind(fn, mode)
        return fn
    return register


def catalogue(fn):
    """Register `fn() -> [(path, recipe)]`, a family of artifacts `all_recipes` includes."""
    CATALOGUES.append(fn)
    return fn


def build(recipe: dict) -> Built:
    k = KINDS.get(recipe.get("kind")) if isinstance(recipe, dict) else None
    if k is None:
        raise RecipeError(f"unknown recipe kind {recipe.get('kind') if isinstance(recipe, dict) else recipe!r}"
                          f" (known: {', '.join(sorted(KINDS))})")
    return k.build(recipe)


def mode(recipe: dict) -> int:
    return KINDS[recipe["kind"]].mode


def all_recipes() -> list[tuple[str, dict]]:
    """Every artifact the project knows how to build: sorted (path, recipe) pairs."""
    out = sorted(((p, r) for fn in CATALOGUES for p, r in fn()), key=lambda pr: pr[0])
    seen = set()
    for p, _ in out:
        if p in seen:
            raise RecipeError(f"two recipes make `{p}`")
        seen.add(p)
    return out


# ---- learners ----------------------------------------------------------------------------------
def learner_recipe(source: str | Path, target: str, eval_data=(), labels: str | None = None) -> dict:
    """A single-process executable's recipe; with held-out data (`build --eval-data`), its
    arrays and labels too."""
    recipe = {"kind": "learner", "source": manifest.input_path(source), "target": target}
    if eval_data:
        recipe.update(eval_data=[[n, manifest.input_path(p)] for n, p in eval_data], labels=labels)
    return recipe


def learner_inputs(source: str | Path, compiled) -> list[str]:
    """The files a learner was compiled from: its source and every `load("file.npy")` (the
    checker accepts a load only as the whole value of a data or const declaration, or a param's
    or state's initial value)."""
    from alphac.parse import ast
    base = Path(source).parent
    values = [d.init if isinstance(d, ast.StateDecl) else d.value for d in compiled.module.decls
              if isinstance(d, (ast.DataDecl, ast.ConstDecl, ast.StateDecl))]
    found = [source, *(base / v.args[0].value for v in values
                       if isinstance(v, ast.Call) and v.func == "load")]
    return sorted({manifest.input_path(p) for p in found})


def write_learner(out: str | Path, elf: bytes, source: str | Path, compiled, target: str, eval_data=(),
                  labels: str | None = None, gpu=None) -> Path:
    """`alphac build`'s output: the executable as `out` (mode 0755), then its manifest beside it
    (OUT.manifest.json) with the recipe that rebuilds it: a learner's, or with `gpu` (the GPU
    owner's build) one for its host and ptxas. The manifest's path; ManifestError, after the
    executable is written, when no manifest can name an input."""
    out = Path(out)
    side = out.with_name(out.name + manifest.SUFFIX) if out.name else out
    write_file(out, elf, 0o755)
    recipe, tools = learner_recipe(source, target, eval_data, labels), {}
    if gpu is not None:
        recipe, tools = gpu_recipe(source, target, gpu.conversation.host), ptxas_tool(gpu.ptxas)
    entry = manifest.artifact_entry(elf, recipe, learner_inputs(source, compiled)
                                    + [manifest.input_path(p) for _, p in eval_data])
    manifest.write(side, manifest.new({out.name: entry}, entry["inputs"], tools))
    return side


@kind("learner")
def build_learner_recipe(recipe: dict) -> Built:
    from alphac.build import build_learner, evaluation_for
    from alphac.driver import compile_file
    for field in ("source", "target"):
        if not isinstance(recipe.get(field), str):
            raise RecipeError(f"learner recipe: `{field}` must be a string")
    compiled = compile_file(recipe["source"])
    arrays = recipe.get("eval_data", [])
    if not isinstance(arrays, list) or not all(isinstance(a, list) and len(a) == 2 and
                                               all(isinstance(x, str) for x in a) for a in arrays) \
            or not isinstance(recipe.get("labels"), (str, type(None))):
        raise RecipeError("learner recipe: `eval_data` must be [[NAME, PATH], ...], `labels` a string")
    image = build_learner(compiled.learner, recipe["target"], evaluation_for(
        compiled.learner, [tuple(a) for a in arrays], recipe.get("labels"), recipe["source"]))
    return Built(image.elf, learner_inputs(recipe["source"], compiled) + [p for _, p in arrays], {})


@catalogue
def example_learners() -> list[tuple[str, dict]]:
    """Every examples/*.alpha for every target and level: `learners/<name>.<target>`."""
    from alphac.targets import names
    return [(f"learners/{src.stem}.{t}", learner_recipe(src.as_posix(), t))
            for src in sorted(Path("examples").glob("*.alpha")) for t in sorted(names())]


# ---- GPU owners --------------------------------------------------------------------------------
def gpu_recipe(source: str | Path, target: str, host) -> dict:
    """A GPU owner: the learner, the target (ISA or level +sm_NN) and the host it is built for."""
    return {"kind": "gpu-owner", "source": manifest.input_path(source), "target": target,
            "card": host.as_dict()}


def ptxas_tool(tool) -> dict[str, dict]:
    return {"ptxas": {"version": tool.version, "sha256": tool.sha256}}


@kind("gpu-owner")
def build_gpu_owner_recipe(recipe: dict) -> Built:
    from alphac.build import build_gpu_owner, load_gpu_host
    from alphac.driver import compile_file
    for field in ("source", "target"):
        if not isinstance(recipe.get(field), str):
            raise RecipeError(f"gpu-owner recipe: `{field}` must be a string")
    if not isinstance(recipe.get("card"), dict):
        raise RecipeError("gpu-owner recipe: `card` (the GPU host it is built for) must be an object")
    compiled = compile_file(recipe["source"])
    host = load_gpu_host(None, {k: str(v) for k, v in recipe["card"].items()})
    built = build_gpu_owner(compiled.learner, recipe["target"], host)
    return Built(built.image.elf, learner_inputs(recipe["source"], compiled), ptxas_tool(built.ptxas))


REFERENCE_GPU_HOST = "examples/h200.gpuhost"


CPU_ONLY = {"fleet_lsq": "a 200,000-role fleet",
            "digits_mlp": "ptxas takes about 50 s on its grad_samples (which spills to local memory: "
                          "the host description then needs a `topology`)",
            "digits_mlp_optim": "digits_mlp's model: the same spilling grad_samples",
            "digits_cnn": "its owner builds in 18 s (9 s of ptxas: its windows unrolled, 29,771 PTX "
                          "lines): `make roles` would pass a minute; tests/test_gpu_examples.py builds it",
            "seq_attention": "its owner builds in 12 s: with digits_cnn's, `make roles` would pass a minute"}


def gpu_examples() -> list[Path]:
    """The examples GPU owners are built for: all but those of CPU_ONLY and those using an
    operation the owner kernels do not have."""
    from alphac.diag import BuildError
    from alphac.ptx.kernels import kernels
    out = []
    for src in sorted(Path("examples").glob("*.alpha")):
        try:
            if src.stem not in CPU_ONLY and kernels(plans_of(src.as_posix())[0].learner):
                out.append(src)
        except BuildError:
            continue
    return out


@catalogue
def example_gpu_owners() -> list[tuple[str, dict]]:
    """Every reference learner's GPU owner for the reference host (an H200, so sm_90):
    `gpu/<learner>/x86_64+sm_90`. Needs ptxas (the build refuses without it)."""
    from alphac.nvdrv import host as gpu_host
    path = Path(REFERENCE_GPU_HOST)
    if not path.exists():
        return []
    host = gpu_host.load(str(path), {})
    return [(f"gpu/{src.stem}/x86_64+sm_90", gpu_recipe(src.as_posix(), "x86_64+sm_90", host))
            for src in gpu_examples()]


# ---- writing -----------------------------------------------------------------------------------
def tools_now() -> dict[str, Callable[[], dict]]:
    """Each external tool a build may run, by the name a manifest's `tools` gives it: how to
    find its identity (version and SHA-256) on this machine now."""
    from alphac.ptx.ptxas import find_ptxas
    return {"ptxas": lambda: ptxas_tool(find_ptxas())["ptxas"]}


def up_to_date(out_dir: Path) -> tuple[Callable[[str, dict], dict | None], dict]:
    """(`fresh(path, recipe)`, the previous manifest's tools): `fresh` gives the previous
    manifest's entry for `path` when the file there can be kept as it is, else None. Kept
    means: out_dir/MANIFEST.json made by this compiler (its digest, version and tables) with
    these tools (each one's version and SHA-256 now), the same recipe, every input's SHA-256 as
    that manifest has it, and the file there, regular, with the entry's size, SHA-256 and mode.
    Contents only: no file's time counts."""
    import stat
    from alphac.ptx.ptxas import PtxasFailed, PtxasMissing
    never = (lambda path, recipe: None), {}
    try:
        old, now = manifest.load(out_dir / manifest.NAME), tools_now()
        if old["compiler"] != manifest.compiler() or any(
                name not in now or now[name]() != v for name, v in old["tools"].items()):
            return never
    except (manifest.ManifestError, PtxasMissing, PtxasFailed, OSError):   # none, or a tool gone
        return never
    digests: dict[str, str | None] = {}

    def digest(p: str) -> str | None:
        if p not in digests:
            try:
                digests[p] = manifest.sha256_file(p)
            except OSError:
                digests[p] = None
        return digests[p]

    def fresh(path: str, recipe: dict) -> dict | None:
        e = old["artifacts"].get(path)
        if e is None or e["recipe"] != recipe or any(
                digest(p) != old["inputs"].get(p, {}).get("sha256") for p in e["inputs"]):
            return None
        try:
            st = os.lstat(out_dir / path)
            ok = stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode(recipe) \
                and st.st_size == e["size"] and manifest.sha256_file(out_dir / path) == e["sha256"]
        except OSError:
            return None
        return e if ok else None
    return fresh, old["tools"]


def needs_ptxas(recipe: dict) -> bool:
    """Whether building the recipe assembles GPU code: a cubin, or anything built for a card."""
    return recipe["kind"] == "cubin" or "card" in recipe


def build_all(out_dir: str | Path = "build", progress=None, gpu: bool = True) -> dict:
    """Build every recipe into `out_dir` (with `gpu` False, every one but those that
    `needs_ptxas`), then write `out_dir/MANIFEST.json` (last); return it. An artifact that is up
    to date there (`up_to_date`) is kept, not rebuilt. `progress(k, n, path)`, when given, is
    told before each artifact is built."""
    out_dir = Path(out_dir)
    recipes = [(p, r) for p, r in all_recipes() if gpu or not needs_ptxas(r)]
    if not recipes:
        raise RecipeError("nothing to build here: no examples/*.alpha under the current directory")
    (fresh, old_tools), entries, inputs, tools = up_to_date(out_dir), {}, [], {}
    for k, (path, recipe) in enumerate(recipes):
        kept = fresh(path, recipe)
        if kept is not None:              # built by this compiler and these tools, as now
            entries[path] = kept
            inputs += kept["inputs"]
            tools.update(old_tools)
            continue
        if progress:
            progress(k, len(recipes), path)
        built = build(recipe)
        write_file(out_dir / path, built.data, mode(recipe))
        entries[path] = manifest.artifact_entry(built.data, recipe, built.inputs)
        inputs += built.inputs
        tools.update(built.tools)
    m = manifest.new(entries, inputs, tools)
    manifest.write(out_dir / manifest.NAME, m)
    return m


# ---- roles of deployments ----------------------------------------------------------------------
MAX_BUILT_ROLES = 256      # beyond, a deployment is built one executable per index node
MAX_LISTED_ROLES = 4096    # roles.json lists each role up to this many (a launch on one machine)


@__import__("functools").lru_cache(maxsize=8)
def _plans(source: str, digest: str):
    from alphac.driver import compile_deployments
    return compile_deployments(source)


def plans_of(source: str):
    """(compiled, plans) for a source, compiled once per content."""
    return _plans(source, manifest.sha256_file(source))


def role_recipe(source: str, deployment: str, role: str, target: str, host=None) -> dict:
    """A role; a GPU owner's also names its card (`card`, as a gpu-owner recipe does)."""
    out = {"kind": "role", "source": manifest.input_path(source), "deployment": deployment,
           "role": role, "target": target}
    if host is not None:
        out["card"] = host.as_dict()
    return out


def _role(plan, name: str):
    """The role `name` (`owner.3`, `root`) names, found among the index nodes (a fleet's roles
    are never listed one by one)."""
    from alphac.dist.structure import Role
    from alphac.lower.fleet import nodes
    base, _, index = name.rpartition(".")
    role = Role(base, int(index)) if base and index.isdigit() else Role(name)
    for n in nodes(plan):
        if n.name == role.name and (n.lo is None if role.index is None
                                    else n.lo is not None and n.lo <= role.index < n.hi):
            if str(role) == name:
                return role
    raise RecipeError(f"deployment `{plan.dep.name}` has no role `{name}`")


def recipe_plan(recipe: dict, what: str, fields: tuple[str, ...]):
    """(compiled, plan) of a recipe naming a source and a deployment, its string fields checked."""
    for field in ("source", "deployment") + fields:
        if not isinstance(recipe.get(field), str):
            raise RecipeError(f"{what} recipe: `{field}` must be a string")
    compiled, plans = plans_of(recipe["source"])
    plan = plans.get(recipe["deployment"])
    if plan is None:
        raise RecipeError(f"no deployment `{recipe['deployment']}` in {recipe['source']}")
    return compiled, plan


@kind("role")
def build_role_recipe(recipe: dict) -> Built:
    from alphac.build import build_role
    compiled, plan = recipe_plan(recipe, "role", ("role", "target"))
    host = tools = None
    if "card" in recipe:
        from alphac.build import gpu_kernels, load_gpu_host, split_target
        if not isinstance(recipe["card"], dict):
            raise RecipeError("role recipe: `card` (the GPU host it is built for) must be an object")
        host = load_gpu_host(None, {k: str(v) for k, v in recipe["card"].items()})
        tools = ptxas_tool(gpu_kernels(plan.lr, split_target(recipe["target"])[1] or 90)[1])
    image = build_role(plan, _role(plan, recipe["role"]), recipe["target"], host)
    return Built(image.elf, learner_inputs(recipe["source"], compiled) + (gpu_inputs(plan) if host else []),
                 tools or {})


def gpu_inputs(plan) -> list[str]:
    """The host description files a deployment's `gpu` item reads (inputs of each GPU owner:
    the per-card admission reads them all)."""
    from pathlib import Path
    out = []
    for r in plan.roles():
        given = plan.dep.gpu_of(r)
        if given is not None:
            out.append(manifest.input_path(Path(given[1].source.name).parent / given[0]))
    return sorted(set(out))


def roles_table(plan, fleet: bool = False) -> dict:
    """What the launcher and the engines' writers need to start a deployment: the executables
    as `nodes` (each serving the ranks [rank, rank + size): one role, or with `fleet` an index
    node's members) and, up to MAX_LISTED_ROLES, each role: its rank, file, parent and target."""
    from alphac.dist.identity import digests
    from alphac.lower.fleet import Node, nodes
    built = nodes(plan) if fleet else [
        Node(r.name, r.index, None if r.index is None else r.index + 1, plan.rank(r), 0)
        for r in plan.roles()]
    files = [{"file": n.file, "name": n.name, "rank": n.rank, "size": n.size,
              "index": n.lo or 0, "target": plan.dep.target_of(n.role()),
              "listens": bool(plan.children(n.role()))} for n in built]
    loaded = [d.file for d in plan.lr.data if d.file is not None]
    roles = []
    if plan.role_count() <= MAX_LISTED_ROLES:
        file_of = {}
        for n in built:
            for k in n.members():
                file_of[plan.rank(n.role(k if n.lo is not None else None))] = n.file
        for r in plan.roles():
            parent = plan.parent(r)
            rows = list(plan.dep.samples.range(r.index)) if plan.is_owner(r) and loaded else None
            roles.append({"role": str(r), "file": file_of[plan.rank(r)], "rank": plan.rank(r),
                          "parent": str(parent) if parent else None,
                          "listens": bool(plan.children(r)), "target": plan.dep.target_of(r),
                          "samples": rows, "mesh": plan.mesh and plan.is_owner(r)})
    return {"format": 1, "deployment": plan.dep.name, "learner": plan.lr.name,
            "identity": {k: v.hex() for k, v in digests(plan.dep).items()},
            "root": str(plan.root), "roles": roles, "nodes": files, "role_count": plan.role_count(),
            "batches": plan.lr.batches,
            "data": [{"path": f.path, "load": f.rel, "bytes": f.size, "root": f.root}
                     for f in loaded]}


@kind("roles-table", mode=0o644)
def build_roles_table(recipe: dict) -> Built:
    from alphac.encode import json_text
    compiled, plan = recipe_plan(recipe, "roles-table", ())
    table = roles_table(plan, bool(recipe.get("fleet")))
    table["source"] = recipe["source"]
    data = (json_text(table, indent=2) + "\n").encode()
    return Built(data, learner_inputs(recipe["source"], compiled), {})


def deployment_recipes(source: str, name: str, plan, fleet: bool = False) -> list[tuple[str, dict]]:
    """One deployment's artifacts: `roles.json` and one executable per role, or with `fleet`
    one per index node (a node of one role, a GPU owner's say, is that role's recipe)."""
    from alphac.build import deployment_gpu_hosts
    from alphac.lower.fleet import nodes
    hosts = deployment_gpu_hosts(plan)
    table = {"kind": "roles-table", "source": source, "deployment": name}
    if not fleet:
        return [("roles.json", table)] + [
            (str(r), role_recipe(source, name, str(r), plan.dep.target_of(r), hosts.get(r)))
            for r in plan.roles()]
    out = [("roles.json", {**table, "fleet": True})]
    for n in nodes(plan):
        r = n.role(n.lo)
        if n.size == 1:
            out.append((n.file, role_recipe(source, name, str(r), plan.dep.target_of(r), hosts.get(r))))
        else:
            out.append((n.file, {"kind": "node", "source": source, "deployment": name,
                                 "node": n.file, "target": plan.dep.target_of(r)}))
    return out


@kind("node")
def build_node_recipe(recipe: dict) -> Built:
    """An index node's executable (alphac.lower.fleet): every member, chosen by --rank."""
    from alphac.build import build_node
    from alphac.lower.fleet import nodes
    compiled, plan = recipe_plan(recipe, "node", ("node", "target"))
    found = [n for n in nodes(plan) if n.file == recipe["node"]]
    if not found:
        raise RecipeError(f"deployment `{plan.dep.name}` has no index node `{recipe['node']}`")
    image = build_node(plan, found[0], recipe["target"])
    return Built(image.elf, learner_inputs(recipe["source"], compiled), {})


def build_deployment(source: str | Path, name: str, out_dir: str | Path,
                     fleet: bool | None = None, progress=None) -> dict:
    """`alphac build FILE --deployment NAME -o DIR [--fleet]`: the deployment's executables
    (one per role; with `fleet`, and always beyond MAX_BUILT_ROLES roles, one per index node)
    and roles.json in DIR, then DIR/MANIFEST.json (last): what `alphac launch DIR` runs."""
    src = manifest.input_path(source)
    _, plans = plans_of(src)
    if name not in plans:
        raise RecipeError(f"no deployment `{name}` in {src} (deployments: "
                          f"{', '.join(sorted(plans)) or 'none'})")
    if fleet is None:
        fleet = plans[name].role_count() > MAX_BUILT_ROLES
    entries, inputs, tools = {}, [], {}
    recipes = deployment_recipes(src, name, plans[name], fleet)
    for k, (path, recipe) in enumerate(recipes):
        if progress:
            progress(k, len(recipes), path)
        b = build(recipe)
        write_file(Path(out_dir) / path, b.data, mode(recipe))
        entries[path] = manifest.artifact_entry(b.data, recipe, b.inputs)
        inputs += b.inputs
        tools.update(b.tools)           # a GPU owner's ptxas
    m = manifest.new(entries, inputs, tools)
    manifest.write(Path(out_dir) / manifest.NAME, m)
    return m


@catalogue
def example_roles() -> list[tuple[str, dict]]:
    """Every role of every deployment in examples/: `roles/<deployment>/<role>`, and the
    deployment's `roles/<deployment>/roles.json`."""
    out = []
    for src in sorted(Path("examples").glob("*.alpha")):
        try:
            _, plans = plans_of(src.as_posix())
        except Exception:          # a broken example is reported by its own build, not here
            continue
        for name, plan in sorted(plans.items()):
            if plan.role_count() > MAX_BUILT_ROLES:
                continue
            out += [(f"roles/{name}/{path}", recipe)
                    for path, recipe in deployment_recipes(src.as_posix(), name, plan)]
    return out


# ---- GPU code: one cubin per kernel, per SM version ----------------------------------------------


@__import__("functools").lru_cache(maxsize=16)
def _kernels(source: str, digest: str, sm: int):
    from alphac.driver import compile_file
    from alphac.ptx import build
    compiled = compile_file(source)
    return compiled, {b.kernel.name: b for b in build(compiled.learner, sm)}


@kind("cubin", mode=0o644)
def build_cubin_recipe(recipe: dict) -> Built:
    from alphac.ptx.ptxas import find_ptxas
    compiled, built = _kernels(recipe["source"], manifest.sha256_file(recipe["source"]), recipe["sm"])
    if recipe["kernel"] not in built:
        raise RecipeError(f"learner has no kernel `{recipe['kernel']}`")
    tool = find_ptxas()
    return Built(built[recipe["kernel"]].cubin, learner_inputs(recipe["source"], compiled),
                 {"ptxas": {"version": tool.version, "sha256": tool.sha256}})


@catalogue
def example_cubins() -> list[tuple[str, dict]]:
    """Every kernel of the five reference learners for sm_86 and sm_90:
    `gpu/<learner>/sm_<N>/<kernel>.cubin`. Needs ptxas (the build refuses without it)."""
    from alphac.targets import gpu_sms
    from alphac.ptx.kernels import kernels
    out = []
    for src in gpu_examples():
        lr = plans_of(src.as_posix())[0].learner
        for sm in gpu_sms():
            for k in kernels(lr, sm):
                out.append((f"gpu/{src.stem}/sm_{sm}/{k.name}.cubin",
                            {"kind": "cubin", "source": src.as_posix(), "sm": sm, "kernel": k.name}))
    return out
