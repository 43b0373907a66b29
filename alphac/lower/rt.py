"""The runtime language: the small systems language the runtime is written in, once.

Argument parsing, number printing, refusals, frames, checksums, checkpoint I/O and the driver
conversation are written in this language (`alphac/runtime/*.rt`) and lowered to LIR by
`alphac.lower.rt_lower`, then by both backends. The code generated for a learner
(`alphac.lower.learner`) is emitted as this language too, so `alphac build --emit rt` shows
exactly what the backends receive.

    const PAGE = 4096;                       // compile-time integer constant
    global buf: [u8; 65536];                 // zeroed, writable (.bss)
    var w: [f64; 2] = [0.0, 0.5];            // initialised, writable (.data)
    data names: [u8] = "w\\0";               // read-only (.rodata)
    data xs: [f64; 40] = extern;             // bytes supplied by the code generator
    fn write_all(fd: i64, p: i64, n: i64) -> i64 {
        let off = 0;
        while off < n {
            let k = syscall(SYS_write, fd, p + off, n - off);
            if k < 0 { return k; }
            off = off + k;
        }
        return 0;
    }

Values are `i64` (integers and addresses), `f64` or `f64x2` (two binary64 lanes: `+ - * /` and
unary `-` act on each lane exactly as on an f64; `loadv(a)`/`storev(a, v)` move the 16 bytes at
a, lane 0 at a; `splat(x)` is (x, x), `pack(x, y)` is (x, y); `lane(v, K)` is lane K; `sqrtv(v)`; the code generated
for a learner uses them for pairs of coordinates), or, where the target's prelude has
`CPU_AVX2 = 1` (x86_64-v3), `f64x4` (`+ - * /` and unary `-` on four lanes; `loadw`, `storew`, `splatw`, `sqrtw`, `gatherw` and
`wide_end()`, after which no f64x4 is live: alphac.lower.rt_lower), and where it also has
`CPU_AVX512 = 1` (x86_64-v4), `f64x8` (the same on eight lanes: `loadz`, `storez`, `splatz`,
`sqrtz`, and `gatherz(a, v)`: lane k the binary64 at a + 8 v_k; `wide_end()` ends them too); on
f64x2, f64x4 and f64x8, `qadd`, `qsub`, `qand`, `qor`, `qxor` (each
lane's 64 bits as integers, modulo 2^64) and `qshl(v, K)`, `qshr(v, K)` (logical, K a constant
in 0..63); where the prelude has `CPU_NEON = 1` (AArch64),
`gatherv(a, v)` (lane k the binary64 at a + 8 v_k). A global's name is its address. Memory is
reached through `load8/16/32/64`, `loadf`, `store8/16/32/64`, `storef` (little-endian, unsigned
narrow loads). Other builtins: `syscall(nr, ...)`, `i2f`, `f2bits`, `bits2f`, `sqrt`, `udiv`,
`urem`, `sar`, `ult` (unsigned <), `umulh` (the high 64 bits of the unsigned 128-bit product),
`ror32(x, K)` (x's low 32 bits rotated right by the constant K, 1..31), `ror64(x, K)` (x rotated
right by the constant K, 1..63), `bswap32` (x's low 32
bits, bytes reversed; both zero-extend their 32-bit result), `cpu_has_sha256(hwcap)` and
`sha256_hw(state, p, n, k)` (the CPU's SHA-256 instructions: alphac.lower.lir), `cpu_has_clmul(hwcap)`
and `polyval_hw(s, key, p, n)` (its carry-less multiply, for POLYVAL: alphac.lower.lir), `cpu_has_avx2()`,
`cpu_has_avx512()`,
`fgt` and `fge` (binary64 > and >=, as an i64: 0 when either operand is a NaN), `fence()` (a full memory barrier:
stores before it reach memory, and devices, before any access after it), `prefetch(a)` (a hint
that the line at a is read soon: no value changes, and it never faults, whatever a is), `refuse("NAME")`
(alphac.refusals), and the bounded appends `put(G, at, src, n, "NAME")`, `put_dec`, `put_byte`,
`room(G, at, n, "NAME")` and `sizeof(G)` (G a global's name). Every write into a global buffer is
proven in bounds or made through them, and a function that writes through a parameter declares
how much (`fn dec_to(p: i64 writes 20, v: i64)`): alphac.lower.rt_bounds. `// line N` comments are ignored, but `#line N` directives set the Alpha
source line that later instructions come from.

Each runtime file is a module: it opens with `use core, sha256;` (the files whose items it
reads) and declares with `extern` what the code generated for a learner, a role or a GPU owner
supplies (`extern fn learner_step();`, `extern const HAS_PARENT;`, `extern global msg;`). A
file sees its own items, those of the files it uses (directly), its externs and the target's
prelude; `check_modules` refuses anything else, and every extern must be defined, once, by the
program with the signature it declares. `modules(entry)` is the list of files a program needs,
derived from the `use` lines (each file after the files it uses). Character literals (`'/'`,
`'\n'`) are integers; `let x: f64 = ...` is checked against the value's type.

This module is the lexer, the parser and the module check; it requires nothing and guarantees a
syntax tree or an `RtError` naming the file, line and column (runtime sources are ours: an
error is a compiler bug).
"""
from __future__ import annotations

