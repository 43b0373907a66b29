"""x86-64 instruction selection: LIR + register allocation -> machine instructions.

Requires: a checked `lir.Function` and its `Allocation` (alphac.lower.regalloc with
`abi.REGFILE`, or `abi.REGFILE_V4` with `vex`). Guarantees: one `assemble.MI` list per function
that implements the LIR exactly: every binary64 operation is one SSE2 scalar instruction (`addsd
subsd mulsd divsd sqrtsd`) on its operands in their written order (never swapped, never fused),
or with `vex` (the levels) its VEX form (`vaddsd d, a, b`: three operands, so no copy of `a`;
EVEX where a register is 16-31), which computes the same low lane; every f64x2 operation
likewise (SSE2's packed double, or VEX.128's); so the levels emit no legacy SSE instruction but
the hardware SHA-256's, and none runs with dirty upper halves; `fgt` is `ucomisd` + `seta` and `fge`
`ucomisd` + `setae` (false when unordered), a binary64 constant that alphac.lower.fold.pool_constants
left as an operation's second operand is that instruction's RIP-relative memory operand into the
executable's constant pool (alphac.lower.assemble.constant_pool) and any other (but +0.0, `xorpd`)
one `movsd` from it, `umulh` is `mul` (rdx:rax = rax * b), spilled values are reloaded through the
scratch registers of `abi`, calls and system calls move their arguments by `parallel_moves`, and
the stack stays 16-byte aligned at every call.

The frame: callee-saved registers pushed in allocation order, then `sub rsp, F` for the spill
slots (slot k at [rsp + 8k]).
"""
from __future__ import annotations

from alphac.formats import PV_GROUP
from alphac.lower.assemble import MI, Label, pool_symbol
from alphac.lower.lir import Function, Imm, VReg
from alphac.lower.regalloc import Allocation, parallel_moves
from alphac.lower.selector import SelectorBase, rules
from alphac.x86_64 import abi
from alphac.x86_64.encode import Mem
from alphac.x86_64.encode import Imm as XImm
from alphac.x86_64.isa import GPR8, GPR16, GPR32, REGS

CC = {"eq": "e", "ne": "ne", "lt": "l", "le": "le", "gt": "g", "ge": "ge",
      "ult": "b", "ule": "be", "ugt": "a", "uge": "ae"}
ALU = {"add": "add", "sub": "sub", "and": "and", "or": "or", "xor": "xor"}
FALU = {"fadd": "addsd", "fsub": "subsd", "fmul": "mulsd", "fdiv": "divsd"}
VALU = {"vadd": "addpd", "vsub": "subpd", "vmul": "mulpd", "vdiv": "divpd"}
WALU = {"wadd": "vaddpd", "wsub": "vsubpd", "wmul": "vmulpd", "wdiv": "vdivpd"}
QALU = {"add": "vpaddq", "sub": "vpsubq", "and": "vpandq", "or": "vporq", "xor": "vpxorq",
        "shl": "vpsllq", "shr": "vpsrlq"}                 # a wide class's lanes as integers
VQ = {"add": "paddq", "sub": "psubq", "and": "pand", "or": "por", "xor": "pxor",
      "shl": "psllq", "shr": "psrlq"}                    # f64x2's, in SSE2 (QALU's on xmm with vex)
SPILL = {"f": "movsd", "v": "movupd", "w": "vmovupd", "z": "vmovupd"}   # a class's reload and store
BITS = {"v": 128, "w": 256, "z": 512}                       # a vector class's width
SHIFT = {"shl": "shl", "shr": "shr", "sar": "sar"}
S1, S2, S3 = (REGS[r] for r in abi.SCRATCH)        # rax, r11, rdx
F1, F2 = (REGS[r] for r in abi.FSCRATCH)           # xmm15, xmm14
WIDE_SCRATCH = {c: (REGS[c[0] + abi.FSCRATCH[0][1:]], REGS[c[0] + abi.FSCRATCH[1][1:]])
                for c in ("ymm", "zmm")}             # ymm15, ymm14; zmm15, zmm14
WIDE_REG = {"w": "ymm", "z": "zmm"}                 # a wide class's registers
RSP = REGS["rsp"]
# SSE2 instructions whose VEX form takes the same operands (with `vex`, the selector emits that)
SAME_IN_VEX = frozenset({"movsd", "movapd", "movupd", "movq", "ucomisd", "sqrtpd"})


def _fits32(v: int) -> bool:
    return -(1 << 31) <= v < (1 << 31)


