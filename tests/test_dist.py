"""Distribution as a compiler transformation: plans equal the oracle for their split and tree,
strategies and topologies change nothing, and every compile-time check refuses its mutant."""
import re

import pytest

import oracle
from conftest import EXAMPLES, alphac, example

SPLIT, TREE = oracle.REF_SPLIT, oracle.REF_TREE
DEPLOYMENTS = oracle.REF_DEPLOYMENTS


@pytest.mark.parametrize("dep", sorted(DEPLOYMENTS))
@pytest.mark.parametrize("steps", [0, 1, 5, 50])
def test_plan_equals_oracle(dep, steps):
    name = DEPLOYMENTS[dep]
    code, out, err = alphac("run", example(name), "--deployment", dep, "--steps", steps)
    assert code == 0, err
    assert out == oracle.run(name, [(steps, SPLIT, TREE)])


def test_strategies_and_topologies_change_nothing():
    runs = {d: alphac("run", example("lsq_adam"), "--deployment", d, "--steps", 7)[1]
            for d in DEPLOYMENTS if DEPLOYMENTS[d] == "lsq_adam"}
    assert len(set(runs.values())) == 1
    # ...but the tree does: one owner folding all samples gives other bits
    assert runs["lsq_adam_star"] != alphac("run", example("lsq_adam"), "--steps", 7)[1]


def test_averaging_mutant_is_caught(monkeypatch):
    """A combine that averages the owners' means instead of weighting by sample count."""
    from alphac.ir import interp

    def averaging(a, b):
        if a is None or b is None:
            return a or b
        (ga, na), (gb, nb) = a, b
        mean = {p: tuple((x / na + y / nb) / 2 for x, y in zip(ga[p], gb[p])) for p in ga}
        return {p: tuple(v * (na + nb) for v in mean[p]) for p in mean}, na + nb
    monkeypatch.setattr(interp, "combine", averaging)
    code, out, _ = alphac("run", example("lsq_adam"), "--deployment", "lsq_adam_star")
    assert code == 0
    assert out != oracle.run("lsq_adam", [(5, SPLIT, TREE)]), "the averaging mutant went unnoticed"


# -- executed mutants of the reference deployment: each refused by name, with a position ------
BASE = (EXAMPLES / "lsq_adam.alpha").read_text()
STAR = re.search(r"deployment lsq_adam_star \{.*?\n\}\n", BASE, re.S).group(0)


def mutate(old, new, tmp_path, extra=""):
    assert old in STAR
    text = BASE.replace(STAR, STAR.replace(old, new) + extra)
    p = tmp_path / "mutant.alpha"
    p.write_text(text)
    return alphac("check", p)


MUTANTS = [
    ("roles coordinator, owner[4]", "roles coordinator, owner[0..2], owner[1..4]", "E0102"),
    ("roles coordinator, owner[4]", "roles coordinator, owner[0..2], owner[3..4]", "E0103"),
    ("owner[3] = 4..8", "owner[3] = 5..8", "E0105"),
    ("owner[3] = 4..8", "owner[3] = 3..8", "E0105"),
    ("owner[3] = 4..8", "owner[3] = 4..9", "E0105"),
    ("(owner[2], owner[3]))", "(owner[2]))", "E0106"),
    ("(owner[2], owner[3]))", "(owner[2], owner[3], owner[0]))", "E0107"),
    ("combine ((owner[0], owner[1]), (owner[2], owner[3]))",
     "combine ((owner[0], owner[1]), (owner[2], owner[3]))\n  strategy zero1\n"
     "  partition owner[0] = 0..2, owner[1] = 2..3, owner[2] = 3..3, owner[3] = 4..5", "E0108"),
    ("roles coordinator, owner[4]", "roles coordinator, owner[65]", "E0109"),
    ("combine ((owner[0], owner[1]), (owner[2], owner[3]))",
     "combine ((owner[0], owner[1]), (owner[2], owner[3]))\n  target owner[1] = sparc", "E0111"),
    ("combine ((owner[0], owner[1]), (owner[2], owner[3]))",
     "combine ((owner[0], owner[1]), (owner[2], owner[3]))\n  strategy zero9", "E0112"),
]


