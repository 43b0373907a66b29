"""Benchmark: real MLPs on one CPU thread, alphac's executables against PyTorch float64 (issue 43).

Three models, softmax cross-entropy, full-batch Adam lr 0.01 in torch's order, as
examples/digits_mlp.alpha: on the digits data (examples/data, the 1,500 training images) the
digits MLP 64-32-10 tanh (the initial values of examples/data/digits_*.npy:
examples/digits_mlp.alpha's learner) and 64-256-256-10 relu; and 784-256-10 tanh (bench/gpu.py's
`mlp`: an MNIST-sized layer whose W1, 1.6 MB, is beyond a core's L2) on 256 samples drawn here
(seed 43: pixels uniform in [0, 1), labels 0..9). Initial values but the digits MLP's are drawn
here, seed 43, uniform in +-1/sqrt(fan_in) as torch's nn.Linear draws them. Each learner is generated as Alpha source in a temporary
directory beside its initial values; PyTorch builds the same network from the same values
(nn.Linear, torch.optim.Adam, one thread, float64, eager autograd).

Timed: the same span on both sides, training steps after warm-up, set-up apart. PyTorch, a
process of its own per round (`--torch-python`, default this interpreter when it imports torch):
the model and data made, W untimed steps, then N timed steps, by `time.process_time` (CPU) and
`perf_counter` (wall). alphac: a run of W + N steps minus a run of W steps (start-up, reading the
data, the first W steps and printing the state cancel), CPU time (user + system of the child,
`os.wait4`) and wall, over N. The systems take turns in each of R rounds (interleaved); the table
gives the median a step and the spread (least..most) over the rounds, CPU first: on a shared host
the wall time swings, the CPU time much less. The ratio is PyTorch's CPU median over alphac's
(above 1: alphac faster; issue 43's goal is 1.2).

Checked, apart from the timing: each executable's printed state after C steps is the reference
interpreter's byte for byte (`bits = interpreter`), and each system's training loss after E
epochs (numpy float64 over the 1,500 images, from its parameters). Without torch its rows say
so. Needs the data (`make data`).

    python bench/mlp.py [--models digits,wide,mnist] [--steps N] [--warmup W] [--rounds R]
                        [--epochs E] [--check-steps C] [--torch-python PATH] [--quick]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "examples" / "data"
MODELS = {"digits": ((64, 32, 10), "tanh"), "wide": ((64, 256, 256, 10), "relu"),
          "mnist": ((784, 256, 10), "tanh")}
DRAWN = {"mnist": 256}     # a model on drawn samples: how many (the others: the digits data)
ADAM = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}


def model_name(key: str) -> str:
    sizes, act = MODELS[key]
    return "MLP " + "-".join(map(str, sizes)) + " " + act


def initial_values(key: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(W, b)] a layer: the digits example's files, or seed 43's uniform draws."""
    sizes, _ = MODELS[key]
    if key == "digits":
        return [(np.load(DATA / f"digits_w{l}.npy"), np.load(DATA / f"digits_b{l}.npy")) for l in (1, 2)]
    rng = np.random.default_rng(43)
    out = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        bound = 1 / np.sqrt(fan_in)
        out.append((rng.uniform(-bound, bound, (fan_out, fan_in)), rng.uniform(-bound, bound, fan_out)))
    return out


def dataset(key: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) the model trains on: the digits images, or seed 43's drawn samples."""
    if key not in DRAWN:
        return np.load(DATA / "digits_x_train.npy"), np.load(DATA / "digits_y_train.npy")
    rng = np.random.default_rng(43)
    x = rng.uniform(0.0, 1.0, (DRAWN[key], MODELS[key][0][0]))
    return x, rng.integers(0, MODELS[key][0][-1], DRAWN[key]).astype(np.float64)


def source(key: str) -> str:
    """The learner: `act` after every layer but the last, Adam in torch's order."""
    sizes, act = MODELS[key]
    n = len(sizes) - 1
    text = ["learner mlp", 'data x = load("data/x.npy")', 'data y = load("data/y.npy")']
    text += [f"const {k} = {v!r}" for k, v in ADAM.items()]
    text += ["const c1 = 1 - beta1", "const c2 = 1 - beta2"]
    for l in range(1, n + 1):
        shapes = {f"W{l}": f"f64[{sizes[l]}, {sizes[l - 1]}]", f"b{l}": f"f64[{sizes[l]}]"}
        for p, shape in shapes.items():
            text += [f'const {p}init = load("init/{p}.npy")', f"param {p}: {shape} = {p}init",
                     f"state m{p}: {shape} = 0.0", f"state v{p}: {shape} = 0.0"]
    text += ["state p1: f64 = 1.0", "state p2: f64 = 1.0", "loss(i) {", "  let h0 = x[i]"]
    text += [f"  let h{l} = {act}(W{l} @ h{l - 1} + b{l})" for l in range(1, n)]
    text += [f"  let z = W{n} @ h{n - 1} + b{n}", "  logsumexp(z) - dot(onehot(y[i], 10), z)", "}",
             "update {", "  p1 = p1 * beta1", "  p2 = p2 * beta2", "  let step = lr / (1 - p1)",
             "  let bc2 = sqrt(1 - p2)"]
    for p in [f"{w}{l}" for l in range(1, n + 1) for w in "Wb"]:
        text += [f"  let g{p} = grad({p})", f"  m{p} = beta1 * m{p} + c1 * g{p}",
                 f"  v{p} = beta2 * v{p} + c2 * (g{p} * g{p})",
                 f"  {p} = {p} - step * (m{p} / (sqrt(v{p}) / bc2 + eps))"]
    return "\n".join(text + ["}", ""])


