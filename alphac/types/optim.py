"""Optimizers: `optimizer NAME(HYPER = VALUE, ...) for PARAMS` -> ordinary states and update
statements.

The definitions are Alpha text (alphac/types/optimizers.alpha, the library, and any in the
learner's own file; syntax in alphac.parse.optim). A use expands its optimizer's body once per
param, in the order the params are listed (`for *`: every param no other use names, in
declaration order), the uses in file order, after the statements of the `update` block. In a
body, `w` is the param, a `state NAME` becomes the learner's state `PARAM_NAME` (the param's
shape, or f64), a `let` gets a name no source can spell (`W1.g.2`: a let may be rebound), and a
hyperparameter becomes its value, folded in binary64 as a const is; a value that is not a
constant (`lr = lr_t`, a `let` of the update) is an expression of the update: a scalar `let`
(`HyperLet`, named `lr.0`) after the update block's statements and before every optimizer's,
which the body reads. `grad_scale = s`, every optimizer's, makes the body read `grad(w) * s`.
`if` folds its condition and keeps one branch (a hyperparameter it reads, or a state's initial
value reads, must be a constant); `fail` refuses the values. A definition's body is checked
where it is used.

Requires: a `Checker` (alphac.types.check) that has declared the file's consts, data and
states. Guarantees: the states are declared through the checker (so checkpoints, plans and every
engine see ordinary states) and the statements are checked as the update's own; a library
body's nodes carry the use's span, so every error about them points at the user's line. Errors
of use: E0070 (unknown optimizer), E0071 (bad hyperparameter), E0072 (not a param, a param given
two optimizers, a state name taken); E0073 (a definition repeated).
"""
from __future__ import annotations

import dataclasses
import difflib
from importlib import resources

from alphac.diag import Sink, Source, Span
from alphac.formats import NAME_MAX
from alphac.parse import ast, parse_library
from alphac.parse.optim import OptFail, OptIf, OptimizerDef, OptimizerUse, OptState

LIBRARY = "alphac/types/optimizers.alpha"
DOMAINS = {"nonneg": (lambda v: v >= 0, "at least 0"),
           "unit": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
           "bool": (lambda v: v in (0.0, 1.0), "`true` or `false`"),
           None: (lambda v: True, "")}
BOOLS = {"true": 1.0, "false": 0.0}
GRAD_SCALE = "grad_scale"      # every optimizer's: its body reads grad(w) * grad_scale


@dataclasses.dataclass(frozen=True)
class HyperLet(ast.Let):
    """A hyperparameter given as an expression of the update: the checker refuses an array."""
    hyper: str = ""


def library(sink: Sink) -> dict[str, OptimizerDef]:
    text = resources.files("alphac.types").joinpath("optimizers.alpha").read_text()
    return {d.name: d for d in parse_library(Source(LIBRARY, text), sink)
            if isinstance(d, OptimizerDef)}


def expand(ck, module: ast.Module) -> list:
    """The update statements of every optimizer use of `module` (its states declared)."""
    uses = [d for d in module.decls if isinstance(d, OptimizerUse)]
    if not any(isinstance(d, (OptimizerUse, OptimizerDef)) for d in module.decls):
        return []
    defs = library(ck.sink)
    builtin = set(defs)
    for d in module.decls:
        if isinstance(d, OptimizerDef):
            if d.name in defs:
                where = "the library's" if d.name in builtin else "an earlier one"
                ck.err("E0073", d.name_span, f"optimizer `{d.name}` is defined twice ({where})")
            else:
                defs[d.name] = d
    stmts: list = []
    pre: list[HyperLet] = []                    # every use's hyperparameters of the update
    for use, params in assign_params(ck, uses):
        d = defs.get(use.name)
        if d is None:
            close = difflib.get_close_matches(use.name, sorted(defs), n=1)
            ck.err("E0070", use.name_span, f"unknown optimizer `{use.name}`",
                   hint=f"did you mean `{close[0]}`?" if close else
                   "the optimizers are " + ", ".join(sorted(defs)))
            continue
        values = hyper_values(ck, use, d, pre)
        if values is None:
            continue
        for name in params:
            e = Expansion(ck, use, name, values, use.span if d.name in builtin else None)
            if not e.walk(d.body):
                break
            stmts += e.out
    return pre + stmts


