"""`alphac init DIR`: a small project to start from, laid out as the repository's examples are, so
that every command of the README's "Using it" runs in it from an installed wheel.

It writes DIR/examples/mine.alpha (a line fitted by Adam through points read from `.npy` files,
with three deployments: `mine_star`, a coordinator and two owners; `mine_tree`, three owners in
a hierarchy; `mine_mixed`, the star with owner 1 an AArch64 executable), its training data
(`mine_x.npy`, `mine_y.npy`, 7 points) and held-out data (`mine_test_x.npy`, `mine_test_y.npy`,
3 points) beside it. The values are exact binary64 numbers and the files numpy's format 1.0, so
the project is the same bytes everywhere. Requires numpy (alphac's one dependency). Refuses, as
InitError and writing nothing, a DIR that already holds one of these files.
"""
from __future__ import annotations

import io
from pathlib import Path

from alphac.files import write_file

LEARNER = """\
# a newcomer's learner: a line through seven points of its own, read from .npy files, by Adam
learner mine

data x = load("mine_x.npy")
data y = load("mine_y.npy")

param w: f64[2] = 0.0
state m: f64[2] = 0.0
state v: f64[2] = 0.0

loss(i) = 0.5 * (w[0] * x[i] + w[1] - y[i])^2

update {
  m = 0.9 * m + 0.1 * grad(w)
  v = 0.999 * v + 0.001 * grad(w)^2
  w = w - 0.05 * m / (sqrt(v) + 1e-8)
}

deployment mine_star {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..3, owner[1] = 3..7
}

deployment mine_tree {
  roles owner[3]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..2, owner[1] = 2..5, owner[2] = 5..7
}

# the star with owner 1 on AArch64 (run under qemu-aarch64 on an x86-64 host): the same bits
deployment mine_mixed {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..3, owner[1] = 3..7
  target owner[1] = aarch64
}
"""
DATA = {"mine_x": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5], "mine_y": [1.9, 2.6, 3.4, 4.1, 4.9, 5.4, 6.2],
        "mine_test_x": [0.75, 2.25, 3.25], "mine_test_y": [2.25, 4.5, 5.75]}


class InitError(Exception):
    """A project folder that already holds a file `alphac init` would write."""


def files() -> dict[str, bytes]:
    """The project: each file's path under DIR and its bytes."""
    import numpy as np
    out = {"examples/mine.alpha": LEARNER.encode()}
    for name, values in sorted(DATA.items()):
        buf = io.BytesIO()
        np.save(buf, np.array(values, dtype="<f8"))
        out[f"examples/{name}.npy"] = buf.getvalue()
    return out


def init(folder: str | Path) -> list[str]:
    """Write the project into `folder` (made when absent); the paths written, under it."""
    folder, made = Path(folder), files()
    there = [p for p in made if (folder / p).exists() or (folder / p).is_symlink()]
    if there:
        raise InitError(f"{folder} already holds {', '.join(there)}: nothing written (alphac init "
                        "writes a new project; give an empty or new folder)")
    for path, data in made.items():
        write_file(folder / path, data, 0o644)
    return sorted(made)
