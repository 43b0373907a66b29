"""The tests' plain-Python oracle for the five reference learners, written from LEARNERS.md alone.

It shares no code with alphac: each learner's per-sample gradient is written out by hand, sums
are explicit left folds, and the output format is rebuilt here. It knows owners and combine
trees too, so distributed runs and repartitioned resumes are checked against the same oracle:

    run("lsq_adam", [(5, SPLIT, TREE)])       # 5 steps, samples split over owners, combined by TREE
    run("lsq_adam", [(3, S4, T4), (2, S2, T2)])   # a history of splits and trees

SPLIT is a list of (lo, hi) sample ranges, one per owner; TREE is an owner index or a nested
tuple of trees, children combined left to right. The default is one owner holding every sample.
`run(name, steps=5, exact=True)` is the learner under `contract exact_sum`: each gradient
coordinate's sum over all samples is exact (Fractions) and rounded once, whatever the split.
"""
import math
import struct
from fractions import Fraction

X_LSQ = [[1.0, 0.5, -1.0, 0.25, 2.0],
         [0.3, 2.0, 0.7, -1.5, 0.1],
         [-1.2, 0.4, 1.5, 0.8, -0.3],
         [2.0, -0.3, 0.2, 1.1, 0.6],
         [0.8, 1.1, -0.6, -0.2, 1.7],
         [-0.5, -1.4, 0.9, 0.4, -1.1],
         [1.5, 0.2, 0.3, -0.9, 0.5],
         [-0.7, 0.9, -1.3, 1.6, 0.4]]
Y_LSQ = [0.7, 3.1, 0.2, 1.9, 1.4, -1.8, 1.2, -0.4]
REF_SPLIT = [(0, 1), (1, 3), (3, 4), (4, 8)]
REF_TREE = ((0, 1), (2, 3))
# the reference deployments in examples/ (all on the reference split and tree) -> their learner
REF_DEPLOYMENTS = {
    "lsq_adam_star": "lsq_adam", "lsq_adam_tree": "lsq_adam", "lsq_adam_star_zero1": "lsq_adam",
    "lsq_adam_star_zero2": "lsq_adam", "lsq_adam_star_zero3": "lsq_adam",
    "lsq_adam_mixed": "lsq_adam", "lsq_adam_mesh": "lsq_adam", "lsq_momentum_star": "lsq_momentum",
    "lsq_momentum_tree": "lsq_momentum", "independent_state_star": "independent_state",
}


# a small classifier (tests/test_eval.py, tests/test_gpu_roles.py): its own data, two deployments
CLASSIFIER = """\
learner cls
data x = [[0.5, -1.0], [1.5, 0.25], [-0.75, 0.5], [0.1, 2.0], [-1.2, -0.4], [0.9, -0.6]]
data y = [0, 1, 2, 1, 0, 2]
const lr = 0.5
param W1: f64[3, 2] = [[0.1, -0.2], [0.3, 0.05], [-0.15, 0.25]]
param b1: f64[3] = 0.0
param W2: f64[3, 3] = [[0.2, -0.1, 0.05], [-0.3, 0.15, 0.1], [0.05, 0.2, -0.25]]
param b2: f64[3] = 0.0
loss(i) {
  let h = tanh(W1 @ x[i] + b1)
  let z = W2 @ h + b2
  logsumexp(z) - dot(onehot(y[i], 3), z)
}
predict(i) {
  let h = tanh(W1 @ x[i] + b1)
  W2 @ h + b2
}
update {
  W1 = W1 - lr * grad(W1)
  b1 = b1 - lr * grad(b1)
  W2 = W2 - lr * grad(W2)
  b2 = b2 - lr * grad(b2)
}
deployment cls_star {
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..6
  strategy zero3
}
deployment cls_tree {
  roles owner[4]
  topology hierarchy(fanout 2)
  samples owner[0] = 0..1, owner[1] = 1..3, owner[2] = 3..4, owner[3] = 4..6
  strategy zero3
}
"""

def hexbits(v):
    return "%016x" % struct.unpack("<Q", struct.pack("<d", v))[0]


# -- per-sample gradients, by hand ------------------------------------------------------------------
def g_scalar(st, i):
    x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0][i]
    y = [2.1, 3.9, 6.2, 7.8, 10.1, 12.2][i]
    return [(st["a"][0] * x - y) * x]


def g_two(st, i):
    x = [0.0, 1.0, 2.0, 3.0, 4.0][i]
    y = [1.0, 2.9, 5.1, 7.0, 9.2][i]
    w0, w1 = st["w"]
    r = (w0 * x + w1) - y
    return [r * x, r]


def g_lsq(st, i):
    w, xi = st["w"], X_LSQ[i]
    acc = w[0] * xi[0]
    for j in range(1, 5):
        acc = acc + w[j] * xi[j]
    r = acc - Y_LSQ[i]
    return [r * xi[j] for j in range(5)]


def up_scalar(st, g):
    st["a"] = [st["a"][0] - 0.02 * g[0]]


