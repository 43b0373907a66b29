"""The runtime, written once in the runtime language (`*.rt`) and lowered by both backends.

`core.rt` is what every executable carries: exit and refusals, buffered output, number
printing and parsing, the state printer and the finiteness check. `single.rt` is the
single-process learner's `main`. `sources(names)` returns the texts, in a fixed order.
"""
from __future__ import annotations

from importlib import resources


def source(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.rt").read_text()
