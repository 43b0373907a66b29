"""Runtime language -> LIR: type checking and lowering of `alphac.lower.rt` syntax trees.

Requires: items from one or more parsed runtime sources (the runtime, the target's prelude of
system-call numbers, the code generated for a learner). Guarantees: a checked `lir.Program`, or
an `RtError` naming the function and the problem.

Lowering is direct: each local is one virtual register (assignments redefine it; the register
allocator computes liveness), each expression yields a register or an immediate, conditions
become compare-and-branch terminators with `&&`, `||` and `!` short-circuited, and integer
constant expressions are folded. Loads and stores fold `p + CONST` into the offset.
"""
from __future__ import annotations

import struct

from alphac.lower import lir
from alphac.lower.lir import Block, Function, Global, Imm, Inst, Program, Sym, VReg
from alphac.lower.memo import IdMemo
from alphac.lower.rt import BUILTINS, RtError, item_names
from alphac.lower.rt_bounds import check_function
from alphac.refusals import REFUSALS

ELEM = {"u8": 1, "u16": 2, "u32": 4, "i64": 8, "f64": 8}
INT_BIN = {"+": "add", "-": "sub", "*": "mul", "&": "and", "|": "or", "^": "xor",
           "<<": "shl", ">>": "shr", "/": "sdiv", "%": "srem"}
FLOAT_BIN = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}
CMP = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
CLS = {"i64": "i", "f64": "f", "f64x2": "v", "f64x4": "w", "f64x8": "z"}  # a value's type -> its class
TYPE_OF = {c: t for t, c in CLS.items()}
MOVE = {"i": "mov", "f": "fmov", "v": "vmov", "w": "wmov", "z": "zmov"}
VECTOR = ("loadv", "storev", "splat", "lane", "sqrtv", "pack")
WIDE = ("loadw", "storew", "splatw", "sqrtw", "wide_end", "gatherw")   # f64x4: with CPU_AVX2 = 1
WIDER = ("loadz", "storez", "splatz", "sqrtz", "gatherz")        # f64x8: with CPU_AVX512 = 1
QOPS = ("qadd", "qsub", "qand", "qor", "qxor", "qshl", "qshr")    # their lanes' bits as integers
LOADS = {"load8": "load8", "load16": "load16", "load32": "load32", "load64": "load64", "loadf": "fload"}
STORES = {"store8": "store8", "store16": "store16", "store32": "store32", "store64": "store64",
          "storef": "fstore"}
MASK64 = (1 << 64) - 1


def _wrap(v: int) -> int:
    v &= MASK64
    return v - (1 << 64) if v >> 63 else v


