"""Fleet builds (issue 20): one executable per index node, its member chosen at run time by
`--rank` (alphac/lower/fleet.py). Every deployment built so prints the interpreter's bits:
uneven hierarchies (an aggregator with fewer children), deep ones, ZeRO partitions explicit and
even, exact sums, a minibatch learner streaming its rows from files; checkpoints move between
the per-role and the per-node builds both ways; a rank out of range, a missing rank and a rank
started twice are refused by name; 256 roles launch from three executables; the 200,000-role
deployment builds one executable per index node."""
import json
import os
import re
import subprocess
import time

import pytest

from backend import build_deployment
from conftest import EXAMPLES, ROOT, alphac, exact_sum_variant

from alphac.refusals import REFUSALS

CODE = {name: code for name, (code, _) in REFUSALS.items()}

LSQ_DEPLOYMENTS = """
deployment h7 {
  roles owner[7]
  topology hierarchy(fanout 3)
  samples even
  strategy zero3
  partition even
}

deployment h9 {
  roles owner[9]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..1, owner[1] = 1..1, owner[2] = 1..3, owner[3] = 3..4, owner[4] = 4..4, owner[5] = 4..6, owner[6] = 6..7, owner[7] = 7..8, owner[8] = 8..8
  strategy zero2
}

deployment s5 {
  roles coordinator, owner[5]
  topology star(coordinator)
  samples even
  strategy zero1
  partition owner[0] = 0..1, owner[1] = 1..1, owner[2] = 1..3, owner[3] = 3..4, owner[4] = 4..5
}

deployment h240 {
  roles owner[240]
  topology hierarchy(fanout 16)
  samples even
  strategy zero3
}
"""
EXACT = """
deployment x6 {
  roles owner[6]
  topology hierarchy(fanout 4)
  samples even
}
"""
LOGISTIC = """
deployment lh5 {
  roles owner[5]
  topology hierarchy(fanout 2)
  samples even
  strategy zero2
}
"""


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    lsq = (EXAMPLES / "lsq_adam.alpha").read_text()
    out = {"lsq": d / "lsq.alpha", "exact": d / "exact.alpha", "logistic": d / "logistic.alpha"}
    out["lsq"].write_text(lsq + LSQ_DEPLOYMENTS)
    out["exact"].write_text(exact_sum_variant(lsq) + EXACT)
    text = (EXAMPLES / "logistic.alpha").read_text().replace('load("data/', f'load("{EXAMPLES}/data/')
    out["logistic"].write_text(text + LOGISTIC)
    return d, out


def launch(dep_dir, tmp_path, **kw):
    from alphac.tools.launch import launch as run
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return run(dep_dir, records=tmp_path / "runs", **kw)
    finally:
        os.chdir(cwd)


def interpreted(src, dep, steps):
    rc, out, err = alphac("run", src, "--deployment", dep, "--steps", steps)
    assert rc == 0, err
    return out


CASES = [("lsq", "h7"), ("lsq", "h9"), ("lsq", "s5"), ("exact", "x6"), ("logistic", "lh5")]


@pytest.mark.parametrize("src,dep", CASES)
def test_index_nodes_print_the_interpreters_bits(sources, src, dep, tmp_path):
    d, paths = sources
    built = build_deployment(paths[src], dep, tmp_path / "b", fleet=True)
    table = json.loads((built / "roles.json").read_text())
    assert any(n["size"] > 1 for n in table["nodes"])            # members chosen at run time
    assert sorted(sum(([n["rank"] + k for k in range(n["size"])] for n in table["nodes"]), [])) \
        == list(range(table["role_count"]))
    rec = launch(built, tmp_path, steps=5)
    assert rec["passed"], rec["roles"]
    assert rec["published"] == interpreted(paths[src], dep, 5)


@pytest.mark.parametrize("first", ["roles", "fleet"])
def test_checkpoints_move_between_role_and_node_builds(sources, first, tmp_path):
    _, paths = sources
    fleet = build_deployment(paths["lsq"], "h7", tmp_path / "f", fleet=True)
    roles = build_deployment(paths["lsq"], "h7", tmp_path / "r")
    a, b = (roles, fleet) if first == "roles" else (fleet, roles)
    ck = tmp_path / "ck"
    assert launch(a, tmp_path, steps=3, checkpoint=ck)["passed"]
    rec = launch(b, tmp_path, steps=4, resume=ck)
    assert rec["passed"], rec["roles"]
    assert rec["published"] == interpreted(paths["lsq"], "h7", 7)