from dataclasses import dataclass

from alphac.lower.memo import IdMemo


class RtError(Exception):
    pass


@dataclass(frozen=True)
class Tok:
    kind: str          # name int float str punct eof line
    text: str
    line: int
    col: int
    value: object = None


PUNCT2 = {"==", "!=", "<=", ">=", "<<", ">>", "&&", "||", "->"}
PUNCT1 = set("+-*/%&|^~!<>=(){}[],;:")


def lex(text: str, name: str) -> list[Tok]:
    out: list[Tok] = []
    i, line, col0 = 0, 1, 0
    n = len(text)
    while i < n:
        c = text[i]
        col = i - col0 + 1
        if c == "\n":
            line += 1
            col0 = i + 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("#line", i):
            j = i + 5
            while j < n and text[j] != "\n":
                j += 1
            out.append(Tok("line", "#line", line, col, int(text[i + 5:j].strip() or 0)))
            i = j
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(Tok("name", text[i:j], line, col))
            i = j
        elif c.isdigit():
            j = i
            while j < n and (text[j].isalnum() or text[j] in "._" or
                             (text[j] in "+-" and text[j - 1] in "eE" and not text.startswith("0x", i))):
                j += 1
            word = text[i:j].replace("_", "")
            try:
                if word.startswith(("0x", "0X")):
                    out.append(Tok("int", word, line, col, int(word, 16)))
                elif any(ch in word for ch in ".eE"):
                    out.append(Tok("float", word, line, col, float(word)))
                else:
                    out.append(Tok("int", word, line, col, int(word)))
            except ValueError:
                raise RtError(f"{name}:{line}:{col}: bad number {word!r}")
            i = j
        elif c in "\"'":
            j = i + 1
            buf = bytearray()
            while j < n and text[j] != c and text[j] != "\n":
                if text[j] == "\\":
                    byte, j = _escape(text, j, f"{name}:{line}:{col}")
                    buf.append(byte)
                else:
                    buf += text[j].encode()
                    j += 1
            if j >= n or text[j] != c:
                what = "character" if c == "'" else "string"
                raise RtError(f"{name}:{line}:{col}: unterminated {what}")
            if c == "'":
                if len(buf) != 1:
                    raise RtError(f"{name}:{line}:{col}: a character literal holds one byte")
                out.append(Tok("int", text[i:j + 1], line, col, buf[0]))
            else:
                out.append(Tok("str", text[i:j + 1], line, col, bytes(buf)))
            i = j + 1
        elif text[i:i + 2] in PUNCT2:
            out.append(Tok("punct", text[i:i + 2], line, col))
            i += 2
        elif c in PUNCT1:
            out.append(Tok("punct", c, line, col))
            i += 1
        else:
            raise RtError(f"{name}:{line}:{col}: unexpected character {c!r}")
    out.append(Tok("eof", "", line, 1))
    return out


ESCAPES = {"n": 10, "t": 9, "0": 0, "\\": 92, '"': 34, "'": 39}


def _escape(text: str, j: int, where: str) -> tuple[int, int]:
    """The byte of the escape at text[j] (a backslash) and the index after it."""
    esc = text[j + 1:j + 2]
    if esc in ESCAPES:
        return ESCAPES[esc], j + 2
    digits = text[j + 2:j + 4]
    if esc == "x" and len(digits) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in digits):
        return int(digits, 16), j + 4
    raise RtError(f"{where}: unknown escape `\\{text[j + 1:j + 4]}` (escapes: \\n \\t \\0 \\\\ "
                  f"\\\" \\' \\xHH)")


