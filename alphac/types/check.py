"""The checker: a parsed Alpha file -> a `Learner` (alphac.ir.learner), or coded diagnostics.

What it decides:
- names: one namespace for data, const, param, state and let; declared before use;
- shapes: () scalar, (n,), (n, m); elementwise operations need equal shapes or a scalar; dot needs
  two vectors of one length; sum a vector; indices are literals in range, the sample index as
  the first index of data, or one element of the sample's data as the only index of a declared
  array (`E[tok[i]]`: a Gather; a param so indexed in the loss is read there no other way);
- integer data (`data tok: i64[...]`, whole numbers within 2^53): its elements are read only as
  such an index, as onehot's label or converted, `f64(tok[i, t])` (E0125 elsewhere), from an
  integer .npy file (E0060);
- constants are folded in binary64 (`alphac.ir.evaluate.fold`), wherever all operands are
  constant, and must be finite;
- the learner's structure: data outside the loss (and predict), grad outside the update,
  assignment targets; predict, a scalar or a vector, checked as the loss is;
- per-coordinate updates: no product, fixed index or data inside `update`; its reductions
  (dot, sum, max(v): reduced scalars, computed first) read only gradients, the step's starting
  state, scalar state and constants, and no other reduction; coordinate values (params, their
  gradients, and state updated from them) meet only at equal shapes, and one reduction's
  operands are of one shape and in one group. The
  states that meet form coordinate groups (`Group`); shape-() state that never meets a coordinate
  value is scalar state, replicated on every owner;
- memory demand: each state's `nbytes` (8 per coordinate); the learner's values in all
  (constants, data, state) at most `MAX_VALUES`, counted before a state is allocated and before
  a `.npy` file is read (E0044).

Requires: an `ast.Module`. Guarantees: never raises on a well-formed tree; reports every error it
can find in one run (a bad expression becomes `None` and silences the errors it would cause).
"""
from __future__ import annotations

import difflib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from alphac.diag import Sink, Span
from alphac.files import read_regular
from alphac.formats import MAX_VALUES, NPY_HEADER
from alphac.ir import learner as ir
from alphac.ir.evaluate import fold
from alphac.ir.learner import type_text, wide
from alphac.parse import ast
from alphac.parse.optim import OptimizerUse
from alphac.types.optim import HyperLet, expand as expand_optimizers
from alphac.types.slices import Slicing

# name -> arity. Elementwise functions (alphac.math: exact or correctly rounded), two library
# compositions of them (COMPOSITIONS), and the reductions.
ELEMENTWISE = {"sqrt": 1, "exp": 1, "log": 1, "log1p": 1, "expm1": 1, "tanh": 1, "abs": 1,
               "sin": 1, "cos": 1, "pow": 2,
               "relu": 1, "max": 2, "min": 2, "sigmoid": 1, "softplus": 1}
REDUCTIONS = {"dot": 2, "sum": 1, "outer": 2, "logsumexp": 1, "onehot": 2}
BUILTINS = {**ELEMENTWISE, **REDUCTIONS, "grad": 1, "load": 1, "where": 3}
CLOCK = ("step", "epoch")          # the update's clock (ir.Clock); a declaration may hide them
COMPARE = {">": ("gt", False), ">=": ("ge", False), "<": ("gt", True), "<=": ("ge", True),
           "==": ("eq", False), "!=": ("ne", False)}    # op -> (ir.Where's cmp, operands swapped)
VARIADIC = {"max": (1, 2)}         # max(v) of a vector is a reduction; max(a, b) elementwise
MAX_ONEHOT = 1 << 16
MAX_POW = 8


@dataclass
class Symbol:
    kind: str                      # data | const | param | state | let
    shape: tuple[int, ...]
    span: Span
    const: ir.Const | None = None  # consts
    node: ir.Node | None = None    # lets


@dataclass
class Ctx:
    kind: str                      # "const" | "loss" | "predict" | "update"
    index: str | None = None       # the sample index name, in the loss and predict
    lets: dict[str, Symbol] = field(default_factory=dict)
    assigned: set[str] = field(default_factory=set)


