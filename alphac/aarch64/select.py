"""AArch64 instruction selection: LIR + register allocation -> machine instructions.

Requires: a checked `lir.Function` and its `Allocation` (alphac.lower.regalloc with
`abi.REGFILE`). Guarantees: one `assemble.MI` list per function that implements the LIR exactly:
every binary64 operation is one `fadd fsub fmul fdiv fsqrt fneg` on its operands in their written
order (never swapped, never fused: no fmadd/fmsub/fnmadd/fnmsub is ever emitted), `fgt` is
`fcmp` + `cset gt` and `fge` `fcmp` + `cset ge` (false when unordered), spilled values are reloaded through the scratch
registers of `abi`, calls and system calls move their arguments by `parallel_moves`, and sp stays
16-byte aligned at every instruction.

The frame, from the caller's sp down: x29/x30 (x29 then points here), the used callee-saved
registers in pairs (integers, then binary64), then the spill slots (slot k at [sp + 8k]),
rounded up to 16 bytes. Immediates are one `orr` when they are a bitmask immediate, otherwise
movz/movn + movk; memory offsets use the scaled unsigned form, else ldur/stur, else an index
register; global addresses are adrp + add with `adrp`/`add_lo12` relocations.
"""
from __future__ import annotations

from alphac.aarch64 import abi
from alphac.aarch64.encode import Imm as AImm
from alphac.aarch64.encode import Label as ALabel
from alphac.aarch64.encode import Mem, MemReg, is_bitmask_imm
from alphac.aarch64.isa import COND, D, REGS, V, W, X, sp, xzr
from alphac.formats import PV_GROUP
from alphac.lower.assemble import MI, Label
from alphac.lower.lir import Function, Imm, VReg
from alphac.lower.regalloc import Allocation, parallel_moves
from alphac.lower.selector import SelectorBase, rules

CC = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
      "ult": "lo", "ule": "ls", "ugt": "hi", "uge": "hs"}
ALU = {"add": "add", "sub": "sub", "and": "and", "or": "orr", "xor": "eor", "mul": "mul"}
QALU = {"vqadd": "add.2d", "vqsub": "sub", "vqand": "and", "vqor": "orr", "vqxor": "eor",
        "vqshl": "shl", "vqshr": "ushr"}                # f64x2's lanes as integers (NEON)
VALU = {"vadd": "fadd", "vsub": "fsub", "vmul": "fmul", "vdiv": "fdiv", "vsqrt": "fsqrt", "vneg": "fneg"}
FALU = {"fadd": "fadd", "fsub": "fsub", "fmul": "fmul", "fdiv": "fdiv", "fsqrt": "fsqrt", "fneg": "fneg"}
SHIFT = {"shl": "lsl", "shr": "lsr", "sar": "asr"}
# op -> (scaled mnemonic, unscaled mnemonic, access size in bytes)
LDST = {"load8": ("ldrb", "ldurb", 1), "load16": ("ldrh", "ldurh", 2), "load32": ("ldr", "ldur", 4),
        "load64": ("ldr", "ldur", 8), "fload": ("ldr", "ldur", 8),
        "store8": ("strb", "sturb", 1), "store16": ("strh", "sturh", 2), "store32": ("str", "stur", 4),
        "store64": ("str", "stur", 8), "fstore": ("str", "stur", 8), "prefetch": ("prfm", "prfum", 8)}
S1, S2, S3 = (REGS[r] for r in abi.SCRATCH)        # x16, x17, x15
F1, F2 = (REGS[r] for r in abi.FSCRATCH)           # d31, d30
X29, X30 = REGS["x29"], REGS["x30"]
M64 = (1 << 64) - 1
MAX_SLOTS = 4095                                   # [sp + 8k] in the scaled imm12 form


def _aimm(v: int):
    """`v` as an add/sub immediate (imm12, optionally lsl #12), or None."""
    if 0 <= v < 4096:
        return AImm(v)
    if v & 0xFFF == 0 and 0 <= v >> 12 < 4096:
        return AImm(v >> 12, 12)
    return None