# -- syntax tree: tuples tagged by their first element, kept small --------------------------------
# expressions: ("int", v) ("float", v) ("str", bytes) ("name", n) ("call", f, [args])
#              ("bin", op, a, b) ("un", op, a)
# statements:  ("let", n, e, type|None) ("set", n, e) ("if", c, then, else) ("while", c, body)
#              ("break",) ("continue",) ("return", e|None) ("expr", e) ("line", n)
# items:       ("fn", name, [(p, type)], ret, body, writes) ("const", n, e) ("global", n, elem, count)
#              ("var", n, elem, count, values) ("data", n, elem, count, values)
#              ("use", [files]) ("extern", "fn", name, ([types], ret)) ("extern", "const"|"global", name)
# `writes`: ((parameter index, extent expression), ...): the parameters a function writes through,
# each with the most bytes it writes there (`fn dec_to(p: i64 writes 20, v: i64)`,
# `fn bytes_copy(dst: i64 writes n, src: i64, n: i64)`): alphac.lower.rt_bounds.

BINARY_PREC = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="),
               ("<<", ">>"), ("+", "-"), ("*", "/", "%")]


class Parser:
    def __init__(self, toks: list[Tok], name: str):
        self.toks, self.pos, self.name = toks, 0, name

    @property
    def tok(self) -> Tok:
        return self.toks[self.pos]

    def err(self, msg: str) -> RtError:
        t = self.tok
        return RtError(f"{self.name}:{t.line}:{t.col}: {msg} (at {t.text!r})")

    def at(self, text: str) -> bool:
        return self.tok.kind in ("punct", "name") and self.tok.text == text

    def eat(self, text: str) -> Tok:
        if not self.at(text):
            raise self.err(f"expected {text!r}")
        t = self.tok
        self.pos += 1
        return t

    def ident(self) -> str:
        if self.tok.kind != "name":
            raise self.err("expected a name")
        t = self.tok
        self.pos += 1
        return t.text

    def items(self) -> list[tuple]:
        out = []
        while self.tok.kind != "eof":
            if self.tok.kind == "line":
                self.pos += 1
                continue
            kw = self.ident()
            if kw == "use":
                names = [self.ident()]
                while self.at(","):
                    self.pos += 1
                    names.append(self.ident())
                self.eat(";")
                out.append(("use", names))
            elif kw == "extern":
                kind = self.ident()
                name = self.ident()
                if kind == "fn":
                    params, ret = self.signature()
                    out.append(("extern", "fn", name, ([t for _, t in params], ret)))
                elif kind in ("const", "global"):
                    out.append(("extern", kind, name))
                else:
                    raise self.err(f"extern {kind!r}: externs are fn, const and global")
                self.eat(";")
            elif kw == "fn":
                name = self.ident()
                params, ret, writes = self.signature(with_writes=True)
                out.append(("fn", name, params, ret, self.block(), writes))
            elif kw == "const":
                name = self.ident()
                self.eat("=")
                e = self.expr()
                self.eat(";")
                out.append(("const", name, e))
            elif kw in ("global", "var", "data"):
                name = self.ident()
                self.eat(":")
                self.eat("[")
                elem = self.ident()
                count = None
                if self.at(";"):
                    self.pos += 1
                    count = self.expr()
                self.eat("]")
                values = None
                if kw != "global":
                    self.eat("=")
                    if self.at("extern"):
                        self.pos += 1
                        values = "extern"
                    elif self.tok.kind == "str":
                        values = self.tok.value
                        self.pos += 1
                    else:
                        self.eat("[")
                        values = []
                        while not self.at("]"):
                            values.append(self.expr())
                            if not self.at("]"):
                                self.eat(",")
                        self.eat("]")
                self.eat(";")
                out.append((kw, name, elem, count) + ((values,) if kw != "global" else ()))
            else:
                raise self.err(f"unknown item {kw!r}")
        return out

    def signature(self, with_writes: bool = False):
        """(params, ret), or with `with_writes` (a definition) (params, ret, writes)."""
        self.eat("(")
        params, writes = [], []
        while not self.at(")"):
            p = self.ident()
            self.eat(":")
            params.append((p, self.ident()))
            if self.at("writes"):
                if not with_writes:
                    raise self.err("`writes` belongs to a function's definition")
                self.pos += 1
                writes.append((len(params) - 1, self.expr()))
            if not self.at(")"):
                self.eat(",")
        self.eat(")")
        ret = None
        if self.at("->"):
            self.pos += 1
            ret = self.ident()
        return (params, ret, tuple(writes)) if with_writes else (params, ret)

    def block(self) -> list[tuple]:
        self.eat("{")
        body = []
        while not self.at("}"):
            body.append(self.stmt())
        self.eat("}")
        return body

    def stmt(self) -> tuple:
        t = self.tok
        if t.kind == "line":
            self.pos += 1
            return ("line", t.value)
        if t.kind == "name":
            if t.text == "let":
                self.pos += 1
                name = self.ident()
                ty = None
                if self.at(":"):
                    self.pos += 1
                    ty = self.ident()
                self.eat("=")
                e = self.expr()
                self.eat(";")
                return ("let", name, e, ty)
            if t.text == "if":
                return self.if_stmt()
            if t.text == "while":
                self.pos += 1
                cond = self.expr()
                return ("while", cond, self.block())
            if t.text in ("break", "continue"):
                self.pos += 1
                self.eat(";")
                return (t.text,)
            if t.text == "return":
                self.pos += 1
                e = None if self.at(";") else self.expr()
                self.eat(";")
                return ("return", e)
            if self.toks[self.pos + 1].text == "=" and self.toks[self.pos + 1].kind == "punct":
                self.pos += 2
                e = self.expr()
                self.eat(";")
                return ("set", t.text, e)
        e = self.expr()
        self.eat(";")
        return ("expr", e)

    def if_stmt(self) -> tuple:
        self.eat("if")
        cond = self.expr()
        then = self.block()
        other: list[tuple] = []
        if self.at("else"):
            self.pos += 1
            other = [self.if_stmt()] if self.at("if") else self.block()
        return ("if", cond, then, other)

    def expr(self, level: int = 0) -> tuple:
        if level == len(BINARY_PREC):
            return self.unary()
        left = self.expr(level + 1)
        while self.tok.kind == "punct" and self.tok.text in BINARY_PREC[level]:
            op = self.tok.text
            self.pos += 1
            left = ("bin", op, left, self.expr(level + 1))
        return left

    def unary(self) -> tuple:
        if self.tok.kind == "punct" and self.tok.text in ("-", "!", "~"):
            op = self.tok.text
            self.pos += 1
            return ("un", op, self.unary())
        return self.primary()

    def primary(self) -> tuple:
        t = self.tok
        self.pos += 1
        if t.kind == "int":
            return ("int", t.value)
        if t.kind == "float":
            return ("float", t.value)
        if t.kind == "str":
            return ("str", t.value)
        if t.kind == "name":
            if self.at("("):
                self.pos += 1
                args = []
                while not self.at(")"):
                    args.append(self.expr())
                    if not self.at(")"):
                        self.eat(",")
                self.eat(")")
                return ("call", t.text, args)
            return ("name", t.text)
        if t.kind == "punct" and t.text == "(":
            e = self.expr()
            self.eat(")")
            return e
        self.pos -= 1
        raise self.err("expected an expression")