def assign_params(ck, uses: list[OptimizerUse]) -> list[tuple[OptimizerUse, list[str]]]:
    """Each use with its params: the listed ones, checked; `*`, the rest (E0072)."""
    params = [n for n, s in ck.syms.items() if s.kind == "param"]
    taken: dict[str, OptimizerUse] = {}
    out = []
    for use in uses:
        mine = []
        for name, span in use.params or ():
            sym = ck.syms.get(name)
            if sym is None or sym.kind != "param":
                what = f"a {sym.kind}" if sym else "not declared"
                ck.err("E0072", span, f"`{name}` is {what}, not a param",
                       hint="an optimizer updates the learner's `param`s")
            elif name in taken:
                ck.err("E0072", span, f"`{name}` already has an optimizer (line "
                                      f"{taken[name].span.line_col[0]})")
            else:
                taken[name] = use
                mine.append(name)
        out.append((use, mine))
    stars = [u for u in uses if u.params is None]
    for extra in stars[1:]:
        ck.err("E0072", extra.span, "a second `for *`", hint="`*` is every param no other "
                                                              "optimizer names")
    if stars:
        rest = [n for n in params if n not in taken]
        out = [(u, rest if u is stars[0] else m) for u, m in out]
    return out


def hyper_values(ck, use: OptimizerUse, d: OptimizerDef, pre: list) -> dict | None:
    """Every hyperparameter's value (a float, a `HyperLet` appended to `pre`, or a tuple of
    them): the use's, else the default, and `grad_scale` if given (E0071: unknown,
    repeated, of the wrong form, a constant outside its domain)."""
    given: dict[str, object] = {}
    for h in use.hypers:
        if h.name in given:
            ck.err("E0071", h.name_span, f"`{h.name}` is given twice")
        given[h.name] = h
    known = {h.name: h for h in d.hypers}
    ok = GRAD_SCALE not in known
    if not ok:
        ck.err("E0071", known[GRAD_SCALE].name_span, f"`{GRAD_SCALE}` is every optimizer's "
                                                     "gradient scale, not a definition's")
    if GRAD_SCALE in given:
        known[GRAD_SCALE] = dataclasses.replace(given[GRAD_SCALE], value=ast.Num(1.0, 1, "1", use.span))
    for h in use.hypers:
        if h.domain is not None:
            ck.err("E0071", h.name_span, f"`{h.name}: {h.domain}`: a domain is a definition's")
            ok = False
        if h.name not in known:
            ck.err("E0071", h.name_span, f"optimizer `{d.name}` has no hyperparameter `{h.name}`",
                   hint="its hyperparameters are " + ", ".join(f"`{k}`" for k in known))
            ok = False
    values = {}
    for k, default in known.items():
        h = given.get(k, default)
        v = fold_value(ck, h, default, pre if h is not default else None)
        if v is None:
            ok = False
            continue
        test, says = DOMAINS.get(default.domain, DOMAINS[None])
        bad = [x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, float) and not test(x)]
        if bad:
            ck.err("E0071", h.span, f"`{k} = {bad[0]!r}`: {d.name}'s `{k}` must be {says}")
            ok = False
        values[k] = v
    return values if ok else None


def fold_value(ck, h, default, pre: list | None) -> object:
    """`h`'s value: constants folded; with `pre`, an item that is not one a `HyperLet` (there)."""
    shape = len(default.value) if isinstance(default.value, tuple) else None
    items = h.value if isinstance(h.value, tuple) else (h.value,)
    if shape != (len(items) if isinstance(h.value, tuple) else None):
        form = f"a tuple of {shape}, as `(0.9, 0.999)`" if shape else "a number"
        ck.err("E0071", h.span, f"`{h.name}` is {form}")
        return None
    out = []
    for e in items:
        if isinstance(e, ast.Name) and e.name in BOOLS and default.domain == "bool":
            out.append(BOOLS[e.name])
            continue
        quiet = len(ck.sink.items)
        c = ck.const_value(e)
        if c is None and pre is not None:          # not a constant: an expression of the update
            del ck.sink.items[quiet:]
            pre.append(HyperLet(f"{h.name}.{len(pre)}", e.span, e, e.span, h.name))
            out.append(pre[-1])
            continue
        if c is None:
            return None
        if c.shape:
            ck.err("E0071", e.span, f"`{h.name}` is a number, not an array")
            return None
        out.append(c.values[0])
    return tuple(out) if shape else out[0]


