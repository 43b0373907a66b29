"""The tiled kernels: the owner's sum fused into a weight gradient (`outer_sum_<p>`) and a param
matrix times the step's data rows (`matvec<k>`), both one builder, `_tiled`:

    out[a, b] = ((x_a(0)*y_b(0) + x_a(1)*y_b(1)) + x_a(2)*y_b(2)) + ...

each product one mul.rn, each sum one add.rn (never fma), the left fold over k ascending from
the first product (never added to a zero: a -0 survives).

  * outer_sum_<p>: a fused param p (abi.fused) has as per-sample gradient one outer product
    u_s v_s^T of R x C; grad_samples writes only u_s and v_s into gs row s (abi.row_layout), and
    G[off(p) + r*C + c] is the fold with x = u, y = v, k = the samples: owner_sum's fold of the
    coordinates u_s[r]*v_s[c], so the same bits without an R x C row a sample.
  * matvec<k>: a product `W @ x[i]` of abi.products; mv<k>[t*R + r] is the fold with x = the
    step's data rows (a = t), y = W's rows (b = r), k = the columns, multiplied as mul(W, x):
    the interpreter's MatVec fold (each row over c ascending from the first term).

Tiles: one block of BLOCK = 64 threads (SIDE x SIDE) a TILE x TILE tile of out (32 x 32), the
tiles row after row; thread (ty, tx) = (tid / 8, tid % 8) keeps the EACH x EACH (4 x 4) outputs
at 4ty.. and 4tx.. of its tile in registers. The k = 0 products start the accumulators (read
from global memory). Then k = 1 .. K-1 in chunks of CHUNK (16): the block stages the chunk's x
over its tile's rows and y over its columns in shared memory (CHUNK x TILE words each; +0
outside the ranges), `bar.sync`, each thread adds the chunk's terms in ascending order into its
accumulators, `bar.sync` before the next chunk overwrites the stage. A thread outside the
ranges computes on zeros and stores nothing; every thread reaches every barrier (the chunk
loop's trip count is the block's).

Requires: a fused param or a product of a checked learner. Guarantees: the interpreter's bits
(tests/test_tiled.py); the same learner and target give the same text.
"""
from __future__ import annotations

from typing import Callable

from alphac.ir.learner import Learner
from alphac.ptx.abi import Kernel, Param, param_layout, products, row_layout
from alphac.ptx.render import Emitter, f64imm

TILE, SIDE, CHUNK = 32, 8, 16           # a tile's side, threads along it, samples a stage
EACH, BLOCK = TILE // SIDE, SIDE * SIDE   # outputs a thread along each side; threads a block
SLOTS = CHUNK * TILE // BLOCK            # stage words each thread loads, of u and of v


