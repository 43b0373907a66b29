"""alphac's Python API: what every `alphac` command does, as functions that return values.

The layer below the command line (alphac/cli.py parses, calls one function here and prints
what comes back): the pipeline (alphac.driver), the build (alphac.build), the artifacts, their
recipes and manifests (alphac.artifacts) and the tools (alphac.tools) behind one set of calls,
for a notebook, a test or a service. Nothing here prints, reads the command line or exits; a
request fails with a named error. docs/api.md shows each call, the command it serves and the
errors.
"""
from __future__ import annotations

import importlib
import json
import struct
from pathlib import Path
from typing import NamedTuple

from alphac.diag import CompileError, Diagnostic
from alphac.refusals import DECIMAL_DIGITS


# the calls that are another module's own, found there when first asked for (so that importing
# this module, which the CLI does at start, imports none of them)
ELSEWHERE = {"build_deployment": "alphac.artifacts", "build_all": "alphac.artifacts",
             "verify": "alphac.tools.verify", "verify_record": "alphac.tools.record",
             "export_tensorboard": "alphac.tools.metrics", "replay_chain": "alphac.tools.replay"}


def __getattr__(name: str):
    if name not in ELSEWHERE:
        raise AttributeError(f"module 'alphac.api' has no attribute {name!r}")
    return getattr(importlib.import_module(ELSEWHERE[name]), name)


class UsageError(ValueError):
    """A request that nothing can do as it is asked (the CLI's exit 2, a usage error)."""


class Failed(ValueError):
    """A request that cannot be done with the input it names: what is wrong with it."""


class Defect(Exception):
    """A defect of alphac's, reported without a traceback: never the answer to an input."""


def compile(path: str | Path):
    """The learner in `path`, compiled (alphac.driver.compile_file), its warnings in `.warnings`."""
    from alphac.driver import compile_file
    return compile_file(path)


def deployments(path: str | Path, name: str | None = None):
    """(Compiled, {name: plan}) for `path`; with `name`, E0100 unless it has that deployment."""
    from alphac.driver import compile_deployments
    compiled, plans = compile_deployments(path)
    if name and name not in plans:
        raise CompileError(compiled.warnings + [Diagnostic(
            "E0100", None, f"no deployment `{name}` in {path}",
            f"deployments: {', '.join(sorted(plans)) or 'none'}")])
    return compiled, plans


def epoch_steps(epochs: int, batches: int) -> int:
    """E epochs of B batches as a step count (UsageError past what an executable takes)."""
    steps = epochs * batches
    if len(str(steps)) > DECIMAL_DIGITS:
        raise UsageError(f"--epochs {epochs}: {steps} steps ({batches} per epoch) has more than "
                         f"{DECIMAL_DIGITS} digits, which the executables refuse")
    return steps


def run(compiled, steps: int = 5, epochs: int | None = None, plan=None, name: str = "",
        metrics=None) -> str:
    """The state (`NAME[K] HEX` lines) after `steps` steps or `epochs` epochs of the reference
    interpreter; with `plan` (deployment `name`'s), that plan's roles executed in turn.
    `metrics`: a stream for each step's loss as a JSON line (alphac.tools.metrics), flushed."""
    from alphac.ir.interp import format_state, run as interpret, step_loss
    lr = compiled.learner
    steps = steps if epochs is None else epoch_steps(epochs, lr.batches)
    if metrics is not None and (plan is not None or lr.loss is None):
        raise UsageError("--metrics: " + ("a deployment's loss is its root's: build it and use "
                                          "`alphac launch DIR --metrics`" if lr.loss is not None
                                          else f"`{lr.name}` has no loss"))
    if plan is None:
        def watch(t, state):
            from alphac.tools.metrics import metric_line
            metrics.write(metric_line(t + 1, *step_loss(lr, state, t)))
            metrics.flush()
        return format_state(lr, interpret(lr, steps, watch=watch if metrics is not None else None))
    from alphac.dist.execute import PlanError, run_plan
    try:
        return format_state(lr, run_plan(lr, plan, steps))
    except PlanError as e:           # the checked plan cannot run: a defect of alphac's
        raise Defect(f"deployment `{name}`: {e} (please report this learner)") from None


