"""Benchmark: the digits MLP (examples/digits_mlp.alpha: 64-32-10, tanh, softmax cross-entropy,
full-batch Adam lr 0.01 on the first 1,500 images) trained by alphac and by PyTorch in float64,
side by side: the same architecture, initial values (examples/data/digits_*.npy), optimizer,
batches and epochs, one thread each.

For each system: the time per epoch (wall clock over the training run), the final training loss
(the mean loss over the 1,500 training images at the final state, numpy float64, from
examples/data/digits_eval.py) and the test accuracy on the last 297 images. alphac's row is the
x86-64 executables, the baseline and the x86_64-v3 and x86_64-v4 levels (AVX2, AVX-512, where
the CPU has them), each
`--steps E` in one process; the evaluation is the executable's own
(`--evaluate`, built with `--eval-data`) and equals digits_eval.py's. Without torch installed its
row says so. Needs the data (`make data`).

    python bench/digits.py [--epochs E] [--quick]
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


def alphac_row(epochs: int, ev, target: str = "x86_64") -> dict:
    src = ROOT / "examples" / "digits_mlp.alpha"
    lr = compile_file(src).learner
    test = [("x", str(DATA / "digits_x_test.npy")), ("y", str(DATA / "digits_y_test.npy"))]
    with tempfile.TemporaryDirectory() as tmp:
        exe, ck = Path(tmp) / "digits", Path(tmp) / "ck"
        exe.write_bytes(build_learner(lr, target, evaluation_for(lr, test, None, str(src))).elf)
        os.chmod(exe, 0o755)
        t0 = time.perf_counter()
        run = subprocess.run([str(exe), "--steps", str(epochs * lr.batches), "--checkpoint", str(ck)],
                             capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - t0
        scored = subprocess.run([str(exe), "--resume", str(ck), "--steps", "0", "--evaluate"],
                                capture_output=True, text=True, check=True).stdout.split()
    loss, acc = ev.figures(ev.read_state(run.stdout))
    correct = int(scored[scored.index("correct") + 1])
    assert round(acc * 297) == correct, (acc, correct)     # numpy's argmax = the executable's
    return {"system": f"alphac {target} executable", "ms": seconds / epochs * 1e3, "loss": loss,
            "correct": correct}


def torch_row(epochs: int, ev) -> dict:
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"system": "PyTorch float64 (not installed: pip install torch)"}
    t0 = time.perf_counter()
    params = ev.torch_train(epochs)
    seconds = time.perf_counter() - t0
    loss, acc = ev.figures(params)
    return {"system": f"PyTorch {torch.__version__} float64, 1 thread", "ms": seconds / epochs * 1e3,
            "loss": loss, "correct": round(acc * 297)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="5 epochs")
    args = ap.parse_args()
    epochs = 5 if args.quick else args.epochs
    if not (DATA / "digits_x_train.npy").exists():
        sys.exit("bench/digits.py: no data; run `make data` (examples/data/make_data.py)")
    ev = digits_eval()
    from alphac.targets import host_runs
    rows = [alphac_row(epochs, ev)] + [alphac_row(epochs, ev, level) if host_runs(level) else
                                       {"system": f"alphac {level} (not run: no {what} here)"}
                                       for level, what in (("x86_64-v3", "AVX2"), ("x86_64-v4", "AVX-512"))]
    rows.append(torch_row(epochs, ev))
    print(f"digits MLP 64-32-10, full batch, Adam lr 0.01, {epochs} epochs (1 step each)\n")
    print("| system | time per epoch ms | final training loss | test accuracy |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        if "ms" not in r:
            print(f"| {r['system']} | - | - | - |")
            continue
        print(f"| {r['system']} | {r['ms']:.2f} | {r['loss']:.6f} | {r['correct'] / 297:.4f} "
              f"({r['correct']}/297) |")


if __name__ == "__main__":
    main()
