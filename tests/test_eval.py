"""`alphac eval` and `predict(i)`: a trained state scored on held-out data.

The state comes from real checkpoints (a compiled executable's, and a partitioned one written by
a deployment's roles under `alphac launch`); the oracle reads their shards with numpy alone and
recomputes the loss with plain Python floats in the contract's order (MPFR, through gmpy2, for
the correctly rounded tanh, exp and log), so the mean loss is compared bit for bit, and the
accuracy with numpy's argmax."""
import json
import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import alphac, example
from oracle import CLASSIFIER

gmpy2 = pytest.importorskip("gmpy2")

HX = [[0.3, -0.2], [1.0, 1.0], [-1.0, 0.2], [0.0, 0.5], [2.0, -1.5]]
HY = [0, 1, 2, 1, 2]
SHAPES = {"W1": (3, 2), "b1": (3,), "W2": (3, 3), "b2": (3,)}


# -- the oracle: plain Python floats, written from docs/language.md ------------------------------
def _mp(fn, v):
    with gmpy2.context(precision=53, emin=-1073, emax=1024, subnormalize=True):
        return float(fn(gmpy2.mpfr(v)))


def _fold(values):
    acc = values[0]
    for v in values[1:]:
        acc = acc + v
    return acc


def _matvec(A, v):
    return [_fold([row[c] * v[c] for c in range(len(v))]) for row in A]


def scores(st, x):
    h = [_mp(gmpy2.tanh, a + b) for a, b in zip(_matvec(st["W1"], x), st["b1"])]
    return [a + b for a, b in zip(_matvec(st["W2"], h), st["b2"])]


def oracle_loss(st, x, y):
    z = scores(st, x)
    m = z[0]
    for v in z[1:]:
        m = max(m, v)                     # no NaN, no signed zeros to tell apart here
    lse = m + _mp(gmpy2.log, _fold([_mp(gmpy2.exp, v - m) for v in z]))
    return lse - _fold([(1.0 if y == j else 0.0) * z[j] for j in range(len(z))])


def oracle(st, xs, ys):
    total = oracle_loss(st, xs[0], ys[0])
    for x, y in zip(xs[1:], ys[1:]):
        total = total + oracle_loss(st, x, y)
    correct = sum(int(np.argmax(scores(st, x))) == y for x, y in zip(xs, ys))
    return total / len(xs), correct


def shards(ck: Path) -> dict:
    """The state in a checkpoint, from its shard files alone (`ROLE/STATE.LO-HI.eE.vV.npy`)."""
    flat = {n: [None] * int(np.prod(s)) for n, s in SHAPES.items()}
    for p in ck.glob("*/*.npy"):
        name, lo, hi = re.fullmatch(r"(\w+)\.(\d+)-(\d+)\.e\d+\.v\d+\.npy", p.name).groups()
        flat[name][int(lo):int(hi)] = np.load(p).tolist()
    return {n: [v[r * s[1]:(r + 1) * s[1]] for r in range(s[0])] if len(s) == 2 else v
            for n, v in flat.items() for s in [SHAPES[n]]}


def hexbits(v):
    return "%016x" % struct.unpack("<Q", struct.pack("<d", v))[0]


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture
def work(tmp_path, monkeypatch):
    (tmp_path / "cls.alpha").write_text(CLASSIFIER)
    np.save(tmp_path / "hx.npy", np.array(HX))
    np.save(tmp_path / "hy.npy", np.array(HY, dtype=np.int64))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def exe_checkpoint(work: Path, steps: int, source: str = "cls.alpha") -> Path:
    """The checkpoint an executable built from `source` writes after `steps` steps."""
    from alphac.build import build_learner
    from alphac.driver import compile_file
    from backend import run_exe
    exe, ck = work / (source + ".exe"), work / (source + ".ck")
    exe.write_bytes(build_learner(compile_file(work / source).learner, "x86_64").elf)
    os.chmod(exe, 0o755)
    r = run_exe(exe, "--steps", steps, "--checkpoint", ck)
    assert r.returncode == 0, r.stderr
    return ck


def without_predict(work: Path) -> str:
    (work / "plain.alpha").write_text(CLASSIFIER.split("predict(i) {")[0] + "update {" +
                                      CLASSIFIER.split("update {")[1])
    return "plain.alpha"


