"""Deployment and strategy syntax: how a learner is split across roles.

    deployment lsq_adam_star {
      roles coordinator, owner[4]
      topology star(coordinator)                 # or: hierarchy(fanout 2), mesh(coordinator)
      samples owner[0] = 0..1, owner[1] = 1..3, owner[2] = 3..4, owner[3] = 4..8
      combine ((owner[0], owner[1]), (owner[2], owner[3]))
      deliver all                                # or: deliver owner[0]
      strategy zero2
      partition owner[0] = 0..2, owner[1] = 2..3, owner[2] = 3..4, owner[3] = 4..5
      target owner[0], owner[2] = aarch64       # or x86_64+sm_90: a GPU owner
      gpu owner[0] = "h200.gpuhost"              # a GPU owner's card (docs/nvdrv.md)
      memory owner = 64 KiB, coordinator = 1 MiB
    }

    strategy zero2 {
      partition state, gradients
      replicate params
    }

Requires: the `Parser` of alphac.parse.parser (alphac.parse adds these to its table). Guarantees:
a `DeploymentDecl` or `StrategyDecl` whose items keep their spans; meaning is checked by
`alphac.dist`. `samples even`, `partition even` and `owner[*]` describe fleets without listing
their members.
"""
from __future__ import annotations

from dataclasses import dataclass

from alphac.diag import Span
from alphac.parse.parser import Parser, _Bail
from alphac.parse.lexer import Token


@dataclass(frozen=True)
class RoleRef:
    name: str
    index: int | str | None      # an int, "*" (every member), or None (a singleton role)
    span: Span


@dataclass(frozen=True)
class RoleDecl:
    name: str
    lo: int | None               # owner[4] is 0..4; owner[2..4]; None for a singleton
    hi: int | None
    span: Span


@dataclass(frozen=True)
class IntRange:
    lo: int
    hi: int
    span: Span


@dataclass(frozen=True)
class Item:
    kind: str                    # roles topology samples combine deliver strategy partition
    value: object                #   target memory
    span: Span


@dataclass(frozen=True)
class DeploymentDecl:
    name: str
    name_span: Span
    items: tuple[Item, ...]
    span: Span


@dataclass(frozen=True)
class StrategyDecl:
    name: str
    name_span: Span
    partition: tuple[tuple[str, Span], ...]
    replicate: tuple[tuple[str, Span], ...]
    span: Span


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _int(p: Parser, what: str) -> tuple[int, Span]:
    t = p.expect("num", what=what)
    if t.ival is None:
        p.sink.error("E0101", t.span, f"`{t.text}` is not a whole number")
        raise _Bail()
    return t.ival, t.span


def role_ref(p: Parser) -> RoleRef:
    name = p.expect("name", what="a role")
    if p.accept("punct", "["):
        if p.accept("punct", "*"):
            close = p.expect("punct", "]")
            return RoleRef(name.text, "*", name.span.to(close.span))
        k, _ = _int(p, "an index")
        close = p.expect("punct", "]")
        return RoleRef(name.text, k, name.span.to(close.span))
    return RoleRef(name.text, None, name.span)


def int_range(p: Parser) -> IntRange:
    lo, s = _int(p, "the start of a range `LO..HI`")
    p.expect("punct", "..", what="`..`")
    hi, e = _int(p, "the end of a range")
    return IntRange(lo, hi, s.to(e))


def assignments(p: Parser, value) -> list[tuple[list[RoleRef], object]]:
    """`ref, ref = VALUE, ref = VALUE ...`: refs before each `=` share the value after it."""
    out = []
    refs = [role_ref(p)]
    while True:
        if p.accept("punct", ","):
            refs.append(role_ref(p))
            continue
        p.expect("punct", "=", what="`=` or `,`")
        out.append((refs, value(p)))
        if not p.accept("punct", ","):
            return out
        refs = [role_ref(p)]


def combine_tree(p: Parser, depth: int = 1):
    if p.at("punct", "(") and depth > p.MAX_DEPTH:
        p.sink.error("E0012", p.tok.span, f"combine tree nested more than {p.MAX_DEPTH} levels deep")
        raise _Bail()
    if p.accept("punct", "("):
        kids = [combine_tree(p, depth + 1)]
        while p.accept("punct", ","):
            kids.append(combine_tree(p, depth + 1))
        p.expect("punct", ")", what="`)` or `,`")
        return tuple(kids)
    return role_ref(p)


def memory_size(p: Parser) -> tuple[int, Span]:
    n, span = _int(p, "a size, such as `64 KiB`")
    unit = p.expect("name", what="a unit (B, KiB, MiB, GiB, TiB)")
    if unit.text not in UNITS:
        p.sink.error("E0101", unit.span, f"unknown unit `{unit.text}`", hint="use B, KiB, MiB, GiB or TiB")
        raise _Bail()
    return n * UNITS[unit.text], span.to(unit.span)


def target_name(p: Parser) -> Token:
    """`x86_64`, `aarch64`, a level `x86_64-v3` or `x86_64-v4`, or a GPU target `x86_64+sm_90`
    (`x86_64-v4+sm_90`: its host part at the level): one token of the whole text."""
    isa = p.expect("name", what="a target (x86_64, x86_64-v3, x86_64-v4, aarch64, x86_64+sm_90)")
    if p.accept("punct", "-"):
        level = p.expect("name", what="a target level such as v3")
        isa = Token("name", f"{isa.text}-{level.text}", isa.span.to(level.span))
    if not p.accept("punct", "+"):
        return isa
    gpu = p.expect("name", what="a GPU architecture such as sm_90")
    return Token("name", f"{isa.text}+{gpu.text}", isa.span.to(gpu.span))


