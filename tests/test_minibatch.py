"""Minibatches and epochs (docs/language.md): the sample order of alphac/ir/order.py, the same
batches on every engine, --epochs, resume in the middle of an epoch, the loss as it trains."""
import math
import struct
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from alphac.driver import compile_file
from alphac.ir import interp
from alphac.ir.order import batches, position, step_samples
from alphac.ir.score import mean_loss
from backend import run_exe
from conftest import alphac


def build_exe(src, out, target):
    from alphac.build import build_learner
    import os
    out.write_bytes(build_learner(compile_file(src).learner, target).elf)
    os.chmod(out, 0o755)
    return out


def run(exe, *args, target="x86_64"):
    p = run_exe(exe, *args, target=target)
    assert p.returncode == 0, p.stderr
    return p.stdout

N = 11                                   # samples: x[s] = 2^s, so a batch's sum names its members


def probe(batch: int, order: str) -> str:
    xs = ", ".join(f"{float(2 ** s)}" for s in range(N))
    return f"""learner probe
data x = [{xs}]
param w: f64 = 0.0
state s: f64 = 0.0
batch {batch}
order {order}
loss(i) = w * x[i]
update {{
  s = grad(w)
  w = w
}}

deployment star3 {{
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..9, owner[2] = 9..11
  target owner[1] = aarch64
}}
"""


@given(n=st.integers(1, 3000), seed=st.integers(0, (1 << 63) - 1), epoch=st.integers(0, 1 << 40))
@settings(max_examples=60, deadline=None)
def test_the_shuffle_is_a_permutation(n, seed, epoch):
    sample = range(n) if n <= 300 else range(0, n, 7)
    pos = [position(s, n, epoch, seed) for s in sample]
    assert all(0 <= p < n for p in pos) and len(set(pos)) == len(pos)
    if n <= 300:
        assert sorted(pos) == list(range(n))


