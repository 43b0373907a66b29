"""The runtime language's memory rule: a write into a fixed-size buffer is proven in bounds at
compile time, or made through a bounded append that refuses by name.

A *write* is a store builtin at an address (`store8/16/32/64`, `storef`: 1 to 8 bytes; `storev`,
`storew`, `storez`: 16, 32, 64), or a call of a function that writes through a parameter. Such a
function says so in its definition, with the most bytes it writes from that address on, an
expression of its parameters and constants:

    fn dec_to(p: i64 writes 20, v: i64) -> i64 { ... }
    fn bytes_copy(dst: i64 writes n, src: i64, n: i64) { ... }

For each write the address's *root* is found, through `+`/`-` of constants and the function's
locals (every value a local is ever given: the rule is flow-insensitive, so it never misses an
assignment in a loop):
  - a global `G` (`G`, `G + c`, a local bound to either): the offset and the extent must be
    constants with 0 <= offset and offset + extent <= G's size, else the program is refused
    (`RtError`, a compiler bug: runtime sources are ours). A write at a computed offset or of a
    computed length goes through a bounded append instead;
  - a parameter: the function writes through it, so it must declare `writes` for it; the extent
    it declares is what every call is checked against (above). Its own body is the trusted base:
    each such function is a short loop that keeps within what it declares (docs/runtime.md lists
    them);
  - anything else (a pointer loaded from memory, a call's result, a pointer the code generated
    for a learner computes from its own buffers): outside this rule.

The bounded appends are builtins (alphac.lower.rt_lower lowers them): `put(G, at, src, n,
"NAME")` copies n bytes from src to G + at and is at + n; `put_dec(G, at, v, "NAME")` writes v in
decimal (v >= 0) and is at + its digits; `put_byte(G, at, c, "NAME")` is at + 1. Each refuses
NAME (alphac.refusals) unless 0 <= at and at + n <= sizeof(G), before writing anything.
`room(G, at, n, "NAME")` checks the same and is the address G + at: a write there of n bytes (a
store of at most n, n a constant; or a call whose extent there is the very expression n) is in
bounds (a store into a table at a computed index, a read(2) into a buffer).
`sizeof(G)` is G's size in bytes, a constant. `G` must be a global's name: the capacity is the
compiler's, never a number a caller could get wrong.

Requires: a function item and the program's `Module`. Guarantees: `check_function` returns, or
raises an RtError naming the function, the buffer and the write.
"""
from __future__ import annotations

from alphac.lower.rt import RtError

STORE_WIDTH = {"store8": 1, "store16": 2, "store32": 4, "store64": 8, "storef": 8, "storev": 16,
               "storew": 32, "storez": 64}
APPENDS = ("put", "put_dec", "put_byte", "room")
# the system calls whose kernel side writes into a buffer: (its argument, the extent's argument or
# a constant extent); args count from the call number's: syscall(SYS_read, fd, buf, n)
SYSCALL_WRITES = {"SYS_read": (2, 3), "SYS_pread64": (2, 3), "SYS_recvfrom": (2, 3),
                  "SYS_getrandom": (1, 2), "SYS_clock_gettime": (2, ("int", 16)), "SYS_getdents64": (2, 3)}
# the CPU's instructions that write into memory: (their argument that is the address, the bytes)
INTRINSIC_WRITES = {"sha256_hw": (0, 32), "polyval_hw": (0, 16)}

# a root: ("global", name, offset or None) | ("param", index) | ("params", indexes: one of them)
# | ("room", n) | ("other",)
OTHER = ("other",)
SELF = ("self",)          # a local's own value, met again while its values are being found


