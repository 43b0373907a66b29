"""`alphac eval FILE`: a trained state scored on held-out data.

What it does
    Takes the state from a checkpoint (read by alphac.tools.ckpt: a flat manifest or a tree,
    every shard's checksum checked, partitioned states assembled; its learner and rate digests
    must be FILE's learner's, with or without its predict, which does not change training) or
    from N steps of the reference interpreter. Replaces the named data arrays by held-out .npy
    arrays (rows of the learner's row shapes, one sample count for all; an array not replaced
    keeps its rows, so it needs the learner's own count). Reports the sample count, the mean
    loss (alphac.ir.score.mean_loss) and, when predict gives class scores and labels are known,
    the accuracy: correct / n in binary64, and the counts.
Guarantees
    The same output for the same inputs. A checkpoint that cannot be used is a `Refusal` by the
    names its resume would give (checkpoint-missing, checkpoint-other-learner, manifest-torn,
    shard-missing, shard-corrupt, shard-non-finite); bad held-out data or labels an `EvalError`
    that names the array.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from alphac.math import binary64 as f
from alphac.ir.learner import DataDef, Learner
from alphac.ir.score import accuracy, mean_loss, onehot_labels
from alphac.refusals import Refusal
from alphac import npy
from alphac.types.check import _fmt


class EvalError(Exception):
    pass


def checkpoint_state(lr: Learner, ckpt: str | Path) -> tuple[dict, int]:
    """(the state, its step) from the checkpoint in `ckpt`, which must be `lr`'s."""
    from alphac.dist.identity import learner_digests
    from alphac.tools.ckpt import CheckpointError, read_manifest, state
    root = Path(ckpt)
    try:
        m = read_manifest(root / "MANIFEST", "checkpoint-missing")
        ours = {learner_digests(lr), learner_digests(replace(lr, predict=None))}
        if (m.learner, m.rate) not in ours:
            why = f"`{lr.name}`'s with other constants (rate digest {m.rate.hex()[:16]})" \
                if m.learner in {d for d, _ in ours} else \
                f"another learner's (learner digest {m.learner.hex()[:16]})"
            raise Refusal("checkpoint-other-learner", f"{root} is {why}, not `{lr.name}`'s")
        held = state(root)
    except CheckpointError as e:
        raise Refusal(e.refusal, str(e))
    out = {}
    for s in lr.states:
        vals = held.get(s.name)
        if vals is None or len(vals) != s.size or None in vals:
            raise Refusal("shard-missing", f"{root}: the shards do not cover every value of "
                                           f"`{s.name}`")
        if not all(map(math.isfinite, vals)):
            raise Refusal("shard-non-finite", f"{root}: `{s.name}` holds a NaN or an infinity")
        out[s.name] = tuple(vals)
    return out, m.version


def held_out(lr: Learner, arrays: list[tuple[str, str]]) -> Learner:
    """`lr` with the data arrays named in `arrays` ([(NAME, PATH.npy)]) replaced."""
    if not arrays:
        return lr
    names = [d.name for d in lr.data]
    new: dict[str, DataDef] = {}
    for name, path in arrays:
        where = f"--data {name}"
        if name not in names:
            raise EvalError(f"{where}: `{lr.name}` has no data `{name}` (its data: "
                            f"{', '.join(names) or 'none'})")
        if name in new:
            raise EvalError(f"{where}: given twice")
        try:                   # read as the executables read it (alphac.npy), checked alike
            file = npy.scan(npy.runtime_path(path))
        except OSError as e:
            raise EvalError(f"{where}: cannot read `{path}`: {e.strerror or e}")
        except npy.NpyError as e:
            raise EvalError(f"{where}: `{path}` {e}")
        shape = file.shape
        row = lr.datum(name).row_shape
        if shape[1:] != row:
            raise EvalError(f"{where}: `{path}` has rows of {_fmt(shape[1:])}; `{name}`'s rows "
                            f"are {_fmt(row)}")
        new[name] = DataDef(name, shape, None, file)
    counts = {d.shape[0] for d in new.values()}
    if len(counts) > 1:
        raise EvalError("--data: the held-out arrays hold different sample counts: " +
                        ", ".join(f"`{n}` {d.shape[0]}" for n, d in new.items()))
    n = counts.pop()
    kept = [d for d in names if d not in new]
    if n != lr.nsamples and kept:
        raise EvalError(f"--data: {n} held-out samples, but `{kept[0]}` is not replaced and holds "
                        f"the learner's {lr.nsamples}: give a held-out array for every data array")
    return replace(lr, data=[new.get(d.name, d) for d in lr.data], nsamples=n)


def labels_for(lr: Learner, name: str | None, file: str) -> str | None:
    """The data array of class labels: `name`, else the one the loss passes to onehot."""
    if name is not None:
        if name not in {d.name for d in lr.data}:
            raise EvalError(f"--labels {name}: `{lr.name}` has no data `{name}`")
        if lr.datum(name).row_shape:
            raise EvalError(f"--labels {name}: `{name}` has rows of {_fmt(lr.datum(name).row_shape)}"
                            f"; labels are one number per sample")
        if lr.predict is None or not lr.predict.shape:
            why = "has no predict" if lr.predict is None else "predicts a scalar (a regression output)"
            raise EvalError(f"--labels {name}: an accuracy needs `predict(i)` to give class scores "
                            f"(a vector); {file} {why}")
        return name
    if lr.predict is None or not lr.predict.shape:
        return None
    found = onehot_labels(lr)
    return found[0] if len(found) == 1 else None


def evaluation_for(lr: Learner, arrays: list[tuple[str, str]], labels: str | None, file: str):
    """What `alphac build --eval-data` compiles in: (the learner on the held-out arrays, the
    labels' name or None), or None without arrays; BuildError for what cannot be scored."""
    from alphac.diag import BuildError
    if not arrays:
        if labels is not None:
            raise BuildError("--labels needs --eval-data")
        return None
    try:
        test = held_out(lr, arrays)
        name = labels_for(test, labels, file)
    except EvalError as e:
        raise BuildError(str(e).replace("--data", "--eval-data"))
    if test.loss is None:
        raise BuildError(f"--eval-data: {file} has no loss to score")
    return test, name


def evaluate_learner(lr: Learner, state: dict, step: int, labels: str | None) -> dict:
    """The report: samples, step, and mean_loss / labels, correct, accuracy where they apply."""
    report: dict = {"samples": lr.nsamples, "step": step}
    if lr.loss is not None:
        report["mean_loss"] = mean_loss(lr, state)
    if labels is not None:
        correct, n = accuracy(lr, state, labels)
        report.update(labels=labels, correct=correct, accuracy=f.div(float(correct), float(n)))
    return report


def render(report: dict, fmt: str) -> str:
    if fmt == "json":
        out = dict(report)
        if "mean_loss" in out:
            v = out["mean_loss"]
            out["mean_loss"] = v if math.isfinite(v) else None
            out["mean_loss_hex"] = f.hex16(v)
        return json.dumps(out, sort_keys=True) + "\n"
    lines = [f"samples: {report['samples']}"]
    if "mean_loss" in report:
        lines.append(f"mean loss: {report['mean_loss']!r}")
    if "accuracy" in report:
        lines.append(f"accuracy: {report['accuracy']!r} ({report['correct']} of "
                     f"{report['samples']}, labels `{report['labels']}`)")
    return "\n".join(lines) + "\n"
