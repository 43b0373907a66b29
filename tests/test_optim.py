"""The optimizer library (alphac/types/optimizers.alpha, docs/language.md "Optimizers"): each
optimizer gives the bits of its hand-written per-param form and, where torch is installed, of
torch.optim from the same weights; its state names are stable; a learner it optimizes runs on
x86-64 with the interpreter's bits, and in a star and under ZeRO-3 with the plan's; a rate and a
gradient scale computed by the update (`lr = lr_t, grad_scale = clip`) give the bits of the update
written out; its misuses are refused by name at the user's line."""
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from backend import build_deployment, run_exe
from conftest import EXAMPLES, ROOT, alphac

HERE = Path(__file__).resolve().parent

BASE = """learner opt
data x = [[1.0, 0.5, -1.0], [0.3, 2.0, 0.7], [-1.2, 0.4, 1.5], [2.0, -0.3, 0.2]]
data t = [[0.5, -0.2], [0.1, 0.9], [-0.7, 0.3], [0.2, 0.4]]
param W: f64[2, 3] = [[0.1, -0.2, 0.3], [0.05, 0.4, -0.1]]
param b: f64[2] = [0.1, -0.1]
loss(i) {
  let r = tanh(W @ x[i] + b) - t[i]
  0.5 * dot(r, r)
}
"""

# Each optimizer as a user would write it out for one param P (torch's formulas, its order):
# the states' declarations and the update's statements. {lr} etc. are the hyperparameters.
HAND = {
    "sgd(lr = 0.1)": ([], ["P = P - 0.1 * grad(P)"]),
    "sgd(lr = 0.1, momentum = 0.9, dampening = 0.25, weight_decay = 0.01)": (
        ["state P_momentum_buffer: SHAPE = -0.0", "state P_step: f64 = 0"],
        ["let gP = grad(P) + 0.01 * P",
         "let sP = min(P_step, 1)",
         "P_momentum_buffer = P_momentum_buffer * (0.9 * sP) + (1 - 0.25 * sP) * gP",
         "P_step = P_step + 1",
         "P = P - 0.1 * P_momentum_buffer"]),
    "sgd(lr = 0.1, momentum = 0.9, nesterov = true)": (
        ["state P_momentum_buffer: SHAPE = -0.0", "state P_step: f64 = 0"],
        ["let sP = min(P_step, 1)",
         "P_momentum_buffer = P_momentum_buffer * (0.9 * sP) + (1 - 0 * sP) * grad(P)",
         "P_step = P_step + 1",
         "P = P - 0.1 * (grad(P) + 0.9 * P_momentum_buffer)"]),
    "adam(lr = 0.01, betas = (0.9, 0.999))": (
        ["state P_exp_avg: SHAPE = 0", "state P_exp_avg_sq: SHAPE = 0",
         "state P_beta1_power: f64 = 1", "state P_beta2_power: f64 = 1"],
        ["P_exp_avg = P_exp_avg + 0.09999999999999998 * (grad(P) - P_exp_avg)",
         "P_exp_avg_sq = P_exp_avg_sq * 0.999 + (0.0010000000000000009 * grad(P)) * grad(P)",
         "P_beta1_power = P_beta1_power * 0.9", "P_beta2_power = P_beta2_power * 0.999",
         "P = P + (-(0.01 / (1 - P_beta1_power)) * P_exp_avg) / "
         "(sqrt(P_exp_avg_sq) / sqrt(1 - P_beta2_power) + 1e-8)"]),
    "adam(lr = 0.01, betas = (0.3, 0.99), eps = 1e-6, weight_decay = 0.1)": (
        ["state P_exp_avg: SHAPE = 0", "state P_exp_avg_sq: SHAPE = 0",
         "state P_beta1_power: f64 = 1", "state P_beta2_power: f64 = 1"],
        ["let gP = grad(P) + 0.1 * P",
         "P_exp_avg = gP - (gP - P_exp_avg) * (1 - (1 - 0.3))",      # lerp's weight 0.7 >= 0.5
         "P_exp_avg_sq = P_exp_avg_sq * 0.99 + ((1 - 0.99) * gP) * gP",
         "P_beta1_power = P_beta1_power * 0.3", "P_beta2_power = P_beta2_power * 0.99",
         "P = P + (-(0.01 / (1 - P_beta1_power)) * P_exp_avg) / "
         "(sqrt(P_exp_avg_sq) / sqrt(1 - P_beta2_power) + 1e-6)"]),
    "adamw(lr = 0.01)": (
        ["state P_exp_avg: SHAPE = 0", "state P_exp_avg_sq: SHAPE = 0",
         "state P_beta1_power: f64 = 1", "state P_beta2_power: f64 = 1"],
        ["P_exp_avg = P_exp_avg + (1 - 0.9) * (grad(P) - P_exp_avg)",
         "P_exp_avg_sq = P_exp_avg_sq * 0.999 + ((1 - 0.999) * grad(P)) * grad(P)",
         "P_beta1_power = P_beta1_power * 0.9", "P_beta2_power = P_beta2_power * 0.999",
         "P = P * (1 - 0.01 * 0.01) + (-(0.01 / (1 - P_beta1_power)) * P_exp_avg) / "
         "(sqrt(P_exp_avg_sq) / sqrt(1 - P_beta2_power) + 1e-8)"]),
    "rmsprop(lr = 0.01)": (
        ["state P_square_avg: SHAPE = 0"],
        ["P_square_avg = P_square_avg * 0.99 + ((1 - 0.99) * grad(P)) * grad(P)",
         "P = P + (-0.01 * grad(P)) / (sqrt(P_square_avg) + 1e-8)"]),
    "rmsprop(lr = 0.01, alpha = 0.9, momentum = 0.5, weight_decay = 0.1)": (
        ["state P_square_avg: SHAPE = 0", "state P_momentum_buffer: SHAPE = 0"],
        ["let gP = grad(P) + 0.1 * P",
         "P_square_avg = P_square_avg * 0.9 + ((1 - 0.9) * gP) * gP",
         "P_momentum_buffer = P_momentum_buffer * 0.5 + gP / (sqrt(P_square_avg) + 1e-8)",
         "P = P - 0.01 * P_momentum_buffer"]),
    "adagrad(lr = 0.1, lr_decay = 0.01, initial_accumulator_value = 0.1)": (
        ["state P_sum: SHAPE = 0.1", "state P_step: f64 = 0"],
        ["P_step = P_step + 1",
         "P_sum = P_sum + grad(P) * grad(P)",
         "P = P + (-(0.1 / (1 + (P_step - 1) * 0.01)) * grad(P)) / (sqrt(P_sum) + 1e-10)"]),
}
SHAPES = {"W": "f64[2, 3]", "b": "f64[2]"}


