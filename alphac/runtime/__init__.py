"""The runtime, written once in the runtime language (`*.rt`) and lowered by both backends.

    core.rt    what every executable carries: exit and refusals, buffered output, number
               printing and parsing, the state printer, the finiteness check, the event streams
    single.rt  the single-process learner's `main`     role.rt   one role of a deployment's `main`
    gpu.rt     a GPU owner's `main`                      nvdrv.rt  its driver conversation
    net.rt     connections and frames between roles      ckpt.rt   checkpoints
    data.rt    a learner's .npy data, read and checked   xsum.rt   the exact sum (exact_sum)
    sha256.rt  SHA-256 and HMAC-SHA-256

Each file opens with its design and names the files it needs on a `use` line; the build takes
a main file and everything it uses (alphac.lower.rt.modules, in that order). `source(name)`
returns the text of `<name>.rt`. Guarantees: the files are read from this package only.
"""
from __future__ import annotations

from importlib import resources


def source(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.rt").read_text()