def _tiled(em: Emitter, counts: tuple, across: int, load: Callable, store: Callable,
           swap: bool = False) -> None:
    """out[a, b] for a < A, b < B, (A, B, K) = `counts` (u32 registers or constants, B a
    constant): the left fold over k = 0 .. K-1 ascending of mul(x_a(k), y_b(k)) (mul(y, x) with
    `swap`), the first product the accumulator's start. The tiles (TILE x TILE of (a, b), `across`
    of them along b) are the blocks, row after row. load(side, k, j) -> (address register, byte
    offset) of x_j(k) (side 0) or y_j(k) (side 1), emitted only where j and k are in range;
    store(a, b, value) likewise only inside A x B. Nothing when K is 0."""
    A, B, K = counts
    lim = (A, B)
    em.op("braif", em.op("ge", em.op("mov32", 0), K), "$done")
    tid, blk = em.op("sreg", "tid.x"), em.op("sreg", "ctaid.x")
    base = [em.op("mul32", em.op(op, blk, across), TILE) for op in ("div32", "rem32")]
    mine = [em.op("mul32", em.op(op, tid, SIDE), EACH) for op in ("div32", "rem32")]
    idx = [[em.op("add32", em.op("add32", base[s], mine[s]), e) for e in range(EACH)] for s in (0, 1)]

    def load_if(side: int, k: str, j: str, *outside: str) -> str:
        """x_j(k) or y_j(k), or +0 when any predicate says it is outside."""
        x, skip = em.op("movf", f64imm(0.0)), em.fresh_label()
        for p in outside:
            em.op("braif", p, skip)
        addr, offset = load(side, k, j)
        em.op("ld", addr, offset, d=x)
        em.label(skip)
        return x

    em.comment("the first term's products start the accumulators")
    zero = em.op("mov32", 0)
    x0, y0 = ([load_if(s, zero, j, em.op("ge", j, lim[s])) for j in idx[s]] for s in (0, 1))
    acc = [[em.op("mul", *((y, x) if swap else (x, y))) for y in y0] for x in x0]
    stages = [em.op("addrs", em.shared(CHUNK * TILE)) for _ in (0, 1)]
    li, ls = em.op("rem32", tid, TILE), em.op("div32", tid, TILE)   # this thread's stage slots
    slot = em.op("wide", em.op("add32", em.op("mul32", ls, TILE), li), 8)
    dst = [em.op("add64", st, slot) for st in stages]
    at = [em.op("add32", b, li) for b in base]
    out = [em.op("ge", at[s], lim[s]) for s in (0, 1)]
    rd = [em.op("add64", stages[s], em.op("wide", mine[s], 8)) for s in (0, 1)]
    K = K if isinstance(K, str) else em.op("mov32", K)
    k0 = em.op("mov32", 1)
    top, end = em.fresh_label(), em.fresh_label()
    em.label(top)
    em.op("braif", em.op("ge", k0, K), end)
    em.comment("stage terms k0 .. k0 + CHUNK - 1")
    first = em.op("add32", k0, ls)
    for e in range(SLOTS):
        k = em.op("add32", first, e * BLOCK // TILE)
        for s in (0, 1):
            em.op("sts", dst[s], 8 * e * BLOCK, load_if(s, k, at[s], em.op("ge", k, K), out[s]))
    em.op("bar")
    left = em.op("sub32", K, k0)
    count = em.op("selp32", CHUNK, left, em.op("ge", left, CHUNK))
    em.comment("the stage's terms, ascending")
    j = em.op("mov32", 0)
    inner, done = em.fresh_label(), em.fresh_label()
    em.label(inner)
    em.op("braif", em.op("ge", j, count), done)
    jo = em.op("wide", j, 8 * TILE)
    xs, ys = ([em.op("lds", em.op("add64", rd[s], jo), 8 * e) for e in range(EACH)] for s in (0, 1))
    for a in range(EACH):
        for b in range(EACH):
            em.op("add", acc[a][b], em.op("mul", *((ys[b], xs[a]) if swap else (xs[a], ys[b]))), d=acc[a][b])
    em.op("add32", j, 1, d=j)
    em.op("bra", inner)
    em.label(done)
    em.op("bar")
    em.op("add32", k0, CHUNK, d=k0)
    em.op("bra", top)
    em.label(end)
    em.comment("the outputs in range")
    for a, r in enumerate(idx[0]):
        skip = em.fresh_label()
        em.op("braif", em.op("ge", r, A), skip)
        for b, c in enumerate(idx[1]):
            past = em.fresh_label()
            em.op("braif", em.op("ge", c, B), past)
            store(r, c, acc[a][b])
            em.label(past)
        em.label(skip)


def _kernel(em: Emitter, lr: Learner, name: str, params: list[Param], sm: int, **launch) -> Kernel:
    em.label("$done")
    em.op("ret")
    text = em.module(name, [(p.name, p.type) for p in params], sm, f"{lr.name}: {name} (alphac/ptx/tiled.py)")
    return Kernel(name, sm, tuple(params), text, block=BLOCK, **launch)


def outer_sum(lr: Learner, name: str, sm: int = 90) -> Kernel:
    """outer_sum_<name>: x = u, y = v, the terms the samples (k = s, K = n)."""
    lay = row_layout(lr)
    ucol, R, vcol, C = lay.factors[name]
    em = Emitter()
    params = [Param("gs", "u64", "gs"), Param("G", "u64", "G"), Param("n", "u32", "n")]
    gs, G = (em.op("global", em.op("ldp64", p)) for p in ("gs", "G"))
    n, off = em.op("ldp32", "n"), param_layout(lr)[name]

    def load(side: int, k: str, j: str) -> tuple[str, int]:
        row = em.op("add64", gs, em.op("wide", k, 8 * lay.width))
        return em.op("add64", row, em.op("wide", j, 8)), 8 * (vcol if side else ucol)

    def store(r: str, c: str, value: str) -> None:
        em.op("st", em.op("add64", G, em.op("wide", em.op("add32", em.op("mul32", r, C), c), 8)), 8 * off, value)
    across = -(-C // TILE)
    _tiled(em, (R, C, n), across, load, store)
    return _kernel(em, lr, f"outer_sum_{name}", params, sm, threads=BLOCK * across * -(-R // TILE))


def product(lr: Learner, k: int, sm: int = 90) -> Kernel:
    """matvec<k> / vecmat<k> (abi.products()[k]): x = the step's vectors (a = row t, bounded by
    the step's samples: a data row of sample i, or row t of mv<vin>), y = W's rows (MatVec,
    b = r, the terms the columns, mul(W, x) as the interpreter multiplies) or columns (VecMat,
    b = c, the terms the rows, mul(u, W))."""
    p = products(lr)[k]
    em = Emitter()
    src = Param(f"data_{p.data}", "u64", "data", p.data) if p.data else Param(f"mv{p.vin}", "u64", "mv", str(p.vin))
    params = [Param(f"state_{p.W}", "u64", "state", p.W), src, Param(f"mv{k}", "u64", "mv", str(k))]
    params += [Param("idx", "u64", "idx"), Param("count", "u32", "count")] if lr.batch else \
        [Param("lo", "u32", "lo"), Param("hi", "u32", "hi")]
    base = {q.name: em.op("global", em.op("ldp64", q.name)) for q in params if q.type == "u64"}
    lo = None if lr.batch else em.op("ldp32", "lo")
    n = em.op("ldp32", "count") if lr.batch else em.op("sub32", em.op("ldp32", "hi"), lo)
    size = p.vec.size                   # the vector's length: the terms

    def load(side: int, c: str, j: str) -> tuple[str, int]:
        if side == 1:                   # W[j, c], or W[c, j] for u @ W
            at = em.op("add32", em.op("mul32", c, p.C), j) if p.vecmat else em.op("add32", em.op("mul32", j, p.C), c)
            return em.op("add64", base[f"state_{p.W}"], em.op("wide", at, 8)), 0
        if not p.data:                  # row j of the computed vectors
            return em.op("add64", base[src.name], em.op("wide", em.op("add32", em.op("mul32", j, size), c), 8)), 0
        i = em.op("cvt32", em.op("ldu64", em.op("add64", base["idx"], em.op("wide", j, 8)), 0)) if lr.batch \
            else em.op("add32", lo, j)  # the sample of row j, then x_i[c]
        return em.op("add64", em.op("add64", base[src.name], em.op("wide", i, 8 * size)), em.op("wide", c, 8)), 0

    def store(t: str, r: str, value: str) -> None:
        em.op("st", em.op("add64", base[f"mv{k}"], em.op("wide", em.op("add32", em.op("mul32", t, p.width), r), 8)), 0, value)
    across = -(-p.width // TILE)
    _tiled(em, (n, p.width, size), across, load, store, swap=not p.vecmat)
    return _kernel(em, lr, p.name, params, sm, tile=(TILE, BLOCK * across))
