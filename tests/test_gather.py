"""Indices read from data (issue 47): `E[tok[i]]`, `E[tok[i, t]]`, `w[tok[i]]`.

- every engine agrees (interpreter, plan executor, x86-64 at every level, AArch64, the roles of
  a star, a hierarchy and ZeRO-3, resumed), ordered and exact_sum, full batch and minibatches,
  on a learner whose samples name one row twice, leave a row untouched and hold a sample block
  and a remainder (tests/differential.py);
- the gather gives the bits of its dense formulation `onehot(tok[i], V) @ E` (and
  `dot(onehot(tok[i], V), w)`) where the two must agree: every value finite and no zero in E's
  gradient whose sign the dense product decides (`0 * dt` is -0 where dt < 0);
- the per-sample gradient against a hand-derived oracle (plain Python floats, in autodiff's
  order: the adjoint at the row the index names, the left fold of the adjoints of the indices
  naming one row, +0 elsewhere), checked itself by central differences;
- a zero's sign: a row that every index of every sample names with a -0 adjoint sums to -0, one
  that some sample leaves gets +0 (the fold of every sample's dense per-sample gradient);
- an index out of range or not whole is refused by name (`data-label`, exit 133, naming the row
  and the array) by the interpreter and by the executables, from literals and from .npy files;
- the GPU owner kernels (the PTX interpreter, and owners under the mock driver) agree too.
"""
import io
import math
import struct
import subprocess

import numpy as np
import pytest

from conftest import exact_sum_variant
from differential import check_text, runner

EMBED = """learner embed
data tok = [[0, 2, 2], [1, 1, 3], [2, 0, 1], [0, 0, 0], [3, 2, 1], [1, 3, 3], [2, 2, 2],
            [0, 1, 2], [3, 3, 0], [1, 0, 2], [2, 3, 1], [0, 2, 3], [1, 1, 1]]
data y = [0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 0.125, 1.0, -2.0, 0.625, 0.375, -0.5, 1.25]
param E: f64[5, 3] = [[0.1, -0.2, 0.3], [0.3, 0.4, -0.1], [-0.5, 0.6, 0.2], [0.7, -0.3, 0.5],
                      [0.25, 0.5, -0.75]]
param w: f64[5] = [0.5, -0.25, 1.0, 0.125, 2.0]
param v: f64[3] = [0.2, -0.4, 0.6]
state m: f64[5] = 0.0
loss(i) {
  let h = tanh(E[tok[i, 0]] + E[tok[i, 1]] * E[tok[i, 2]])
  let r = dot(v, h) + w[tok[i, 2]] - y[i]
  0.5 * r^2
}
update {
  m = 0.5 * m + grad(w)
  E = E - 0.25 * grad(E)
  w = w - 0.1 * m
  v = v - 0.1 * grad(v)
}
deployment embed_star {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..5, owner[1] = 5..6, owner[2] = 6..13
  combine ((owner[0], owner[1]), owner[2])
}
deployment embed_tree {
  roles owner[3]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..4, owner[1] = 4..9, owner[2] = 9..13
}
deployment embed_zero3 {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..6, owner[1] = 6..7, owner[2] = 7..13
  combine (owner[0], (owner[1], owner[2]))
  strategy zero3
  partition even
}
"""
CPU = ("interp", "plan", "x86_64", "x86_64-v3", "x86_64-v4", "aarch64", "roles")


def agree(text: str, tmp_path, engines=CPU) -> None:
    rep = check_text(text, tmp_path, engines)
    assert rep.status == "agreed", rep.summary()


def test_every_engine(tmp_path):
    agree(EMBED, tmp_path)


def test_every_engine_exact_sum(tmp_path):
    agree(exact_sum_variant(EMBED), tmp_path)


def test_every_engine_minibatch(tmp_path):
    agree(EMBED.replace("state m:", "batch 4\norder shuffle(7)\nstate m:"), tmp_path,
          ("interp", "plan", "x86_64", "aarch64"))