def parse(text: str, name: str) -> list[tuple]:
    return Parser(lex(text, name), name).items()


# -- modules -----------------------------------------------------------------------------------
BUILTINS = frozenset({"load8", "load16", "load32", "load64", "loadf", "store8", "store16",
                      "store32", "store64", "storef", "syscall", "i2f", "f2bits", "bits2f", "sqrt",
                      "udiv", "urem", "sar", "ult", "umulh", "ror32", "ror64", "bswap32", "fgt", "fge", "fence",
                      "prefetch",
                      "refuse", "cpu_has_sha256", "sha256_hw", "cpu_has_clmul", "polyval_hw",
                      "loadv", "storev", "splat", "lane", "sqrtv", "pack", "cpu_has_avx2",
                      "cpu_has_avx512", "loadz", "storez", "splatz", "sqrtz",
                      "loadw", "storew", "splatw", "sqrtw", "wide_end",
                      "qadd", "qsub", "qand", "qor", "qxor", "qshl", "qshr", "gatherz", "gatherw",
                      "gatherv", "put", "put_dec", "put_byte", "room", "sizeof"})


def uses(items: list[tuple]) -> list[str]:
    return [f for it in items if it[0] == "use" for f in it[1]]


def modules(entry: str, read) -> list[str]:
    """The runtime files a program whose main file is `entry` needs: each after the files it
    uses, in the order its `use` lines name them. `read(name)` gives a file's items."""
    out: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in out:
            return
        if name in path:
            raise RtError(f"{name}.rt: `use` loop: " + " -> ".join(path + (name,)))
        for dep in uses(read(name)):
            visit(dep, path + (name,))
        out.append(name)
    visit(entry, ())
    return out