class Expansion:
    """One optimizer body for one param: `out`, the update statements."""

    def __init__(self, ck, use: OptimizerUse, param: str, values: dict, span: Span | None):
        self.ck, self.use, self.param, self.values, self.span = ck, use, param, values, span
        self.states: dict[str, str] = {}
        self.lets: dict[str, str] = {}
        self.out: list = []

    def at(self, span: Span) -> Span:
        return self.span or span

    def walk(self, body: tuple) -> bool:
        """Expand `body`; False after a `fail` (reported)."""
        for st in body:
            if isinstance(st, OptIf):
                cond = self.sub(st.cond)
                if not self.constant(cond, "decides which form the optimizer takes"):
                    return False
                c = self.ck.const_value(cond)
                if c is not None and not self.walk(st.then if any(c.values) else st.else_):
                    return False
            elif isinstance(st, OptFail):
                self.ck.err("E0071", self.use.span, f"optimizer `{self.use.name}`: {st.message}")
                return False
            elif isinstance(st, OptState):
                if not self.constant(self.sub(st.init), "sets a state's initial value"):
                    return False
                self.state(st)
            elif isinstance(st, ast.Let):
                name = f"{self.param}.{st.name}.{len(self.out)}"
                value = self.sub(st.value)
                self.lets[st.name] = name
                self.out.append(ast.Let(name, self.at(st.name_span), value, self.at(st.span)))
            else:
                target = self.param if st.name == "w" else self.states.get(st.name, st.name)
                self.out.append(ast.Assign(target, self.at(st.name_span), self.sub(st.value),
                                           self.at(st.span)))
        return True

    def constant(self, e, why: str) -> bool:
        """False, reported (E0071 at the user's value), when `e` reads a hyperparameter of the
        update."""
        read = names(e)
        late = sorted({h.hyper: h for v in self.values.values() for h in (v if isinstance(v, tuple)
                       else (v,)) if isinstance(h, HyperLet) and h.name in read}.items())
        for k, h in late:
            self.ck.err("E0071", h.value.span, f"`{k}` {why}, so it must be a constant",
                        hint=f"give `{self.use.name}` a number or a const for `{k}`")
        return not late

    def state(self, st: OptState) -> None:
        name = f"{self.param}_{st.name}"
        span = self.at(st.span)
        prev = self.ck.syms.get(name)
        if len(name) > NAME_MAX:
            self.ck.err("E0072", span, f"optimizer `{self.use.name}` would name a state of "
                                       f"{len(name)} characters, `{name[:40]}...`; at most "
                                       f"{NAME_MAX}", hint="shorten the param's name")
            return
        if prev is not None:
            self.ck.err("E0072", span, f"optimizer `{self.use.name}` names its state `{name}`, "
                                       f"declared at line {prev.span.line_col[0]}",
                        hint="rename that declaration: `PARAM_STATE` names are the optimizers'")
            return
        shape = () if st.scalar else self.ck.syms[self.param].shape
        self.states[st.name] = name
        self.ck.decl_state(ast.StateDecl("state", name, span, ast.TypeExpr(shape, span),
                                         self.sub(st.init), span))

    def sub(self, e):
        """`e` with `w`, states, lets and hyperparameters replaced, at the use's span."""
        span = self.at(e.span)
        if isinstance(e, ast.Name):
            v = self.values.get(e.name)
            if isinstance(v, (float, HyperLet)):
                return hyper_node(v, span)
            name = self.param if e.name == "w" else self.lets.get(e.name) or \
                self.states.get(e.name, e.name)
            return ast.Name(name, span)
        if isinstance(e, ast.Index) and isinstance(e.base, ast.Name) and \
                isinstance(self.values.get(e.base.name), tuple) and len(e.indices) == 1 and \
                isinstance(e.indices[0], ast.Num) and \
                e.indices[0].ival in range(len(self.values[e.base.name])):
            return hyper_node(self.values[e.base.name][e.indices[0].ival], span)
        if isinstance(e, ast.Call) and e.func == "grad" and GRAD_SCALE in self.values and \
                len(e.args) == 1 and getattr(e.args[0], "name", None) == "w":   # grad(w) * it
            g = ast.Call("grad", self.at(e.func_span), (ast.Name(self.param, span),), span)
            return ast.Binary("*", g, hyper_node(self.values[GRAD_SCALE], span), span)
        fields = {}
        for f in dataclasses.fields(e):
            x = getattr(e, f.name)
            if f.name == "span" or f.name == "func_span":
                x = self.at(x)
            elif isinstance(x, tuple):
                x = tuple(self.sub(a) for a in x)
            elif dataclasses.is_dataclass(x):
                x = self.sub(x)
            fields[f.name] = x
        return type(e)(**fields)


def hyper_node(v, span: Span):
    """A hyperparameter's value in a body: a constant's number, or the name of its `HyperLet`."""
    return ast.Name(v.name, v.value.span) if isinstance(v, HyperLet) else ast.Num(v, None, repr(v), span)


def names(e) -> set[str]:
    """Every name `e` reads."""
    if isinstance(e, ast.Name):
        return {e.name}
    parts = [getattr(e, f.name) for f in dataclasses.fields(e) if "span" not in f.name] \
        if dataclasses.is_dataclass(e) else []
    return set().union(*(names(a) for x in parts for a in (x if isinstance(x, tuple) else (x,))))