# -- the dense formulation ------------------------------------------------------------------------
def dense(text: str) -> str:
    """`E[tok[i, t]]` as `(onehot(tok[i, t], 5) @ E)`, `w[tok[i, 2]]` as a dot with a onehot."""
    for t in range(3):
        text = text.replace(f"E[tok[i, {t}]]", f"(onehot(tok[i, {t}], 5) @ E)")
    return text.replace("w[tok[i, 2]]", "dot(onehot(tok[i, 2], 5), w)")


def run(text: str, tmp_path, name: str, target: str | None = None, steps: int = 4):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    from alphac.ir import interp
    src = tmp_path / f"{name}.alpha"
    src.write_text(text)
    lr = compile_file(src).learner
    if target is None:
        return interp.format_state(lr, interp.run(lr, steps))
    exe = tmp_path / f"{name}.{target}"
    exe.write_bytes(build_learner(lr, target).elf)
    exe.chmod(0o755)
    return subprocess.run(runner(target) + [str(exe), "--steps", str(steps)], capture_output=True,
                          text=True).stdout


def test_dense_formulation_same_bits(tmp_path):
    """Same bits as onehot @ E here: no zero in a touched coordinate (a fold of the dense
    product's zeros and the one nonzero term is that term), every value finite."""
    text = EMBED.split("deployment")[0]
    want = run(dense(text), tmp_path, "dense")
    assert run(text, tmp_path, "gather") == want
    assert run(text, tmp_path, "gather", "x86_64") == want


# -- the per-sample gradient, by hand ---------------------------------------------------------------
def lfold(terms):
    it = iter(terms)
    acc = next(it)
    for t in it:
        acc = acc + t
    return acc


def oracle(E, w, v, tok, y):
    """The per-sample gradient of EMBED's loss, as autodiff's rules give it (docs/language.md):
    h = tanh(a + b * c), a, b, c the rows tok names; dr = r (0.5 * r^2); dh = dr * v;
    du = dh * (1 - h*h) with tanh's derivative from its forward value; da = du, db = du * c,
    dc = du * b; E's gradient at a row is the left fold, in the order the adjoints reach the
    gathers (c, b, then a: the reversed post-order), of those naming it, +0 elsewhere."""
    import gmpy2
    with gmpy2.context(precision=53, emin=-1073, emax=1024, subnormalize=True):
        a, b, c = (E[k] for k in tok)
        u = [a[j] + b[j] * c[j] for j in range(3)]
        h = [float(gmpy2.tanh(gmpy2.mpfr(x))) for x in u]
    r = (lfold(v[j] * h[j] for j in range(3)) + w[tok[2]]) - y
    du = [(r * v[j]) * (1.0 - h[j] * h[j]) for j in range(3)]
    adj = {2: [du[j] * b[j] for j in range(3)], 1: [du[j] * c[j] for j in range(3)], 0: du}
    gE = []
    for row in range(5):
        hits = [adj[t] for t in (2, 1, 0) if tok[t] == row]
        gE += [lfold(x[j] for x in hits) if hits else 0.0 for j in range(3)]
    gw = [r if k == tok[2] else 0.0 for k in range(5)]
    return gE, gw, [r * h[j] for j in range(3)]


def loss_of(E, w, v, tok, y):
    a, b, c = (E[k] for k in tok)
    h = [math.tanh(a[j] + b[j] * c[j]) for j in range(3)]
    r = sum(v[j] * h[j] for j in range(3)) + w[tok[2]] - y
    return 0.5 * r * r


def test_gradient_oracle_and_central_differences(tmp_path):
    from alphac.driver import compile_file
    from alphac.ir.interp import initial_state, per_sample_gradient
    src = tmp_path / "g.alpha"
    src.write_text(EMBED.split("deployment")[0])
    lr = compile_file(src).learner
    st = initial_state(lr)
    E = [list(st["E"][3 * r:3 * r + 3]) for r in range(5)]
    toks = np.asarray(lr.datum("tok").values).reshape(13, 3).astype(int).tolist()
    ys = list(lr.datum("y").values)
    for i in range(13):
        g = per_sample_gradient(lr, st, i)
        gE, gw, gv = oracle(E, list(st["w"]), list(st["v"]), toks[i], ys[i])
        assert [struct.pack("<d", x) for x in g["E"]] == [struct.pack("<d", x) for x in gE], i
        assert list(g["w"]) == gw and list(g["v"]) == gv
        for row in range(5):                      # the oracle against the calculus
            for j in range(3):
                hE = [list(x) for x in E]
                hE[row][j] += 1e-6
                up = loss_of(hE, st["w"], st["v"], toks[i], ys[i])
                hE[row][j] -= 2e-6
                down = loss_of(hE, st["w"], st["v"], toks[i], ys[i])
                assert abs((up - down) / 2e-6 - gE[3 * row + j]) < 1e-6


