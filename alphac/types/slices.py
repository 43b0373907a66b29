"""Slices, comprehensions and functions: the checker's part that builds values from pieces.

What it decides (docs/language.md, "Slices, comprehensions and functions"):
- an index is a constant integer or a slice `lo:hi` of constant integers; an integer
  expression is a literal, a comprehension's variable, an integral constant (or a function's
  argument that is one), `len(v)` / `len(v, d)` (a dimension), `min`, `max`, `+ - *` and `/`
  rounding down; anything else is E0033, an index or a slice outside its dimension or an empty
  one E0032, both at the offending index's position;
- `v[k]` of any value (a computed one too) is row (coordinate) k: an IR `Pick`, or the item
  itself of a stack; a slice is the `Stack` of its rows, so a slice, a comprehension and an
  array literal of computed values are all the existing IR's stacks and picks, and every
  engine (the interpreter, autodiff, both ISAs, the GPU owners) computes them with the nodes it
  has: no node is new;
- `[body for j in lo..hi for k in ...]`: body at every point, the first `for` outermost, items
  of scalars making a vector, of vectors of one length a matrix (E0037 past that), at most
  MAX_ITEMS items (E0044), no empty range (E0032);
- `def f(a, b) = expr`: a function, expanded where it is called, its arguments computed once
  and bound to its parameters as `let`s are (so an argument read many times is one value);
  the library `alphac/types/nn.alpha` (conv1d, conv2d, pooling), written in Alpha, is visible
  in every file, which may define its own functions of other names.

Requires: mixed into `alphac.types.check.Checker` (its `err`, `expr`, `syms`, `Ctx`, `Symbol`).
Guarantees: reports by code and position, never raises on a well-formed tree.
"""
from __future__ import annotations

import functools
from importlib import resources

from alphac.diag import Sink, Source
from alphac.ir import learner as ir
from alphac.ir.autodiff import pick
from alphac.ir.evaluate import fold
from alphac.parse import ast

MAX_ITEMS = 1 << 16     # the items of one comprehension, at most


@functools.lru_cache(maxsize=1)
def library() -> dict[str, ast.FuncDecl]:
    """The functions of alphac/types/nn.alpha, by name (parsed once)."""
    from alphac.parse import parse_library
    text = resources.files("alphac.types").joinpath("nn.alpha").read_text()
    sink = Sink()
    decls = parse_library(Source("alphac/types/nn.alpha", text), sink)
    assert sink.ok, "alphac/types/nn.alpha does not parse"
    return {d.name: d for d in decls if isinstance(d, ast.FuncDecl)}