def parse_item(p: Parser) -> Item:
    kw = p.advance() if p.at("kw", "strategy") else \
        p.expect("name", what="a deployment item (roles, topology, samples, combine, deliver, "
                              "strategy, partition, target, gpu, memory)")
    k = kw.text
    if k == "roles":
        decls = []
        while True:
            name = p.expect("name", what="a role name")
            lo = hi = None
            end = name.span
            if p.accept("punct", "["):
                a, _ = _int(p, "a count or a range")
                if p.accept("punct", ".."):
                    b, _ = _int(p, "the end of the range")
                    lo, hi = a, b
                else:
                    lo, hi = 0, a
                end = p.expect("punct", "]").span
            decls.append(RoleDecl(name.text, lo, hi, name.span.to(end)))
            if not p.accept("punct", ","):
                break
        return Item(k, tuple(decls), kw.span.to(end))
    if k == "topology":
        shape = p.expect("name", what="`star`, `mesh` or `hierarchy`")
        p.expect("punct", "(")
        if shape.text in ("star", "mesh"):
            value = (shape.text, role_ref(p))
        elif shape.text == "hierarchy":
            f = p.expect("name", what="`fanout`")
            if f.text != "fanout":
                p.sink.error("E0101", f.span, "expected `fanout N`")
                raise _Bail()
            n, _ = _int(p, "the fan-out")
            value = ("hierarchy", n)
        else:
            p.sink.error("E0101", shape.span, f"unknown topology `{shape.text}`",
                         hint="topologies are star(ROLE), mesh(ROLE) and hierarchy(fanout N)")
            raise _Bail()
        close = p.expect("punct", ")")
        return Item(k, value, kw.span.to(close.span))
    if k in ("samples", "partition"):
        if p.at("name", "even"):
            t = p.advance()
            return Item(k, "even", kw.span.to(t.span))
        state = None
        if p.at("name") and p.peek().is_("punct", ":"):
            state = p.advance().text
            p.advance()
        value = assignments(p, int_range)
        return Item(k, (state, value), kw.span.to(p.toks[p.pos - 1].span))
    if k == "combine":
        tree = combine_tree(p)
        return Item(k, tree, kw.span.to(p.toks[p.pos - 1].span))
    if k == "deliver":
        if p.at("name", "all"):
            t = p.advance()
            return Item(k, "all", kw.span.to(t.span))
        ref = role_ref(p)
        return Item(k, ref, kw.span.to(ref.span))
    if k == "strategy":
        name = p.expect("name", what="a strategy name (replicated, zero1, zero2, zero3, or your own)")
        return Item(k, (name.text, name.span), kw.span.to(name.span))
    if k == "target":
        value = assignments(p, target_name)
        return Item(k, value, kw.span.to(p.toks[p.pos - 1].span))
    if k == "gpu":          # each GPU role's host description: a file, relative to the source
        value = assignments(p, lambda q: q.expect("str", what="a GPU host description file, "
                                                             "such as \"h200.gpuhost\""))
        return Item(k, value, kw.span.to(p.toks[p.pos - 1].span))
    if k == "memory":
        value = assignments(p, memory_size)
        return Item(k, value, kw.span.to(p.toks[p.pos - 1].span))
    p.sink.error("E0101", kw.span, f"unknown deployment item `{k}`",
                 hint="items are roles, topology, samples, combine, deliver, strategy, partition, "
                      "target, gpu, memory")
    raise _Bail()


def block_items(p: Parser, parse_one) -> tuple[list, Span]:
    open_ = p.expect("punct", "{", what="`{`")
    items = []
    p.skip_newlines()
    while p.in_block(open_):
        try:
            items.append(parse_one(p))
            if not p.at("punct", "}"):
                p.end_of_line()
        except _Bail:
            p.skip_item()
    return items, p.close_block(open_)


def parse_deployment(p: Parser) -> DeploymentDecl:
    kw = p.advance()
    name = p.expect("name", what="the deployment's name")
    items, span = block_items(p, parse_item)
    return DeploymentDecl(name.text, name.span, tuple(items), kw.span.to(span))


def parse_strategy(p: Parser) -> StrategyDecl:
    kw = p.advance()
    name = p.expect("name", what="the strategy's name")
    parts: dict[str, list] = {"partition": [], "replicate": []}

    def one(q: Parser):
        k = q.expect("name", what="`partition` or `replicate`")
        if k.text not in parts:
            q.sink.error("E0101", k.span, f"`{k.text}` is not a strategy operation",
                         hint="a strategy says what it partitions and what it replicates; "
                              "transfers, combines and versions follow from that")
            raise _Bail()
        while True:
            c = q.advance() if q.at("kw", "state") else q.expect("name", what="params, state or gradients")
            parts[k.text].append((c.text, c.span))
            if not q.accept("punct", ","):
                return None
    _, span = block_items(p, one)
    return StrategyDecl(name.text, name.span, tuple(parts["partition"]), tuple(parts["replicate"]),
                        kw.span.to(span))


