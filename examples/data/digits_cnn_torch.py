#!/usr/bin/env python3
"""examples/digits_cnn.alpha in PyTorch float64, from the same initial weights: its loss curve
and test accuracy, beside Alpha's.

    alphac run examples/digits_cnn.alpha --steps 200 --metrics alpha.jsonl > /dev/null
    python examples/data/digits_cnn_torch.py --steps 200 --alpha alpha.jsonl [--golden FILE]

Trains full batch on the 1500 training images (examples/data/make_data.py) with one thread and
ATEN_CPU_CAPABILITY=default (no fused multiply-add in Adam's kernels); prints the mean loss of
the last step (of the params the step starts from, as Alpha's metrics), the training loss after
it, the loss and accuracy on the 297 held-out images, and with `--alpha` how the two loss curves
differ. `--golden FILE` writes the steps' losses as bits (tests/golden/torch_digits_cnn.json).
`train` and `report` are examples/data/seq_attention_torch.py's too.
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


def cnn() -> torch.nn.Module:
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(36, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    with torch.no_grad():
        for p, name in zip(net.parameters(), ("k", "kb", "w1", "b1", "w2", "b2")):
            p.copy_(load(f"cnn_{name}").reshape(p.shape))
    return net


def digits(split: str):
    return load(f"x_{split}").reshape(-1, 1, 8, 8), load(f"y_{split}").long()


def train(net, x, y, steps: int, lr=0.01, warmup=10, total=200, max_norm=1.0) -> list[float]:
    """Full-batch Adam at a linear warm-up then cosine lr, on gradients clipped by their global
    norm: the mean loss at each step."""
    opt = torch.optim.Adam(net.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (t + 1) / warmup if t < warmup else
                                              0.5 * (1 + math.cos(math.pi * (t - warmup) / (total - warmup))))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm, foreach=False)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def report(make_net, data, doc: str, **hyper) -> None:
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--alpha", type=Path, help="Alpha's metrics (alphac run --metrics FILE)")
    ap.add_argument("--golden", type=Path, help="write the steps' losses' bits here (JSON)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    net, (x, y), (xt, yt) = make_net(), data("train"), data("test")
    losses = train(net, x, y, args.steps, **hyper)
    with torch.no_grad():
        final = torch.nn.functional.cross_entropy(net(x), y).item()
        test = torch.nn.functional.cross_entropy(net(xt), yt).item()
        right = int((net(xt).argmax(dim=1) == yt).sum())
    print(f"torch {torch.__version__}: step {args.steps} loss {losses[-1]:.6f}, training loss "
          f"after it {final:.6f}, test loss {test:.6f}, test accuracy {right}/{len(yt)} "
          f"({right / len(yt):.4f})")
    if args.alpha:
        alpha = [json.loads(line)["loss"] for line in args.alpha.read_text().splitlines()]
        n = min(len(alpha), len(losses))
        ulps = [abs(a - t) / math.ulp(t) for a, t in zip(alpha[:n], losses[:n])]
        k = max(range(n), key=ulps.__getitem__)
        print(f"alpha vs torch over {n} steps: {ulps.count(0)} losses the same bits; largest "
              f"difference {ulps[k]:.0f} ulps at step {k + 1} ({alpha[k]!r} vs {losses[k]!r})")
    if args.golden:
        args.golden.write_text(json.dumps({"torch": torch.__version__, "steps": args.steps, "loss": [
            struct.pack(">d", v).hex() for v in losses]}, indent=1) + "\n")


if __name__ == "__main__":
    report(cnn, digits, __doc__)
