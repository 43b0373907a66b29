"""The kernel ABI: what each owner kernel takes, reads and writes (the contract between
alphac/ptx/kernels.py, which builds the kernels, and their hosts: alphac/lower/gpu.py,
alphac/nvdrv/image.py, gpu/ptx_host.py). docs/gpu.md has the same, with a worked example.

Every buffer is binary64, row-major, 8-byte aligned, and indexed by the global index (the host passes full-size buffers or
offsets the base itself). Indices and counts are u32. `P` is the number of param coordinates,
params concatenated in declaration order (`param_layout`). Each kernel is 1-D: any grid whose
`ctaid.x * ntid.x + tid.x` covers the range; threads past its end do nothing (the tiled
outer_sum_<p> takes its own block size and grid: `Kernel.block`, `Kernel.threads`).

    grad_samples  (learners with a loss) one thread per sample i in [lo, hi)
        state_<s>  u64  for every state the loss reads, declaration order
        data_<d>   u64  for every data array, declaration order (all samples)
        tbl_<t>    u64  each math table the gradients read
        mv<k>      u64  every batch buffer (`batch_widths`): the products' and vectors' rows
        gs         u64  out: row i - lo of `W` words (`row_layout`): every plain coordinate
                        j (declaration order, P' of them), then each fused param's factors
        lo, hi     u32
      (a minibatch learner: `idx` u64, the step's samples as u64s in increasing order, and
      `count` u32 instead of lo, hi: thread t computes sample idx[t] into gs row t)
      gs[(i-lo)*W + c] is coordinate j's per-sample gradient exactly as
      `interp.per_sample_gradient`: the left fold of the contributions covering j, +0.0 where
      none does; a fused param's columns hold its `Outer(u, v)`'s R coordinates of u, then the
      C of v, instead. `dot`, `sum`, `A @ v`, `u @ A` as the interpreter's left folds, `max(v)`
      as its fold of exact max (loops over the terms ascending, from the first: kernels.py); a
      batched product or computed vector (`batch_nodes`) loaded from its buffer's row t.
      The thread's `.local` arrays (vectors it keeps) are its stack: the cubin's stack size,
      which the host's local memory must hold.
    Before grad_samples, phase by phase (`batch_kernels`, the launch order; `products`, each
    batched product `W @ v` / `u @ W`, W a 2-D state of R x C, the vector per sample, its
    phase one more than the products its vector reads):
    vectors<j>    (a product of phase j with a computed vector) one thread a sample, as
                  grad_samples: its params without gs (every mv<k>, the earlier phases' read)
      mv<vin>[t*size + c] = coordinate c of the vector of each such product, sample of row t
    matvec<k>, vecmat<k>  (the phase's products: alphac/ptx/tiled.py) blocks of 64 threads,
                  one a 32 x 32 tile of (row t, output), `Kernel.tile` = (32, 64 x tiles
                  across the R or C outputs) threads a 32 rows of the step
        state_W u64, data_x u64 (a data-row vector) or mv<vin> u64 (a computed one), mv<k> u64
        (out), lo, hi u32 (or idx, count)
      matvec: mv<k>[t*R + r] = (W[r,0]*v_t[0] + W[r,1]*v_t[1]) + ...: the interpreter's MatVec,
      mul.rn(W, v) then add.rn, over c ascending from the first term; vecmat: mv<k>[t*C + c] =
      (u_t[0]*W[0,c] + u_t[1]*W[1,c]) + ...: its VecMat, mul.rn(u, W), over r ascending; v_t,
      u_t sample i's data row (lo + t, or idx[t]) or row t of mv<vin>.
    owner_sum     a block (`Kernel.block`, 160 threads) per 32 plain columns of [0, P'), its
                  first warp folding one column a lane, the others staging the terms in shared
                  memory; `Kernel.threads` and `Kernel.block` fix the launch (no kernel when P' = 0)
        gs u64, G u64 (out: G[j], j the coordinate of column c), n u32 (the owner's sample
        count, n >= 1; n = 0 writes nothing)
      G[j] = ((gs[c] + gs[W + c]) + gs[2W + c]) + ...: the left fold from the first sample.
    outer_sum_<p> (a fused param p of R x C: alphac/ptx/tiled.py) blocks of exactly 64
                  threads, one block a 32 x 32 tile of p's G (tiles row after row), 4 x 4
                  outputs a thread; `Kernel.threads` and `Kernel.block` fix the launch
        gs u64, G u64 (out: G[off(p) + r*C + c] for r < R, c < C), n u32 (as owner_sum's)
      with u_s, v_s the factors in gs row s: G[off(p) + r*C + c] = (u_0[r]*v_0[c] +
      u_1[r]*v_1[c]) + ...: each product mul.rn, each sum add.rn (never fma), the left fold
      over the samples ascending from the first product (not added to a zero: a -0 survives),
      so the bits owner_sum gives of the coordinates u_s[r]*v_s[c]. Samples 1.. are staged in
      shared memory 16 at a time, between two `bar.sync`s.
    under `contract exact_sum` (no fused params, no batched products: W = P), instead of
    owner_sum (alphac/ptx/xsum.py), launched in order
    xsum_clear, grad_samples, xsum_add, xsum_fold:
    xsum_clear    one thread per coordinate j in [0, P): xd's words of j zeroed
        xd  u64  P dense accumulators of XS_WORDS words (alphac/formats.py: flags, 66 digits)
    xsum_add      one thread per term g in [0, rows * P) (a 64-bit index)
        gs u64, xd u64, rows u32 (the rows grad_samples wrote: hi - lo, or a minibatch's count)
      gs[g] added exactly to coordinate g mod P's digits and flags (red: any order)
    xsum_fold     one thread per coordinate j in [0, P)
        xd u64, xc u64 (out: P compact accumulators of XC_WORDS words, xsum.rt's format)
      xc[j] the sum's window, or XC_SPILLED and the sum in xd's digits of j, normalized
    xsum_round    one thread per coordinate j in [0, P); a sampled step's, in place of xsum_fold
        xd u64, G u64 (out: G[j], the sum rounded once; xd's digits of j rewritten)
    reduce        one thread per reduced scalar of the update the card computes
                  (`card_reductions`: over a coordinate group), before the updates
        state_<s> u64 (every group member they read), then as update_g<N>'s: G, n, scalar_<s>_old,
        clock_<c>, const_<c>, tbl_<t>; rd u64 (out: one word each, in their order); xr u64 (under
        exact_sum, a dense accumulator of XS_WORDS words a reduction)
      rd[t] = the left fold over the group's coordinates j ascending of the terms at j (a dot's
      mul.rn products, a sum's values; max(v)'s folded by the max of alphac.math), the first term
      the start: `interp.reduced_value`'s bits; an exact reduction (exact_sum's dot or sum,
      `exact_positions`): xr's words of t zeroed, for
    reduce_add    one thread a term of every exact reduction (reduction t's threads: its group's
                  coordinates j, after the earlier ones'), after `reduce`
        as reduce's, without rd
      the term at j added exactly into xr's words of t (xsum.py's add_term: red, any order), and
    reduce_round  one thread per reduced scalar, after reduce_add
        xr u64, rd u64 (out)
      rd[t] = xr's words of t rounded once (xsum.py's round_to): the exact sum's bits.
    scalars       one thread, after `reduce`, where the card runs the scalar statements
                  (`card_scalars`: one reads a reduction the card computes)
        sc u64 (in and out: two words a scalar state), then as update_g<N>'s: the host's
        reduced_<k>, rd, clock_<c>
      sc[2i] = sc[2i + 1] (the value before the step), then the scalar statements in source
      order, each into sc[2i + 1]: the interpreter's scalar update. Where it runs, every kernel
      reads scalar state i from sc instead of scalar_<s>_old/new: version 0 from sc[2i] (from
      sc[2i + 1] in `reduce`, which runs before `scalars`), version 1 from sc[2i + 1]; a full
      step (and a deployment's role) does not launch it and writes both words itself.
    update_g<N>   one thread per coordinate k in [klo, khi) of coordinate group N
        state_<s>  u64  for every member of the group the statements read or assign (decl. order)
        G, n       u64, u32  only if the update reads a gradient: the combined sum G (P coords,
                             as owner_sum writes it) and the total sample count; the kernel
                             divides, grad(p)[k] = G[off(p) + k] / float(n)
        scalar_<s>_old / scalar_<s>_new  f64  each scalar state version the statements read
                             (the host runs the scalar statements first: `host_scalars`), or
                             sc u64 where the card runs them (`scalars`)
        reduced_<k> f64 / rd u64  each reduced scalar of the update the statements read: the
                             host's rd<k> (`host_scalars`), or word `card_reductions[k]` of
                             rd, which `reduce` wrote (a sampled step) or the host (a full
                             step, whose host has them from its own G; a deployment's role)
        clock_step, clock_epoch  f64  `step` and `epoch`, where the statements read them
                             (Param.ref `clock.step`, `clock.epoch`)
        const_<c>  u64  each vector constant the statements read (`Param.values`: upload once)
        tbl_<t>    u64  each constant table the functions of alphac.math read (also uploaded
                        once; grad_samples has them too, after its data)
        klo, khi   u32
      The group's statements run in source order for coordinate k; assigned members are stored
      at the end, so every read of an old value sees the old value.
The parameters' order and meaning are data: `Kernel.params`, one `Param` each.

A param is *fused* (`fused`) when its per-sample gradient is one `Outer(u, v)` contribution
covering all of it (the weight gradient of `W @ x` or `x @ W`) and the contract is not
exact_sum: then no sample's R x C gradient is ever stored, only u and v.

Requires: a checked, differentiated `Learner`. Guarantees: the layout functions are the only
definition of where a param coordinate lives in `gs` and `G`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from alphac.ir.evaluate import Env, evaluate
from alphac.ir.interp import reduced_value
from alphac.ir.learner import (DataRow, Learner, MatVec, Node, Outer, Read, VecMat, children, exact_reduction,
                               postorder, reduction_group, update_reductions)


@dataclass(frozen=True)
class Param:
    name: str                        # the PTX parameter name
    type: str                        # "u64" (a global pointer) | "u32" | "f64"
    role: str                        # state data gs G n lo hi klo khi scalar const xd xc rows
    ref: str = ""                    # the state or data name (state, data, scalar)
    version: int = 0                 # scalar: 0 the value before the update, 1 after; 2 a
                                     # reduced scalar of the update (ref: the host's rd<k>)
    values: tuple[float, ...] = ()   # const: the buffer's contents


@dataclass(frozen=True)
class Kernel:
    name: str
    sm: int
    params: tuple[Param, ...]
    ptx: str
    group: int | None = None         # update kernels: the coordinate group
    threads: int | None = None       # a fixed thread count (sum kernels); None: from the share
    tile: tuple[int, int] | None = None  # per-sample tiles: (rows, threads) a tile of the rows
    block: int | None = None         # a fixed block size (tiled kernels); None: the host's


def param_layout(lr: Learner) -> dict[str, int]:
    """Each param's first coordinate in the concatenated vector of `P` coordinates."""
    out, off = {}, 0
    for p in lr.params:
        out[p.name] = off
        off += p.size
    return out


