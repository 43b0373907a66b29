#!/usr/bin/env python3
"""The digits MLP's final training loss and held-out test accuracy, from a printed state.

    alphac run examples/digits_mlp.alpha --steps 300 > state.txt    # or the executable, a launch
    python examples/data/digits_eval.py state.txt [--torch STEPS]

The state is read as `NAME[r,c] HEX` lines (binary64 bit patterns; `--format decimal` reads
too); the loss is the mean softmax cross-entropy over the 1500 training images and the accuracy
is over the last 297 images (examples/data/make_data.py), both in numpy float64. `--torch STEPS`
also trains the same network from the same initial weights in torch float64 (one thread,
full batch, torch.optim.Adam lr 0.01) and prints the same figures for it.
"""
import argparse
import struct
import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent
SHAPES = {"W1": (32, 64), "b1": (32,), "W2": (10, 32), "b2": (10,)}


def read_state(text: str) -> dict[str, np.ndarray]:
    out = {n: np.full(s, np.nan) for n, s in SHAPES.items()}
    for line in text.split("\n"):
        if not line.strip():
            continue
        name, value = line.split()
        base, _, idx = name.partition("[")
        if base not in out:
            continue
        v = (struct.unpack("<d", bytes.fromhex(value)[::-1])[0]
             if len(value) == 16 and "." not in value else float(value))
        out[base][tuple(int(k) for k in idx.rstrip("]").split(","))] = v
    assert not any(np.isnan(a).any() for a in out.values()), "the state lacks a coordinate"
    return out


def figures(p: dict[str, np.ndarray]) -> tuple[float, float]:
    load = lambda n: np.load(DATA / f"digits_{n}.npy")
    x, y, xt, yt = load("x_train"), load("y_train").astype(int), load("x_test"), load("y_test").astype(int)
    logits = lambda a: np.tanh(a @ p["W1"].T + p["b1"]) @ p["W2"].T + p["b2"]
    z = logits(x)
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    loss = float(np.mean(lse - z[np.arange(len(y)), y]))
    return loss, float(np.mean(logits(xt).argmax(axis=1) == yt))


def torch_setup():
    """The torch float64 model at the initial values, its Adam and the training data, one
    thread: what torch_steps trains (the setup, timed apart from the steps)."""
    import torch
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    load = lambda n: torch.from_numpy(np.load(DATA / f"digits_{n}.npy"))
    x, y = load("x_train"), load("y_train").long()
    l1, l2 = torch.nn.Linear(64, 32), torch.nn.Linear(32, 10)
    with torch.no_grad():
        for mod, w, b in ((l1, "w1", "b1"), (l2, "w2", "b2")):
            mod.weight.copy_(load(w))
            mod.bias.copy_(load(b))
    net = torch.nn.Sequential(l1, torch.nn.Tanh(), l2)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    return net, opt, x, y


def torch_steps(model, steps: int) -> None:
    import torch
    net, opt, x, y = model
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()


def torch_params(model) -> dict[str, np.ndarray]:
    l1, l2 = model[0][0], model[0][2]
    return {"W1": l1.weight.detach().numpy(), "b1": l1.bias.detach().numpy(),
            "W2": l2.weight.detach().numpy(), "b2": l2.bias.detach().numpy()}


def torch_train(steps: int) -> dict[str, np.ndarray]:
    import time
    model = torch_setup()
    t0 = time.perf_counter()
    torch_steps(model, steps)
    print(f"torch: {(time.perf_counter() - t0) / steps * 1e3:.2f} ms per step (one thread, "
          f"the steps alone)")
    return torch_params(model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state", help="the printed state (a file, or - for standard input)")
    ap.add_argument("--torch", type=int, metavar="STEPS", help="also train it in torch float64")
    args = ap.parse_args()
    text = sys.stdin.read() if args.state == "-" else Path(args.state).read_text()
    ours = read_state(text)
    loss, acc = figures(ours)
    print(f"alpha: training loss {loss:.6f}, test accuracy {acc:.4f} ({round(acc * 297)}/297)")
    if args.torch:
        theirs = torch_train(args.torch)
        loss, acc = figures(theirs)
        print(f"torch: training loss {loss:.6f}, test accuracy {acc:.4f} ({round(acc * 297)}/297)")
        diff = max(float(np.abs(ours[n] - theirs[n]).max()) for n in SHAPES)
        print(f"largest |alpha - torch| over the params: {diff:.3g}")


if __name__ == "__main__":
    main()