def formatted(state_text: str, fmt: str) -> str:
    """The state as `hex` (itself), `decimal` (`NAME[K] VALUE`, the shortest decimal that reads
    back to the same bits) or `json` ({"NAME": value or [values]})."""
    if fmt == "hex":
        return state_text
    values: dict[str, list] = {}
    lines = []
    for line in state_text.splitlines():
        label, bits = line.split(" ")
        v = struct.unpack("<d", int(bits, 16).to_bytes(8, "little"))[0]
        lines.append(f"{label} {v!r}")
        name, _, index = label.partition("[")
        values.setdefault(name, []).append(v if index else None)
        if not index:
            values[name] = v
    if fmt == "decimal":
        return "".join(l + "\n" for l in lines)
    return json.dumps(values) + "\n"


def plan_text(plans: dict, name: str | None = None) -> str:
    """How deployment `name` (default: every one) splits the learner (alphac.dist.plan.render)."""
    from alphac.dist.plan import render
    return "\n".join(render(plans[n]) for n in ([name] if name else sorted(plans)))


class Built(NamedTuple):
    image: object                     # alphac.build's image: .elf, .rt_source, .program
    gpu: object | None                # a GPU owner's build (.conversation, .ptxas), else None


def build(compiled, source: str | Path, target: str = "x86_64", eval_data=(), labels: str | None = None,
          gpu_host: str | None = None, gpu: dict | None = None, ptxas: str | None = None) -> Built:
    """An executable for `target` (with held-out `eval_data`, [(NAME, PATH.npy)], for `--evaluate`),
    or for `ISA+sm_NN` a GPU owner for the host in the file `gpu_host` and the fields of `gpu`
    (uuid, product, memory, driver, minor, topology: docs/nvdrv.md)."""
    from alphac.build import build_gpu_owner, build_learner, evaluation_for, load_gpu_host
    if "+" in target:
        owner = build_gpu_owner(compiled.learner, target, load_gpu_host(gpu_host, gpu or {}), ptxas)
        return Built(owner.image, owner)
    return Built(build_learner(compiled.learner, target,
                               evaluation_for(compiled.learner, list(eval_data), labels, str(source))),
                 None)


def emit(compiled, source: str | Path, built: Built, form: str) -> str:
    """A build as text: `asm` (annotated disassembly; needs capstone), `calls` (a GPU owner's
    driver conversation), `rt` (the runtime-language code) or `lir` (the low-level IR)."""
    from alphac.tools.listing import disassemble, lir
    if form == "asm":
        return disassemble(built.image, compiled.source.text.split("\n"), Path(source).name)
    if form == "calls":
        return built.gpu.conversation.listing()
    return built.image.rt_source if form == "rt" else lir(built.image.program)


def emit_gpu(compiled, form: str, sm: int = 90) -> str:
    """Every owner kernel for sm_`sm`: one PTX module (`ptx`), or what their cubins hold."""
    from alphac.ptx.kernels import kernels, module
    kernels(compiled.learner, sm)
    if form == "ptx":
        return module(compiled.learner, sm)
    from alphac.ptx import build as build_ptx
    from alphac.ptx.cubin import cubin_info
    return "\n".join(cubin_info(b.cubin) for b in build_ptx(compiled.learner, sm))


def write_executable(out: str | Path, built: Built, compiled, source: str | Path, target: str,
                     eval_data=(), labels: str | None = None) -> Path:
    """The executable as `out` and its manifest beside it (alphac.artifacts.write_learner)."""
    from alphac.artifacts import write_learner
    return write_learner(out, built.image.elf, source, compiled, target, eval_data, labels, built.gpu)