class Checker(Slicing):
    builtins, symbol = None, Symbol           # what alphac.types.slices reads (BUILTINS: below)

    def __init__(self, module: ast.Module, sink: Sink, base_dir: Path | None):
        self.module = module
        self.sink = sink
        self.base_dir = base_dir
        self.syms: dict[str, Symbol] = {}
        self.later: dict[str, Span] = {}
        self.broken: set[str] = set()  # declarations already reported: their uses stay silent
        self.consts: list[ir.ConstDef] = []
        self.data: list[ir.DataDef] = []
        self.states: list[ir.StateDef] = []
        self.loss: ir.Node | None = None
        self.update: list[ir.Assign] = []
        self.loss_decl: ast.LossDecl | None = None
        self.predict_decl: ast.LossDecl | None = None
        self.values = 0                # how many values the declarations so far hold
        self.clocks: dict[str, ir.Clock] = {}   # `step` and `epoch` in the update
        self.ints: set[str] = set()    # i64 data, and the ast.Index nodes that may read it:
        self.int_sites: dict[int, ast.Expr] = {}   # an index's (E[tok[i]]), a label's, a conversion's

    def admit(self, count: int, span: Span, what: str) -> bool:
        """Count `count` more values against MAX_VALUES, before they are allocated."""
        self.values += count
        if self.values <= MAX_VALUES:
            return True
        self.err("E0044", span, f"{what} makes the learner hold {self.values} values; at most "
                                f"{MAX_VALUES} (2^20) are compiled")
        return False

    def err(self, code: str, span: Span, msg: str, hint: str | None = None) -> None:
        self.sink.error(code, span, msg, hint)

    # -- declarations ------------------------------------------------------------------------
    def run(self) -> ir.Learner | None:
        m = self.module
        for d in m.decls:
            if isinstance(d, (ast.DataDecl, ast.ConstDecl, ast.StateDecl)):
                self.later.setdefault(d.name, d.name_span)
        losses = [d for d in m.decls if isinstance(d, ast.LossDecl) and d.kind == "loss"]
        predicts = [d for d in m.decls if isinstance(d, ast.LossDecl) and d.kind == "predict"]
        updates = [d for d in m.decls if isinstance(d, ast.UpdateDecl)]
        self.functions(m.decls)
        for extra in losses[1:] + predicts[1:]:
            self.err("E0059", extra.span, f"a second `{extra.kind}`",
                     hint=f"a learner has at most one {extra.kind}")
        for extra in updates[1:]:
            self.err("E0059", extra.span, "a second `update`", hint="merge the two blocks")
        if not updates and m.header is not None and not any(isinstance(d, OptimizerUse)
                                                            for d in m.decls):
            self.err("E0059", m.header.span, f"learner `{m.header.name}` has no `update` block",
                     hint="add `update { ... }` that assigns the state")
        for d in m.decls:
            if isinstance(d, (ast.ConstDecl, ast.StateDecl)) and d.type and d.type.elem == "i64":
                self.err("E0036", d.type.span, f"`{d.name}` is declared i64, a type of data only",
                         hint="indices and labels are data; a const, param or state is f64")
            if isinstance(d, ast.ConstDecl):
                self.decl_const(d)
            elif isinstance(d, ast.DataDecl):
                self.decl_data(d)
            elif isinstance(d, ast.StateDecl):
                self.decl_state(d)
        nsamples = self.sample_count()
        if losses:
            self.loss_decl = losses[0]
            self.loss = self.decl_loss(losses[0], nsamples)
            if self.loss is not None:
                self.gathered_only(self.loss)
        predict = None
        if predicts:
            self.predict_decl = predicts[0]
            predict = self.decl_loss(predicts[0], nsamples)
        batch, seed = self.decl_batch(m, nsamples, bool(losses))
        contract = self.decl_contract(m)
        extra = expand_optimizers(self, m)      # alphac.types.optim: after the states
        if updates or extra:
            self.decl_update(updates[0] if updates else None, extra)
        groups = self.coordinate_groups()
        self.warnings(predict)
        if not self.sink.ok or m.header is None:
            return None
        return ir.Learner(m.header.name, self.consts, self.data, self.states, nsamples,
                          self.loss, self.update, groups,
                          loss_line=losses[0].span.line_col[0] if losses else 0, predict=predict,
                          batch=batch, shuffle=seed, contract=contract)

    def define(self, name: str, span: Span, sym: Symbol, scope: dict[str, Symbol] | None = None) -> bool:
        if name in BUILTINS or name in self.syms or (scope is not None and name in scope):
            prev = self.syms.get(name) or (scope or {}).get(name)
            where = f" (first at line {prev.span.line_col[0]})" if prev else " (a builtin)"
            self.err("E0021", span, f"`{name}` is declared twice{where}")
            return False
        (self.syms if scope is None else scope)[name] = sym
        return True

    def check_type(self, t: ast.TypeExpr | None, shape: tuple[int, ...], span: Span, what: str) -> bool:
        if t is not None and t.dims != shape:
            says = type_text(shape).replace("f64", t.elem), type_text(t.dims).replace("f64", t.elem)
            self.err("E0031", span, f"{what} has shape {says[0]}, but its type says {says[1]}")
            return False
        return True

    def finite(self, c: ir.Const, span: Span) -> bool:
        if all(math.isfinite(v) for v in c.values):
            return True
        self.err("E0043", span, "value is not finite in binary64")
        return False

    def decl_const(self, d: ast.ConstDecl) -> None:
        if isinstance(d.value, ast.Call) and d.value.func == "load":    # its values: the identity's
            node = self.load_npy(d.value)
        else:
            node = self.const_value(d.value)
        if node is None or not self.check_type(d.type, node.shape, d.value.span, f"`{d.name}`") \
                or not self.finite(node, d.value.span) \
                or not self.admit(node.size, d.value.span, f"`{d.name}`"):
            self.define(d.name, d.name_span, Symbol("const", d.type.dims if d.type else (), d.name_span))
            return
        if self.define(d.name, d.name_span, Symbol("const", node.shape, d.name_span, const=node)):
            self.consts.append(ir.ConstDef(d.name, node.shape, node.values))

    def decl_data(self, d: ast.DataDecl) -> None:
        file = None
        if isinstance(d.value, ast.Call) and d.value.func == "load":
            file = self.load_data(d.value)     # read at run time: checked here, not compiled
            shape = file.shape if file is not None else None
            node = None
        else:
            node = self.const_value(d.value)
            shape = node.shape if node is not None else None
        ok = shape is not None and self.check_type(d.type, shape, d.value.span, f"`{d.name}`")
        if ok and not shape:
            self.err("E0035", d.value.span, f"data `{d.name}` is a scalar; data has one entry per sample",
                     hint="declare it `const` if it is the same for every sample")
            ok = False
        if ok and node is not None and not self.finite(node, d.value.span):
            ok = False
        if ok and node is not None and not self.admit(node.size, d.value.span, f"`{d.name}`"):
            ok = False
        if d.type is not None and d.type.elem == "i64":
            self.ints.add(d.name)
            ok = ok and self.integer_data(d, file, node)
        if not ok:
            self.broken.add(d.name)
            shape = d.type.dims if d.type else (1,)
        if self.define(d.name, d.name_span, Symbol("data", shape, d.name_span)) and ok:
            if file is not None:
                self.data.append(ir.DataDef(d.name, shape, None, file))
            else:
                self.data.append(ir.DataDef(d.name, shape, node.values))
            self.data[-1].integer = d.name in self.ints

    def integer_data(self, d: ast.DataDecl, file, node: ir.Const | None) -> bool:
        """Whether `data NAME: i64[...]` holds integers: its file's dtype and values
        (alphac.npy.not_integer, E0060), or its literal's values (E0036)."""
        from alphac import npy
        if file is not None:
            why = npy.not_integer(file)
            if why:
                self.err("E0060", d.value.args[0].span, f"`{file.rel}` {why}")
            return why is None
        bad = next((v for v in node.values if v != math.floor(v) or abs(v) > 1 << 53), None)
        if bad is not None:
            self.err("E0036", d.value.span, f"`{d.name}` is declared i64 but holds {bad!r}, not a "
                     "whole number within 2^53 in magnitude", hint="declare it f64 to hold numbers")
        return bad is None

    def load_data(self, call: ast.Call):
        """The .npy file of `data NAME = load("file.npy")` (alphac.npy.scan), or None (reported)."""
        from alphac import npy
        rel = self.load_arg(call)
        if rel is None:
            return None
        try:
            return npy.scan(npy.runtime_path(str((self.base_dir or Path(".")) / rel)), rel)
        except OSError as e:
            self.err("E0060", call.args[0].span, f"cannot read `{rel}`: {e.strerror or e}")
        except npy.NpyError as e:
            self.err("E0060", call.args[0].span, f"`{rel}` {e}")
        return None

    def decl_state(self, d: ast.StateDecl) -> None:
        shape = d.type.dims
        whole_load = isinstance(d.init, ast.Call) and d.init.func == "load"   # compiled in, as a
        init = self.load_npy(d.init) if whole_load else self.const_value(d.init)   # const's is
        values = None
        if not self.admit(math.prod(shape), d.type.span, f"`{d.name}`"):
            init = None
        if init is not None:
            if init.shape == shape:
                values = init.values
            elif not init.shape:
                values = init.values * math.prod(shape)
            else:
                self.err("E0031", d.init.span,
                         f"initial value has shape {type_text(init.shape)}, but `{d.name}` is {type_text(shape)}",
                         hint="a scalar initial value fills every coordinate")
            if values is not None and not self.finite(init, d.init.span):
                values = None
        if self.define(d.name, d.name_span, Symbol(d.kind, shape, d.name_span)) and values is not None:
            self.states.append(ir.StateDef(d.name, d.kind, shape, tuple(values)))

    def load_arg(self, call: ast.Call) -> str | None:
        """The path `load` names (relative to the source), or None (E0042, reported)."""
        if len(call.args) != 1 or not isinstance(call.args[0], ast.Str):
            self.err("E0042", call.span, "load takes one string: the .npy file's path")
            return None
        return call.args[0].value

    def load_npy(self, call: ast.Call) -> ir.Const | None:
        """The values of `const NAME = load("file.npy")`, compiled in (or None, reported)."""
        rel = self.load_arg(call)
        if rel is None:
            return None
        path = (self.base_dir or Path(".")) / rel
        try:
            raw = read_regular(path, 8 * MAX_VALUES + NPY_HEADER)
        except OSError as e:
            self.err("E0060", call.args[0].span, f"cannot read `{rel}`: {e.strerror or e}")
            return None
        try:
            shape, values = npy_values(raw)
        except ValueError as e:
            self.err("E0060", call.args[0].span, f"`{rel}` {e}")
            return None
        return ir.Const(shape, values)

    def sample_count(self) -> int | None:
        if not self.data:
            return None
        first = self.data[0]
        for d in self.data[1:]:
            if d.shape[0] != first.shape[0]:
                self.err("E0035", self.syms[d.name].span,
                         f"data `{d.name}` has {d.shape[0]} samples, but `{first.name}` has {first.shape[0]}")
        return first.shape[0]

    def decl_loss(self, d: ast.LossDecl, nsamples: int | None) -> ir.Node | None:
        """The loss, or predict (d.kind): a function of one sample, checked alike. The loss is a
        scalar; predict a scalar (a regression output) or a vector (class scores)."""
        what, code = ("the loss", "E0057") if d.kind == "loss" else ("predict", "E0062")
        if nsamples is None:
            if self.broken:                  # its data was refused already
                return None
            self.err("E0058", d.span, f"the learner has a {d.kind} but no data",
                     hint="declare the samples with `data NAME = [...]`")
        if d.index in self.syms or d.index in BUILTINS:
            self.err("E0021", d.index_span, f"the sample index `{d.index}` hides a declared name")
            return None
        ctx = Ctx(d.kind, index=d.index)
        for st in d.body.stmts:
            if isinstance(st, ast.Assign):
                self.err("E0052", st.name_span, f"{what} cannot assign state",
                         hint="state changes only in `update`; use `let` for a local value")
            else:
                self.let(st, ctx)
        if d.body.result is None:
            self.err(code, d.body.span, f"the {d.kind} block does not end with the "
                                        f"{'loss expression' if d.kind == 'loss' else 'prediction'}")
            return None
        node = self.expr(d.body.result, ctx)
        if node is not None and d.kind == "loss" and node.shape:
            self.err(code, d.body.result.span, f"the loss has shape {type_text(node.shape)}, not f64",
                     hint="reduce it with sum(...) or dot(...)")
            return None
        if node is not None and len(node.shape) > 1:
            self.err(code, d.body.result.span, f"predict gives {type_text(node.shape)}",
                     hint="a prediction is a scalar (a regression output) or a vector (one score "
                          "per class)")
            return None
        return node

    def decl_batch(self, m: ast.Module, nsamples: int | None, has_loss: bool) -> tuple[int | None, int | None]:
        """`batch N` and `order ...` (E0061): the batch size (None: the full batch) and the
        shuffle's seed (None: in sequence)."""
        batches = [d for d in m.decls if isinstance(d, ast.BatchDecl)]
        orders = [d for d in m.decls if isinstance(d, ast.OrderDecl)]
        for extra in batches[1:] + orders[1:]:
            self.err("E0061", extra.span, "declared twice", hint="a learner has one batch size and one order")
        batch = seed = None
        if batches:
            b = batches[0].size
            if not has_loss:
                self.err("E0061", batches[0].span, "`batch` in a learner without a loss",
                         hint="minibatches choose the samples a gradient sums over")
            elif nsamples is None:
                pass                         # no data: reported with the data (or the loss)
            elif b.ival is None or not 1 <= b.ival <= nsamples:
                self.err("E0061", b.span, f"the batch size must be an integer from 1 to the "
                                          f"sample count ({nsamples})")
            else:
                batch = b.ival
        if orders:
            o = orders[0]
            if not batches:
                self.err("E0061", o.span, "`order` without `batch`",
                         hint="declare `batch N`; the full batch has no order")
            elif o.kind == "shuffle":
                if o.seed.ival is None or not 0 <= o.seed.ival < 1 << 63:
                    self.err("E0061", o.seed.span, "the seed must be an integer from 0 to 2^63 - 1")
                else:
                    seed = o.seed.ival
        return batch, seed

    def decl_contract(self, m: ast.Module) -> str:
        """`contract ordered | exact_sum` (E0063): the numerical contract; `ordered` by default."""
        decls = [d for d in m.decls if isinstance(d, ast.ContractDecl)]
        for extra in decls[1:]:
            self.err("E0063", extra.span, "the contract is declared twice",
                     hint="a learner has one numerical contract")
        if not decls:
            return "ordered"
        if decls[0].name not in ir.CONTRACTS:
            self.err("E0063", decls[0].name_span, f"unknown contract `{decls[0].name}`",
                     hint="the contracts are " + " and ".join(f"`{c}`" for c in ir.CONTRACTS))
            return "ordered"
        return decls[0].name

    def let(self, st: ast.Let, ctx: Ctx) -> None:
        node = self.expr(st.value, ctx)
        if node is not None and node.shape and isinstance(st, HyperLet):
            self.err("E0071", st.value.span, f"`{st.hyper}` is a number, not an array")
            node = None
        self.define(st.name, st.name_span,
                    Symbol("let", node.shape if node else (), st.name_span, node=node), ctx.lets)

    def decl_update(self, d: ast.UpdateDecl | None, extra: list = ()) -> None:
        ctx = Ctx("update")
        if d is not None and d.body.result is not None:
            self.err("E0010", d.body.result.span, "expected a statement, found an expression",
                     hint="update statements are `NAME = expr` or `let NAME = expr`")
        for st in (d.body.stmts if d else ()) + tuple(extra):
            if isinstance(st, ast.Let):
                self.let(st, ctx)
                continue
            sym = ctx.lets.get(st.name) or self.syms.get(st.name)
            node = self.expr(st.value, ctx)
            if sym is None:
                self.unknown(st.name, st.name_span, ctx)
                continue
            if sym.kind not in ("param", "state"):
                self.err("E0052", st.name_span, f"`{st.name}` is a {sym.kind}, not a param or state")
                continue
            if st.name in ctx.assigned:
                self.err("E0053", st.name_span, f"`{st.name}` is assigned twice in the update",
                         hint="later statements already read the new value; combine the two")
                continue
            ctx.assigned.add(st.name)
            if node is None:
                continue
            if node.shape != sym.shape:
                if node.shape:
                    self.err("E0031", st.value.span,
                             f"value has shape {type_text(node.shape)}, but `{st.name}` is {type_text(sym.shape)}")
                    continue
                node = ir.Bcast(node, sym.shape)
            self.update.append(ir.Assign(st.name, node, st.span.line_col[0]))

    # -- expressions --------------------------------------------------------------------------
    def unknown(self, name: str, span: Span, ctx: Ctx | None = None) -> None:
        """E0020 (or E0056 for a sample index out of its place), with the nearest name in scope
        (a declaration, or a `let` of the body it is in) as a hint."""
        for d in (self.loss_decl, self.predict_decl):
            if d is not None and name == d.index:
                self.err("E0056", span, f"the sample index `{name}` is used outside the "
                                        f"{'loss' if d.kind == 'loss' else 'predict'}",
                         hint=f"`{name}` exists only inside `{d.kind}({name})`")
                return
        if name in self.later:
            self.err("E0020", span, f"`{name}` is used before its declaration",
                     hint=f"it is declared at line {self.later[name].line_col[0]}; move that line up")
            return
        close = difflib.get_close_matches(name, sorted({*self.syms, *(ctx.lets if ctx else ())}), n=1)
        self.err("E0020", span, f"unknown name `{name}`",
                 hint=f"did you mean `{close[0]}`?" if close else None)

    def const_value(self, e: ast.Expr) -> ir.Const | None:
        node = self.expr(e, Ctx("const"))
        if node is not None and not isinstance(node, ir.Const):
            self.err("E0039", e.span, "this value must be a constant")
            return None
        return node

    def expr(self, e: ast.Expr, ctx: Ctx) -> ir.Node | None:
        node = self._expr(e, ctx)
        return fold(node) if node is not None else None

    def _expr(self, e: ast.Expr, ctx: Ctx) -> ir.Node | None:
        if isinstance(e, ast.Num):
            return ir.Const((), (e.value,))
        if isinstance(e, ast.Str):
            self.err("E0010", e.span, "a string is only allowed in load(\"file.npy\")")
            return None
        if isinstance(e, ast.Name):
            return self.name(e, ctx)
        if isinstance(e, ast.Unary):
            a = self.expr(e.operand, ctx)
            return ir.Unary("neg", a, a.shape) if a is not None else None
        if isinstance(e, ast.Binary):
            return self.binary(e, ctx)
        if isinstance(e, ast.Compare):
            self.err("E0074", e.span, f"a comparison (`{e.op}`) is not a number",
                     hint="a comparison is only the condition of `where(a < b, x, y)`")
            return None
        if isinstance(e, ast.Call):
            return self.call(e, ctx)
        if isinstance(e, ast.Index):
            return self.index(e, ctx)
        if isinstance(e, ast.ArrayLit):
            return self.array(e, ctx)
        if isinstance(e, ast.Comp):
            return self.comp(e, ctx)
        if isinstance(e, ast.Slice):
            self.err("E0033", e.span, "a slice `lo:hi` is only an index, as in `v[lo:hi]`")
            return None
        raise TypeError(type(e).__name__)

    def name(self, e: ast.Name, ctx: Ctx) -> ir.Node | None:
        if ctx.index is not None and e.name == ctx.index:
            self.err("E0033", e.span, f"the sample index `{e.name}` can only index data, as in `x[{e.name}]`")
            return None
        sym = ctx.lets.get(e.name) or self.syms.get(e.name)
        if sym is None and e.name in CLOCK and e.name not in self.later:   # a later one: E0020
            if ctx.kind != "update":
                self.err("E0075", e.span, f"`{e.name}` outside the update",
                         hint="`step` and `epoch` count the run's steps and epochs: values only in `update`")
                return None
            return self.clocks.setdefault(e.name, ir.Clock(e.name))    # one node each
        if sym is None:
            if e.name in BUILTINS:
                self.err("E0042", e.span, f"`{e.name}` is a builtin function; call it")
            else:
                self.unknown(e.name, e.span, ctx)
            return None
        if sym.kind == "let":
            return sym.node
        if sym.kind == "const":
            return sym.const
        if sym.kind == "data":
            if ctx.index is not None:
                self.err("E0033", e.span, f"data `{e.name}` must be indexed by the sample index",
                         hint=f"write `{e.name}[{ctx.index}]`")
            else:
                self.data_outside(e.span, e.name, ctx)
            return None
        if ctx.kind == "const":
            self.err("E0039", e.span, f"`{e.name}` is a {sym.kind}, not a constant")
            return None
        version = 1 if e.name in ctx.assigned else 0
        return ir.Read(e.name, sym.shape, version)

    def data_outside(self, span: Span, name: str, ctx: Ctx) -> None:
        if ctx.kind == "update":
            self.err("E0050", span, f"the update reads data `{name}`",
                     hint="data is per sample and only the loss reads it")
        else:
            self.err("E0038", span, f"data `{name}` is used outside the loss")

    def binary(self, e: ast.Binary, ctx: Ctx) -> ir.Node | None:
        if e.op == "^":
            a, exp = self.expr(e.left, ctx), e.right
            if not isinstance(exp, ast.Num) or exp.ival is None or not 1 <= exp.ival <= MAX_POW:
                self.err("E0041", exp.span, "the exponent must be an integer literal from 1 to 8",
                         hint="any other power is pow(a, b)")
                return None
            if a is None:
                return None
            return a if exp.ival == 1 else ir.Pow(a, exp.ival, a.shape)
        chain = [e]                  # `a + b + c ...` is a left spine: walked, not recursed into
        while isinstance(chain[-1].left, ast.Binary) and chain[-1].left.op != "^":
            chain.append(chain[-1].left)
        a = self.expr(chain[-1].left, ctx)
        for link in reversed(chain):
            b = self.expr(link.right, ctx)
            a = self.arith(link, a, b, ctx) if a is not None and b is not None else None
        return a

    def shapes_meet(self, e, what: str, a: ir.Node, b: ir.Node, ctx: Ctx) -> bool:
        """Elementwise operands: equal shapes, a scalar, or (in the loss) a vector f64[C] over
        the rows of an f64[R, C] (E0030; E0050 in the update, where it would read across
        coordinates)."""
        if a.shape == b.shape or not a.shape or not b.shape:
            return True
        rows = len(a.shape) + len(b.shape) == 3 and wide(a.shape, b.shape)[1:] == min(
            a.shape, b.shape, key=len)
        if not rows:
            self.err("E0030", e.span, f"`{what}` of {type_text(a.shape)} and {type_text(b.shape)}",
                     hint="elementwise operations need equal shapes, a scalar, or a vector "
                          "f64[C] over the rows of an f64[R, C]")
            return False
        if ctx.kind == "update" and not (isinstance(a, ir.Const) and isinstance(b, ir.Const)):
            self.err("E0050", e.span, "a vector over a matrix's rows in the update",
                     hint="coordinate [r, c] may read only coordinate [r, c] of its values")
            return False
        return True

    def arith(self, e: ast.Binary, a: ir.Node, b: ir.Node, ctx: Ctx) -> ir.Node | None:
        if e.op != "@" and not self.shapes_meet(e, e.op, a, b, ctx):
            return None
        if e.op == "@":
            return self.matmul(e, a, b, ctx)
        op = {"+": "add", "-": "sub", "*": "mul", "/": "div"}[e.op]
        return fold(ir.Elem(op, a, b, wide(a.shape, b.shape)))

    def matmul(self, e: ast.Binary, a: ir.Node, b: ir.Node, ctx: Ctx) -> ir.Node | None:
        if ctx.kind == "update" and not (isinstance(a, ir.Const) and isinstance(b, ir.Const)):
            self.err("E0050", e.span, "`@` in the update reads every coordinate",
                     hint="products belong in the loss; the update works coordinate by coordinate")
            return None
        if len(a.shape) == 2 and len(b.shape) == 1 and a.shape[1] == b.shape[0]:
            return fold(ir.MatVec(a, b, a.shape[:1]))
        if len(a.shape) == 1 and len(b.shape) == 2 and a.shape[0] == b.shape[0]:
            return fold(ir.VecMat(a, b, b.shape[1:]))
        self.err("E0030", e.span, f"`@` of {type_text(a.shape)} and {type_text(b.shape)}",
                 hint="`A @ v` takes f64[R, C] and f64[C]; `u @ A` takes f64[R] and f64[R, C]")
        return None

    def call(self, e: ast.Call, ctx: Ctx) -> ir.Node | None:
        if e.func in self.funcs and e.func not in ctx.lets:
            return self.funcall(e, ctx)
        if e.func == "len" and len(e.args) in (1, 2):
            n = self.dimension(e, ctx)
            return None if n is None else ir.Const((), (float(n),))
        if e.func == "f64":
            return self.conversion(e, ctx)
        if e.func not in BUILTINS:
            if e.func in self.syms or e.func in ctx.lets:
                self.err("E0033", e.func_span, f"`{e.func}` is not a function",
                         hint=f"index arrays with brackets: `{e.func}[...]`")
                return None
            close = difflib.get_close_matches(e.func, list(BUILTINS), n=1)
            self.err("E0040", e.func_span, f"`{e.func}` is not an operation of Alpha",
                     hint=f"did you mean `{close[0]}`?" if close else
                     "functions: " + ", ".join(sorted(ELEMENTWISE)) + ", " + ", ".join(sorted(REDUCTIONS)))
            return None
        arity = VARIADIC.get(e.func, (BUILTINS[e.func],))
        if len(e.args) not in arity:
            self.err("E0042", e.span, f"`{e.func}` takes {' or '.join(map(str, arity))} "
                                      f"argument(s), given {len(e.args)}")
            return None
        if e.func == "onehot":
            return self.onehot(e, ctx)
        if e.func == "load":
            self.err("E0060", e.span, "load(...) can only be the whole value of a data or const "
                                   "declaration, or a param's or state's initial value")
            return None
        if e.func == "grad":
            return self.grad(e, ctx)
        if e.func == "where":
            return self.where(e, ctx)
        args = [self.expr(a, ctx) for a in e.args]
        if any(a is None for a in args):
            return None
        reduction = e.func in REDUCTIONS or (e.func == "max" and len(args) == 1)
        if ctx.kind == "update" and reduction and not all(isinstance(a, ir.Const) for a in args):
            if not self.update_reduction(e, args):
                return None
        if e.func in ("sum", "max", "logsumexp") and len(args) == 1:
            if len(args[0].shape) != 1 and not (ctx.kind == "update" and e.func != "logsumexp"
                                                and len(args[0].shape) in (0, 2)):
                self.err("E0030", e.args[0].span, f"{e.func} takes a vector, given {type_text(args[0].shape)}")
                return None
            if e.func == "sum":
                return ir.Sum(args[0])
            return fold(ir.Max(args[0])) if e.func == "max" else logsumexp(args[0])
        if e.func == "outer":
            a, b = args
            if len(a.shape) != 1 or len(b.shape) != 1:
                self.err("E0030", e.span, f"outer of {type_text(a.shape)} and {type_text(b.shape)}",
                         hint="outer takes two vectors")
                return None
            return fold(ir.Outer(a, b, a.shape + b.shape))
        if e.func in ELEMENTWISE:
            if len(args) == 2 and not self.shapes_meet(e, e.func, args[0], args[1], ctx):
                return None
            return elementwise(e.func, args)
        a, b = args
        if len(a.shape) != 1 and not (ctx.kind == "update" and len(a.shape) in (0, 2)) or a.shape != b.shape:
            self.err("E0030", e.span, f"dot of {type_text(a.shape)} and {type_text(b.shape)}",
                     hint="dot takes two vectors of the same length")
            return None
        return ir.Dot(a, b)

    def update_reduction(self, e: ast.Call, args: list[ir.Node]) -> bool:
        """`dot`, `sum` or `max(v)` in the update: a reduced scalar, computed before every
        statement (docs/language.md), so its operands may read the gradients, the step's
        starting state and constants, coordinate by coordinate, and nothing else (E0050)."""
        why = None
        if e.func not in ("dot", "sum", "max"):
            why = f"`{e.func}` in the update reads every coordinate (its reductions: dot, sum, max(v))"
        for n in ir.postorder(args):
            if why is None and isinstance(n, (ir.Dot, ir.Sum, ir.Max)):
                why = f"a reduction inside `{e.func}`'s operand in the update"
            elif why is None and isinstance(n, ir.Read) and n.version:
                why = f"`{e.func}` in the update reads `{n.name}` after its assignment"
        if why is not None:
            self.err("E0050", e.span, why, hint="the update's reductions (dot, sum, max(v)) are "
                     "computed first, from the gradients and the state the step starts from")
        return why is None

    def conversion(self, e: ast.Call, ctx: Ctx) -> ir.Node | None:
        """`f64(tok[i, t])`: i64 data read as the numbers it holds (the same binary64 values)."""
        arg = e.args[0] if len(e.args) == 1 else None
        if not (isinstance(arg, ast.Index) and isinstance(arg.base, ast.Name) and arg.base.name in self.ints):
            self.err("E0042", e.span, "`f64(...)` converts i64 data read by the sample index",
                     hint="as in `f64(tok[i, 0])`, for `data tok: i64[N, T]`")
            return None
        self.int_sites[id(arg)] = arg        # kept: an id no other node takes
        return self.expr(arg, ctx)

    def onehot(self, e: ast.Call, ctx: Ctx) -> ir.Node | None:
        label, count = e.args
        if not isinstance(count, ast.Num) or count.ival is None or not 1 <= count.ival <= MAX_ONEHOT:
            self.err("E0041", count.span, f"onehot's length must be an integer literal from 1 to {MAX_ONEHOT}")
            return None
        self.int_sites[id(label)] = label
        k = self.expr(label, ctx)
        if k is None:
            return None
        if k.shape:
            self.err("E0030", label.span, f"onehot takes a scalar label, given {type_text(k.shape)}",
                     hint="a label is one number per sample, as in `onehot(y[i], 10)`")
            return None
        if ctx.kind == "update" and not isinstance(k, ir.Const):
            self.err("E0050", e.span, "`onehot` in the update builds a vector from one value",
                     hint="labels belong in the loss")
            return None
        return fold(ir.OneHot(k, (count.ival,)))

    def where(self, e: ast.Call, ctx: Ctx) -> ir.Node | None:
        """`where(a OP b, x, y)`: x where the comparison holds, else y, elementwise (E0074 for
        a condition that is not a comparison; E0030 for shapes that are not one shape and
        scalars)."""
        c = e.args[0]
        if not isinstance(c, ast.Compare):
            self.err("E0074", c.span, "the condition of `where` is not a comparison",
                     hint="write `where(a < b, x, y)`: one of < <= > >= == != between two values")
            return None
        a, b, x, y = (self.expr(v, ctx) for v in (c.left, c.right, e.args[1], e.args[2]))
        if a is None or b is None or x is None or y is None:
            return None
        shape = wide(a.shape, b.shape, x.shape, y.shape)
        if any(v.shape and v.shape != shape for v in (a, b, x, y)):
            self.err("E0030", e.span, "`where` of " + ", ".join(type_text(v.shape) for v in (a, b, x, y)),
                     hint="the comparison's two operands and both values have one shape, or are scalars")
            return None
        cmp, swap = COMPARE[c.op]
        return fold(ir.Where(b, a, x, y, shape, cmp) if swap else ir.Where(a, b, x, y, shape, cmp))

    def grad(self, e: ast.Call, ctx: Ctx) -> ir.Node | None:
        arg = e.args[0]
        if ctx.kind != "update":
            self.err("E0054", e.span, "grad(...) can only be used in the update")
            return None
        if self.loss_decl is None:
            self.err("E0055", e.span, "grad(...) needs a loss to differentiate",
                     hint="declare `loss(i) = ...`")
            return None
        sym = self.syms.get(arg.name) if isinstance(arg, ast.Name) else None
        if sym is None or sym.kind != "param":
            what = f"`{arg.name}` is a {sym.kind}" if sym else "its argument is not a declared param"
            self.err("E0054", arg.span, f"grad of something that is not a param: {what}")
            return None
        return ir.Grad(arg.name, sym.shape)

    def index(self, e: ast.Index, ctx: Ctx) -> ir.Node | None:
        name = e.base.name if isinstance(e.base, ast.Name) else None
        sym = ctx.lets.get(name) or self.syms.get(name) if name else None
        if ctx.index is not None and e.indices and self.data_element(e.indices[0]):
            if sym is None or sym.kind not in ("param", "state", "const"):
                self.err("E0033", e.base.span, "only a declared param, state or const is indexed by "
                         "data", hint="as in `E[tok[i]]`, an embedding's row")
                return None
            node = self.name(e.base, ctx)
            return node and self.gather(e, name, node, ctx)
        if sym is None or sym.kind != "data":       # any value: a declared name, a let, a result
            node = self.expr(e.base, ctx)
            node = node and self.select(node, list(e.indices), ctx, e)
            if ctx.kind == "update" and node is not None and not isinstance(node, ir.Const):
                self.err("E0050", e.span, "a fixed index or a slice in the update",
                         hint="coordinate k may read only coordinate k; write the whole name")
                return None
            return node
        idx = list(e.indices)
        if len(idx) > len(sym.shape):
            self.err("E0033", e.span, f"`{name}` has {len(sym.shape)} dimension(s), indexed with {len(idx)}")
            return None
        if sym.kind == "data":
            first = idx.pop(0)
            if ctx.index is None:
                self.data_outside(e.span, name, ctx)
                return None
            if not (isinstance(first, ast.Name) and first.name == ctx.index):
                self.err("E0033", first.span, f"data is indexed by the sample index first: `{name}[{ctx.index}]`")
                return None
            if name in self.ints and id(e) not in self.int_sites:
                el = f"{name}[{ctx.index}{', t' if len(sym.shape) > 1 else ''}]"
                self.err("E0125", e.span, f"`{name}` is i64 data, read here as a number",
                         hint=f"an element of `{name}` is an index (`E[{el}]`) or a label "
                         f"(`onehot({el}, K)`); to compute with it, convert it: `f64({el})`")
                return None
        for ix in idx:
            if isinstance(ix, ast.Name) and ix.name == ctx.index:
                self.err("E0033", ix.span, "the sample index can only be the first index of data")
                return None
        return self.select(ir.DataRow(name, sym.shape[1:]), idx, ctx, e)

    def data_element(self, ix: ast.Expr) -> bool:
        """Whether index `ix` is an element of the sample's data (`tok[i]`, `tok[i, 2]`)."""
        sym = self.syms.get(ix.base.name) if isinstance(ix, ast.Index) and isinstance(ix.base, ast.Name) else None
        return sym is not None and sym.kind == "data"

    def gather(self, e: ast.Index, name: str, node: ir.Node, ctx: Ctx) -> ir.Node | None:
        """`E[tok[i]]`, `E[tok[i, t]]`: the row of E (a coordinate of a vector) that an element
        of the sample's data names (checked before a first step: ir.label_columns)."""
        if len(e.indices) > 1:
            self.err("E0033", e.indices[1].span, f"an index read from data is `{name}`'s only index",
                     hint=f"write `{name}[tok[i]]`, a row")
            return None
        self.int_sites[id(e.indices[0])] = e.indices[0]
        k = self.expr(e.indices[0], ctx)
        if k is None:
            return None
        row = k.a if isinstance(k, ir.Pick) else k
        if k.shape or not isinstance(row, ir.DataRow) or len(row.shape) > 1:
            self.err("E0033", e.indices[0].span, "an index must be an integer literal or one "
                     "element of the sample's data", hint=f"as in `{name}[tok[i]]` or `{name}[tok[i, 2]]`")
            return None
        return ir.Gather(node, k, node.shape[1:], name)

    def gathered_only(self, loss: ir.Node) -> None:
        """A param the loss indexes by data (`E[tok[i]]`) is read there through such indices
        only, so its gradient is made of rows alone (compiled code writes only those rows)."""
        nodes = ir.postorder([loss])
        inner = {id(n.a) for n in nodes if isinstance(n, ir.Gather)}
        gathered = {n.a.name for n in nodes if isinstance(n, ir.Gather) and isinstance(n.a, ir.Read)}
        for n in nodes:
            if isinstance(n, ir.Read) and n.name in gathered and id(n) not in inner and \
                    self.syms[n.name].kind == "param":
                self.err("E0033", self.syms[n.name].span, f"param `{n.name}` is indexed by data in "
                         "the loss and also read otherwise", hint=f"read `{n.name}` only as "
                         f"`{n.name}[tok[i]]` there, or write `onehot(tok[i], {n.shape[0]}) @ {n.name}`")
                gathered.discard(n.name)

    def array(self, e: ast.ArrayLit, ctx: Ctx) -> ir.Node | None:
        if not e.items:
            self.err("E0036", e.span, "an empty array has no shape")
            return None
        items = [self.expr(x, ctx) for x in e.items]
        if any(x is None for x in items):
            return None
        if not all(isinstance(x, ir.Const) for x in items):
            if ctx.kind == "update":
                self.err("E0050", e.span, "a vector built from values in the update",
                         hint="coordinate k may read only coordinate k of its values")
                return None
            return self.stacked(items, e.span)
        shape0 = items[0].shape
        for x, src in zip(items, e.items):
            if x.shape != shape0:
                self.err("E0034", src.span, f"row of shape {type_text(x.shape)} among rows of {type_text(shape0)}")
                return None
        if len(shape0) >= 2:
            self.err("E0036", e.span, "arrays have at most 2 dimensions")
            return None
        return ir.Const((len(items),) + shape0, tuple(v for x in items for v in x.values))

    # -- per-coordinate structure --------------------------------------------------------------
    def coordinate_groups(self) -> list[ir.Group]:
        states = {s.name: s for s in self.states}
        parent = {n: n for n in states}

        def find(n: str) -> str:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        coord = {n for n, s in states.items() if s.kind == "param" or s.shape}

        reduced = {id(n) for n in ir.update_reductions(self.update)}

        def leaves(node: ir.Node, stop: set[int] = reduced) -> list[str]:
            out = []                 # a reduced scalar is one value, computed before (stop)
            for n in ir.postorder([node], stop):
                if isinstance(n, ir.Read) and n.name in states:
                    out.append(n.name)
                elif isinstance(n, ir.Grad):
                    out.append(n.param)
            return out

        reads = [(a, leaves(a.node)) for a in self.update if a.target in states]
        changed = True
        while changed:
            changed = False
            for a, names in reads:
                if a.target not in coord and any(n in coord for n in names):
                    coord.add(a.target)
                    changed = True
        for a in self.update:            # one reduction's operands: one group, one partition
            for r in ir.update_reductions([a]):
                names = [n for n in leaves(r, set()) if n in coord]
                for n in names[1:]:
                    if states[n].shape != states[names[0]].shape:
                        self.err("E0051", self.assign_span(a), f"a reduction reads coordinate values "
                                 f"`{names[0]}` and `{n}` of different shapes")
                    else:
                        parent[find(n)] = find(names[0])
        for a, names in reads:
            if a.target not in coord:
                continue
            tshape = states[a.target].shape
            for n in names:
                if n in coord and states[n].shape != tshape:
                    span = self.assign_span(a)
                    self.err("E0051", span, f"`{a.target}` ({type_text(tshape)}) reads coordinate value "
                                            f"`{n}` ({type_text(states[n].shape)}) in its update",
                             hint="coordinate k of the target must read coordinate k of the same shape")
                else:
                    if n in coord:
                        parent[find(n)] = find(a.target)
        roots: dict[str, list[str]] = {}
        for s in self.states:
            if s.name in coord:
                roots.setdefault(find(s.name), []).append(s.name)
        groups = []
        for i, members in enumerate(roots.values()):
            for m in members:
                states[m].group = i
            groups.append(ir.Group(i, states[members[0]].shape, members))
        return groups

    def assign_span(self, a: ir.Assign) -> Span:
        for d in self.module.decls:
            if isinstance(d, ast.UpdateDecl):
                for st in d.body.stmts:
                    if isinstance(st, ast.Assign) and st.name == a.target:
                        return st.span
        return self.module.span

    def warnings(self, predict: ir.Node | None = None) -> None:
        if not self.sink.ok:
            return
        from types import SimpleNamespace
        labelled = SimpleNamespace(loss=self.loss, predict=predict, data=self.data)
        for d in self.data:                  # labels written in the source: W0004 now, not at run
            why = ir.bad_label(labelled, only=d.name) if d.file is None else None
            if why is not None:
                self.sink.warning("W0004", self.syms[d.name].span, f"label {why}",
                                  hint="a run refuses these labels (`refused: data-label`)")
        used = {n.name for n in ir.postorder([self.loss]) if isinstance(n, ir.Read)} if self.loss else set()
        assigned = {a.target for a in self.update}
        graded = {n.param for n in ir.postorder([a.node for a in self.update]) if isinstance(n, ir.Grad)}
        for s in self.states:
            span = self.syms[s.name].span
            if s.kind == "param" and self.loss is not None and s.name not in used:
                self.sink.warning("W0001", span, f"param `{s.name}` does not appear in the loss")
            elif s.kind == "param" and self.loss is not None and s.name in assigned and s.name not in graded:
                self.sink.warning("W0003", span, f"the update never uses `grad({s.name})`",
                                  hint=f"`{s.name}` is updated, but not from its gradient; "
                                       f"a `const` may say what you mean")
            if s.name not in assigned:
                self.sink.warning("W0002", span, f"`{s.name}` is never updated")