# -- a zero's sign ---------------------------------------------------------------------------------
SIGNS = """learner signs
data tok = [0, 0, 1, 0, 0]
data c = [-0.0, -0.0, 1.0, -0.0, -0.0]
param E: f64[3, 2] = 1.0
param u: f64[3] = 1.0
loss(i) = c[i] * sum(E[tok[i]]) + c[i] * u[tok[i]]
update {
  E = grad(E)
  u = grad(u)
}
"""


def test_zero_signs(tmp_path):
    """Row 0: the samples naming it all give -0 and samples 2 leaves it: +0 (as the dense sum
    of every sample's per-sample gradient); so rows 1 (1.0 / 5) and 2 (+0). With sample 2 named
    row 0 too (tok 0 everywhere, c -0 everywhere), row 0 sums to -0."""
    want = "E[0,0] 0000000000000000\nE[0,1] 0000000000000000\n"
    for target in (None, "x86_64", "aarch64"):
        got = run(SIGNS, tmp_path, "signs", target, 1)
        assert got.startswith(want) and "u[0] 0000000000000000" in got, (target, got)
        all_neg = SIGNS.replace("[0, 0, 1, 0, 0]", "[0, 0, 0, 0, 0]").replace("1.0, -0.0", "-0.0, -0.0")
        got = run(all_neg, tmp_path, "neg", target, 1)
        assert got.startswith("E[0,0] 8000000000000000\nE[0,1] 8000000000000000\n") and \
            "u[0] 8000000000000000\nu[1] 0000000000000000" in got, (target, got)


# -- refusals ----------------------------------------------------------------------------------------
def test_out_of_range_refused_by_name(tmp_path):
    from alphac.refusals import Refusal
    bad = EMBED.split("deployment")[0].replace("[3, 2, 1]", "[3, 2, 5]")
    why = "tok[4, 2]: not a row of E, a whole number from 0 to 4"
    with pytest.raises(Refusal) as e:
        run(bad, tmp_path, "bad")
    assert e.value.name == "data-label" and why in str(e.value)
    src = tmp_path / "bad.alpha"
    from alphac.build import build_learner
    from alphac.driver import compile_file
    exe = tmp_path / "bad.exe"
    exe.write_bytes(build_learner(compile_file(src).learner, "x86_64").elf)
    exe.chmod(0o755)
    p = subprocess.run([str(exe), "--steps", "1"], capture_output=True, text=True)
    assert (p.returncode, p.stdout, p.stderr) == (133, "", f"refused: data-label ({why})\n")


def test_loaded_index_refused_by_name(tmp_path):
    """Token ids from an .npy file (`<i8`), read by each executable: 2.5 is not whole, -1 and 5
    are out of range; each refused before the first step, naming the row."""
    from alphac.build import build_learner
    from alphac.driver import compile_file
    from alphac.refusals import Refusal
    text = EMBED.split("deployment")[0].replace(EMBED.split("\n")[1] + "\n" + EMBED.split("\n")[2],
                                                 'data tok = load("tok.npy")')
    toks = np.asarray([[int(x) for x in row] for row in
                       [[0, 2, 2], [1, 1, 3], [2, 0, 1], [0, 0, 0], [3, 2, 1], [1, 3, 3], [2, 2, 2],
                        [0, 1, 2], [3, 3, 0], [1, 0, 2], [2, 3, 1], [0, 2, 3], [1, 1, 1]]])
    src = tmp_path / "l.alpha"
    src.write_text(text)
    for arr, why in ((toks, None), (np.where(toks == 3, 5, toks), "tok[4, 0]: not a row of E"),
                     (np.where(toks == 3, -1, toks), "tok[4, 0]: not a row of E"),
                     (np.where(toks == 3, 2.5, toks.astype(float)), "tok[4, 0]: not a row of E")):
        buf = io.BytesIO()
        np.save(buf, arr)
        (tmp_path / "tok.npy").write_bytes(buf.getvalue())
        lr = compile_file(src).learner
        exe = tmp_path / "l.exe"
        exe.write_bytes(build_learner(lr, "x86_64").elf)
        exe.chmod(0o755)
        p = subprocess.run([str(exe), "--steps", "2"], capture_output=True, text=True, cwd=tmp_path)
        if why is None:
            assert p.returncode == 0 and p.stdout == run(EMBED.split("deployment")[0], tmp_path, "x", None, 2)
        else:
            assert p.returncode == 133 and p.stderr.startswith(f"refused: data-label ({why}"), p.stderr
            with pytest.raises(Refusal, match=why.replace("[", r"\[")):
                run(text, tmp_path, "l")