def write_learner(key: str, into: Path) -> Path:
    into.mkdir()
    (into / "data").mkdir()
    x, y = dataset(key)
    np.save(into / "data" / "x.npy", x)
    np.save(into / "data" / "y.npy", y)
    (into / "init").mkdir()
    for l, (w, b) in enumerate(initial_values(key), 1):
        np.save(into / "init" / f"W{l}.npy", w)
        np.save(into / "init" / f"b{l}.npy", b)
    src = into / "mlp.alpha"
    src.write_text(source(key))
    return src


def read_state(text: str, key: str) -> list[np.ndarray]:
    """The printed state's parameters (`NAME[r,c] HEX` lines), W1, b1, W2, ..."""
    vals: dict[str, dict] = {}
    for line in text.splitlines():
        name, hexbits = line.split()
        base, _, idx = name.partition("[")
        vals.setdefault(base, {})[idx.rstrip("]")] = np.frombuffer(bytes.fromhex(hexbits)[::-1], "<f8")[0]
    out = []
    for l, (w, b) in enumerate(initial_values(key), 1):
        for p, like in ((f"W{l}", w), (f"b{l}", b)):
            a = np.array([vals[p][",".join(map(str, ix))] for ix in np.ndindex(like.shape)])
            out.append(a.reshape(like.shape))
    return out


def training_loss(key: str, params: list[np.ndarray]) -> float:
    """Mean softmax cross-entropy over the training samples, numpy float64."""
    act = {"tanh": np.tanh, "relu": lambda a: np.maximum(a, 0.0)}[MODELS[key][1]]
    h, y = dataset(key)
    y = y.astype(int)
    for l in range(0, len(params), 2):
        h = h @ params[l].T + params[l + 1]
        if l + 2 < len(params):
            h = act(h)
    m = h.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(h - m).sum(axis=1, keepdims=True)))[:, 0]
    return float(np.mean(lse - h[np.arange(len(y)), y]))


