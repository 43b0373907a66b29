"""The reference interpreter: the project's own numeric oracle for a learner.

It executes the learner IR under the LEARNERS.md contract, step by step:
1. an owner's contribution `(G, n)`: for each of its samples in increasing order, the per-sample
   gradient (the left fold of the param's `Contribution`s, +0.0 where none covers a coordinate),
   summed left to right from the first sample (`owner_contribution`);
2. contributions combined by a combine tree, children left to right (`combine`);
3. the mean gradient `G / n`;
4. the update, statement by statement, coordinate by coordinate (`apply_update`).
A single process is one owner holding every sample. Plans with several owners
(`alphac.dist`) call the same functions per owner.

Under `contract exact_sum` steps 1 and 2 keep the terms unrounded (`alphac.ir.exact.Terms`):
each coordinate's sum over every sample of the step is exact and rounded once, before the mean,
so no split or tree changes a bit; so is each `dot` and `sum` over a coordinate group that the
update reduces (`reduced_value`).

How step 1 is computed: an owner's samples are independent chains of operations, so
`alphac.ir.batch` evaluates each node of the per-sample gradient DAG for a batch of samples at
once, as numpy float64 arrays (vectorized across samples and across the independent rows of a
product, never within a fold), and the contract's functions lane by lane from their one
definition (`alphac.math.evaluate_array`). Every element still gets the one binary64 operation
`per_sample_gradient` performs for it, in the same order: numpy's float64 + - * / and sqrt are
single IEEE operations without fused multiply-add, every fold is a loop over its axis from the
first term, and the sum over samples stays a left fold in sample order. So the bits are
`owner_contribution_scalar`'s (the definition, one sample and one operation at a time), as
tests/test_interp_fast.py checks, NaNs' bits included. The update (step 4) is small and stays
scalar.

Requires: a checked and differentiated `Learner`. Guarantees: each arithmetic step is one
binary64 operation (`alphac.math.binary64`, or numpy's same operation); deterministic; nothing
printed for a state that is not finite (`Refusal("non-finite-state")`).
"""
from __future__ import annotations

import math

from alphac.math import binary64 as f
from alphac.ir.evaluate import Env, evaluate
from alphac.ir.learner import Learner, Read, bad_label, update_reductions
from alphac.refusals import Refusal

State = dict[str, tuple[float, ...]]
Contrib = tuple[dict[str, tuple[float, ...]], int] | None     # None: an owner with no samples


def initial_state(lr: Learner) -> State:
    return {s.name: s.init for s in lr.states}


def sample_rows(lr: Learner, i: int) -> dict[str, tuple[float, ...]]:
    rows = {}
    for d in lr.data:
        width = math.prod(d.row_shape)
        row = d.values[i * width:(i + 1) * width]
        rows[d.name] = row if isinstance(row, tuple) else tuple(row.tolist())
    return rows


def per_sample_gradient(lr: Learner, state: State, i: int) -> dict[str, tuple[float, ...]]:
    env = Env(state={(k, 0): v for k, v in state.items()}, rows=sample_rows(lr, i))
    out = {}
    for p in lr.params:
        g: list[float | None] = [None] * p.size
        for c in lr.grads[p.name]:
            vals = evaluate(c.node, env)
            for k, v in enumerate(vals):
                j = c.offset + k
                g[j] = v if g[j] is None else f.add(g[j], v)
        out[p.name] = tuple(0.0 if v is None else v for v in g)
    return out


def owner_contribution(lr: Learner, state: State, samples) -> Contrib:
    """`(G, n)` for one owner's samples; None for an owner with none (the combine's identity).
    The per-sample gradients come from `alphac.ir.batch` (many samples at once, the same bits
    as `per_sample_gradient`); their sum is the left fold in sample order, from the first."""
    import numpy as np

    from alphac.ir.batch import gradient_rows
    if lr.exact:                     # exact_sum: the terms, summed exactly when rounded
        from alphac.ir.exact import Terms
        chunks = list(gradient_rows(lr, state, samples))
        if not chunks:
            return None
        return Terms.of(lr, np.concatenate(chunks)), len(samples)
    total = None
    for rows in gradient_rows(lr, state, samples):
        for g in rows:
            total = g.copy() if total is None else np.add(total, g, out=total)
    if total is None:
        return None
    out, base = {}, 0
    for p in lr.params:
        out[p.name] = tuple(total[base:base + p.size].tolist())
        base += p.size
    return out, len(samples)


