"""The Alpha syntax tree: what the parser builds and the checker reads.

Every node carries the `Span` it came from, so every later diagnostic can point at source.
Nodes are plain frozen dataclasses; the tree holds no semantic information (shapes, folded
values) -- that is `alphac.types`' job.
"""
from __future__ import annotations

from dataclasses import dataclass

from alphac.diag import Span


# -- expressions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Num:
    value: float
    ival: int | None
    text: str
    span: Span


@dataclass(frozen=True)
class Str:
    value: str
    span: Span


@dataclass(frozen=True)
class Name:
    name: str
    span: Span


@dataclass(frozen=True)
class Unary:
    op: str            # "-"
    operand: "Expr"
    span: Span


@dataclass(frozen=True)
class Binary:
    op: str            # "+" "-" "*" "/" "^"
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True)
class Compare:
    """`a OP b`, OP one of < <= > >= == != (docs/language.md): only the condition of `where`."""
    op: str
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True)
class Call:
    func: str
    func_span: Span
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class Index:
    base: "Expr"
    indices: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class ArrayLit:
    items: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class Slice:
    """`lo:hi` as an index (either bound may be left out: the dimension's start or end)."""
    lo: "Expr | None"
    hi: "Expr | None"
    span: Span


@dataclass(frozen=True)
class Comp:
    """`[body for j in lo..hi for k in lo..hi ...]`: body at every point of the ranges, the first
    `for` outermost (docs/language.md, Slices and comprehensions)."""
    body: "Expr"
    loops: tuple[tuple[str, Span, "Expr", "Expr"], ...]
    span: Span


Expr = Num | Str | Name | Unary | Binary | Compare | Call | Index | ArrayLit | Slice | Comp


# -- statements and blocks ----------------------------------------------------------------------
@dataclass(frozen=True)
class Let:
    name: str
    name_span: Span
    value: Expr
    span: Span


@dataclass(frozen=True)
class Assign:
    name: str
    name_span: Span
    value: Expr
    span: Span


@dataclass(frozen=True)
class Block:
    stmts: tuple[Let | Assign, ...]
    result: Expr | None
    span: Span


# -- declarations -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TypeExpr:
    dims: tuple[int, ...]
    span: Span
    elem: str = "f64"      # "f64" | "i64" (integer data: indices and labels, alphac.types)


@dataclass(frozen=True)
class LearnerHeader:
    name: str
    span: Span


@dataclass(frozen=True)
class DataDecl:
    name: str
    name_span: Span
    type: TypeExpr | None
    value: Expr
    span: Span


@dataclass(frozen=True)
class ConstDecl:
    name: str
    name_span: Span
    type: TypeExpr | None
    value: Expr
    span: Span


@dataclass(frozen=True)
class StateDecl:
    kind: str          # "param" | "state"
    name: str
    name_span: Span
    type: TypeExpr
    init: Expr
    span: Span


@dataclass(frozen=True)
class LossDecl:
    index: str
    index_span: Span
    body: Block
    span: Span
    kind: str = "loss"     # "loss" | "predict": the same form, checked alike (alphac.types.check)


@dataclass(frozen=True)
class UpdateDecl:
    body: Block
    span: Span


@dataclass(frozen=True)
class BatchDecl:
    """`batch N`: minibatches of N samples (docs/language.md)."""
    size: Num
    span: Span


@dataclass(frozen=True)
class OrderDecl:
    """`order sequence` or `order shuffle(SEED)`: the samples' order in each epoch."""
    kind: str
    seed: Num | None
    span: Span


@dataclass(frozen=True)
class ContractDecl:
    """`contract ordered` or `contract exact_sum`: the numerical contract (docs/language.md)."""
    name: str
    name_span: Span
    span: Span


@dataclass(frozen=True)
class FuncDecl:
    """`def NAME(a, b, ...) = expr`: a function, expanded where it is called (alphac.types)."""
    name: str
    name_span: Span
    params: tuple[tuple[str, Span], ...]
    body: Expr
    span: Span


@dataclass(frozen=True)
class Module:
    header: LearnerHeader | None
    decls: tuple[object, ...]
    span: Span