def hand_written(use: str) -> str:
    decls, stmts = HAND[use]
    text = BASE
    for p in SHAPES:
        text += "".join(d.replace("SHAPE", SHAPES[p]).replace("P", p) + "\n" for d in decls)
    text += "update {\n" + "".join(f"  {s.replace('P', p)}\n" for p in SHAPES for s in stmts)
    return text + "}\n"


def run(path, *args) -> str:
    code, out, err = alphac("run", path, *args)
    assert code == 0, err
    return out


@pytest.mark.parametrize("use", sorted(HAND))
def test_each_optimizer_is_its_hand_written_form_bit_for_bit(use, tmp_path):
    lib, hand = tmp_path / "lib.alpha", tmp_path / "hand.alpha"
    lib.write_text(BASE + f"optimizer {use} for W, b\n")
    hand.write_text(hand_written(use))
    got, want = run(lib, "--steps", 4), run(hand, "--steps", 4)
    assert got == want and got != run(lib, "--steps", 3)


# -- hyperparameters of the update and the gradient scale (issue 47) ---------------------------
SCHEDULED = """update {
  let clip = min(0.5 / (sqrt(dot(grad(W), grad(W)) + dot(grad(b), grad(b))) + 1e-6), 1)
  let lr_t = 0.01 * where(step < 2, (step + 1) / 2, 0.5 * (1 + cos(0.7 * (step - 2))))
}
"""
ZERO3 = """deployment z3 {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..1, owner[1] = 1..4
  combine (owner[0], owner[1])
  strategy zero3
}
"""
# the library's use, and the HAND form it must equal with grad(P) * clip and lr_t written in
SCALED = {"adam(lr = lr_t, betas = (0.3, 0.99), eps = 1e-6, weight_decay = 0.1, grad_scale = clip)":
          "adam(lr = 0.01, betas = (0.3, 0.99), eps = 1e-6, weight_decay = 0.1)",
          "sgd(lr = lr_t * 10, momentum = 0.9, nesterov = true, grad_scale = clip)":
          "sgd(lr = 0.1, momentum = 0.9, nesterov = true)"}