class Module:
    """All items of one program: constants, globals, function signatures."""

    def __init__(self, items: list[tuple], blobs: dict[str, bytes] | None = None):
        self.blobs = blobs or {}
        self.consts: dict[str, tuple] = {}
        self.const_values: dict[str, int] = {}
        self.globals: dict[str, Global] = {}
        self.fns: dict[str, tuple] = {}
        self.strings: dict[bytes, str] = {}
        self.string_log: list[tuple[bytes, str]] | None = None    # string() calls, when recording
        self.order: list[tuple] = []
        for it in items:
            if it[0] in ("use", "extern"):               # declarations: alphac.lower.rt.check_modules
                continue
            kind, name = it[0], it[1]
            if name in self.consts or name in self.globals or name in self.fns:
                raise RtError(f"`{name}` is defined twice")
            if name in BUILTINS:
                raise RtError(f"`{name}` is a builtin of the runtime language")
            if kind == "const":
                self.consts[name] = it[2]
            elif kind == "fn":
                self.fns[name] = it
            else:
                self.order.append(it)
                self.globals[name] = None  # placeholder, filled below
        for it in self.order:
            self.globals[it[1]] = self.make_global(it)

    def const(self, name: str, busy: frozenset = frozenset()) -> int:
        if name in self.const_values:
            return self.const_values[name]
        if name in busy:
            raise RtError(f"constant `{name}` depends on itself")
        v = self.fold(self.consts[name], busy | {name})
        if v is None:
            raise RtError(f"constant `{name}` is not an integer constant expression")
        self.const_values[name] = v
        return v

    def fold(self, e: tuple, busy: frozenset = frozenset()) -> int | None:
        k = e[0]
        if k == "int":
            return _wrap(e[1])
        if k == "name" and e[1] in self.consts and self.consts[e[1]][0] != "str":
            return self.const(e[1], busy)
        if k == "call" and e[1] == "sizeof" and len(e[2]) == 1 and e[2][0][0] == "name" \
                and self.globals.get(e[2][0][1]) is not None:
            return self.globals[e[2][0][1]].size          # a global's size in bytes (rt_bounds)
        if k == "un" and e[1] in ("-", "~"):
            a = self.fold(e[2], busy)
            return None if a is None else _wrap(-a if e[1] == "-" else ~a)
        if k == "bin" and e[1] in ("+", "-", "*", "<<", ">>", "|", "&"):
            a, b = self.fold(e[2], busy), self.fold(e[3], busy)
            if a is None or b is None:
                return None
            return _wrap({"+": a + b, "-": a - b, "*": a * b, "<<": a << (b & 63),
                          ">>": (a & MASK64) >> (b & 63), "|": a | b, "&": a & b}[e[1]])
        if k == "call" and e[1] == "udiv" and len(e[2]) == 2:
            a, b = self.fold(e[2][0], busy), self.fold(e[2][1], busy)
            if a is None or not b:
                return None
            return _wrap((a & MASK64) // (b & MASK64))
        return None

    def make_global(self, it: tuple) -> Global:
        kind, name, elem = it[0], it[1], it[2]
        if elem not in ELEM:
            raise RtError(f"global `{name}`: unknown element type `{elem}`")
        width = ELEM[elem]
        count = self.fold(it[3]) if it[3] is not None else None
        section = {"global": ".bss", "var": ".data", "data": ".rodata"}[kind]
        init = b""
        if kind != "global":
            values = it[4]
            if values == "extern":
                if name not in self.blobs:
                    raise RtError(f"global `{name}` is extern but no bytes were supplied")
                init = self.blobs[name]
            elif isinstance(values, bytes):
                init = values
            else:
                parts = []
                for v in values:
                    if elem == "f64":
                        parts.append(struct.pack("<d", self.float_const(v)))
                    else:
                        iv = self.fold(v)
                        if iv is None:
                            raise RtError(f"global `{name}`: initial values must be constants")
                        parts.append((iv & ((1 << (8 * width)) - 1)).to_bytes(width, "little"))
                init = b"".join(parts)
            if count is None:
                count = len(init) // width
            if len(init) > count * width:
                raise RtError(f"global `{name}`: {len(init) // width} values for {count} slots")
            init = init + bytes(count * width - len(init))
        if count is None:
            raise RtError(f"global `{name}` needs a size")
        size = count * width        # 64 bytes and up: on a cache line's start (an f64x8 splits none)
        return Global(name, section, size, init, 64 if size >= 64 else 16 if width >= 8 or size >= 16 else width)

    def float_const(self, e: tuple) -> float:
        if e[0] == "float":
            return e[1]
        if e[0] == "un" and e[1] == "-":
            return -self.float_const(e[2])
        if e[0] == "call" and e[1] == "bits2f":
            v = self.fold(e[2][0])
            if v is not None:
                return struct.unpack("<d", struct.pack("<Q", v & MASK64))[0]
        raise RtError(f"not a float constant: {e!r}")

    def string(self, value: bytes) -> str:
        if value not in self.strings:
            name = f".str{len(self.strings)}"
            self.strings[value] = name
            self.globals[name] = Global(name, ".rodata", len(value) + 1, value + b"\0", 1)
        if self.string_log is not None:
            self.string_log.append((value, self.strings[value]))
        return self.strings[value]


class FnLowerer:
    def __init__(self, mod: Module, item: tuple):
        _, name, params, ret, body, _ = item
        self.mod = mod
        self.body = body
        self.fn = Function(name, [], ret)
        self.scopes: list[dict[str, VReg]] = [{}]
        self.bound: dict[VReg, int] = {}    # how many live scope entries name each register
        self.loops: list[tuple[str, str]] = []
        self.nlabels = 0
        self.origin = 0
        self.full: dict[str, str] = {}       # refusal name -> its block (bounded_append)
        for p, t in params:
            if t not in ("i64", "f64"):
                raise RtError(f"{name}: parameter `{p}` has type {t}; use i64 or f64")
            v = self.fn.new("f" if t == "f64" else "i")
            self.fn.params.append(v)
            self.bind(p, v)
        self.cur = self.new_block("entry")

    # -- blocks ------------------------------------------------------------------------------
    def label(self, hint: str) -> str:
        self.nlabels += 1
        return f".{hint}{self.nlabels}"

    def new_block(self, label: str) -> Block:
        b = Block(label)
        self.fn.blocks.append(b)
        return b

    def emit(self, op: str, dst: VReg | None, *args) -> VReg | None:
        if self.cur.term is not None:                  # unreachable code after a jump
            self.cur = self.new_block(self.label("dead"))
        self.cur.insts.append(Inst(op, dst, tuple(args), self.origin))
        return dst

    def terminate(self, op: str, *args) -> None:
        if self.cur.term is None:
            self.cur.term = Inst(op, None, tuple(args), self.origin)

    def start(self, label: str) -> None:
        if self.cur.term is None:
            self.terminate("jmp", label)
        self.cur = self.new_block(label)

    # -- values ------------------------------------------------------------------------------
    def err(self, msg: str) -> RtError:
        return RtError(f"in fn {self.fn.name}: {msg}")

    def is_variable(self, v: VReg) -> bool:
        return self.bound.get(v, 0) > 0

    def bind(self, name: str, v: VReg) -> None:
        """name = v in the innermost scope (a variable: is_variable(v) while it is in scope)."""
        scope = self.scopes[-1]
        if name in scope:
            self.bound[scope[name]] -= 1
        scope[name] = v
        self.bound[v] = self.bound.get(v, 0) + 1

    def lookup(self, name: str) -> VReg | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def reg(self, v) -> VReg:
        """An operand as a register (immediates are materialized)."""
        if isinstance(v, Imm):
            return self.emit("iconst", self.fn.new("i"), v)
        return v

    def expr(self, e: tuple) -> tuple[VReg | Imm, str]:
        folded = self.mod.fold(e)
        if folded is not None:
            return Imm(folded), "i64"
        k = e[0]
        if k == "call" and e[1] == "bits2f" and len(e[2]) == 1 and self.mod.fold(e[2][0]) is not None:
            return self.emit("fconst", self.fn.new("f"), Imm(self.mod.fold(e[2][0]))), "f64"
        if k == "float":
            bits = struct.unpack("<Q", struct.pack("<d", e[1]))[0]
            return self.emit("fconst", self.fn.new("f"), Imm(_wrap(bits))), "f64"
        if k == "str":
            return self.emit("addr", self.fn.new("i"), Sym(self.mod.string(e[1]))), "i64"
        if k == "name":
            v = self.lookup(e[1])
            if v is not None:
                return v, TYPE_OF[v.cls]
            if self.mod.consts.get(e[1], ("",))[0] == "str":        # a string constant
                return self.expr(self.mod.consts[e[1]])
            if e[1] in self.mod.globals:
                return self.emit("addr", self.fn.new("i"), Sym(e[1])), "i64"
            raise self.err(f"unknown name `{e[1]}`")
        if k == "un":
            a, t = self.expr(e[2])
            if e[1] == "-":
                if t in ("f64", "f64x2", "f64x4", "f64x8"):
                    return self.emit({"f64": "fneg"}.get(t, CLS[t] + "neg"), self.fn.new(CLS[t]), a), t
                return self.emit("neg", self.fn.new("i"), self.reg(a)), t
            if t != "i64":
                raise self.err(f"`{e[1]}` needs an i64")
            if e[1] == "~":
                return self.emit("not", self.fn.new("i"), self.reg(a)), t
            return self.emit("setcc", self.fn.new("i"), "eq", self.reg(a), Imm(0)), t
        if k == "bin":
            op = e[1]
            if op in CMP or op in ("&&", "||"):
                return self.bool_value(e), "i64"
            a, ta = self.expr(e[2])
            b, tb = self.expr(e[3])
            if ta != tb:
                raise self.err(f"`{op}` of {ta} and {tb}")
            if ta in ("f64", "f64x2", "f64x4", "f64x8"):
                if op not in FLOAT_BIN:
                    raise self.err(f"`{op}` is not defined on {ta}")
                lop = FLOAT_BIN[op] if ta == "f64" else CLS[ta] + FLOAT_BIN[op][1:]
                return self.emit(lop, self.fn.new(CLS[ta]), a, b), ta
            lop = INT_BIN[op]
            if isinstance(a, Imm) and lop in ("add", "mul", "and", "or", "xor"):
                a, b = b, a                          # commutative: the immediate goes second
            if lop in ("add", "sub", "or", "xor", "shl", "shr", "sar") and b == Imm(0):
                return a, ta                         # x + 0 (a field at offset 0, say) is x
            if lop == "mul" and isinstance(b, Imm) and b.value > 0 and b.value & (b.value - 1) == 0:
                lop, b = "shl", Imm(b.value.bit_length() - 1)
            if lop in ("sdiv", "srem"):
                b = self.reg(b)
            return self.emit(lop, self.fn.new("i"), self.reg(a), b), ta
        if k == "call":
            return self.call(e[1], e[2])
        raise self.err(f"cannot lower {e!r}")

    def address(self, e: tuple) -> tuple[VReg, Imm]:
        if e[0] == "bin" and e[1] in ("+", "-"):
            off = self.mod.fold(e[3])
            if off is not None and -(1 << 31) <= off < (1 << 31):
                base, t = self.expr(e[2])
                if t == "i64":
                    return self.reg(base), Imm(off if e[1] == "+" else -off)
        base, t = self.expr(e)
        if t != "i64":
            raise self.err("an address must be i64")
        return self.reg(base), Imm(0)

    def vector_memory(self, cls: str, load: bool, args: list[tuple], typed, ty: str):
        """A load (cls+"load") or store (cls+"store") of a vector of type ty at args[0]; "x" ops
        where the address is base + index * 8."""
        ix = self.indexed(args[0])
        base, off = ix if ix is not None else self.address(args[0])
        x = "x" if ix else ""
        if load:
            return self.emit(f"{cls}load{x}", self.fn.new(cls), base, off), ty
        self.emit(f"{cls}store{x}", None, base, off, self.reg(typed(args[1], ty)))
        return None, None

    def vector(self, f: str, args: list[tuple], need, typed):
        """The f64x2 builtins: loadv(a), storev(a, v) (16 bytes at a, any alignment), splat(x),
        pack(x, y) ((x, y)), lane(v, K) (K = 0: the value at the lower address), sqrtv(v)."""
        need(2 if f in ("storev", "lane", "pack") else 1)
        if f in ("loadv", "storev"):
            return self.vector_memory("v", f == "loadv", args, typed, "f64x2")
        if f == "splat":
            return self.emit("vsplat", self.fn.new("v"), typed(args[0], "f64")), "f64x2"
        if f == "pack":
            a, b = typed(args[0], "f64"), typed(args[1], "f64")
            return self.emit("vpack", self.fn.new("v"), a, b), "f64x2"
        if f == "sqrtv":
            return self.emit("vsqrt", self.fn.new("v"), typed(args[0], "f64x2")), "f64x2"
        k = self.mod.fold(args[1])
        if k not in (0, 1):
            raise self.err("lane(v, K) needs K = 0 or 1")
        return self.emit("vlane", self.fn.new("f"), typed(args[0], "f64x2"), Imm(k)), "f64"

    def wide(self, f: str, args: list[tuple], need, typed):
        """The f64x4 builtins, where the target's prelude says CPU_AVX2 = 1 (x86_64-v3; its
        executables refuse `cpu-level` on a CPU without AVX2): loadw(a), storew(a, w) (32 bytes
        at a, any alignment; lane 0 at a), splatw(x), sqrtw(w), gatherw(a, v) (lane k: the
        binary64 at a + 8 v_k), wide_end() (no f64x4 is live: the SSE code after it runs without
        a transition)."""
        if "CPU_AVX2" not in self.mod.consts or self.mod.const("CPU_AVX2") != 1:
            raise self.err(f"`{f}` needs f64x4, which only the x86_64-v3 target has")
        need({"storew": 2, "wide_end": 0, "gatherw": 2}.get(f, 1))
        if f == "gatherw":                      # (x86_64-v4: AVX-512VL's form, its opmask)
            op = "wgatherk" if "CPU_AVX512" in self.mod.consts and self.mod.const("CPU_AVX512") == 1 else "wgather"
            base = self.reg(typed(args[0], "i64"))
            return self.emit(op, self.fn.new("w"), base, typed(args[1], "f64x4")), "f64x4"
        if f in ("loadw", "storew"):
            return self.vector_memory("w", f == "loadw", args, typed, "f64x4")
        if f == "splatw":
            return self.emit("wsplat", self.fn.new("w"), typed(args[0], "f64")), "f64x4"
        if f == "sqrtw":
            return self.emit("wsqrt", self.fn.new("w"), typed(args[0], "f64x4")), "f64x4"
        self.emit("wend", None)
        return None, None

    def wider(self, f: str, args: list[tuple], need, typed):
        """The f64x8 builtins, where the prelude says CPU_AVX512 = 1 (x86_64-v4, whose
        executables refuse `cpu-level` without AVX-512): loadz(a), storez(a, z) (64 bytes at a,
        any alignment; lane 0 at a), splatz(x), sqrtz(z), gatherz(a, v) (lane k: the binary64 at
        a + 8 v_k, v_k lane k's 64 bits as an integer); wide_end() ends them too."""
        if "CPU_AVX512" not in self.mod.consts or self.mod.const("CPU_AVX512") != 1:
            raise self.err(f"`{f}` needs f64x8, which only the x86_64-v4 target has")
        need(2 if f in ("storez", "gatherz") else 1)
        if f == "gatherz":
            base = self.reg(typed(args[0], "i64"))
            return self.emit("zgather", self.fn.new("z"), base, typed(args[1], "f64x8")), "f64x8"
        if f in ("loadz", "storez"):
            return self.vector_memory("z", f == "loadz", args, typed, "f64x8")
        if f == "splatz":
            return self.emit("zsplat", self.fn.new("z"), typed(args[0], "f64")), "f64x8"
        return self.emit("zsqrt", self.fn.new("z"), typed(args[0], "f64x8")), "f64x8"

    def neon(self, f: str) -> bool:
        """Whether the prelude says CPU_NEON = 1 (AArch64: the q builtins and gatherv on f64x2)."""
        if "CPU_NEON" not in self.mod.consts or self.mod.const("CPU_NEON") != 1:
            raise self.err(f"`{f}` on f64x2 needs NEON, which only the aarch64 target has")
        return True

    def gatherv(self, args: list[tuple], need, typed):
        """gatherv(a, v): lane k the binary64 at a + 8 v_k (v_k lane k's 64 bits), on NEON."""
        need(2)
        self.neon("gatherv")
        base = self.reg(typed(args[0], "i64"))
        return self.emit("vgather", self.fn.new("v"), base, typed(args[1], "f64x2")), "f64x2"

    def lanes_int(self, f: str, args: list[tuple], need):
        """qadd(a, b), qsub, qand, qor, qxor (each lane's 64 bits as integers, modulo 2^64) and
        qshl(a, K), qshr(a, K) (logical, K a constant 0..63), a and b all f64x2, f64x4 or f64x8."""
        need(2)
        a, t = self.expr(args[0])
        if t not in ("f64x2", "f64x4", "f64x8"):
            raise self.err(f"`{f}` wants f64x2, f64x4 or f64x8, given {t}")
        if f in ("qshl", "qshr"):
            k = self.mod.fold(args[1])
            if k is None or not 0 <= k < 64:
                raise self.err(f"`{f}(v, K)` needs a constant K in 0..63")
            b = Imm(k)
        else:
            b, tb = self.expr(args[1])
            if tb != t:
                raise self.err(f"`{f}` of {t} and {tb}")
        return self.emit(CLS[t] + f, self.fn.new(CLS[t]), a, b), t

    def indexed(self, e: tuple) -> tuple[VReg, VReg] | None:
        """`base + 8 * index` (or `base + index * 8`) with a computed index, as the two
        registers of an indexed binary64 access (both lowered); None, lowering nothing, for any
        other address."""
        if e[0] == "bin" and e[1] == "+" and e[3][0] == "bin" and e[3][1] == "*":
            m = e[3]
            index = m[3] if self.mod.fold(m[2]) == 8 else m[2] if self.mod.fold(m[3]) == 8 else None
            if index is not None and self.mod.fold(index) is None:
                base, tb = self.expr(e[2])
                idx, ti = self.expr(index)
                if tb != "i64" or ti != "i64":
                    raise self.err("an address must be i64")
                return self.reg(base), self.reg(idx)
        return None

    def call(self, f: str, args: list[tuple]) -> tuple[VReg | Imm | None, str | None]:
        def need(n: int) -> None:
            if len(args) != n:
                raise self.err(f"`{f}` takes {n} argument(s)")

        def typed(e: tuple, want: str):
            v, t = self.expr(e)
            if t != want:
                raise self.err(f"`{f}` wants {want}, given {t}")
            return v
        if f in VECTOR:
            return self.vector(f, args, need, typed)
        if f in WIDE:
            return self.wide(f, args, need, typed)
        if f in WIDER:
            return self.wider(f, args, need, typed)
        if f in QOPS:
            return self.lanes_int(f, args, need)
        if f == "gatherv":
            return self.gatherv(args, need, typed)
        ix = self.indexed(args[0]) if f in ("loadf", "storef") and args else None
        if ix is not None:
            need(1 if f == "loadf" else 2)
            base, index = ix
            if f == "loadf":
                return self.emit("floadx", self.fn.new("f"), base, index), "f64"
            self.emit("fstorex", None, base, index, self.reg(typed(args[1], "f64")))
            return None, None
        if f in LOADS:
            need(1)
            base, off = self.address(args[0])
            cls = "f" if f == "loadf" else "i"
            return self.emit(LOADS[f], self.fn.new(cls), base, off), "f64" if cls == "f" else "i64"
        if f in STORES:
            need(2)
            base, off = self.address(args[0])
            v = typed(args[1], "f64" if f == "storef" else "i64")
            self.emit(STORES[f], None, base, off, self.reg(v))
            return None, None
        if f == "syscall":
            if not 1 <= len(args) <= 7:
                raise self.err("syscall takes a number and up to 6 arguments")
            regs = [self.reg(typed(a, "i64")) for a in args]
            return self.emit("syscall", self.fn.new("i"), *regs), "i64"
        if f in ("i2f", "bits2f"):
            need(1)
            return self.emit(f, self.fn.new("f"), self.reg(typed(args[0], "i64"))), "f64"
        if f == "f2bits":
            need(1)
            return self.emit("f2bits", self.fn.new("i"), typed(args[0], "f64")), "i64"
        if f == "sqrt":
            need(1)
            return self.emit("fsqrt", self.fn.new("f"), typed(args[0], "f64")), "f64"
        if f in ("udiv", "urem", "sar", "umulh"):
            need(2)
            a = self.reg(typed(args[0], "i64"))
            b = typed(args[1], "i64")
            b = b if f == "sar" else self.reg(b)
            return self.emit(f, self.fn.new("i"), a, b), "i64"
        if f in ("ror32", "ror64", "bswap32"):
            need(1 if f == "bswap32" else 2)
            a = self.reg(typed(args[0], "i64"))
            if f == "bswap32":
                return self.emit(f, self.fn.new("i"), a), "i64"
            k = self.mod.fold(args[1])
            top = 31 if f == "ror32" else 63
            if k is None or not 1 <= k <= top:
                raise self.err(f"{f} rotates by a constant, 1..{top}")
            return self.emit(f, self.fn.new("i"), a, Imm(k)), "i64"
        if f in ("cpu_has_avx2", "cpu_has_avx512"):
            need(0)
            return self.emit(f, self.fn.new("i")), "i64"
        if f in ("cpu_has_sha256", "sha256_hw", "cpu_has_clmul", "polyval_hw"):
            need(1 if f.startswith("cpu_has") else 4)
            regs = [self.reg(typed(x, "i64")) for x in args]
            if f.endswith("_hw"):
                self.emit(f, None, *regs)
                return None, None
            return self.emit(f, self.fn.new("i"), *regs), "i64"
        if f in ("fgt", "fge"):
            need(2)
            a, b = typed(args[0], "f64"), typed(args[1], "f64")
            return self.emit(f, self.fn.new("i"), a, b), "i64"
        if f == "ult":
            need(2)
            a = self.reg(typed(args[0], "i64"))
            return self.emit("setcc", self.fn.new("i"), "ult", a, typed(args[1], "i64")), "i64"
        if f == "prefetch":
            need(1)
            self.emit("prefetch", None, *self.address(args[0]))
            return None, None
        if f == "fence":
            need(0)
            self.emit("fence", None)
            return None, None
        if f == "refuse":
            if len(args) == 3:              # refuse("NAME", detail, n): `refused: NAME (DETAIL)`
                detail = [self.reg(typed(a, "i64")) for a in args[1:]]
                self.refuse(self.refusal_name(args[0], "refuse"), detail)
                return None, None
            need(1)
            self.refuse(self.refusal_name(args[0], "refuse"))
            return None, None
        if f == "sizeof":
            raise self.err("sizeof takes a global buffer's name")     # (fold takes the rest)
        if f in ("put", "put_dec", "put_byte", "room"):
            return self.bounded_append(f, args, need, typed)
        if f not in self.mod.fns:
            raise self.err(f"unknown function `{f}`")
        _, _, params, ret, _, _ = self.mod.fns[f]
        if len(params) != len(args):
            raise self.err(f"`{f}` takes {len(params)} argument(s), given {len(args)}")
        regs = [self.reg(typed(a, t)) for a, (_, t) in zip(args, params)]
        dst = None if ret is None else self.fn.new("f" if ret == "f64" else "i")
        self.emit("call", dst, f, *regs)
        return dst, ret

    def refusal_name(self, e: tuple, what: str) -> str:
        if e[0] != "str" or e[1].decode() not in REFUSALS:
            raise self.err(f"{what} takes a refusal name from alphac.refusals")
        return e[1].decode()

    def refuse(self, name: str, detail: list | None = None) -> None:
        """`refused: NAME` on stderr and exit with its code (rt_refuse); nothing follows. With
        `detail` (an address and a length), `refused: NAME (DETAIL)` (core's rt_refuse_why)."""
        line = f"refused: {name}" + ("" if detail else "\n")
        msg = self.emit("addr", self.fn.new("i"), Sym(self.mod.string(line.encode())))
        n = self.reg(Imm(len(line)))
        code = self.reg(Imm(REFUSALS[name][0]))
        if detail:
            self.emit("call", None, "rt_refuse_why", msg, n, *detail, code)
        else:
            self.emit("call", None, "rt_refuse", msg, n, code)
        self.terminate("trap")

    def bounded_append(self, f: str, args: list[tuple], need, typed):
        """put(G, at, src, n, "NAME"), put_dec(G, at, v, "NAME"), put_byte(G, at, c, "NAME"):
        the bytes written at G + at once 0 <= at and at + n <= sizeof(G) is checked (unsigned:
        a negative at or n fails it), else refused NAME before anything is written; the value
        is at + n (alphac.lower.rt_bounds). room(G, at, n, "NAME") checks the same and is the
        address G + at, for a write of n bytes there (rt_bounds checks that the write's length
        is n: the same constant, or the same expression). put calls core's bytes_copy, put_dec
        its dec_len and dec_to."""
        need(5 if f == "put" else 4)
        g = args[0]
        if g[0] != "name" or self.lookup(g[1]) is not None or self.mod.globals.get(g[1]) is None:
            raise self.err(f"{f}'s first argument must be a global buffer's name")
        refusal = self.refusal_name(args[-1], f)
        size = self.reg(Imm(self.mod.globals[g[1]].size))
        at = self.reg(typed(args[1], "i64"))
        if f == "put":
            src, n = self.reg(typed(args[2], "i64")), self.reg(typed(args[3], "i64"))
        elif f == "put_dec":
            v = self.reg(typed(args[2], "i64"))
            n = self.emit("call", self.fn.new("i"), "dec_len", v)
        elif f == "room":
            n = self.reg(typed(args[2], "i64"))
        else:
            c, n = self.reg(typed(args[2], "i64")), self.reg(Imm(1))
        bad = self.full.get(refusal)           # one refusal block a function for each name
        if bad is None:
            bad = self.full[refusal] = self.label("full")
        fits, room = self.label("room"), self.label("fits")
        self.terminate("br", "ult", size, at, bad, room)
        self.start(room)
        left = self.emit("sub", self.fn.new("i"), size, at)
        self.terminate("br", "ult", left, n, bad, fits)
        self.start(fits)
        dst = self.emit("add", self.fn.new("i"), self.emit("addr", self.fn.new("i"), Sym(g[1])), at)
        if f == "room":
            return dst, "i64"
        if f == "put":
            self.emit("call", None, "bytes_copy", dst, src, n)
        elif f == "put_dec":
            self.emit("call", self.fn.new("i"), "dec_to", dst, v)
        else:
            self.emit("store8", None, dst, Imm(0), c)
        return self.emit("add", self.fn.new("i"), at, n), "i64"

    # -- conditions ----------------------------------------------------------------------------
    def cond(self, e: tuple, yes: str, no: str) -> None:
        if e[0] == "bin" and e[1] == "&&":
            mid = self.label("and")
            self.cond(e[2], mid, no)
            self.start(mid)
            self.cond(e[3], yes, no)
            return
        if e[0] == "bin" and e[1] == "||":
            mid = self.label("or")
            self.cond(e[2], yes, mid)
            self.start(mid)
            self.cond(e[3], yes, no)
            return
        if e[0] == "un" and e[1] == "!":
            self.cond(e[2], no, yes)
            return
        if e[0] == "bin" and e[1] in CMP:
            a, ta = self.expr(e[2])
            b, tb = self.expr(e[3])
            if ta != "i64" or tb != "i64":
                raise self.err("comparisons are defined on i64 only")
            self.terminate("br", CMP[e[1]], self.reg(a), b, yes, no)
            return
        if e[0] == "call" and e[1] == "ult":
            a = self.reg(self.expr(e[2][0])[0])
            self.terminate("br", "ult", a, self.expr(e[2][1])[0], yes, no)
            return
        v, t = self.expr(e)
        if t != "i64":
            raise self.err("a condition must be i64")
        self.terminate("br", "ne", self.reg(v), Imm(0), yes, no)

    def bool_value(self, e: tuple) -> VReg:
        if e[1] in CMP:
            a, ta = self.expr(e[2])
            b, tb = self.expr(e[3])
            if ta != "i64" or tb != "i64":
                raise self.err("comparisons are defined on i64 only")
            return self.emit("setcc", self.fn.new("i"), CMP[e[1]], self.reg(a), b)
        out = self.fn.new("i")
        yes, no, done = self.label("t"), self.label("f"), self.label("b")
        self.cond(e, yes, no)
        self.start(yes)
        self.emit("iconst", out, Imm(1))
        self.terminate("jmp", done)
        self.start(no)
        self.emit("iconst", out, Imm(0))
        self.start(done)
        return out

    # -- statements ----------------------------------------------------------------------------
    def stmts(self, body: list[tuple]) -> None:
        self.scopes.append({})
        for s in body:
            self.stmt(s)
        for v in self.scopes.pop().values():
            self.bound[v] -= 1

    def stmt(self, s: tuple) -> None:
        k = s[0]
        if k == "line":
            self.origin = s[1]
        elif k == "let":
            v, t = self.expr(s[2])
            if t is None:
                raise self.err(f"`{s[1]}` is bound to a call that returns nothing")
            if s[3] is not None and s[3] != t:
                raise self.err(f"`let {s[1]}: {s[3]}` is given a value of type {t}")
            if isinstance(v, VReg) and not self.is_variable(v):
                self.bind(s[1], v)                   # a fresh temporary becomes the variable
                return
            dst = self.fn.new(CLS[t])
            self.emit(MOVE[dst.cls], dst, self.reg(v)) if not isinstance(v, Imm) \
                else self.emit("iconst", dst, v)
            self.bind(s[1], dst)
        elif k == "set":
            dst = self.lookup(s[1])
            if dst is None:
                raise self.err(f"assignment to unknown local `{s[1]}`")
            v, t = self.expr(s[2])
            if CLS[t] != dst.cls:
                raise self.err(f"`{s[1]}` changes type")
            last = self.cur.insts[-1] if self.cur.insts and self.cur.term is None else None
            if isinstance(v, Imm):
                self.emit("iconst", dst, v)
            elif last is not None and last.dst == v and not self.is_variable(v):
                last.dst = dst                       # x = a + b: the add defines x itself
            else:
                self.emit(MOVE[dst.cls], dst, v)
        elif k == "if":
            yes, no, done = self.label("then"), self.label("else"), self.label("fi")
            self.cond(s[1], yes, no if s[3] else done)
            self.start(yes)
            self.stmts(s[2])
            self.terminate("jmp", done)
            if s[3]:
                self.start(no)
                self.stmts(s[3])
            self.start(done)
        elif k == "while":                  # rotated: the test once before, then at the bottom
            body, latch, done = self.label("body"), self.label("loop"), self.label("done")
            self.cond(s[1], body, done)
            self.start(body)
            self.loops.append((latch, done))
            self.stmts(s[2])
            self.loops.pop()
            self.start(latch)
            self.cond(s[1], body, done)
            self.start(done)
        elif k in ("break", "continue"):
            if not self.loops:
                raise self.err(f"`{k}` outside a loop")
            head, done = self.loops[-1]
            self.terminate("jmp", done if k == "break" else head)
        elif k == "return":
            if s[1] is None:
                if self.fn.ret is not None:
                    raise self.err("`return` without a value")
                self.terminate("ret")
            else:
                v, t = self.expr(s[1])
                if t != self.fn.ret:
                    raise self.err(f"returns {t}, declared {self.fn.ret}")
                self.terminate("ret", self.reg(v))
        elif k == "expr":
            self.expr(s[1])
        else:
            raise self.err(f"unknown statement {k}")

    def lower(self) -> Function:
        self.stmts(self.body)
        if self.cur.term is None:
            self.terminate("ret" if self.fn.ret is None else "trap")
        for name, label in self.full.items():   # the bounded appends' refusals, out of line
            self.start(label)
            self.refuse(name)
        reachable = _reachable(self.fn)
        self.fn.blocks = [b for b in self.fn.blocks if b.label in reachable]
        return self.fn


def _reachable(fn: Function) -> set[str]:
    seen, todo = set(), [fn.blocks[0].label]
    while todo:
        lab = todo.pop()
        if lab in seen:
            continue
        seen.add(lab)
        todo += fn.block(lab).successors()
    return seen


_LOWERED = IdMemo(5000)              # (the runtime has about 150 functions per target)


def _fingerprint(mod: Module, item: tuple) -> tuple:
    """What lowering fn `item` reads from the program around it: for every name its body
    mentions (locals too: a name may be a global before its `let`), the constant's value, that a
    global is there, or the function's signature; and CPU_AVX2, CPU_AVX512, CPU_NEON (the wide
    builtins)."""
    out = []
    for n in item_names(item)[0] + ("CPU_AVX2", "CPU_AVX512", "CPU_NEON"):
        if n in mod.consts and mod.consts[n][0] == "str":
            out.append((n, "s", mod.consts[n][1]))
        elif n in mod.consts:
            try:
                out.append((n, "c", mod.const(n)))
            except RtError:
                out.append((n, "c?"))
        elif n in mod.globals:
            g = mod.globals[n]
            out.append((n, "g", g.size if g is not None else None))
        elif n in mod.fns:
            f = mod.fns[n]
            out.append((n, "f", tuple(t for _, t in f[2]), f[3], f[5]))
    return tuple(out)


def lower_function(mod: Module, item: tuple, generated: bool = False) -> Function:
    """fn `item` in LIR. The runtime's functions are the same items in every program (parsed
    once: alphac.build._parsed) and lower the same wherever what they read is the same
    (`_fingerprint`), so each is lowered once per process for each such context and the
    Function shared (nothing changes a lowered Function: later passes make new ones). The
    strings it names are registered again in `mod`, in the same order; where they get other
    names than in the first program, it is lowered afresh."""
    fp = _fingerprint(mod, item) + (generated,)
    hit = _LOWERED.get(item)
    if hit is not None and hit[0] == fp and all(mod.string(v) == name for v, name in hit[1]):
        return hit[2]
    check_function(mod, item, generated)
    mod.string_log = []
    try:
        fn = FnLowerer(mod, item).lower()
        log = mod.string_log
    finally:
        mod.string_log = None
    return _LOWERED.put(item, (fp, log, fn))[2]


def lower_program(items: list[tuple], blobs: dict[str, bytes] | None = None,
                  entry: str = "rt_start", generated: frozenset = frozenset()) -> Program:
    """`generated`: the ids of the items the code generator wrote (held to alphac.lower.rt_bounds'
    rule but for their stores at computed offsets: their loops and buffers come from one number)."""
    mod = Module(items, blobs)
    fns = [lower_function(mod, mod.fns[name], id(mod.fns[name]) in generated) for name in mod.fns]
    used = _used_functions(fns, entry)
    prog = Program([f for f in fns if f.name in used], [], entry)
    gl = [g for g in mod.globals.values()]
    prog.globals = sorted(gl, key=lambda g: g.name)
    prog.check()
    return prog


def _used_functions(fns: list[Function], entry: str) -> set[str]:
    by = {f.name: f for f in fns}
    if entry not in by:
        raise RtError(f"no entry function `{entry}`")
    seen, todo = set(), [entry]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for b in by[n].blocks:
            for i in b.insts:
                if i.op == "call":
                    todo.append(i.args[0])
    return seen