class _Fn:
    def __init__(self, mod, item: tuple):
        self.mod, self.item = mod, item
        self.name = item[1]
        self.params = {p: k for k, (p, _) in enumerate(item[2])}
        self.declared = {k for k, _ in item[5]}
        self.assigned: dict[str, list[tuple]] = {}
        self._collect(item[4])
        self.roots: dict[str, tuple] = {}
        self.generated = False

    def err(self, msg: str) -> RtError:
        return RtError(f"fn {self.name}: {msg}")

    def _collect(self, body: list[tuple]) -> None:
        for s in body:
            if s[0] in ("let", "set"):
                self.assigned.setdefault(s[1], []).append(s[2])
            elif s[0] == "if":
                self._collect(s[2])
                self._collect(s[3] or [])
            elif s[0] == "while":
                self._collect(s[2])

    # -- roots -------------------------------------------------------------------------------
    def local_root(self, name: str, busy: frozenset) -> tuple:
        if name in self.roots:
            return self.roots[name]
        if name in busy:
            return SELF
        roots, moved = set(), False
        if name in self.params:
            roots.add(("param", self.params[name]))
        for e in self.assigned.get(name, []):
            r = self.root(e, busy | {name})
            if r == SELF:
                moved = True                          # p = p + e: p moves by e, maybe in a loop
            else:
                roots.add(r)
        if not roots:
            out = OTHER
        elif len(roots) == 1:
            out = roots.pop()
        else:
            globs = {r[1] for r in roots if r[0] == "global"}
            params = {r for r in roots if r[0] == "param"}
            if len(globs) == 1 and not params and all(r[0] == "global" for r in roots):
                out = ("global", globs.pop(), None)   # one buffer, at several offsets
            elif params == roots:
                out = ("params", tuple(sorted(k for _, k in params)))   # one of these parameters
            elif globs or params:
                out = ("mixed", tuple(sorted(map(str, roots))))
            else:
                out = OTHER
        if moved and out[0] == "global":
            out = ("global", out[1], None)            # wherever it started, not there any more
        if not busy:
            self.roots[name] = out
        return out

    def root(self, e: tuple, busy: frozenset = frozenset()) -> tuple | None:
        k = e[0]
        if k == "name":
            n = e[1]
            if n in self.params or n in self.assigned:
                return self.local_root(n, busy)
            if n in self.mod.globals:
                return ("global", n, 0)
            return OTHER
        if k == "bin" and e[1] in ("+", "-"):
            a = self.root(e[2], busy)
            b = self.root(e[3], busy) if e[1] == "+" else OTHER
            if SELF in (a, b):
                return SELF
            if a == OTHER and b != OTHER:
                a, e2 = b, e[2]
            else:
                e2 = e[3]
            off = self.mod.fold(e2)
            if a[0] == "room":                        # room(...) + c: c fewer bytes checked
                ok = off is not None and isinstance(a[1], int) and e[1] == "+" and 0 <= off <= a[1]
                return ("room", a[1] - off if ok else None)
            if a[0] != "global":
                return a
            if a[2] is None or off is None:
                return ("global", a[1], None)
            return ("global", a[1], a[2] + off if e[1] == "+" else a[2] - off)
        if k == "call" and e[1] == "room" and len(e[2]) == 4:
            n = self.mod.fold(e[2][2])
            return ("room", n if n is not None else e[2][2])
        return OTHER

    # -- writes ------------------------------------------------------------------------------
    def write(self, addr: tuple, extent: int | None, what: str, expr: tuple | None = None) -> None:
        """A write of `extent` bytes (None: not a constant; `expr` its expression) at addr."""
        r = self.root(addr)
        if r == OTHER:
            return
        if r[0] == "room":                            # checked at run time for r[1] bytes
            if isinstance(r[1], int) and extent is not None and extent <= r[1]:
                return
            if isinstance(r[1], tuple) and expr is not None and expr == r[1]:
                return                                # the very length room(...) checked
            raise self.err(f"{what} writes {extent if extent is not None else 'a computed number of'} "
                           f"bytes where room(...) checked {r[1] if isinstance(r[1], int) else 'another'}")
        if r[0] in ("param", "params"):
            for k in (r[1],) if r[0] == "param" else r[1]:
                if k in self.declared:
                    continue
                p = self.item[2][k][0]
                raise self.err(f"{what} writes through parameter `{p}`, which does not declare "
                               f"`writes EXTENT`")
            return
        if r[0] == "mixed":
            raise self.err(f"{what} writes at an address that is a global buffer or a parameter "
                           f"depending on the path ({', '.join(r[1])}): keep them apart")
        g, off = r[1], r[2]
        size = self.mod.globals[g].size
        if (off is None or extent is None) and self.generated:
            return                                    # the generator's own arithmetic: see above
        if off is None or extent is None:
            raise self.err(f"{what} writes into `{g}` ({size} bytes) at a computed "
                           f"{'offset' if off is None else 'length'}: write it through "
                           f"put/put_dec/put_byte, which refuse by name when it does not fit")
        if off < 0 or off + extent > size:
            raise self.err(f"{what} writes bytes {off}..{off + extent} of `{g}`, which has {size}")

    def extent(self, callee: tuple, k: int, args: list[tuple]) -> tuple[int | None, tuple]:
        """The declared extent of callee's parameter k at this call: its value when a constant,
        and its expression in the caller's terms."""
        expr = dict(callee[5])[k]
        subst = {p: a for (p, _), a in zip(callee[2], args)}
        e = _substitute(expr, subst)
        return self.mod.fold(e), e

    def expr(self, e: tuple) -> None:
        if e[0] == "call":
            f, args = e[1], e[2]
            for a in args:
                self.expr(a)
            if f in STORE_WIDTH and args:
                self.write(args[0], STORE_WIDTH[f], f)
            elif f == "syscall" and args and args[0][0] == "name" and args[0][1] in SYSCALL_WRITES:
                buf, n = SYSCALL_WRITES[args[0][1]]
                if len(args) > max(buf, n if isinstance(n, int) else 0):
                    e = args[n] if isinstance(n, int) else n
                    self.write(args[buf], self.mod.fold(e), args[0][1], e)
            elif f in INTRINSIC_WRITES and len(args) == 4:
                self.write(args[INTRINSIC_WRITES[f][0]], INTRINSIC_WRITES[f][1], f)
            elif f in APPENDS or f == "sizeof":
                if not args or args[0][0] != "name" or args[0][1] not in self.mod.globals:
                    raise self.err(f"{f}'s first argument must be a global buffer's name")
            elif f in self.mod.fns and self.mod.fns[f][5] and len(args) == len(self.mod.fns[f][2]):
                callee = self.mod.fns[f]
                for k, _ in callee[5]:
                    value, expr = self.extent(callee, k, args)
                    self.write(args[k], value, f"{f}(...)", expr)
        elif e[0] == "bin":
            self.expr(e[2])
            self.expr(e[3])
        elif e[0] == "un":
            self.expr(e[2])

    def stmts(self, body: list[tuple]) -> None:
        for s in body:
            k = s[0]
            if k in ("let", "set"):
                self.expr(s[2])
            elif k == "if":
                self.expr(s[1])
                self.stmts(s[2])
                self.stmts(s[3] or [])
            elif k == "while":
                self.expr(s[1])
                self.stmts(s[2])
            elif k in ("return", "expr") and s[1] is not None:
                self.expr(s[1])