@pytest.mark.parametrize("use", sorted(SCALED))
def test_a_scheduled_rate_and_a_gradient_scale_are_the_update_written_out(use, tmp_path):
    """`lr = lr_t` and `grad_scale = clip` read the update's lets: the bits of the hand-written
    form with `grad(P) * clip` for grad(P) and lr_t for the rate, on the interpreter, x86-64 (3
    steps, a checkpoint, 2 more) and the ZeRO-3 plan."""
    from alphac.build import build_learner
    from alphac.driver import compile_file
    lib, hand = tmp_path / "lib.alpha", tmp_path / "hand.alpha"
    lib.write_text(BASE.replace("\n", "\ncontract exact_sum\n", 1) + SCHEDULED
                   + f"optimizer {use} for W, b\n" + ZERO3)
    rate = re.search(r"lr = ([\d.]+)", SCALED[use])[1]
    text = hand_written(SCALED[use]).replace("grad(W)", "(grad(W) * clip)").replace(
        "grad(b)", "(grad(b) * clip)").replace(f"{rate} ", "(lr_t * 10) " if "sgd" in use else "lr_t ")
    hand.write_text(text.replace("update {\n", SCHEDULED[:-2]).replace("\n", "\ncontract exact_sum\n", 1))
    want = run(hand, "--steps", 5)
    assert run(lib, "--steps", 5) == want != run(lib, "--steps", 4)
    assert run(lib, "--deployment", "z3", "--steps", 5) == want
    exe = tmp_path / "lib"
    exe.write_bytes(build_learner(compile_file(lib).learner, "x86_64").elf)
    exe.chmod(0o755)
    assert run_exe(exe, "--steps", 3, "--checkpoint", tmp_path / "ck").returncode == 0
    r = run_exe(exe, "--steps", 2, "--resume", tmp_path / "ck")
    assert r.returncode == 0 and r.stdout == want, r.stderr


# -- the digits MLP ------------------------------------------------------------------------------
DIGITS = EXAMPLES / "digits_mlp.alpha"
DIGITS_OPTIM = EXAMPLES / "digits_mlp_optim.alpha"


def digits_by_hand() -> str:
    """examples/digits_mlp.alpha with Adam written out per param in torch's order and the
    library's state names: what `optimizer adam(...) for *` must give."""
    text = DIGITS_OPTIM.read_text()
    decls, stmts = [], []
    for p in ("W1", "b1", "W2", "b2"):
        shape = re.search(rf"param {p}: (f64\[[^]]*\])", text)[1]
        decls += [f"state {p}_exp_avg: {shape} = 0.0", f"state {p}_exp_avg_sq: {shape} = 0.0",
                  f"state {p}_beta1_power: f64 = 1.0", f"state {p}_beta2_power: f64 = 1.0"]
        stmts += [f"let g{p} = grad({p})",
                  f"{p}_exp_avg = {p}_exp_avg + c1 * (g{p} - {p}_exp_avg)",
                  f"{p}_exp_avg_sq = {p}_exp_avg_sq * beta2 + (c2 * g{p}) * g{p}",
                  f"{p}_beta1_power = {p}_beta1_power * beta1",
                  f"{p}_beta2_power = {p}_beta2_power * beta2",
                  f"{p} = {p} + (-(lr / (1 - {p}_beta1_power)) * {p}_exp_avg) / "
                  f"(sqrt({p}_exp_avg_sq) / sqrt(1 - {p}_beta2_power) + eps)"]
    consts = "const lr = 0.01\nconst beta1 = 0.9\nconst beta2 = 0.999\nconst c1 = 1 - beta1\n" \
             "const c2 = 1 - beta2\nconst eps = 1e-8\n\n"
    text = text.replace("param W1:", consts + "param W1:", 1)
    text = text.replace("\nloss(i)", "\n" + "\n".join(decls) + "\n\nloss(i)", 1)
    return re.sub(r"\noptimizer adam\(.*\n", "\nupdate {\n" + "".join(f"  {s}\n" for s in stmts)
                  + "}\n", text)


