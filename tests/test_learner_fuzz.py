"""Random learners nobody wrote by hand, through every engine: the bounded, seeded share of
`make fuzz` (tests/fuzz.py), the regression files it and users found (tests/regress/), and the
proof that it finds the two miscompiles of issue 13 when they are put back into the compiler.

Engines (tests/differential.py): the reference interpreter, the plan executor of every
deployment, the GPU kernels in the PTX interpreter, the x86-64 and AArch64 executables (5
steps; 3 + checkpoint + 2; AArch64 resumed from the x86-64 checkpoint), every deployment's role
executables (5; 3 + checkpoint + 2), checkpoints moved between a single process and stars, and
GPU owners under the mock driver: a deployment's and the single owner, each learner's shadow
policy, rate and memory mapping drawn from its seed (differential.gpu_draw).
"""
import re
from collections import Counter
from pathlib import Path

import pytest

import differential
import learngen
import reduce
from conftest import require_tool

REGRESS = Path(__file__).resolve().parent / "regress"
FAST_SEEDS = range(0, 200)          # interpreter and plan executor: about 40 s (half of them
FULL_SEEDS = (0, 1, 2, 3, 5, 6, 8, 11)  # with the matrix operations); every engine: about 80 s


@pytest.fixture(autouse=True, scope="module")
def _tools():
    require_tool("qemu-aarch64")


@pytest.mark.parametrize("path", sorted(REGRESS.glob("*.alpha")), ids=lambda p: p.stem)
def test_regression_agrees_everywhere(path, tmp_path):
    """Each regression file agrees in every engine, or, if its first line is `# refused: CODE`,
    is refused with that diagnostic."""
    text = path.read_text()
    rep = differential.check_file(path, tmp_path)               # with the .npy files beside it
    if text.startswith("# refused: "):
        assert (rep.status, rep.code) == ("refused", text.split()[2]), rep.summary()
        return
    assert rep.status == "agreed", rep.summary() or rep.code
    assert any(k.startswith("roles:") for k in rep.outcomes), "a regression runs its roles too"


def campaign(seeds, engines, tmp_path):
    counts, bad = Counter(), []
    for seed in seeds:
        rep = differential.check_program(learngen.generate(seed), tmp_path / str(seed), engines, seed=seed)
        counts[rep.status] += 1
        counts["runs"] += len(rep.outcomes)
        counts["gpu roles"] += sum(k.startswith("roles:") and "_gpu" in k for k in rep.outcomes)
        for k in rep.outcomes:          # the gpu engine's draws, as its labels name them
            counts.update(w for w in ("--shadow full", "--shadow sampled", "map rm", "replayed")
                          if w in k and k.startswith(("gpu:", "roles:")))
        if rep.status == "disagreed":
            bad.append((seed, rep.summary()))
    return counts, bad


def test_fuzz_share_interpreter_and_plans(tmp_path):
    counts, bad = campaign(FAST_SEEDS, differential.FAST, tmp_path)
    print(dict(counts))
    assert not bad, f"seed {bad[0][0]}:\n{bad[0][1]}"
    assert counts["agreed"] >= 0.9 * len(FAST_SEEDS) and counts["runs"] > 2 * len(FAST_SEEDS)


def test_fuzz_share_every_engine(tmp_path):
    # gpu-built (ptxas on the largest learners' owners, minutes for these seeds): the test below
    counts, bad = campaign(FULL_SEEDS, tuple(e for e in differential.ALL if e != "gpu-built"), tmp_path)
    print(dict(counts))
    assert not bad, f"seed {bad[0][0]}:\n{bad[0][1]}"
    assert counts["agreed"] >= len(FULL_SEEDS) - 2 and counts["runs"] > 12 * len(FULL_SEEDS)
    assert counts["gpu roles"] >= 2 * 3         # GPU owners under the mock, in two programs at least
    # the single GPU owner under both shadow policies (a sampled chain replayed), the RM mapping
    assert counts["--shadow full"] and counts["--shadow sampled"] and counts["replayed"], counts
    assert counts["map rm"] >= 2, counts


