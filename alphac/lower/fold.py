"""Loads folded into the arithmetic that reads them, for ISAs whose binary64 instructions take a
memory operand (x86-64: `mulsd xmm, [base + index*8]`).

Requires: a checked `lir.Function`. Guarantees: a new Function computing exactly what fn does,
in which a `fload`/`floadx` whose result is read once, as the second operand of an
`fadd fsub fmul fdiv` later in its block, is gone, and that operation reads the memory itself
(`faddm`..., `faddmx`...: the same IEEE operation on the same two values, in their order), and
one read once by a `wsplat` or `zsplat` is that splat's (`wsplatm`, `wsplatmx`, `zsplatm`...: a
broadcast from memory), and a `zsplatm`/`zsplatmx` read once, by a `zmul`, is that product's
(`zmulm`, `zmulmx`: x86_64-v4's embedded broadcast, `vmulpd zmm, zmm, qword ptr [...]{1to8}`;
as the memory operand is the second source, `s * v` becomes `v * s`: IEEE multiplication
commutes, bit for bit, but for which NaN's payload a product of two NaNs keeps, and a NaN's bits
are not the contract's, docs/language.md). A load
moves down only past instructions that write no memory (no store, call, system call or fence)
and redefine neither its base nor its index, so it reads the same bytes where it now is.

`sink_wide(fn)`, for the levels with f64x4/f64x8 (whose kernels compute every lane's loads and
products before the sums that read them, more vectors than there are registers): each pure
f64x4/f64x8 load or arithmetic whose result is defined once moves down its block to just before
the first instruction that reads its result or redefines one of its operands, and never past
an instruction that writes memory, calls or ends the wide registers (`wend`); what moves still
reads the same values (and bytes), so the function computes exactly what it did, with shorter
lives: a sum's terms are computed as the sum takes them.

`pool_constants(fn)`, for ISAs whose binary64 instructions read a RIP-relative constant (x86-64):
an `fconst` (not +0.0, which is `xorpd r, r`) whose result is defined once and read only in its
own block, each time as the second operand of `fadd fsub fmul fdiv fgt fge` (never the first: the
operands keep their order), is gone, and each of those operations takes the constant's bits as an
`Imm` there (lir.OPS's `F`): the selector reads it from the executable's constant pool
(alphac.lower.assemble.constant_pool), one memory operand in place of `mov` + `movq`. A constant
read in another block (one hoisted out of a loop) stays in its register, as the allocator keeps it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from alphac.lower.lir import Block, Function, Inst, OPS

FOLDED = {"fadd": "faddm", "fsub": "fsubm", "fmul": "fmulm", "fdiv": "fdivm"}
WRITES = frozenset(op for op, o in OPS.items()
                   if o.clobbers or op.startswith(("store", "fstore", "vstore", "wstore", "zstore")) or op == "fence")


def fold_loads(fn: Function) -> Function:
    uses, defs = Counter(), Counter()
    for b in fn.blocks:
        for i in b.insts + [b.term]:
            uses.update(i.uses())
            if i.dst is not None:
                defs[i.dst] += 1
    blocks = []
    for b in fn.blocks:
        out: list[Inst | None] = []
        pending: dict = {}                 # a foldable load's result -> (its place in out, the load)
        for inst in b.insts:
            if inst.op in ("wsplat", "zsplat") and inst.args[0] in pending:
                ld = pending.pop(inst.args[0])
                out[ld[0]] = None
                op = inst.op + "m" + ("x" if ld[1].op == "floadx" else "")
                out.append(Inst(op, inst.dst, ld[1].args, inst.origin))
                if op.startswith("z") and uses[inst.dst] == 1 and defs[inst.dst] == 1:
                    pending[inst.dst] = (len(out) - 1, out[-1])
                continue
            sp = [k for k, v in enumerate(inst.args[:2]) if v in pending and pending[v][1].op[1:6] == "splat"] \
                if inst.op == "zmul" and inst.args[0] != inst.args[1] else []
            if sp:                         # a splat read once, by a product: its memory operand
                at, s = pending.pop(inst.args[sp[-1]])
                out[at] = None
                out.append(Inst("zmulm" + s.op[7:], inst.dst, (inst.args[1 - sp[-1]],) + s.args, inst.origin))
                continue
            ld = pending.pop(inst.args[1], None) if inst.op in FOLDED and inst.args[0] != inst.args[1] \
                else None
            if ld is not None:
                out[ld[0]] = None
                op = FOLDED[inst.op] + ("x" if ld[1].op == "floadx" else "")
                out.append(Inst(op, inst.dst, (inst.args[0],) + ld[1].args, inst.origin))
                continue
            if inst.op in WRITES:
                pending.clear()
            if inst.dst is not None:       # a base or index redefined: those loads stay
                pending = {t: p for t, p in pending.items() if inst.dst not in p[1].args}
            if inst.op in ("fload", "floadx") and uses[inst.dst] == 1 and defs[inst.dst] == 1:
                pending[inst.dst] = (len(out), inst)
            out.append(inst)
        blocks.append(Block(b.label, [i for i in out if i is not None], b.term))
    return replace(fn, blocks=blocks)


POOLED = frozenset(("fadd", "fsub", "fmul", "fdiv", "fgt", "fge"))


def pool_constants(fn: Function) -> Function:
    where: dict = {}                       # an fconst's result -> (its block, its bits)
    defs = Counter(i.dst for b in fn.blocks for i in b.insts if i.dst is not None)
    for b in fn.blocks:
        for i in b.insts:
            if i.op == "fconst" and i.args[0].value and defs[i.dst] == 1:
                where[i.dst] = (b.label, i.args[0])
    for b in fn.blocks:
        for i in b.insts + [b.term]:
            for k, v in enumerate(i.args):
                if v in where and (where[v][0] != b.label or i.op not in POOLED or k != 1 or i.args[0] == v):
                    del where[v]
    if not where:
        return fn
    blocks = [Block(b.label, [replace(i, args=(i.args[0], where[i.args[1]][1])) if i.op in POOLED
                              and i.args[1] in where else i for i in b.insts
                              if not (i.op == "fconst" and i.dst in where)], b.term) for b in fn.blocks]
    return replace(fn, blocks=blocks)


SINKS = frozenset(f"{c}{op}" for c in "wz" for op in ("load", "loadx", "add", "sub", "mul", "div", "sqrt",
                                                        "neg", "splatm", "splatmx")) | {"zmulm", "zmulmx"}


def sink_wide(fn: Function) -> Function:
    defs = Counter(i.dst for b in fn.blocks for i in b.insts if i.dst is not None)
    blocks = []
    for b in fn.blocks:
        out: list[Inst] = []
        pending: list[Inst] = []           # moved down, in their order, not yet placed
        for inst in b.insts + [b.term]:
            if pending and (inst.op in WRITES or inst.op == "wend" or inst is b.term):
                out += pending
                pending = []
            elif pending:                      # (a value moved down may read one moved down)
                sinks = inst.op in SINKS and defs[inst.dst] == 1
                regs, keep, now = set() if sinks else set(inst.uses()), [], []
                for p in reversed(pending):     # what inst reads or overwrites, and what that reads
                    if p.dst in regs or (inst.dst is not None and inst.dst in p.uses()):
                        now.append(p)
                        regs.update(p.uses())
                    else:
                        keep.append(p)
                out += now[::-1]
                pending = keep[::-1]
            if inst is not b.term and inst.op in SINKS and defs[inst.dst] == 1:
                pending.append(inst)
            elif inst is not b.term:
                out.append(inst)
        blocks.append(Block(b.label, out, b.term))
    return replace(fn, blocks=blocks)