def evaluate(*args):
    code, out, err = alphac("eval", "cls.alpha", *args, "--data", "x=hx.npy", "--data", "y=hy.npy",
                            "--format", "json")
    assert code == 0, err
    return json.loads(out)


# -- eval equals the oracle ----------------------------------------------------------------------
def test_eval_of_an_executables_checkpoint_equals_the_oracle(work):
    ck = exe_checkpoint(work, 4)
    got = evaluate("--checkpoint", ck)
    mean, correct = oracle(shards(ck), HX, HY)
    assert got == {"samples": 5, "step": 4, "mean_loss": mean, "mean_loss_hex": hexbits(mean),
                   "labels": "y", "correct": correct, "accuracy": correct / 5}
    code, out, err = alphac("eval", "cls.alpha", "--checkpoint", ck, "--data", "x=hx.npy",
                            "--data", "y=hy.npy")
    assert code == 0 and err == ""
    assert out == (f"samples: 5\nmean loss: {mean!r}\n"
                   f"accuracy: {correct / 5!r} ({correct} of 5, labels `y`)\n")
    # the interpreter's 4 steps are the executable's, so --steps 4 scores the same state
    assert evaluate("--steps", 4) == got
    # on the learner's own data, without --data
    code, out, _ = alphac("eval", "cls.alpha", "--checkpoint", ck, "--format", "json")
    st = shards(ck)
    xs, ys = [[0.5, -1.0], [1.5, 0.25], [-0.75, 0.5], [0.1, 2.0], [-1.2, -0.4], [0.9, -0.6]], \
        [0, 1, 2, 1, 0, 2]
    mean6, correct6 = oracle(st, xs, ys)
    assert code == 0 and json.loads(out)["mean_loss_hex"] == hexbits(mean6)
    assert json.loads(out)["correct"] == correct6


@pytest.mark.parametrize("dep, owners", [("cls_star", 2), ("cls_tree", 4)])
def test_eval_of_a_deployments_partitioned_checkpoint_equals_the_oracle(work, dep, owners):
    """A star's flat manifest and a hierarchy's manifest tree, W1 split over the owners."""
    code, _, err = alphac("build", "cls.alpha", "--deployment", dep, "-o", "dep")
    assert code == 0, err
    code, _, err = alphac("launch", "dep", "--steps", "3", "--checkpoint", "ck", "--records", "runs")
    assert code == 0, err
    assert len(list((work / "ck").glob("*/W1.*.npy"))) == owners
    assert (dep == "cls_tree") == (work / "ck" / "agg1.0" / "MANIFEST").exists()
    got = evaluate("--checkpoint", "ck")
    mean, correct = oracle(shards(work / "ck"), HX, HY)
    assert (got["mean_loss_hex"], got["correct"], got["samples"], got["step"]) == \
        (hexbits(mean), correct, 5, 3)


def test_mean_loss_from_python(work):
    from alphac.driver import compile_file
    from alphac.ir.interp import run
    from alphac.ir.score import mean_loss
    lr = compile_file(work / "cls.alpha").learner
    st = run(lr, 2)
    ref = {n: [list(v[r * s[1]:(r + 1) * s[1]]) for r in range(s[0])] if len(s) == 2 else list(v)
           for n, v in st.items() for s in [SHAPES[n]]}
    xs = [[0.5, -1.0], [1.5, 0.25], [-0.75, 0.5], [0.1, 2.0], [-1.2, -0.4], [0.9, -0.6]]
    ys = [0, 1, 2, 1, 0, 2]
    assert hexbits(mean_loss(lr, st)) == hexbits(oracle(ref, xs, ys)[0])
    assert hexbits(mean_loss(lr, st, range(1, 4))) == hexbits(oracle(ref, xs[1:4], ys[1:4])[0])


def test_the_predicted_class_is_the_first_maximum_and_never_a_nan():
    from alphac.ir.score import predicted_class
    nan = float("nan")
    assert predicted_class([1.0, 3.0, 3.0]) == 1
    assert predicted_class([nan, 1.0, 1.0]) == 1
    assert predicted_class([1.0, nan, 2.0]) == 2
    assert predicted_class([-0.0, 0.0]) == 0
    assert predicted_class([nan, nan]) is None


