"""A PTX interpreter for the subset alphac emits, written from the PTX ISA: the tests' reference
for what a kernel computes. Used by tests/test_ptx.py (over `Memory`, buffers in a dict) and by the
mock GPU (tests/mockgpu/gpu.py, over the pages of the executable's mapped memory).

A thread's `.local` arrays are its own (a fresh space per thread, bounded by their
declarations: an access outside them, or a read before a write, raises KeyError). A block's
`.shared` arrays are its threads' together (`Shared`, bounded the same way). `bar.sync`: the
block's threads run round-robin, each (a generator) up to its next barrier or its end; the
barrier opens when every thread of the block has reached it (PTX ISA, "bar.sync": all the CTA's
threads), and a block where some threads ended while others wait raises RuntimeError. Between
two barriers no thread may read or overwrite a shared word another thread wrote, nor overwrite
one another thread read (a race: the hardware's interleaving is not this one): KeyError.

A memory is anything with `load(addr) -> float` and `store(addr, value)`; both raise KeyError
outside the memory (a GPU fault).

Speed (not semantics): a kernel runs as its basic blocks, each made one Python function when a
thread first enters it (`_Blocks`), which makes the instructions' steps in order, each through
its table's function (F64, INT, WORD) or its `_compile` step, the same operations as one step
at a time; blocks are kept per kernel text, so a second launch or a second run reuses them.
"""
import bisect
import math
import re
import struct

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
LOCAL_BASE = 1 << 44        # the interpreter's local space, apart from every global buffer
SHARED_BASE = 1 << 45       # ... and its shared space
INF, NAN = float("inf"), float("nan")


def ieee_div(a, b):
    try:
        return a / b
    except ZeroDivisionError:                 # IEEE: x/0 is a signed infinity, 0/0 and nan/0 NaN
        return NAN if a != a or a == 0.0 else math.copysign(INF, a) * math.copysign(1.0, b)


def ieee_sqrt(a):
    return a if a != a or a == 0.0 else NAN if a < 0.0 else math.sqrt(a)


F64 = {"add.rn.f64": lambda a, b: a + b, "sub.rn.f64": lambda a, b: a - b,
       "mul.rn.f64": lambda a, b: a * b, "div.rn.f64": ieee_div, "sqrt.rn.f64": ieee_sqrt,
       "neg.f64": lambda a: -a, "cvt.rn.f64.u32": float, "mov.f64": lambda a: a}
def signed(v):
    return v - (1 << 64) if v >> 63 else v


