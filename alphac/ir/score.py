"""Scoring a state on samples: the mean loss, predictions and accuracy (`alphac eval`, and
progress reporting).

    mean_loss(lr, state, samples)   the left fold of the per-sample losses over `samples` in
                                    increasing order, from the first term, divided by their count
    prediction(lr, state, i)        `predict(i)`'s value: a scalar or a vector of class scores
    predicted_class(scores)         the first index of the maximum under the ordered `>` (a NaN
                                    never wins; None when every score is a NaN)
    accuracy(lr, state, labels)     (correct, n) over every sample of `lr`
    held_out(lr, [(NAME, PATH)])    `lr` with those data arrays replaced by held-out .npy files
    labels_for(lr, name, file)      the data array of class labels (given, or onehot's)

Each value is the reference interpreter's (`alphac.ir.evaluate.evaluate`, binary64, one
rounding per operation); the sum and the division are binary64 operations too. Held-out data is
the learner with its data replaced (`dataclasses.replace(lr, data=..., nsamples=...)`); bad
held-out data or labels, and an index (`E[NAME[i]]`) out of range, are an `EvalError` that names
the array (`alphac eval`'s --data and
--labels; `alphac build --eval-data` says --eval-data instead, alphac.build.evaluation_for).
"""
from __future__ import annotations

from dataclasses import replace

from alphac import npy
from alphac.math import binary64 as f
from alphac.ir.evaluate import Env, evaluate
from alphac.ir.interp import State, sample_rows
from alphac.ir.learner import DataDef, DataRow, Learner, OneHot, bad_label, postorder, type_text


def _env(lr: Learner, state: State, i: int) -> Env:
    return Env(state={(k, 0): tuple(v) for k, v in state.items()}, rows=sample_rows(lr, i))


def loss_value(lr: Learner, state: State, i: int) -> float:
    """Sample i's loss."""
    return evaluate(lr.loss, _env(lr, state, i))[0]


def mean_loss(lr: Learner, state: State, samples: range | None = None) -> float:
    """The mean of the loss over `samples` (default: every sample): ((l0 + l1) + l2) ... / n."""
    samples = range(lr.nsamples) if samples is None else samples
    if lr.loss is None or len(samples) == 0:
        raise ValueError("a mean loss needs a loss and at least one sample")
    total = None
    for i in samples:
        v = loss_value(lr, state, i)
        total = v if total is None else f.add(total, v)
    return f.div(total, float(len(samples)))


def prediction(lr: Learner, state: State, i: int) -> tuple[float, ...]:
    return evaluate(lr.predict, _env(lr, state, i))


def predicted_class(scores) -> int | None:
    """The first k whose score is greater (`>`, false with a NaN) than every earlier score that
    is not a NaN: the first index of the maximum of the scores that are numbers."""
    best = None
    for k, v in enumerate(scores):
        if v == v and (best is None or v > scores[best]):
            best = k
    return best


def accuracy(lr: Learner, state: State, labels: str) -> tuple[int, int]:
    """(correct, n): samples whose predicted class k has label == k (a label that is not one of
    the classes 0..len-1 is never matched)."""
    correct = 0
    for i in range(lr.nsamples):
        k = predicted_class(prediction(lr, state, i))
        correct += k is not None and sample_rows(lr, i)[labels][0] == float(k)
    return correct, lr.nsamples


def onehot_labels(lr: Learner) -> list[str]:
    """The data arrays whose row the loss passes to onehot as the label (`onehot(y[i], n)`)."""
    if lr.loss is None:
        return []
    return sorted({n.a.name for n in postorder([lr.loss])
                   if isinstance(n, OneHot) and isinstance(n.a, DataRow)})


class EvalError(Exception):
    pass



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
        if lr.datum(name).integer and npy.not_integer(file):
            raise EvalError(f"{where}: `{path}` {npy.not_integer(file)}")
        if shape[1:] != row:
            raise EvalError(f"{where}: `{path}` has rows of {type_text(shape[1:])}; `{name}`'s rows "
                            f"are {type_text(row)}")
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
    out = replace(lr, data=[new.get(d.name, d) for d in lr.data], nsamples=n)
    why = bad_label(out, indices=True)          # an index out of range names no row to read
    if why is not None:
        raise EvalError(f"--data: {why}")
    return out


def labels_for(lr: Learner, name: str | None, file: str) -> str | None:
    """The data array of class labels: `name`, else the one the loss passes to onehot."""
    if name is not None:
        if name not in {d.name for d in lr.data}:
            raise EvalError(f"--labels {name}: `{lr.name}` has no data `{name}`")
        if lr.datum(name).row_shape:
            raise EvalError(f"--labels {name}: `{name}` has rows of {type_text(lr.datum(name).row_shape)}"
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
