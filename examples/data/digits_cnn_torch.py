#!/usr/bin/env python3
"""examples/digits_cnn.alpha in PyTorch float64, from the same initial weights: its loss curve
and test accuracy, beside Alpha's.

    alphac run examples/digits_cnn.alpha --steps 200 --metrics alpha.jsonl > /dev/null
    python examples/data/digits_cnn_torch.py --steps 200 --alpha alpha.jsonl [--golden FILE]

Trains full batch on the 1500 training images (examples/data/make_data.py) with one thread and
ATEN_CPU_CAPABILITY=default (no fused multiply-add in Adam's kernels); prints the mean loss of
every step (of the params the step starts from, as Alpha's metrics), the final training loss and
the accuracy on the 297 held-out images, and with `--alpha` the largest difference between the
two loss curves. `--golden FILE` writes the first steps' losses as bits (tests/golden/).
"""
import argparse
import json
import math
import os
import struct
from pathlib import Path

os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")
import numpy as np   # noqa: E402
import torch         # noqa: E402

DATA = Path(__file__).resolve().parent


def load(name: str) -> torch.Tensor:
    return torch.from_numpy(np.load(DATA / f"digits_{name}.npy"))


def model() -> torch.nn.Module:
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(36, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    with torch.no_grad():
        for p, name in zip(net.parameters(), ("k", "kb", "w1", "b1", "w2", "b2")):
            p.copy_(load(f"cnn_{name}").reshape(p.shape))
    return net


def train(steps: int) -> tuple[list[float], torch.nn.Module]:
    """The mean loss at each step, and the trained net."""
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    x, y = load("x_train").reshape(-1, 1, 8, 8), load("y_train").long()
    net = model()
    warmup, total = 10, 200
    opt = torch.optim.Adam(net.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (t + 1) / warmup if t < warmup else
                                              0.5 * (1 + math.cos(math.pi * (t - warmup) / (total - warmup))))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, foreach=False)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses, net


def bits(v: float) -> str:
    return struct.pack(">d", v).hex()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--alpha", type=Path, help="Alpha's metrics (alphac run --metrics FILE)")
    ap.add_argument("--golden", type=Path, help="write the steps' losses' bits here (JSON)")
    args = ap.parse_args()
    losses, net = train(args.steps)
    with torch.no_grad():
        xt, yt = load("x_test").reshape(-1, 1, 8, 8), load("y_test").long()
        right = int((net(xt).argmax(dim=1) == yt).sum())
        test = torch.nn.functional.cross_entropy(net(xt), yt).item()
        x, y = load("x_train").reshape(-1, 1, 8, 8), load("y_train").long()
        final = torch.nn.functional.cross_entropy(net(x), y).item()
    print(f"torch {torch.__version__}: step {args.steps} loss {losses[-1]:.6f}, training loss "
          f"after it {final:.6f}, test loss {test:.6f}, test accuracy {right}/297 ({right / 297:.4f})")
    if args.alpha:
        alpha = [json.loads(line)["loss"] for line in args.alpha.read_text().splitlines()]
        n = min(len(alpha), len(losses))
        d = [abs(a - t) for a, t in zip(alpha[:n], losses[:n])]
        same = sum(a == t for a, t in zip(alpha[:n], losses[:n]))
        k = max(range(n), key=d.__getitem__)
        print(f"alpha vs torch over {n} steps: {same} losses the same bits; largest difference "
              f"{d[k]:.3g} at step {k + 1} ({alpha[k]!r} vs {losses[k]!r}, relative "
              f"{d[k] / abs(losses[k]):.3g})")
    if args.golden:
        args.golden.write_text(json.dumps({"torch": torch.__version__, "steps": args.steps,
                                           "loss": [bits(v) for v in losses]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