class Selector(SelectorBase):
    REGS, INT_ARGS, FLOAT_ARGS = REGS, abi.INT_ARGS, abi.FLOAT_ARGS
    INT_RET, FLOAT_RET = abi.INT_RET, abi.FLOAT_RET
    ISA, JUMP, CALL, TRAP = "x86-64", "jmp", "call", ("ud2",)

    def __init__(self, fn: Function, alloc: Allocation, vex: bool = False):
        super().__init__(fn, alloc)
        self.vex = vex
        pushed = len(alloc.used_callee_saved)
        frame = 8 * alloc.nslots
        if (8 + 8 * pushed + frame) % 16:
            frame += 8
        self.frame = frame

    def emit(self, mnemonic: str, *ops, target: str | None = None, sym: str | None = None) -> None:
        super().emit("v" + mnemonic if self.vex and mnemonic in SAME_IN_VEX else mnemonic, *ops,
                     target=target, sym=sym)

    def op3(self, mn: str, d: VReg, a: VReg, y, sym: str | None = None) -> None:
        """d = a mn y (y: a register or memory operand, placed; `sym`: the pooled constant it
        addresses): with `vex`, one three-operand v<mn> reading a where it is; else a copied
        into d's register (F1 if y is there) and the SSE2 two-operand mn."""
        r = self.defreg(d, F1)
        if self.vex:
            self.emit("v" + mn, r, self.use(a, F1 if y == r else r), y, sym=sym)
        else:
            if y == r and self.where(a) != r:
                r = F1                           # keep operand order: compute a op b in scratch
            self.vec_into(r, a) if a.cls == "v" else self.move(r, self.where(a))
            self.emit(mn, r, y, sym=sym)
        self.commit(d, r)

    def fsrc(self, b) -> tuple:
        """A binary64 second operand: (where b is, None), or for a pooled constant (an Imm:
        alphac.lower.fold.pool_constants) its RIP-relative memory operand and pool symbol."""
        return (Mem(rip=True, size=64), pool_symbol(b.value)) if isinstance(b, Imm) else (self.where(b), None)

    def lanes_op(self, mn: str, r, x) -> None:
        """r = x mn x (unpcklpd: a splat; unpckhpd: lane 1; xorpd: zero), x a register."""
        if self.vex:
            self.emit("v" + mn, r, x, x)
        else:
            self.move(r, x)
            self.emit(mn, r, r)

    # -- locations ---------------------------------------------------------------------------
    def slot(self, k: int) -> Mem:
        return Mem(RSP, disp=8 * k)

    def where(self, v: VReg):
        kind, x = self.alloc.of(v)
        if kind == "reg":
            return REGS[WIDE_REG[v.cls][0] + x[1:]] if v.cls in WIDE_REG else REGS[x]
        return Mem(RSP, disp=8 * x, size=BITS.get(v.cls, 64))

    def use(self, v: VReg, scratch) -> object:
        """A register holding v: its own, or `scratch` after a reload."""
        loc = self.where(v)
        if isinstance(loc, Mem):
            self.emit(SPILL.get(v.cls, "mov"), scratch, loc)
            return scratch
        return loc

    def commit(self, v: VReg, reg) -> None:
        """After computing v into `reg`, store it if v lives in a slot."""
        loc = self.where(v)
        if isinstance(loc, Mem):
            self.emit(SPILL.get(v.cls, "mov"), loc, reg)
        elif loc != reg:
            self.emit({"i": "mov", "w": "vmovapd", "z": "vmovapd"}.get(v.cls, "movapd"), loc, reg)

    def imm_or_reg(self, a, scratch):
        if isinstance(a, Imm):
            if _fits32(a.value):
                return XImm(a.value)
            self.emit("mov", scratch, XImm(a.value))
            return scratch
        return self.use(a, scratch)

    def move(self, dst, src) -> None:
        """One location-to-location move (registers or stack Mems, same class)."""
        if dst == src:
            return
        isf = (getattr(dst, "kind", "") == "xmm") or (getattr(src, "kind", "") == "xmm")
        if isinstance(dst, Mem) and isinstance(src, Mem):
            tmp = F1 if isf else S2
            self.emit("movsd" if isf else "mov", tmp, src)
            src = tmp
        if isf:
            both_regs = not isinstance(dst, Mem) and not isinstance(src, Mem)
            self.emit("movapd" if both_regs else "movsd", dst, src)
        else:
            self.emit("mov", dst, src)

    def moves(self, pairs: list[tuple[object, object]], cls_of) -> None:
        for cls in ("i", "f"):
            group = [(d, s) for d, s in pairs if cls_of(d, s) == cls]
            scratch = S2 if cls == "i" else F1
            for d, s in parallel_moves(group, scratch):
                self.move(d, s)

    # -- functions ---------------------------------------------------------------------------
    def prologue(self) -> None:
        for r in self.alloc.used_callee_saved:
            self.emit("push", REGS[r])
        if self.frame:
            self.emit("sub", RSP, XImm(self.frame))

    def arg_moves(self, regs: list[VReg], incoming: bool) -> None:
        fixed = self.arg_regs(regs)
        pairs = [(self.where(v), r) if incoming else (r, self.where(v)) for v, r in zip(regs, fixed)]
        self.moves(pairs, lambda d, s: "f" if "xmm" in (getattr(d, "kind", ""), getattr(s, "kind", "")) else "i")

    def epilogue(self) -> None:
        if self.frame:
            self.emit("add", RSP, XImm(self.frame))
        for r in reversed(self.alloc.used_callee_saved):
            self.emit("pop", REGS[r])
        self.emit("ret")

    # -- instructions: one rule per LIR operation (RULES, below the class) ---------------------
    def iconst(self, op, d, a) -> None:
        r = self.defreg(d, S1)
        if a[0].value == 0:
            self.emit("xor", r, r)
        else:
            self.emit("mov", r, XImm(a[0].value))
        self.commit(d, r)

    def fconst(self, op, d, a) -> None:
        r = self.defreg(d, F1)
        if a[0].value == 0:
            self.lanes_op("xorpd", r, r)
        else:                                # one load from the pool, not movabs + movq (port 5)
            self.emit("movsd", r, Mem(rip=True, size=64), sym=pool_symbol(a[0].value))
        self.commit(d, r)

    def addr(self, op, d, a) -> None:
        r = self.defreg(d, S1)
        self.emit("lea", r, Mem(rip=True), sym=a[0].name)
        self.commit(d, r)

    def int_shift(self, op, d, a) -> None:
        self.shift(op, d, a[0], a[1])

    def divide(self, op, d, a) -> None:
        self.emit("mov", S1, self.use(a[0], S1)) if self.where(a[0]) != S1 else None
        src = self.where(a[1])
        if op in ("udiv", "urem"):
            self.emit("xor", S3, S3)
            self.emit("div", src)
        else:
            self.emit("cqo")
            self.emit("idiv", src)
        self.commit(d, S1 if op in ("udiv", "sdiv") else S3)

    def umulh(self, op, d, a) -> None:
        self.move(S1, self.where(a[0]))
        self.emit("mul", self.where(a[1]))          # rdx:rax = rax * b, unsigned
        self.commit(d, S3)

    def int_unary(self, op, d, a) -> None:
        r = self.defreg(d, S1)
        self.move(r, self.where(a[0]))
        self.emit(op, r)
        self.commit(d, r)

    def rotate_swap(self, op, d, a) -> None:
        r = self.defreg(d, S1)
        self.move(r, self.where(a[0]))
        if op == "ror32":
            self.emit("ror", GPR32[r.num], XImm(a[1].value))    # a 32-bit result zero-extends
        elif op == "ror64":
            self.emit("ror", r, XImm(a[1].value))
        else:
            self.emit("bswap", GPR32[r.num])
        self.commit(d, r)

    def setcc(self, op, d, a) -> None:
        self.compare(a[1], a[2])
        self.emit("set" + CC[a[0]], GPR8[S1.num])
        self.emit("movzx", S1, GPR8[S1.num])
        self.commit(d, S1)

    def float_alu(self, op, d, a) -> None:
        self.falu(FALU[op], d, a[0], a[1])

    def fsqrt(self, op, d, a) -> None:
        r, x = self.defreg(d, F1), self.use(a[0], F2)
        self.emit(*("vsqrtsd", r, x) if self.vex else ("sqrtsd", r), x)   # (vex: x's upper lane)
        self.commit(d, r)

    def fneg(self, op, d, a) -> None:
        self.emit("movsd", F2, Mem(rip=True, size=64), sym=pool_symbol(1 << 63))   # the sign bit
        self.op3("xorpd", d, a[0], F2)

    def fgt(self, op, d, a) -> None:
        y, sym = self.fsrc(a[1])
        self.emit("ucomisd", self.use(a[0], F1), self.use(a[1], F2) if sym is None else y, sym=sym)
        self.emit("seta" if op == "fgt" else "setae", GPR8[S1.num])   # above: CF = ZF = 0; above
        # or equal (fge): CF = 0; both false when unordered (ZF = PF = CF = 1)
        self.emit("movzx", S1, GPR8[S1.num])
        self.commit(d, S1)

    def i2f(self, op, d, a) -> None:
        r = self.defreg(d, F1)
        self.emit(*("vcvtsi2sd", r, r) if self.vex else ("cvtsi2sd", r), self.where(a[0]))
        self.commit(d, r)

    def bits(self, op, d, a) -> None:
        r = self.defreg(d, S1 if op == "f2bits" else F1)
        self.emit("movq", r, self.use(a[0], F2 if op == "f2bits" else S2))
        self.commit(d, r)

    def load(self, op, d, a) -> None:
        mem = self.mem(a[0], a[1], S2)
        if op == "fload":
            r = self.defreg(d, F1)
            self.emit("movsd", r, mem)
        else:
            r = self.defreg(d, S1)
            width = int(op[4:])
            if width == 64:
                self.emit("mov", r, mem)
            elif width == 32:
                self.emit("mov", GPR32[r.num], Mem(mem.base, disp=mem.disp, size=32))
            else:
                self.emit("movzx", r, Mem(mem.base, disp=mem.disp, size=width))
        self.commit(d, r)

    def store(self, op, d, a) -> None:
        mem = self.mem(a[0], a[1], S2)
        if op == "fstore":
            self.emit("movsd", mem, self.use(a[2], F1))
        else:
            width = int(op[5:])
            v = self.use(a[2], S1)
            reg = {64: v, 32: GPR32[v.num], 16: GPR16[v.num], 8: GPR8[v.num]}[width]
            self.emit("mov", Mem(mem.base, disp=mem.disp, size=width), reg)

    def float_alu_mem(self, op, d, a) -> None:
        """d = a op (the binary64 in memory): one instruction with a memory operand."""
        self.op3(FALU[op[:4]], d, a[0], self.vmem(op, a[1:], 64))

    def load_indexed(self, op, d, a) -> None:
        r = self.defreg(d, F1)
        self.emit("movsd", r, self.vmem(op, a, 64))
        self.commit(d, r)

    def store_indexed(self, op, d, a) -> None:
        self.emit("movsd", self.vmem(op, a, 64), self.use(a[2], F1))

    # -- f64x2: SSE2 packed double, each lane the scalar instruction ---------------------------
    def vmem(self, op, a, size: int = 128) -> Mem:
        """The memory operand of an access at base + offset or (op ending in x) base + 8 * index."""
        if op.endswith("x"):
            return Mem(self.use(a[0], S1), index=self.use(a[1], S2), scale=8, size=size)
        m = self.mem(a[0], a[1], S2)
        return Mem(m.base, disp=m.disp, size=size)

    def vec_load(self, op, d, a) -> None:
        r = self.defreg(d, F1)
        self.emit("movupd", r, self.vmem(op, a))
        self.commit(d, r)

    def vec_store(self, op, d, a) -> None:
        self.emit("movupd", self.vmem(op, a), self.use(a[2], F1))

    def vec_into(self, r, v: VReg) -> None:
        """r = the f64x2 v (from its register or its slot)."""
        loc = self.where(v)
        if isinstance(loc, Mem):
            self.emit("movupd", r, loc)
        elif loc != r:
            self.emit("movapd", r, loc)

    def vec_alu(self, op, d, a) -> None:
        self.op3(VALU[op], d, a[0], self.use(a[1], F2))

    def vec_int(self, op, d, a) -> None:
        """d = a op b (or a shifted by the constant b) on f64x2's lanes as integers: SSE2's
        two-operand form (as op3), or with `vex` the three-operand one on xmm."""
        b = XImm(a[1].value) if op[2:] in ("shl", "shr") else self.use(a[1], F2)
        if not self.vex:
            return self.op3(VQ[op[2:]], d, a[0], b)
        r = self.defreg(d, F1)
        self.emit(QALU[op[2:]], r, self.use(a[0], F1), b)
        self.commit(d, r)

    def vec_unary(self, op, d, a) -> None:
        if op == "vsqrt":
            r = self.defreg(d, F1)
            self.emit("sqrtpd", r, self.use(a[0], F2))
            self.commit(d, r)
        else:
            self.emit("mov", S2, XImm(-(1 << 63)))
            self.emit("movq", F2, S2)
            self.lanes_op("unpcklpd", F2, F2)
            self.op3("xorpd", d, a[0], F2)

    def vec_copy(self, op, d, a) -> None:
        r = self.defreg(d, F1)
        self.vec_into(r, a[0])
        self.commit(d, r)

    def vec_splat(self, op, d, a) -> None:
        r = self.defreg(d, F1)
        self.lanes_op("unpcklpd", r, self.use(a[0], r))
        self.commit(d, r)

    def vec_pack(self, op, d, a) -> None:
        self.op3("unpcklpd", d, a[0], self.use(a[1], F2))

    def vec_lane(self, op, d, a) -> None:
        r = self.defreg(d, F1)
        if a[1].value:
            self.lanes_op("unpckhpd", r, self.use(a[0], r))
        else:
            self.vec_into(r, a[0])
        self.commit(d, r)

    # -- f64x4 and f64x8: AVX (x86_64-v3) and AVX-512F (x86_64-v4) packed double, each lane the
    # scalar instruction; one rule per op for both classes (`d`'s or `a[0]`'s: "w" or "z")
    @staticmethod
    def _scratch(v: VReg):
        return WIDE_SCRATCH[WIDE_REG[v.cls]]

    def wide_load(self, op, d, a) -> None:
        r = self.defreg(d, self._scratch(d)[0])
        self.emit("vmovupd", r, self.vmem(op, a, BITS[d.cls]))
        self.commit(d, r)

    def wide_store(self, op, d, a) -> None:
        self.emit("vmovupd", self.vmem(op, a, BITS[a[2].cls]), self.use(a[2], self._scratch(a[2])[0]))

    def wide_alu(self, op, d, a) -> None:
        """d = a op b in one VEX or EVEX instruction (three operands: no copy); b may stay in its
        slot."""
        r = self.defreg(d, self._scratch(d)[0])
        self.emit(WALU["w" + op[1:]], r, self.use(a[0], self._scratch(d)[0]), self.where(a[1]))
        self.commit(d, r)

    def wide_int(self, op, d, a) -> None:
        """d = a op b (or a shifted by the constant b) on the lanes' 64 bits as integers: one
        AVX2 or AVX-512F instruction, b from its register or its slot."""
        r = self.defreg(d, self._scratch(d)[0])
        b = XImm(a[1].value) if op[2:] in ("shl", "shr") else self.where(a[1])
        self.emit(QALU[op[2:]], r, self.use(a[0], self._scratch(d)[0]), b)
        self.commit(d, r)

    def wide_gather(self, op, d, a) -> None:
        """kxnorw sets k1's bits (no value lives in an opmask register), vgatherqpd loads each
        lane from base + 8 * its index (clearing k1): into d's register unless that is the
        index's (a gather's destination must not be), else into zmm15."""
        s1, s2 = self._scratch(d)
        idx = self.use(a[1], s2)
        r = self.defreg(d, s1)
        r = s1 if r == idx else r
        k1 = REGS["k1"]
        self.emit("kxnorw", k1, k1, k1)
        self.emit("vgatherqpd", r, k1, Mem(self.use(a[0], S1), idx, 8, size=BITS[d.cls]))
        self.commit(d, r)

    def avx2_gather(self, op, d, a) -> None:
        """AVX2's vgatherqpd: destination, index and mask (all ones, from vpcmpeqq, in ymm15)
        three distinct registers: d's own with the index in its register (or copied to ymm14),
        or ymm14 with the index in its register; where both are in slots, ymm13, kept below rsp
        (the red zone) meanwhile."""
        s1, s2 = self._scratch(d)
        base = self.use(a[0], S1)
        r, idx = self.defreg(d, None), self.where(a[1])
        saved = None
        if r is not None:
            if isinstance(idx, Mem) or idx == r:
                self.emit("vmovupd" if isinstance(idx, Mem) else "vmovapd", s2, idx)
                idx = s2
        elif not isinstance(idx, Mem):
            r = s2
        else:
            idx, r, saved = self.use(a[1], s2), REGS["ymm13"], Mem(RSP, disp=-32, size=256)
            self.emit("vmovupd", saved, r)
        self.emit("vpcmpeqq", s1, s1, s1)
        self.emit("vgatherqpd", r, Mem(base, idx, 8, size=256), s1)
        self.commit(d, r)
        if saved is not None:
            self.emit("vmovupd", r, saved)

    def wide_unary(self, op, d, a) -> None:
        """vsqrtpd; or the sign bits flipped by vxorpd (f64x4) or vpxorq (f64x8: AVX-512F's
        xor) with (-0.0, ...) built in ymm14/zmm14 (VEX or EVEX throughout: no SSE instruction
        between the wide ones)."""
        s1, s2 = self._scratch(d)
        r = self.defreg(d, s1)
        if op[1:] == "sqrt":
            self.emit("vsqrtpd", r, self.where(a[0]))
        else:
            self.seq(("mov", S2, XImm(-(1 << 63))), ("vmovq", F2, S2), ("vbroadcastsd", s2, F2),
                     ("vxorpd" if d.cls == "w" else "vpxorq", r, self.use(a[0], s1), s2))
        self.commit(d, r)

    def wide_copy(self, op, d, a) -> None:
        self.commit(d, self.use(a[0], self._scratch(d)[0]))

    def wide_splat(self, op, d, a) -> None:
        r = self.defreg(d, self._scratch(d)[0])  # from its register, its slot, or (folded) memory
        self.emit("vbroadcastsd", r, self.where(a[0]) if op[1:] == "splat" else self.vmem(op, a, 64))
        self.commit(d, r)

    def wide_mul_splat(self, op, d, a) -> None:
        """d = a * (m, ..., m), m the binary64 at the address: AVX-512's embedded broadcast
        (`vmulpd zmm, zmm, qword ptr [...]{1to8}`), each lane the vmulpd of the splat's."""
        r = self.defreg(d, self._scratch(d)[0])
        m = self.vmem(op, a[1:], 64)
        self.emit("vmulpd", r, self.use(a[0], self._scratch(d)[0]), Mem(m.base, m.index, m.scale, m.disp, size=64, bcst=True))
        self.commit(d, r)

    def wide_end(self, op, d, a) -> None:
        self.emit("vzeroupper")

    def cpu_has_avx2(self, op, d, a) -> None:
        """cpuid and xgetbv: AVX2 (leaf 7 EBX bit 5, asked only when leaf 0 says leaf 7 exists),
        AVX and OSXSAVE (leaf 1 ECX bits 28, 27), and the OS saving the ymm state (XCR0 bits 1
        and 2). rbx is kept in rsi, as in cpu_has_sha256."""
        self.cpu_level(d, 0x6, 1 << 5)

    def cpu_has_avx512(self, op, d, a) -> None:
        """As cpu_has_avx2, for x86_64-v4: leaf 7 EBX's AVX2 and AVX-512 F, DQ, CD, BW and VL
        (bits 5, 16, 17, 28, 30, 31), and XCR0's opmask and zmm state too (bits 5, 6, 7)."""
        self.cpu_level(d, 0xE6, 0xD0030020)

    def cpu_level(self, d, xcr0: int, leaf7: int) -> None:
        """d = 1 when every bit of `leaf7` is set in cpuid leaf 7's EBX, every bit of `xcr0` in
        XCR0, and AVX and OSXSAVE in leaf 1's ECX (leaf 7 asked only when leaf 0 says it exists)."""
        rsi, rdi, r8, rbx, rcx = (REGS[r] for r in ("rsi", "rdi", "r8", "rbx", "rcx"))
        no = f".noavx{len(self.out)}"
        self.seq(("mov", rsi, rbx), ("xor", S1, S1), ("cpuid",), ("mov", rdi, S1), ("mov", S1, XImm(1)),
                 ("cpuid",), ("mov", r8, rcx), ("xor", S1, S1), ("cmp", rdi, XImm(7)), ("jb", no),
                 ("and", r8, XImm(0x18000000)), ("cmp", r8, XImm(0x18000000)), ("jne", no),
                 ("xor", rcx, rcx), ("xgetbv",), ("and", S1, XImm(xcr0)), ("cmp", S1, XImm(xcr0)),
                 ("mov", S1, XImm(0)), ("jne", no), ("mov", S1, XImm(7)), ("xor", rcx, rcx),
                 ("cpuid",), ("mov", rdi, XImm(leaf7)), ("mov", S1, rbx), ("and", S1, rdi),
                 ("cmp", S1, rdi), ("mov", S1, XImm(0)), ("jne", no), ("mov", S1, XImm(1)), Label(no),
                 ("mov", rbx, rsi))
        self.commit(d, S1)

    def syscall(self, op, d, a) -> None:
        regs = [REGS[r] for r in abi.SYSCALL_REGS[:len(a)]]
        self.moves([(r, self.where(v)) for r, v in zip(regs, a)], lambda d, s: "i")
        self.emit("syscall")
        self.commit(d, S1)

    def fence(self, op, d, a) -> None:
        self.emit("mfence")

    def prefetch(self, op, d, a) -> None:
        m = self.mem(a[0], a[1], S2)
        self.emit("prefetcht0", Mem(m.base, disp=m.disp, size=8))

    def seq(self, *ins) -> None:
        """Machine instructions in order: (mnemonic, operands...), (jcc, label) or a Label."""
        for i in ins:
            if isinstance(i, Label):
                self.out.append(i)
            else:
                self.emit(i[0], target=i[1]) if i[0][0] == "j" else self.emit(*i)

    def cpu_has_sha256(self, op, d, a) -> None:
        """cpuid: SHA in leaf 7 (EBX bit 29), asked only when leaf 0 says leaf 7 exists, and SSSE3
        and SSE4.1 (leaf 1 ECX bits 9, 19). cpuid writes rbx, kept in rsi (the op clobbers the
        caller-saved registers, not the callee-saved)."""
        rsi, rdi, r8, rbx, rcx = (REGS[r] for r in ("rsi", "rdi", "r8", "rbx", "rcx"))
        no = f".nosha{len(self.out)}"
        self.seq(("mov", rsi, rbx), ("xor", S1, S1), ("cpuid",), ("mov", rdi, S1), ("mov", S1, XImm(1)),
                 ("cpuid",), ("mov", r8, rcx), ("mov", S1, XImm(7)), ("xor", rcx, rcx), ("cpuid",),
                 ("xor", S1, S1), ("cmp", rdi, XImm(7)), ("jb", no), ("and", r8, XImm(0x80200)),
                 ("cmp", r8, XImm(0x80200)), ("jne", no), ("mov", S1, rbx), ("shr", S1, XImm(29)),
                 ("and", S1, XImm(1)), Label(no), ("mov", rbx, rsi))
        self.commit(d, S1)

    def sha256_hw(self, op, d, a) -> None:
        """SHA-NI, four rounds at a time in the order of Linux's sha256_ni_asm.S: the state as
        ABEF and CDGH in xmm1 and xmm2, the message words in xmm3-xmm6, K + W in xmm0."""
        self.arg_moves(list(a), incoming=False)          # rdi state, rsi p, rdx blocks, rcx k
        rdi, rsi, rdx, rcx = (REGS[r] for r in ("rdi", "rsi", "rdx", "rcx"))
        x = [REGS[f"xmm{i}"] for i in range(11)]
        top, done = Label(f".sha{len(self.out)}"), Label(f".shadone{len(self.out)}")
        state = Mem(rdi, size=128), Mem(rdi, disp=16, size=128)
        self.seq(("cmp", rdx, XImm(0)), ("je", done.name), ("movdqu", x[1], state[0]),
                 ("movdqu", x[2], state[1]), ("pshufd", x[1], x[1], XImm(0xB1)),
                 ("pshufd", x[2], x[2], XImm(0x1B)), ("movdqa", x[7], x[1]),
                 ("palignr", x[1], x[2], XImm(8)), ("pblendw", x[2], x[7], XImm(0xF0)),  # ABEF, CDGH
                 ("movdqu", x[8], Mem(rcx, disp=256, size=128)),                         # the shuffle
                 top, ("movdqa", x[9], x[1]), ("movdqa", x[10], x[2]))
        for g in range(16):                                 # rounds 4g .. 4g + 3
            m0, m1, m2, m3 = (x[3 + (g + j) % 4] for j in range(4))
            if g < 4:
                self.seq(("movdqu", m0, Mem(rsi, disp=16 * g, size=128)), ("pshufb", m0, x[8]))
            self.seq(("movdqu", x[0], Mem(rcx, disp=16 * g, size=128)), ("paddd", x[0], m0),
                     ("sha256rnds2", x[2], x[1], x[0]))
            if 3 <= g < 15:                                 # m1: the words of rounds 4g + 4 ..
                self.seq(("movdqa", x[7], m0), ("palignr", x[7], m3, XImm(4)), ("paddd", m1, x[7]),
                         ("sha256msg2", m1, m0))
            self.seq(("pshufd", x[0], x[0], XImm(0x0E)), ("sha256rnds2", x[1], x[2], x[0]))
            if 1 <= g < 13:
                self.seq(("sha256msg1", m3, m0))
        self.seq(("paddd", x[1], x[9]), ("paddd", x[2], x[10]), ("add", rsi, XImm(64)),
                 ("sub", rdx, XImm(1)), ("jne", top.name), ("pshufd", x[1], x[1], XImm(0x1B)),
                 ("pshufd", x[2], x[2], XImm(0xB1)), ("movdqa", x[7], x[1]),
                 ("pblendw", x[1], x[2], XImm(0xF0)), ("palignr", x[2], x[7], XImm(8)),  # ABCD, EFGH
                 ("movdqu", state[0], x[1]), ("movdqu", state[1], x[2]), done)

    def cpu_has_clmul(self, op, d, a) -> None:
        """cpuid: PCLMULQDQ (leaf 1 ECX bit 1); rbx kept in rsi, as in cpu_has_sha256."""
        rsi, rbx, rcx = (REGS[r] for r in ("rsi", "rbx", "rcx"))
        self.seq(("mov", rsi, rbx), ("mov", S1, XImm(1)), ("cpuid",), ("mov", S1, rcx),
                 ("shr", S1, XImm(1)), ("and", S1, XImm(1)), ("mov", rbx, rsi))
        self.commit(d, S1)

    def polyval_hw(self, op, d, a) -> None:
        """PCLMULQDQ, PV_GROUP (8) blocks a reduction: the state in xmm0, p's constant in xmm1,
        H^1 .. H^8 in xmm2-xmm9; each block's product by its power in three multiplies
        (Karatsuba: low halves, high halves, and the halves' xors, the power's from the key),
        summed in xmm10, xmm11, xmm12; the middle made right once (xor the low and the high
        sums), then Montgomery's reduction by x^128 (RFC 8452's dot: two multiplies of the low
        half by 0xC2 << 56) and the high half added."""
        self.arg_moves(list(a), incoming=False)          # rdi s, rsi key, rdx p, rcx groups
        rdi, rsi, rdx, rcx = (REGS[r] for r in ("rdi", "rsi", "rdx", "rcx"))
        x, g = [REGS[f"xmm{i}"] for i in range(15)], PV_GROUP
        lo, hi, mid, blk, tmp = x[10:15]
        top, done = Label(f".pv{len(self.out)}"), Label(f".pvdone{len(self.out)}")
        self.seq(("cmp", rcx, XImm(0)), ("je", done.name), ("movdqu", x[0], Mem(rdi, size=128)),
                 ("movdqu", x[1], Mem(rsi, disp=16 * g, size=128)),
                 *(("movdqu", x[2 + k], Mem(rsi, disp=16 * k, size=128)) for k in range(g)), top)
        r = REGS["xmm15"]
        for k in range(g):                               # block k + 1 times H^(g - k)
            self.seq(("movdqu", blk, Mem(rdx, disp=16 * k, size=128)))
            if k == 0:
                self.seq(("pxor", blk, x[0]))
            h = x[1 + g - k]
            self.seq(("pshufd", tmp, blk, XImm(0x4E)), ("pxor", tmp, blk),
                     ("movdqa", r, blk), ("pclmulqdq", r, h, XImm(0x00)),
                     ("pclmulqdq", blk, h, XImm(0x11)))
            if k == 0:
                self.seq(("movdqa", lo, r), ("movdqa", hi, blk))
            else:
                self.seq(("pxor", lo, r), ("pxor", hi, blk))
            self.seq(("movdqu", r, Mem(rsi, disp=16 * (2 * g - k), size=128)),
                     ("pclmulqdq", tmp, r, XImm(0x00)))
            self.seq(("movdqa", mid, tmp) if k == 0 else ("pxor", mid, tmp))
        self.seq(("pxor", mid, lo), ("pxor", mid, hi),
                 ("movdqa", tmp, mid), ("pslldq", tmp, XImm(8)), ("pxor", lo, tmp),
                 ("psrldq", mid, XImm(8)), ("pxor", hi, mid))
        for _ in range(2):                               # the low half * x^-64, twice
            self.seq(("movdqa", tmp, lo), ("pclmulqdq", tmp, x[1], XImm(0x10)),
                     ("pshufd", lo, lo, XImm(0x4E)), ("pxor", lo, tmp))
        self.seq(("pxor", lo, hi), ("movdqa", x[0], lo), ("add", rdx, XImm(16 * g)),
                 ("sub", rcx, XImm(1)), ("jne", top.name), ("movdqu", Mem(rdi, size=128), x[0]), done)

    def mem(self, base: VReg, off: Imm, scratch) -> Mem:
        if not _fits32(off.value):
            raise ValueError("memory offset does not fit 32 bits")
        return Mem(self.use(base, scratch), disp=off.value)

    def alu(self, op: str, d: VReg, a: VReg, b) -> None:
        r = self.defreg(d, S1)
        if not isinstance(b, Imm) and self.where(b) == r and r != self.where(a):
            # d is b's register: compute in scratch so b is read before it is overwritten
            r = S1
        self.move(r, self.where(a))
        if isinstance(b, Imm) and _fits32(b.value):
            if op == "mul":
                self.emit("imul", r, r, XImm(b.value))
            else:
                self.emit(ALU[op], r, XImm(b.value))
        else:
            src = self.imm_or_reg(b, S2) if isinstance(b, Imm) else self.where(b)
            if isinstance(src, Mem):
                self.emit("mov", S2, src)
                src = S2
            self.emit("imul" if op == "mul" else ALU[op], r, src)
        self.commit(d, r)

    def shift(self, op: str, d: VReg, a: VReg, b) -> None:
        if isinstance(b, Imm):
            r = self.defreg(d, S1)
            self.move(r, self.where(a))
            self.emit(SHIFT[op], r, XImm(b.value & 63))
            self.commit(d, r)
            return
        rcx = REGS["rcx"]
        self.move(S1, self.where(a))
        self.emit("mov", S2, rcx)
        self.move(rcx, self.where(b))
        self.emit(SHIFT[op], S1, REGS["cl"])
        self.emit("mov", rcx, S2)
        self.commit(d, S1)

    def falu(self, mnem: str, d: VReg, a: VReg, b) -> None:
        self.op3(mnem, d, a, *self.fsrc(b))

    # -- terminators (SelectorBase.term) -------------------------------------------------------
    def compare(self, a: VReg, b) -> None:
        self.emit("cmp", self.use(a, S1), self.imm_or_reg(b, S2))

    def jcc(self, cc: str) -> str:
        return "j" + CC[cc]


RULES = Selector.RULES = rules(Selector)


def select(fn: Function, alloc: Allocation, vex: bool = False) -> list:
    return Selector(fn, alloc, vex).select()


def entry_stub() -> list:
    """`_start`: pass the initial stack pointer to rt_start, exit_group with its result."""
    return [MI("mov", (REGS["rdi"], RSP)),
            MI("and", (RSP, XImm(-16))),
            MI("call", (), target="rt_start"),
            MI("mov", (REGS["rdi"], S1)),
            MI("mov", (S1, XImm(abi.SYSCALLS["exit_group"]))),
            MI("syscall", ()),
            MI("ud2", ())]
