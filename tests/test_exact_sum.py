"""`contract exact_sum` (docs/language.md): every sum the split or the tree could reorder is exact,
rounded once, so every owner count, topology, strategy and ISA prints the single process's bits,
and a checkpoint resumes on any layout as the uninterrupted run.

The oracle is the tests' own (tests/oracle.py, `exact=True`): the reference learners' gradients
written by hand, each coordinate's sum over samples a `fractions.Fraction`, rounded once. Stars
and hierarchies of 1 to 16 owners with uneven, seeded splits are generated here."""
import math
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import oracle
from backend import build_deployment, run_exe
from conftest import EXAMPLES, alphac, exact_sum_variant, require_tool

LEARNERS = ("lsq_adam", "lsq_momentum", "two_coordinate", "scalar_regression")
NSAMPLES = {"lsq_adam": 8, "lsq_momentum": 8, "two_coordinate": 5, "scalar_regression": 6}


def exact_source(name: str, extra: str = "") -> str:
    text = (EXAMPLES / f"{name}.alpha").read_text()
    return exact_sum_variant(text) + extra


def split_text(rng, n: int, owners: int) -> str:
    """An uneven split of n samples over the owners (some may hold none)."""
    cuts = sorted(rng.randint(0, n) for _ in range(owners - 1))
    bounds = [0] + cuts + [n]
    return ", ".join(f"owner[{k}] = {bounds[k]}..{bounds[k + 1]}" for k in range(owners))


def generated(name: str, seed: int = 23) -> str:
    """Stars of 1..16 owners and hierarchies of fan-out 2..4, uneven splits, some partitioned."""
    rng, n, out = random.Random(seed), NSAMPLES[name], []
    for owners in range(1, 17):
        out.append(f"deployment x_star{owners} {{\n  roles coordinator, owner[{owners}]\n"
                   f"  topology star(coordinator)\n  samples {split_text(rng, n, owners)}\n}}\n")
        if owners >= 2:
            out.append(f"deployment x_tree{owners} {{\n  roles owner[{owners}]\n"
                       f"  topology hierarchy(fanout {rng.randint(2, 4)})\n"
                       f"  samples {split_text(rng, n, owners)}\n}}\n")
    return "\n" + "\n".join(out)


def write(tmp_path: Path, name: str, extra: str = "") -> Path:
    src = tmp_path / f"{name}_exact.alpha"
    src.write_text(exact_source(name, extra))
    return src


def launch(dep_dir: Path, tmp_path: Path, **kw) -> dict:
    from alphac.tools.launch import launch as run
    rec = run(dep_dir, records=tmp_path / "runs", **kw)
    assert rec["passed"], rec["roles"]
    return rec


@pytest.mark.parametrize("name", LEARNERS)
def test_every_plan_prints_the_oracle_bits(name, tmp_path):
    """The interpreter and every deployment's plan (the examples' and 31 generated ones) equal
    the Fraction oracle, and the ordered contract does not (so the test can fail)."""
    from alphac.dist.execute import run_plan
    from alphac.driver import compile_deployments
    from alphac.ir import interp
    want = oracle.run(name, steps=5, exact=True)
    if name.startswith("lsq"):                # there the ordered sums round otherwise
        assert want != oracle.run(name, steps=5)
    compiled, plans = compile_deployments(write(tmp_path, name, generated(name)))
    lr = compiled.learner
    assert lr.exact and interp.format_state(lr, interp.run(lr, 5)) == want
    assert len(plans) >= 31
    for dep, plan in sorted(plans.items()):
        assert interp.format_state(lr, run_plan(lr, plan, 5)) == want, dep


def test_executables_and_roles_print_the_oracle_bits(tmp_path):
    """Both ISAs' single-process executables, the example stars (replicated, ZeRO-3, mixed
    x86-64 and AArch64), the example hierarchy and a generated 16-owner hierarchy, launched."""
    require_tool("qemu-aarch64")
    want = oracle.run("lsq_adam", steps=5, exact=True)
    src = write(tmp_path, "lsq_adam", generated("lsq_adam"))
    for target in ("x86_64", "aarch64"):
        exe = tmp_path / f"single-{target}"
        alphac("build", src, "--target", target, "-o", exe)
        cmd = ([shutil.which("qemu-aarch64")] if target == "aarch64" else []) + [str(exe), "--steps", "5"]
        assert subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout == want
    for dep in ("lsq_adam_star", "lsq_adam_star_zero3", "lsq_adam_mixed", "lsq_adam_tree", "x_tree16"):
        rec = launch(build_deployment(src, dep, tmp_path / "roles"), tmp_path, steps=5)
        assert rec["published"] == want, dep
        losses = [(e["sum"], e["n"]) for e in rec["loss"]]
        if dep == "lsq_adam_star":
            first = losses
        assert losses == first, dep           # the loss sums too: the same on every layout