def start(exe, *args):
    return subprocess.Popen([str(exe), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_ranks_out_of_range_missing_or_twice_are_refused_by_name(sources, tmp_path):
    _, paths = sources
    built = build_deployment(paths["lsq"], "h7", tmp_path / "b", fleet=True)
    table = json.loads((built / "roles.json").read_text())
    owners = next(n for n in table["nodes"] if n["name"] == "owner")
    exe = built / owners["file"]
    for rank in (owners["rank"] - 1, owners["rank"] + owners["size"], 10 ** 9):
        p = subprocess.run([exe, "--rank", str(rank), "--parent", "127.0.0.1:9"], capture_output=True, text=True)
        assert (p.returncode, p.stderr) == (CODE["rank-out-of-range"], "refused: rank-out-of-range\n")
    p = subprocess.run([exe, "--parent", "127.0.0.1:9"], capture_output=True, text=True)
    assert (p.returncode, p.stderr.splitlines()[-1]) == (CODE["usage"], "refused: usage (--rank: missing)")
    single = build_deployment(paths["lsq"], "h7", tmp_path / "r")
    p = subprocess.run([single / "owner.3", "--rank", "5", "--parent", "127.0.0.1:9"], capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (CODE["rank-out-of-range"], "refused: rank-out-of-range\n")
    # owner[0] and owner[1] report to agg1[0]; owner[0] started twice, owner[1] never
    from alphac.tools.launch import free_port
    agg = next(n for n in table["nodes"] if n["name"] == "agg1")
    port = free_port()
    parent = start(built / agg["file"], "--rank", agg["rank"], "--listen", f"127.0.0.1:{port}",
                   "--parent", "127.0.0.1:9", "--deadline-ms", 3000)
    time.sleep(0.3)
    twins = [start(exe, "--rank", owners["rank"], "--parent", f"127.0.0.1:{port}", "--deadline-ms", 3000)
             for _ in range(2)]
    out, err = parent.communicate(timeout=20)
    assert (parent.returncode, err) == (CODE["rank-duplicate"], "refused: rank-duplicate\n")
    assert out == ""
    for t in twins:
        _, err = t.communicate(timeout=20)
        assert t.returncode != 0 and err.startswith("refused: ")


def test_256_roles_from_three_executables(sources, tmp_path):
    _, paths = sources
    built = build_deployment(paths["lsq"], "h240", tmp_path / "b", fleet=True)
    table = json.loads((built / "roles.json").read_text())
    assert len(table["roles"]) == 256 and len(table["nodes"]) == 3
    assert len(list(built.iterdir())) == 4                       # and roles.json
    rec = launch(built, tmp_path, steps=3, deadline_ms=60000)
    assert rec["passed"], [r for r in rec["roles"] if r["exit"]][:3]
    assert len(rec["roles"]) == 256
    assert rec["published"] == interpreted(paths["lsq"], "h240", 3)


def test_the_200000_role_fleet_builds_one_executable_per_index_node(tmp_path):
    from alphac.artifacts import build_deployment as build
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        m = build("examples/fleet_lsq.alpha", "fleet_200k", tmp_path / "f")
    finally:
        os.chdir(cwd)
    table = json.loads((tmp_path / "f" / "roles.json").read_text())
    assert [(n["file"], n["rank"], n["size"]) for n in table["nodes"]] == [
        ("root", 0, 1), ("agg1.0-49", 1, 49), ("agg2.0-3125", 50, 3125), ("owner.0-200000", 3175, 200000)]
    assert table["roles"] == [] and table["role_count"] == 203175
    assert sorted(m["artifacts"]) == ["agg1.0-49", "agg2.0-3125", "owner.0-200000", "roles.json", "root"]
    exe = tmp_path / "f" / "owner.0-200000"
    for rank, name in ((3174, "rank-out-of-range"), (203175, "rank-out-of-range")):
        p = subprocess.run([exe, "--rank", str(rank), "--parent", "127.0.0.1:9"], capture_output=True, text=True)
        assert (p.returncode, p.stderr) == (CODE[name], f"refused: {name}\n")
    # the last owner reaches for its parent, agg2[3124], and finds nobody: peer-lost, by its rank
    p = subprocess.run([exe, "--rank", "203174", "--parent", "127.0.0.1:9", "--deadline-ms", "300"],
                       capture_output=True, text=True)
    assert p.stderr.startswith("refused: connect")
    rc, out, err = alphac("launch", tmp_path / "f")
    assert rc == CODE["launch-input"] and "203175 roles" in err


def test_a_fleet_build_verifies_and_launches_from_the_command_line(tmp_path):
    out = tmp_path / "tree"
    rc, _, err = alphac("build", EXAMPLES / "lsq_adam.alpha", "--deployment", "lsq_adam_tree", "-o", out, "--fleet")
    assert rc == 0 and "3 executables" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["MANIFEST.json", "agg1.0-2", "owner.0-4", "roles.json", "root"]
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["artifacts"]["owner.0-4"]["recipe"]["kind"] == "node"
    rc, _, err = alphac("verify", out / "MANIFEST.json")
    assert rc == 0, err
    rc, published, err = alphac("launch", out, "--steps", 4, "--records", tmp_path / "runs")
    assert rc == 0, err
    assert published == interpreted(EXAMPLES / "lsq_adam.alpha", "lsq_adam_tree", 4)