# -- a regression learner: a scalar predict gives a mean loss and no accuracy ----------------------
def test_a_regression_learner_prints_its_mean_loss_and_no_accuracy(tmp_path):
    from oracle import X_LSQ, Y_LSQ
    src = tmp_path / "lsq.alpha"
    src.write_text(example("lsq_adam").read_text().replace("update {", "predict(i) = dot(w, x[i])\n"
                                                          "update {", 1))
    code, out, err = alphac("eval", src, "--steps", "5", "--format", "json")
    assert code == 0 and err == "", err
    got = json.loads(out)
    _, state_text, _ = alphac("run", src, "--steps", "5")
    w = [struct.unpack("<d", int(l.split()[1], 16).to_bytes(8, "little"))[0]
         for l in state_text.splitlines() if l.startswith("w[")]
    losses = []
    for x, y in zip(X_LSQ, Y_LSQ):
        r = _fold([a * b for a, b in zip(w, x)]) - y
        losses.append(0.5 * (r * r))
    assert got == {"samples": 8, "step": 5, "mean_loss": _fold(losses) / 8,
                   "mean_loss_hex": hexbits(_fold(losses) / 8)}
    code, out, _ = alphac("eval", src, "--steps", "5")
    assert code == 0 and out.splitlines()[0] == "samples: 8" and "accuracy" not in out
    code, out, err = alphac("eval", src, "--steps", "5", "--labels", "y")
    assert code == 1 and out == "" and "predicts a scalar (a regression output)" in err


# -- refusals: named, one line, no traceback -------------------------------------------------------
def refused(args, code_wanted, *words):
    code, out, err = alphac("eval", *args)
    assert code == code_wanted and out == "" and err.count("\n") == 1, err
    assert "Traceback" not in err and all(w in err for w in words), err
    return err


def test_refusals_are_named(work):
    ck = exe_checkpoint(work, 2)
    np.save(work / "wide.npy", np.zeros((5, 3)))
    np.save(work / "short.npy", np.zeros(4))
    refused(["cls.alpha", "--checkpoint", work / "nope"], 111, "refused: checkpoint-missing",
            "nope/MANIFEST")
    refused(["cls.alpha", "--checkpoint", ck, "--data", "x=wide.npy"], 1,
            "--data x: `wide.npy` has rows of f64[3]; `x`'s rows are f64[2]")
    refused(["cls.alpha", "--checkpoint", ck, "--data", "z=hx.npy"], 1,
            "--data z: `cls` has no data `z` (its data: x, y)")
    refused(["cls.alpha", "--checkpoint", ck, "--data", "x=hx.npy", "--data", "y=short.npy"], 1,
            "different sample counts: `x` 5, `y` 4")
    refused(["cls.alpha", "--checkpoint", ck, "--data", "x=hx.npy"], 1,
            "`y` is not replaced and holds the learner's 6")
    refused(["cls.alpha", "--checkpoint", ck, "--data", "x=missing.npy"], 1,
            "--data x: cannot read `missing.npy`")
    refused(["cls.alpha", "--checkpoint", ck, "--labels", "x"], 1, "--labels x: `x` has rows")
    refused(["cls.alpha"], 2, "--checkpoint DIR", "--steps N")
    # a learner without predict: no accuracy to give
    refused([without_predict(work), "--checkpoint", ck, "--labels", "y"], 1,
            "--labels y: an accuracy needs `predict(i)`", "plain.alpha has no predict")
    # another learner's checkpoint; a shard whose bytes changed
    refused([example("lsq_adam"), "--checkpoint", ck], 116, "refused: checkpoint-other-learner")
    shard = next((ck / "single").glob("W2.*.npy"))
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1
    shard.write_bytes(bytes(raw))
    refused(["cls.alpha", "--checkpoint", ck], 114, "refused: shard-corrupt", shard.name)


def test_a_checkpoint_written_before_predict_was_added_is_scored(work):
    """predict is part of the identity, but does not change training: eval takes the state of
    the same learner without it."""
    from alphac.dist.identity import learner_digests
    from alphac.driver import compile_file
    from alphac.tools.ckpt import read_manifest
    old = exe_checkpoint(work, 2, without_predict(work))
    new = exe_checkpoint(work, 2)
    ours = learner_digests(compile_file(work / "cls.alpha").learner)[0]
    assert read_manifest(new / "MANIFEST").learner == ours != read_manifest(old / "MANIFEST").learner
    assert evaluate("--checkpoint", old) == evaluate("--checkpoint", new)