def test_gpu_draws_follow_the_seed_and_cover_every_choice():
    """The gpu engine's draw is a function of the program's name (its seed), so a seed and its
    reductions replay it; over 60 seeds it reaches both policies, every rate, every value of
    every host choice on each card (alphac/nvdrv/host.py CHOICES), and replays."""
    from alphac.nvdrv.host import CHOICES
    assert differential.gpu_draw("fuzz7") == differential.gpu_draw("fuzz7") != differential.gpu_draw("fuzz8")
    draws = [differential.gpu_draw(f"fuzz{s}") for s in range(60)]
    assert {d.shadow for d in draws} == {"full", "sampled"}
    assert {d.rate for d in draws if d.shadow == "sampled"} == {1, 2, 8}
    assert all(d.rate == 0 and not d.replay and not d.draws for d in draws if d.shadow == "full")
    assert all(list(dict(c)) == list(CHOICES) for d in draws for c in d.cards)
    assert all({dict(d.cards[i])[k] for d in draws} == set(vs) for i in (0, 1) for k, (vs, _) in CHOICES.items())
    assert any(d.replay for d in draws) and not all(d.replay for d in draws if d.shadow == "sampled")


MOMENTUM = """learner mom
data x = [[1.0, 2.0], [0.5, -1.0], [0.25, 0.75]]
data y = [1.0, 2.0, -0.5]
param w: f64[2] = 0.2
state m: f64[2] = 0.0
loss(i) = (dot(w, x[i]) - y[i])^2
update {
  m = 0.9 * m + grad(w)
  w = w - 0.1 * m
}
"""
SCALAR_READS_NORM = MOMENTUM.replace("learner mom", "learner norm").replace(
    "state m: f64[2] = 0.0", "state m: f64[2] = 0.0\nstate p: f64 = 0.0").replace(
    "  m = 0.9", "  p = p + dot(grad(w), grad(w))\n  m = 0.9")
# ... and its loss reading p: the host would need the card's p before grad_samples (can_sample refuses)
NORM_IN_LOSS = SCALAR_READS_NORM.replace("learner norm", "learner lossnorm").replace(
    "loss(i) = (dot(w, x[i]) - y[i])^2", "loss(i) = (dot(w, x[i]) - y[i])^2 * (1 + 0 * p)")


def test_the_single_gpu_owner_is_checked_as_drawn(tmp_path, monkeypatch):
    """The gpu engine's single owner (differential.check_gpu_owner): its bits and its replayed
    chain agree; a card whose update is one bit off on step 4, which the drawn sampled shadow
    leaves unproven, publishes wrong bits and a chain whose replay exits 3, each problem naming
    the draw; a scalar state reading the gradients' norm runs sampled (the card's `scalars`) and
    replays; a learner `can_sample` refuses (that state read by the loss too), drawn sampled, is
    refused `usage` by name and runs full with the contract's bits."""
    import mockgpu
    from alphac.driver import compile_file
    if not differential.gpu_here():
        pytest.skip("no ptxas or no mock driver here")
    odd = b"".join((2 * k + 1).to_bytes(8, "little") for k in range(5))    # rate 2: 3, 4 unproven
    draw = differential.GpuDraw("sampled", 2, odd, ((("map", "rm"), ("results", "bar1")), ()), True)

    def check(text):
        src = tmp_path / text.split()[1] / "learner.alpha"
        src.parent.mkdir(exist_ok=True)
        src.write_text(text)
        lr = compile_file(src).learner
        rep, want = differential.Report(text), differential.expected(lr, [(differential.STEPS, None)])
        differential.check_gpu_owner(rep, lr, src, src.parent, want, draw)
        return rep, want
    rep, want = check(MOMENTUM)
    assert rep.status == "agreed" and sorted(rep.outcomes.values()) == ["exit 0", want], rep.summary()
    real = mockgpu.run
    lie = lambda ptx: ptx.replace("add.rn.f64", "sub.rn.f64", 1)
    monkeypatch.setattr(mockgpu, "run", lambda *a, **k: real(*a, **k, mutate={"update_g0": (lie, 4)}))
    rep, _ = check(MOMENTUM)
    label = "gpu: the single owner on sm_90 (a.gpuhost map rm results bar1, --shadow sampled --shadow-rate 2)"
    assert [p.split(" differs")[0] for p in rep.problems] == [label, label + ", its chain replayed"], rep.summary()
    assert "got  exit 3" in rep.summary(), rep.summary()
    monkeypatch.setattr(mockgpu, "run", real)
    rep, want = check(SCALAR_READS_NORM)
    assert rep.status == "agreed" and want.startswith("w[0] ") and rep.outcomes == {
        label: want, f"{label}, its chain replayed": "exit 0"}, rep.summary()
    rep, want = check(NORM_IN_LOSS)
    assert rep.status == "agreed" and want.startswith("w[0] ") and rep.outcomes == {
        f"{label}, refused": "refused: usage", label: want}, rep.summary()


