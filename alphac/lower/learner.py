"""Learner IR -> runtime-language source: the learner's arithmetic as code both backends lower.

Requires: a checked, differentiated `Learner`. Guarantees: the generated functions perform, for
every coordinate, exactly the binary64 operations the reference interpreter performs, in the same
order (the contract in alphac.ir.autodiff and alphac.ir.interp):

    learner_grad(lo, hi)     G_p = sum over samples lo..hi-1 of the per-sample gradient of p,
                             a left fold from -0.0 (the exact additive identity, so it equals
                             the fold that starts from the first sample)
                             (under exact_sum: a block's terms, in the same vector loops, by
                             2Sum into the expansions XE in registers, each vector checked
                             exact; one that is not goes through XB_p to xe_add_lanes, falling
                             back to the accumulators XA, XSP: alphac/runtime/xsum.rt)
    learner_exact_round()    exact_sum only: G_p and L_sum, each exact sum rounded once
    learner_exact_flush()    exact_sum only: the expansions into XA (a GPU owner's host)
    learner_mean(n)          loss_mean = L_sum / n, and mean_n = n: no pass of its own over G_p,
                             grad(p) = G_p / n is divided where the update reads it (fused)
    learner_reduce()         the update's reduced scalars (dot, sum, max(v) of coordinate
                             values), each a left fold over every coordinate, into rd<k>
                             (under exact_sum a dot's or sum's terms, learner_terms_<k>,
                             summed by learner_exact_total(x, n): the n binary64 at x added
                             into the accumulator XRD, XRDSP, rounded once)
    learner_terms_<k>(a, b)  reduction k's terms at coordinates a..b-1, and learner_fold():
                             each rd<k> from all of them (a partitioned update's, gathered)
    learner_scalars()        the scalar-state statements, into sn_<name> (old values untouched)
    learner_group_<k>(a, b)  the update of coordinate group k for coordinates a..b-1
    learner_commit()         sn_<name> -> the scalar state
    learner_step()           one single-process step: all samples, every coordinate
    learner_check_finite()   refuses `non-finite-state` unless every state value is finite
    learner_print()          the LEARNERS.md output, through the runtime's buffered printer

Values: every node becomes a `let` (straight-line code the register allocator keeps in
registers); a vector node is computed coordinate by coordinate inside the loop that needs it
(a reduction's loop, a gradient's or an update's), small loops unrolled; a `dot`/`sum` is a left
fold from -0.0. Globals: `st_<name>` state (initial values from the learner), `dt_<name>` data,
`ct<k>` constant vectors, `G_<param>` gradient sums (their means divided where read).

`#line N` directives carry the Alpha source line into the LIR, for annotated listings.
"""
from __future__ import annotations

import struct

from alphac.formats import XC_WORDS, XF_TAIL, XS_DIGITS
from alphac.math.binary64 import bits
from alphac.ir.learner import (Assign, Bcast, Clock, Const, DataRow, Dot, Elem, Gather, Grad, Learner,
                               MatVec, Max, Scatter, bad_label, label_columns, label_of, label_where,
                               MaxAdj, Node, OneHot, Outer, Pick, Pow, Read, Stack, Sum, Unary,
                               VecMat, Where, children, exact_reduction, postorder, term_states,
                               update_reductions)
from alphac.math import rt_name
from alphac.math.lanes import FAST as LANE_FAST, lane_name, lane_source

UNROLL = 8
AHEAD = 4096         # a block prefetches the rows of the block at least this many bytes on
SAMPLE_LANES = 4      # learner_grad's samples per block (full batch, not exact_sum); 8 with f64x8
GRAD_ROWS = 2        # a 2-D gradient's rows summed at a time, sharing each load of a column vector
BLOCK_NODES = 500     # a per-sample DAG above this many nodes (windows unrolled) is not blocked
EXACT_BLOCK_NODES = 150   # nor, under exact_sum, above this many (seq_attention's 204: 27 s at v4)
MATVEC_CHAINS = 8     # independent dot chains in one block of W @ b (rows x lane pairs)
TILE_GRAD_BYTES = 1 << 19   # a 2-D gradient sum larger than this (it and W beyond a 1 MiB L2) is
TILE_ROWS_BYTES = 1 << 23   # tiled (tiled_grads), where its row vectors of every sample fit this
TILE_VECS = 4         # a tiled gradient's block: 4 rows x this many vectors of columns, in registers
OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
# Where's comparisons as a 0 or 1 (IEEE: only ne holds with a NaN), the mask of a branchless
# select (Values.compute)
CMP_BIT = {"gt": "fgt({0}, {1})", "ge": "fge({0}, {1})", "eq": "(fge({0}, {1}) & fge({1}, {0}))",
           "ne": "(1 - (fge({0}, {1}) & fge({1}, {0})))"}
TWO52 = 4503599627370496.0   # k + 2^52 is exact for a checked index k, and its bits are 2^52's plus k


def row_index(k: str) -> str:
    """The checked index in binary64 `k` (a whole number, 0 <= k < 2^51) as an integer."""
    return f"(f2bits({k} + {flit(TWO52)}) - {bits(TWO52)})"


def flit(v: float) -> str:
    """An exact binary64 literal in the runtime language."""
    return f"bits2f(0x{bits(v):016x})"


# The runtime-language builtins on a vector of `width` lanes (0: one binary64, 2: f64x2, 4: f64x4,
# 8: f64x8).
VOCAB = {0: {"load": "loadf", "store": "storef"},
         2: {"load": "loadv", "store": "storev", "splat": "splat", "sqrt": "sqrtv"},
         4: {"load": "loadw", "store": "storew", "splat": "splatw", "sqrt": "sqrtw"},
         8: {"load": "loadz", "store": "storez", "splat": "splatz", "sqrt": "sqrtz"}}


def f64_bytes(values) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