def param_count(lr: Learner) -> int:
    return sum(p.size for p in lr.params)


def fused(lr: Learner) -> dict[str, Outer]:
    """The fused params (the module doc), by name, in declaration order: each one's Outer."""
    out = {}
    for p in lr.params:
        cs = lr.grads.get(p.name, [])
        if not lr.exact and len(cs) == 1 and cs[0].offset == 0 and isinstance(cs[0].node, Outer) \
                and cs[0].node.size == p.size:
            out[p.name] = cs[0].node
    return out


@dataclass(frozen=True)
class RowLayout:
    """A gs row: `plain` (param, first column, its first coordinate in G, size) in declaration
    order from column 0, then `factors` (param -> u's first column, R, v's first column, C)."""
    width: int
    plain: tuple[tuple[str, int, int, int], ...]
    factors: dict

    @property
    def plain_width(self) -> int:
        return sum(size for _, _, _, size in self.plain)


def row_layout(lr: Learner) -> RowLayout:
    offs, outer, col = param_layout(lr), fused(lr), 0
    plain, factors = [], {}
    for p in lr.params:
        if p.name not in outer:
            plain.append((p.name, col, offs[p.name], p.size))
            col += p.size
    for name, o in outer.items():
        factors[name] = (col, o.a.size, col + o.a.size, o.b.size)
        col += o.a.size + o.b.size
    return RowLayout(col, tuple(plain), factors)