# an exact_sum learner whose update reduces (a clipped global norm over dot(grad(w2), grad(w2)),
# max and dot of states), where the exact sums differ from the ordered folds: the generator draws
# the two together in about 1 program in 13 (FAST_SEEDS hold 15, FULL_SEEDS none); its
# deployments are ZeRO-1 on 8 owners and a strategy of its own (the terms gathered and summed
# exactly), with x86_64-v4 owners (GPU owners: tests/test_update_reductions.py)
EXACT_REDUCED = 16


def test_fuzz_exact_sum_reductions_on_the_compiled_engines(tmp_path):
    prog = learngen.generate(EXACT_REDUCED)
    assert prog.contract == "exact_sum" and re.search(r"let norm\d+ = sqrt\(.*dot\(grad", learngen.render(prog))
    rep = differential.check_program(prog, tmp_path, ("interp", "plan", "ptx", "x86_64", "aarch64", "roles"),
                                     seed=EXACT_REDUCED)
    assert rep.status == "agreed", rep.summary()
    assert {"ptx", "aarch64", "roles:d0", "roles:d1"} <= set(rep.outcomes), sorted(rep.outcomes)


# wide learners (learngen.generate(wide=True)): seed 0's 1,000-wide loss keeps a vector in
# local memory, run by the mock's PTX interpreter; seed 14, a matrix learner (A @ v, outer)
# whose products run as the batch kernels (issue 41's phases); seed 59, a matrix learner 100 wide over
# PTX_BUDGET: its GPU owners built through ptxas only, their stacks checked against the area
# (seed 44 was that learner until issue 46's labels changed what the seeds draw)
BUILT = 59
WIDE_SEEDS = (0, 14, BUILT)


def test_fuzz_gpu_engine_takes_wide_matrix_and_spilling_learners(tmp_path, monkeypatch):
    from alphac.build import gpu_kernels
    from alphac.driver import compile_file
    from alphac.nvdrv import image
    local, names = {}, {}
    for seed in WIDE_SEEDS:
        prog = learngen.generate(seed, wide=True)
        rep = differential.check_program(prog, tmp_path / str(seed), ("gpu", "gpu-built"), seed=seed)
        assert rep.status == "agreed", rep.summary()
        gpu = sorted(k for k in rep.outcomes if "_gpu" in k or k.startswith("gpu-built"))
        lr = compile_file(tmp_path / str(seed) / "learner.alpha").learner
        built = gpu_kernels(lr, 90)[0]
        local[seed], names[seed] = built[0].image.local, [b.kernel.name for b in built]
        assert gpu and all(k.startswith("gpu-built" if seed == BUILT else "roles:") for k in gpu), gpu
    assert local[0] and local[BUILT], local      # vectors kept in local memory
    assert any(n.startswith(("matvec", "vecmat")) for n in names[14]), names[14]   # the products batched
    assert rep.outcomes["gpu-built: sm_90"].startswith(f"built, local memory: grad_samples {local[BUILT]} B")
    # an area a TPC short of what the kernel's stack needs: the mock's rule refuses it
    monkeypatch.setattr(image, "local_per_tpc", lambda per_thread, topo: 0x8000)
    rep = differential.check_program(learngen.generate(BUILT, wide=True), tmp_path / "short", ("gpu-built",),
                                     seed=BUILT)
    assert rep.status == "disagreed" and "bytes of local memory per TPC" in rep.summary()