def bits_of(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def float_of(v):
    return struct.unpack("<d", struct.pack("<Q", v & M64))[0]


INT = {"add.u32": lambda a, b: (a + b) & M32, "mul.lo.u32": lambda a, b: (a * b) & M32,
       "mul.wide.u32": lambda a, b: a * b, "add.s64": lambda a, b: (a + b) & M64,
       "setp.ge.u32": lambda a, b: a >= b, "mov.u32": lambda a: a & M32,
       "setp.eq.u32": lambda a, b: a == b, "selp.u32": lambda a, b, p: a if p else b,
       "sub.u32": lambda a, b: (a - b) & M32, "div.u32": lambda a, b: a // b, "rem.u32": lambda a, b: a % b,
       "cvta.to.global.u64": lambda a: a,
       # 64-bit integers: the functions of alphac.math
       "mov.u64": lambda a: a & M64, "sub.s64": lambda a, b: (a - b) & M64,
       "mul.lo.s64": lambda a, b: (a * b) & M64, "mul.hi.u64": lambda a, b: (a * b) >> 64,
       "and.b64": lambda a, b: a & b, "or.b64": lambda a, b: a | b, "xor.b64": lambda a, b: a ^ b,
       "cvt.u32.u64": lambda a: a & M32,
       "shl.b64": lambda a, n: (a << n) & M64 if n < 64 else 0,
       "shr.u64": lambda a, n: a >> n if n < 64 else 0,
       "shr.s64": lambda a, n: (signed(a) >> min(n, 63)) & M64,
       "setp.lt.u64": lambda a, b: a < b, "setp.lt.s64": lambda a, b: signed(a) < signed(b),
       "setp.eq.u64": lambda a, b: a == b, "setp.ne.u64": lambda a, b: a != b,
       "selp.u64": lambda a, b, p: a if p else b, "rem.u64": lambda a, b: a % b,
       # 32-bit words (SHA-256: alphac/ptx/digest.py); shf.r.wrap: (b:a) >> (c mod 32), low
       # 32 bits; prmt (no sign mode): byte k of d is byte (c >> 4k) & 7 of (b:a)
       "and.b32": lambda a, b: a & b, "or.b32": lambda a, b: a | b, "xor.b32": lambda a, b: a ^ b,
       "shr.u32": lambda a, n: a >> n if n < 32 else 0,
       "shf.r.wrap.b32": lambda a, b, c: ((b << 32 | a) >> (c & 31)) & M32,
       "prmt.b32": lambda a, b, c: sum(((b << 32 | a) >> 8 * (c >> 4 * k & 7) & 0xFF) << 8 * k
                                       for k in range(4))}
# integer words in global memory (the exact sums' limbs, alphac/ptx/xsum.py): a store, and the
# reductions `red` (PTX ISA: the old value op b, written back; one thread at a time here, so
# each is atomic), modulo 2^64
WORD = {"st.global.u64": lambda old, b: b & M64, "red.global.add.u64": lambda old, b: (old + b) & M64,
        "red.global.or.b64": lambda old, b: old | b}
F64["setp.gt.f64"] = lambda a, b: a > b                 # ordered: False when either is NaN
F64["setp.eq.f64"] = lambda a, b: a == b                # ordered: -0.0 == +0.0, NaN == nothing
F64["setp.ge.f64"] = lambda a, b: a >= b                # ordered: False when either is NaN
F64["setp.neu.f64"] = lambda a, b: a != b               # unordered: True when either is NaN
F64["cvt.rn.f64.s64"] = lambda a: float(signed(a))
F64["cvt.rzi.u32.f64"] = lambda a: int(a) & M32      # (toward zero; the index is whole)
F64["selp.f64"] = lambda a, b, p: a if p else b
SREGS = ("%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x")


class Memory:
    """Global memory: buffers at spaced addresses; any access outside them raises KeyError."""

    def __init__(self):
        self.cells, self.top = {}, 1 << 20

    def alloc(self, values):
        base = self.top
        self.top += (8 * len(values) + 4095) // 4096 * 4096 + 4096
        self.write(base, values)
        return base

    def write(self, addr, values):
        for i, v in enumerate(values):
            self.cells[addr + 8 * i] = float(v)

    def read(self, addr, count):
        return [self.cells[addr + 8 * i] for i in range(count)]

    def load(self, addr):
        return self.cells[addr]

    def store(self, addr, value):
        if addr not in self.cells:
            raise KeyError(f"store outside every buffer: {addr:#x}")
        self.cells[addr] = value


class Shared:
    """A block's shared words: word -> [value, phase of its last write, its writer, phase of its
    reads, their readers]; `phase` counts the barriers the block passed."""

    def __init__(self, arrays):
        self.cells = {a + 8 * w: [None, -1, -1, -1, set()] for a, size in arrays.values()
                      for w in range(size // 8)}
        self.phase = 0

    def cell(self, where, t, write):
        c = self.cells.get(where)
        if c is None:
            raise KeyError(f"shared access outside every .shared array: {where:#x}")
        if c[1] == self.phase and c[2] != t or write and c[3] == self.phase and c[4] - {t}:
            raise KeyError(f"shared word {where:#x}: a race between threads of the block")
        return c

    def load(self, where, t):
        c = self.cell(where, t, False)
        if c[0] is None:
            raise KeyError(f"shared read before any write: {where:#x}")
        if c[3] != self.phase:
            c[3], c[4] = self.phase, set()
        c[4].add(t)
        return c[0]

    def store(self, where, t, value):
        self.cell(where, t, True)[:3] = [value, self.phase, t]


class Ptx:
    def __init__(self, text):
        self.params = re.findall(r"\.param \.(\w+) (\w+)", text)
        self.local, top = {}, LOCAL_BASE          # .local arrays: name -> (address, bytes)
        for name, size in re.findall(r"\.local \.align 8 \.b8 (\w+)\[(\d+)\];", text):
            self.local[name] = (top, int(size))
            top += int(size) + 4096
        self.shared, top = {}, SHARED_BASE        # .shared arrays: the block's
        for name, size in re.findall(r"\.shared \.align 8 \.b8 (\w+)\[(\d+)\];", text):
            self.shared[name] = (top, int(size))
            top += int(size) + 4096
        self.code, self.labels = [], {}
        for line in text[text.index("{") + 1:text.rindex("}")].splitlines():
            line = line.split("//")[0].strip()
            if not line or line.startswith("."):
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.code)
                continue
            guard = None
            if line.startswith("@"):
                guard, line = line[1:].split(None, 1)
            op, _, rest = line.rstrip(";").partition(" ")
            self.code.append((guard, op, [a.strip() for a in rest.split(",")] if rest else []))
        self.text, self.blocks = text, None         # compiled on the first thread (_Blocks)

    def launch(self, mem, args, threads, block=4, grid=None, ntid=None, nctaid=None, local=None):
        """A 1-D grid covering `threads` with a spare block: its threads must do nothing. `ntid` and
        `nctaid` are what %ntid.x and %nctaid.x read (the block and the grid unless given: the mock
        GPU passes what constant bank 0 holds, where the hardware reads them). `local`: the
        thread's local space (the mock GPU's set-up area, mockgpu.gpu.LocalFrames): its frame is
        entered before the thread runs and left after; either raises KeyError outside the area."""
        grid = threads // block + 2 if grid is None else grid
        for b in range(grid):
            shared = Shared(self.shared)
            waiting = {}
            for t in range(block):
                if local is not None:
                    local.enter(b * block + t)
                waiting[t] = self.thread(mem, args, {"%tid.x": t, "%ntid.x": block if ntid is None else ntid,
                                                     "%ctaid.x": b, "%nctaid.x": grid if nctaid is None else nctaid,
                                                     "%shared": shared})
            while waiting:                  # round-robin: each thread to its next barrier or end
                ended = [t for t, run in waiting.items() if next(run, None) is None]
                if ended and len(ended) < len(waiting):
                    raise RuntimeError(f"block {b}: threads {ended} ended while others wait at bar.sync")
                for t in ended:
                    del waiting[t]
                    if local is not None:
                        local.leave(b * block + t)
                shared.phase += 1

    def thread(self, mem, args, sregs):
        """One thread as a generator: it yields True at each bar.sync and stops at its end."""
        if self.blocks is None:
            self.blocks = _BLOCKS.get(self.text) or _Blocks(self)
            self.local_words = {a + 8 * w: None for a, size in self.local.values() for w in range(size // 8)}
        R = dict(sregs)
        R["%local"] = self.local_words.copy()
        env = (R, mem, args)
        blocks, pc, left = self.blocks, 0, 1 << 20      # at most 2^20 instructions a thread
        while True:
            run, size = blocks[pc]
            left -= size
            if left < 0:
                raise RuntimeError("runaway thread")
            pc = run(env)
            if pc < 0:
                if pc == -1:
                    return
                pc = -2 - pc
                yield True

    def _compile(self, pc, guard, op, a):
        """Instruction `pc` as a function of (registers, memory, params) -> the next pc (-1: ret).
        Registers and the special registers share one dict (their names cannot collide)."""
        nxt = pc + 1

        def get(x):
            if x.startswith("%"):
                return lambda R: R[x]
            v = struct.unpack("<d", bytes.fromhex(x[2:])[::-1])[0] if x.startswith("0d") else int(x)
            return lambda R: v

        def addr(x):
            reg, _, off = x.strip("[]").partition("+")
            off = int(off or 0)
            return lambda R: R[reg] + off

        if op == "mov.u64" and (a[1] in self.local or a[1] in self.shared):   # an array's address
            d, at = a[0], (self.local.get(a[1]) or self.shared[a[1]])[0]

            def body(env):
                env[0][d] = at
                return nxt
        elif op in ("ld.local.f64", "st.local.f64"):  # this thread's arrays; outside them: KeyError
            st, at = op[0] == "s", addr(a[0] if op[0] == "s" else a[1])
            x = get(a[1]) if st else None
            d = a[0]

            def body(env):
                space, where = env[0]["%local"], at(env[0])
                if where not in space:
                    raise KeyError(f"local access outside every .local array: {where:#x}")
                if st:
                    space[where] = x(env[0])
                elif space[where] is None:
                    raise KeyError(f"local read before any write: {where:#x}")
                else:
                    env[0][d] = space[where]
                return nxt
        elif op in ("ld.shared.f64", "st.shared.f64"):    # the block's arrays: Shared
            st, at = op[0] == "s", addr(a[0] if op[0] == "s" else a[1])
            x, d = get(a[1]) if st else None, a[0]

            def body(env):
                R = env[0]
                if st:
                    R["%shared"].store(at(R), R["%tid.x"], x(R))
                else:
                    R[d] = R["%shared"].load(at(R), R["%tid.x"])
                return nxt
        elif op == "bar.sync":
            body = lambda env: -2 - nxt                                     # noqa: E731
        elif op == "ret":
            body = lambda env: -1                                           # noqa: E731
        elif op in ("bra", "bra.uni"):
            target = self.labels[a[0]]
            body = lambda env: target                                       # noqa: E731
        elif op.startswith("ld.param."):
            d, name = a[0], a[1].strip("[]")

            def body(env):
                env[0][d] = env[2][name]
                return nxt
        elif op in ("ld.global.f64", "ld.global.u64"):
            d, at, raw = a[0], addr(a[1]), op == "ld.global.u64"

            def body(env):
                v = env[1].load(at(env[0]))
                env[0][d] = bits_of(v) if raw else v
                return nxt
        elif op == "mov.b64":                     # between %fd and %rd: the same 64 bits
            d, src, to_f = a[0], get(a[1]), a[0].startswith("%fd")

            def body(env):
                v = src(env[0])
                if to_f:
                    env[0][d] = v if isinstance(v, float) else float_of(v)
                else:
                    env[0][d] = bits_of(v) if isinstance(v, float) else v
                return nxt
        elif op == "st.global.f64":
            at, src = addr(a[0]), get(a[1])

            def body(env):
                env[1].store(at(env[0]), src(env[0]))
                return nxt
        elif op in WORD:
            at, src, fn = addr(a[0]), get(a[1]), WORD[op]

            def body(env):
                where = at(env[0])
                env[1].store(where, float_of(fn(bits_of(env[1].load(where)), src(env[0]))))
                return nxt
        elif op in F64 or op in INT:
            fn, d, srcs = F64.get(op) or INT[op], a[0], [get(x) for x in a[1:]]
            if len(srcs) == 1:
                (x,) = srcs

                def body(env):
                    R = env[0]
                    R[d] = fn(x(R))
                    return nxt
            elif len(srcs) == 2:
                x, y = srcs

                def body(env):
                    R = env[0]
                    R[d] = fn(x(R), y(R))
                    return nxt
            else:
                def body(env):
                    R = env[0]
                    R[d] = fn(*(g(R) for g in srcs))
                    return nxt
        else:
            raise NotImplementedError(op)
        if guard is None:
            return body
        neg, reg = guard[0] == "!", guard.lstrip("!")
        return lambda env: nxt if (env[0][reg] if neg else not env[0][reg]) else body(env)


class _Blocks(dict):
    """A program's code as basic blocks, each compiled when first entered into one Python function
    that does its instructions' steps in order (each F64, INT or WORD instruction its table's
    function; what the text does not translate, as .local and .shared accesses, arrays'
    addresses and any op only _compile knows, its _compile step) and returns the next pc as a
    step does: {leader pc: (function, instructions in the block)}. Kept for the last programs'
    texts (_BLOCKS), so that runs of the same kernels compile them once."""

    ENDS = ("bra", "bra.uni", "ret", "bar.sync")

    def __init__(self, prog):
        super().__init__()
        self.prog, code = prog, prog.code
        self.leaders = sorted({0, *prog.labels.values(), len(code)} |
                              {pc + 1 for pc, (_, op, _) in enumerate(code) if op in self.ENDS})
        self.names = {"bits_of": bits_of, "float_of": float_of, "as_float": _as_float, "as_bits": _as_bits}
        _BLOCKS[prog.text] = self
        while len(_BLOCKS) > 64:
            del _BLOCKS[next(iter(_BLOCKS))]

    def __missing__(self, start):
        prog, names = self.prog, self.names
        stop = self.leaders[bisect.bisect_right(self.leaders, start)]

        def val(x):                         # an operand as Python text
            if x.startswith("%"):
                return f"R[{x!r}]"
            v = struct.unpack("<d", bytes.fromhex(x[2:])[::-1])[0] if x.startswith("0d") else int(x)
            names[f"c{len(names)}"] = v
            return f"c{len(names) - 1}"

        def addr(x):
            reg, _, off = x.strip("[]").partition("+")
            return f"R[{reg!r}] + {int(off or 0)}"

        def fn(f):
            names[f"f{len(names)}"] = f
            return f"f{len(names) - 1}"

        def line(pc, op, a):
            if op in ("bra", "bra.uni"):
                return f"return {prog.labels[a[0]]}"
            if op == "ret":
                return "return -1"
            if op == "bar.sync":
                return f"return {-2 - (pc + 1)}"
            if op.startswith("ld.param."):
                return f"R[{a[0]!r}] = P[{a[1].strip('[]')!r}]"
            if op in ("ld.global.f64", "ld.global.u64"):
                load = f"M.load({addr(a[1])})"
                return f"R[{a[0]!r}] = " + (f"bits_of({load})" if op == "ld.global.u64" else load)
            if op == "st.global.f64":
                return f"M.store({addr(a[0])}, {val(a[1])})"
            if op == "mov.b64":             # between %fd and %rd: the same 64 bits
                return f"R[{a[0]!r}] = {'as_float' if a[0].startswith('%fd') else 'as_bits'}({val(a[1])})"
            if op in WORD:
                return f"w = {addr(a[0])}; M.store(w, float_of({fn(WORD[op])}(bits_of(M.load(w)), {val(a[1])})))"
            if (op in F64 or op in INT) and not (op == "mov.u64" and (a[1] in prog.local or a[1] in prog.shared)):
                return f"R[{a[0]!r}] = {fn(F64.get(op) or INT[op])}({', '.join(val(x) for x in a[1:])})"
            step = fn(prog._compile(pc, None, op, a))
            return f"t = {step}(env)\nif t != {pc + 1}: return t"

        body = []
        for pc in range(start, stop):
            guard, op, a = prog.code[pc]
            text = line(pc, op, a)
            if guard is not None:           # a guarded instruction runs when its predicate holds
                neg, reg = guard[0] == "!", guard.lstrip("!")
                text = f"if {'not ' if neg else ''}R[{reg!r}]:\n" + "\n".join("    " + t for t in text.split("\n"))
            body += text.split("\n")
        guard, op, _ = prog.code[stop - 1]
        if op not in self.ENDS or guard is not None:
            body.append(f"return {stop}")
        src = f"def b{start}(env):\n    R, M, P = env\n" + "".join(f"    {t}\n" for t in body)
        exec(compile(src, f"<ptx block {start}>", "exec"), names)
        self[start] = names.pop(f"b{start}"), stop - start
        return self[start]


_BLOCKS: dict[str, _Blocks] = {}


def _as_float(v):                           # mov.b64 into a %fd register: the same 64 bits
    return v if isinstance(v, float) else float_of(v)


def _as_bits(v):
    return bits_of(v) if isinstance(v, float) else v


class InterpDevice:
    """gpu/ptx_host.py's Device, over the interpreter: the kernels run as written."""

    def __init__(self, mutate=None):
        self.mem, self.mutate, self.launches = Memory(), mutate or {}, []
        self.programs: dict[str, Ptx] = {}      # a kernel's text -> it parsed and compiled, once

    def alloc(self, values):
        return self.mem.alloc(values)

    def write(self, addr, values):
        assert all(addr + 8 * i in self.mem.cells for i in range(len(values)))
        self.mem.write(addr, values)

    def read(self, addr, count):
        return self.mem.read(addr, count)

    def launch(self, kernel, args, threads):
        text = self.mutate.get(kernel.name, lambda t: t)(kernel.ptx)
        prog = self.programs.get(text) or self.programs.setdefault(text, Ptx(text))
        assert prog.params == [(p.type, p.name) for p in kernel.params]
        for p, v in zip(kernel.params, args):
            assert isinstance(v, float if p.type == "f64" else int), p
        prog.launch(self.mem, {p.name: v for p, v in zip(kernel.params, args)}, threads,
                    block=kernel.block or 4)
        self.launches.append(kernel.name)