def _split(n: Node) -> tuple | None:
    """(W, the vector, vecmat) when `n` is `W @ v` or `u @ W`: W a 2-D state read before the
    update, the vector computed per sample (a data row is somewhere below it)."""
    w, v, vm = (n.a, n.b, False) if isinstance(n, MatVec) else (n.b, n.a, True) if isinstance(n, VecMat) else (0, 0, 0)
    if isinstance(w, Read) and w.version == 0 and len(w.shape) == 2 and \
            any(isinstance(x, DataRow) for x in postorder([v])):
        return w, v, vm
    return None


def _key(w: Read, v: Node, vm: bool) -> tuple:
    return (w.name, vm, v.name if isinstance(v, DataRow) else id(v))


@dataclass(frozen=True)
class Product:
    """A batched product (the module doc): `W @ v`, or `u @ W` (`vecmat`), W a state of R x C;
    the vector a row of data array `data`, or (`vin` >= 0) computed by vectors<phase> into
    mv<vin>; the product's rows in mv<out>. `node`, `vec`: the learner's nodes."""
    W: str
    R: int
    C: int
    vecmat: bool
    data: str
    out: int
    vin: int
    phase: int
    node: Node = field(compare=False, repr=False)
    vec: Node = field(compare=False, repr=False)

    @property
    def name(self) -> str:
        return f"{'vecmat' if self.vecmat else 'matvec'}{self.out}"

    @property
    def width(self) -> int:
        return self.C if self.vecmat else self.R