def test_checker_refusals(tmp_path):
    from alphac.diag import CompileError
    from alphac.driver import compile_file
    head = "learner g\ndata tok = [0, 1]\ndata x = [[1.0, 2.0], [3.0, 4.0]]\nparam E: f64[2, 2] = 0.5\n"
    for loss, text in (("sum(E[tok[i], 0])", "only index"), ("sum(E[E[0, 0]])", ""),
                       ("sum(E[x[i]])", "one element"), ("sum(E[tok[i]]) + E[0, 0]", "also read otherwise")):
        src = tmp_path / "c.alpha"
        src.write_text(head + f"loss(i) = {loss}\nupdate {{\n  E = E - grad(E)\n}}\n")
        with pytest.raises(CompileError) as e:
            compile_file(src)
        assert any(d.code == "E0033" and text in d.message for d in e.value.diagnostics), loss


def test_gpu_owners(tmp_path):
    """The GPU owner kernels (alphac.ptx): the embedding (tanh left out: the PTX interpreter's
    budget) in the PTX interpreter, ordered, exact_sum and in minibatches, and a star of an sm_90
    and an sm_86 owner under the mock driver (built through ptxas), resumed."""
    from differential import GPU_CARDS, gpu_here, gpu_host_text
    if not gpu_here():
        pytest.skip("ptxas or the mock GPU is not here")
    text = EMBED.split("deployment")[0].replace("tanh(", "(")
    for t in (text, exact_sum_variant(text), text.replace("state m:", "batch 4\norder shuffle(7)\nstate m:")):
        agree(t, tmp_path, ("interp", "ptx"))
    gpu = text + """deployment g {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..6, owner[1] = 6..13
  target owner[0] = x86_64+sm_90, owner[1] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[1] = "c.gpuhost"
}
"""
    rep = check_text(gpu, tmp_path, ("interp", "ptx", "roles", "gpu"),
                     {name: gpu_host_text(name).encode() for name in GPU_CARDS})
    assert rep.status == "agreed" and "roles:g resumed 2 steps" in rep.outcomes, rep.summary()


WIDE = """learner wide
data tok = [[0, 11], [3, 3], [11, 7], [5, 0], [7, 2], [2, 9], [9, 9], [4, 1], [1, 6], [6, 3]]
data y = [0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 0.125, 1.0, -2.0, 0.625]
param E: f64[12, 10] = 0.125
param v: f64[10] = [0.2, -0.4, 0.6, 0.1, -0.3, 0.5, 0.7, -0.2, 0.4, -0.6]
loss(i) {
  let h = tanh(E[tok[i, 0]] + 2 * E[tok[i, 1]])
  0.5 * (dot(v, h) - y[i])^2
}
update {
  E = E - 0.5 * grad(E)
  v = v - 0.1 * grad(v)
}
"""


def test_rows_wider_than_unrolled(tmp_path):
    """Rows of 10 (past the emitter's unrolling of 8: real loops over a row), 12 rows, ids
    that repeat within a sample: every single-process engine, and the dense form's bits."""
    agree(WIDE, tmp_path, ("interp", "x86_64", "x86_64-v3", "aarch64"))
    dense = WIDE.replace("E[tok[i, 0]]", "(onehot(tok[i, 0], 12) @ E)").replace(
        "E[tok[i, 1]]", "(onehot(tok[i, 1], 12) @ E)")
    assert run(WIDE, tmp_path, "wide", "x86_64") == run(dense, tmp_path, "dense")


