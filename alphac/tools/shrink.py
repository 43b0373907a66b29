"""`alphac launch --shrink`: the deployment a run continues on when owners fail, under `contract
exact_sum` (whose bits do not depend on the owner count, the split or the tree).

The rule, which the compiler applies and so every role of the new deployment holds alone: the
failed owners are left out and the others renumbered in order (owner k keeps its samples and
becomes owner k - (failed owners before it)); each failed owner's samples go to the surviving
owner whose range ends where its begins (its left neighbour), else to the one whose range
begins where its ends; the other roles, the topology (a star's center; a hierarchy's fan-out),
the strategy and each surviving role's target stay; the combine tree is the default one and a
partitioning strategy's partition is `even`. The new deployment is the learner's own source
with one more deployment, `NAME_without_K...`, built into `OUT` (roles.json, the executables,
MANIFEST.json, as `alphac build --deployment` writes them): a checkpoint resumes on it as on any
layout.

Requires: the build manifest's source, read from the directory the build ran in (as `alphac
verify` does) and equal to the SHA-256 the manifest recorded (`launch-input` otherwise).
Guarantees: `check_source` refuses `shrink-contract` before anything starts for a build that is
not under exact_sum (its contract digest in roles.json); `build` writes nothing outside OUT but a
temporary source beside the learner's, removed once compiled.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from alphac import artifacts, manifest as manifests
from alphac.diag import CompileError
from alphac.dist.structure import Hierarchy
from alphac.ir.learner import CONTRACTS
from alphac.refusals import Refusal


def check_source(table: dict, manifest: dict):
    """(the source's path, its plan of the table's deployment): the build's contract exact_sum (by
    its digest in roles.json: `shrink-contract`), the source's bytes the build's (`launch-input`)."""
    if table["identity"].get("contract") != hashlib.sha256(CONTRACTS["exact_sum"].encode()).hexdigest():
        raise Refusal("shrink-contract", f"learner `{table['learner']}` is not under `contract "
                                         "exact_sum`: its bits depend on the owner count")
    sources = sorted({a["recipe"].get("source") for a in manifest["artifacts"].values()
                      if isinstance(a.get("recipe"), dict) and a["recipe"].get("source")})
    src = Path(sources[0]) if len(sources) == 1 else None
    want = manifest.get("inputs", {}).get(str(src), {}).get("sha256")
    if src is None or not src.is_file() or manifests.sha256_file(src) != want:
        raise Refusal("launch-input", f"--shrink rebuilds the deployment from its source: "
                                      f"{src or 'the build manifest names none'} must be the file it "
                                      "was built from, read from the directory the build ran in")
    return src, artifacts.plans_of(str(src))[1][table["deployment"]]


def text(plan, failed: list[int]) -> tuple[str, str]:
    """(the new deployment's name, its text) without the owners `failed` (the rule above)."""
    dep = plan.dep
    ranges = [dep.samples.range(k) for k in range(dep.owners)]
    for f in sorted(failed):
        lo, hi = ranges[f]
        to = next((k for k in range(dep.owners) if k not in failed and ranges[k][1] == lo and ranges[k] != (lo, lo)),
                  next((k for k in range(dep.owners) if k not in failed and ranges[k][0] == hi), None))
        if to is None and hi > lo:
            raise Refusal("launch-input", f"--shrink: no surviving owner's samples adjoin owner {f}'s")
        if to is not None:
            ranges[to] = (min(ranges[to][0], lo), max(ranges[to][1], hi))
    keep = [k for k in range(dep.owners) if k not in failed]
    name = f"{dep.name}_without_{'_'.join(map(str, sorted(failed)))}"
    tree = isinstance(dep.topology, Hierarchy)      # (its inner roles are the compiler's)
    others = [] if tree else [n for n, _, _ in dep.roles if n != dep.owner]
    lines = [f"deployment {name} {{", f"  roles {', '.join(others + [f'{dep.owner}[{len(keep)}]'])}",
             f"  topology hierarchy(fanout {dep.topology.fanout})" if tree else f"  topology star({dep.topology.center})",
             "  samples " + ", ".join(f"{dep.owner}[{j}] = {ranges[k][0]}..{ranges[k][1]}"
                                      for j, k in enumerate(keep)),
             f"  strategy {dep.strategy.name}"]
    if dep.strategy.partition:
        lines.append("  partition even")
    targets = []
    roles = {str(r): r for r in plan.roles()}
    for j, k in enumerate(keep):
        t = dep.target_of(roles[f"{dep.owner}.{k}"])
        if t != "x86_64":
            targets.append((f"{dep.owner}[{j}]", t))
    for n in others:
        if n in roles and dep.target_of(roles[n]) != "x86_64":
            targets.append((n, dep.target_of(roles[n])))
    if any("+" in t for _, t in targets):
        raise Refusal("launch-input", "--shrink: GPU owners are built for their cards; run them with --restarts")
    lines += [f"  target {who} = {t}" for who, t in targets] + ["}"]
    return name, "\n".join(lines) + "\n"


def build(src: Path, plan, failed: list[int], out: Path):
    """The deployment without the owners `failed`, built into `out`/NAME with `out`/MANIFEST.json
    (what `alphac launch` runs), and its plan. Its source is compiled from a file beside the learner's (its
    load() paths relative to it, as the learner's are), removed once compiled."""
    from alphac.build import build_role
    from alphac.encode import json_text
    name, dep_text = text(plan, failed)
    with tempfile.NamedTemporaryFile("w", dir=src.parent, prefix=".shrink-", suffix=".alpha") as f:
        f.write(src.read_text() + "\n# alphac launch --shrink (alphac/tools/shrink.py)\n" + dep_text)
        f.flush()
        try:
            _, plans = artifacts.plans_of(f.name)
        except CompileError as e:        # (a hierarchy of one owner, say): not shrunk
            raise Refusal("launch-input", f"--shrink: {name} is not a deployment the compiler takes: "
                                          + "; ".join(d.message for d in e.diagnostics))
    new = plans[name]
    table = artifacts.roles_table(new)
    data = (json_text(table, indent=2) + "\n").encode()
    artifacts.write_file(out / name / "roles.json", data, 0o644)
    entries = {f"{name}/roles.json": manifests.artifact_entry(data, {"kind": "shrunk"}, [])}
    for r in new.roles():
        elf = build_role(new, r, new.dep.target_of(r)).elf
        artifacts.write_file(out / name / str(r), elf, 0o755)
        entries[f"{name}/{r}"] = manifests.artifact_entry(elf, {"kind": "shrunk"}, [])
    manifests.write(out / manifests.NAME, manifests.new(entries, [], {}))
    return out / name, new
