"""Random learners nobody wrote by hand, through every engine: the bounded, seeded share of
`make fuzz` (tests/fuzz.py), the regression files it and users found (tests/regress/), and the
proof that it finds the two miscompiles of issue 13 when they are put back into the compiler.

Engines (tests/differential.py): the reference interpreter, the plan executor of every
deployment, the GPU kernels in the PTX interpreter, the x86-64 and AArch64 executables (5
steps; 3 + checkpoint + 2; AArch64 resumed from the x86-64 checkpoint), every deployment's role
executables (5; 3 + checkpoint + 2), and checkpoints moved between a single process and stars.
"""
from collections import Counter
from pathlib import Path

import pytest

import differential
import learngen
import reduce
from conftest import require_tool

REGRESS = Path(__file__).resolve().parent / "regress"
FAST_SEEDS = range(0, 400)          # interpreter and plan executor: about 20 s
FULL_SEEDS = range(0, 14)           # every engine: about 35 s


@pytest.fixture(autouse=True, scope="module")
def _tools():
    require_tool("qemu-aarch64")


@pytest.mark.parametrize("path", sorted(REGRESS.glob("*.alpha")), ids=lambda p: p.stem)
def test_regression_agrees_everywhere(path, tmp_path):
    rep = differential.check_text(path.read_text(), tmp_path)
    assert rep.status == "agreed", rep.summary() or rep.code
    assert any(k.startswith("roles:") for k in rep.outcomes), "a regression runs its roles too"


def campaign(seeds, engines, tmp_path):
    counts, bad = Counter(), []
    for seed in seeds:
        rep = differential.check_program(learngen.generate(seed), tmp_path / str(seed), engines, seed=seed)
        counts[rep.status] += 1
        counts["runs"] += len(rep.outcomes)
        if rep.status == "disagreed":
            bad.append((seed, rep.summary()))
    return counts, bad


def test_fuzz_share_interpreter_and_plans(tmp_path):
    counts, bad = campaign(FAST_SEEDS, differential.FAST, tmp_path)
    print(dict(counts))
    assert not bad, f"seed {bad[0][0]}:\n{bad[0][1]}"
    assert counts["agreed"] >= 0.9 * len(FAST_SEEDS) and counts["runs"] > 2 * len(FAST_SEEDS)


def test_fuzz_share_every_engine(tmp_path):
    counts, bad = campaign(FULL_SEEDS, differential.ALL, tmp_path)
    print(dict(counts))
    assert not bad, f"seed {bad[0][0]}:\n{bad[0][1]}"
    assert counts["agreed"] >= len(FULL_SEEDS) - 2 and counts["runs"] > 12 * len(FULL_SEEDS)


def test_generator_is_deterministic_and_covers_the_features():
    assert learngen.render(learngen.generate(7)) == learngen.render(learngen.generate(7))
    text = "".join(learngen.render(learngen.generate(s)) for s in range(120))
    for needle in ["let old", "grad(", "dot(", "sum(", "sqrt(", "^2", "^3", "loss(i)", "x[i, ",
                   "f64[", ", ", "state p", "state ref", "tanh(", "sigmoid(", "relu(", "abs(",
                   "softplus(", "max(", "min(", "exp(", "log1p(", "log(", "expm1("]:
        assert needle in text, needle
    shapes = Counter()
    for s in range(120):
        for d in learngen.generate(s).decls:
            shapes[len(d.shape)] += 1
    assert shapes[0] and shapes[1] and shapes[2]


def test_deployments_cover_every_strategy_topology_and_target(tmp_path):
    from alphac.dist.structure import Hierarchy, Star
    from alphac.driver import compile_deployments
    seen = Counter()
    for seed in range(60):
        rep = differential.check_program(learngen.generate(seed), tmp_path / str(seed), (), seed=seed)
        if rep.status == "refused":
            continue
        (tmp_path / "f.alpha").write_text(rep.source)
        for plan in compile_deployments(tmp_path / "f.alpha")[1].values():
            d = plan.dep
            seen[d.strategy.name] += 1
            seen["star" if isinstance(d.topology, Star) else "hierarchy"] += 1
            seen["delivered"] += d.deliver is not None
            seen["combine tree"] += d.tree is not None
            seen["aarch64"] += "aarch64" in d.targets.values()
            seen["owner without samples"] += any(d.samples.size(k) == 0 for k in range(d.owners))
            seen["owner without coordinates"] += any(r.size(k) == 0 for r in d.placement.values()
                                                     for k in range(d.owners))
            seen["loss reads partitioned state"] += any(s.kind == "state" for s in plan.gathered_inputs())
    for key in ["replicated", "zero1", "zero2", "zero3", "mine", "star", "hierarchy", "delivered",
                "combine tree", "aarch64", "owner without samples", "owner without coordinates",
                "loss reads partitioned state"]:
        assert seen[key], (key, seen)


