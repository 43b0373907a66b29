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

import math
from dataclasses import replace
from pathlib import Path

from alphac.math import binary64 as f
from alphac.ir.learner import Learner
from alphac.ir.score import accuracy, mean_loss
from alphac.refusals import Refusal

# What cli.py imports from here but lives below the tools (issue 48: a build does not import a
# tool): the held-out data in alphac.ir.score, what `build --eval-data` compiles in alphac.build.
# These two lines go when cli.py imports them from there.
from alphac.build import evaluation_for  # noqa: F401
from alphac.ir.score import EvalError, held_out, labels_for  # noqa: F401
from alphac.encode import json_text


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
        return json_text(out) + "\n"
    lines = [f"samples: {report['samples']}"]
    if "mean_loss" in report:
        lines.append(f"mean loss: {report['mean_loss']!r}")
    if "accuracy" in report:
        lines.append(f"accuracy: {report['accuracy']!r} ({report['correct']} of "
                     f"{report['samples']}, labels `{report['labels']}`)")
    return "\n".join(lines) + "\n"