def npy_values(raw: bytes) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(shape, values as binary64) of a .npy file's bytes: a non-empty 1- or 2-D array of a
    number type that binary64 holds exactly; ValueError saying why not (for data that `load`
    reads, and the held-out data of `alphac eval`)."""
    import numpy as np
    try:
        arr = np.load(io.BytesIO(raw), allow_pickle=False)
    except Exception as e:  # numpy reports many kinds of malformed files
        raise ValueError(f"is not a .npy array: {e}")
    if not isinstance(arr, np.ndarray) or arr.ndim == 0 or arr.ndim > 2 or arr.size == 0:
        raise ValueError("must hold a non-empty 1- or 2-D array")
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"has dtype {arr.dtype}, not a number type")
    as64 = arr.astype("<f8")
    if arr.dtype.kind in "iu" and not np.array_equal(as64.astype(arr.dtype), arr):
        raise ValueError("has integers that binary64 cannot hold exactly")
    return tuple(int(s) for s in arr.shape), tuple(float(v) for v in as64.reshape(-1))


def elementwise(func: str, args: list[ir.Node]) -> ir.Node:
    """The node of an elementwise function; sigmoid and softplus are compositions, exactly
    these (docs/language.md): sigmoid(x) = 1 / (1 + exp(-x)),
    softplus(x) = max(x, 0) + log1p(exp(-abs(x)))."""
    a = args[0]
    if func == "sigmoid":
        one = ir.Const((), (1.0,))
        return fold(ir.Elem("div", one, fold(ir.Elem("add", one, fold(ir.Unary(
            "exp", fold(ir.Unary("neg", a, a.shape)), a.shape)), a.shape)), a.shape))
    if func == "softplus":
        zero = ir.Const((), (0.0,))
        tail = ir.Unary("log1p", ir.Unary("exp", ir.Unary("neg", ir.Unary("abs", a, a.shape), a.shape),
                                          a.shape), a.shape)
        return fold(ir.Elem("add", fold(ir.Elem("max", a, zero, a.shape)), fold(tail), a.shape))
    if len(args) == 2:
        b = args[1]
        return ir.Elem(func, a, b, wide(a.shape, b.shape))
    return ir.Unary(func, a, a.shape)


def logsumexp(z: ir.Node) -> ir.Node:
    """logsumexp(z) = m + log(sum(exp(z - m))) with m = max(z) (docs/language.md): the library
    composition, with the max subtracted so no exp overflows."""
    m = fold(ir.Max(z))
    e = fold(ir.Unary("exp", fold(ir.Elem("sub", z, m, z.shape)), z.shape))
    return fold(ir.Elem("add", m, fold(ir.Unary("log", fold(ir.Sum(e)), ())), ()))


Checker.builtins = BUILTINS


def check(module: ast.Module, sink: Sink, base_dir: Path | None = None) -> ir.Learner | None:
    """Check a parsed learner. Returns the learner IR, or None with errors in `sink`."""
    return Checker(module, sink, base_dir).run()