def owner_contribution_scalar(lr: Learner, state: State, samples) -> Contrib:
    """`owner_contribution` one sample and one operation at a time (`per_sample_gradient`): the
    definition the batched path is tested against."""
    if lr.exact:
        import numpy as np

        from alphac.ir.exact import Terms
        rows = [[v for p in lr.params for v in per_sample_gradient(lr, state, i)[p.name]] for i in samples]
        if not rows:
            return None
        return Terms.of(lr, np.array(rows, dtype=np.float64).reshape(len(rows), -1)), len(samples)
    total: dict[str, tuple[float, ...]] | None = None
    for i in samples:
        g = per_sample_gradient(lr, state, i)
        if total is None:
            total = g
        else:
            total = {p: tuple(f.add(a, b) for a, b in zip(total[p], g[p])) for p in total}
    return None if total is None else (total, len(samples))


def combine(a: Contrib, b: Contrib) -> Contrib:
    """One combine-tree node: `(G_a + G_b, n_a + n_b)`, the identity for an empty side."""
    if a is None:
        return b
    if b is None:
        return a
    ga, na = a
    gb, nb = b
    if not isinstance(ga, dict):          # exact_sum's Terms: nothing rounded yet
        return ga.merged(gb), na + nb
    return {p: tuple(f.add(x, y) for x, y in zip(ga[p], gb[p])) for p in ga}, na + nb


def rounded(c: Contrib) -> Contrib:
    """A contribution with its sums rounded: exact_sum's terms summed exactly and rounded once
    (`alphac.ir.exact`); an ordered contribution is already rounded."""
    if c is None or isinstance(c[0], dict):
        return c
    return c[0].rounded(), c[1]


def mean_gradient(c: Contrib) -> dict[str, tuple[float, ...]]:
    if c is None:
        return {}
    g, n = rounded(c)
    nf = float(n)
    return {p: tuple(f.div(x, nf) for x in v) for p, v in g.items()}


def apply_update(lr: Learner, state: State, grads: dict[str, tuple[float, ...]], t: int = 0) -> State:
    """The update of step t (its `step` and `epoch`: Learner.clock)."""
    env = Env(state={(k, 0): v for k, v in state.items()}, grads=grads, clock=lr.clock(t))
    for n in update_reductions(lr.update):           # first, each from every coordinate
        env.memo[id(n)] = (reduced_value(lr, n, env),)
    for a in lr.update:
        env.state[(a.target, 1)] = evaluate(a.node, env)
    return {k: env.state.get((k, 1), v) for k, v in state.items()}


def step_samples(lr: Learner, samples: range, t: int) -> list[int] | range:
    """The samples of an owner's range that step t uses, in increasing order (alphac.ir.order):
    all of them for the full batch."""
    if not lr.batch:
        return samples
    from alphac.ir.order import step_samples as pick
    return pick(samples, lr.nsamples, lr.batch, lr.shuffle, t)


def step(lr: Learner, state: State, t: int = 0) -> State:
    """Step t of the single-process learner: one owner holding every sample."""
    grads = {}
    if lr.loss is not None:
        grads = mean_gradient(owner_contribution(lr, state, step_samples(lr, range(lr.nsamples), t)))
    return apply_update(lr, state, grads, t)


def step_loss(lr: Learner, state: State, t: int) -> tuple[float, int]:
    """(mean, n): step t's mean loss, of the state it starts from, over its n samples: the sum
    a left fold in sample order (under exact_sum: exact, rounded once), then one division."""
    from alphac.ir.batch import loss_rows
    samples = step_samples(lr, range(lr.nsamples), t)
    vals = [v for rows in loss_rows(lr, state, samples) for v in rows.tolist()]
    if lr.exact and all(map(math.isfinite, vals)):
        total = math.fsum(vals)                  # the exact sum, correctly rounded
    else:
        total = vals[0]
        for v in vals[1:]:
            total = f.add(total, v)
    return f.div(total, float(len(vals))), len(vals)


def check_labels(lr: Learner) -> None:
    """Before a first step, as each executable does when it reads its rows: every label that a
    `onehot(NAME[i], K)` reads is a whole number from 0 to K-1 (`data-label` otherwise)."""
    why = bad_label(lr)
    if why is not None:
        raise Refusal("data-label", why)


def run(lr: Learner, steps: int, state: State | None = None, start: int = 0, watch=None) -> State:
    """Steps start .. start+steps-1 (a resumed run starts where its checkpoint stopped);
    `watch(t, state)` before each step t, with the state it starts from."""
    if steps:
        check_labels(lr)
    state = initial_state(lr) if state is None else state
    for t in range(start, start + steps):
        if watch is not None:
            watch(t, state)
        state = step(lr, state, t)
    return state