def _names(x, out: set[str]) -> None:
    """Every name an expression, statement or body reads, writes or calls."""
    if isinstance(x, list):
        for y in x:
            _names(y, out)
    elif isinstance(x, tuple) and x:
        if x[0] in ("name", "call", "set"):
            out.add(x[1])
        for y in x[1:]:
            _names(y, out)


def _locals(body, out: set[str]) -> None:
    if isinstance(body, list):
        for y in body:
            _locals(y, out)
    elif isinstance(body, tuple) and body:
        if body[0] == "let":
            out.add(body[1])
        for y in body[1:]:
            _locals(y, out)


def defined(items: list[tuple]) -> dict[str, tuple]:
    return {it[1]: it for it in items if it[0] in ("fn", "const", "global", "var", "data")}


_NAMES = IdMemo(50000)


def item_names(it: tuple) -> tuple[tuple[str, ...], frozenset]:
    """Every name item `it` reads, writes or calls (sorted), and those of them it does not bind
    itself (its locals and parameters); once per item per process (the runtime files' items are
    parsed once: alphac.build._parsed)."""
    hit = _NAMES.get(it)
    if hit is not None:
        return hit
    reads: set[str] = set()
    local: set[str] = set()
    if it[0] == "fn":
        _names(it[4], reads)
        _names([e for _, e in it[5]], reads)
        _locals(it[4], local)
        local |= {p for p, _ in it[2]}
    else:
        _names(list(it[2:]), reads)
    return _NAMES.put(it, (tuple(sorted(reads)), frozenset(reads - local)))


def check_modules(units: list[tuple[str, list[tuple], bool]]) -> None:
    """`units`: (file, items, is_module) in program order. A module (a runtime file) may read
    only its own items, those of the files it uses, its externs and the prelude's; every
    extern of any file is defined exactly once in the program, as declared. Generated code
    (is_module False) sees the whole program. RtError names the first violation."""
    by_file = {f: items for f, items, _ in units}
    everything: dict[str, tuple] = {}
    for f, items, _ in units:
        for name, it in defined(items).items():
            if name in everything:
                raise RtError(f"{f}: `{name}` is defined twice")
            everything[name] = it
    for f, items, is_module in units:
        externs = {it[2]: it for it in items if it[0] == "extern"}
        for name, ext in externs.items():
            it = everything.get(name)
            want = {"fn": ("fn",), "const": ("const",), "global": ("global", "var", "data")}[ext[1]]
            if it is None or it[0] not in want:
                raise RtError(f"{f}: extern {ext[1]} `{name}` is not defined by the program")
            if ext[1] == "fn" and ([t for _, t in it[2]], it[3]) != ext[3]:
                raise RtError(f"{f}: extern fn `{name}` is declared ({', '.join(ext[3][0])})"
                              f"{' -> ' + ext[3][1] if ext[3][1] else ''}, defined otherwise")
        if not is_module:
            continue
        visible = set(defined(items)) | set(externs) | BUILTINS
        for dep in uses(items):
            if f"{dep}.rt" not in by_file:
                raise RtError(f"{f}: uses `{dep}`, which the program does not have")
            visible |= set(defined(by_file[f"{dep}.rt"]))
        for dep in ("prelude.rt",):
            visible |= set(defined(by_file.get(dep, [])))
        for it in items:
            if it[0] not in ("fn", "const", "global", "var", "data"):
                continue
            missing = sorted(item_names(it)[1] - visible)
            if missing:
                raise RtError(f"{f}: `{it[1]}` reads `{missing[0]}`, which is neither in the file, "
                              f"in a file it uses, nor declared extern")