class Selector(SelectorBase):
    REGS, INT_ARGS, FLOAT_ARGS = REGS, abi.INT_ARGS, abi.FLOAT_ARGS
    INT_RET, FLOAT_RET = abi.INT_RET, abi.FLOAT_RET
    ISA, JUMP, CALL, TRAP = "aarch64", "b", "bl", ("brk", AImm(1))

    def __init__(self, fn: Function, alloc: Allocation):
        super().__init__(fn, alloc)
        if alloc.nslots > MAX_SLOTS:
            raise ValueError(f"{fn.name}: {alloc.nslots} spill slots exceed the AArch64 frame limit")
        self.frame = (8 * alloc.nslots + 15) & ~15
        saved = alloc.used_callee_saved
        pairs = []
        for cls in "xd":
            regs = [REGS[r] for r in saved if r[0] == cls]
            pairs += [regs[i:i + 2] for i in range(0, len(regs), 2)]
        self.saved = pairs

    # -- locations ---------------------------------------------------------------------------
    def where(self, v: VReg):
        kind, x = self.alloc.of(v)
        return REGS[x] if kind == "reg" else Mem(sp, 8 * x)

    def use(self, v: VReg, scratch):
        """A register holding v: its own, or `scratch` after a reload."""
        loc = self.where(v)
        if isinstance(loc, Mem):
            self.emit("ldr", scratch, loc)
            return scratch
        return loc

    def commit(self, v: VReg, reg) -> None:
        """After computing v into `reg`, move it to v's location."""
        self.move(self.where(v), reg)

    def move(self, dst, src) -> None:
        """One location-to-location move (registers or stack slots, same class)."""
        if dst == src:
            return
        if isinstance(dst, Mem) and isinstance(src, Mem):
            self.emit("ldr", S2, src)                # slot to slot: the 8 bytes, through x17
            src = S2
        if isinstance(src, Mem):
            self.emit("ldr", dst, src)
        elif isinstance(dst, Mem):
            self.emit("str", src, dst)
        else:
            self.emit("fmov" if dst.cls == "d" else "mov", dst, src)

    def moves(self, pairs: list[tuple[object, object]]) -> None:
        def cls(d, s):
            return "d" if "d" in (getattr(d, "cls", ""), getattr(s, "cls", "")) else "x"
        for c, scratch in (("x", S3), ("d", F1)):
            for d, s in parallel_moves([(d, s) for d, s in pairs if cls(d, s) == c], scratch):
                self.move(d, s)

    def li(self, r, value: int) -> None:
        """r = value (mod 2**64): one orr for a bitmask immediate, else movz/movn + movk."""
        v = value & M64
        if v == 0:
            self.emit("mov", r, xzr)
            return
        if is_bitmask_imm(v):
            self.emit("orr", r, xzr, AImm(v))
            return
        chunks = [(v >> s) & 0xFFFF for s in (0, 16, 32, 48)]
        fill = 0xFFFF if chunks.count(0xFFFF) > chunks.count(0) else 0
        first = next((i for i, c in enumerate(chunks) if c != fill), 0)
        if fill:
            self.emit("movn", r, AImm(~chunks[first] & 0xFFFF, 16 * first))
        else:
            self.emit("movz", r, AImm(chunks[first], 16 * first))
        for i, c in enumerate(chunks):
            if i != first and c != fill:
                self.emit("movk", r, AImm(c, 16 * i))

    # -- functions ---------------------------------------------------------------------------
    def prologue(self) -> None:
        self.emit("stp", X29, X30, Mem(sp, -16, "pre"))
        self.emit("mov", X29, sp)
        for pair in self.saved:
            self.emit("stp" if len(pair) == 2 else "str", *pair, Mem(sp, -16, "pre"))
        self.sp_adjust("sub", self.frame)

    def sp_adjust(self, mnemonic: str, n: int) -> None:
        if n >> 12:
            self.emit(mnemonic, sp, sp, AImm(n >> 12, 12))
        if n & 0xFFF:
            self.emit(mnemonic, sp, sp, AImm(n & 0xFFF))

    def arg_moves(self, regs: list[VReg], incoming: bool) -> None:
        fixed = self.arg_regs(regs)
        self.moves([(self.where(v), r) if incoming else (r, self.where(v)) for v, r in zip(regs, fixed)])

    def epilogue(self) -> None:
        self.sp_adjust("add", self.frame)
        for pair in reversed(self.saved):
            self.emit("ldp" if len(pair) == 2 else "ldr", *pair, Mem(sp, 16, "post"))
        self.emit("ldp", X29, X30, Mem(sp, 16, "post"))
        self.emit("ret")

    # -- instructions: one rule per LIR operation (RULES, below the class) ---------------------
    def iconst(self, op, d, a) -> None:
        r = self.defreg(d, S1)
        self.li(r, a[0].value)
        self.commit(d, r)

    def fconst(self, op, d, a) -> None:
        r, src = self.defreg(d, F1), xzr                 # +0.0 is fmov from xzr
        if a[0].value & M64:
            self.li(S2, a[0].value)
            src = S2
        self.emit("fmov", r, src)
        self.commit(d, r)

    def addr(self, op, d, a) -> None:
        if a[0].offset:
            raise ValueError(f"aarch64 selector: address {a[0]!r} with an offset")
        r = self.defreg(d, S1)
        self.emit("adrp", r, ALabel(0), sym=a[0].name)
        self.emit("add", r, r, AImm(0), sym=a[0].name)
        self.commit(d, r)

    def int_shift(self, op, d, a) -> None:
        x, r = self.use(a[0], S1), self.defreg(d, S1)
        if isinstance(a[1], Imm):
            self.emit(SHIFT[op], r, x, AImm(a[1].value & 63))
        else:
            self.emit(SHIFT[op] + "v", r, x, self.use(a[1], S2))
        self.commit(d, r)

    def divide(self, op, d, a) -> None:
        x, y, r = self.use(a[0], S1), self.use(a[1], S2), self.defreg(d, S1)
        div = op[0] + "div"
        if op.endswith("div"):
            self.emit(div, r, x, y)
        else:
            self.emit(div, S3, x, y)
            self.emit("msub", r, S3, y, x)           # r = x - (x / y) * y
        self.commit(d, r)

    def umulh(self, op, d, a) -> None:
        x, y, r = self.use(a[0], S1), self.use(a[1], S2), self.defreg(d, S1)
        self.emit("umulh", r, x, y)
        self.commit(d, r)

    def int_unary(self, op, d, a) -> None:
        x, r = self.use(a[0], S1), self.defreg(d, S1)
        self.emit("neg" if op == "neg" else "mvn", r, x)
        self.commit(d, r)

    def rotate_swap(self, op, d, a) -> None:
        x, r = self.use(a[0], S1), self.defreg(d, S1)
        if op == "ror32":                            # w registers: the result zero-extends
            self.emit("ror", W[r.num], W[x.num], AImm(a[1].value))
        elif op == "ror64":
            self.emit("ror", r, x, AImm(a[1].value))
        else:
            self.emit("rev", W[r.num], W[x.num])
        self.commit(d, r)

    def setcc(self, op, d, a) -> None:
        self.compare(a[1], a[2])
        r = self.defreg(d, S1)
        self.emit("cset", r, COND[CC[a[0]]])
        self.commit(d, r)

    def float_alu(self, op, d, a) -> None:
        ops = [self.use(v, s) for v, s in zip(a, (F1, F2))]
        r = self.defreg(d, F1)
        self.emit(FALU[op], r, *ops)
        self.commit(d, r)

    fsqrt = fneg = float_alu                         # one instruction each, like the binary ones

    def fgt(self, op, d, a) -> None:
        self.emit("fcmp", self.use(a[0], F1), self.use(a[1], F2))
        r = self.defreg(d, S1)
        self.emit("cset", r, COND[op[1:]])           # gt: Z = 0 and N = V; ge: N = V; both
        # false when unordered (NZCV = 0011)
        self.commit(d, r)

    def bits(self, op, d, a) -> None:
        x = self.use(a[0], F1 if op == "f2bits" else S1)
        r = self.defreg(d, S1 if op == "f2bits" else F1)
        self.emit("scvtf" if op == "i2f" else "fmov", r, x)
        self.commit(d, r)

    i2f = bits

    def load(self, op, d, a) -> None:
        mnemonic, mem = self.mem(op, a[0], a[1])
        r = self.defreg(d, F1 if op == "fload" else S1)
        self.emit(mnemonic, W[r.num] if op in ("load8", "load16", "load32") else r, mem)
        self.commit(d, r)

    def store(self, op, d, a) -> None:
        mnemonic, mem = self.mem(op, a[0], a[1])
        v = self.use(a[2], F1 if op == "fstore" else S1)
        self.emit(mnemonic, W[v.num] if op in ("store8", "store16", "store32") else v, mem)

    def float_alu_mem(self, op, d, a) -> None:
        """d = a op (the binary64 in memory): the load into d30, then the operation (alphac.lower.
        fold does not fold loads for AArch64; the rule keeps every LIR operation selectable)."""
        if op.endswith("x"):
            self.emit("ldr", F2, MemReg(self.use(a[1], S1), self.use(a[2], S2), shift=True))
        else:
            mnemonic, mem = self.mem("fload", a[1], a[2])
            self.emit(mnemonic, F2, mem)
        x = self.use(a[0], F1)
        r = self.defreg(d, F1)
        self.emit(FALU[op[:4]], r, x, F2)
        self.commit(d, r)

    def load_indexed(self, op, d, a) -> None:
        mem = MemReg(self.use(a[0], S1), self.use(a[1], S2), shift=True)
        r = self.defreg(d, F1)
        self.emit("ldr", r, mem)
        self.commit(d, r)

    def store_indexed(self, op, d, a) -> None:
        mem = MemReg(self.use(a[0], S1), self.use(a[1], S2), shift=True)
        self.emit("str", self.use(a[2], F1), mem)

    # -- f64x2: NEON .2d, each lane the scalar instruction ---------------------------------------
    def vuse(self, v: VReg, scratch):
        """The V register holding f64x2 v: its own, or scratch's after a reload of its 16 bytes."""
        loc = self.where(v)
        if isinstance(loc, Mem):
            self.emit("ldr", V[scratch.num], loc)
            return V[scratch.num]
        return V[loc.num]

    def vcommit(self, d: VReg, r) -> None:
        loc = self.where(d)
        if isinstance(loc, Mem):
            self.emit("str", r, loc)
        elif loc.num != r.num:
            self.emit("mov", V[loc.num], r)

    def vmem(self, op, a):
        """[address] of a vload/vstore: base + offset, or base + 8 * index, in one register."""
        if op in ("vloadx", "vstorex"):
            base, index = self.use(a[0], S1), self.use(a[1], S2)
            self.emit("lsl", S3, index, AImm(3))
            self.emit("add", S3, base, S3)
            return Mem(S3, 0)
        base, off = self.use(a[0], S2), a[1].value
        if off % 16 == 0 and 0 <= off // 16 < 4096:
            return Mem(base, off)
        self.li(S3, off)
        self.emit("add", S3, base, S3)
        return Mem(S3, 0)

    def vec_load(self, op, d, a) -> None:
        mem = self.vmem(op, a)
        r = V[self.defreg(d, F1).num]
        self.emit("ldr", r, mem)
        self.vcommit(d, r)

    def vec_store(self, op, d, a) -> None:
        mem = self.vmem(op, a)
        self.emit("str", self.vuse(a[2], F1), mem)

    def vec_alu(self, op, d, a) -> None:
        x, y = self.vuse(a[0], F1), self.vuse(a[1], F2)
        r = V[self.defreg(d, F1).num]
        self.emit(VALU[op], r, x, y)
        self.vcommit(d, r)

    def vec_unary(self, op, d, a) -> None:
        x = self.vuse(a[0], F1)
        r = V[self.defreg(d, F1).num]
        self.emit(VALU[op], r, x)
        self.vcommit(d, r)

    def vec_copy(self, op, d, a) -> None:
        self.vcommit(d, self.vuse(a[0], F1))

    def vec_splat(self, op, d, a) -> None:
        x = self.use(a[0], F2)
        r = V[self.defreg(d, F1).num]
        self.emit("dup", r, V[x.num])
        self.vcommit(d, r)

    def vec_pack(self, op, d, a) -> None:
        x, y = self.use(a[0], F1), self.use(a[1], F2)
        r = V[self.defreg(d, F1).num]
        if r.num == y.num and x.num != y.num:
            r = V[F1.num]                        # y is read after lane 0 is written: not in place
        if r.num != x.num:
            self.emit("mov", r, V[x.num])
        self.emit("ins", r, V[y.num])
        self.vcommit(d, r)

    def vec_lane(self, op, d, a) -> None:
        x = self.vuse(a[0], F2)
        r = self.defreg(d, F1)
        if a[1].value:
            self.emit("dup", r, x)
        elif r.num != x.num:
            self.emit("fmov", r, D[x.num])
        self.commit(d, r)

    def vec_int(self, op, d, a) -> None:
        """d = a op b (or a shifted by the constant b) on the lanes' 64 bits as integers: one
        NEON instruction (a logical shift by 0: a copy)."""
        x = self.vuse(a[0], F1)
        r = V[self.defreg(d, F1).num]
        if op in ("vqshl", "vqshr"):
            if a[1].value or op == "vqshl":
                self.emit(QALU[op], r, x, AImm(a[1].value))
            elif r != x:
                self.emit("mov", r, x)
        else:
            self.emit(QALU[op], r, x, self.vuse(a[1], F2))
        self.vcommit(d, r)

    def vec_gather(self, op, d, a) -> None:
        """Lane k of d = the binary64 at base + 8 * (lane k of the index): both indices to x16
        and x15 first, then lane 0 by ldr (clearing lane 1) and lane 1 by ld1 (NEON has no
        gather)."""
        idx = self.vuse(a[1], F2)
        self.emit("fmov", S1, D[idx.num])
        self.emit("mov", S3, idx)                            # umov x15, v.d[1]
        base, r = self.use(a[0], S2), V[self.defreg(d, F1).num]
        self.emit("ldr", D[r.num], MemReg(base, S1, shift=True))
        self.emit("lsl", S3, S3, AImm(3))
        self.emit("add", S3, base, S3)
        self.emit("ld1", r, Mem(S3, 0))
        self.vcommit(d, r)

    def syscall(self, op, d, a) -> None:
        self.moves([(REGS[r], self.where(v)) for r, v in zip(abi.SYSCALL_REGS, a)])
        self.emit("svc", AImm(0))
        self.commit(d, REGS[abi.INT_RET])

    def fence(self, op, d, a) -> None:
        self.emit("dmb")

    def prefetch(self, op, d, a) -> None:
        self.emit(*self.mem("prefetch", a[0], a[1]))

    def hwcap_bit(self, d, a, bit: int) -> None:
        """d = bit `bit` of AT_HWCAP (a[0])."""
        x, r = self.use(a[0], S1), self.defreg(d, S1)
        self.emit("lsr", S2, x, AImm(bit))
        self.emit("and", r, S2, AImm(1))
        self.commit(d, r)

    def cpu_has_sha256(self, op, d, a) -> None:
        self.hwcap_bit(d, a, 6)                          # HWCAP_SHA2

    def cpu_has_avx2(self, op, d, a) -> None:
        """0: no AArch64 CPU runs x86-64's AVX2 or AVX-512 (the f64x4 and f64x8 ops, lir.WIDE,
        have no rule here)."""
        self.iconst("iconst", d, (Imm(0),))
    cpu_has_avx512 = cpu_has_avx2

    def sha256_hw(self, op, d, a) -> None:
        """The SHA2 extension, four rounds at a time: ABCD and EFGH in v0 and v1, the message
        words in v4-v7, K + W in v16 (v8-v15, whose low halves calls keep, are left alone)."""
        self.arg_moves(list(a), incoming=False)          # x0 state, x1 p, x2 blocks, x3 k
        v, top, done = V, f".sha{len(self.out)}", f".shadone{len(self.out)}"
        self.emit("cmp", X[2], AImm(0))
        self.emit("b.eq", target=done)
        self.emit("ldp", v[0], v[1], Mem(X[0]))
        self.out.append(Label(top))
        for ins in (("ldp", v[4], v[5], Mem(X[1])), ("ldp", v[6], v[7], Mem(X[1], 32)),
                    *(("rev32", r, r) for r in v[4:8]), ("mov", v[2], v[0]), ("mov", v[3], v[1])):
            self.emit(*ins)
        for g in range(16):                                 # rounds 4g .. 4g + 3
            m0, m1, m2, m3 = (v[4 + (g + j) % 4] for j in range(4))
            for ins in (("ldr", v[16], Mem(X[3], 16 * g)), ("add", v[16], v[16], m0),
                        ("sha256su0", m0, m1), ("mov", v[17], v[0]), ("sha256h", v[0], v[1], v[16]),
                        ("sha256h2", v[1], v[17], v[16]), ("sha256su1", m0, m2, m3)):
                if g < 12 or not ins[0].startswith("sha256su"):  # m0: the words of round 4g + 16
                    self.emit(*ins)
        for ins in (("add", v[0], v[0], v[2]), ("add", v[1], v[1], v[3]), ("add", X[1], X[1], AImm(64)),
                    ("sub", X[2], X[2], AImm(1)), ("cmp", X[2], AImm(0))):
            self.emit(*ins)
        self.emit("b.ne", target=top)
        self.emit("stp", v[0], v[1], Mem(X[0]))
        self.out.append(Label(done))

    def cpu_has_clmul(self, op, d, a) -> None:
        self.hwcap_bit(d, a, 4)                          # HWCAP_PMULL

    def polyval_hw(self, op, d, a) -> None:
        """PMULL, PV_GROUP (8) blocks a reduction, as x86-64's: the state in v0, H^1 .. H^8 in
        v16-v23 and with their halves swapped in v24-v31, p's constant 0xC2 << 56 in v6's low
        half, zero in v7, a block in v4; the products' low, high and middle halves summed in v1,
        v2, v3 (v8-v15, whose low halves calls keep, are left alone, as in sha256_hw)."""
        self.arg_moves(list(a), incoming=False)          # x0 s, x1 key, x2 p, x3 groups
        v, g, top, done = V, PV_GROUP, f".pv{len(self.out)}", f".pvdone{len(self.out)}"
        lo, hi, mid, blk, tmp = v[1], v[2], v[3], v[4], v[5]
        self.emit("cmp", X[3], AImm(0))
        self.emit("b.eq", target=done)
        for ins in (("ldr", v[0], Mem(X[0])), ("ldr", v[6], Mem(X[1], 16 * g)),
                    ("ext", v[6], v[6], v[6], AImm(8)), ("eor", v[7], v[7], v[7]),
                    *(i for k in range(0, g, 2) for i in (
                        ("ldp", v[16 + k], v[17 + k], Mem(X[1], 16 * k)),
                        ("ext", v[24 + k], v[16 + k], v[16 + k], AImm(8)),
                        ("ext", v[25 + k], v[17 + k], v[17 + k], AImm(8))))):
            self.emit(*ins)
        self.out.append(Label(top))
        for k in range(g):                               # block k + 1 times H^(g - k)
            self.emit("ldr", blk, Mem(X[2], 16 * k))
            if k == 0:
                self.emit("eor", blk, blk, v[0])
            h, hs = v[15 + g - k], v[23 + g - k]
            for mn, f, acc in (("pmull", h, lo), ("pmull2", h, hi), ("pmull", hs, mid), ("pmull2", hs, mid)):
                if k == 0 and (acc != mid or mn == "pmull"):
                    self.emit(mn, acc, blk, f)
                else:
                    self.emit(mn, tmp, blk, f)
                    self.emit("eor", acc, acc, tmp)
        for ins in (("ext", tmp, v[7], mid, AImm(8)), ("eor", lo, lo, tmp),
                    ("ext", tmp, mid, v[7], AImm(8)), ("eor", hi, hi, tmp),
                    *(i for _ in range(2) for i in (("pmull", tmp, lo, v[6]),    # the low half * x^-64
                                                    ("ext", lo, lo, lo, AImm(8)), ("eor", lo, lo, tmp))),
                    ("eor", v[0], lo, hi), ("add", X[2], X[2], AImm(16 * g)),
                    ("sub", X[3], X[3], AImm(1)), ("cmp", X[3], AImm(0))):
            self.emit(*ins)
        self.emit("b.ne", target=top)
        self.emit("str", v[0], Mem(X[0]))
        self.out.append(Label(done))

    def mem(self, op: str, base: VReg, off: Imm):
        """(mnemonic, address operand) for [base + off]; the base may be reloaded into x17."""
        scaled, unscaled, size = LDST[op]
        b, v = self.use(base, S2), off.value
        if v % size == 0 and 0 <= v // size < 4096:
            return scaled, Mem(b, v)
        if -256 <= v < 256:
            return unscaled, Mem(b, v)
        self.li(S3, v)
        return scaled, MemReg(b, S3)

    def alu(self, op: str, d: VReg, a: VReg, b) -> None:
        x, r = self.use(a, S1), self.defreg(d, S1)
        if isinstance(b, Imm):
            v = b.value
            if op in ("add", "sub") and (_aimm(v) or _aimm(-v)):
                if _aimm(v) is None:                   # add -k is sub k, and sub -k is add k
                    op, v = {"add": "sub", "sub": "add"}[op], -v
                self.emit(op, r, x, _aimm(v))
                self.commit(d, r)
                return
            if op in ("and", "or", "xor") and is_bitmask_imm(v):
                self.emit(ALU[op], r, x, AImm(v & M64))
                self.commit(d, r)
                return
            self.li(S2, v)
            y = S2
        else:
            y = self.use(b, S2)
        self.emit(ALU[op], r, x, y)
        self.commit(d, r)

    def compare(self, a: VReg, b) -> None:
        x = self.use(a, S1)
        if isinstance(b, Imm) and (_aimm(b.value) or _aimm(-b.value)):
            if _aimm(b.value):
                self.emit("cmp", x, _aimm(b.value))
            else:
                self.emit("cmn", x, _aimm(-b.value))   # same flags as cmp x, #-k (k != 0)
            return
        if isinstance(b, Imm):
            self.li(S2, b.value)
            self.emit("cmp", x, S2)
        else:
            self.emit("cmp", x, self.use(b, S2))

    def jcc(self, cc: str) -> str:
        return "b." + CC[cc]


RULES = Selector.RULES = rules(Selector)


def select(fn: Function, alloc: Allocation) -> list:
    return Selector(fn, alloc).select()


def entry_stub() -> list:
    """`_start`: pass the initial stack pointer to rt_start, exit_group with its result."""
    return [MI("mov", (REGS["x0"], sp)),
            MI("bl", (), target="rt_start"),
            MI("movz", (REGS["x8"], AImm(abi.SYSCALLS["exit_group"]))),
            MI("svc", (AImm(0),)),
            MI("brk", (AImm(1),))]