def test_digits_with_the_library_is_adam_written_out_on_the_interpreter_and_x86_64(tmp_path):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    hand = tmp_path / "digits_hand.alpha"
    hand.write_text(digits_by_hand())
    for n in ("digits_x_train", "digits_y_train", "digits_w1", "digits_b1", "digits_w2", "digits_b2"):
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / f"{n}.npy").symlink_to(EXAMPLES / "data" / f"{n}.npy")
    want = run(hand, "--steps", 3)
    assert run(DIGITS_OPTIM, "--steps", 3) == want
    exe = tmp_path / "digits"
    exe.write_bytes(build_learner(compile_file(DIGITS_OPTIM).learner, "x86_64").elf)
    exe.chmod(0o755)
    r = run_exe(exe, "--steps", 3, "--checkpoint", tmp_path / "ck")
    assert r.returncode == 0 and r.stdout == want, r.stderr
    # the library's Adam is torch's order, not today's digits_mlp.alpha's (beta1 * m + c1 * g,
    # c2 * (g * g), w - step * (m / denom)): the same network, other bits
    old = dict(line.split() for line in run(DIGITS, "--steps", 3).splitlines())
    new = dict(line.split() for line in want.splitlines())
    assert sum(old[k] != new[k] for k in old if k[0] in "Wb") == 755       # of 2,410


# -- state names ---------------------------------------------------------------------------------
NAMES = {
    "sgd(lr = 0.1)": [],
    "sgd(lr = 0.1, momentum = 0.9)": ["momentum_buffer", "step"],
    "adam()": ["exp_avg", "exp_avg_sq", "beta1_power", "beta2_power"],
    "adamw()": ["exp_avg", "exp_avg_sq", "beta1_power", "beta2_power"],
    "rmsprop()": ["square_avg"],
    "rmsprop(momentum = 0.9)": ["square_avg", "momentum_buffer"],
    "adagrad()": ["sum", "step"],
}


@pytest.mark.parametrize("use", sorted(NAMES))
def test_the_state_names_are_stable(use, tmp_path):
    """PARAM_STATE, after the file's own states, param by param as listed: what checkpoints,
    `alphac ckpt export` and the printed state name (docs/language.md)."""
    from alphac.driver import compile_file
    src = tmp_path / "o.alpha"
    src.write_text(BASE + "state keep: f64 = 2\n" + f"optimizer {use} for b, W\n"
                   "update {\n  keep = keep * 0.5\n}\n")
    names = [s.name for s in compile_file(src).learner.states]
    assert names == ["W", "b", "keep"] + [f"{p}_{s}" for p in "bW" for s in NAMES[use]]


def test_a_checkpoint_records_the_names_and_resumes(tmp_path):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    src = tmp_path / "o.alpha"
    src.write_text(BASE + "optimizer adam(lr = 0.01) for *\n")
    exe = tmp_path / "o"
    exe.write_bytes(build_learner(compile_file(src).learner, "x86_64").elf)
    exe.chmod(0o755)
    assert run_exe(exe, "--steps", 3, "--checkpoint", tmp_path / "ck").returncode == 0
    code, out, err = alphac("ckpt", "show", tmp_path / "ck", "--json")
    assert code == 0, err
    assert {"W_exp_avg", "b_exp_avg_sq", "W_beta2_power"} <= set(re.findall(r'"(\w+_\w+)"', out))
    five = run_exe(exe, "--steps", 5).stdout
    resumed = run_exe(exe, "--steps", 2, "--resume", tmp_path / "ck")
    assert resumed.returncode == 0 and resumed.stdout == five == run(src, "--steps", 5)


# -- deployments ---------------------------------------------------------------------------------
def test_a_star_and_zero3_of_the_library_optimized_digits_give_the_plans_bits(tmp_path):
    """The roles of both deployments, launched, publish the plan's bits in the interpreter; and
    ZeRO-3 (moments, gradients and params partitioned) is the replicated star bit for bit."""
    from alphac.tools.launch import launch
    cwd = os.getcwd()
    os.chdir(ROOT)
    published = set()
    try:
        for dep in ("digits_optim_star", "digits_optim_star_zero3"):
            plan = run(DIGITS_OPTIM, "--deployment", dep, "--steps", 2)
            built = build_deployment("examples/digits_mlp_optim.alpha", dep, tmp_path / "roles")
            rec = launch(built, records=tmp_path / "runs", deadline_ms=20000, steps=2)
            assert rec["passed"] and rec["published"] == plan, rec["roles"]
            published.add(plan)
    finally:
        os.chdir(cwd)
    assert len(published) == 1 and "W2_exp_avg_sq[9,31]" in published.pop()


# -- against torch -------------------------------------------------------------------------------
def torch_python() -> str | None:
    py = os.environ.get("ALPHAC_TORCH_PYTHON")
    if py:
        return py
    import importlib.util
    return sys.executable if importlib.util.find_spec("torch") else None