def test_generator_is_deterministic_and_covers_the_features():
    assert learngen.render(learngen.generate(7)) == learngen.render(learngen.generate(7))
    text = "".join(learngen.render(learngen.generate(s)) for s in range(120))
    for needle in ["let old", "grad(", "dot(", "sum(", "sqrt(", "^2", "^3", "loss(i)", "x[i, ",
                   "f64[", ", ", "state p", "state ref", "tanh(", "sigmoid(", "relu(", "abs(",
                   "softplus(", "max(", "min(", "exp(", "log1p(", "log(", "expm1(", "sin(", "cos(",
                   "pow("]:
        assert needle in text, needle
    # the matrix operations (issue 16): products on params and data rows, outer reduced,
    # max(v), logsumexp, onehot over labels, chains of layers, 2-D states the loss reads,
    # optimizers with states of their own, and uses the checker must refuse by name
    for needle in [" @ x[i])", "(x[i] @ ", " @ u[i])", "outer(", "logsumexp(", "onehot(lab[i], ",
                   "max((W", "let h", "tanh(((W", "state S", "(1.0 - q", "let old", "data lab"]:
        assert needle in text, needle
    assert re.search(r"\bmax\(\(\w+ @ ", text), "max of a product"
    # indices read from data (issue 47): rows of a param by ids of 2-D and 1-D data, a coordinate
    assert re.search(r"\bE\w*\[tok\w*\[i, \d\]\]", text) and re.search(r"\bE\w*\[tok\w*\[i\]\]", text)
    assert re.search(r"\bw\w*\[tok\w*\[i(, \d)?\]\]", text)
    # integer ids (issue 47): labels and token ids declared i64, written and loaded
    assert re.search(r"data lab: i64\[\d+\] = \[", text) and re.search(r"data tok_e: i64\[[\d, ]+\] = ", text)
    assert re.search(r'data \w+: i64\[[\d, ]+\] = load\("', text)
    assert "f64(lab[i])" in text                            # an i64 label read as a number, converted
    labels = [v for s in range(120) for d in learngen.generate(s).decls if d.name == "lab" for v in d.value]
    assert {-1.0, 1.5} <= set(labels) and any(v >= 3 for v in labels)
    expects = Counter(learngen.generate(s).expect[0] for s in range(400) if learngen.generate(s).expect)
    assert expects["E0030"] and expects["E0041"] and expects["E0050"], expects
    assert learngen.render(learngen.generate(7, matrices=False)).count("@") == 0
    # slices and comprehensions (issue 47): windows of data rows, columns, coordinates of lets
    assert re.search(r"x\[i, \d+:\d+\]", text) and re.search(r"\w\[:, \d+\]", text)
    assert re.search(r"for j in 0\.\.\d+\]", text) and re.search(r"\bt\d+\[\d+\]", text)
    assert "\ncontract exact_sum\n" in text                 # issue 23's contract
    # the library's optimizers with a scheduled rate and a gradient scale (issue 47)
    assert re.search(r"optimizer \w+\(lr = [\d.]+ \* ", text) and "grad_scale = min(1, " in text
    shapes = Counter()
    for s in range(120):
        for d in learngen.generate(s).decls:
            shapes[len(d.shape)] += 1
    assert shapes[0] and shapes[1] and shapes[2]


