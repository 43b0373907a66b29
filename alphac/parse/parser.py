"""The Alpha parser: tokens -> `ast.Module`, hand-written recursive descent.

Grammar (docs/language.md has the full description):

    file   := NL* 'learner' NAME NL decl*
    decl   := 'data' NAME [':' type] '=' expr NL
            | 'const' NAME [':' type] '=' expr NL
            | ('param' | 'state') NAME ':' type '=' expr NL
            | ('loss' | 'predict') '(' NAME ')' ('=' expr NL | block)
            | 'update' block
            | 'def' NAME '(' NAME (',' NAME)* ')' '=' expr NL
            | deployment                               (alphac.parse.deploy)
            | optimizer                                (alphac.parse.optim)
    type   := ('f64' | 'i64') ['[' INT (',' INT)* ']']      (i64: data's integers, alphac.types)
    block  := '{' (stmt (NL | ';'))* [expr] '}'
    stmt   := 'let' NAME '=' expr | NAME '=' expr
    expr   := sum [('<' | '<=' | '>' | '>=' | '==' | '!=') sum]
    sum    := term (('+' | '-') term)*
    term   := unary (('*' | '/' | '@') unary)*
    unary  := '-' unary | power
    power  := postfix ['^' postfix]
    postfix:= primary ('[' index (',' index)* ']')*
    index  := expr | [expr] ':' [expr]
    primary:= NUM | STR | NAME | (NAME | 'f64') '(' [expr (',' expr)*] ')' | '(' expr ')'
            | '[' [expr (',' expr)*] ']' | '[' expr ('for' NAME 'in' expr '..' expr)+ ']'

Requires: tokens from `lexer.lex`. Guarantees: never raises on any token list; on a syntax
error it reports E0010/E0011, skips to the next declaration and goes on, so one run reports
several errors. The parser of each declaration is a table, `DECL_PARSERS`; `alphac.parse`
(the entry point, `parse`) adds the deployment and strategy parsers of `alphac.parse.deploy`.
"""
from __future__ import annotations

from alphac.diag import Sink, Span
from alphac.parse import ast
from alphac.parse.lexer import Token, lex


class _Bail(Exception):
    """Unwinds to the enclosing declaration after a reported syntax error."""


DECL_KEYWORDS = ("data", "const", "param", "state", "loss", "predict", "update", "batch",
                 "order", "contract", "deployment", "strategy", "optimizer", "def")