def _grad_roots(lr: Learner) -> list[Node]:
    return [c.node for cs in lr.grads.values() for c in cs]


def products(lr: Learner) -> list[Product]:
    """The batched products (none under exact_sum), `out` their index: every distinct product
    the per-sample gradients read, by phase (one more than the highest phase of a product its
    vector reads, 0 if none), then in the order first read."""
    if lr.loss is None or lr.exact:
        return []
    depth: dict[int, int] = {}          # node -> the highest phase of a product at or below it
    found: dict[tuple, tuple] = {}
    for n in postorder(_grad_roots(lr)):
        depth[id(n)] = max((depth[id(c)] for c in children(n)), default=-1)
        s = _split(n)
        if s:
            found.setdefault(_key(*s), (n, *s, depth[id(s[1])] + 1))
            depth[id(n)] = depth[id(s[1])] + 1
    order = sorted(found.values(), key=lambda f: f[4])
    vins = list(dict.fromkeys(id(v) for _, _, v, _, _ in order if not isinstance(v, DataRow)))
    return [Product(w.name, *w.shape, vm, v.name if isinstance(v, DataRow) else "", k,
                    -1 if isinstance(v, DataRow) else len(order) + vins.index(id(v)), ph, n, v)
            for k, (n, w, v, vm, ph) in enumerate(order)]


def batch_widths(lr: Learner) -> list[int]:
    """Each batch buffer mv<k>'s row width: the products' rows, then the computed vectors'."""
    prods = products(lr)
    vecs = {p.vin: p.vec.size for p in prods if p.vin >= 0}
    return [p.width for p in prods] + [vecs[k] for k in sorted(vecs)]


def batch_kernels(lr: Learner) -> list[str]:
    """The kernels launched before grad_samples, in order: phase by phase, vectors<phase> (when
    a product of the phase has a computed vector), then the phase's products."""
    prods, out = products(lr), []
    for ph in sorted({p.phase for p in prods}):
        out += [f"vectors{ph}"] if any(p.vin >= 0 and p.phase == ph for p in prods) else []
        out += [p.name for p in prods if p.phase == ph]
    return out


def batch_nodes(lr: Learner, before: int | None = None) -> dict[int, tuple[int, int]]:
    """Node id -> (k, width): the batch buffer mv<k> holding its rows, for every product node
    and computed vector of a phase below `before` (None: every phase)."""
    by, out = {(p.W, p.vecmat, p.data or id(p.vec)): p for p in products(lr)}, {}
    for n in postorder(_grad_roots(lr)):
        s = _split(n)
        p = by.get(_key(*s)) if s else None
        if p and (before is None or p.phase < before):
            out[id(n)] = (p.out, p.width)
            if p.vin >= 0:
                out[id(p.vec)] = (p.vin, p.vec.size)
    return out


def sum_kernels(lr: Learner) -> list[str]:
    """The kernels that make the owner's G from gs, in launch order (none under exact_sum)."""
    if lr.loss is None or lr.exact:
        return []
    return (["owner_sum"] if row_layout(lr).plain_width else []) + [f"outer_sum_{p}" for p in fused(lr)]


