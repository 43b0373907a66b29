"""The pipeline, as the list of passes it is.

    source --parse--> ast --check--> learner IR --differentiate--> learner with gradients

then, per command: the reference interpreter (`alphac.ir.interp`), a deployment plan
(`alphac.dist`), or lowering and a backend (`alphac.build`). Each pass reports into one `Sink`;
the driver stops after a pass that left errors and raises `CompileError` with every diagnostic
(warnings included), sorted by position.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alphac.diag import CompileError, Diagnostic, Sink, Source
from alphac.ir.autodiff import differentiate
from alphac.ir.learner import Learner
from alphac.parse.parser import parse
from alphac.types.check import check


@dataclass
class Compiled:
    learner: Learner
    source: Source
    module: object
    warnings: list[Diagnostic]


def read_source(path: str | Path, sink: Sink) -> Source | None:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        sink.error("E0000", None, f"cannot read `{path}`: {e.strerror or e}")
        return None
    return Source(str(path), raw.decode("utf-8", errors="replace"))


def front_end(source: Source, sink: Sink, base_dir: Path | None):
    """parse -> check -> differentiate; returns (module, learner or None)."""
    module = parse(source, sink)
    learner = check(module, sink, base_dir) if sink.ok else None
    if learner is not None and sink.ok:
        differentiate(learner)
    return module, learner


def compile_file(path: str | Path) -> Compiled:
    sink = Sink()
    source = read_source(path, sink)
    learner = module = None
    if source is not None:
        module, learner = front_end(source, sink, Path(path).parent)
    if not sink.ok or learner is None:
        raise CompileError(sink.sorted())
    return Compiled(learner, source, module, [d for d in sink.sorted() if d.severity != "error"])
