"""Optimizer syntax: an optimizer applied to params, and an optimizer's definition.

A use (in a learner file; docs/language.md, "Optimizers"):

    optimizer adam(lr = 0.01, betas = (0.9, 0.999)) for W1, b1, W2, b2
    optimizer sgd(lr = 0.1, momentum = 0.9, nesterov = true) for *

A definition (the library alphac/types/optimizers.alpha, or the learner's own file):

    optimizer NAME(HYPER [: DOMAIN] = DEFAULT, ...) {
      state NAME [: f64] = INIT        # per param: the param's shape, or a scalar
      let NAME = expr                  # may rebind an earlier let
      NAME = expr                      # `w` (the param) or one of the states
      if expr { ... } else { ... }     # decided at compile time: expr folded, nonzero
      fail "message"                   # the hyperparameters are refused with the message
    }

Requires: the `Parser` of alphac.parse.parser (alphac.parse adds `parse_optimizer` to its
table). Guarantees: an `OptimizerUse` or `OptimizerDef` whose parts keep their spans; what they
mean (names, values, domains) is checked and expanded by alphac.types.optim.
"""
from __future__ import annotations

from dataclasses import dataclass

from alphac.diag import Span
from alphac.parse import ast
from alphac.parse.parser import Parser


@dataclass(frozen=True)
class Hyper:
    name: str
    name_span: Span
    value: object                    # an ast.Expr, or a tuple of them: `(0.9, 0.999)`
    domain: str | None               # definitions only: nonneg, unit, bool (alphac.types.optim)
    span: Span


@dataclass(frozen=True)
class OptimizerUse:
    name: str
    name_span: Span
    hypers: tuple[Hyper, ...]
    params: tuple[tuple[str, Span], ...] | None     # None: `for *`
    span: Span


@dataclass(frozen=True)
class OptState:
    name: str
    name_span: Span
    scalar: bool
    init: ast.Expr
    span: Span


@dataclass(frozen=True)
class OptIf:
    cond: ast.Expr
    then: tuple
    else_: tuple
    span: Span


@dataclass(frozen=True)
class OptFail:
    message: str
    span: Span


@dataclass(frozen=True)
class OptimizerDef:
    name: str
    name_span: Span
    hypers: tuple[Hyper, ...]
    body: tuple                      # OptState | OptIf | OptFail | ast.Let | ast.Assign
    span: Span


def _value(p: Parser):
    """An expression, or a tuple `(a, b, ...)`: a `(` whose first level holds a comma."""
    if p.at("punct", "("):
        depth, k = 0, 0
        while True:
            t = p.peek(k)
            if t.kind == "eof" or t.is_("punct", "{") or t.is_("punct", "}"):
                break
            depth += t.is_("punct", "(") or t.is_("punct", "[")
            depth -= t.is_("punct", ")") or t.is_("punct", "]")
            if depth == 0:
                break
            if depth == 1 and t.is_("punct", ","):
                p.advance()
                items, _ = p.parse_list(")")
                return tuple(items)
            k += 1
    return p.parse_expr()


def _hypers(p: Parser) -> tuple[Hyper, ...]:
    out = []
    if not p.accept("punct", "("):
        return ()
    while not p.accept("punct", ")"):
        name = p.expect("name", what="a hyperparameter's name, as in `lr = 0.01`")
        domain = None
        if p.accept("punct", ":"):
            domain = p.expect("name", what="a domain: nonneg, unit or bool").text
        p.expect("punct", "=", what=f"`=` and the value of `{name.text}`")
        value = _value(p)
        end = value[-1].span if isinstance(value, tuple) and value else getattr(value, "span", name.span)
        out.append(Hyper(name.text, name.span, value, domain, name.span.to(end)))
        if not p.at("punct", ")"):
            p.expect("punct", ",", what="`,` or `)`")
    return tuple(out)


def _body(p: Parser) -> tuple[tuple, Span]:
    open_ = p.expect("punct", "{", what="`{`")
    stmts: list = []
    p.skip_newlines()
    while p.in_block(open_):
        stmts.append(_stmt(p))
        if not p.at("punct", "}"):
            p.end_of_line()
    return tuple(stmts), open_.span.to(p.advance().span)


def _stmt(p: Parser):
    t = p.tok
    if t.is_("kw", "state"):
        p.advance()
        name = p.expect("name", what="the state's name")
        scalar = False
        if p.accept("punct", ":"):
            scalar = bool(p.expect("kw", "f64", what="`f64` (a scalar state)"))
        p.expect("punct", "=", what="`=` and the initial value")
        init = p.parse_expr()
        return OptState(name.text, name.span, scalar, init, t.span.to(init.span))
    if t.is_("kw", "let"):
        p.advance()
        name = p.expect("name", what="a name after `let`")
        p.expect("punct", "=")
        value = p.parse_expr()
        return ast.Let(name.text, name.span, value, t.span.to(value.span))
    if t.is_("name", "if"):
        p.advance()
        cond = p.parse_expr()
        then, span = _body(p)
        else_: tuple = ()
        if p.at("name", "else"):
            p.advance()
            else_, span = _body(p)
        return OptIf(cond, then, else_, t.span.to(span))
    if t.is_("name", "fail"):
        p.advance()
        msg = p.expect("str", what="the message, a string")
        return OptFail(msg.value, t.span.to(msg.span))
    name = p.expect("name", what="a statement: state, let, NAME = expr, if, fail")
    p.expect("punct", "=", what="`=`")
    value = p.parse_expr()
    return ast.Assign(name.text, name.span, value, name.span.to(value.span))


def parse_optimizer(p: Parser) -> OptimizerUse | OptimizerDef:
    kw = p.advance()
    name = p.expect("name", what="the optimizer's name, as in `optimizer adam(lr = 0.01) for *`")
    hypers = _hypers(p)
    if p.at("punct", "{"):
        body, span = _body(p)
        if not p.at("eof"):
            p.end_of_line()
        return OptimizerDef(name.text, name.span, hypers, body, kw.span.to(span))
    if not p.at("name", "for"):
        raise p.fail("`for` and the params (`for W1, b1` or `for *`), or `{` and a definition")
    p.advance()
    if p.at("punct", "*"):
        end = p.advance().span
        params = None
    else:
        first = p.expect("name", what="a param, or `*` for every param")
        params, end = [(first.text, first.span)], first.span
        while p.accept("punct", ","):
            t = p.expect("name", what="a param")
            params.append((t.text, t.span))
            end = t.span
        params = tuple(params)
    p.end_of_line()
    return OptimizerUse(name.text, name.span, hypers, params, kw.span.to(end))

