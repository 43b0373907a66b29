"""Register allocation by linear scan, shared by both backends.

Requires: a `lir.Function` and the target's `RegFile` (which registers are allocatable, which
survive calls). Guarantees: an `Allocation` mapping every virtual register to a machine register
or a stack slot such that no two simultaneously live values share a location, and no value live
across a call or system call sits in a register that the call clobbers.

Method (Poletto & Sarkar): blocks are numbered in layout order, liveness is solved by the usual
backward data flow, each register gets one interval from its first to its last live point, and
intervals are scanned by start. A free register is taken (caller-saved first for values that do
not cross a call, so short values cost no save); otherwise the interval that ends last is spilled.
Values live across a call may only take callee-saved registers. Spilled values live in 8-byte
slots; the selector reloads them through the target's reserved scratch registers. Class `v`
(f64x2) shares the binary64 registers with class `f`; no call preserves all 16 bytes of one, so
an f64x2 live across a call is spilled, to two slots starting at an even slot (16-byte aligned).
Class `w` (f64x4, x86_64-v3) is the same registers at 32 bytes, spilled to four slots; no f64x4
may be live across a `wend` (it clears the registers' upper halves); class `z` (f64x8,
x86_64-v4) is them at 64 bytes, eight slots, and no f64x8 lives across a `wend` either.

`parallel_moves` orders a set of simultaneous moves (call arguments, function parameters) into a
sequence, breaking cycles through a scratch register.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from alphac.lower.lir import OPS, Function, VReg


@dataclass(frozen=True)
class RegFile:
    int_regs: tuple[str, ...]          # allocatable, in order of preference
    float_regs: tuple[str, ...]
    callee_saved: frozenset[str]       # allocatable registers a call preserves


@dataclass
class Allocation:
    loc: dict[VReg, tuple[str, object]] = field(default_factory=dict)   # ("reg", name) | ("slot", k)
    nslots: int = 0
    used_callee_saved: list[str] = field(default_factory=list)

    def of(self, v: VReg) -> tuple[str, object]:
        return self.loc[v]


def layout_positions(fn: Function):
    """Instruction positions: each instruction (terminators included) gets an even number."""
    pos = 0
    starts, ends = {}, {}
    numbered = []
    for b in fn.blocks:
        starts[b.label] = pos
        for inst in b.insts + [b.term]:
            numbered.append((pos, inst, b.label))
            pos += 2
        ends[b.label] = pos - 2
    return numbered, starts, ends


def liveness(fn: Function) -> dict[str, set[VReg]]:
    """live-out set of every block."""
    use, defs = {}, {}
    for b in fn.blocks:
        u, d = set(), set()
        for inst in b.insts + [b.term]:
            for v in inst.uses():
                if v not in d:
                    u.add(v)
            if inst.dst is not None:
                d.add(inst.dst)
        use[b.label], defs[b.label] = u, d
    live_in = {b.label: set() for b in fn.blocks}
    live_out = {b.label: set() for b in fn.blocks}
    changed = True
    while changed:
        changed = False
        for b in reversed(fn.blocks):
            out = set()
            for s in b.successors():
                out |= live_in[s]
            inn = use[b.label] | (out - defs[b.label])
            if out != live_out[b.label] or inn != live_in[b.label]:
                live_out[b.label], live_in[b.label] = out, inn
                changed = True
    return live_out


def intervals(fn: Function) -> tuple[dict[VReg, list[int]], list[int]]:
    numbered, starts, ends = layout_positions(fn)
    live_out = liveness(fn)
    iv: dict[VReg, list[int]] = {}

    def touch(v: VReg, p: int) -> None:
        r = iv.setdefault(v, [p, p])
        r[0] = min(r[0], p)
        r[1] = max(r[1], p)

    for v in fn.params:
        touch(v, -1)
    calls = []
    for p, inst, _ in numbered:
        for v in inst.uses():
            touch(v, p)
        if inst.dst is not None:
            touch(inst.dst, p)
        if inst.op in OPS and OPS[inst.op].clobbers:
            calls.append(p)
    # a value live out of a block is live from wherever it was live to the block's end; a value
    # live into a block (a loop header) is live from the block's start
    for b in fn.blocks:
        for v in live_out[b.label]:
            touch(v, ends[b.label] + 1)
            for s in b.successors():
                if starts[s] <= ends[b.label]:          # a back edge: live through the loop
                    touch(v, starts[s])
    return iv, calls


# Operations whose selectors read every operand before they write the result, so that the
# result may take the register of its first operand where that operand dies (x = a + b with a
# dead after it: one `addsd` on a's register, no copy).
REUSE_FIRST = frozenset({"add", "sub", "mul", "and", "or", "xor", "shl", "shr", "sar", "neg", "not",
                         "fadd", "fsub", "fmul", "fdiv", "fsqrt", "fneg", "load64",
                         "vadd", "vsub", "vmul", "vdiv", "vsqrt", "vneg", "vsplat",
                         "wadd", "wsub", "wmul", "wdiv", "wsqrt", "wneg", "wsplat",
                         "zadd", "zsub", "zmul", "zdiv", "zsqrt", "zneg", "zsplat",
                         *(c + "q" + op for c in "vwz" for op in ("add", "sub", "and", "or", "xor", "shl", "shr")),
                         *(f"f{op}m{x}" for op in ("add", "sub", "mul", "div") for x in ("", "x"))})
# (vsplat, whose operand is of class f, takes it only from a register: classes f and v share the
# registers, never a spill slot of one width)


def allocate(fn: Function, regs: RegFile) -> Allocation:
    iv, calls = intervals(fn)
    numbered = layout_positions(fn)[0]
    for p, inst, _ in numbered:
        live = [v for v, (s, e) in iv.items() if v.cls in "wz" and s < p < e] if inst.op == "wend" else []
        if live:
            raise ValueError(f"{fn.name}: the {'f64x4' if live[0].cls == 'w' else 'f64x8'} "
                             f"{live[0]!r} is live across a wend")
    defined_at = {p: inst for p, inst, _ in numbered if inst.dst is not None}
    alloc = Allocation()
    order = sorted(iv, key=lambda v: (iv[v][0], v.id))
    active: list[VReg] = []
    free = {"i": list(regs.int_regs), "f": list(regs.float_regs)}
    free["v"] = free["w"] = free["z"] = free["f"]   # one register file: free for all four

    call_at = sorted(calls)

    def crosses(v: VReg) -> bool:
        """A call strictly inside v's interval: the first call after its start is before its end."""
        s, e = iv[v]
        k = bisect_right(call_at, s)
        return k < len(call_at) and call_at[k] < e

    def allowed(v: VReg) -> list[str]:
        pool = regs.int_regs if v.cls == "i" else regs.float_regs
        if crosses(v):
            return [r for r in pool if r in regs.callee_saved and v.cls in "if"]
        caller = [r for r in pool if r not in regs.callee_saved]
        return caller + [r for r in pool if r in regs.callee_saved]

    def spill(v: VReg) -> None:
        if v.cls in "vwz":
            alloc.nslots += alloc.nslots % 2
        alloc.loc[v] = ("slot", alloc.nslots)
        alloc.nslots += {"v": 2, "w": 4, "z": 8}.get(v.cls, 1)

    for v in order:
        start = iv[v][0]
        for a in list(active):
            if iv[a][1] < start:
                active.remove(a)
                free[a.cls].append(alloc.loc[a][1])
        inst = defined_at.get(start)
        first = inst.args[0] if inst is not None and inst.dst == v and inst.op in REUSE_FIRST \
            and inst.args and isinstance(inst.args[0], VReg) else None
        may = allowed(v)
        if first is not None and first in active and iv[first][1] == start \
                and (first.cls == v.cls or alloc.loc[first][0] == "reg") \
                and alloc.loc[first][1] in may:
            active.remove(first)                 # it dies here: its register passes to v
            alloc.loc[v] = alloc.loc[first]
            active.append(v)
            continue
        choice = next((r for r in may if r in free[v.cls]), None)
        if choice is not None:
            free[v.cls].remove(choice)
            alloc.loc[v] = ("reg", choice)
            active.append(v)
            continue
        ok = set(may)
        victims = [a for a in active if a.cls == v.cls and alloc.loc[a][1] in ok]
        victim = max(victims, key=lambda a: (iv[a][1], a.id), default=None)
        if victim is not None and iv[victim][1] > iv[v][1]:
            alloc.loc[v] = alloc.loc[victim]
            spill(victim)
            active.remove(victim)
            active.append(v)
        else:
            spill(v)
    used = {r for kind, r in alloc.loc.values() if kind == "reg"}
    pool = regs.int_regs + regs.float_regs
    alloc.used_callee_saved = [r for r in pool if r in used and r in regs.callee_saved]
    return alloc


def parallel_moves(moves: list[tuple[object, object]], scratch: object) -> list[tuple[object, object]]:
    """Order simultaneous moves `dst <- src` (locations are hashable) into a safe sequence.

    Every destination is written once and every source is read before it is overwritten;
    cycles are broken by saving one destination's old value in `scratch`, which must not appear
    in `moves`. Destinations must be distinct.
    """
    pending = [(d, s) for d, s in moves if d != s]
    out: list[tuple[object, object]] = []
    while pending:
        sources = {s for _, s in pending}
        ready = next(((d, s) for d, s in pending if d not in sources), None)
        if ready is not None:
            out.append(ready)
            pending.remove(ready)
            continue
        d = pending[0][0]                     # all remaining moves form cycles
        out.append((scratch, d))
        pending = [(dd, scratch if ss == d else ss) for dd, ss in pending]
    return out