def format_state(lr: Learner, state: State) -> str:
    """The LEARNERS.md output: `NAME[K] HEX` per coordinate, in declaration order."""
    lines = []
    for s in lr.states:
        for k, v in enumerate(state[s.name]):
            if not math.isfinite(v):
                raise Refusal("non-finite-state", f"{s.coord_name(k)} is {v}")
            lines.append(f"{s.coord_name(k)} {f.hex16(v)}")
    return "\n".join(lines) + "\n"


def reduction_terms(lr: Learner, state: dict[str, list], grads: dict[str, list], n, rng) -> list:
    """Reduced scalar n's terms (evaluate.term_at) at the coordinates `rng`, from the step's
    starting state and the mean gradients; a value not held here (None) fails loudly."""
    from alphac.ir.evaluate import term_at

    def read(m, j):
        v = (state[m.name] if isinstance(m, Read) else grads[m.param])[j if m.shape else 0]
        if v is None:
            raise ValueError(f"coordinate {j} of {getattr(m, 'name', m)} is not held here")
        return v
    return [term_at(n, j, lambda m, j=j: read(m, j)) for j in rng]


def reduced_value(lr: Learner, n, env: Env, terms: list | None = None) -> float:
    """Reduced scalar n of the update from its terms at every coordinate (`terms`, gathered;
    else from env's starting state and mean gradients): under exact_sum a `dot` or `sum` over a
    coordinate group (ir.learner.exact_reduction) is their exact sum rounded once
    (alphac.ir.exact), else the left fold in coordinate order (evaluate's own, bit for bit)."""
    from alphac.ir.evaluate import fold_terms
    from alphac.ir.learner import exact_reduction, reduction_group
    if exact_reduction(lr, n):
        from alphac.ir.exact import exact_total
        if terms is None:
            state = {k: v for (k, ver), v in env.state.items() if ver == 0}
            terms = reduction_terms(lr, state, env.grads, n, range(lr.groups[reduction_group(lr, n)].size))
        return exact_total(terms)
    return fold_terms(n, terms) if terms is not None else evaluate(n, env)[0]


def apply_update_coords(lr: Learner, state: dict[str, list], grads: dict[str, list],
                        coords: dict[int, range], terms: dict[str, list] | None = None,
                        t: int = 0) -> None:
    """The update of step t of only the coordinates `coords[group]` (in place), coordinate by
    coordinate, plus every scalar-state statement. Values outside the ranges may be unknown (None): the
    per-coordinate proof says they are never read, and a None that is read fails loudly. The
    reduced scalars come first: folded from `terms` (every coordinate's, gathered: `0t<k>`,
    ir.learner.term_states), or computed from what is held whole."""
    from alphac.ir.evaluate import evaluate_at
    old = {k: v for k, v in state.items()}
    new: dict[str, list] = {}
    clock = lr.clock(t)
    reduced: dict[int, tuple[float, ...]] = {}
    if (terms or any(rng for rng in coords.values())) and update_reductions(lr.update):
        whole = Env(state={(k, 0): tuple(v) for k, v in old.items()}, grads=grads, clock=clock)
        for k, n in enumerate(update_reductions(lr.update)):
            reduced[id(n)] = (reduced_value(lr, n, whole, (terms or {}).get(f"0t{k}")),)
    scalar_env = Env(state={(k, 0): tuple(v) for k, v in old.items() if lr.state(k).group is None},
                     clock=clock)
    scalar_env.memo.update(reduced)
    for a in lr.update:
        s = lr.state(a.target)
        if s.group is None:
            scalar_env.state[(a.target, 1)] = evaluate(a.node, scalar_env)
    for g, rng in coords.items():
        for j in rng:
            memo: dict[int, float] = {k: v[0] for k, v in reduced.items()}
            for a in lr.update:
                if lr.state(a.target).group != g:
                    continue

                def leaf(n, j=j):
                    from alphac.ir.learner import Clock, Read
                    if isinstance(n, Clock):
                        return clock[n.kind]
                    if isinstance(n, Read):
                        if lr.state(n.name).group is None:
                            return scalar_env.state[(n.name, n.version)][0]
                        src = new if n.version else old
                        v = src[n.name][j if n.shape else 0]
                    else:
                        v = grads[n.param][j if n.shape else 0]
                    if v is None:
                        raise ValueError(f"coordinate {j} of {getattr(n, 'name', n)} is not held here")
                    return v
                value = evaluate_at(a.node, j, leaf, memo)
                if a.target not in new:             # copied once (not once per coordinate)
                    new[a.target] = list(old[a.target])
                new[a.target][j if s_shape(lr, a.target) else 0] = value
    for k, v in new.items():
        state[k] = v
    for (k, ver), v in scalar_env.state.items():
        if ver == 1:
            state[k] = list(v)


def s_shape(lr: Learner, name: str) -> tuple[int, ...]:
    return lr.state(name).shape