TORCH = {   # betas whose powers are exact for 12 steps: torch's `beta ** step` is then the product
    "sgd": [{"lr": 0.1}, {"lr": 0.1, "momentum": 0.9, "dampening": 0.25, "weight_decay": 0.01},
            {"lr": 0.1, "momentum": 0.9, "nesterov": True}],
    "adam": [{"lr": 0.01, "betas": [0.75, 0.875]},
             {"lr": 0.01, "betas": [0.25, 0.625], "eps": 1e-6, "weight_decay": 0.1}],
    "adamw": [{"lr": 0.01, "betas": [0.75, 0.625]}],
    "rmsprop": [{"lr": 0.01}, {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "weight_decay": 0.1}],
    "adagrad": [{"lr": 0.1, "lr_decay": 0.01, "initial_accumulator_value": 0.1}],
}
X = [[1.0, 2.0, -0.5, 0.25, 3.0], [0.5, -1.0, 0.7, 1.5, -2.0], [2.0, 0.25, 0.1, -0.3, 0.9]]
W0 = [0.3, -0.2, 0.0, 1.1, -0.7]


def hyper_text(h: dict) -> str:
    def v(x):
        return "true" if x is True else f"({x[0]!r}, {x[1]!r})" if isinstance(x, list) else repr(x)
    return ", ".join(f"{k} = {v(x)}" for k, x in h.items())


CASES = [(kind, k) for kind in TORCH for k in range(len(TORCH[kind]))]
STEPS = 12


GOLDEN = HERE / "golden" / "torch_optim.json"


def torch_jobs() -> list[dict]:
    return [{"kind": kind, "hypers": TORCH[kind][k], "x": X, "w": W0, "steps": STEPS} for kind, k in CASES]


def run_torch(py: str) -> dict:
    """torch's states after each step, for every case (tests/optim/torch_steps.py, one process)."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    r = subprocess.run([py, HERE / "optim" / "torch_steps.py"], input=json.dumps(torch_jobs()), text=True,
                       capture_output=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    return {"torch": lines[0], "jobs": torch_jobs(), "runs": [json.loads(line) for line in lines[1:]]}


@pytest.fixture(scope="module")
def torch_runs() -> list[list[dict]]:
    """torch's states after each step, for every case: tests/golden/torch_optim.json, written by
    torch itself (`ALPHAC_TORCH_PYTHON=PY python tests/test_optim.py` rewrites it); where torch is
    importable here, it is run again and must give the golden file's bits."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["jobs"] == torch_jobs(), "the cases changed: rewrite tests/golden/torch_optim.json"
    py = torch_python()
    if py is not None:
        assert run_torch(py)["runs"] == golden["runs"]
    return golden["runs"]


@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda c: "%s-%d" % CASES[c])
def test_torch_from_the_same_weights_gives_the_same_bits(torch_runs, case, tmp_path):
    kind, k = CASES[case]
    src = tmp_path / "q.alpha"
    src.write_text(f"learner q\ndata x = {X}\nparam w: f64[5] = {W0}\n"
                   "loss(i) = sum(0.5 * (w - x[i])^2)\n"
                   f"optimizer {kind}({hyper_text(TORCH[kind][k])}) for w\n")
    for step, want in enumerate(torch_runs[case], 1):
        got = {}
        for ln in run(src, "--steps", step).splitlines():
            name, bits = ln.split()
            got.setdefault(re.sub(r"\[\d+\]$", "", name), []).append(bits)
        for name, coords in want.items():
            mine = got["w" if name == "w" else f"w_{name}"]
            assert mine == [struct.pack(">d", float.fromhex(c)).hex() for c in coords], (step, name)