def test_resume_on_any_layout(tmp_path):
    """3 steps on one layout, checkpointed, then 2 on another: always the uninterrupted run's
    bits. Star of 4 -> star of 3, one process, a hierarchy, ZeRO-3; ZeRO-3 -> the replicated
    star and one process; one process -> a hierarchy of 16; a hierarchy (a manifest tree) ->
    the star, ZeRO-3, a hierarchy of 16 and one process."""
    want = oracle.run("lsq_adam", steps=5, exact=True)
    assert want == oracle.run("lsq_adam", steps=5, exact=True)
    src = write(tmp_path, "lsq_adam", generated("lsq_adam"))
    built = {d: build_deployment(src, d, tmp_path / "roles") for d in
             ("lsq_adam_star", "x_star3", "lsq_adam_tree", "lsq_adam_star_zero3", "x_tree16")}
    single = tmp_path / "single"
    alphac("build", src, "-o", single)

    def run_single(*args) -> str:
        r = subprocess.run([str(single), *map(str, args)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    ck = {}
    for dep in ("lsq_adam_star", "lsq_adam_star_zero3", "lsq_adam_tree"):
        ck[dep] = tmp_path / f"ck-{dep}"
        assert launch(built[dep], tmp_path, steps=3, checkpoint=ck[dep])["published"] == \
            oracle.run("lsq_adam", steps=3, exact=True)
    ck["single"] = tmp_path / "ck-single"
    run_single("--steps", 3, "--checkpoint", ck["single"])
    for start, dep in (("lsq_adam_star", "x_star3"), ("lsq_adam_star", "lsq_adam_tree"),
                       ("lsq_adam_star", "lsq_adam_star_zero3"), ("lsq_adam_star_zero3", "lsq_adam_star"),
                       ("single", "x_tree16"), ("lsq_adam_tree", "lsq_adam_star"),
                       ("lsq_adam_tree", "lsq_adam_star_zero3"), ("lsq_adam_tree", "x_tree16")):
        assert launch(built[dep], tmp_path, steps=2, resume=ck[start])["published"] == want, (start, dep)
    assert run_single("--steps", 2, "--resume", ck["lsq_adam_star"]) == want
    assert run_single("--steps", 2, "--resume", ck["lsq_adam_star_zero3"]) == want
    assert run_single("--steps", 2, "--resume", ck["lsq_adam_tree"]) == want
    # the whole tree is read, so a changed sub-manifest anywhere in it is refused, nothing written
    sub = sorted(p for p in ck["lsq_adam_tree"].rglob("MANIFEST") if p.parent != ck["lsq_adam_tree"])[-1]
    raw = bytearray(sub.read_bytes())
    raw[200] ^= 1
    sub.write_bytes(bytes(raw))
    r = subprocess.run([str(single), "--steps", "1", "--resume", str(ck["lsq_adam_tree"]),
                        "--checkpoint", str(tmp_path / "after")], capture_output=True, text=True)
    assert (r.stdout, r.stderr) == ("", "refused: manifest-torn\n") and not (tmp_path / "after").exists()


def test_identity_carries_the_contract_not_the_tree(tmp_path):
    """Under exact_sum the combine component is the same for every tree; the contract is in
    the learner digest, so an ordered checkpoint is another learner's."""
    from alphac.dist.identity import digests
    from alphac.driver import compile_deployments
    _, plans = compile_deployments(write(tmp_path, "lsq_adam", generated("lsq_adam")))
    d = {name: digests(p.dep) for name, p in plans.items()}
    assert d["lsq_adam_star"]["combine"] == d["x_tree9"]["combine"] == d["x_star4"]["combine"]
    assert d["lsq_adam_star"]["plan"] != d["x_star4"]["plan"]
    _, ordered = compile_deployments(EXAMPLES / "lsq_adam.alpha")
    o = digests(ordered["lsq_adam_star"].dep)
    assert o["contract"] != d["lsq_adam_star"]["contract"] and o["learner"] != d["lsq_adam_star"]["learner"]
    assert o["combine"] != d["lsq_adam_star"]["combine"]
    exe, plain = tmp_path / "exact", tmp_path / "ordered"
    alphac("build", write(tmp_path, "lsq_adam"), "-o", exe)
    alphac("build", EXAMPLES / "lsq_adam.alpha", "-o", plain)
    subprocess.run([str(plain), "--steps", "1", "--checkpoint", tmp_path / "ck"], check=True,
                   capture_output=True)
    r = subprocess.run([str(exe), "--steps", "1", "--resume", tmp_path / "ck"], capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout == "" and "refused: checkpoint-other-learner" in r.stderr


def test_a_second_or_unknown_contract_is_refused(tmp_path):
    src = tmp_path / "two.alpha"
    src.write_text(exact_source("scalar_regression").replace("contract exact_sum",
                                                             "contract exact_sum\ncontract ordered"))
    code, _, err = alphac("check", src)
    assert code != 0 and "E0063" in err and "declared twice" in err


def fsum_step(lr, state):
    """One full-batch step of a learner under exact_sum, summed here: each coordinate's terms
    (the interpreter's per-sample gradients) by math.fsum, exact and rounded once; -0.0 when
    every term is -0.0."""
    import math

    import numpy as np

    from alphac.ir import interp
    from alphac.ir.batch import gradient_rows
    rows = np.concatenate(list(gradient_rows(lr, state, range(lr.nsamples))))
    negzero = (rows.view(np.uint64) == np.uint64(1 << 63)).all(axis=0)
    flat = [-0.0 if z else math.fsum(col) + 0.0 for z, col in zip(negzero, rows.T.tolist())]
    g, base = {}, 0
    for p in lr.params:
        g[p.name] = tuple(v / float(lr.nsamples) for v in flat[base:base + p.size])
        base += p.size
    return interp.apply_update(lr, state, g)


def test_the_digits_mlp_on_any_layout(tmp_path):
    """The 64-32-10 MLP on 1500 images under exact_sum: the interpreter, the x86-64 executable
    and the launched star (unequal shares) print the bits of an fsum oracle after 2 steps; 1
    step on the star, checkpointed, + 1 step in one process gives them too. (The plan executor
    takes 2.5 s a step here: the small learners' tests run it on every layout.)"""
    from alphac.driver import compile_deployments
    from alphac.ir import interp
    (tmp_path / "data").mkdir()
    for f in (EXAMPLES / "data").glob("digits_*.npy"):
        shutil.copyfile(f, tmp_path / "data" / f.name)
    src = tmp_path / "digits_exact.alpha"
    src.write_text(exact_source("digits_mlp"))
    lr = compile_deployments(src)[0].learner
    state = interp.initial_state(lr)
    for _ in range(2):
        state = fsum_step(lr, state)
    want = interp.format_state(lr, state)
    assert interp.format_state(lr, interp.run(lr, 2)) == want
    exe = tmp_path / "digits"
    alphac("build", src, "-o", exe)
    r = subprocess.run([str(exe), "--steps", "2"], capture_output=True, text=True, timeout=60)
    assert r.stdout == want, r.stderr
    star = build_deployment(src, "digits_star", tmp_path / "roles")
    assert launch(star, tmp_path, steps=2)["published"] == want
    launch(star, tmp_path, steps=1, checkpoint=tmp_path / "ck")
    r = subprocess.run([str(exe), "--steps", "1", "--resume", tmp_path / "ck"], capture_output=True,
                       text=True, timeout=60)
    assert r.stdout == want, r.stderr


def hostile_cases(P: int, rng) -> dict[str, tuple[list[int], list[list[int]], str]]:
    """Owner 0's combine frames (formats.XF_*): the first frame's words (the sums' expansions,
    n, the record count, the spill count) and the later frames' words, each with the refusal the
    center must give (peer-lost: well formed, it waits for the others, which leave; None: any
    of those refusals, by name)."""
    from alphac.formats import XC_MAX_BASE, XC_RECORD_WORDS, XF_RECORD_WORDS, XF_TAIL
    assert XF_TAIL == 3

    def head(recs=0, spills=0):
        return [1 << 63] * (2 * P) + [1, recs, spills]          # -0.0 expansions, n = 1

    def rec(j, header, *digits):
        return [j, header, *digits] + [0] * (XF_RECORD_WORDS - 2 - len(digits))
    win = 8 | (3 << 8)                                    # a window at base 2
    bad = "frame-bad-accumulator"
    cases = {
        "good": (head(), [], "peer-lost"),
        "a good record": (head(1), [rec(P - 1, win, 5)], "peer-lost"),
        "records past the sums": (head(P + 1), [], bad),
        "a negative record count": (head(2**64 - 1), [], bad),
        "spills past the records": (head(0, 1), [], bad),
        "an index out of range": (head(1), [rec(P, win, 5)], bad),
        "a negative index": (head(1), [rec(2**64 - 1, win, 5)], bad),
        "indices not increasing": (head(2), [rec(1, win, 5) + rec(1, win, 5)], bad),
        "an empty record": (head(1), [rec(0, 0)], bad),
        "an undefined bit": (head(1), [rec(0, 1 << 20)], bad),
        "a base out of range": (head(1), [rec(0, 8 | ((XC_MAX_BASE + 2) << 8))], bad),
        "a truncated record": (head(2), [rec(0, win, 5)], "frame-truncated"),
        "a spill record for a windowed sum": (head(1, 1), [rec(0, win, 5), [0] * XC_RECORD_WORDS], bad),
    }
    for i in range(4):                                     # random counts and records
        recs = rng.choice([rng.randint(0, 2 * P), rng.getrandbits(64)])
        words = [rng.choice([rng.getrandbits(64), rng.randint(0, P)])
                 for _ in range(XF_RECORD_WORDS * min(recs, 3))]
        cases[f"random {i}"] = (head(recs, rng.randint(0, 3)), [words] if words else [], None)
    return cases


def test_a_hostile_combine_frame_is_refused_by_name(tmp_path):
    """The center of an exact star, its four owners played here: owner 0's combine frames with a
    count past the payload or the sums, a record's index out of range or out of order, a
    malformed or empty record header, a truncated record, a spill record for a sum not marked
    spilled are each refused by name before any other use; well-formed frames pass (the center
    then waits for the others, and sees them leave: peer-lost); random counts and records give
    one of those refusals, never a crash."""
    import socket
    import struct
    import time

    import frames
    from alphac.build import build_role
    from alphac.dist.identity import digests
    from alphac.dist.structure import Role
    from alphac.driver import compile_deployments
    from alphac.lower.role import code_of
    from alphac.refusals import REFUSALS
    plan = compile_deployments(write(tmp_path, "lsq_adam"))[1]["lsq_adam_star"]
    exe = tmp_path / "coordinator"
    exe.write_bytes(build_role(plan, Role("coordinator"), "x86_64").elf)
    exe.chmod(0o755)
    ident, P = digests(plan.dep), 6                       # w's 5 sums and the loss sum
    names = {REFUSALS[n][0]: n for n in ("peer-lost", "frame-bad-accumulator", "frame-truncated")}
    for case, (first, later, name) in hostile_cases(P, random.Random(43)).items():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.Popen([str(exe), "--steps", "1", "--deadline-ms", "2000", "--listen",
                              f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        conns = []
        try:
            for k in range(4):
                t0 = time.monotonic()
                while True:
                    try:
                        conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                        break
                    except OSError:
                        assert time.monotonic() - t0 < 5
                        time.sleep(0.02)
                code = code_of(plan, Role("owner", k))
                frames.connect(conns[k], code, code_of(plan, Role("coordinator")), ident, 1)
            me = code_of(plan, Role("owner", 0))
            data = b"".join(frames.encode(2, me, struct.pack(f"<{len(w)}Q", *w), ident)
                            for w in [first] + later)
            conns[0].sendall(data)
            if name == "peer-lost" or name is None:        # (a random one may wait for more)
                for c in conns[1 if name else 0:]:
                    c.close()
            out, err = p.communicate(timeout=10)
        finally:
            for c in conns:
                c.close()
            if p.poll() is None:
                p.kill()
        if name is None:                                   # any of the refusals, by name
            assert p.returncode in names and (out, err) == ("", f"refused: {names[p.returncode]}\n"), case
        else:
            assert (p.returncode, out, err) == (REFUSALS[name][0], "", f"refused: {name}\n"), case


SPREAD = """learner spread
contract exact_sum
data x = [1e200, 1e-200, -1e200, 3.0, 1e-300, 2.5]
param w: f64 = 0.0
loss(i) = w * x[i]
update {
  w = w - 0.1 * grad(w)
}
deployment s3 {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..4, owner[2] = 4..6
}
deployment t3 {
  roles owner[3]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..2, owner[1] = 2..4, owner[2] = 4..6
}
"""


def exact_oracle(src: Path, steps: int, rows: int):
    """(learner, state) of src after `steps` steps over its first `rows` samples, each step's
    sums exact by Python's fractions (tests/differential.py), never by xsum."""
    import differential
    from alphac.driver import compile_deployments
    from alphac.ir import interp
    lr = compile_deployments(src)[0].learner
    state = interp.initial_state(lr)
    for _ in range(steps):
        state = interp.apply_update(lr, state, interp.mean_gradient(
            differential.exact_contribution(lr, state, range(rows))))
    return lr, state


def test_sums_that_spill_travel_and_clear_between_steps(tmp_path):
    """Every owner's sum spans 400 decimal orders of magnitude (1e200 and 1e-200 are 41 digits
    apart, a window holds 5), so every accumulator spills and
    its digits travel in the second combine frame, through the star's center and up the
    hierarchy's aggregators, step after step: the bits are the Fraction oracle's (5.5 + 1e-200
    + 1e-300 rounds to 5.5; an ordered fold loses the 3.0 or the 2.5 to 1e200)."""
    from alphac.driver import compile_deployments
    from alphac.ir import interp
    src = tmp_path / "spread.alpha"
    src.write_text(SPREAD)
    lr, state = exact_oracle(src, 4, 6)
    want = interp.format_state(lr, state)
    ordered = tmp_path / "ordered.alpha"
    ordered.write_text(SPREAD.replace("contract exact_sum\n", ""))
    from alphac.dist.execute import run_plan
    compiled, plans = compile_deployments(ordered)             # ordered, the star's owner 1
    plain = compiled.learner                                   # loses its 3.0 to -1e200
    assert interp.format_state(plain, run_plan(plain, plans["s3"], 4)) != want
    assert interp.format_state(lr, interp.run(lr, 4)) == want
    exe = tmp_path / "spread"
    alphac("build", src, "-o", exe)
    assert subprocess.run([str(exe), "--steps", "4"], capture_output=True, text=True).stdout == want
    for dep in ("s3", "t3"):
        rec = launch(build_deployment(src, dep, tmp_path / "roles"), tmp_path, steps=4)
        assert rec["published"] == want, dep


def adversarial_columns() -> list[list[float]]:
    """13 samples' terms for each coordinate of `blocks` (its gradient is the data itself):
    learner_grad takes them in blocks of 4 (8 with f64x8) and a rest one by one, each block's
    terms of a coordinate added in one visit of its accumulator (xc_add_lanes)."""
    big, tiny, sub, mx = 2.0 ** 70, 2.0 ** -80, 5e-324, 1.7976931348623157e308
    cols = [
        [big, 3.0, 1.0, 2.0, -big, 0.25, 2.0 ** -30, -3.0, 1.0, 1.0, -1.0, -2.0, 0.5],  # cancels across blocks
        [1e300, 1e-300, -1e300, 2.5] + [0.0] * 8 + [1e-300],                          # 1e300 and 1e-300: spills
        [sub, sub, -1e-310, 3 * sub, 1e-310] + [sub] * 8,                              # subnormals, a subnormal sum
        [mx, mx, -mx, 0.0] + [0.0] * 9,                                                # overflows a binary64 fold
        [1.0, 2.0 ** -53] + [0.0] * 10 + [tiny],                                       # a tie broken by the last term
        [1.0, 2.0 ** -53] + [0.0] * 11,                                                # an exact tie: to even
        [-0.0] * 13,                                                                   # -0.0 only from -0.0s
        [-0.0] * 12 + [0.0],
        [1.5, -1.5] * 6 + [-0.0],                                                      # an exact zero: +0.0
        [-big, 2.0 ** 20, big, -(2.0 ** 20)] * 3 + [2.0 ** -1000],                   # re-based windows
        [(-1.0) ** k * (k + 1) * 2.0 ** (9 * k) for k in range(13)],                   # growing, alternating
        [-(2.0 ** 100), 2.0 ** 100, -3 * 2.0 ** 142] + [0.0] * 10,                     # negative, top digit only
        [1.0, 2.0 ** -53, sub] + [0.0] * 10,          # an expansion's lo + 2^-1074 inexact: breaks the tie
        [-1.0, -(2.0 ** -53), -sub] + [0.0] * 10,     # the same, negative (a pair of expansions)
        # across OWNERS' samples 0..4, 4..8, 8..13, each owner's expansion exact: the combine's
        [1.0, 2.0 ** -53, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0 ** -53] + [0.0] * 4,   # a child's lo counts
        [big, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -big] + [0.0] * 4,         # cancels across owners
        [mx, 0.0, 0.0, 0.0, mx, 0.0, 0.0, 0.0, -mx] + [0.0] * 4,           # MAX + MAX - MAX
        [-0.0] * 8 + [0.0] + [-0.0] * 4,                                     # +0.0 from one owner
        # the last, odd coordinate: xe_add_lanes' one-lane path (the loss sum's)
        [1.0, 0.0, 0.0, 0.0, 2.0 ** -53, 0.0, 0.0, 0.0, sub] + [0.0] * 4,   # inexact at the parent
    ]
    assert len(cols) % 2 == 1
    return cols


OWNERS = """
deployment blocks_star {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..4, owner[1] = 4..8, owner[2] = 8..13
}
deployment blocks_tree {
  roles owner[5]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..4, owner[1] = 4..8, owner[2] = 8..10, owner[3] = 10..13, owner[4] = 13..13
}
"""


def blocks_learner(tmp_path: Path, extra: str = "") -> tuple[Path, str]:
    """The learner whose gradient columns are adversarial_columns(), and the oracle's 2 steps."""
    import numpy as np

    from alphac.ir import interp
    cols = adversarial_columns()
    np.save(tmp_path / "x.npy", np.array(cols).T.copy())
    src = tmp_path / "blocks.alpha"
    src.write_text(f"learner blocks\ncontract exact_sum\ndata x = load(\"x.npy\")\n"
                   f"param w: f64[{len(cols)}] = -0.0\nloss(i) = dot(w, x[i])\n"
                   "update {\n  w = grad(w) + 0.5 * w\n}\n" + extra)     # a zero sum's sign shows
    lr, state = exact_oracle(src, 2, 13)
    assert [math.copysign(1.0, v) for v in state["w"][6:8]] == [-1.0, 1.0]
    return src, interp.format_state(lr, state)


# xsum.rt's expansions (xe_add_lanes) broken: each must change some column's bits
EXPANSION_MUTANTS = {
    "the 2Sum error not kept": ("            lo = u;\n", ""),
    "the exactness check dropped": ("            bad = bad + f * f;\n", ""),
    "the check's scale one binade short (2^536)": ("0x6570000000000000", "0x6170000000000000"),
    "the fallback's lanes swapped": ("x + 8 + 8 * j, 1, lanes, stride)", "x + 8 * j, 1, lanes, stride)"),
    "the accumulators taken for empty (xe_dirty ignored)": ("let clean = load64(xe_dirty) == 0;",
                                                              "let clean = 1;"),
    "the one-lane path's check dropped": ("            bad1 = bad1 + f1 * f1;\n", ""),
    "the one-lane path's error not kept": ("            lo1 = u1;\n", ""),
}


LOSS_SUM_LINE = "step 1 loss 34359738368.000015\n"    # (2^37 + 2^-14) / 4, 6 decimals


def loss_sum_learner(tmp_path: Path) -> Path:
    """A learner whose printed mean loss shows its loss sum's lo (xe_add_lanes' one-lane path, a
    block of 4 terms): 2^37, then 2^-16 three times, each a tie s keeps (2^37), lo gathering
    3 * 2^-16; the exact sum rounds to 2^37 + 2^-14, s alone to 2^37 (LOSS_SUM_LINE's last digits)."""
    import numpy as np
    np.save(tmp_path / "y.npy", np.array([2.0 ** 37] + [2.0 ** -16] * 3))
    src = tmp_path / "losses.alpha"
    src.write_text('learner losses\ncontract exact_sum\ndata y = load("y.npy")\nparam w: f64 = 0.0\n'
                   "loss(i) = y[i] + w\nupdate {\n  w = w - 0.5 * grad(w)\n}\n")
    return src


def mutant_prints(tmp_path: Path, losses: bool = True) -> tuple:
    """What the blocks learner prints after 2 steps and (`losses`) the loss learner's loss line
    after 1, built (with whatever is patched) into baseline x86-64 executables: 4 lanes a block."""
    src, exe, lexe = blocks_learner(tmp_path)[0], tmp_path / "blocks-mutant", tmp_path / "losses"
    assert alphac("build", src, "-o", exe)[0] == 0
    r = run_exe(exe, "--steps", 2, target="x86_64")
    if not losses:
        return r.returncode, r.stdout
    assert alphac("build", loss_sum_learner(tmp_path), "-o", lexe)[0] == 0
    q = run_exe(lexe, "--steps", 1, "--loss-every", 1, target="x86_64")
    return r.returncode, r.stdout, q.returncode, q.stderr


@pytest.mark.parametrize("mutant", sorted(EXPANSION_MUTANTS))
def test_broken_expansions_are_caught(mutant, tmp_path, monkeypatch):
    """Each mutant of the expansions (xsum.rt: what xe_add_listed, the loss sum and the combines
    run) prints other bits than the oracle's on the adversarial columns, or another loss sum, or
    is refused; unmutated, both print the oracle's."""
    import alphac.build as build_module
    from alphac.runtime import source
    old, new = EXPANSION_MUTANTS[mutant]
    text = source("xsum")
    assert text.count(old) == 1, mutant
    want = (0, blocks_learner(tmp_path)[1], 0, LOSS_SUM_LINE)
    if mutant == sorted(EXPANSION_MUTANTS)[0]:
        assert mutant_prints(tmp_path) == want
    monkeypatch.setattr(build_module, "source",
                        lambda name: text.replace(old, new) if name == "xsum" else source(name))
    assert mutant_prints(tmp_path) != want, mutant      # other bits, or a refusal


# learner_grad's fused expansions (lower/learner.py, fused_expansion) broken: patterns of the
# generated code, each must change some column's bits
FUSED_MUTANTS = {
    "the vector check dropped": (r"if \(f2bits\(lane\(q\d+, 0\)\) \| f2bits\(lane\(q\d+, 1\)\)\) == 0 \{",
                                 "if 0 == 0 {"),
    "the vector check's lane 1 dropped": (r"if \(f2bits\(lane\((q\d+), 0\)\) \| f2bits\(lane\(q\d+, 1\)\)\) == 0 \{",
                                          r"if f2bits(lane(\1, 0)) == 0 {"),
    "the one-coordinate check dropped": (r"if f2bits\(bad\d+\) == 0 \{", "if 0 == 0 {"),
    "only the last term's error checked": (r"let (bad\d+) = qor\(bad\d+, (f\d+)\);", r"let \1 = \2;"),
    "the 2Sum error not kept": (r"storev\((el\d+|gl\d+) \+ 8 \* \((\w+)\), u\d+\);",
                                r"storev(\1 + 8 * (\2), splat(bits2f(0x8000000000000000)));"),
    "the first block's lo from +0.0": (r"let (nz\d+) = bits2f\(0x8000000000000000\);", r"let \1 = bits2f(0);"),
    "an inexact vector recorded as one coordinate": (r"(16 \* \(\w+\)) \+ 2\);", r"\1 + 0);"),
}


@pytest.mark.parametrize("mutant", sorted(FUSED_MUTANTS))
def test_broken_fused_expansions_are_caught(mutant, tmp_path, monkeypatch):
    """Each mutant of the code learner_grad runs under exact_sum (its terms into the expansions in
    registers, the vector check, the first block's start, the record of an inexact vector)
    prints other bits than the oracle's on the adversarial columns, or is refused."""
    import re as _re

    import numpy as np

    import alphac.build as build_module
    from alphac.driver import compile_file
    from alphac.ir import interp
    real = build_module.learner_source
    pattern, repl = FUSED_MUTANTS[mutant]
    hits = []

    def mutated(*args, **kw):
        text, blobs = real(*args, **kw)
        text, n = _re.subn(pattern, repl, text)
        hits.append(n)
        return text, blobs
    signs = tmp_path / "signs"         # no fallback (xe_sum_pairs): a -0.0 sum's sign shows
    signs.mkdir()
    np.save(signs / "x.npy", np.array([[-0.0] + [0.5] * 10] * 8))     # 11: pairs and one
    (signs / "signs.alpha").write_text(
        'learner signs\ncontract exact_sum\ndata x = load("x.npy")\nparam w: f64[11] = -0.0\n'
        "loss(i) = dot(w, x[i])\nupdate {\n  w = grad(w) + 0.5 * w\n}\n")
    lr = compile_file(signs / "signs.alpha").learner
    want = (0, blocks_learner(tmp_path)[1], 0, interp.format_state(lr, interp.run(lr, 2)))
    assert want[3].startswith("w[0] 8000000000000000\n")
    monkeypatch.setattr(build_module, "learner_source", mutated)
    assert alphac("build", signs / "signs.alpha", "-o", signs / "exe")[0] == 0
    r = run_exe(signs / "exe", "--steps", 2, target="x86_64")
    assert mutant_prints(tmp_path, losses=False) + (r.returncode, r.stdout) != want, mutant
    assert hits[0] > 0 and hits[1] > 0, mutant


def test_blocked_exact_sums_take_adversarial_terms(tmp_path):
    """The blocked path of learner_grad under exact_sum (a block's terms computed by the vector
    loops, then xc_add_lanes; the rest of the samples one by one) on terms built to break a fast
    path: cancellation across blocks, 1e300 with 1e-300, subnormals, a sum a binary64 fold would
    overflow, ties, zero signs, windows that re-base. Every target prints the Fraction oracle's
    bits after 2 steps (f64x2, f64x4, f64x8 blocks and AArch64), -0.0 and +0.0 apart."""
    from alphac.driver import compile_file
    from alphac.ir import interp
    from alphac.targets import host_runs
    src, want = blocks_learner(tmp_path)
    lr = compile_file(src).learner
    assert interp.format_state(lr, interp.run(lr, 2)) == want
    for target in ("x86_64", "x86_64-v3", "x86_64-v4", "aarch64"):
        if target.startswith("x86_64-") and not host_runs(target):
            continue
        exe = tmp_path / f"blocks-{target}"
        alphac("build", src, "--target", target, "-o", exe)
        r = run_exe(exe, "--steps", 2, target="aarch64" if target == "aarch64" else "x86_64")
        assert (r.stdout, r.stderr) == (want, ""), target


def role_mutant(old: str, new: str, unchecked: bool = False):
    """role_source with `old` replaced by `new` in the combining roles' lines that hold it (at
    least one) that call xe_add_lanes; `unchecked`: their
    xe_add_lanes a copy without the exactness check (an inexact combine taken for exact)."""
    import re as _re

    from alphac.lower import role as role_module
    from alphac.runtime import source
    real = role_module.role_source
    fn = _re.search(r"fn xe_add_lanes\(.*?\n}\n", source("xsum"), _re.S).group(0)
    copy = fn.replace("fn xe_add_lanes(", "fn xe_add_unchecked(").replace("bad = bad + f * f;", "")
    copy = copy.replace("bad1 = bad1 + f1 * f1;", "")

    def mutated(plan, role, gpu=None):
        text, blobs = real(plan, role, gpu)
        if "xe_add_lanes(xcomb" in text:
            lines = text.split("\n")
            hit = [i for i, ln in enumerate(lines) if old in ln and "xe_add_lanes(xcomb" in ln]
            assert hit
            for i in hit:
                lines[i] = lines[i].replace(old, new)
            text = "\n".join(lines)
            if unchecked:
                text = text.replace("xe_add_lanes(xcomb", "xe_add_unchecked(xcomb") + "\n" + copy
        return text, blobs
    return mutated


COMBINE_MUTANTS = {
    "the parent drops a child's lo": (", 2);", ", 1);", False),
    "the parent takes an inexact combine for exact": ("xe_add_lanes(xcomb", "xe_add_lanes(xcomb", True),
}


def test_adversarial_sums_across_owners(tmp_path, monkeypatch):
    """The adversarial columns over a 3-owner star and a 5-owner hierarchy (its aggregators pass
    their children's expansions and records up): the launched roles publish the Fraction
    oracle's bits, each owner's expansion exact and the parents' combines not, cancellation,
    MAX + MAX - MAX and a +0.0 across owners; each mutant of the parent's combine, on the star,
    publishes other bits (or fails)."""
    from alphac.lower import role as role_module
    src, want = blocks_learner(tmp_path, OWNERS)
    for dep in ("blocks_star", "blocks_tree"):
        rec = launch(build_deployment(src, dep, tmp_path / "roles"), tmp_path, steps=2)
        assert rec["published"] == want, dep
    from alphac.tools.launch import launch as run
    for name, (old, new, unchecked) in sorted(COMBINE_MUTANTS.items()):
        with monkeypatch.context() as m:
            m.setattr(role_module, "role_source", role_mutant(old, new, unchecked))
            out = build_deployment(src, "blocks_star", tmp_path / name.replace(" ", "_"))
            rec = run(out, records=tmp_path / "runs", steps=2)
        assert not rec["passed"] or rec["published"] != want, name


def test_an_owners_frame_is_its_expansions_alone(tmp_path):
    """Owner 1 of the lsq_adam star (samples 1..3), its coordinator played here: its combine frame
    is the sums' expansions, n and two zero counts (formats.XF_*: 16 bytes a sum, no record, no
    second frame), and each sum's s + lo is exactly the Fraction sum of its samples' terms (the
    loss sum's too), from the interpreter's per-sample gradients and losses."""
    import socket
    import struct
    from fractions import Fraction

    import frames
    from alphac.dist.identity import digests
    from alphac.dist.structure import Role
    from alphac.driver import compile_deployments
    from alphac.formats import XF_TAIL
    from alphac.ir import interp
    from alphac.lower.role import code_of
    src = write(tmp_path, "lsq_adam")
    compiled, plans = compile_deployments(src)
    lr, plan = compiled.learner, plans["lsq_adam_star"]
    roles = build_deployment(src, "lsq_adam_star", tmp_path / "roles")
    P, ident = sum(p.size for p in lr.params) + 1, digests(plan.dep)
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        p = subprocess.Popen([str(roles / "owner.1"), "--steps", "1", "--deadline-ms", "2000", "--parent",
                              f"127.0.0.1:{srv.getsockname()[1]}"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            srv.settimeout(5)
            conn, _ = srv.accept()
            who, answer, _ = frames.accept(conn, code_of(plan, Role("coordinator")), ident, 1)
            conn.sendall(answer)
            h = frames.decode_header(frames.recv_exact(conn, frames.HEADER))
            payload = frames.recv_exact(conn, h["length"])
            conn.close()
        finally:
            p.kill()
            p.wait()
    assert (h["kind"], h["length"]) == (2, 8 * (2 * P + XF_TAIL))
    words = struct.unpack(f"<{2 * P}d3q", payload)
    assert words[2 * P:] == (2, 0, 0)                     # n = 2 samples, no record, no spill
    from alphac.ir.batch import loss_rows
    state = interp.initial_state(lr)
    terms = [interp.per_sample_gradient(lr, state, i) for i in range(1, 3)]
    want = [sum(Fraction(t[p_.name][j]) for t in terms) for p_ in lr.params for j in range(p_.size)]
    want.append(sum(Fraction(v) for rows in loss_rows(lr, state, range(1, 3)) for v in rows.tolist()))
    got, at = [], 0                         # each param's s words, then its lo words; the loss's
    for size in [p_.size for p_ in lr.params] + [1]:
        got += [Fraction(words[at + j]) + Fraction(words[at + size + j]) for j in range(size)]
        at += 2 * size
    assert got == want