class Parser:
    def __init__(self, tokens: list[Token], sink: Sink, decls: dict | None = None):
        self.toks = tokens
        self.pos = 0
        self.depth = 0
        self.sink = sink
        self.decls = DECL_PARSERS if decls is None else decls

    # -- token helpers -----------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.toks[self.pos]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.pos + k, len(self.toks) - 1)]

    def advance(self) -> Token:
        t = self.toks[self.pos]
        if t.kind != "eof":
            self.pos += 1
        return t

    def at(self, kind: str, text: str | None = None) -> bool:
        return self.tok.is_(kind, text)

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        return self.advance() if self.at(kind, text) else None

    def describe(self, t: Token) -> str:
        return {"nl": "end of line", "eof": "end of file"}.get(t.kind, f"`{t.text}`")

    def fail(self, what: str, hint: str | None = None) -> "_Bail":
        t = self.tok
        at_end = t.span.start >= len(t.span.source.text)
        unclosed = self._unclosed() if at_end else None
        if unclosed is not None:
            self.sink.error("E0011", unclosed.span, f"this `{unclosed.text}` is never closed",
                            hint=f"expected {what} before the end of the file")
        else:
            self.sink.error("E0010", t.span, f"expected {what}, found {self.describe(t)}", hint)
        return _Bail()

    def _unclosed(self) -> Token | None:
        """The innermost ( or [ still open at the current position, if any."""
        stack: list[Token] = []
        for t in self.toks[: self.pos]:
            if t.kind == "punct" and t.text in "([":
                stack.append(t)
            elif t.kind == "punct" and t.text in ")]" and stack:
                stack.pop()
            elif t.kind == "punct" and t.text in "{}":
                stack.clear()
        return stack[-1] if stack else None

    def expect(self, kind: str, text: str | None = None, what: str | None = None) -> Token:
        if self.at(kind, text):
            return self.advance()
        raise self.fail(what or (f"`{text}`" if text else kind))

    def skip_newlines(self) -> None:
        while self.at("nl") or self.at("punct", ";"):
            self.advance()

    def end_of_line(self) -> None:
        if self.at("nl") or self.at("punct", ";") or self.at("eof"):
            self.skip_newlines()
            return
        raise self.fail("end of line")

    # -- blocks: `{`, an item a line, `}` (Alpha's, a deployment's, an optimizer's) --------------
    def in_block(self, open_: Token) -> bool:
        """False at the `}` that closes the block `open_` opened; the file's end first is E0011."""
        if self.at("eof"):
            self.sink.error("E0011", open_.span, "this `{` is never closed")
            raise _Bail()
        return not self.at("punct", "}")

    def skip_item(self) -> None:
        """After an error in a block's item: on to the next line, or to the block's `}`."""
        while not (self.at("nl") or self.at("punct", "}") or self.at("eof")):
            self.advance()
        self.skip_newlines()

    def close_block(self, open_: Token) -> Span:
        """The block's `}` and the end of its line; the block's span."""
        close = self.advance()
        if not self.at("eof"):
            self.end_of_line()
        return open_.span.to(close.span)

    def recover_to_decl(self) -> None:
        """Skip to the start of the next top-level declaration."""
        depth = 0
        while not self.at("eof"):
            t = self.tok
            if t.kind == "punct" and t.text == "{":
                depth += 1
            elif t.kind == "punct" and t.text == "}":
                depth = max(0, depth - 1)
                if depth == 0:
                    self.advance()
                    continue
            if t.kind == "nl" and depth == 0:
                nxt = self.peek()
                if nxt.kind == "kw" and nxt.text in DECL_KEYWORDS or nxt.kind == "eof":
                    self.advance()
                    return
            self.advance()

    # -- file --------------------------------------------------------------------------------
    def parse_module(self) -> ast.Module:
        start = self.tok.span
        self.skip_newlines()
        header = None
        decls: list[object] = []
        try:
            if self.at("kw", "learner"):
                kw = self.advance()
                name = self.expect("name", what="the learner's name")
                header = ast.LearnerHeader(name.text, kw.span.to(name.span))
                self.end_of_line()
            else:
                raise self.fail("`learner NAME` at the start of the file",
                                hint="every Alpha file begins with `learner NAME`")
        except _Bail:
            self.recover_to_decl()
        while not self.at("eof"):
            self.skip_newlines()
            if self.at("eof"):
                break
            try:
                decls.append(self.parse_decl())
            except _Bail:
                self.recover_to_decl()
        return ast.Module(header, tuple(decls), start.to(self.tok.span))

    def parse_decl(self) -> object:
        t = self.tok
        if t.kind == "kw" and t.text in self.decls:
            return self.decls[t.text](self)
        raise self.fail("a declaration (data, const, param, state, loss, predict, update, batch, "
                        "order, contract, deployment, strategy, optimizer)")

    def parse_type(self) -> ast.TypeExpr:
        f = self.accept("name", "i64") or self.expect("kw", "f64", what="a type (`f64` or `f64[N]`)")
        dims: list[int] = []
        end = f.span
        if self.accept("punct", "["):
            while True:
                d = self.expect("num", what="a dimension")
                if d.ival is None or d.ival <= 0:
                    self.sink.error("E0036", d.span, f"dimension `{d.text}` is not a positive integer")
                dims.append(d.ival if d.ival and d.ival > 0 else 1)
                if not self.accept("punct", ","):
                    break
            end = self.expect("punct", "]").span
            if len(dims) > 2:
                self.sink.error("E0036", f.span.to(end), f"{len(dims)} dimensions; at most 2 are supported")
        return ast.TypeExpr(tuple(dims), f.span.to(end), f.text)

    def _named_value(self, keyword: str, typed: bool):
        kw = self.advance()
        name = self.expect("name", what=f"a name after `{keyword}`")
        type_ = None
        if typed or self.at("punct", ":"):
            self.expect("punct", ":", what=f"`:` and a type after `{keyword} {name.text}`")
            type_ = self.parse_type()
        self.expect("punct", "=", what="`=` and a value")
        value = self.parse_expr()
        span = kw.span.to(value.span)
        self.end_of_line()
        return kw, name, type_, value, span

    def parse_data(self) -> ast.DataDecl:
        _, name, type_, value, span = self._named_value("data", typed=False)
        return ast.DataDecl(name.text, name.span, type_, value, span)

    def parse_const(self) -> ast.ConstDecl:
        _, name, type_, value, span = self._named_value("const", typed=False)
        return ast.ConstDecl(name.text, name.span, type_, value, span)

    def parse_state(self) -> ast.StateDecl:
        kw, name, type_, value, span = self._named_value(self.tok.text, typed=True)
        return ast.StateDecl(kw.text, name.text, name.span, type_, value, span)

    def parse_loss(self) -> ast.LossDecl:
        """`loss(i) ...`, and `predict(i) ...` (the same form: a LossDecl of kind "predict")."""
        kw = self.advance()
        self.expect("punct", "(", what=f"`(` and the sample index name, as in `{kw.text}(i)`")
        idx = self.expect("name", what="the sample index name")
        self.expect("punct", ")")
        if self.accept("punct", "="):
            value = self.parse_expr()
            body = ast.Block((), value, value.span)
            self.end_of_line()
        else:
            body = self.parse_block()
        return ast.LossDecl(idx.text, idx.span, body, kw.span.to(body.span), kw.text)

    def parse_batch(self) -> ast.BatchDecl:
        kw = self.advance()
        t = self.expect("num", what="the batch size, an integer (`batch 32`)")
        self.end_of_line()
        return ast.BatchDecl(ast.Num(t.value, t.ival, t.text, t.span), kw.span.to(t.span))

    def parse_order(self) -> ast.OrderDecl:
        kw = self.advance()
        kind = self.expect("name", what="`sequence` or `shuffle(SEED)`")
        seed, end = None, kind.span
        if kind.text == "shuffle":
            self.expect("punct", "(", what="`(` and the shuffle's seed, as in `shuffle(7)`")
            t = self.expect("num", what="the seed, an integer")
            seed = ast.Num(t.value, t.ival, t.text, t.span)
            end = self.expect("punct", ")").span
        elif kind.text != "sequence":
            self.sink.error("E0010", kind.span, f"unknown order `{kind.text}`",
                            "the order is `sequence` or `shuffle(SEED)`")
        self.end_of_line()
        return ast.OrderDecl(kind.text, seed, kw.span.to(end))

    def parse_contract(self) -> ast.ContractDecl:
        kw = self.advance()
        name = self.expect("name", what="the contract's name: `ordered` or `exact_sum`")
        self.end_of_line()
        return ast.ContractDecl(name.text, name.span, kw.span.to(name.span))

    def parse_update(self) -> ast.UpdateDecl:
        kw = self.advance()
        body = self.parse_block()
        return ast.UpdateDecl(body, kw.span.to(body.span))

    def parse_block(self) -> ast.Block:
        open_ = self.expect("punct", "{", what="`{`")
        stmts: list[ast.Let | ast.Assign] = []
        result = None
        self.skip_newlines()
        while self.in_block(open_):
            if result is not None:
                raise self.fail("`}` after the block's result expression")
            try:
                if self.at("kw", "let"):
                    kw = self.advance()
                    name = self.expect("name", what="a name after `let`")
                    self.expect("punct", "=")
                    value = self.parse_expr()
                    stmts.append(ast.Let(name.text, name.span, value, kw.span.to(value.span)))
                elif self.at("name") and self.peek().is_("punct", "="):
                    name = self.advance()
                    self.advance()
                    value = self.parse_expr()
                    stmts.append(ast.Assign(name.text, name.span, value, name.span.to(value.span)))
                else:
                    result = self.parse_expr()
                if not self.at("punct", "}"):
                    self.end_of_line()
            except _Bail:
                self.skip_item()
        return ast.Block(tuple(stmts), result, self.close_block(open_))

    # -- expressions ---------------------------------------------------------------------------
    MAX_DEPTH = 100

    def parse_expr(self) -> ast.Expr:
        self.depth += 1
        try:
            if self.depth > self.MAX_DEPTH:
                self.sink.error("E0012", self.tok.span,
                                f"expression nested more than {self.MAX_DEPTH} levels deep")
                raise _Bail()
            return self.parse_comparison()
        finally:
            self.depth -= 1

    def parse_comparison(self) -> ast.Expr:
        """`sum OP sum`: one comparison at most (they do not chain), below + and -."""
        left = self._parse_expr()
        if self.tok.kind == "punct" and self.tok.text in ("<", "<=", ">", ">=", "==", "!="):
            op = self.advance().text
            right = self._parse_expr()
            left = ast.Compare(op, left, right, left.span.to(right.span))
            if self.tok.kind == "punct" and self.tok.text in ("<", "<=", ">", ">=", "==", "!="):
                self.sink.error("E0074", self.tok.span, f"a second comparison after `{op}`",
                                "comparisons do not chain: nest `where`s")
                raise _Bail()
        return left

    def _parse_expr(self) -> ast.Expr:
        left = self.parse_term()
        while self.at("punct", "+") or self.at("punct", "-"):
            op = self.advance().text
            right = self.parse_term()
            left = ast.Binary(op, left, right, left.span.to(right.span))
        return left

    def parse_term(self) -> ast.Expr:
        left = self.parse_unary()
        while self.at("punct", "*") or self.at("punct", "/") or self.at("punct", "@"):
            op = self.advance().text
            right = self.parse_unary()
            left = ast.Binary(op, left, right, left.span.to(right.span))
        return left

    def parse_unary(self) -> ast.Expr:
        minuses = []
        while self.at("punct", "-"):
            minuses.append(self.advance())
            if len(minuses) > self.MAX_DEPTH:
                self.sink.error("E0012", self.tok.span,
                                f"more than {self.MAX_DEPTH} unary minus signs in a row")
                raise _Bail()
        e = self.parse_power()
        for minus in reversed(minuses):
            e = ast.Unary("-", e, minus.span.to(e.span))
        return e

    def parse_power(self) -> ast.Expr:
        base = self.parse_postfix()
        if self.accept("punct", "^"):
            exp = self.parse_postfix()
            return ast.Binary("^", base, exp, base.span.to(exp.span))
        return base

    def parse_postfix(self) -> ast.Expr:
        e = self.parse_primary()
        while self.at("punct", "["):
            self.advance()
            idx = [self.parse_index()]
            while self.accept("punct", ","):
                idx.append(self.parse_index())
            close = self.expect("punct", "]", what="`]` or `,`")
            e = ast.Index(e, tuple(idx), e.span.to(close.span))
        return e

    def parse_index(self) -> ast.Expr:
        """One index: an expression, or a slice `lo:hi` (either bound may be left out)."""
        start = self.tok.span
        lo = None if self.at("punct", ":") else self.parse_expr()
        if not self.at("punct", ":"):
            return lo
        colon = self.advance()
        hi = None if self.at("punct", ",") or self.at("punct", "]") else self.parse_expr()
        return ast.Slice(lo, hi, start.to(hi.span if hi is not None else colon.span))

    def parse_comp(self, open_: Token, body: ast.Expr) -> ast.Comp:
        """The rest of `[body for j in lo..hi ...]`, after the body."""
        loops = []
        while self.at("name", "for"):
            self.advance()
            var = self.expect("name", what="the comprehension's variable, as in `for j in 0..4`")
            self.expect("name", "in", what="`in` and a range, as in `for j in 0..4`")
            lo = self.parse_expr()
            self.expect("punct", "..", what="`..` and the range's end, as in `0..4`")
            loops.append((var.text, var.span, lo, self.parse_expr()))
        end = self.expect("punct", "]", what="`]` or `for`")
        return ast.Comp(body, tuple(loops), open_.span.to(end.span))

    def parse_def(self) -> ast.FuncDecl:
        """`def NAME(a, b, ...) = expr`."""
        kw = self.advance()
        name = self.expect("name", what="the function's name after `def`")
        self.expect("punct", "(", what="`(` and the function's parameters")
        params = [self.expect("name", what="a parameter name")]
        while self.accept("punct", ","):
            params.append(self.expect("name", what="a parameter name"))
        self.expect("punct", ")", what="`)` or `,`")
        self.expect("punct", "=", what="`=` and the function's value")
        body = self.parse_expr()
        self.end_of_line()
        return ast.FuncDecl(name.text, name.span, tuple((p.text, p.span) for p in params), body,
                            kw.span.to(body.span))

    def parse_list(self, close: str) -> tuple[list[ast.Expr], Token]:
        items: list[ast.Expr] = []
        if not self.at("punct", close):
            items.append(self.parse_expr())
            while self.accept("punct", ","):
                if self.at("punct", close):
                    break                       # trailing comma
                items.append(self.parse_expr())
        end = self.expect("punct", close, what=f"`{close}` or `,`")
        return items, end

    def parse_primary(self) -> ast.Expr:
        t = self.tok
        if t.kind == "num":
            self.advance()
            return ast.Num(t.value, t.ival, t.text, t.span)
        if t.kind == "str":
            self.advance()
            return ast.Str(t.value, t.span)
        if t.kind == "name" or t.is_("kw", "f64") and self.peek().is_("punct", "("):   # f64(tok[i])
            self.advance()
            if self.at("punct", "("):
                self.advance()
                args, end = self.parse_list(")")
                return ast.Call(t.text, t.span, tuple(args), t.span.to(end.span))
            return ast.Name(t.text, t.span)
        if t.is_("punct", "("):
            self.advance()
            inner = self.parse_expr()
            self.expect("punct", ")", what="`)`")
            return inner
        if t.is_("punct", "["):
            self.advance()
            if not self.at("punct", "]"):
                first = self.parse_expr()
                if self.at("name", "for"):
                    return self.parse_comp(t, first)
                items, end = [first], None
                if self.accept("punct", ","):
                    more, end = self.parse_list("]")
                    items += more
                else:
                    end = self.expect("punct", "]", what="`]`, `,` or `for`")
                return ast.ArrayLit(tuple(items), t.span.to(end.span))
            items, end = self.parse_list("]")
            return ast.ArrayLit(tuple(items), t.span.to(end.span))
        raise self.fail("an expression")


DECL_PARSERS = {
    "data": Parser.parse_data,
    "const": Parser.parse_const,
    "param": Parser.parse_state,
    "state": Parser.parse_state,
    "loss": Parser.parse_loss,
    "predict": Parser.parse_loss,
    "update": Parser.parse_update,
    "batch": Parser.parse_batch,
    "order": Parser.parse_order,
    "contract": Parser.parse_contract,
    "def": Parser.parse_def,
}