def torch_worker(key: str, warmup: int, steps: int, save: str | None) -> None:
    """One PyTorch round in this process: set-up, `warmup` untimed steps, `steps` timed ones;
    prints `CPU_SECONDS WALL_SECONDS`, and saves the parameters to `save` (.npz) if asked."""
    import torch
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    sizes, act = MODELS[key]
    layers = []
    for l, (w, b) in enumerate(initial_values(key)):
        lin = torch.nn.Linear(sizes[l], sizes[l + 1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin] + ([{"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[act]()] if l < len(sizes) - 2 else [])
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(net.parameters(), lr=ADAM["lr"], betas=(ADAM["beta1"], ADAM["beta2"]),
                           eps=ADAM["eps"])
    xs, ys = dataset(key)
    x, y = torch.from_numpy(xs), torch.from_numpy(ys).long()

    def train(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    train(warmup)
    c0, t0 = time.process_time(), time.perf_counter()
    train(steps)
    print(time.process_time() - c0, time.perf_counter() - t0)
    if save:
        np.savez(save, *[p.detach().numpy() for p in net.parameters()])


def torch_python(given: str | None) -> tuple[str | None, str]:
    """The interpreter that runs PyTorch and its version, or (None, why not)."""
    exe = given or sys.executable
    r = subprocess.run([exe, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if r.returncode:
        return None, f"not installed for {'--torch-python' if given else 'this python'}: pip install torch"
    return exe, r.stdout.strip()


def torch_round(py: str, key: str, warmup: int, steps: int, save: Path | None = None) -> tuple[float, float]:
    r = subprocess.run([py, __file__, "--torch-worker", key, str(warmup), str(steps),
                        *([str(save)] if save else [])], capture_output=True, text=True, check=True)
    cpu, wall = map(float, r.stdout.split())
    return cpu, wall


def alphac_run(exe: Path, steps: int) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of a whole run of `steps` steps."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen([str(exe), "--steps", str(steps)], stdout=out, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        assert p.returncode == 0, (exe, p.returncode)
        out.seek(0)
        return ru.ru_utime + ru.ru_stime, wall, out.read().decode()


def median_spread(xs: list[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    mid = len(s) // 2
    return (s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2), s[0], s[-1]


def bench_model(key: str, args, py: str | None, levels: list[str], tmp: Path) -> list[dict]:
    from alphac.api import run as interpret
    from alphac.build import build_learner
    from alphac.driver import compile_file
    src = write_learner(key, tmp / key)
    compiled = compile_file(src)
    exes = {}
    for t in levels:
        exes[t] = tmp / key / f"mlp.{t}"
        exes[t].write_bytes(build_learner(compiled.learner, t).elf)
        exes[t].chmod(0o755)
    cpu: dict[str, list[float]] = {t: [] for t in [*levels, "torch"]}
    wall: dict[str, list[float]] = {t: [] for t in [*levels, "torch"]}
    w, n = args.warmup, args.steps
    for _ in range(args.rounds):                       # each system in turn, every round
        for t, exe in exes.items():
            c1, t1, _ = alphac_run(exe, w + n)
            c0, t0, _ = alphac_run(exe, w)
            cpu[t].append((c1 - c0) / n)
            wall[t].append((t1 - t0) / n)
        if py:
            c, t = torch_round(py, key, w, n)
            cpu["torch"].append(c / n)
            wall["torch"].append(t / n)
    expected = interpret(compiled, steps=args.check_steps)
    rows = []
    for t, exe in exes.items():
        same = alphac_run(exe, args.check_steps)[2] == expected
        loss = training_loss(key, read_state(alphac_run(exe, args.epochs)[2], key))
        rows.append({"system": f"alphac {t}", "cpu": cpu[t], "wall": wall[t], "loss": loss,
                     "bits": "yes" if same else "NO"})
    if py:
        torch_round(py, key, args.epochs, 0, tmp / key / "torch.npz")
        with np.load(tmp / key / "torch.npz") as z:
            params = [z[f"arr_{i}"] for i in range(len(z.files))]
        rows.append({"system": "PyTorch float64", "cpu": cpu["torch"], "wall": wall["torch"],
                     "loss": training_loss(key, params), "bits": "-"})
    return rows


def main() -> None:
    if sys.argv[1:2] == ["--torch-worker"]:
        key, warmup, steps, *save = sys.argv[2:]
        return torch_worker(key, int(warmup), int(steps), save[0] if save else None)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="digits,wide,mnist", help="of: " + ", ".join(MODELS))
    ap.add_argument("--steps", type=int, default=20, help="timed steps a round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--epochs", type=int, default=100, help="epochs before the training loss")
    ap.add_argument("--check-steps", type=int, default=3, help="steps of the bits check")
    ap.add_argument("--torch-python", metavar="PATH", help="the python that imports torch")
    ap.add_argument("--quick", action="store_true", help="1 + 2 steps, 2 rounds, 2 epochs")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.epochs, args.check_steps = 2, 1, 2, 2, 1
    models = args.models.split(",")
    if any(m not in MODELS for m in models) or min(args.steps, args.warmup, args.rounds, args.epochs) < 1:
        sys.exit(f"bench/mlp.py: --models takes {', '.join(MODELS)}; counts must be at least 1")
    if not (DATA / "digits_x_train.npy").exists():
        sys.exit("bench/mlp.py: no data; run `make data` (examples/data/make_data.py)")
    sys.path.insert(0, str(ROOT))
    from alphac.targets import host_runs
    levels = [t for t in ("x86_64", "x86_64-v3", "x86_64-v4") if host_runs(t)]
    py, version = torch_python(args.torch_python)
    print(f"Full-batch Adam (1,500 digits images; 784-256-10: 256 drawn samples), one thread each: CPU (user + system) and wall "
          f"time a step over {args.steps} steps after {args.warmup}, median and spread of "
          f"{args.rounds} interleaved rounds; ratio = PyTorch's CPU median / alphac's (goal 1.2); "
          f"loss after {args.epochs} epochs; alphac's state after {args.check_steps} steps = the "
          f"interpreter's. PyTorch: " + (f"{version}, float64, torch.set_num_threads(1)" if py else version))
    missing = [t for t in ("x86_64-v3", "x86_64-v4") if t not in levels]
    if missing:
        print(f"(not run, this CPU lacks them: {', '.join(missing)})")
    print("\n| model | system | CPU ms a step, median | spread | wall ms, median | spread | "
          "PyTorch / alphac, CPU | training loss | bits = interpreter |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    bad = False
    with tempfile.TemporaryDirectory() as tmp:
        for key in models:
            rows = bench_model(key, args, py, levels, Path(tmp))
            bad |= any(r["bits"] == "NO" for r in rows)
            ref = median_spread(rows[-1]["cpu"])[0] if py else None
            for r in rows:
                c, clo, chi = median_spread(r["cpu"])
                t, tlo, thi = median_spread(r["wall"])
                ratio = f"{ref / c:.2f}x" if ref and r["bits"] != "-" else "-"
                print(f"| {model_name(key)} | {r['system']} | {c * 1e3:.3f} | {clo * 1e3:.3f}..{chi * 1e3:.3f} "
                      f"| {t * 1e3:.3f} | {tlo * 1e3:.3f}..{thi * 1e3:.3f} | {ratio} | {r['loss']:.6f} "
                      f"| {r['bits']} |")
            if not py:
                print(f"| {model_name(key)} | PyTorch float64 ({version}) | - | - | - | - | - | - | - |")
    if bad:
        sys.exit("bench/mlp.py: an executable's bits are not the interpreter's")


if __name__ == "__main__":
    main()
