"""Scoring a state on samples: the mean loss, predictions and accuracy (`alphac eval`, and
progress reporting).

    mean_loss(lr, state, samples)   the left fold of the per-sample losses over `samples` in
                                    increasing order, from the first term, divided by their count
    prediction(lr, state, i)        `predict(i)`'s value: a scalar or a vector of class scores
    predicted_class(scores)         the first index of the maximum under the ordered `>` (a NaN
                                    never wins; None when every score is a NaN)
    accuracy(lr, state, labels)     (correct, n) over every sample of `lr`

Each value is the reference interpreter's (`alphac.ir.evaluate.evaluate`, binary64, one
rounding per operation); the sum and the division are binary64 operations too. Held-out data is
the learner with its data replaced (`dataclasses.replace(lr, data=..., nsamples=...)`).
"""
from __future__ import annotations

from alphac.math import binary64 as f
from alphac.ir.evaluate import Env, evaluate
from alphac.ir.interp import State, sample_rows
from alphac.ir.learner import DataRow, Learner, OneHot, postorder


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
