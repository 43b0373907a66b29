"""Benchmark: the digits MLP (examples/digits_mlp.alpha: 64-32-10, tanh, softmax cross-entropy,
full-batch Adam lr 0.01 on the first 1,500 images) trained by alphac and by PyTorch in float64,
side by side: the same architecture, initial values (examples/data/digits_*.npy), optimizer,
batches and epochs, one thread each.

What is timed is the same span on both sides: training steps, after warm-up steps, set-up
apart. PyTorch: `torch_steps` of N steps after W untimed ones, the model and data made before
(examples/data/digits_eval.py). alphac: an executable runs a whole process, so its steps are
timed by difference: a run of W + N steps minus a run of W steps (start-up, reading the data and
the first W steps cancel), over N. The systems take turns in each of R rounds (interleaved), and
the table shows the median time a step and its spread (lowest..highest) over the rounds.

Then, apart from the timing, each system trains E epochs from the initial values, and the
table shows the final training loss (numpy float64 over the 1,500 training images, from
examples/data/digits_eval.py) and the test accuracy on the last 297 images. alphac's rows are
the x86-64 executables, the baseline and the x86_64-v3 and x86_64-v4 levels (AVX2, AVX-512,
where the CPU has them); its evaluation is the executable's own (`--evaluate`, built with
`--eval-data`) and equals digits_eval.py's. Without torch installed its row says so. Needs the
data (`make data`).

    python bench/digits.py [--epochs E] [--steps N] [--warmup W] [--rounds R] [--quick]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "examples" / "data"

from alphac.build import build_learner, evaluation_for  # noqa: E402
from alphac.driver import compile_file                # noqa: E402


def digits_eval():
    spec = importlib.util.spec_from_file_location("digits_eval", DATA / "digits_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def alphac_exe(tmp: Path, target: str):
    src = ROOT / "examples" / "digits_mlp.alpha"
    lr = compile_file(src).learner
    test = [("x", str(DATA / "digits_x_test.npy")), ("y", str(DATA / "digits_y_test.npy"))]
    exe = tmp / f"digits.{target}"
    exe.write_bytes(build_learner(lr, target, evaluation_for(lr, test, None, str(src))).elf)
    os.chmod(exe, 0o755)
    return exe, lr.batches


def alphac_run(exe: Path, steps: int) -> float:
    """Seconds for a whole run of `steps` steps (its output discarded)."""
    t0 = time.perf_counter()
    subprocess.run([str(exe), "--steps", str(steps)], capture_output=True, check=True)
    return time.perf_counter() - t0


def alphac_figures(exe: Path, batches: int, epochs: int, ev, tmp: Path) -> dict:
    ck = tmp / f"ck.{exe.name}"
    run = subprocess.run([str(exe), "--steps", str(epochs * batches), "--checkpoint", str(ck)],
                         capture_output=True, text=True, check=True)
    scored = subprocess.run([str(exe), "--resume", str(ck), "--steps", "0", "--evaluate"],
                            capture_output=True, text=True, check=True).stdout.split()
    loss, acc = ev.figures(ev.read_state(run.stdout))
    correct = int(scored[scored.index("correct") + 1])
    assert round(acc * 297) == correct, (acc, correct)     # numpy's argmax = the executable's
    return {"loss": loss, "correct": correct}


def torch_available():
    try:
        import torch
        return torch
    except ImportError:
        return None


def torch_time(ev, warmup: int, steps: int) -> float:
    """Seconds for `steps` steps after `warmup` untimed ones, the set-up outside the span."""
    model = ev.torch_setup()
    ev.torch_steps(model, warmup)
    t0 = time.perf_counter()
    ev.torch_steps(model, steps)
    return time.perf_counter() - t0


def median_spread(xs: list[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    mid = len(s) // 2
    med = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    return med, s[0], s[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=300, help="epochs of the accuracy run")
    ap.add_argument("--steps", type=int, default=200, help="timed steps a round")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before them")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--quick", action="store_true", help="5 epochs, 5 + 2 steps, 2 rounds")
    args = ap.parse_args()
    if args.quick:
        args.epochs, args.steps, args.warmup, args.rounds = 5, 5, 2, 2
    if not (DATA / "digits_x_train.npy").exists():
        sys.exit("bench/digits.py: no data; run `make data` (examples/data/make_data.py)")
    ev = digits_eval()
    from alphac.targets import host_runs
    torch = torch_available()
    levels = [t for t in ("x86_64", "x86_64-v3", "x86_64-v4") if host_runs(t)]
    missing = [(t, w) for t, w in (("x86_64-v3", "AVX2"), ("x86_64-v4", "AVX-512")) if not host_runs(t)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        exes = {t: alphac_exe(tmp, t) for t in levels}
        times: dict[str, list[float]] = {t: [] for t in levels}
        if torch:
            times["torch"] = []
        for _ in range(args.rounds):                  # each system in turn, every round
            for t, (exe, batches) in exes.items():
                w = args.warmup * batches
                n = args.steps * batches
                times[t].append((alphac_run(exe, w + n) - alphac_run(exe, w)) / args.steps)
            if torch:
                times["torch"].append(torch_time(ev, args.warmup, args.steps) / args.steps)
        rows = []
        for t, (exe, batches) in exes.items():
            rows.append({"system": f"alphac {t} executable", "s": times[t],
                         **alphac_figures(exe, batches, args.epochs, ev, tmp)})
    rows += [{"system": f"alphac {t} (not run: no {w} here)"} for t, w in missing]
    if torch:
        model = ev.torch_setup()
        ev.torch_steps(model, args.epochs)
        loss, acc = ev.figures(ev.torch_params(model))
        rows.append({"system": f"PyTorch {torch.__version__} float64, 1 thread", "s": times["torch"],
                     "loss": loss, "correct": round(acc * 297)})
    else:
        rows.append({"system": "PyTorch float64 (not installed: pip install torch)"})
    print(f"digits MLP 64-32-10, full batch, Adam lr 0.01: a step's time over {args.steps} steps "
          f"after {args.warmup} (median and spread of {args.rounds} interleaved rounds); the loss "
          f"and accuracy after {args.epochs} epochs (1 step each)\n")
    print("| system | ms a step, median | spread | final training loss | test accuracy |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        if "s" not in r:
            print(f"| {r['system']} | - | - | - | - |")
            continue
        med, lo, hi = median_spread(r["s"])
        print(f"| {r['system']} | {med * 1e3:.3f} | {lo * 1e3:.3f}..{hi * 1e3:.3f} | "
              f"{r['loss']:.6f} | {r['correct'] / 297:.4f} ({r['correct']}/297) |")


if __name__ == "__main__":
    main()