# -- the language: predict's identity and diagnostics -----------------------------------------------
def test_predict_adds_to_the_identity_only_when_present(work):
    from alphac.driver import compile_file
    from alphac.ir.learner import canonical
    with_predict = compile_file(work / "cls.alpha").learner
    plain = compile_file(work / without_predict(work)).learner
    assert plain.predict is None and with_predict.predict.shape == (3,)
    a, b = canonical(plain), canonical(with_predict)
    assert b.startswith(a) and b[len(a):].splitlines()[-1].startswith("predict %")
    assert plain.identity != with_predict.identity


@pytest.mark.parametrize("body, code, words", [
    ("predict(i) = outer(x[i], x[i])", "E0062", "predict gives f64[2, 2]"),
    ("predict(i) { let h = 1 }", "E0062", "does not end with the prediction"),
    ("predict(i) {\n  W1 = W1\n  1\n}", "E0052", "predict cannot assign state"),
    ("predict(i) = sum(grad(b1))", "E0054", "grad(...) can only be used in the update"),
    ("predict(i) = 1\npredict(i) = 2", "E0059", "a second `predict`"),
    ("predict(i) = x", "E0033", "must be indexed by the sample index"),
])
def test_misuse_of_predict_is_diagnosed(work, body, code, words):
    src = CLASSIFIER.split("predict(i) {")[0] + body + "\nupdate {" + CLASSIFIER.split("update {")[1]
    (work / "bad.alpha").write_text(src)
    rc, _, err = alphac("check", "bad.alpha")
    assert rc == 1 and f"error[{code}]" in err and words in err, err


def test_eval_help():
    code, out, _ = alphac("eval", "--help")
    assert code == 0 and "--checkpoint DIR" in out and "--data NAME=PATH.npy" in out
    assert "first index of the largest score, compared by `>`, so a NaN never wins" in " ".join(out.split())


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_an_executable_resumes_a_deployments_checkpoint_then_predicts(work, target):
    """The seed's "resumed, then used for prediction": a ZeRO-3 star's checkpoint, resumed by a
    single-process executable built with the held-out data, scored as `alphac eval` scores it."""
    from backend import run_exe
    code, _, err = alphac("build", "cls.alpha", "--deployment", "cls_star", "-o", "dep")
    assert code == 0, err
    code, _, err = alphac("launch", "dep", "--steps", "3", "--checkpoint", "ck", "--records", "runs")
    assert code == 0, err
    code, _, err = alphac("build", "cls.alpha", "--target", target, "--eval-data", "x=hx.npy",
                          "--eval-data", "y=hy.npy", "-o", "scorer")
    assert code == 0, err
    assert alphac("verify", "scorer.manifest.json")[0] == 0
    r = run_exe(work / "scorer", "--resume", "ck", "--steps", "0", "--evaluate", target=target)
    assert r.returncode == 0, r.stderr
    mean, correct = oracle(shards(work / "ck"), HX, HY)
    assert r.stdout == f"samples 5\nmean_loss {hexbits(mean)}\ncorrect {correct}\n"
    got = evaluate("--checkpoint", "ck")
    assert (got["mean_loss_hex"], got["correct"]) == (hexbits(mean), correct)
    plain = run_exe(work / "scorer", "--resume", "ck", "--steps", "1", target=target)
    assert plain.returncode == 0 and plain.stdout.startswith("W1[0,0] ")    # still a learner


def test_evaluate_without_held_out_data_is_usage(work):
    from backend import run_exe
    ck = exe_checkpoint(work, 1)
    r = run_exe(work / "cls.alpha.exe", "--resume", ck, "--steps", "0", "--evaluate")
    assert (r.returncode, r.stderr.splitlines()[-1]) == (
        64, "refused: usage (--evaluate: built without held-out data; see alphac build --eval-data)")
    for args, words in ((["--eval-data", "z=hx.npy"], "has no data `z`"),
                        (["--labels", "y"], "--labels needs --eval-data"),
                        (["--eval-data", "x=nosuch.npy"], "cannot read `nosuch.npy`")):
        code, _, err = alphac("build", "cls.alpha", *args, "-o", "bad")
        assert code == 1 and words in err and "Traceback" not in err, err
