"""The owner's sum fused into a weight gradient: `outer_sum_<p>`, a tiled kernel.

A fused param p (alphac/ptx/abi.py, `fused`) has as per-sample gradient one outer product
u_s v_s^T of R x C; grad_samples writes only u_s and v_s into gs row s (`abi.row_layout`), and
this kernel makes the owner's G of p from them:

    G[off(p) + r*C + c] = ((u_0[r]*v_0[c] + u_1[r]*v_1[c]) + u_2[r]*v_2[c]) + ...

each product one mul.rn, each sum one add.rn, the left fold over the samples ascending from
the first product (never added to a zero: a -0 survives). That is owner_sum's fold of the
coordinates u_s[r]*v_s[c] grad_samples wrote before: the same bits, without an R x C row a
sample.

Tiles: one block of BLOCK = 64 threads (SIDE x SIDE) a TILE x TILE tile of G (32 x 32), the
tiles row after row; thread (ty, tx) = (tid / 8, tid % 8) keeps the EACH x EACH (4 x 4)
outputs at rows 4ty.. and columns 4tx.. of its tile in registers. Sample 0's products start the
accumulators (read from global memory). Then samples 1 .. n-1 in chunks of CHUNK (16): the
block stages the chunk's u over its tile's rows and v over its columns in shared memory
(CHUNK x TILE words each; +0 past R, C or n), `bar.sync`, each thread adds the chunk's samples
in ascending order into its accumulators (`mul.rn` then `add.rn`), `bar.sync` before the next
chunk overwrites the stage. A thread past R or C computes on zeros and stores nothing; every
thread reaches every barrier (the chunk loop's trip count is the block's).

Requires: a fused param of a checked learner. Guarantees: the bits of owner_sum over
grad_samples' full rows (tests/test_tiled.py); the same learner and target give the same text.
"""
from __future__ import annotations

from alphac.ir.learner import Learner
from alphac.ptx.abi import Kernel, Param, param_layout, row_layout
from alphac.ptx.render import Emitter, f64imm

TILE, SIDE, CHUNK = 32, 8, 16           # a tile's side, threads along it, samples a stage
EACH, BLOCK = TILE // SIDE, SIDE * SIDE   # outputs a thread along each side; threads a block
SLOTS = CHUNK * TILE // BLOCK            # stage words each thread loads, of u and of v