class Emitter:
    """Statements of one function body, with `let` names and per-coordinate memo tables."""

    def __init__(self, gen: "LearnerCode"):
        self.gen = gen
        self.lines: list[str] = []
        self.depth = 1
        self.hoist: tuple[int, int, set[str]] | None = None   # a vloop's (line, depth, outside)
        self.hoisted: dict[str, str] = {}
        self.vw = gen.lanes               # a vloop's lanes: the target's widest vector
        self.ahead: list[tuple[str, int, int, str]] = []   # the next static loop's prefetches:
        # (a block's first row, its bytes, the distance, the test that the row there is the owner's)

    def splat(self, name: str, width: int) -> str:
        """name in `width` lanes: computed once before the vloop being emitted when `name` was
        computed before it (and `width` is the loop's), else here."""
        if self.hoist is None or name not in self.hoist[2] or width != self.vw:
            return self.let(f"{VOCAB[width]['splat']}({name})", "s")
        if name not in self.hoisted:
            at, depth, _ = self.hoist
            self.hoisted[name] = self.fresh("s")
            self.lines.insert(at, "    " * depth + f"let {self.hoisted[name]} = {VOCAB[width]['splat']}({name});")
        return self.hoisted[name]

    def const(self, width: int, value: float) -> str:
        """The binary64 `value` in `width` lanes (f64x4's and f64x8's from a table: no SSE
        between AVX)."""
        if width >= 4:
            return f"{VOCAB[width]['load']}({self.gen.table((value,) * width)})"
        return f"splat({flit(value)})" if width else flit(value)

    def put(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, hint: str = "v") -> str:
        self.gen.counter += 1
        return f"{hint}{self.gen.counter}"

    def let(self, expr: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.put(f"let {name} = {expr};")
        return name

    def loop(self, lo, hi, body) -> None:
        """Call body(j) for j in [lo, hi): unrolled when short and static, else a while loop."""
        if isinstance(lo, int) and isinstance(hi, int) and hi - lo <= UNROLL:
            for j in range(lo, hi):
                body(str(j))
            return
        ahead = self.ahead if isinstance(lo, int) and isinstance(hi, int) else []
        self.ahead = [] if ahead else self.ahead
        pfs = []
        for row, size, dist, owned in ahead:   # past the owner's rows: its own block, in cache
            pfs.append((self.let(row, "pf"), -(-size // (hi - lo))))
            self.put(f"if {owned} {{ {pfs[-1][0]} = {row} + {dist}; }}")
        j = self.fresh("j")
        self.put(f"let {j} = {lo};")
        self.put(f"while {j} < {hi} {{")
        self.depth += 1
        body(j)
        for pf, stride in pfs:           # spread over the loop: a line at a time, in order
            for k in range(0, stride, 64):
                self.put(f"prefetch({pf}{f' + {k}' if k else ''});")
            self.put(f"{pf} = {pf} + {stride};")
        self.put(f"{j} = {j} + 1;")
        self.depth -= 1
        self.put("}")


    def vloop(self, lo, hi, body, outside: set[str] = frozenset()) -> None:
        """A loop over coordinates lo..hi-1 in vectors: body(j, w) computes coordinates j..j+w-1
        in w lanes (w = self.vw) while w remain; with f64x8, then four as f64x4 if four remain;
        with either, wide_end(); then a pair as f64x2 if two remain; then body(j, 0) the last one,
        if any. A short static loop is em.loop, one
        coordinate at a time. Splats of the scalars in `outside` (computed before the loop) are
        computed once, before it."""
        static = isinstance(lo, int) and isinstance(hi, int)
        if static and hi - lo <= UNROLL:
            self.loop(lo, hi, lambda j: body(j, 0))
            return
        w = self.vw
        self.hoist, self.hoisted = (len(self.lines), self.depth, set(outside)), {}
        j = self.fresh("j")
        self.put(f"let {j} = {lo};")
        last = hi - w if isinstance(hi, int) else self.let(f"{hi} - {w}", "last")
        self.put(f"while {j} <= {last} {{")
        self.depth += 1
        body(j, w)
        self.hoist = None
        self.put(f"{j} = {j} + {w};")
        self.depth -= 1
        self.put("}")
        rest = (hi - lo) % w if static else None

        def part(k: int) -> None:        # k lanes more, where k remain (tested when not static)
            nonlocal rest
            if rest is None:
                self.put(f"if {j} + {k} <= {hi} {{")
                self.depth += 1
            body(j, k)
            self.put(f"{j} = {j} + {k};")
            if rest is None:
                self.depth -= 1
                self.put("}")
            else:
                rest -= k
        if w == 8 and (rest is None or rest >= 4):
            part(4)
        if w >= 4:
            self.put("wide_end();")
            if rest is None or rest >= 2:
                part(2)
        if rest is not None and rest % 2 == 0:
            return
        self.put(f"if {j} < {hi} {{")
        self.depth += 1
        body(j, 0)
        self.depth -= 1
        self.put("}")


BUFFERED = (MatVec, VecMat, MaxAdj, Stack)   # computed by loops of their own, into a buffer
REREAD = (MatVec, VecMat, Outer, MaxAdj)  # read their vector operands more than once


def buffered_nodes(roots: list[Node]) -> set[int]:
    """The vector nodes of a per-sample DAG that are computed once per sample into a buffer,
    rather than coordinate by coordinate where they are read: the products and MaxAdj, the
    vector operands of those (read many times each), and every vector node read by more than
    one consumer (a root counts as a consumer). A leaf (a declared name, a data row, a
    constant, a fixed index of one) is read in place."""
    users: dict[int, int] = {}
    must: set[int] = set()
    nodes = postorder(roots)
    for n in nodes:
        for c in set(map(id, children(n))):
            users[c] = users.get(c, 0) + 1
        if isinstance(n, REREAD):
            must.update(id(c) for c in children(n) if c.shape)
    for r in roots:
        users[id(r)] = users.get(id(r), 0) + 1
    out = set()
    for n in nodes:
        if not n.shape or isinstance(n, (Const, Read, DataRow, Pick, Bcast)):
            continue
        if isinstance(n, BUFFERED) or id(n) in must or users.get(id(n), 0) > 1:
            out.add(id(n))
    return out


def varying_nodes(roots: list[Node]) -> set[int]:
    """The nodes of a per-sample DAG that differ between samples: a data row, and whatever
    reads one."""
    out: set[int] = set()
    for n in postorder(roots):
        if isinstance(n, DataRow) or any(id(c) in out for c in children(n)):
            out.add(id(n))
    return out


def twins(roots: list[Node]) -> dict[int, int]:
    """Each node of a DAG -> the first node (in postorder) of the same kind, fields and operands'
    twins (constants by their bits): the same binary64 operations on the same values, so the
    same bits, computed once (a conv's windows: each channel's copy of a window of X, each
    window's copy of the kernel)."""
    same: dict[int, int] = {}
    first: dict[tuple, int] = {}

    def part(v):
        if isinstance(v, Node):
            return same[id(v)]
        if isinstance(v, tuple):
            return tuple(map(part, v))
        return (type(v), bits(v) if isinstance(v, float) else v)
    for n in postorder(roots):
        key = (type(n),) + tuple(part(getattr(n, f)) for f in n.__dataclass_fields__)
        same[id(n)] = first.setdefault(key, id(n))
    return same


class Values:
    """Computes nodes into `let`s. `scalars` memoizes shape-() nodes for the whole body;
    coordinate values are memoized per coordinate expression `j`. Nodes in `buffered`
    (`buffered_nodes`) are computed once, into a global buffer, by `prepare`, before the loop
    that reads them; after that they are read like leaves.

    With `lanes` > 1 it computes the nodes of that many samples at once (sample blocking in
    learner_grad): every memo holds one name per lane; a node no data row reaches (not in
    `varying`) is computed once for every lane; and each loop a node needs runs once, with every
    lane's chain in its body, so that the lanes' folds are independent chains the processor
    overlaps. Each lane performs exactly the single sample's operations, in their order."""

    def __init__(self, em: Emitter, leaf, buffered: set[int] | None = None, lanes: int = 1,
                 varying: set[int] | None = None):
        self.em = em
        self._leaf = leaf         # leaf(node, j, lane) -> expression, or None if not a leaf it knows
        self.lanes = lanes
        self.varying = varying or set()
        self.scalars: dict[int, tuple[str, ...]] = {}
        self.coord: dict[tuple[int, str], tuple[str, ...]] = {}
        self.buffered = buffered or set()
        self.buffers: dict[int, tuple[str, ...]] = {}     # node id -> its buffer per lane
        self.rc: dict[str, tuple[str, str]] = {}  # a 2-D loop's flat coordinate -> (row, col)
        self.filling: int | None = None
        self.same: dict[int, int] = {}    # a node's id -> its first structural twin's (`twins`)
        self.prepared: set[int] = set()  # the nodes `prepare` has listed
        self.vec = 0              # in a vloop's vector body: shaped nodes are in this many lanes at j..
        self.mean_n = "nf"        # the update's: the `let` of the step's count, grad(p) = G_p / it

    def key(self, n: Node) -> int:
        """n's memo and buffer key: the id of the first node computing the same value."""
        return self.same.get(id(n), id(n))

    def width(self, n: Node) -> range:
        """The lanes n is computed for: all, or only lane 0 when it is the same in every lane."""
        return range(self.lanes if id(n) in self.varying else 1)

    def leaf(self, n: Node, j: str | None, s: int = 0) -> str | None:
        if self.key(n) in self.buffers:
            return self.em.gen.address(self.buffers[self.key(n)][s], j)
        return self._leaf(n, j, s)

    def split(self, j: str, cols: int) -> tuple[str, str]:
        """(row, col) of flat coordinate j of a matrix with `cols` columns."""
        if j.isdigit():
            return str(int(j) // cols), str(int(j) % cols)
        if j in self.rc:
            return self.rc[j]
        r = self.em.let(f"{j} / {cols}", "r")
        return r, self.em.let(f"{j} - {r} * {cols}", "c")

    def flat(self, r: str, c: str, cols: int) -> str:
        if r.isdigit() and c.isdigit():
            return str(int(r) * cols + int(c))
        j = f"{r} * {cols} + {c}"
        self.rc[j] = (r, c)
        return j

    def loop(self, lo, hi, body) -> None:
        """em.loop, with coordinate values dying with the loop."""
        saved = dict(self.coord)
        self.em.loop(lo, hi, body)
        self.coord = saved

    def vloop(self, lo, hi, body, pairs: bool) -> None:
        """em.vloop when `pairs` (the nodes the body computes are `vectorizable`), else loop;
        body(j) reads `vec` for the form of its stores."""
        if not pairs:
            self.loop(lo, hi, body)
            return

        def each(j: str, vec: bool) -> None:
            saved, self.vec = dict(self.coord), vec
            body(j)
            self.vec, self.coord = 0, saved
        outside = {x for memo in (self.scalars, self.coord) for names in memo.values() for x in names}
        self.em.vloop(lo, hi, each, outside)

    def vectorizable(self, roots: list[Node], rows: bool = False) -> bool:
        """Whether a loop over coordinates of these nodes may compute pairs of coordinates as
        f64x2: every node it computes (a prepared scalar and a filled buffer are read as they
        are) is a leaf, a constant, a fixed index, a broadcast scalar, + - * / of two, neg,
        sqrt or a power; with `rows` (the column loop of a 2-D loop) also an outer product and
        a vector over a matrix's rows."""
        seen, todo = set(), list(roots)
        while todo:
            n = todo.pop()
            k = self.key(n)
            if id(n) in seen or k in self.buffers or (not n.shape and k in self.scalars):
                continue
            seen.add(id(n))
            if not (isinstance(n, (Const, Read, DataRow, Grad, Pick, Bcast, Pow))
                    or (isinstance(n, Elem) and n.op in OPS) or (rows and isinstance(n, Outer))
                    or (isinstance(n, Unary) and n.op in ("neg", "sqrt"))
                    or (isinstance(n, Unary) and n.op in LANE_FAST and (self.em.gen.lanes >= 4 or self.em.gen.neon))):
                return False
            if not rows and n.shape and any(c.shape and len(c.shape) < len(n.shape)
                                            for c in children(n)):
                return False
            todo.extend(children(n))
        return True

    def splat(self, name: str) -> str:
        key = ("splat", name, self.vec)
        if key not in self.coord:
            self.coord[key] = self.em.splat(name, self.vec)
        return self.coord[key]

    def power(self, a: tuple[str, ...], k: int, lanes: range) -> tuple[str, ...]:
        """a^k in each lane: k - 1 multiplications from the left, a * a * ... * a."""
        out = []
        for s in lanes:
            acc = a[s]
            for _ in range(k - 1):
                acc = self.em.let(f"{acc} * {a[s]}")
            out.append(acc)
        return tuple(out)

    def vcompute(self, n: Node, j: str) -> tuple[str, ...]:
        """Shaped node n at coordinates j..j+vec-1, in vec lanes (`vectorizable` nodes only)."""
        em, L = self.em, self.width(n)

        def operand(c: Node, k: str | None) -> tuple[str, ...]:
            return self.all(c, k) if c.shape else tuple(self.splat(x) for x in self.all(c, None))
        if isinstance(n, Grad):                 # the mean, fused: G_p / n where the update reads it
            return (em.let(f"{VOCAB[self.vec]['load']}({self.em.gen.slot(f'G_{n.param}', j)}) / "
                           f"{self.splat(self.mean_n)}"),)
        leaf = self.leaf(n, j)
        if leaf is not None or isinstance(n, Const):
            exprs = [self.leaf(n, j, s) for s in L] if leaf is not None else \
                [self.em.gen.address(self.em.gen.const_vector(n), j)]
            load = VOCAB[self.vec]["load"]
            return tuple(em.let(f"{load}(" + e[6:] if e.startswith("loadf(") else e) for e in exprs)
        if isinstance(n, Pick):
            return self.all(n.a, self.picked(n, j))
        if isinstance(n, Bcast):
            return operand(n.a, None)
        if isinstance(n, Elem):
            a, b = operand(n.a, self.at(n, n.a, j)), operand(n.b, self.at(n, n.b, j))
            return tuple(em.let(f"{a[s]} {OPS[n.op]} {b[s]}") for s in L)
        if isinstance(n, Unary) and n.op in LANE_FAST:
            return self.lane_call(n.op, operand(n.a, j), L)
        if isinstance(n, Unary):
            a = operand(n.a, j)
            return tuple(em.let(f"-{a[s]}" if n.op == "neg" else f"{VOCAB[self.vec]['sqrt']}({a[s]})")
                         for s in L)
        if isinstance(n, Pow):
            return self.power(operand(n.a, j), n.n, L)
        if isinstance(n, Outer):
            r, c = self.rc[j]                   # the column loop's vector: one row, vec columns
            self.vec, vec = 0, self.vec
            row = self.all(n.a, r)
            self.vec = vec
            a, b = tuple(self.splat(x) for x in row), self.all(n.b, c)
            return tuple(em.let(f"{a[s]} * {b[s]}") for s in L)
        raise AssertionError(f"{type(n).__name__} is not computed in pairs")

    def lane_call(self, op: str, a: tuple[str, ...], L) -> tuple[str, ...]:
        """op (an alphac.math.lanes function) on each of a's vectors: f64x4 and f64x8 through
        rt_math_<op>_w4/_w8 at rt_math_arg (_w2 with NEON), an f64x2 otherwise lane by lane (the
        same bits either way)."""
        em, out = self.em, []
        for s in L:
            if self.vec == 2 and not em.gen.neon:
                out.append(em.let(f"pack({rt_name(op)}(lane({a[s]}, 0)), {rt_name(op)}(lane({a[s]}, 1)))"))
                continue
            em.put(f"{VOCAB[self.vec]['store']}(rt_math_arg, {a[s]});")
            em.put(f"{lane_name(op, self.vec)}(rt_math_arg);")
            out.append(em.let(f"{VOCAB[self.vec]['load']}(rt_math_arg)"))
        return tuple(out)

    def get(self, n: Node, j: str | None) -> str:
        """The `let` of n (at coordinate j) in lane 0."""
        return self.all(n, j)[0]

    def all(self, n: Node, j: str | None) -> tuple[str, ...]:
        """The `let` of n (at coordinate j) in every lane. Its operands are computed first, in
        the order `compute` asks for them, from an explicit stack: a chain of any depth is no
        recursion."""
        todo = [(n, j, False)]
        while todo:
            m, k, ready = todo.pop()
            memo, key = self.slot(m, k)
            if key in memo:
                continue
            if ready:
                names = self.vcompute(m, k) if self.vec and m.shape else self.compute(m, k)
                memo[key] = names * self.lanes if len(names) == 1 else names
            else:
                todo.append((m, k, True))
                todo.extend((c, ck, False) for c, ck in reversed(self.operands(m, k)))
        memo, key = self.slot(n, j)
        return memo[key]

    def slot(self, n: Node, j: str | None) -> tuple[dict, object]:
        k = self.key(n)
        return (self.scalars, k) if not n.shape else (self.coord, (k, j, self.vec))

    def operands(self, n: Node, j: str | None) -> list[tuple[Node, str | None]]:
        """What `compute(n, j)` reads before it emits n (a reduction reads inside its loop)."""
        if self.leaf(n, j) is not None or isinstance(n, (Const, Dot, Sum, Max)):
            return []
        if id(n) in self.buffered and self.key(n) != self.filling:
            raise AssertionError(f"{type(n).__name__} read before its buffer is prepared")
        if isinstance(n, Outer):
            return []
        if isinstance(n, Bcast):
            return [(n.a, None)]
        if isinstance(n, Pick):
            return [(n.a, self.picked(n, j))]
        if isinstance(n, Gather):
            return [(n.k, None)]
        return [(c, self.at(n, c, j)) for c in children(n)]

    def at(self, n: Node, c: Node, j: str | None) -> str | None:
        """The coordinate of operand c that coordinate j of elementwise n reads: j itself, none
        for a scalar, j's column for a vector over a matrix's rows."""
        if not c.shape:
            return None
        if len(c.shape) < len(n.shape):
            return self.split(j, n.shape[1])[1]
        return j

    def picked(self, n: Pick, j: str | None) -> str:
        """The coordinate of n.a that coordinate j of the fixed index n reads."""
        row = max(1, n.a.size // n.a.shape[0])
        if j is None:
            return str(n.k * row)
        return str(n.k * row + int(j)) if j.isdigit() else f"{n.k * row} + {j}"

    def prepare(self, nodes: list[Node]) -> None:
        """Compute, here and now, every scalar a loop over these vector nodes will read, so that
        no scalar's `let` is born inside a loop body and read after it. A node an earlier call
        listed is not entered again: everything below it was prepared then (no pass a call over
        a windowed learner's large DAG)."""
        for sub in postorder(nodes, self.prepared):
            self.prepared.add(id(sub))
            if not sub.shape:
                self.all(sub, None)
            elif id(sub) in self.buffered and self.key(sub) not in self.buffers:
                self.fill(sub)

    def fold(self, accs: tuple[str, ...], terms, lanes: range) -> None:
        for s in lanes:
            self.em.put(f"{accs[s]} = {accs[s]} + {terms[s]};")

    def fill(self, n: Node) -> None:
        """Compute buffered node n into its buffer, here (its operands are prepared already)."""
        em, gen = self.em, self.em.gen
        L = self.width(n)
        bufs = tuple(gen.buffer(n.size) for _ in L)
        put = lambda s, j, v: em.put(f"storef({gen.slot(bufs[s], j)}, {v});")
        self.filling = self.key(n)
        if isinstance(n, MatVec):
            self.matvec(n, bufs, L)
        elif isinstance(n, VecMat) and self.row_pointer(n.b, "0", probe=True):
            self.vecmat(n, bufs, L)
        elif isinstance(n, VecMat):
            rows, cols = n.b.shape
            self.loop(0, cols, lambda c: [put(s, c, flit(-0.0)) for s in L])

            pairs = self.vectorizable([n.b])

            def row(r: str) -> None:
                u = self.all(n.a, r)

                def term(c: str) -> None:
                    b = self.all(n.b, self.flat(r, c, cols))
                    ts = [em.let(f"{self.splat(u[s]) if self.vec else u[s]} * {b[s]}") for s in L]
                    for s in L:
                        if self.vec:
                            ld, st = VOCAB[self.vec]["load"], VOCAB[self.vec]["store"]
                            em.put(f"{st}({gen.slot(bufs[s], c)}, {ld}({gen.slot(bufs[s], c)}) + {ts[s]});")
                        else:
                            put(s, c, f"{gen.address(bufs[s], c)} + {ts[s]}")
                self.vloop(0, cols, term, pairs)
            self.loop(0, rows, row)
        elif isinstance(n, Stack):                  # scalars, or the rows of a matrix
            for k, item in enumerate(n.items):
                w = max(1, item.size)

                def row(c: str | None, k=k, item=item, w=w) -> None:
                    v = self.all(item, c)
                    at = str(k * w + int(c or 0)) if c is None or c.isdigit() else f"{k * w} + {c}"
                    for s in L:
                        put(s, at, v[s])
                row(None) if not item.shape else self.loop(0, w, row)
        elif isinstance(n, MaxAdj):
            dt, first = self.all(n.dt, None), self.all(n.a, "0")
            ms = tuple(em.let(first[s], "m") for s in L)
            wins = tuple(em.let("0", "win") for _ in L)

            def scan(k: str) -> None:
                v = self.all(n.a, k)
                for s in L:
                    em.put(f"if fgt({v[s]}, {ms[s]}) != 0 {{ {wins[s]} = {k}; }}")
                    em.put(f"{ms[s]} = {rt_name('max')}({ms[s]}, {v[s]});")
            self.loop(1, n.size, scan)

            def spread(j: str) -> None:
                for s in L:
                    w = em.let(flit(0.0), "w")
                    em.put(f"if {j} == {wins[s]} {{ {w} = {dt[s]}; }}")
                    put(s, j, w)
            self.loop(0, n.size, spread)
        else:
            def each(j: str) -> None:
                v = self.all(n, j)
                for s in L:
                    if self.vec:
                        em.put(f"{VOCAB[self.vec]['store']}({gen.slot(bufs[s], j)}, {v[s]});")
                    else:
                        put(s, j, v[s])
            self.vloop(0, n.size, each, len(n.shape) == 1 and self.vectorizable([n]))
        self.buffers[self.key(n)] = bufs * self.lanes if len(bufs) == 1 else bufs

    def matvec(self, n: MatVec, bufs: tuple[str, ...], L: range) -> None:
        """W @ b into bufs, rows in blocks: each block's dots (every row of it, every lane) are
        independent chains in one loop over the columns, so each W value and each b value is
        loaded once a block. With an even number of lanes sharing W (sample blocks), b's lanes
        are first packed in pairs, `xp[c * lanes + s]`, and each pair of lanes' chains is one
        f64x2: the block's loop splats W[r, c] and multiplies it by a pair. Every chain is the
        row's left fold from -0.0 over c in order, `acc + W[r, c] * b[c]`, as one row at a time
        computes it. With f64x4 (`gen.wide`), four lanes and W read in place, a row's four chains
        are one f64x4 (eight lanes, with f64x8: one f64x8), W[r, c] broadcast from memory, and a
        block is MATVEC_CHAINS rows; no SSE instruction runs between the block's first f64x4 and
        its wide_end() (the chains start from a table of -0.0 and go through `wt`), so no CPU pays
        for mixing the two."""
        em, gen = self.em, self.em.gen
        rows, cols = n.a.shape
        nl = len(L)
        packed = nl % 2 == 0 and id(n.a) not in self.varying
        if packed:
            xp = gen.buffer(cols * nl)
            xq = [em.let(f"{xp} + {8 * q}", "xq") for q in range(0, nl, 2)]   # each pair's base

            def pack(c: str) -> None:
                b, at = self.all(n.b, c), em.let(f"{nl} * {c}", "cx")
                for q in range(0, nl, 2):
                    em.put(f"storev({gen.slot(xq[q // 2], at)}, pack({b[q]}, {b[q + 1]}));")
            self.loop(0, cols, pack)
        wide = packed and nl in (4, 8) and nl <= gen.lanes and \
            self.row_pointer(n.a, "0", probe=True) is not None
        vw = VOCAB[nl] if wide else VOCAB[2]
        wt = gen.buffer(nl * MATVEC_CHAINS) if wide else None
        chains = 1 if wide else nl // 2 if packed else nl          # accumulators a row
        block = max(1, MATVEC_CHAINS // chains)

        def rows_from(r0: str, count: int) -> None:
            offs = [em.let(f"({r0} + {k}) * {cols}", "ro") for k in range(count)]
            rowp = [self.row_pointer(n.a, o) for o in offs]    # W's rows as bases, or None
            zero = em.const(nl, -0.0) if wide else f"splat({flit(-0.0)})" if packed else flit(-0.0)
            accs = [[em.let(zero, "acc") for _ in range(chains)] for _ in range(count)]

            def term(c: str) -> None:
                if packed:
                    at = em.let(f"{nl} * {c}", "cx")
                    xs = [em.let(f"{vw['load']}({gen.slot(x, at)})") for x in xq[:chains]]
                else:
                    xs = self.all(n.b, c)
                for k in range(count):
                    w = (em.let(gen.address(rowp[k], c)),) * nl if rowp[k] else \
                        self.all(n.a, f"{offs[k]} + {c}")
                    if packed:
                        ws = em.let(f"{vw['splat']}({w[0]})", "s")
                        for q in range(chains):
                            em.put(f"{accs[k][q]} = {accs[k][q]} + {em.let(f'{ws} * {xs[q]}')};")
                    else:
                        self.fold(accs[k], [em.let(f"{w[s]} * {xs[s]}") for s in L], L)
            self.loop(0, cols, term)
            if wide:
                for k in range(count):
                    em.put(f"{vw['store']}({gen.slot(wt, str(nl * k))}, {accs[k][0]});")
                em.put("wide_end();")
            for k in range(count):
                r = f"{r0} + {k}" if not r0.isdigit() else str(int(r0) + k)
                for s in L:
                    v = em.let(f"loadf({gen.slot(wt, str(nl * k + s))})") if wide else \
                        em.let(f"lane({accs[k][s // 2]}, {s % 2})") if packed else accs[k][s]
                    em.put(f"storef({gen.slot(bufs[s], r)}, {v});")
        self.blocks(rows, block, rows_from)

    def blocks(self, count: int, size: int, each) -> None:
        """each(first, k) for the blocks of `size` of 0..count-1 (k = size), then the rest."""
        full = count // size
        if full:
            self.loop(0, full, lambda b: each(
                str(int(b) * size) if b.isdigit() else self.em.let(f"{b} * {size}", "bk"), size))
        if count % size:
            each(str(full * size), count % size)

    def vecmat(self, n: VecMat, bufs: tuple[str, ...], L: range) -> None:
        """u @ W into bufs (W read in place, the same in every lane), columns in blocks: each
        block's sums (pairs of columns, every lane) are f64x2 chains in one loop over the rows,
        after each lane's u[r] is splatted once into `up[r * lanes + s]`; an odd last column is
        one scalar chain a lane. Every chain is column c's left fold from -0.0 over r in order,
        `acc + u[r] * W[r, c]`, as the row-by-row loop computes it. With f64x4 (`gen.wide`), the
        blocks are of four columns (u[r] broadcast from `up`), then a last pair, then the odd one;
        with f64x8, of eight columns first, then a four."""
        em, gen = self.em, self.em.gen
        rows, cols = n.b.shape
        nl = len(L)
        up = gen.buffer(2 * rows * nl)

        def spread(r: str) -> None:
            u, at = self.all(n.a, r), em.let(f"{up} + 8 * ({2 * nl} * {r})", "ua")
            for s in L:
                em.put(f"storev({gen.slot(at, str(2 * s))}, splat({u[s]}));")
        self.loop(0, rows, spread)

        def cols_from(c0: str, count: int, width: int = 2) -> None:    # `count` blocks of width
            base = self.row_pointer(n.b, c0)
            load, store = VOCAB[width]["load"], VOCAB[width]["store"]
            zero = em.const(width, -0.0)
            accs = [[em.let(zero, "acc") for _ in range(count)] for _ in L]

            def term(r: str) -> None:
                w = em.let(f"{base} + 8 * ({r} * {cols})", "wr")
                ws = [em.let(f"{load}({gen.slot(w, str(width * b))})") for b in range(count)]
                at = em.let(f"{up} + 8 * ({2 * nl} * {r})", "ua")
                for s in L:
                    u = em.let(f"{VOCAB[width]['splat']}(loadf({gen.slot(at, str(2 * s))}))" if width >= 4 else
                               f"loadv({gen.slot(at, str(2 * s))})")
                    for b in range(count):
                        em.put(f"{accs[s][b]} = {accs[s][b]} + {em.let(f'{u} * {ws[b]}')};")
            self.loop(0, rows, term)
            for s in L:
                for b in range(count):
                    c = f"{c0} + {width * b}" if not c0.isdigit() else str(int(c0) + width * b)
                    em.put(f"{store}({gen.slot(bufs[s], c)}, {accs[s][b]});")
            if width >= 4:
                em.put("wide_end();")
        done = 0                                          # columns in blocks so far
        for width in (8, 4, 2):
            many = (cols - done) // width if width <= gen.lanes else 0
            if many:
                self.blocks(many, max(1, MATVEC_CHAINS // nl), lambda b, k, width=width, done=done: cols_from(
                    str(done + width * int(b)) if b.isdigit() else
                    em.let(f"{done} + {width} * {b}" if done or width == 2 else f"{width} * {b}", "c0"), k, width))
            done += width * many
        if cols % 2:                                      # the last column, alone
            last = str(cols - 1)
            accs = [em.let(flit(-0.0), "acc") for _ in L]

            def one(r: str) -> None:
                u, w = self.all(n.a, r), self.all(n.b, self.flat(r, last, cols))
                self.fold(accs, [em.let(f"{u[s]} * {w[s]}") for s in L], L)
            self.loop(0, rows, one)
            for s in L:
                em.put(f"storef({gen.slot(bufs[s], last)}, {accs[s]});")

    def row_pointer(self, n: Node, offset: str, probe: bool = False) -> str | None:
        """The address of coordinate `offset` of n, as a `let` (with `probe`, the expression),
        when n is read in place and is the same in every lane (its leaf is
        `loadf(BASE + 8 * (E))`, E the coordinate or a constant plus it), so that a row's loads
        are `loadf(ROW + 8 * (c))`; None otherwise."""
        leaf = None if id(n) in self.varying else self.leaf(n, "@")
        if leaf is None or not (leaf.startswith("loadf(") and leaf.endswith("))")):
            return None
        base, sep, e = leaf[len("loadf("):-len("))")].partition(" + 8 * (")
        if not sep or "@" in base or not (e == "@" or (e.endswith(" + @") and e[:-4].isdigit())):
            return None
        address = f"{base} + 8 * ({e.replace('@', offset)})"
        return address if probe else self.em.let(address, "rp")

    def compute(self, n: Node, j: str | None) -> tuple[str, ...]:
        em = self.em
        L = self.width(n)
        if self.leaf(n, j) is not None:
            return tuple(em.let(self.leaf(n, j, s)) for s in L)
        if isinstance(n, Grad):                 # the mean, fused: G_p / n where the update reads it
            return (em.let(f"loadf({self.em.gen.slot(f'G_{n.param}', j or '0')}) / {self.mean_n}"),)
        if isinstance(n, Const):
            if not n.shape:
                return (em.let(flit(n.values[0]), "c"),)
            return (em.let(self.em.gen.address(self.em.gen.const_vector(n), j)),)
        if isinstance(n, Pick):
            return self.all(n.a, self.picked(n, j))
        if isinstance(n, Elem):
            a = self.all(n.a, self.at(n, n.a, j))
            b = self.all(n.b, self.at(n, n.b, j))
            if n.op in OPS:
                return tuple(em.let(f"{a[s]} {OPS[n.op]} {b[s]}") for s in L)
            return tuple(em.let(f"{rt_name(n.op)}({a[s]}, {b[s]})") for s in L)
        if isinstance(n, Unary):
            a = self.all(n.a, j)
            if n.op in ("neg", "sqrt"):
                return tuple(em.let(f"-{a[s]}" if n.op == "neg" else f"sqrt({a[s]})") for s in L)
            if n.op == "relu":          # a where a > 0 or a NaN (not a <= 0), else +0: no branch
                return tuple(em.let(f"bits2f(f2bits({a[s]}) & (fge({flit(0.0)}, {a[s]}) - 1))") for s in L)
            return tuple(em.let(f"{rt_name(n.op)}({a[s]})") for s in L)
        if isinstance(n, Where):        # the chosen value's bits, selected by a mask: no branch,
            a, b, then, other = (self.all(c, self.at(n, c, j)) for c in (n.a, n.b, n.then, n.other))
            outs = []                   # whose direction relu's data would mispredict half the time
            for s in L:
                m = em.let(f"0 - {CMP_BIT[n.cmp].format(a[s], b[s])}", "m")
                outs.append(em.let(f"bits2f((f2bits({then[s]}) & {m}) | (f2bits({other[s]}) & ({m} ^ -1)))", "w"))
            return tuple(outs)
        if isinstance(n, Pow):
            return self.power(self.all(n.a, j), n.n, L)
        if isinstance(n, Bcast):
            return self.all(n.a, None)
        if isinstance(n, Outer):
            r, c = self.split(j, n.shape[1])
            a, b = self.all(n.a, r), self.all(n.b, c)
            return tuple(em.let(f"{a[s]} * {b[s]}") for s in L)
        if isinstance(n, Gather):               # row k of a declared name, read in place
            k, row = self.all(n.k, None), max(1, n.size)
            base = f"st_{n.a.name}" if isinstance(n.a, Read) else self.em.gen.const_vector(n.a)
            return tuple(em.let(self.em.gen.address(base, f"{row_index(k[s])} * {row} + {j or 0}"))
                         for s in L)
        if isinstance(n, OneHot):
            k = self.all(n.a, None)
            outs = []
            for s in L:
                outs.append(em.let(flit(0.0), "w"))
                em.put(f"if (f2bits({k[s]} - i2f({j})) << 1) == 0 {{ {outs[-1]} = {flit(1.0)}; }}")
            return tuple(outs)
        if isinstance(n, Max):
            self.prepare([n.a])
            first = self.all(n.a, "0")
            accs = tuple(em.let(first[s], "m") for s in L)

            def scan(k: str) -> None:
                v = self.all(n.a, k)
                for s in L:
                    em.put(f"{accs[s]} = {rt_name('max')}({accs[s]}, {v[s]});")
            self.loop(1, n.a.size, scan)       # a matrix's (the update's): row-major
            return accs
        if isinstance(n, (Dot, Sum)):
            self.prepare([n.a] + ([n.b] if isinstance(n, Dot) else []))
            accs = tuple(em.let(flit(-0.0), "acc") for _ in L)
            size = n.a.size                     # a 2-D sum (from differentiation): all of it

            def body(k: str) -> None:
                if isinstance(n, Dot):
                    a, b = self.all(n.a, k), self.all(n.b, k)
                    self.fold(accs, [em.let(f"{a[s]} * {b[s]}") for s in L], L)
                else:
                    self.fold(accs, self.all(n.a, k), L)
            self.loop(0, size, body)             # coordinate values die with their loop
            return accs
        raise TypeError(f"cannot lower {type(n).__name__}")


class LearnerCode:
    def __init__(self, lr: Learner, evaluation: tuple[Learner, str | None] | None = None,
                 lanes: int = 2, neon: bool = False):
        self.lr = lr
        self.lanes = lanes               # the widest vector: 2, 4 (f64x4: x86_64-v3), 8 (x86_64-v4)
        self.neon = neon                 # f64x2's integer lanes (CPU_NEON): the _w2 vector functions
        self.wide = lanes >= 4           # f64x4 in the matrix products
        self.evaluation = evaluation     # (the learner on held-out data, its labels' name)
        self.counter = 0
        self.consts: dict[tuple, str] = {}
        self.blobs: dict[str, bytes] = {}
        self.globals: list[str] = []
        self.buffers: list[str] = []
        # the update's reduced scalars: node id -> its global rd<k> (learner_reduce)
        self.reduced = {id(n): f"rd{k}" for k, n in enumerate(update_reductions(lr.update))}

    def buffer(self, size: int) -> str:
        """A fresh global of `size` binary64 values, for one buffered node."""
        name = f"bf{len(self.buffers)}"
        self.buffers.append(name)
        self.globals.append(f"global {name}: [f64; {size}];")
        return name

    def const_vector(self, c: Const) -> str:
        return self.table(c.values)

    def table(self, key: tuple[float, ...]) -> str:
        """A read-only global of these binary64 values (one for equal tuples)."""
        if key not in self.consts:
            name = f"ct{len(self.consts)}"
            self.consts[key] = name
            self.blobs[name] = f64_bytes(key)
            self.globals.append(f"data {name}: [f64; {len(key)}] = extern;")
        return self.consts[key]

    # -- leaves --------------------------------------------------------------------------------
    def slot(self, base: str, offset: str) -> str:
        return f"{base} + 8 * ({offset})" if not offset.isdigit() else f"{base} + {8 * int(offset)}"

    def address(self, base: str, offset: str) -> str:
        return f"loadf({self.slot(base, offset)})"

    def loss_leaf(self, n: Node, j: str | None, s: int = 0) -> str | None:
        """A leaf of the per-sample DAG in lane s (sample i + s: its rows are row_NAME_s)."""
        row_of = (lambda name: f"row_{name}_{s}") if s else (lambda name: f"row_{name}")
        if isinstance(n, Read):
            return f"loadf(st_{n.name})" if not n.shape else self.address(f"st_{n.name}", j)
        if isinstance(n, DataRow):
            return f"loadf({row_of(n.name)})" if not n.shape else self.address(row_of(n.name), j)
        if isinstance(n, Pick):
            offset, root = n.root()
            coord = str(offset) if not n.shape else (f"{offset} + {j}" if not j.isdigit()
                                                     else str(offset + int(j)))
            if isinstance(root, Read):
                return self.address(f"st_{root.name}", coord)
            if isinstance(root, DataRow):
                return self.address(row_of(root.name), coord)
        return None

    # -- functions -----------------------------------------------------------------------------
    def gen_grad(self) -> str:
        lr = self.lr
        em = Emitter(self)
        em.put(f"#line {lr.loss_line}")
        batched = bool(lr.batch)
        lanes = 1 if batched or large_body(lr) else \
            2 * SAMPLE_LANES if self.lanes == 8 else SAMPLE_LANES
        self.grad_lanes = lanes          # exact_sum: the lanes of XB_p and XT
        self.tiled = tiled_grads(lr, self.lanes) if lanes > 1 else {}

        def clear() -> None:             # G = -0.0, the sum of no sample
            for p in lr.params:
                em.vloop(0, p.size, lambda j, vec, p=p: em.put(
                    f"{VOCAB[vec]['store']}(G_{p.name} + 8 * ({j}), {em.const(vec, -0.0)});"))
        for p in lr.params:              # gathered rows: G = -0.0 and no index counted yet
            if scattered(lr, p.name):
                em.vloop(0, p.size, lambda j, vec, p=p: em.put(
                    f"{VOCAB[vec]['store']}(G_{p.name} + 8 * ({j}), {em.const(vec, -0.0)});"))
                em.vloop(0, p.shape[0], lambda j, vec, p=p: em.put(
                    f"{VOCAB[vec]['store']}(GN_{p.name} + 8 * ({j}), {em.const(vec, 0.0)});"))
        if lr.exact:                     # exact_sum: fixed-point accumulators (xsum.rt)
            P = exact_count(lr)          # the params' accumulators only where written (xsum.rt)
            if any(scattered(lr, p.name) for p in lr.params):
                em.put(f"xc_clear_n(XA, XSP, {P});")
            else:
                em.put(f"xe_clear_acc(XA, XSP, {P});")
            if lanes == 1:
                em.put(f"xe_clear_n(XE, {2 * P});")   # the expansions
            else:                        # the blocks' first writes the params' (fused_expansion)
                for p in lr.params:
                    if scattered(lr, p.name):
                        em.put(f"xe_clear_n({expansion_at(lr, p.name)}, {2 * p.size});")
                em.put(f"xe_clear_n({expansion_at(lr, None)}, 2);")
        else:
            em.put(f"storef(L_sum, {flit(-0.0)});")
            if lanes == 1:
                clear()
        if batched:                      # step t's samples (alphac.ir.order), counted in n
            em.put(f"let ep = t / {lr.batches};")
            em.put(f"let first = (t - ep * {lr.batches}) * {lr.batch};")
            em.put(f"let last = first + {lr.batch};")
            em.put("let n = 0;")
        em.put("let i = lo;")
        if lanes > 1:                    # blocks of `lanes` samples, then the rest one by one;
            em.put(f"if i + {lanes} <= hi {{")      # the first block stores G (no zero-fill pass)
            em.depth += 1
            self.samples(em, lanes, first=True)
            em.put(f"i = i + {lanes};")
            em.put(f"while i + {lanes} <= hi {{")
            em.depth += 1
            self.samples(em, lanes)
            em.put(f"i = i + {lanes};")
            em.depth -= 1
            em.put("}")
            em.depth -= 1
            em.put("} else {")
            em.depth += 1
            if lr.exact:
                for p in lr.params:
                    if not scattered(lr, p.name):
                        em.put(f"xe_clear_n({expansion_at(lr, p.name)}, {2 * p.size});")
            else:
                clear()
            em.depth -= 1
            em.put("}")
        em.put("while i < hi {")
        em.depth += 1
        if batched:
            em.put("let pos = " + ("i;" if lr.shuffle is None else "learner_position(i, ep);"))
            em.put("if pos >= first && pos < last {")
            em.depth += 1
            em.put("n = n + 1;")
        self.samples(em, 1)
        if batched:
            em.depth -= 1
            em.put("}")
        em.put("i = i + 1;")
        em.depth -= 1
        em.put("}")
        for p in lr.params:
            if p.name in self.tiled:
                self.tile_sum(em, p)
        self.scatter_end(em, "n" if batched else "(hi - lo)")
        if batched:
            em.put("return n;")
            return self.function("learner_grad", "lo: i64, hi: i64, t: i64", em, "i64") + \
                self.gen_position()
        return self.function("learner_grad", "lo: i64, hi: i64", em)

    def samples(self, em: Emitter, lanes: int, first: bool = False) -> None:
        """The gradient terms and the loss of samples i..i+lanes-1 into G_p and L_sum: each
        coordinate's sum takes the samples' terms in sample order, as one sample at a time does.
        With `first` (lanes > 1: the owner's first block), G_p = t0 + t1 + ... is stored, not
        added to G_p: the fold from -0.0 gives -0.0 + t0 = t0 exactly, so the bits are the same."""
        lr = self.lr
        for d in lr.data:
            for s in range(lanes):
                row = row_address(d, f"(i + {s})" if s else "i", streamed(lr))
                em.put(f"let row_{d.name}{f'_{s}' if s else ''} = {row};")
        # Run-time rows of a line or more (a block's rows are contiguous): the first static loop
        # of the block prefetches, spread over its iterations, the block k >= AHEAD / size blocks
        # on where the owner has it (else its own block again), where any owner can (a hint: it
        # never faults and changes no value)
        em.ahead = []
        for d in lr.data:
            size = lanes * 8 * d.cols
            k = -(-AHEAD // size)
            if d.file is not None and d.cols >= 8 and lanes > 1 and not streamed(lr) and \
                    lr.nsamples >= (k + 1) * lanes:
                em.ahead.append((f"row_{d.name}", size, k * size, f"i + {(k + 1) * lanes} <= hi"))
        roots = [c.node for p in lr.params for c in lr.grads[p.name]] + [lr.loss]
        vals = Values(em, lambda n, j, s: self.loss_leaf(n, j, s), buffered_nodes(roots), lanes,
                      varying_nodes(roots))
        vals.same = twins(roots)
        for p in lr.params:
            contribs = lr.grads[p.name]
            if scattered(lr, p.name):
                self.scatter(em, vals, p, lanes)
                continue
            if p.name in self.tiled:
                self.tile_rows(em, vals, p, lanes)
                continue
            cuts = sorted({0, p.size} | {c.offset for c in contribs} |
                          {c.offset + c.length for c in contribs})
            if lr.exact:                     # p's expansions, its vectors found inexact, 2^600
                ep = em.let(expansion_at(lr, p.name), "ep")
                ex = {"s": ep, "lo": em.let(f"{ep} + {8 * p.size}", "el"), "nf": em.let("0", "nf"),
                      "scale": em.let(flit(2.0 ** 600), "sc"), "zero": em.let(flit(-0.0), "nz"), "rows": {}}
            for a, b in zip(cuts, cuts[1:]):
                covering = [c for c in contribs if c.offset <= a and b <= c.offset + c.length]

                def body(j: str, covering=covering, p=p, a=a, row=None, more=()) -> None:
                    # `more`: further rows' (j, row) of a 2-D gradient, at the same columns: their
                    # terms share each load of the columns' vectors; each coordinate's fold alone
                    ld, st = VOCAB[vals.vec]["load"], VOCAB[vals.vec]["store"]
                    zero = em.const(vals.vec, 0.0)
                    slots, gss = [], []
                    for jj, rw in ((j, row), *more):
                        terms = [vals.all(c.node, None if not c.node.shape else _sub(jj, c.offset))
                                 for c in covering]
                        gs = []
                        for s in range(lanes):
                            g = terms[0][s] if terms else em.let(zero, "zero")
                            for t in terms[1:]:
                                g = em.let(f"{g} + {t[s]}")
                            gs.append(g)
                        gss.append(gs)
                        slots.append(self.slot(*rw) if rw else self.slot(ex["s"] if lr.exact else f"G_{p.name}", jj))
                    if lr.exact:             # each coordinate's terms into its (s, lo) in registers
                        for slot, gs, (jj, rw) in zip(slots, gss, ((j, row), *more)):
                            lo_slot = self.slot(ex["rows"][rw[0]], rw[1]) if rw else self.slot(ex["lo"], jj)
                            self.fused_expansion(em, vals.vec, p, (slot, lo_slot), jj, gs, ex, first)
                        return
                    for slot, gs in zip(slots, gss):
                        if lanes == 1:
                            em.put(f"{st}({slot}, {ld}({slot}) + {gs[0]});")
                    if lr.exact or lanes == 1:
                        return
                    accs = [em.let(f"{gs[0]} + {gs[1]}" if first else f"{ld}({slot}) + {gs[0]}", "gs")
                            for slot, gs in zip(slots, gss)]
                    for s in range(1 + first, lanes):    # sample order in each coordinate's sum
                        for acc, gs in zip(accs, gss):
                            em.put(f"{acc} = {acc} + {gs[s]};")
                    for slot, acc in zip(slots, accs):
                        em.put(f"{st}({slot}, {acc});")
                nodes = [c.node for c in covering]
                vals.prepare(nodes)
                cols = p.shape[1] if len(p.shape) == 2 else 0
                if cols and a % cols == 0 and b % cols == 0 and \
                        any(len(c.node.shape) == 2 for c in covering):
                    pairs = vals.vectorizable(nodes, rows=True)

                    def rows(rs: list[str], body=body, cols=cols, pairs=pairs, nodes=nodes, p=p) -> None:
                        if pairs:                # an outer product's row value, once a row
                            for r in rs:
                                for n in postorder(nodes):
                                    if isinstance(n, Outer) and vals.key(n) not in vals.buffers:
                                        vals.all(n.a, r)
                        gr = [em.let(self.slot(ex["s"] if lr.exact else f"G_{p.name}", f"{r} * {cols}"),
                                     "gr") for r in rs]   # the rows' sums (exact_sum: s words)
                        if lr.exact:             # and lo words
                            ex["rows"].update((g, em.let(self.slot(ex["lo"], f"{r} * {cols}"), "gl"))
                                              for g, r in zip(gr, rs))
                        vals.vloop(0, cols, lambda c: body(
                            vals.flat(rs[0], c, cols), row=(gr[0], c),
                            more=[(vals.flat(r, c, cols), (g, c)) for r, g in zip(rs[1:], gr[1:])]), pairs)
                    lo, hi = a // cols, b // cols
                    k = GRAD_ROWS if pairs and not lr.exact else 1
                    if k > 1:                    # k rows at a time, then the rest one by one
                        def block(q: str, rows=rows, lo=lo, k=k) -> None:
                            r0 = em.let(f"{lo} + {k} * {q}", "r")
                            rows([r0] + [em.let(f"{r0} + {m}", "r") for m in range(1, k)])
                        vals.loop(0, (hi - lo) // k, block)
                        lo += (hi - lo) // k * k
                    vals.loop(lo, hi, lambda r, rows=rows: rows([r]))
                else:
                    vals.vloop(a, b, body, vals.vectorizable(nodes))
            if lr.exact:                     # the vectors found inexact, again by xe_add_lanes
                at = f"{exact_at(lr, p.name, '0')}, {ex['s']}, XB_{p.name}, {p.size}"
                em.put(f"if {ex['nf']} != 0 {{")
                em.put(f"    store64(XFAIL, {lanes});")
                em.put(f"    store64(XFAIL + 8, {ex['nf']});")
                em.put(f"    xe_add_listed({at}, XFAIL);")
                em.put("}")
        vals.prepare([lr.loss])              # the sample's loss, summed like a gradient
        if lr.exact:
            for s, loss in enumerate(vals.all(lr.loss, None)):
                em.put(f"storef(XT + {8 * s}, {loss});")
            em.put(f"xe_add_lanes({exact_at(lr, None, '0')}, {expansion_at(lr, None)}, XT, 1, {lanes});")
            return
        for loss in vals.all(lr.loss, None):
            em.put(f"storef(L_sum, loadf(L_sum) + {loss});")

    def tile_rows(self, em: Emitter, vals: "Values", p, lanes: int) -> None:
        """A tiled gradient (tiled_grads), in the block of samples i..i+lanes-1: each sample's
        row vector (the outer product's left side) into TR_p, row-major over the samples, for
        tile_sum; nothing is added to G_p here."""
        outer, _ = self.tiled[p.name]
        vals.prepare([outer])
        vals.loop(0, p.shape[0], lambda r: [
            em.put(f"storef(TR_{p.name} + 8 * ({r} * {self.lr.nsamples} + i - lo + {s}), {a});")
            for s, a in enumerate(vals.all(outer.a, r)[:lanes])])

    def tile_sum(self, em: Emitter, p) -> None:
        """A tiled gradient's sums, after every sample: G_p[r, c] = -0.0 + t_lo + ... + t_hi-1,
        t_s = TR_p's row r of sample s times x_s[c], one rounded product and a left fold in
        sample order (the bits of the blocks' fold: -0.0 + t is t). Blocks of 4 rows x
        TILE_VECS vectors of columns hold their sums in registers while the samples stream, in
        tiles of columns, so a tile of every sample's x (256 samples x 32 columns: 64 KiB) stays
        in L2 across the rows and G_p is written once."""
        rows, cols = p.shape
        _, d = self.tiled[p.name]
        w, S = em.vw, self.lr.nsamples

        def block(rs: list[str], c0: str, width: int, k: int) -> None:
            v = VOCAB[width] if width else VOCAB[0]
            trs = [em.let(f"TR_{p.name} + 8 * ({r} * {S} - lo)", "tr") for r in rs]
            accs = [[em.let(em.const(width, -0.0), "acc") for _ in range(k)] for _ in rs]

            def sample(s: str) -> None:      # at f64x8 a broadcast from memory a product
                xr = em.let(row_address(d, s, False), "xr")
                a = [f"loadf({tr} + 8 * ({s}))" for tr in trs]
                sp = a if width == 8 else [em.let(f"{v['splat']}({x})" if width else x, "a") for x in a]
                for q in range(k):
                    xv = em.let(f"{v['load']}({xr} + 8 * ({c0} + {q * max(width, 1)}))", "x")
                    for acc, sa in zip(accs, sp):
                        term = f"splatz({sa}) * {xv}" if width == 8 else f"{sa} * {xv}"
                        em.put(f"{acc[q]} = {acc[q]} + {term};")
            em.loop("lo", "hi", sample)
            for r, acc in zip(rs, accs):
                for q in range(k):
                    em.put(f"{v['store']}(G_{p.name} + 8 * ({r} * {cols} + {c0} + {q * max(width, 1)}), {acc[q]});")
            if width >= 4:
                em.put("wide_end();")

        R = 4                                # rows a block: 16 sums in registers

        def group(c0: str, width: int, k: int) -> None:    # every row, k vectors at c0
            em.loop(0, rows // R, lambda q: block(
                [r := em.let(f"{R} * {q}", "r")] + [em.let(f"{r} + {m}", "r") for m in range(1, R)],
                c0, width, k))
            for r in range(rows // R * R, rows):
                block([str(r)], c0, width, k)
        span = TILE_VECS * w
        em.loop(0, cols // span, lambda t: group(em.let(f"{t} * {span}", "c"), w, TILE_VECS))
        c0 = cols // span * span
        for width in (w, 4, 2, 0):          # the last columns: fewer vectors, then narrower
            k = (cols - c0) // max(width, 1) if width == w else int(cols - c0 >= max(width, 1))
            if width <= w and k:
                group(str(c0), width, k)
                c0 += k * max(width, 1)

    def fused_expansion(self, em: Emitter, vec: int, p, slots: tuple[str, str], j: str,
                        gs: list[str], ex: dict, first: bool) -> None:
        """exact_sum: the block's terms gs (lane by lane, sample order) of coordinates j.. (vec
        lanes; 0: one) of p into their expansions (s, lo at `slots`, in p's XE), by xsum.rt's
        xe_add_lanes steps, in registers: 2Sum (s, d), then d into lo by 2Sum, whose error f
        must be zero (a NaN or an infinity shows in f too): a vector's f bits or-ed into `bad`,
        the sign shifted out (one coordinate's: f times 2^600 squared and summed). A vector whose `bad`
        is zero in every lane stores s and lo; any other keeps them as before the block, stores
        its terms in XB_p and records 16 j + vec in XFAIL (its count ex["nf"]), for
        xe_add_listed. The first block starts from s = t0, lo = -0.0 (what xe_add_lanes' first
        step from (-0.0, -0.0) gives for a finite t0; a non-finite one makes the next step's f a
        NaN), so no pass clears XE before it; its first step's 2Sum into lo = -0.0 is -d, exact,
        so its f is not computed (a NaN in d reaches lo, and the next step's f)."""
        V = VOCAB[vec]
        slot, lo_slot = slots
        gs = [g if g.isidentifier() else em.let(g, "g") for g in gs]
        if vec and em.hoist is not None:     # 2^600 and -0.0 splat before the vloop
            em.hoist[2].update((ex["scale"], ex["zero"]))
        zero = em.splat(ex["zero"], vec) if vec else ex["zero"]
        if first:
            s, lo, rest = gs[0], zero, gs[1:]
        else:
            s, lo, rest = em.let(f"{V['load']}({slot})", "es"), em.let(f"{V['load']}({lo_slot})", "el"), gs
        bits = vec >= 2                       # qor, qshl: the lanes' bits
        scale = None if bits else em.splat(ex["scale"], vec) if vec else ex["scale"]
        bad = None
        for k, g in enumerate(rest):
            t = em.let(f"{s} + {g}", "t")
            tv = em.let(f"{t} - {s}", "tv")
            d = em.let(f"(({t} - {tv}) - {s}) + ({tv} - {g})", "d")   # minus the error
            u = em.let(f"{lo} - {d}", "u")
            if not (first and k == 0 and len(rest) > 1):
                uv = em.let(f"{u} - {lo}", "uv")
                f = em.let(f"({lo} - ({u} - {uv})) - ({d} + {uv})" if bits else
                           f"(({lo} - ({u} - {uv})) - ({d} + {uv})) * {scale}", "f")
                if bits:
                    bad = em.let(f if bad is None else f"qor({bad}, {f})", "bad")
                else:
                    bad = em.let(f"{f} * {f}" if bad is None else f"{bad} + {f} * {f}", "bad")
            s, lo = t, u
        if vec == 0:
            test = f"f2bits({bad})"
        elif vec == 2:
            q = em.let(f"qshl({bad}, 1)", "q")
            test = f"(f2bits(lane({q}, 0)) | f2bits(lane({q}, 1)))"
        else:                                 # the lanes' bits through memory (no lane extract)
            em.put(f"{V['store']}(XCHK, qshl({bad}, 1));")
            test = "(" + " | ".join(f"load64(XCHK + {8 * k})" for k in range(vec)) + ")"
        em.put(f"if {test} == 0 {{")
        em.put(f"    {V['store']}({slot}, {s});")
        em.put(f"    {V['store']}({lo_slot}, {lo});")
        em.put("} else {")
        em.depth += 1
        if first:                             # as before the block: the sum of no term
            em.put(f"{V['store']}({slot}, {zero});")
            em.put(f"{V['store']}({lo_slot}, {zero});")
        for k, g in enumerate(gs):
            em.put(f"{V['store']}({self.slot(f'XB_{p.name}', j)}{f' + {8 * p.size * k}' if k else ''}, {g});")
        em.put(f'store64(room(XFAIL, 16 + 8 * {ex["nf"]}, 8, "buffer-bound"), 16 * ({j}) + {vec});')
        em.put(f"{ex['nf']} = {ex['nf']} + 1;")
        em.depth -= 1
        em.put("}")

    def scatter(self, em: Emitter, vals: "Values", p, lanes: int) -> None:
        """A gathered param's per-sample gradient (its contributions are Scatters, types/check.py's
        gathered_only), touching only the rows the sample's indices name: lane by lane (sample
        order), each row named by index h and by no earlier one gets the left fold of the
        adjoints of h and of every later index naming it (the dense fold's value, but for the
        sign of a zero: the +0s of the indices that do not name the row come in scatter_end),
        added to G_p (exact_sum: into its accumulators); GN_p counts the indices that named it."""
        nodes = [c.node for c in self.lr.grads[p.name]]
        row = max(1, p.size // p.shape[0])
        vals.prepare([x for n in nodes for x in (n.k, n.dt)])
        for s in range(lanes):
            ks = [em.let(row_index(vals.all(n.k, None)[s]), "k") for n in nodes]
            for k in ks:                 # (room: an index from data, checked; stores kept in bounds)
                em.put(f'storef(room(GN_{p.name}, 8 * {k}, 8, "buffer-bound"), '
                       f"{self.address(f'GN_{p.name}', k)} + {flit(1.0)});")
            for h, k in enumerate(ks):
                if h:
                    em.put("if " + " && ".join(f"{k} != {x}" for x in ks[:h]) + " {")
                    em.depth += 1
                gr = em.let(f"G_{p.name} + {8 * row} * {k}", "gr")

                def body(j: str, h=h, k=k, gr=gr) -> None:
                    at = lambda n: vals.all(n.dt, j if n.dt.shape else None)[s]
                    acc = em.let(at(nodes[h]), "gt")
                    for n, x in zip(nodes[h + 1:], ks[h + 1:]):
                        term = at(n)
                        em.put(f"if {k} == {x} {{ {acc} = {acc} + {term}; }}")
                    em.put(f'storef(room(G_{p.name}, 8 * ({row} * {k} + {j}), 8, "buffer-bound"), '
                           f"{acc if self.lr.exact else f'{self.address(gr, j)} + {acc}'});")
                vals.loop(0, row, body)
                if self.lr.exact:
                    em.put(f"xc_add_n({exact_at(self.lr, p.name, f'{row} * {k}')}, {gr}, {row});")
                if h:
                    em.depth -= 1
                    em.put("}")

    def scatter_end(self, em: Emitter, n: str) -> None:
        """After an owner's samples: each row of a gathered param that some index of some sample
        did not name gets +0 (its count below n times the indices), once: the fold of the +0s
        each such sample's dense gradient holds there, which changes only a zero's sign (a sum is
        -0 only when every term is); exact_sum: one +0 term. Once a step, not once a sample."""
        for p in self.lr.params:
            if not scattered(self.lr, p.name):
                continue
            row, m = max(1, p.size // p.shape[0]), len(self.lr.grads[p.name])
            need = em.let(f"i2f({n} * {m})", "need")

            def each(r: str, p=p, row=row, need=need) -> None:
                em.put(f"if fgt({need}, {self.address(f'GN_{p.name}', r)}) != 0 {{")
                em.depth += 1
                gr = em.let(f"G_{p.name} + {8 * row} * {r}", "gr")
                em.loop(0, row, lambda c: em.put(f"storef({self.slot(gr, c)}, " + (
                    f"{flit(0.0)});" if self.lr.exact else f"{self.address(gr, c)} + {flit(0.0)});")))
                if self.lr.exact:
                    em.put(f"xc_add_n({exact_at(self.lr, p.name, f'{row} * {r}')}, {gr}, {row});")
                em.depth -= 1
                em.put("}")
            em.loop(0, p.shape[0], each)

    def gen_position(self) -> str:
        """The runtime's copy of alphac.ir.order.position (for `order shuffle(SEED)`)."""
        from alphac.ir import order
        lr = self.lr
        if lr.shuffle is None:
            return ""
        h = order.half_bits(lr.nsamples)
        mask = (1 << h) - 1
        g = f"0x{order.GOLDEN:x}"
        rounds = "".join(f"    let t{r} = left ^ (learner_round(e, {r}, right) & {mask});\n"
                         f"    left = right;\n    right = t{r};\n" for r in range(order.ROUNDS))
        return (f"fn learner_round(e: i64, r: i64, right: i64) -> i64 {{\n"
                f"    let key = (({lr.shuffle} * {g} + e) * {g} + r) * {g} + right;\n"
                f"    let z = (key ^ (key >> 30)) * 0x{order.MIX1:x};\n"
                f"    z = (z ^ (z >> 27)) * 0x{order.MIX2:x};\n"
                f"    return z ^ (z >> 31);\n}}\n\n"
                f"fn learner_feistel(x: i64, e: i64) -> i64 {{\n"
                f"    let left = x >> {h};\n    let right = x & {mask};\n{rounds}"
                f"    return (left << {h}) | right;\n}}\n\n"
                f"fn learner_position(s: i64, e: i64) -> i64 {{\n"
                f"    let x = learner_feistel(s, e);\n"
                f"    while x >= {lr.nsamples} {{ x = learner_feistel(x, e); }}\n"
                f"    return x;\n}}\n\n")

    def gen_round(self) -> str:
        """exact_sum: learner_exact_round() rounds the accumulators once into G and L_sum."""
        em, flush = Emitter(self), Emitter(self)
        for p in self.lr.params:
            if scattered(self.lr, p.name):
                em.put(f"xc_round_into(G_{p.name}, {exact_at(self.lr, p.name, '0')}, {p.size});")
                continue
            at = f"{exact_at(self.lr, p.name, '0')}, {expansion_at(self.lr, p.name)}, {p.size}"
            em.put(f"xe_round_into(G_{p.name}, {at});")
            flush.put(f"xe_flush_n({at});")
        em.put(f"xe_round_into(L_sum, {exact_at(self.lr, None, '0')}, {expansion_at(self.lr, None)}, 1);")
        return self.function("learner_exact_round", "", em) + \
            self.function("learner_exact_flush", "", flush)

    def gen_mean(self) -> str:
        em = Emitter(self)
        em.put("let nf = i2f(n);")
        em.put("storef(loss_mean, loadf(L_sum) / nf);")
        em.put("storef(mean_n, nf);")     # grad(p) = G_p / nf is computed where the update reads it
        return self.function("learner_mean", "n: i64", em)

    def update_leaf(self, n: Node, j: str | None, members_new: dict[str, str]) -> str | None:
        if id(n) in self.reduced:                     # computed before, by learner_reduce
            return f"loadf({self.reduced[id(n)]})"
        if isinstance(n, Clock):                      # learner_clock(t) stored them
            return "loadf(clock_t)" if n.kind == "step" else "loadf(clock_t + 8)"
        if isinstance(n, Read):
            s = self.lr.state(n.name)
            if s.group is None:                       # scalar state: old value, or its new one
                return f"loadf(sn_{n.name})" if n.version else f"loadf(st_{n.name})"
            if n.version and n.name in members_new:
                return members_new[n.name]
            return f"loadf(st_{n.name})" if not n.shape else self.address(f"st_{n.name}", j)
        return None                               # a Grad: Values computes G_p / n (mean_n)

    def mean_n(self, em: Emitter, stmts: list) -> None:
        """`nf`, the step's count, where these statements read a gradient (G_p / nf)."""
        if any(isinstance(n, Grad) for n in postorder([a.node for a in stmts])):
            em.put("let nf = loadf(mean_n);")

    def gen_reduce(self) -> str:
        """learner_reduce(): each reduced scalar of the update into its rd<k>, in their order
        (ir.update_reductions), each a left fold over every coordinate, before any statement;
        learner_terms_<k>(a, b): reduction k's terms at coordinates a..b-1 into st_0t<k> (a
        dot's products, a sum's or max's values; ir.learner.term_states), and learner_fold():
        each rd<k> folded from st_0t<k> (under a partitioned update, once the plan has
        gathered every owner's terms: the same operations in the same order). Under exact_sum
        a dot or sum over a group (ir.learner.exact_reduction) is, in both, its terms in
        st_0t<k> added into one exact accumulator (xsum.rt) and rounded once."""
        nodes = update_reductions(self.lr.update)
        if not nodes:                    # (no function: the code of learners without is as it was)
            return ""
        terms = {int(t.name[2:]): t for t in term_states(self.lr)}
        out = ""
        for k, t in terms.items():
            n, em = nodes[k], Emitter(self)
            self.globals.append(f"global st_{t.name}: [f64; {t.size}];")
            self.mean_n(em, [Assign("", n)])
            vals = Values(em, lambda m, j, s: self.update_leaf(m, j, {}))
            vals.prepare([c for c in children(n)])

            def body(j: str, n=n, t=t, vals=vals, em=em) -> None:
                v = em.let(f"{vals.get(n.a, j)} * {vals.get(n.b, j)}") if isinstance(n, Dot) \
                    else vals.get(n.a, j)
                em.put(f"storef({self.slot(f'st_{t.name}', j)}, {v});")
            vals.loop("a", "b", body)
            out += self.function(f"learner_terms_{k}", "a: i64, b: i64", em)
        exact = [k for k in terms if exact_reduction(self.lr, nodes[k])]
        for fn, folded in (("learner_reduce", {}), ("learner_fold", terms)):
            em = Emitter(self)
            self.mean_n(em, [Assign("", n) for k, n in enumerate(nodes) if k not in folded and k not in exact])
            for k, n in enumerate(nodes):
                if k in exact:           # exact_sum: every term into one accumulator, rounded once
                    if fn == "learner_reduce":
                        em.put(f"learner_terms_{k}(0, {terms[k].size});")
                    em.put(f"storef({self.reduced[id(n)]}, learner_exact_total(st_{terms[k].name}, "
                           f"{terms[k].size}));")
                    continue
                if k in folded:          # the left fold of its terms, coordinates ascending
                    buf = Read(f"0t{k}", folded[k].shape)
                    n = Max(buf) if isinstance(n, Max) else Sum(buf)
                    leaf = (lambda buf: lambda m, j, s: self.address(f"st_{buf.name}", j) if m is buf else None)(buf)
                else:
                    leaf = (lambda n: lambda m, j, s: None if m is n else self.update_leaf(m, j, {}))(n)
                em.put(f"storef({self.reduced[id(nodes[k])]}, {Values(em, leaf).get(n, None)});")
            out += self.function(fn, "", em)
        self.globals += [f"global {name}: [f64; 1];" for name in self.reduced.values()]
        if exact:                        # the exact sums' accumulator (xsum.rt), one at a time
            self.globals += [f"global XRD: [i64; {XC_WORDS}];", f"global XRDSP: [i64; {XS_DIGITS}];"]
            out += ("fn learner_exact_total(x: i64, n: i64) -> f64 {\n    xc_clear_n(XRD, XRDSP, 1);\n"
                    "    xc_add_lanes(XRD, XRDSP, x, 1, n);\n"        # one coordinate, n terms in a row
                    "    return xc_round(XRD, XRDSP);\n}\n\n")
        return out

    def gen_scalars(self) -> str:
        em = Emitter(self)
        self.mean_n(em, [a for a in self.lr.update if self.lr.state(a.target).group is None])
        vals = Values(em, lambda n, j, s: self.update_leaf(n, j, {}))
        for a in self.lr.update:
            if self.lr.state(a.target).group is None:
                em.put(f"#line {a.line}")
                v = vals.get(a.node, None)
                em.put(f"storef(sn_{a.target}, {v});")
                vals.scalars.clear()            # a later read of sn_ reloads the stored value
        return self.function("learner_scalars", "", em)

    def gen_group(self, gi: int) -> str:
        g = self.lr.groups[gi]
        em = Emitter(self)
        stmts = [a for a in self.lr.update if self.lr.state(a.target).group == gi]
        self.mean_n(em, stmts)

        old_reads = old_value_reads(stmts)

        # the scalars that read nothing of the group (constants, scalar state, scalar gradients),
        # computed once before the loop rather than at every coordinate
        pre = Values(em, lambda n, jj, s: self.update_leaf(n, jj, {}))
        if g.shape:
            red = set(self.reduced)
            pre.prepare([n for n in postorder([a.node for a in stmts], red) if not n.shape and all(
                not m.shape and not (isinstance(m, Read) and self.lr.state(m.name).group == gi)
                for m in postorder([n], red))])

        def body(j: str, vec: int = 0) -> None:
            new: dict[str, str] = {}
            vals = Values(em, lambda n, jj, s: self.update_leaf(n, jj, new))
            vals.vec = vec
            vals.scalars.update(pre.scalars)
            coord = j if g.shape else None
            for a, before_store in zip(stmts, old_reads):
                em.put(f"#line {a.line}")
                v = vals.get(a.node, coord)
                for n in before_store:
                    vals.get(n, coord)
                new[a.target] = v
                slot = f"st_{a.target}" if not g.shape else f"st_{a.target} + 8 * ({j})"
                em.put(f"{VOCAB[vec]['store']}({slot}, {v});")
        probe = Values(em, lambda n, jj, s: self.update_leaf(n, jj, {}))
        probe.scalars.update(pre.scalars)       # a schedule computed before the loop: read as is
        if g.shape and probe.vectorizable([a.node for a in stmts]):
            em.vloop("a", "b", body, {"nf"} | {x for names in pre.scalars.values() for x in names})
        else:
            em.loop("a", "b", body)
        return self.function(f"learner_group_{gi}", "a: i64, b: i64", em)

    def gen_commit(self) -> str:
        em = Emitter(self)
        for s in self.lr.scalar_states:
            if any(a.target == s.name for a in self.lr.update):
                em.put(f"storef(st_{s.name}, loadf(sn_{s.name}));")
        return self.function("learner_commit", "", em)

    def gen_clock(self) -> str:
        """learner_clock(t): `step` and `epoch` of step t (ir.Learner.clock) into clock_t, for
        the update to read; every program calls it before learner_scalars (learners whose
        update reads them: `clock_call`)."""
        em = Emitter(self)
        em.put("storef(clock_t, i2f(t));")
        em.put(f"storef(clock_t + 8, i2f(t / {self.lr.batches}));")
        return self.function("learner_clock", "t: i64", em)

    def gen_step(self) -> str:
        """learner_step_at(t): step t of the single process; learner_step(): step 0."""
        em = Emitter(self)
        for line in clock_call(self.lr, "t"):
            em.put(line)
        if self.lr.loss is not None and self.lr.batch:
            em.put(f"let n = learner_grad(0, {self.lr.nsamples}, t);")
            if self.lr.exact:
                em.put("learner_exact_round();")
            em.put("learner_mean(n);")
        elif self.lr.loss is not None:
            em.put(f"learner_grad(0, {self.lr.nsamples});")
            if self.lr.exact:
                em.put("learner_exact_round();")
            em.put(f"learner_mean({self.lr.nsamples});")
        if self.reduced:
            em.put("learner_reduce();")
        em.put("learner_scalars();")
        for g in self.lr.groups:
            em.put(f"learner_group_{g.index}(0, {g.size});")
        em.put("learner_commit();")
        at = self.function("learner_step_at", "t: i64", em)
        em = Emitter(self)
        em.put("learner_step_at(0);")
        return at + self.function("learner_step", "", em)

    def gen_check_and_print(self) -> str:
        em = Emitter(self)
        for s in self.lr.states:
            em.put(f"rt_check_finite(st_{s.name}, {s.size});")
        check = self.function("learner_check_finite", "", em)
        em = Emitter(self)
        for s in self.lr.states:
            cols = s.shape[1] if len(s.shape) == 2 else (0 if s.shape else -1)
            em.put(f'rt_print_state("{s.name}", st_{s.name}, {s.size}, {cols});')
        return check + self.function("learner_print", "", em)

    def gen_evaluate(self) -> str:
        """learner_evaluate(): the state scored on the held-out samples (`alphac build
        --eval-data`), as `alphac eval` scores it (alphac.ir.score): `samples N`, `mean_loss HEX`
        (the left fold of the losses, over n) and, with labels, `correct K` (the first index of
        the largest score that is a number, against the label). Without held-out data, `usage`
        (naming `--evaluate`)."""
        em = Emitter(self)
        if self.evaluation is None:
            em.put('rt_usage_refuse("--evaluate", "built without held-out data; see alphac build --eval-data");')
            return self.function("learner_evaluate", "", em)
        held, labels = self.evaluation
        lr = self.lr
        for d in held.data:             # the held-out files, read whole when scored
            if d.file is None:
                self.blobs[f"ev_{d.name}"] = f64_bytes(d.values)
                self.globals.append(f"data ev_{d.name}: [f64; {len(d.values)}] = extern;")
                continue
            f = d.file
            self.globals.append(f"global ev_{d.name}: [f64; {f.cols * f.shape[0]}];")
            self.globals += file_blobs(self.blobs, "e", d.name, f, 0, f.shape[0])
            for line in open_and_check("e", d.name, f, f"en_{d.name}", 0, f.shape[0], f"ev_{d.name}"):
                em.put(line)
            em.put(f"syscall(SYS_close, fd_{d.name});")
        em.put(f"let total = {flit(-0.0)};")
        em.put("let correct = 0;")
        em.put("let i = 0;")
        em.put(f"while i < {held.nsamples} {{")
        em.depth += 1
        for d in held.data:
            em.put(f"let row_{d.name} = ev_{d.name} + i * {8 * d.cols};")
        scored = labels is not None and lr.predict is not None and lr.predict.shape
        roots = [lr.loss] + ([lr.predict] if scored else [])
        vals = Values(em, lambda n, j, s: self.loss_leaf(n, j), buffered_nodes(roots))
        vals.prepare(roots)
        em.put(f"total = total + {vals.get(lr.loss, None)};")
        if scored:
            best, top = em.let("-1", "best"), em.let(flit(0.0), "top")

            def score(k: str) -> None:
                v = vals.get(lr.predict, k)
                em.put(f"if (f2bits({v}) & 0x7fffffffffffffff) <= 0x7ff0000000000000 && "
                       f"({best} < 0 || fgt({v}, {top}) != 0) {{ {best} = {k}; {top} = {v}; }}")
            vals.loop(0, lr.predict.shape[0], score)
            em.put(f"if {best} >= 0 && (f2bits(loadf(row_{labels}) - i2f({best})) << 1) == 0 "
                   "{ correct = correct + 1; }")
        em.put("i = i + 1;")
        em.depth -= 1
        em.put("}")
        em.put('rt_out_cstr("samples ");')
        em.put(f"rt_out_dec({held.nsamples});")
        em.put('rt_out_cstr("\\nmean_loss ");')
        em.put(f"rt_out_hex16(f2bits(total / i2f({held.nsamples})));")
        if scored:
            em.put('rt_out_cstr("\\ncorrect ");')
            em.put("rt_out_dec(correct);")
        em.put("rt_out_byte(10);")
        return self.function("learner_evaluate", "", em)

    def function(self, name: str, params: str, em: Emitter, result: str | None = None) -> str:
        arrow = f" -> {result}" if result else ""
        return f"fn {name}({params}){arrow} {{\n" + "\n".join(em.lines) + "\n}\n\n"

    def math_functions(self) -> list[str]:
        """The functions of alphac.math the learner's arithmetic calls (runtime names)."""
        roots = ([self.lr.loss] if self.lr.loss is not None else []) + [a.node for a in self.lr.update]
        roots += [self.lr.predict] if self.evaluation is not None and self.lr.predict is not None else []
        roots += [c.node for cs in self.lr.grads.values() for c in cs]
        nodes = postorder(roots)
        return sorted({n.op for n in nodes if (isinstance(n, Unary) and n.op not in ("neg", "sqrt"))
                       or (isinstance(n, Elem) and n.op not in OPS)}
                      | ({"max"} if any(isinstance(n, (Max, MaxAdj)) for n in nodes) else set()))

    def generate(self) -> str:
        lr = self.lr
        decls = []
        for s in lr.states:
            self.blobs[f"st_{s.name}"] = f64_bytes(s.init)
            decls.append(f"var st_{s.name}: [f64; {s.size}] = extern;")
            if s.group is None:
                decls.append(f"global sn_{s.name}: [f64; 1];")
        for d in lr.data:
            if d.file is None:            # written in the source: compiled in
                self.blobs[f"dt_{d.name}"] = f64_bytes(d.values)
                decls.append(f"data dt_{d.name}: [f64; {len(d.values)}] = extern;")
            elif streamed(lr):            # a row at a time (data_source opens the file)
                decls += [f"global df_{d.name}: [i64; 1];", f"global rw_{d.name}: [f64; {d.cols}];"]
            else:                         # the owner's rows, at dp (biased by its first row)
                decls += [f"global df_{d.name}: [i64; 1];", f"global dp_{d.name}: [i64; 1];"]
        for p in lr.params:
            decls.append(f"global G_{p.name}: [f64; {p.size}];")
            if scattered(lr, p.name):         # how many indices named each row (learner_grad)
                decls.append(f"global GN_{p.name}: [f64; {p.shape[0]}];")
        if lr.exact_sums:      # every param's coordinates, the loss
            P = exact_count(lr)
            decls.append(f"global XA: [i64; {P * XC_WORDS}];")
            decls.append(f"global XSP: [i64; {P * XS_DIGITS}];")   # touched only where a sum spills
            if lr.exact and lr.loss is not None:   # learner_grad's expansions (xsum.rt: s, lo),
                decls.append(f"global XE: [f64; {2 * P + XF_TAIL}];")   # a role's frame (XF_*)
        body = ""
        if lr.loss is not None:
            body += self.gen_grad() + self.gen_mean()
            decls += [f"global TR_{p.name}: [f64; {p.shape[0] * lr.nsamples}];"   # tile_rows
                      for p in lr.params if p.name in self.tiled]
            if lr.exact:                  # a block's terms, lane-major (learner_grad)
                decls += [f"global XB_{p.name}: [f64; {self.grad_lanes * p.size}];"
                          for p in lr.params if not scattered(lr, p.name)]
                decls.append(f"global XT: [f64; {self.grad_lanes}];")
                decls.append(f"global XFAIL: [i64; {2 + max(p.size for p in lr.params)}];")   # (fused_expansion)
                decls.append("global XCHK: [f64; 8];")
            if lr.exact:
                body += self.gen_round()
        body += self.gen_reduce() + self.gen_scalars()
        for g in lr.groups:
            body += self.gen_group(g.index)
        body += self.gen_commit() + self.gen_step() + self.gen_check_and_print()
        if lr.clocked:
            body += self.gen_clock()
            decls.append("global clock_t: [f64; 2];")     # step, epoch (learner_clock)
        body += self.gen_evaluate()
        decls.append(f"const LEARNER_BATCHES = {lr.batches};")
        decls.append("global loss_mean: [f64; 1];")      # the step's mean loss (learner_mean)
        if lr.loss is not None:
            decls.append("global mean_n: [f64; 1];")     # the step's count, binary64 (learner_mean)
            decls.append("global L_sum: [f64; 1];")       # this owner's loss sum (learner_grad)
        head = (f"// generated by alphac from learner `{lr.name}` ({lr.identity[:16]})\n"
                + "\n".join(decls + self.globals) + "\n\n")
        return head + body


def large_body(lr: Learner) -> bool:
    """Whether the per-sample DAG has more than BLOCK_NODES nodes: its code, emitted once per
    lane of a block (twice: the first block and the rest) and once for the rest, would be nine
    copies (seventeen with f64x8) of a body that a windowed learner's unrolled windows make
    large (under exact_sum, whose blocks also keep every term lane by lane, sooner); one sample
    at a time emits it once, with the same operations in the same order."""
    roots = [c.node for p in lr.params for c in lr.grads[p.name]] + [lr.loss]
    return len(postorder(roots)) > (EXACT_BLOCK_NODES if lr.exact else BLOCK_NODES)


def tiled_grads(lr: Learner, lanes: int) -> dict[str, tuple[Outer, object]]:
    """The params whose gradient sums are tiled (learner_grad's tile_rows, tile_sum): the rule,
    decided from the shapes and the level when compiled. At a level of f64x8 (`lanes`: the widest
    vector; x86_64-v3's f64x4 and x86_64's f64x2 measured no faster tiled), a full-batch
    learner's (blocks of samples, not exact_sum) 2-D param p whose one contribution is
    `outer(a, x[i])`, x a data row read in place, of more than TILE_GRAD_BYTES (G_p and W beyond
    a 1 MiB L2: each block of samples would read and write all of G_p from L3), where a's values
    for every sample take at most TILE_ROWS_BYTES: {name: (that outer product, x's data)}."""
    if lanes < 8 or lr.batch or lr.exact or not lr.nsamples or large_body(lr):
        return {}
    out = {}
    for p in lr.params:
        cs = lr.grads.get(p.name, ())
        if len(p.shape) != 2 or 8 * p.size <= TILE_GRAD_BYTES or len(cs) != 1 or \
                8 * p.shape[0] * lr.nsamples > TILE_ROWS_BYTES:
            continue
        n = cs[0].node
        if isinstance(n, Outer) and isinstance(n.b, DataRow) and cs[0].offset == 0 and \
                cs[0].length == p.size and n.shape == p.shape:
            out[p.name] = (n, next(d for d in lr.data if d.name == n.b.name))
    return out


def scattered(lr: Learner, param: str) -> bool:
    """Whether param's gradient is made of gathered rows (`E[tok[i]]`): Scatter contributions."""
    return any(isinstance(c.node, Scatter) for c in lr.grads.get(param, ()))


def clock_call(lr: Learner, t: str) -> list[str]:
    """The statement that sets the update's `step` and `epoch` to step t's (none when the
    update reads neither)."""
    return [f"learner_clock({t});"] if lr.clocked else []


def exact_count(lr: Learner) -> int:
    """exact_sum: the accumulators an owner keeps, every param's coordinates then the loss sum."""
    return sum(p.size for p in lr.params) + 1


def exact_first(lr: Learner, param: str | None) -> int:
    """exact_sum: the index of `param`'s first coordinate (None: the loss sum) among the sums."""
    k = 0
    for p in lr.params:
        if p.name == param:
            break
        k += p.size
    return k


def expansion_at(lr: Learner, param: str | None) -> str:
    """exact_sum: `param`'s (None: the loss sum's) expansions in XE (xsum.rt's xe_add_lanes: its
    s words, then its lo)."""
    return f"XE + {16 * exact_first(lr, param)}"


def exact_at(lr: Learner, param: str | None, j: str) -> str:
    """exact_sum: `acc, spill` of coordinate j of `param` (None: the loss sum) in XA and XSP."""
    k = exact_first(lr, param)
    idx = str(k + int(j)) if j.isdigit() else (f"{k} + ({j})" if k else f"({j})")
    if j.isdigit():
        return f"XA + {8 * XC_WORDS * int(idx)}, XSP + {8 * XS_DIGITS * int(idx)}"
    return f"XA + {8 * XC_WORDS} * ({idx}), XSP + {8 * XS_DIGITS} * ({idx})"


def streamed(lr: Learner) -> bool:
    """A minibatch learner reads its loaded data a row at a time: an owner holds one batch's
    row, never its shard (docs/data.md); a full-batch learner holds its rows."""
    return bool(lr.batch)


def row_address(d, i: str, stream: bool) -> str:
    """The address of sample i's row of data d, as binary64."""
    if d.file is None:
        return f"dt_{d.name} + {i} * {8 * d.cols}"
    if not stream:
        return f"load64(dp_{d.name}) + {i} * {8 * d.cols}"
    f = d.file
    return (f"data_row(load64(df_{d.name}), {f.offset} + {i} * {f.row_bytes}, {f.cols}, {f.kind}, "
            f"rw_{d.name})")


def file_blobs(blobs: dict[str, bytes], side: str, name: str, f, lo: int, hi: int) -> list[str]:
    """The build's facts about a data file that an owner of rows lo..hi-1 checks: its path
    (`{side}n_NAME`, NUL-ended), its header (`{side}h_`), its chunks' digests (`{side}d_`) and
    the path as load() names it (`{side}r_`); side d: the learner's data, e: held-out data."""
    facts = {f"{side}n_{name}": f.path.encode() + b"\0", f"{side}h_{name}": f.header,
             f"{side}d_{name}": f.digests(lo, hi) or bytes(32),
             f"{side}r_{name}": f.rel.encode() + b"\0"}
    blobs.update(facts)
    return [f"data {k}: [u8; {len(v)}] = extern;" for k, v in facts.items()]


def open_and_check(side: str, name: str, f, path: str, lo: int, hi: int, dst: str) -> list[str]:
    """Open data file f (at `path`) as fd_NAME and check the chunks of rows lo..hi-1 (with
    file_blobs' facts of `side`), the rows landing at dst (0: none)."""
    a, b, _, _ = f.span(lo, hi)
    return [f"let fd_{name} = data_open({path}, {side}h_{name}, {f.offset}, {f.size});",
            f"data_check(fd_{name}, {a}, {b}, {side}d_{name}, {dst}, {f.kind});"]


def data_source(lr: Learner, lo: int, hi: int) -> tuple[str, dict[str, bytes]]:
    """`learner_data_open()` for a program that holds samples lo..hi-1 (none: lo == hi): it
    opens each loaded data file and checks the chunks that cover those rows (alphac/runtime/
    data.rt), keeping the rows (a full-batch learner) or the file (a minibatch learner's rows
    are read a step at a time). Its globals and the bytes of their `extern` values."""
    blobs: dict[str, bytes] = {}
    decls: list[str] = []
    body = ["    let dir = load64(data_dir);"] if hi > lo and any(d.file for d in lr.data) else []
    for d in lr.data:
        f = d.file
        why = bad_label(lr, lo, hi, d.name) if f is None and hi > lo else None
        if why is not None:                     # labels written in the source (W0004 said so)
            body.append(f'    refuse("data-label", "{why}", {len(why)});')
        if f is None or hi <= lo:
            continue
        n = d.name
        decls += file_blobs(blobs, "d", n, f, lo, hi)
        if not streamed(lr):
            decls.append(f"global dt_{n}: [f64; {(hi - lo) * f.cols}];")
        body += ["    " + line for line in open_and_check(
            "d", n, f, f"data_path(dir, dr_{n}, dn_{n})", lo, hi, "0" if streamed(lr) else f"dt_{n}")]
        body.append(f"    store64(df_{n}, fd_{n});")
        if not streamed(lr):
            body.append(f"    store64(dp_{n}, dt_{n} - {8 * lo * f.cols});")
        body += ["    " + line for line in label_checks(lr, d, str(lo), str(hi))]
    if body:
        body.append('    rt_event("data checked");')
    text = "\n".join(decls) + "\n\nfn learner_data_open() {\n" + "\n".join(body) + "\n}\n"
    return text, blobs


def label_checks(lr: Learner, d, lo: str, hi: str) -> list[str]:
    """The statements that check each label and index of data d (label_columns) in rows lo..hi-1
    (run-time expressions), refusing `data-label` at the first bad one (data.rt's data_label):
    a loaded file's from the file (fd_NAME open), a literal's from dt_NAME."""
    out = []
    for (name, col), k in sorted(label_columns(lr).items()):
        if name != d.name:
            continue
        head, tail = label_where(d, col, k, label_of(lr, name, col))
        r, f = f"lr_{name}_{col}", d.file
        at = f"dt_{name} + 8 * ({r} * {d.cols} + {col})" if f is None else \
            f"data_row(fd_{name}, {f.offset + col * f.itemsize} + {r} * {f.row_bytes}, 1, {f.kind}, data_one)"
        out += [f"let {r} = {lo};", f"while {r} < {hi} {{",
                f'    data_label({at}, {r}, {k}, "{head}\\0{tail}");', f"    {r} = {r} + 1;", "}"]
    return out


def old_value_reads(stmts: list) -> list[list[Read]]:
    """For each assignment of a group's update, the reads of its target's *old* value by the
    statements after it. The update stores each target in place, so these must be loaded
    before that store (`let old = a; a = a + 1; b = old` reads the old `a`)."""
    return [[n for b in stmts[k + 1:] for n in postorder([b.node])
             if isinstance(n, Read) and n.version == 0 and n.name == a.target]
            for k, a in enumerate(stmts)]


def _sub(j: str, offset: int) -> str:
    if not offset:
        return j
    return str(int(j) - offset) if j.isdigit() else f"{j} - {offset}"


def learner_source(lr: Learner, evaluation: tuple[Learner, str | None] | None = None,
                   lanes: int = 2, neon: bool = False) -> tuple[str, dict[str, bytes]]:
    """The learner's runtime-language source (with the alphac.math functions it calls), and
    the bytes of its `extern` globals; with `evaluation` (the learner on held-out data and its
    labels' name), learner_evaluate scores the state on those samples; `lanes`: the target's
    widest binary64 vector (2; 4: f64x4, x86_64-v3; 8: f64x8, x86_64-v4); `neon`: the target's
    prelude says CPU_NEON = 1 (AArch64: the 2-lane vector functions)."""
    from alphac.math import rt_source
    g = LearnerCode(lr, evaluation, lanes, neon)
    text = g.generate()
    used = g.math_functions()
    if (lanes >= 4 or neon) and "rt_math_arg" in text:     # a vloop called a vector function
        text += "\n" + lane_source(sorted(set(used) & set(LANE_FAST)), lanes)
    return (text + "\n" + rt_source(used) if used else text), g.blobs