def test_generator_loads_data_from_npy_files():
    """About a third of the programs load data from .npy files (mostly '<f8', integral data as
    '<i8' or '|u1'), the same bytes for the same seed; the files hold the literal's values, and
    a program without them is the one it was (only its data declarations differ)."""
    import io
    import numpy as np
    loaded, dtypes = 0, Counter()
    for s in range(150):
        p = learngen.generate(s)
        files = learngen.npy_files(p)
        assert files == learngen.npy_files(learngen.generate(s))
        assert learngen.render(p) == learngen.render(learngen.generate(s))
        loaded += bool(files)
        for d in p.decls:
            if d.file:
                assert f'data {d.name}' in learngen.render(p) and f'load("{d.file}")' in learngen.render(p)
                arr = np.load(io.BytesIO(files[d.file]), allow_pickle=False)
                assert arr.dtype.str == d.dtype and arr.flags.c_contiguous and arr.shape == d.shape
                assert arr.astype("<f8").tobytes() == np.array(d.value, dtype="<f8").tobytes()
                dtypes[d.dtype] += 1
        plain = learngen.generate(s, npy=False)
        lines = lambda q: [l for l in learngen.render(q).splitlines() if not l.startswith("data ")]
        assert lines(p) == lines(plain) and (files or learngen.render(p) == learngen.render(plain))
    assert 0.2 * 150 < loaded < 0.45 * 150, loaded
    assert set(dtypes) == {"<f8", "<i8", "|u1"} and dtypes["<f8"] > dtypes["<i8"] + dtypes["|u1"], dtypes


def test_learners_with_loaded_data_agree_on_both_isas(tmp_path, monkeypatch):
    """Generated learners that load '<f8', '<i8' and '|u1' files: compiled from the files beside
    them, the interpreter and both ISAs' executables (3 + checkpoint + 2, AArch64 resumed from
    x86-64) print the contract's bits. The contract's model reads the files itself: a compiler
    reading other values is a `data:` problem."""
    seeds, seen = [], set()
    for s in range(60):
        new = {d.dtype for d in learngen.generate(s).decls if d.file} - seen
        if new:
            seeds.append(s)
            seen |= new
        if len(seen) == 3:
            break
    assert seen == {"<f8", "<i8", "|u1"}, seen
    for s in seeds:
        rep = differential.check_program(learngen.generate(s), tmp_path / str(s),
                                         ("interp", "x86_64", "aarch64"))
        assert rep.status == "agreed", (s, rep.summary() or rep.code)
        assert rep.files and {"x86_64", "aarch64 resumed from x86_64's checkpoint"} <= set(rep.outcomes)
    from alphac import npy
    real = npy.NpyFile.values

    def off_by_one(f):                                  # a reader off by one in the first value
        v = real(f).copy()
        v[0] += 1.0
        return v
    monkeypatch.setattr(npy.NpyFile, "values", off_by_one)
    rep = differential.check_program(learngen.generate(seeds[0]), tmp_path / "off", ("interp",))
    assert rep.status == "disagreed" and any(p.startswith("data: ") for p in rep.problems), rep.summary()


def test_deployments_cover_every_strategy_topology_and_target(tmp_path):
    from alphac.dist.structure import Hierarchy, Star
    from alphac.driver import compile_deployments
    seen = Counter()
    for seed in range(60):
        rep = differential.check_program(learngen.generate(seed), tmp_path / str(seed), (), seed=seed)
        if rep.status == "refused":
            continue
        (tmp_path / str(seed) / "f.alpha").write_text(rep.source)      # beside its .npy files
        for plan in compile_deployments(tmp_path / str(seed) / "f.alpha")[1].values():
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
            lr = plan.lr
            seen["2-D group cut inside a row"] += any(
                len(lr.groups[g].shape) == 2 and any(r.range(k)[0] % lr.groups[g].shape[1]
                                                     for k in range(d.owners)) for g, r in d.placement.items())
    for key in ["replicated", "zero1", "zero2", "zero3", "mine", "star", "hierarchy", "delivered",
                "combine tree", "aarch64", "owner without samples", "owner without coordinates",
                "loss reads partitioned state", "2-D group cut inside a row"]:
        assert seen[key], (key, seen)