def outer_sum(lr: Learner, name: str, sm: int = 90) -> Kernel:
    lay = row_layout(lr)
    ucol, R, vcol, C = lay.factors[name]
    across = -(-C // TILE)              # tiles along a row of G
    em = Emitter()
    params = [Param("gs", "u64", "gs"), Param("G", "u64", "G"), Param("n", "u32", "n")]
    gs, G = (em.op("global", em.op("ldp64", p)) for p in ("gs", "G"))
    n = em.op("ldp32", "n")
    em.op("braif", em.op("ge", em.op("mov32", 0), n), "$done")     # no samples: nothing
    tid, blk = em.op("sreg", "tid.x"), em.op("sreg", "ctaid.x")
    tr, tc = em.op("mul32", em.op("div32", blk, across), TILE), em.op("mul32", em.op("rem32", blk, across), TILE)
    ty, tx = em.op("mul32", em.op("div32", tid, SIDE), EACH), em.op("mul32", em.op("rem32", tid, SIDE), EACH)
    rows = [em.op("add32", em.op("add32", tr, ty), a) for a in range(EACH)]
    cols = [em.op("add32", em.op("add32", tc, tx), b) for b in range(EACH)]

    def load_if(addr: str, offset: int, *outside: str) -> str:
        """gs at addr + offset, or +0 when any predicate says the index is outside."""
        x, skip = em.op("movf", f64imm(0.0)), em.fresh_label()
        for p in outside:
            em.op("braif", p, skip)
        em.op("ld", addr, offset, d=x)
        em.label(skip)
        return x

    em.comment("the first sample's products start the accumulators")
    u0 = [load_if(em.op("add64", gs, em.op("wide", r, 8)), 8 * ucol, em.op("ge", r, R)) for r in rows]
    v0 = [load_if(em.op("add64", gs, em.op("wide", c, 8)), 8 * vcol, em.op("ge", c, C)) for c in cols]
    acc = [[em.op("mul", u, v) for v in v0] for u in u0]
    ush, vsh = em.op("addrs", em.shared(CHUNK * TILE)), em.op("addrs", em.shared(CHUNK * TILE))
    li, ls = em.op("rem32", tid, TILE), em.op("div32", tid, TILE)   # this thread's stage slots
    mine = em.op("wide", em.op("add32", em.op("mul32", ls, TILE), li), 8)
    stage = {"u": (em.op("add64", ush, mine), em.op("add32", tr, li), R, ucol),
             "v": (em.op("add64", vsh, mine), em.op("add32", tc, li), C, vcol)}
    src = {k: (em.op("add64", gs, em.op("wide", at, 8)), em.op("ge", at, lim)) for k, (_, at, lim, _) in stage.items()}
    ur, vc = em.op("add64", ush, em.op("wide", ty, 8)), em.op("add64", vsh, em.op("wide", tx, 8))
    s0 = em.op("mov32", 1)
    top, end = em.fresh_label(), em.fresh_label()
    em.label(top)
    em.op("braif", em.op("ge", s0, n), end)
    em.comment("stage samples s0 .. s0 + CHUNK - 1")
    first = em.op("add32", s0, ls)
    for e in range(SLOTS):
        s = em.op("add32", first, e * BLOCK // TILE)
        for k, (dst, _, _, col) in stage.items():
            base, outside = src[k]
            x = load_if(em.op("add64", base, em.op("wide", s, 8 * lay.width)), 8 * col, em.op("ge", s, n), outside)
            em.op("sts", dst, 8 * e * BLOCK, x)
    em.op("bar")
    left = em.op("sub32", n, s0)
    count = em.op("selp32", CHUNK, left, em.op("ge", left, CHUNK))
    em.comment("the stage's samples, ascending")
    j = em.op("mov32", 0)
    inner, done = em.fresh_label(), em.fresh_label()
    em.label(inner)
    em.op("braif", em.op("ge", j, count), done)
    jo = em.op("wide", j, 8 * TILE)
    us = [em.op("lds", em.op("add64", ur, jo), 8 * a) for a in range(EACH)]
    vs = [em.op("lds", em.op("add64", vc, jo), 8 * b) for b in range(EACH)]
    for a in range(EACH):
        for b in range(EACH):
            em.op("add", acc[a][b], em.op("mul", us[a], vs[b]), d=acc[a][b])
    em.op("add32", j, 1, d=j)
    em.op("bra", inner)
    em.label(done)
    em.op("bar")
    em.op("add32", s0, CHUNK, d=s0)
    em.op("bra", top)
    em.label(end)
    em.comment("the outputs inside G")
    off = param_layout(lr)[name]
    for a, r in enumerate(rows):
        skip = em.fresh_label()
        em.op("braif", em.op("ge", r, R), skip)
        for b, c in enumerate(cols):
            past = em.fresh_label()
            em.op("braif", em.op("ge", c, C), past)
            at = em.op("wide", em.op("add32", em.op("mul32", r, C), c), 8)
            em.op("st", em.op("add64", G, at), 8 * off, acc[a][b])
            em.label(past)
        em.label(skip)
    em.label("$done")
    em.op("ret")
    kname = f"outer_sum_{name}"
    text = em.module(kname, [(p.name, p.type) for p in params], sm, f"{lr.name}: {kname} (alphac/ptx/tiled.py)")
    return Kernel(kname, sm, tuple(params), text, threads=BLOCK * across * -(-R // TILE), block=BLOCK)