DELIVER = """learner deliver
data tok = [1, 0, 5]
data x = [0.5, -1.0, 2.0]
param w: f64[3] = 0.1
loss(i) = (w[tok[i]] * x[i] - 1)^2
update {
  w = w - 0.1 * grad(w)
}
deployment d0 {
  roles coordinator, owner[4]
  topology star(coordinator)
  samples owner[1] = 0..0, owner[2] = 0..1, owner[3] = 1..3
  combine (((owner[0], owner[1]), owner[2]), owner[3])
  deliver owner[3]
}
deployment d1 {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples even
}
"""


def test_index_refused_in_one_owner(tmp_path):
    """An index out of range in the rows of the one owner that updates: the run is refused
    `data-label` (its peers that saw it gone are ended by that refusal, not failures of their
    own: tools/supervise.py), by the roles and by the fleet's one executable per index node,
    which checks its rows' literal labels and indices at start too."""
    rep = check_text(DELIVER, tmp_path, ("interp", "roles", "fleet"))
    assert rep.status == "agreed" and rep.outcomes["fleet:d1"] == "refused: data-label", rep.summary()


def test_held_out_indices(tmp_path):
    """Scoring on held-out token ids: `alphac eval` (the interpreter) and the executable's
    `--evaluate` give the same mean loss and accuracy; an id out of range in the held-out file is
    refused by name by both (`alphac eval`, `alphac build --eval-data`): no row to read."""
    from conftest import alphac
    ids = {"tok": [[0, 1], [2, 2], [1, 0], [2, 1]], "y": [0, 2, 1, 1], "tok_t": [[1, 1], [0, 2], [2, 0]],
           "y_t": [1, 0, 2], "tok_b": [[1, 1], [0, 3], [2, 0]]}
    for name, v in ids.items():
        np.save(tmp_path / f"{name}.npy", np.asarray(v, dtype="<i8"))
    src = tmp_path / "ev.alpha"
    src.write_text("""learner ev
data tok = load("tok.npy")
data y = load("y.npy")
param E: f64[3, 3] = [[0.1, -0.2, 0.3], [0.3, 0.4, -0.1], [-0.5, 0.6, 0.2]]
predict(i) = E[tok[i, 0]] + E[tok[i, 1]]
loss(i) {
  let z = E[tok[i, 0]] + E[tok[i, 1]]
  logsumexp(z) - dot(onehot(y[i], 3), z)
}
update {
  E = E - 0.5 * grad(E)
}
""")
    held = ["--eval-data", f"tok={tmp_path / 'tok_t.npy'}", "--eval-data", f"y={tmp_path / 'y_t.npy'}"]
    assert alphac("build", src, "-o", tmp_path / "ev", *held)[0] == 0
    p = subprocess.run([str(tmp_path / "ev"), "--steps", "3", "--checkpoint", str(tmp_path / "ck")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([str(tmp_path / "ev"), "--steps", "3", "--evaluate"], capture_output=True,
                       text=True, cwd=tmp_path)
    code, out, _ = alphac("eval", src, "--checkpoint", tmp_path / "ck", "--data", f"tok={tmp_path / 'tok_t.npy'}",
                          "--data", f"y={tmp_path / 'y_t.npy'}")
    loss = float(out.split("mean loss: ")[1].split()[0])
    assert code == 0 and f"mean_loss {struct.pack('>d', loss).hex()}\ncorrect 2\n" in p.stdout, (out, p.stdout)
    why = "tok[1, 1]: not a row of E, a whole number from 0 to 2"
    code, _, err = alphac("eval", src, "--checkpoint", tmp_path / "ck", "--data", f"tok={tmp_path / 'tok_b.npy'}",
                          "--data", f"y={tmp_path / 'y_t.npy'}")
    assert code != 0 and f"--data: {why}" in err
    code, _, err = alphac("build", src, "-o", tmp_path / "evb", "--eval-data", f"tok={tmp_path / 'tok_b.npy'}",
                          "--eval-data", f"y={tmp_path / 'y_t.npy'}")
    assert code != 0 and f"--eval-data: {why}" in err