# -- the two bugs of issue 13, put back ----------------------------------------------------------
def first_disagreement(seeds, engines, tmp_path):
    for seed in seeds:
        prog = learngen.generate(seed)
        rep = differential.check_program(prog, tmp_path / str(seed), engines, seed=seed)
        if rep.status == "disagreed":
            return seed, prog, rep
    return None, None, None


def bug1(monkeypatch):
    """The update stores a target and then loads it again for a later read of its old value."""
    from alphac.lower import learner
    monkeypatch.setattr(learner, "old_value_reads", lambda stmts: [[] for _ in stmts])


def bug2(monkeypatch):
    """Owners compute their loss with the partitioned state they do not hold (only params are
    gathered; a delivered owner sends only params)."""
    from alphac.dist.plan import Plan
    real = Plan.carries
    monkeypatch.setattr(Plan, "gathered_inputs", lambda self: [
        s for s in self.loss_reads() if s.kind == "param" and self.partitioned(s)])
    monkeypatch.setattr(Plan, "carries", lambda self, kind: [
        s for s in self.lr.states if s.kind == "param"] if kind == "allgather-params" else real(self, kind))


def test_fuzzer_finds_bug1_put_back(monkeypatch, tmp_path):
    bug1(monkeypatch)
    seed, prog, rep = first_disagreement(range(40), ("interp", "x86_64"), tmp_path)
    assert seed is not None, "the fuzzer missed a vector let of an old value read after the store"
    assert "x86_64" in rep.summary()
    # the issue's own program, through the roles too
    text = (REGRESS / "let_old.alpha").read_text()
    rep = differential.check_text(text, tmp_path / "let_old", ("interp", "x86_64", "aarch64", "roles"))
    assert rep.status == "disagreed"
    assert {"x86_64", "aarch64", "roles"} <= reduce.signature(rep)


def test_fuzzer_finds_bug2_put_back(monkeypatch, tmp_path):
    bug2(monkeypatch)
    seed, prog, rep = first_disagreement(range(40), differential.FAST, tmp_path)
    assert seed is not None, "the fuzzer missed a loss that reads partitioned state"
    assert "plan:" in rep.summary()
    # without the plan executor, the role executables' wrong bits are caught by the contract
    rep = differential.check_text(rep.source, tmp_path / "roles", ("interp", "roles"))
    assert rep.status == "disagreed" and "roles" in reduce.signature(rep), rep.outcomes


def test_reducer_shrinks_a_failure_and_keeps_it(monkeypatch, tmp_path):
    bug1(monkeypatch)
    seed, prog, rep = first_disagreement(range(40), ("interp", "x86_64"), tmp_path)
    before = len(learngen.render(learngen.generate(seed)))
    red = reduce.Reducer(learngen.generate(seed), tmp_path / "r")
    assert "x86_64" in red.sig
    small = red.run(budget=60)
    assert len(learngen.render(small)) < before / 2
    assert red.fails(small)
    kept = reduce.keep(small, tmp_path / "kept", f"found-{seed}", "a note")
    assert kept.read_text().startswith("# a note\nlearner ")
    assert differential.check_text(kept.read_text(), tmp_path / "k", ("interp", "x86_64")).status == "disagreed"


def test_an_owners_empty_slice_in_a_checkpoint_moves_to_another_star(tmp_path):
    """Seed 310018 (a fresh seed, after issue 22): d0's owners write empty-range shards for their
    empty slices; d1's one owner, resuming d0's checkpoint, refused `shard-corrupt` because the
    new range check took an empty range for a hostile one. An empty range holds nothing."""
    rep = differential.check_program(learngen.generate(310018), tmp_path,
                                     ("interp", "roles", "moved"), seed=310018)
    assert rep.status == "agreed", rep.summary()
