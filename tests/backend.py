"""Helpers for backend tests: build learners and runtime-language programs, run them natively
or under qemu-aarch64."""
import os
import subprocess
from pathlib import Path

from conftest import EXAMPLES, require_tool


def build_learner_exe(name: str, target: str, out_dir: Path) -> Path:
    from alphac.build import build_learner
    from alphac.driver import compile_file
    img = build_learner(compile_file(EXAMPLES / f"{name}.alpha").learner, target)
    path = out_dir / f"{name}.{target}"
    path.write_bytes(img.elf)
    os.chmod(path, 0o755)
    return path


def build_rt_exe(rt_path: Path, target: str, out_dir: Path) -> Path:
    return build_rt_program(rt_path.read_text(), rt_path.stem, target, out_dir)


def build_rt_program(source: str, name: str, target: str, out_dir: Path, blobs=None,
                     extra=()) -> Path:
    """A runtime-language program `source` over the prelude, core.rt and the items `extra`
    (functions taken from other runtime files), its extern data `blobs`: out_dir/name.target."""
    from alphac.build import link_program, runtime_closure, target as get_target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    tgt = get_target(target)
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") + list(extra)
    items += rt.parse(source, f"{name}.rt")
    elf, _, _ = link_program(lower_program(items, blobs or {}), tgt)
    path = out_dir / f"{name}.{target}"
    path.write_bytes(elf)
    os.chmod(path, 0o755)
    return path


def require_isa(isa: str) -> None:
    """Skip unless `isa`'s executables run here: AArch64 under qemu-aarch64 (required), x86-64
    only on an x86-64 host."""
    import platform
    import pytest
    if isa == "aarch64":
        require_tool("qemu-aarch64")
    elif platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 executables run only on an x86-64 host")


def run_exe(path: Path, *args, target: str = "x86_64", timeout: float = 60):
    cmd = [str(path), *map(str, args)]
    if target == "aarch64":
        cmd = [require_tool("qemu-aarch64")] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def build_deployment(src, dep: str, out: Path, target_of=None, fleet: bool = False) -> Path:
    """Build one deployment's roles (each for `target_of(role)` or its planned target) into
    out/<dep>/, with roles.json and out/MANIFEST.json: what `alphac launch` runs. With `fleet`,
    one executable per index node (alphac.lower.fleet; BuildError for what is not built so)."""
    import json
    from alphac import artifacts, manifest
    from alphac.build import build_node, build_role
    from alphac.driver import compile_deployments
    from alphac.lower.fleet import nodes
    _, plans = compile_deployments(src)
    plan = plans[dep]
    entries = {}
    table = artifacts.roles_table(plan, fleet)
    table["source"] = str(src)
    for r in table["roles"]:
        if target_of is not None:
            r["target"] = target_of(r["role"], r["target"])
    data = (json.dumps(table, indent=2, sort_keys=True) + "\n").encode()
    artifacts.write_file(out / dep / "roles.json", data, 0o644)
    entries[f"{dep}/roles.json"] = manifest.artifact_entry(data, {"kind": "test"}, [])
    targets = {r["role"]: r["target"] for r in table["roles"]}
    for n in nodes(plan) if fleet else ():
        elf = build_node(plan, n, targets[str(n.role(n.lo))]).elf
        artifacts.write_file(out / dep / n.file, elf, 0o755)
        entries[f"{dep}/{n.file}"] = manifest.artifact_entry(elf, {"kind": "test"}, [])
    for r in () if fleet else plan.roles():
        elf = build_role(plan, r, targets[str(r)]).elf
        artifacts.write_file(out / dep / str(r), elf, 0o755)
        entries[f"{dep}/{r}"] = manifest.artifact_entry(elf, {"kind": "test"}, [])
    mpath = out / "MANIFEST.json"
    if mpath.exists():
        old = json.loads(mpath.read_text())
        old["artifacts"].update(entries)
        entries = old["artifacts"]
    manifest.write(mpath, manifest.new(entries, [], {}))
    return out / dep


def build_roles(out: Path, sources=None) -> Path:
    """Build every example deployment's roles into out/roles/..., with out/MANIFEST.json."""
    from alphac import artifacts, manifest
    from conftest import ROOT
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        entries, inputs, tools = {}, [], {}
        for p, r in artifacts.all_recipes():
            if not p.startswith("roles/") or (sources and r["source"] not in sources):
                continue
            b = artifacts.build(r)
            artifacts.write_file(out / p, b.data, artifacts.mode(r))
            entries[p] = manifest.artifact_entry(b.data, r, b.inputs)
            inputs += b.inputs
            tools.update(b.tools)
        manifest.write(out / manifest.NAME, manifest.new(entries, inputs, tools))
    finally:
        os.chdir(cwd)
    return out / "roles"