def table(deployment: str | Path) -> dict:
    """A built deployment's roles.json, checked (alphac.tools.table.load_table)."""
    from alphac.tools.table import load_table
    return load_table(Path(deployment))[0]


def launch(deployment: str | Path, steps: int = 5, epochs: int | None = None, **how) -> dict:
    """Run a built deployment here (`how`: alphac.tools.launch.launch's options); the run record."""
    from alphac.tools.launch import launch as run_roles
    if epochs is not None:
        batches = table(deployment).get("batches", 1)
        steps = epoch_steps(epochs, batches if type(batches) is int and batches > 0 else 1)
    return run_roles(deployment, steps=steps, **how)


def reference(deployment: str | Path, steps: int) -> str:
    """What a built deployment's launch of `steps` steps must publish: the interpreter's state."""
    t = table(deployment)
    compiled, plans = deployments(t["source"])
    return run(compiled, steps, plan=plans[t["deployment"]], name=t["deployment"])


def checkpoint_export(checkpoint: str | Path, out: str | Path, learner: str | Path | None = None) -> dict:
    """A checkpoint's state as named float64 tensors in `out` (.safetensors, .npz), shaped as
    `learner` declares them (else 1-d): {name: shape}; refused as its resume would be."""
    from alphac.refusals import Refusal
    from alphac.tools.ckpt import CheckpointError
    from alphac.tools.export import export, learner_shapes
    try:
        shapes = learner_shapes(compile(learner).learner) if learner else None
        return export(checkpoint, out, shapes)
    except CheckpointError as e:
        raise Refusal(e.refusal, str(e)) from None
    except ValueError as e:
        raise Failed(str(e)) from None


def checkpoint_show(checkpoint: str | Path, as_json: bool = False) -> str:
    """A checkpoint's manifests and state, checksums checked (text or JSON)."""
    from alphac.tools.ckpt import show, show_json
    try:
        return show_json(checkpoint) if as_json else show(checkpoint)
    except ValueError as e:
        raise Failed(str(e)) from None


def one_state(checkpoint, steps) -> None:
    """UsageError unless one of a checkpoint and a step count gives the state to score."""
    if (checkpoint is None) == (steps is None):
        raise UsageError("give one of --checkpoint DIR (a trained state) and --steps N (train in "
                         "the reference interpreter first)")


def evaluate(compiled, source: str | Path, checkpoint: str | Path | None = None, steps: int | None = None,
             data=(), labels: str | None = None):
    """(score, no labels found): the state of `checkpoint` (or of `steps` interpreter steps)
    scored on held-out `data` [(NAME, PATH.npy)]; alphac.tools.evaluate.render shows it."""
    from alphac.ir.interp import run as interpret
    from alphac.tools.evaluate import EvalError, checkpoint_state, evaluate_learner, held_out, labels_for
    one_state(checkpoint, steps)
    lr = compiled.learner
    test = held_out(lr, list(data))
    named = labels_for(test, labels, str(source))
    if test.loss is None and named is None:
        raise EvalError(f"nothing to score: {source} has no loss, and no predict with labels")
    state, step = checkpoint_state(lr, checkpoint) if checkpoint is not None else (interpret(lr, steps), steps)
    return (evaluate_learner(test, state, step, named),
            named is None and test.predict is not None and bool(test.predict.shape))


def named_errors() -> tuple[type, ...]:
    """The errors that name what is wrong with an input (CompileError and Refusal aside)."""
    from alphac.artifacts import RecipeError
    from alphac.diag import BuildError
    from alphac.manifest import ManifestError
    from alphac.ptx.ptxas import PtxasFailed, PtxasMissing
    from alphac.tools.ckpt import CheckpointError
    from alphac.tools.evaluate import EvalError
    from alphac.tools.init import InitError
    from alphac.tools.k8s import K8sError
    from alphac.tools.listing import CapstoneMissing
    return (BuildError, RecipeError, ManifestError, PtxasMissing, PtxasFailed, CapstoneMissing,
            CheckpointError, EvalError, K8sError, InitError, Failed)