# -- misuse --------------------------------------------------------------------------------------
MISUSE = [
    ("optimizer adamm(lr = 0.1) for W", "E0070", "unknown optimizer `adamm`", "did you mean `adam`?"),
    ("optimizer adam(lr = -0.1) for W", "E0071", "adam's `lr` must be at least 0", None),
    ("optimizer adam(betas = (0.9, 1.0)) for W", "E0071", "must be at least 0 and below 1", None),
    ("optimizer adam(betas = 0.9) for W", "E0071", "`betas` is a tuple of 2", None),
    ("optimizer adam(lrr = 0.1) for W", "E0071", "has no hyperparameter `lrr`", None),
    ("optimizer adam(lr = 0.1, lr = 0.2) for W", "E0071", "`lr` is given twice", None),
    ("optimizer adam(lr = W) for b", "E0071", "`lr` is a number, not an array", None),
    # hyperparameters of the update (issue 47): those a compile-time `if` or a state's initial
    # value reads stay constants; an unknown name is still E0020, at the user's value
    ("update {\n  let s = min(1, 1 / (1 + step))\n}\noptimizer adam(weight_decay = s) for W",
     "E0071", "`weight_decay` decides which form the optimizer takes, so it must be a constant", None),
    ("optimizer sgd(lr = 0.1, momentum = 0.5 * step) for W", "E0071",
     "`momentum` decides which form the optimizer takes", None),
    ("optimizer adagrad(initial_accumulator_value = step) for W", "E0071",
     "`initial_accumulator_value` sets a state's initial value, so it must be a constant", None),
    ("optimizer adam(lr = lr_t) for W", "E0020", "unknown name `lr_t`", None),
    ("optimizer adam(grad_scale = (1, 2)) for W", "E0071", "`grad_scale` is a number", None),
    ("optimizer mine() for W\noptimizer mine(grad_scale = 1) {\n  w = w - grad(w)\n}", "E0071",
     "`grad_scale` is every optimizer's gradient scale, not a definition's", None),
    ("optimizer sgd(lr = 0.1, nesterov = true) for W", "E0071",
     "Nesterov momentum requires a momentum above 0", None),
    ("optimizer sgd(lr = 0.1, nesterov = 2) for W", "E0071", "must be `true` or `false`", None),
    ("optimizer sgd(lr = 0.1) for t", "E0072", "`t` is a data, not a param", None),
    ("optimizer sgd(lr = 0.1) for W, W", "E0072", "`W` already has an optimizer", None),
    ("optimizer sgd(lr = 0.1) for *\noptimizer adam() for *", "E0072", "a second `for *`", None),
    ("state W_exp_avg: f64 = 0\noptimizer adam() for W", "E0072",
     "names its state `W_exp_avg`, declared at line 10", None),
    # an error in the library's statements: at the user's line, not the library's
    ("update {\n  W = W * 0.5\n}\noptimizer sgd(lr = 0.1) for W", "E0053",
     "`W` is assigned twice in the update", None),
]


@pytest.mark.parametrize("case", MISUSE, ids=lambda c: c[1] + ":" + c[0].split("\n")[-1][:30])
def test_a_misuse_is_refused_by_name_at_the_users_line(case, tmp_path):
    text, code, message, hint = case
    src = tmp_path / "bad.alpha"
    src.write_text(BASE + text + "\n")
    rc, out, err = alphac("check", src)
    lines = (BASE + text).splitlines()
    line = max(k for k, ln in enumerate(lines, 1) if ln.startswith("optimizer"))     # the last
    assert rc != 0 and f"bad.alpha:{line}:" in err and f"error[{code}]" in err and message in err, err
    assert hint is None or hint in err
    assert "optimizers.alpha" not in err and "Traceback" not in err


def test_a_file_defines_its_own_optimizer_in_the_librarys_syntax(tmp_path):
    own, hand = tmp_path / "own.alpha", tmp_path / "hand.alpha"
    own.write_text(BASE + "optimizer heavy_ball(lr: nonneg = 0.1, mu = 0.5) {\n"
                   "  state velocity = 0\n  velocity = mu * velocity - lr * grad(w)\n"
                   "  w = w + velocity\n}\noptimizer heavy_ball(lr = 0.05) for *\n")
    hand.write_text(BASE + "state W_velocity: f64[2, 3] = 0\nstate b_velocity: f64[2] = 0\n"
                    "update {\n  W_velocity = 0.5 * W_velocity - 0.05 * grad(W)\n"
                    "  W = W + W_velocity\n  b_velocity = 0.5 * b_velocity - 0.05 * grad(b)\n"
                    "  b = b + b_velocity\n}\n")
    assert run(own, "--steps", 3) == run(hand, "--steps", 3)


def test_the_library_parses_clean_and_defines_the_five():
    from alphac.diag import Sink
    from alphac.types.optim import library
    sink = Sink()
    assert sorted(library(sink)) == ["adagrad", "adam", "adamw", "rmsprop", "sgd"] and sink.ok


if __name__ == "__main__":      # rewrite the golden torch runs with a Python that has torch
    GOLDEN.write_text(json.dumps(run_torch(torch_python() or sys.exit("no torch: set ALPHAC_TORCH_PYTHON")),
                                 indent=1, sort_keys=True) + "\n")
