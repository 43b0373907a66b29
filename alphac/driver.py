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
from alphac.files import read_regular
from alphac.ir.autodiff import differentiate
from alphac.ir.learner import Learner
from alphac.parse import parse
from alphac.types.check import check


@dataclass
class Compiled:
    learner: Learner
    source: Source
    module: object
    warnings: list[Diagnostic]


MAX_SOURCE = 1 << 20                   # bytes of one source file


def read_source(path: str | Path, sink: Sink) -> Source | None:
    try:
        raw = read_regular(path, MAX_SOURCE)
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


def compile_deployments(path: str | Path) -> tuple[Compiled, dict]:
    """The learner and every deployment its file declares, checked (with memory admission and
    the protocol check of each plan)."""
    from alphac.dist.deployment import check_deployments
    from alphac.dist.plan import Plan
    compiled = compile_file(path)
    sink = Sink()
    deps = check_deployments(compiled.learner, compiled.module, sink)
    plans = {}
    for name, dep in deps.items():
        plan = Plan(dep)
        plan.admit(sink)
        for problem in plan.check_protocol():
            sink.error("E0117", dep.spans.get("topology"), f"deployment `{name}`: {problem}")
        plans[name] = plan
    if not sink.ok:
        raise CompileError(sink.sorted())
    return compiled, plans