@pytest.mark.parametrize("old,new,code", MUTANTS)
def test_mutant_is_refused(tmp_path, old, new, code):
    rc, _, err = mutate(old, new, tmp_path)
    assert rc == 1 and f"error[{code}]" in err, err
    assert re.search(r"mutant\.alpha:\d+:\d+: error\[" + code, err)


def test_memory_exactly_at_supply_is_accepted_one_byte_over_refused(tmp_path):
    from alphac.driver import compile_deployments
    _, plans = compile_deployments(example("lsq_adam"))
    plan = plans["lsq_adam_star"]
    from alphac.dist.structure import Role
    need = max(plan.demand(Role("owner", k)) for k in range(4))
    line = "combine ((owner[0], owner[1]), (owner[2], owner[3]))"
    rc, _, err = mutate(line, line + f"\n  memory owner = {need} B", tmp_path)
    assert rc == 0, err
    rc, _, err = mutate(line, line + f"\n  memory owner = {need - 1} B", tmp_path)
    assert rc == 1 and "error[E0110]" in err and "(1 over)" in err


# -- the protocol -------------------------------------------------------------------------------
def plans():
    from alphac.driver import compile_deployments
    out = {}
    for name in ("lsq_adam", "lsq_momentum", "independent_state"):
        out.update(compile_deployments(example(name))[1])
    return out


def test_every_projection_fits():
    for name, plan in plans().items():
        assert plan.check_protocol() == [], name
        for r in plan.roles():
            peers = {a.peer for a in plan.project(r) if a.peer is not None}
            assert len(peers) <= plan.topo.max_peers


def test_protocol_mutant_is_caught(monkeypatch):
    """A projection that forgets one receive: the check names the message nobody receives."""
    from alphac.dist.plan import Plan
    plan = plans()["lsq_adam_star"]
    real = Plan.project

    def forgetful(self, role, final=True, checkpoint=False):
        prog = real(self, role, final, checkpoint)
        if str(role) == "coordinator":
            prog = [a for a in prog if not (a.op == "recv" and str(a.peer) == "owner.2"
                                           and a.kind == "combine")]
        return prog
    monkeypatch.setattr(Plan, "project", forgetful)
    found = plan.check_protocol()
    assert any("owner.2" in p for p in found), found
    rc, _, err = alphac("check", example("lsq_adam"))
    assert rc == 1 and "error[E0117]" in err and "lsq_adam_star" in err


def test_plan_shows_roles_holdings_tree_messages_memory():
    rc, out, _ = alphac("plan", example("lsq_adam"), "--deployment", "lsq_adam_star_zero3")
    assert rc == 0
    for needle in ["topology: star centered on coordinator", "owner[3]: samples 4..8",
                   "w,m,v coordinates 4..5", "combine tree: ((owner[0], owner[1]), (owner[2], owner[3]))",
                   "send combine -> coordinator", "recv gather-inputs <- coordinator",
                   "memory per role", "replicate w to every owner"]:
        assert needle in out, needle


def test_unknown_deployment():
    rc, _, err = alphac("run", example("lsq_adam"), "--deployment", "nope")
    assert rc == 1 and "error[E0100]" in err


# -- the fleet ------------------------------------------------------------------------------------
def test_fleet_checks_without_enumerating(monkeypatch):
    from alphac.dist.plan import Plan
    from alphac.driver import compile_deployments

    def refuse(self):
        raise AssertionError("the fleet path enumerated every role")
    monkeypatch.setattr(Plan, "roles", refuse)
    _, fleet = compile_deployments(example("fleet_lsq"))
    plan = fleet["fleet_200k"]
    assert plan.role_count() == 203175
    assert plan.topo.counts == [1, 49, 3125, 200000] and plan.topo.max_peers == 65
    rc, out, _ = alphac("plan", example("fleet_lsq"))
    assert rc == 0 and "203175 roles in all, at most 65 peers each" in out


def test_fleet_with_one_overlap_is_refused(tmp_path):
    text = (EXAMPLES / "fleet_lsq.alpha").read_text().replace(
        "owner[100000..200000]", "owner[99999..200000]")
    p = tmp_path / "fleet.alpha"
    p.write_text(text)
    rc, _, err = alphac("check", p)
    assert rc == 1 and "error[E0102]" in err and "owner[99999]" in err
