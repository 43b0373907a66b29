"""A built deployment's roles.json and files, read and checked before anything runs (launch,
slurm, k8s): malformed, `launch-input`; a SHA-256 that is not the build manifest's,
`artifact-hash`.
"""
from __future__ import annotations

import os
from pathlib import Path

from alphac.files import read_json
from alphac.manifest import ManifestError, load as load_manifest, sha256_file
from alphac.refusals import Refusal
from alphac.tools.record import is_name


def find_manifest(start: Path) -> Path:
    for d in [start, *start.parents]:
        m = d / "MANIFEST.json"
        if m.exists():
            return m
    raise Refusal("artifact-hash", f"no MANIFEST.json at or above {start}")


def check_table(t) -> dict:
    """roles.json if it is what the launcher reads; `launch-input` otherwise."""
    def bad(why):
        return Refusal("launch-input", f"roles.json: {why}")
    if not isinstance(t, dict) or t.get("format") != 1 or not isinstance(t.get("roles"), list) \
            or not isinstance(t.get("identity"), dict):
        raise bad("not a table of format 1 with roles and an identity")
    if not t["roles"]:
        raise bad(f"it lists no roles: a fleet of {t.get('role_count')} roles (over 4096) is not "
                  "launched or gathered role by role; its `nodes` give each executable's ranks")
    if not all(isinstance(t.get(k), str) for k in ("learner", "root")) \
            or not is_name(t.get("deployment")):
        raise bad("learner, root or deployment is not a name")
    for i, r in enumerate(t["roles"]):
        if not (isinstance(r, dict) and is_name(r.get("role")) and is_name(r.get("file"))
                and isinstance(r.get("listens"), bool) and isinstance(r.get("target"), str)
                and (r.get("rank") is None or (type(r["rank"]) is int and r["rank"] >= 0))
                and (r.get("parent") is None or isinstance(r["parent"], str))
                and isinstance(r.get("mesh", False), bool)
                and (not r.get("mesh") or type(r.get("rank")) is int)):
            raise bad(f"role {i} is not a role entry")
    data = t.get("data", [])
    if not isinstance(data, list) or not all(
            isinstance(f, dict) and all(isinstance(f.get(k), str) and f[k] and "\0" not in f[k]
                                        for k in ("path", "load", "root")) for f in data):
        raise bad("`data` is not a list of the files the owners load (each a path, a load path "
                  "and a root)")
    names = [r["role"] for r in t["roles"]]
    listening = {r["role"] for r in t["roles"] if r["listens"]}
    if len(set(names)) != len(names) or t["root"] not in names \
            or any(r["parent"] is not None and r["parent"] not in listening for r in t["roles"]):
        raise bad("a role is named twice, the root is not a role, or a parent is not a listening role")
    return t


HOW = "build one with `alphac build FILE --deployment NAME -o DIR` (or `make roles`)"


def load_table(dep_dir: Path) -> tuple[dict, dict, Path]:
    table_path = dep_dir / "roles.json"
    if not dep_dir.exists():
        raise Refusal("launch-input", f"{dep_dir} does not exist; {HOW}")
    if not dep_dir.is_dir():
        raise Refusal("launch-input", f"{dep_dir} is a file, not a built deployment (a directory "
                                      f"with roles.json); {HOW}")
    if not table_path.exists():
        inner = sorted(p.parent.name for p in dep_dir.glob("*/roles.json"))
        if inner:
            raise Refusal("launch-input", f"{dep_dir} holds deployments, not one: launch one of "
                                          f"{', '.join(str(dep_dir / n) for n in inner)}")
        raise Refusal("launch-input", f"{dep_dir} has no roles.json, so it is not a built "
                                      f"deployment; {HOW}")
    mpath = find_manifest(dep_dir)
    try:
        manifest = load_manifest(mpath)
    except ManifestError as e:
        raise Refusal("launch-input", str(e))
    check_hashes(dep_dir, ["roles.json"], manifest, mpath)
    try:
        table = read_json(table_path, "roles")
    except OSError as e:
        raise Refusal("launch-input", f"roles.json: {e.strerror or e}")
    except ValueError as e:
        raise Refusal("launch-input", f"roles.json is not JSON: {e}")
    return check_table(table), manifest, mpath


def load_build(dep_dir: Path) -> tuple[dict, dict, Path, dict[str, str]]:
    """roles.json, the manifest, its path and each role file's SHA-256, all checked (load_table,
    check_hashes): what a launcher reads before anything starts (launch, alphac slurm)."""
    table, manifest, mpath = load_table(dep_dir)
    return table, manifest, mpath, check_hashes(dep_dir, sorted({r["file"] for r in table["roles"]}),
                                                manifest, mpath)


def artifact_key(dep_dir: Path, mpath: Path, name: str) -> str:
    return (dep_dir.resolve().relative_to(mpath.parent.resolve()) / name).as_posix()


def check_hashes(dep_dir: Path, names: list[str], manifest: dict, mpath: Path) -> dict[str, str]:
    """The SHA-256 of each named file (an executable, or roles.json), checked against the manifest."""
    hashes = {}
    for name in names:
        key, path = artifact_key(dep_dir, mpath, name), dep_dir / name
        if path.exists() and not (path.is_file() and (name == "roles.json" or os.access(path, os.X_OK))):
            raise Refusal("launch-input", f"{key} is not an executable regular file")
        entry = manifest["artifacts"].get(key)
        try:
            same = entry is not None and path.exists() and sha256_file(path) == entry["sha256"]
        except OSError as e:
            raise Refusal("launch-input", f"{key}: {e.strerror}")
        if not same:
            raise Refusal("artifact-hash", f"{key} does not match the manifest")
        hashes[name] = entry["sha256"]
    return hashes