def _substitute(e: tuple, subst: dict[str, tuple]) -> tuple:
    if e[0] == "name" and e[1] in subst:
        return subst[e[1]]
    if e[0] == "bin":
        return ("bin", e[1], _substitute(e[2], subst), _substitute(e[3], subst))
    if e[0] == "un":
        return ("un", e[1], _substitute(e[2], subst))
    if e[0] == "call":
        return ("call", e[1], [_substitute(a, subst) for a in e[2]])
    return e


def check_function(mod, item: tuple, generated: bool = False) -> None:
    """Every write of fn `item` against the rule above; RtError on the first that breaks it.
    `generated`: code the code generator wrote, whose writes at a computed offset or length
    into its own buffers are exempt (each loop and each member's slice is computed from the
    numbers its buffer is sized from, in one Python value: alphac.lower.learner, role, fleet);
    a constant write past a buffer's end, and a write through a parameter that declares no
    extent, are refused there too."""
    fn = _Fn(mod, item)
    fn.generated = generated
    names = {p for p, _ in item[2]} | set(mod.consts)
    for k, expr in item[5]:
        if not _closed(expr, names):
            raise fn.err(f"the extent of parameter `{item[2][k][0]}` must be an expression of "
                         f"the parameters and constants")
    fn.stmts(item[4])


def _closed(e: tuple, names: set[str]) -> bool:
    """e uses only `names`, integers, operators and udiv: what fold computes once a call's
    arguments stand for the parameters."""
    if e[0] == "name":
        return e[1] in names
    if e[0] == "int":
        return True
    if e[0] == "bin":
        return _closed(e[2], names) and _closed(e[3], names)
    if e[0] == "un":
        return _closed(e[2], names)
    return e[0] == "call" and e[1] == "udiv" and all(_closed(a, names) for a in e[2])