def up_two(st, g):
    st["w"] = [st["w"][j] - 0.05 * g[j] for j in range(2)]


def up_momentum(st, g):
    st["v"] = [0.9 * st["v"][j] + g[j] for j in range(5)]
    st["w"] = [st["w"][j] - 0.05 * st["v"][j] for j in range(5)]


B1, B2 = 0.9, 0.999
C1, C2 = 1 - B1, 1 - B2


def up_adam(st, g):
    st["m"] = [B1 * st["m"][j] + C1 * g[j] for j in range(5)]
    st["v"] = [B2 * st["v"][j] + C2 * (g[j] * g[j]) for j in range(5)]
    st["p1"] = [st["p1"][0] * B1]
    st["p2"] = [st["p2"][0] * B2]
    mh = [st["m"][j] / (1 - st["p1"][0]) for j in range(5)]
    vh = [st["v"][j] / (1 - st["p2"][0]) for j in range(5)]
    st["w"] = [st["w"][j] - (0.05 * mh[j]) / (math.sqrt(vh[j]) + 1e-8) for j in range(5)]


A_IND = [2.0, 3.0, 5.0, 7.0, 11.0, 13.0, 17.0, 19.0]

# name -> (initial state in print order as (name, values, printed-as-scalar), samples, grad, update)
LEARNERS = {
    "scalar_regression": ([("a", [0.0], True)], 6, g_scalar, up_scalar),
    "two_coordinate": ([("w", [0.0, 0.0], False)], 5, g_two, up_two),
    "lsq_momentum": ([("w", [0.0] * 5, False), ("v", [0.0] * 5, False)], 8, g_lsq, up_momentum),
    "lsq_adam": ([("w", [0.0] * 5, False), ("m", [0.0] * 5, False), ("v", [0.0] * 5, False),
                  ("p1", [1.0], True), ("p2", [1.0], True)], 8, g_lsq, up_adam),
    "independent_state": ([("s", [1.0] * 8, False)], 0, None, None),
}


def owner_sum(st, grad, lo, hi):
    G = None
    for i in range(lo, hi):
        g = grad(st, i)
        G = g if G is None else [G[j] + g[j] for j in range(len(g))]
    return None if G is None else (G, hi - lo)


def combine(tree, parts):
    if isinstance(tree, int):
        return parts[tree]
    acc = None
    for child in tree:
        c = combine(child, parts)
        if c is None:
            continue
        acc = c if acc is None else ([a + b for a, b in zip(acc[0], c[0])], acc[1] + c[1])
    return acc


def exact_sum(terms):
    """`contract exact_sum`'s sum from its definition: the terms' exact sum as a Fraction,
    rounded once (Python's int / int division rounds to nearest even; past the largest double,
    an infinity); a NaN or both infinities give the quiet NaN 0x7ff8000000000000, one infinity
    itself; an exact zero is -0.0 only when every term is -0.0 (or there is none)."""
    if any(t != t for t in terms) or (math.inf in terms and -math.inf in terms):
        return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000))[0]
    if math.inf in terms or -math.inf in terms:
        return math.inf if math.inf in terms else -math.inf
    total = sum(Fraction(t) for t in terms)
    if total == 0:
        return -0.0 if all(t == 0 and math.copysign(1.0, t) < 0 for t in terms) else 0.0
    try:
        return total.numerator / total.denominator
    except OverflowError:
        return math.inf if total > 0 else -math.inf


def one_step(name, st, split, tree, exact=False):
    init, n, grad, update = LEARNERS[name]
    if grad is None:
        st["s"] = [0.5 * (s + a / s) for s, a in zip(st["s"], A_IND)]
        return
    if exact:                 # no split or tree matters: every sample's term, summed exactly
        gs = [grad(st, i) for i in range(n)]
        update(st, [exact_sum([g[j] for g in gs]) / float(n) for j in range(len(gs[0]))])
        return
    split = split or [(0, n)]
    tree = 0 if tree is None else tree
    parts = [owner_sum(st, grad, lo, hi) for lo, hi in split]
    G, count = combine(tree, parts)
    update(st, [v / float(count) for v in G])


def initial(name):
    return {k: list(v) for k, v, _ in LEARNERS[name][0]}


def run(name, schedule=None, steps=None, state=None, exact=False):
    """The printed state after a schedule of (steps, split, tree) segments; `exact`: under
    `contract exact_sum`, where splits and trees change nothing."""
    if schedule is None:
        schedule = [(steps if steps is not None else 5, None, None)]
    st = initial(name) if state is None else state
    for k, split, tree in schedule:
        for _ in range(k):
            one_step(name, st, split, tree, exact)
    return render(name, st)


def render(name, st):
    lines = []
    for k, _, scalar in LEARNERS[name][0]:
        for j, v in enumerate(st[k]):
            lines.append(f"{k} {hexbits(v)}" if scalar else f"{k}[{j}] {hexbits(v)}")
    return "\n".join(lines) + "\n"