# -- the two bugs of issue 13, put back ----------------------------------------------------------
def first_disagreement(seeds, engines, tmp_path, gen=learngen.generate):
    for seed in seeds:
        prog = gen(seed)
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
    seeds = range(40)
    while True:         # the first program the plan executor finds that also runs finite as roles
        seed, prog, rep = first_disagreement(seeds, differential.FAST, tmp_path / str(seeds.start))
        assert seed is not None, "the fuzzer missed a loss that reads partitioned state"
        assert "plan:" in rep.summary()
        # without the plan executor, the role executables' wrong bits are caught by the contract
        roles = differential.check_text(rep.source, tmp_path / f"roles{seed}", ("interp", "roles"), rep.files)
        if roles.outcomes.get("interp", "").startswith("refused: "):
            seeds = range(seed + 1, 40)             # one that diverges (non-finite) even unmutated
            continue
        assert roles.status == "disagreed" and "roles" in reduce.signature(roles), roles.outcomes
        break


def test_reducer_shrinks_a_failure_and_keeps_it(monkeypatch, tmp_path):
    bug1(monkeypatch)
    plain = lambda seed: learngen.generate(seed, matrices=False)     # the reducer's own test:
    seed, prog, rep = first_disagreement(range(40), ("interp", "x86_64"), tmp_path, plain)
    before = len(learngen.render(plain(seed)))                      # a program of the first half
    red = reduce.Reducer(plain(seed), tmp_path / "r")
    assert "x86_64" in red.sig
    small = red.run(budget=60)
    assert len(learngen.render(small)) < before / 2
    assert red.fails(small)
    kept = reduce.keep(small, tmp_path / "kept", f"found-{seed}", "a note")
    assert kept.read_text().startswith("# a note\nlearner ")
    assert differential.check_file(kept, tmp_path / "k", ("interp", "x86_64")).status == "disagreed"


def test_an_owners_empty_slice_in_a_checkpoint_moves_to_another_star(tmp_path):
    """Seed 310018 (a fresh seed, after issue 22): d0's owners write empty-range shards for their
    empty slices; d1's one owner, resuming d0's checkpoint, refused `shard-corrupt` because the
    new range check took an empty range for a hostile one. An empty range holds nothing."""
    rep = differential.check_program(learngen.generate(310018), tmp_path,
                                     ("interp", "roles", "moved"), seed=310018)
    assert rep.status == "agreed", rep.summary()


def test_a_product_in_the_update_is_refused_by_name(tmp_path):
    """tests/regress/update_product_refused.alpha (seed 189): `@` of non-constants in the update
    is E0050, either way round, as the reductions are; a product of constants is a constant."""
    rep = differential.check_program(learngen.generate(189), tmp_path / "189", differential.FAST, seed=189)
    assert rep.status == "refused" and rep.code == "E0050", rep.summary()
    head = ("learner t\ndata x = [[1.0, 2.0], [0.5, -1.0]]\ndata y = [1.0, 2.0]\n"
            "const C = [[1.0, 0.5], [0.25, 1.0]]\nconst c = [1.0, 2.0]\nparam v: f64[2] = 0.2\n"
            "loss(i) = (dot(v, x[i]) - y[i])^2\n")
    for k, (e, code) in enumerate([("grad(v) @ C", "E0050"), ("C @ grad(v)", "E0050"),
                                   ("C @ v", "E0050"), ("C @ c", "")]):
        rep = differential.check_text(head + f"update {{\n  v = v - 0.1 * ({e})\n}}\n", tmp_path / str(k),
                                      differential.FAST)
        assert rep.status == ("refused" if code else "agreed") and rep.code == code, (e, rep.summary())