class Slicing:
    """The checker's methods for indices, slices, comprehensions and functions."""

    def functions(self, decls) -> None:
        """self.funcs: the library's functions, then the file's (E0021 on a clash)."""
        self.funcs, self.expanding = dict(library()), []
        mine: set[str] = set()
        for d in decls:
            if isinstance(d, ast.FuncDecl):
                if d.name in mine or d.name in self.builtins or d.name in self.later:
                    self.err("E0021", d.name_span, f"`{d.name}` is declared twice")
                mine.add(d.name)
                self.funcs[d.name] = d

    def integer(self, e: ast.Expr, ctx) -> int | None:
        """The value of an integer expression (an index, a slice's bound, a range's end), or
        None (E0033, reported)."""
        if isinstance(e, ast.Num) and e.ival is not None:
            return e.ival
        if isinstance(e, ast.Name) and e.name == ctx.index:
            self.err("E0033", e.span, "the sample index can only be the first index of data")
            return None
        if isinstance(e, ast.Name):
            sym = ctx.lets.get(e.name) or self.syms.get(e.name)
            node = sym and (sym.node if sym.kind == "let" else sym.const)
            if isinstance(node, ir.Const) and not node.shape and float(node.values[0]).is_integer():
                return int(node.values[0])
        if isinstance(e, ast.Unary):
            a = self.integer(e.operand, ctx)
            return None if a is None else -a
        if isinstance(e, ast.Binary) and e.op in "+-*/":
            a = self.integer(e.left, ctx)
            b = a if a is None else self.integer(e.right, ctx)
            if b is None:
                return None
            if e.op == "/" and b == 0:
                self.err("E0033", e.span, "division by zero in an integer expression")
                return None
            return {"+": a + b, "-": a - b, "*": a * b}[e.op] if e.op != "/" else a // b
        if isinstance(e, ast.Call) and e.func in ("min", "max") and len(e.args) == 2:
            a = self.integer(e.args[0], ctx)
            b = a if a is None else self.integer(e.args[1], ctx)
            return None if b is None else (min if e.func == "min" else max)(a, b)
        if isinstance(e, ast.Call) and e.func == "len" and len(e.args) in (1, 2):
            return self.dimension(e, ctx)
        if not isinstance(e, ast.Name) or (ctx.lets.get(e.name) or self.syms.get(e.name)):
            self.err("E0033", e.span, "an index, a slice's bound and a range's end must be "
                                      "constant integers", hint="integer literals, a comprehension's "
                     "variable, integral constants, len(v), min, max, + - * and / (rounding down)")
        else:
            self.unknown(e.name, e.span, ctx)
        return None

    def dimension(self, e: ast.Call, ctx) -> int | None:
        """`len(v)` (v's first dimension) or `len(v, d)`."""
        arg = e.args[0]
        sym = (ctx.lets.get(arg.name) or self.syms.get(arg.name)) if isinstance(arg, ast.Name) else None
        if sym is not None and sym.kind != "data":
            shape = sym.shape
        else:
            node = self.expr(arg, ctx)
            if node is None:
                return None
            shape = node.shape
        d = self.integer(e.args[1], ctx) if len(e.args) == 2 else 0
        if d is None:
            return None
        if not 0 <= d < len(shape):
            self.err("E0032", e.span, f"len of dimension {d} of a value of {len(shape)} dimension(s)")
            return None
        return shape[d]

    def select(self, node: ir.Node, items: list[ast.Expr], ctx, e: ast.Index) -> ir.Node | None:
        """node indexed by `items` (integers and slices), left to right over its dimensions."""
        if len(items) > len(node.shape):
            self.err("E0033", e.span, f"a value of {len(node.shape)} dimension(s) indexed with {len(items)}")
            return None
        parts = []
        for d, it in enumerate(items):
            size = node.shape[d]
            if isinstance(it, ast.Slice):
                lo = 0 if it.lo is None else self.integer(it.lo, ctx)
                hi = size if it.hi is None or lo is None else self.integer(it.hi, ctx)
                if lo is None or hi is None:
                    return None
                if not 0 <= lo <= size or not 0 <= hi <= size:
                    self.err("E0032", it.span, f"slice {lo}:{hi} is out of range for a dimension of {size}")
                    return None
                if hi <= lo:
                    self.err("E0032", it.span, f"slice {lo}:{hi} is empty",
                             hint="a slice lo:hi holds lo, lo + 1, ..., hi - 1; lo < hi")
                    return None
                parts.append((lo, hi, lo == 0 and hi == size))
            else:
                k = self.integer(it, ctx)
                if k is None:
                    return None
                if not 0 <= k < size:
                    self.err("E0032", it.span, f"index {k} is out of range for a dimension of {size}")
                    return None
                parts.append(k)

        def build(n: ir.Node, rest: list) -> ir.Node:
            if not rest:
                return n
            if isinstance(rest[0], int):
                return build(pick(n, rest[0]), rest[1:])
            lo, hi, whole = rest[0]
            if whole and all(isinstance(p, tuple) and p[2] for p in rest[1:]):
                return n
            return self.stacked([build(pick(n, k), rest[1:]) for k in range(lo, hi)], e.span)
        return build(node, parts)

    def stacked(self, items: list[ir.Node], span) -> ir.Node | None:
        """The vector of scalars, or the matrix of vectors of one length, `items` (folded when
        all are constants); E0034 for items of several shapes, E0037 for matrices."""
        shape = items[0].shape
        if any(x.shape != shape for x in items):
            bad = next(x for x in items if x.shape != shape)
            self.err("E0034", span, f"an item of shape {ir.type_text(bad.shape)} among items of "
                                    f"{ir.type_text(shape)}")
            return None
        if len(shape) >= 2:
            self.err("E0037", span, "an array of matrices: values have at most 2 dimensions")
            return None
        return fold(ir.Stack(tuple(items), (len(items),) + shape))

    def comp(self, e: ast.Comp, ctx) -> ir.Node | None:
        """`[body for j in lo..hi ...]`: the stack of body at every point, first `for` outermost."""
        items: list[ir.Node] = []

        def walk(depth: int, lets: dict) -> bool:
            inner = type(ctx)(ctx.kind, ctx.index, lets, ctx.assigned)
            if depth == len(e.loops):
                node = self.expr(e.body, inner)
                items.append(node)
                return node is not None
            var, span, lo_e, hi_e = e.loops[depth]
            lo = self.integer(lo_e, inner)
            hi = None if lo is None else self.integer(hi_e, inner)
            if hi is None:
                return False
            if hi <= lo:
                self.err("E0032", lo_e.span.to(hi_e.span), f"the range {lo}..{hi} is empty",
                         hint="a range lo..hi holds lo, lo + 1, ..., hi - 1; lo < hi")
                return False
            if var in lets or var in self.builtins or var == ctx.index or \
                    var in self.syms and not self.expanding:    # a function's may hide a name
                self.err("E0021", span, f"`{var}` is declared twice")
                return False
            if len(items) + hi - lo > MAX_ITEMS:
                self.err("E0044", e.span, f"a comprehension of more than {MAX_ITEMS} items")
                return False
            return all(walk(depth + 1, {**lets, var: self.symbol("let", (), span,
                                                                 node=ir.Const((), (float(j),)))})
                       for j in range(lo, hi))
        if not walk(0, dict(ctx.lets)):
            return None
        node = self.stacked(items, e.span)
        if node is not None and ctx.kind == "update" and not isinstance(node, ir.Const):
            self.err("E0050", e.span, "a vector built from values in the update",
                     hint="coordinate k may read only coordinate k of its values")
            return None
        return node

    def funcall(self, e: ast.Call, ctx) -> ir.Node | None:
        """A call of a `def`: its body, with each parameter bound to its argument's value."""
        f = self.funcs[e.func]
        if len(e.args) != len(f.params):
            self.err("E0042", e.span, f"`{e.func}` takes {len(f.params)} argument(s), given {len(e.args)}")
            return None
        if e.func in self.expanding:
            self.err("E0040", e.func_span, f"`{e.func}` calls itself",
                     hint="a function is expanded where it is called: it cannot recur")
            return None
        args = [self.expr(a, ctx) for a in e.args]
        if any(a is None for a in args):
            return None
        lets = {p: self.symbol("let", a.shape, span, node=a) for (p, span), a in zip(f.params, args)}
        self.expanding.append(e.func)
        try:
            return self.expr(f.body, type(ctx)(ctx.kind, None, lets, ctx.assigned))
        finally:
            self.expanding.pop()