def card_reductions(lr: Learner) -> dict[int, int]:
    """The update's reduced scalars `reduce` computes on the card: index k (in
    `update_reductions`) -> its word in rd. Those over a coordinate group (an exact sum under
    exact_sum, `exact_reduction`: added exactly in `xr`, rounded once); a reduction of scalars and
    constants alone stays the host's, which costs nothing."""
    out: dict[int, int] = {}
    for k, n in enumerate(update_reductions(lr.update)):
        if reduction_group(lr, n) is not None:
            out[k] = len(out)
    return out


def exact_positions(lr: Learner) -> list[int]:
    """The card's reduced scalars (their words in rd) that are exact sums (exact_sum's dot, sum):
    `reduce_add` and `reduce_round` are launched where there are any."""
    todo = [update_reductions(lr.update)[k] for k in card_reductions(lr)]
    return [pos for pos, r in enumerate(todo) if exact_reduction(lr, r)]


def host_reads_card_reductions(lr: Learner) -> bool:
    """Does a scalar statement read a reduced scalar the card computes? (Then the host needs
    the step's G before the updates: the sampled step, one submission, cannot; `card_scalars`.)"""
    card = {id(n) for k, n in enumerate(update_reductions(lr.update)) if k in card_reductions(lr)}
    return any(id(n) in card for a in lr.update if lr.state(a.target).group is None for n in postorder([a.node]))


def card_scalars(lr: Learner) -> dict[str, int]:
    """Where a scalar statement reads a reduction the card computes (`host_reads_card_reductions`),
    the card runs the scalar statements (`scalars`, after `reduce`) and every kernel reads each
    scalar state from `sc`: scalar state name -> i, its words sc[2i] (the value before the step)
    and sc[2i + 1] (after it), declaration order. Empty otherwise, and where the host would still
    need a scalar state the card computes: the loss reads one (grad_samples' parameters), or a
    reduction the host computes (of scalars and constants alone) reads one."""
    if not host_reads_card_reductions(lr):
        return {}
    card = card_reductions(lr)
    host = [n for k, n in enumerate(update_reductions(lr.update)) if k not in card]
    scalar = {s.name for s in lr.scalar_states}
    roots = host + ([lr.loss] if lr.loss is not None else [])
    if any(isinstance(n, Read) and n.name in scalar for n in postorder(roots)):
        return {}
    return {s.name: i for i, s in enumerate(lr.scalar_states)}


def can_sample(lr: Learner) -> bool:
    """May a GPU owner run `--shadow sampled`? Not when a scalar statement reads a reduction the
    card computes (host_reads_card_reductions) and the card cannot run the scalar statements
    (`card_scalars`); every other learner, exact_sum's included (G rounded on the card by
    xsum_round, its exact dots and sums by `reduce`)."""
    return not host_reads_card_reductions(lr) or bool(card_scalars(lr))


def host_scalars(lr: Learner, state: dict[str, tuple[float, ...]],
                 whole: tuple[dict, dict] | None = None, t: int = 0) -> dict[tuple[str, int], float]:
    """Every scalar state's (name, version) -> value at step t, and `step` and `epoch`
    (("clock.step", 0), ("clock.epoch", 0)): what the host passes to update kernels; with
    `whole` (every state's values, the mean gradients) also each reduced scalar of the update,
    as (rd<k>, 2), computed first (learner_reduce)."""
    clock = lr.clock(t)
    env = Env(state={(k, 0): v for k, v in state.items()}, clock=clock)
    out = {(f"clock.{k}", 0): v for k, v in clock.items()}
    if whole is not None:
        full = Env(state={(k, 0): v for k, v in whole[0].items()}, grads=whole[1], clock=clock)
        for k, r in enumerate(update_reductions(lr.update)):
            env.memo[id(r)] = (reduced_value(lr, r, full),)
            out[(f"rd{k}", 2)] = env.memo[id(r)][0]
    for a in lr.update:
        if lr.state(a.target).group is None:
            env.state[(a.target, 1)] = evaluate(a.node, env)
    for s in lr.scalar_states:
        out[(s.name, 0)] = state[s.name][0]
        out[(s.name, 1)] = env.state.get((s.name, 1), state[s.name])[0]
    return out