@pytest.mark.parametrize("n,b", [(10, 3), (10, 10), (7, 1), (64, 8), (5, 4)])
def test_every_epoch_uses_every_sample_once(n, b):
    for seed in (None, 0, 12345):
        nb = batches(n, b)
        for e in range(3):
            seen = [s for p in range(nb) for s in step_samples(range(n), n, b, seed, e * nb + p)]
            assert sorted(seen) == list(range(n))
            sizes = [len(step_samples(range(n), n, b, seed, e * nb + p)) for p in range(nb)]
            assert sizes == [b] * (n // b) + ([n % b] if n % b else [])


def members(text: str, t: int, lr) -> list[int]:
    """The samples step t used, read back from `s` (the mean of 2^s over them)."""
    (line,) = [l for l in text.splitlines() if l.startswith("s ")]
    mean = struct.unpack(">d", bytes.fromhex(line.split()[1]))[0]
    n = len(step_samples(range(N), N, lr.batch, lr.shuffle, t))
    total = int(mean * n)
    assert total == mean * n
    return [k for k in range(N) if total >> k & 1]


@pytest.mark.parametrize("order", ["sequence", "shuffle(7)", "shuffle(9223372036854775807)"])
def test_every_engine_uses_the_contracts_batches(order, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "probe.alpha"
    src.write_text(probe(4, order))
    lr = compile_file(src).learner
    x86 = build_exe(src, tmp_path / "x86", "x86_64")
    a64 = build_exe(src, tmp_path / "a64", "aarch64")
    roles = tmp_path / "roles"
    built = alphac("build", src, "--deployment", "star3", "-o", roles)
    assert built[0] == 0, built[2]
    for t in range(2 * lr.batches + 1):
        want = step_samples(range(N), N, lr.batch, lr.shuffle, t)
        ref = interp.format_state(lr, interp.run(lr, t + 1))
        assert members(ref, t, lr) == want
        assert run(x86, "--steps", t + 1) == ref
        assert run(a64, "--steps", t + 1, target="aarch64") == ref
        if t in (0, lr.batches):
            code, out, err = alphac("launch", roles, "--steps", t + 1, "--records", tmp_path / "runs")
            assert code == 0 and out == ref, err


MB = """learner mb
data x = [[0.5, -1.0], [1.5, 0.3], [-0.2, 0.8], [0.9, -0.4], [0.1, 0.2], [1.1, -0.6], [-0.7, 0.4]]
data y = [0, 2, 1, 2, 0, 1, 1]
const lr = 0.3
param W: f64[3, 2] = [[0.1, -0.2], [0.05, 0.4], [-0.3, 0.2]]
param b: f64[3] = 0.0
state m: f64[3, 2] = 0.0
batch 3
order shuffle(5)
loss(i) {
  let z = W @ tanh(x[i]) + b
  logsumexp(z) - dot(onehot(y[i], 3), z)
}
update {
  m = 0.9 * m + grad(W)
  W = W - lr * m
  b = b - lr * grad(b)
}

deployment tree {
  roles owner[3]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..3, owner[1] = 3..4, owner[2] = 4..7
}

deployment star {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..3, owner[1] = 3..4, owner[2] = 4..7
  combine ((owner[0], owner[1]), owner[2])
}
"""


def loss_sum(lr, state, samples):
    """An owner's loss sum: a left fold over its samples, None for none (the identity)."""
    from alphac.ir.evaluate import Env, evaluate
    from alphac.math import binary64 as f
    acc = None
    for i in samples:
        v = evaluate(lr.loss, Env(state={(k, 0): x for k, x in state.items()},
                                  rows=interp.sample_rows(lr, i)))[0]
        acc = v if acc is None else f.add(acc, v)
    return acc


def test_the_record_keeps_each_steps_loss_combined_in_the_tree(tmp_path, monkeypatch):
    from alphac.math import binary64 as f
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "mb.alpha"
    src.write_text(MB)
    from alphac.dist.execute import run_plan
    from alphac.driver import compile_deployments
    compiled, plans = compile_deployments(src)
    lr = compiled.learner
    roles = tmp_path / "roles"
    assert alphac("build", src, "--deployment", "star", "-o", roles)[0] == 0
    code, out, err = alphac("launch", roles, "--steps", "4", "--records", tmp_path / "runs")
    assert code == 0, err
    import json
    rec = json.loads(next((tmp_path / "runs").glob("*/record.json")).read_text())
    state, want = interp.initial_state(lr), []
    for t in range(4):
        parts = [loss_sum(lr, state, step_samples(range(a, b), 7, 3, 5, t))
                 for a, b in ((0, 3), (3, 4), (4, 7))]
        add = lambda a, b: b if a is None else a if b is None else f.add(a, b)
        total = add(add(parts[0], parts[1]), parts[2])
        n = len(step_samples(range(7), 7, 3, 5, t))
        want.append({"step": t + 1, "sum": f.hex16(total), "n": n,
                     "mean": f.hex16(f.div(total, float(n))), "decimal": repr(f.div(total, float(n)))})
        state = run_plan(lr, plans["star"], t + 1)      # the state the star's step t+1 starts from
    assert rec["loss"] == want
    record = next((tmp_path / "runs").glob("*/record.json"))
    code, out, err = alphac("plot", record, "-o", tmp_path / "loss.svg")
    assert code == 0 and f"last {want[-1]['decimal']} (step 4)" in out, out + err
    assert " |" in out.split("\n", 1)[0] and "*" in out and (tmp_path / "loss.svg").read_text().startswith("<svg")
    (tmp_path / "bad.json").write_text("{}")
    code, _, err = alphac("plot", tmp_path / "bad.json")
    assert err.startswith("refused: record-malformed") and code != 0


def test_epochs_resume_mid_epoch_and_the_loss(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "mb.alpha"
    src.write_text(MB)
    lr = compile_file(src).learner
    assert lr.batches == 3
    exe = build_exe(src, tmp_path / "mb", "x86_64")
    five = interp.format_state(lr, interp.run(lr, 5))
    assert run(exe, "--steps", "5") == five
    assert run(exe, "--epochs", "2") == interp.format_state(lr, interp.run(lr, 6))
    assert alphac("run", src, "--epochs", "2")[1] == interp.format_state(lr, interp.run(lr, 6))
    assert run_exe(exe, "--epochs", "2", "--steps", "6").stderr.splitlines()[-1] == "refused: usage (--epochs: not with --steps)"
    ck = tmp_path / "ck"                   # 3 + checkpoint + 2 = 5: step 4 is in epoch 1
    subprocess.run([str(exe), "--steps", "4", "--checkpoint", str(ck)], check=True, capture_output=True)
    assert run(exe, "--resume", ck, "--steps", "1") == five
    p = subprocess.run([str(exe), "--steps", "5", "--loss-every", "2"], capture_output=True, text=True)
    shown = [l.split() for l in p.stderr.splitlines()]
    assert [s[1] for s in shown] == ["2", "4", "5"] and p.stdout == five
    state = interp.initial_state(lr)
    for t in range(5):
        samples = step_samples(range(7), 7, 3, 5, t)
        mean = mean_loss(lr, state, samples)
        if str(t + 1) in [s[1] for s in shown]:
            printed = float(next(s[3] for s in shown if s[1] == str(t + 1)))
            assert abs(printed - mean) <= 1.01e-6 and printed <= mean + 1e-12
        state = interp.step(lr, state, t)
    roles = tmp_path / "roles"
    assert alphac("build", src, "--deployment", "tree", "-o", roles)[0] == 0
    plan = alphac("run", src, "--deployment", "tree", "--steps", "5")[1]
    code, out, err = alphac("launch", roles, "--steps", "5", "--records", tmp_path / "runs")
    assert code == 0 and out == plan, err
    code, out, err = alphac("launch", roles, "--epochs", "2", "--records", tmp_path / "runs")
    assert code == 0 and out == alphac("run", src, "--deployment", "tree", "--steps", "6")[1], err


@pytest.mark.parametrize("decl,msg", [
    ("batch 0", "the batch size must be an integer from 1 to the sample count (7)"),
    ("batch 8", "the batch size must be an integer from 1 to the sample count (7)"),
    ("batch 2.5", "the batch size must be an integer from 1 to the sample count (7)"),
    ("order sequence", "`order` without `batch`"),
    ("batch 2\norder shuffle(9223372036854775808)", "the seed must be an integer from 0 to 2^63 - 1"),
    ("batch 2\nbatch 3", "declared twice"),
])
def test_bad_minibatch_declarations_are_refused_by_name(decl, msg, tmp_path):
    src = tmp_path / "bad.alpha"
    src.write_text(MB.replace("batch 3\norder shuffle(5)\n", decl + "\n").split("\ndeployment")[0])
    code, _, err = alphac("check", src)
    assert code == 1 and "error[E0061]" in err and msg in err, err
